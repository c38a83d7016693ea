package contact_test

import (
	"context"
	"math"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/structpb"

	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/gen/parley/v1/parleyv1connect"
	"github.com/parleyhq/parley/backend/testenv"
)

// A contact's custom fields are held to 32 KiB as Postgres prints them
// (contacts_custom_fields_size), where a number is written out in full:
// 1e308, 6 bytes in a request, is 309 digits there. 2,000 of them pass the
// 16 KiB a request may send (14 KB) and make 620 KB as stored. A new
// contact's insert was refused by the constraint unmapped, a 500 over REST
// and Connect, for a keyed caller and a public agent's visitor alike; it is
// a 400 naming contact.customFields, as a merge past the bound is, and
// nothing of the turn is stored. Within the bounds, such numbers are kept.
func TestCustomFieldsBoundedAsStored(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	ctx := context.Background()
	r := e.Do("POST", "/api/agents", e.A.Key, map[string]any{"name": "Support", "instructions": "Help.", "visibility": "public"})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var a struct{ ID string }
	r.JSON(t, &a)
	chat := parleyv1connect.NewChatServiceClient(http.DefaultClient, e.URL, connect.WithInterceptors(testenv.Bearer(e.A.Key)))
	convs := parleyv1connect.NewConversationServiceClient(http.DefaultClient, e.URL, connect.WithInterceptors(testenv.Bearer(e.A.Key)))

	numbers := func(n int) string { return "[" + strings.TrimSuffix(strings.Repeat("1e308,", n), ",") + "]" }
	numbersPB := func(n int) *structpb.Struct {
		vals := make([]*structpb.Value, n)
		for i := range vals {
			vals[i] = structpb.NewNumberValue(1e308)
		}
		return &structpb.Struct{Fields: map[string]*structpb.Value{"k": structpb.NewListValue(&structpb.ListValue{Values: vals})}}
	}
	// Stored before: what a refused request must leave as it was.
	r = e.Do("POST", "/api/v2/agent/"+a.ID+"/chat", e.A.Key,
		`{"query":"hi","conversationId":"keep","contact":{"email":"kept@example.com","customFields":{"plan":"pro"}}}`)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)

	for _, c := range []struct {
		name  string
		rest  bool
		key   string // "" for a public agent's visitor
		email string
		n     int // numbers of 1e308 sent
		ok    bool
	}{
		{"REST, keyed, new contact, within", true, e.A.Key, "within@example.com", 50, true},
		{"REST, keyed, new contact, past", true, e.A.Key, "new1@example.com", 2000, false},
		{"REST, visitor, new contact, past", true, "", "new2@example.com", 2000, false},
		{"REST, keyed, stored contact, past", true, e.A.Key, "kept@example.com", 2000, false},
		{"Connect, keyed, new contact, within", false, e.A.Key, "within2@example.com", 50, true},
		{"Connect, keyed, new contact, past", false, e.A.Key, "new3@example.com", 2000, false},
		{"Connect, keyed, stored contact, past", false, e.A.Key, "kept@example.com", 2000, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			conv := "c-" + strings.ReplaceAll(c.email, "@", "-")
			if c.rest {
				body := `{"query":"hi","conversationId":"` + conv + `","visitorId":"v1","contact":{"email":"` + c.email + `","customFields":{"k":` + numbers(c.n) + `}}}`
				r := e.Do("POST", "/api/v2/agent/"+a.ID+"/chat", c.key, body)
				if c.ok {
					require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
				} else {
					require.Equal(t, http.StatusBadRequest, r.Status, "%s", r.Body)
					require.Equal(t, "contact.customFields", r.Err(t).Error.Field, "%s", r.Body)
				}
			} else {
				_, err := chat.Chat(ctx, &parleyv1.ChatRequest{AgentId: a.ID, Query: "hi", ConversationId: conv,
					Contact: &parleyv1.Contact{Email: c.email, CustomFields: numbersPB(c.n)}})
				if c.ok {
					require.NoError(t, err)
				} else {
					require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err), "%v", err)
					require.Contains(t, err.Error(), "contact.customFields")
				}
			}
			// A refused turn stored nothing: no conversation, no contact.
			_, err := convs.GetConversation(ctx, &parleyv1.GetConversationRequest{ConversationId: conv})
			if c.ok {
				require.NoError(t, err)
			} else {
				require.Equal(t, connect.CodeNotFound, connect.CodeOf(err), "%v", err)
			}
			list := e.Do("GET", "/api/contacts?email="+c.email, e.A.Key, nil)
			require.Equal(t, http.StatusOK, list.Status, "%s", list.Body)
			var p pageJSON
			list.JSON(t, &p)
			switch {
			case c.email == "kept@example.com":
				require.Len(t, p.Contacts, 1)
				require.Equal(t, map[string]any{"plan": "pro"}, p.Contacts[0].CustomFields, "the stored contact is unchanged")
			case c.ok:
				require.Len(t, p.Contacts, 1)
				k := p.Contacts[0].CustomFields["k"].([]any)
				require.Len(t, k, c.n)
				require.InDelta(t, 1e308, k[0].(float64), math.Abs(1e308)*1e-15)
			default:
				require.Empty(t, p.Contacts, "no contact was made")
			}
		})
	}
}
