package contact_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"testing"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/db/dbq"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/gen/parley/v1/parleyv1connect"
	"github.com/parleyhq/parley/backend/testenv"
)

type contactJSON struct {
	ID, Email, PhoneNumber, FirstName, LastName, Notes string
	CustomFields                                       map[string]any
	ConversationIDs                                    []string `json:"conversationIds"`
	CreatedAt                                          string
}

type pageJSON struct {
	Contacts   []contactJSON
	NextCursor *string
}

// chatAs sends one message with a contact to a new agent of the key's
// organization, in conversation conv (the offline engine answers).
func chatAs(t *testing.T, e *testenv.Env, key, agent, conv string, c map[string]any) {
	t.Helper()
	r := e.Do("POST", "/api/v2/agent/"+agent+"/chat", key, map[string]any{"query": "hello", "conversationId": conv, "contact": c})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
}

func newAgent(t *testing.T, e *testenv.Env, key string) string {
	t.Helper()
	r := e.Do("POST", "/api/agents", key, map[string]any{"name": "Support", "instructions": "Help."})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var a struct{ ID string }
	r.JSON(t, &a)
	return a.ID
}

// The contacts a chat request's contact field feeds are listed newest
// first, filtered, paged by cursor, each with its conversations; over REST
// and Connect alike, and only the organization's own.
func TestContactsAPI(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	agentA, agentB := newAgent(t, e, e.A.Key), newAgent(t, e, e.B.Key)
	chatAs(t, e, e.A.Key, agentA, "c1", map[string]any{"email": "Ada@Example.com", "firstName": "Ada", "lastName": "Lovelace",
		"phoneNumber": "+33612345678", "customFields": map[string]any{"plan": "pro"}})
	// Written as people write it, kept in E.164.
	chatAs(t, e, e.A.Key, agentA, "c2", map[string]any{"phoneNumber": "+49 (151) 1234-5678", "firstName": "Bob"})
	chatAs(t, e, e.A.Key, agentA, "c3", map[string]any{"email": "carol_1@example.org"})
	chatAs(t, e, e.A.Key, agentA, "c4", map[string]any{"email": "ada@example.com"})
	chatAs(t, e, e.B.Key, agentB, "c1", map[string]any{"email": "ada@example.com", "firstName": "Other Ada"})

	list := func(key string, query url.Values) pageJSON {
		t.Helper()
		r := e.Do("GET", "/api/contacts?"+query.Encode(), key, nil)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		var p pageJSON
		r.JSON(t, &p)
		return p
	}
	emails := func(p pageJSON) []string {
		var out []string
		for _, c := range p.Contacts {
			out = append(out, c.Email+c.PhoneNumber)
		}
		return out
	}

	all := list(e.A.Key, nil)
	require.Equal(t, []string{"carol_1@example.org", "+4915112345678", "ada@example.com+33612345678"}, emails(all), "newest first")
	require.Nil(t, all.NextCursor)
	ada := all.Contacts[2]
	require.Equal(t, "Ada", ada.FirstName)
	require.Equal(t, "Lovelace", ada.LastName)
	require.Equal(t, map[string]any{"plan": "pro"}, ada.CustomFields)
	require.Empty(t, all.Contacts[1].Email, "a phone-only contact has no email")

	// Pages of two: the cursor leads on, and the last page says so.
	p1 := list(e.A.Key, url.Values{"limit": {"2"}})
	require.Equal(t, emails(all)[:2], emails(p1))
	require.NotNil(t, p1.NextCursor)
	p2 := list(e.A.Key, url.Values{"limit": {"2"}, "cursor": {*p1.NextCursor}})
	require.Equal(t, emails(all)[2:], emails(p2))
	require.Nil(t, p2.NextCursor)

	// Filters.
	for _, c := range []struct {
		query url.Values
		want  []string
	}{
		{url.Values{"email": {"ADA@example.com"}}, []string{"ada@example.com+33612345678"}},
		{url.Values{"email": {"ada@example"}}, nil},
		{url.Values{"q": {"lovelace"}}, []string{"ada@example.com+33612345678"}},
		{url.Values{"q": {"ada love"}}, []string{"ada@example.com+33612345678"}},
		{url.Values{"q": {"4915"}}, []string{"+4915112345678"}},
		{url.Values{"q": {"EXAMPLE.org"}}, []string{"carol_1@example.org"}},
		{url.Values{"q": {"l_1"}}, []string{"carol_1@example.org"}},
		{url.Values{"q": {"a_a"}}, nil}, // _ is itself, not any character
		{url.Values{"q": {"%"}}, nil},
		{url.Values{"q": {"example"}, "email": {"ada@example.com"}}, []string{"ada@example.com+33612345678"}},
	} {
		require.Equal(t, c.want, emails(list(e.A.Key, c.query)), "%v", c.query)
	}

	// One contact, with its conversations, newest first.
	r := e.Do("GET", "/api/contacts/"+ada.ID, e.A.Key, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var got contactJSON
	r.JSON(t, &got)
	require.Equal(t, ada.ID, got.ID)
	require.Equal(t, []string{"c4", "c1"}, got.ConversationIDs)
	r = e.Do("GET", "/contacts/"+ada.ID, e.A.Key, nil)
	require.Equal(t, http.StatusOK, r.Status, "served without /api too")

	// Bad input names its field.
	for _, q := range []string{"limit=0", "limit=51", "limit=x", "cursor=nope", "cursor=123_notauuid", "cursor=-300000000000000000_" + ada.ID} {
		r := e.Do("GET", "/api/contacts?"+q, e.A.Key, nil)
		require.Equal(t, http.StatusBadRequest, r.Status, q)
		want := "limit"
		if q[0] == 'c' {
			want = "cursor"
		}
		require.Equal(t, want, r.Err(t).Error.Field, q)
	}
	require.Equal(t, http.StatusUnauthorized, e.Do("GET", "/api/contacts", "", nil).Status)

	// SECURITY: B sees its own contact only; A's id is another
	// organization's (403, as everywhere in the API), an unknown id 404.
	bList := list(e.B.Key, nil)
	require.Equal(t, []string{"ada@example.com"}, emails(bList))
	require.Equal(t, "Other Ada", bList.Contacts[0].FirstName)
	r = e.Do("GET", "/api/contacts/"+ada.ID, e.B.Key, nil)
	require.Equal(t, http.StatusForbidden, r.Status, "%s", r.Body)
	require.NotContains(t, string(r.Body), "Lovelace")
	require.Equal(t, http.StatusNotFound, e.Do("GET", "/api/contacts/"+uuid.NewString(), e.A.Key, nil).Status)
	require.Equal(t, http.StatusNotFound, e.Do("GET", "/api/contacts/not-an-id", e.A.Key, nil).Status)
	r = e.Do("GET", "/api/contacts/"+bList.Contacts[0].ID, e.B.Key, nil)
	require.Equal(t, http.StatusOK, r.Status)
	r.JSON(t, &got)
	require.Equal(t, []string{"c1"}, got.ConversationIDs, "B's own conversation c1, not A's")

	// Connect: the same service.
	ctx := context.Background()
	client := func(key string) parleyv1connect.ContactServiceClient {
		return parleyv1connect.NewContactServiceClient(http.DefaultClient, e.URL, connect.WithInterceptors(testenv.Bearer(key)))
	}
	lr, err := client(e.A.Key).ListContacts(ctx, &parleyv1.ListContactsRequest{Q: "lovelace"})
	require.NoError(t, err)
	require.Len(t, lr.GetContacts(), 1)
	require.Equal(t, ada.ID, lr.GetContacts()[0].GetId())
	require.Equal(t, "+33612345678", lr.GetContacts()[0].GetPhoneNumber())
	lr, err = client(e.A.Key).ListContacts(ctx, &parleyv1.ListContactsRequest{Limit: 1})
	require.NoError(t, err)
	require.Len(t, lr.GetContacts(), 1)
	lr, err = client(e.A.Key).ListContacts(ctx, &parleyv1.ListContactsRequest{Limit: 5, Cursor: lr.GetNextCursor()})
	require.NoError(t, err)
	require.Len(t, lr.GetContacts(), 2)
	require.Empty(t, lr.GetNextCursor())
	gr, err := client(e.A.Key).GetContact(ctx, &parleyv1.GetContactRequest{Id: ada.ID})
	require.NoError(t, err)
	require.Equal(t, []string{"c4", "c1"}, gr.GetConversationIds())
	for _, c := range []struct {
		key  string
		call func(parleyv1connect.ContactServiceClient) error
		want connect.Code
	}{
		{e.B.Key, func(c parleyv1connect.ContactServiceClient) error {
			_, err := c.GetContact(ctx, &parleyv1.GetContactRequest{Id: ada.ID})
			return err
		}, connect.CodePermissionDenied},
		{e.A.Key, func(c parleyv1connect.ContactServiceClient) error {
			_, err := c.GetContact(ctx, &parleyv1.GetContactRequest{Id: uuid.NewString()})
			return err
		}, connect.CodeNotFound},
		{e.A.Key, func(c parleyv1connect.ContactServiceClient) error {
			_, err := c.ListContacts(ctx, &parleyv1.ListContactsRequest{Limit: 51})
			return err
		}, connect.CodeInvalidArgument},
		{"", func(c parleyv1connect.ContactServiceClient) error {
			_, err := c.ListContacts(ctx, &parleyv1.ListContactsRequest{})
			return err
		}, connect.CodeUnauthenticated},
	} {
		var ce *connect.Error
		require.True(t, errors.As(c.call(client(c.key)), &ce))
		require.Equal(t, c.want, ce.Code(), ce.Message())
	}
}

// A contact is deleted by its organization's admin key, over REST and
// Connect: it is gone, its conversations stay without it, and the same
// details make a new contact. Another organization's contact is 403 and
// stays; a chat key may not delete.
func TestDeleteContact(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	agent := newAgent(t, e, e.A.Key)
	chatAs(t, e, e.A.Key, agent, "d1", map[string]any{"email": "erase@example.com", "firstName": "Erin"})
	chatAs(t, e, e.A.Key, agent, "d2", map[string]any{"email": "keep@example.com"})
	byEmail := func(key, email string) []contactJSON {
		r := e.Do("GET", "/api/contacts?email="+url.QueryEscape(email), key, nil)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		var p pageJSON
		r.JSON(t, &p)
		return p.Contacts
	}
	erin := byEmail(e.A.Key, "erase@example.com")[0]
	keep := byEmail(e.A.Key, "keep@example.com")[0]

	// Refused: another organization's (403), a chat key (403), unknown (404).
	r := e.Do("DELETE", "/api/contacts/"+erin.ID, e.B.Key, nil)
	require.Equal(t, http.StatusForbidden, r.Status, "%s", r.Body)
	keys := parleyv1connect.NewApiKeyServiceClient(http.DefaultClient, e.URL, connect.WithInterceptors(testenv.Bearer(e.A.Key)))
	chatKey, err := keys.CreateApiKey(context.Background(), &parleyv1.CreateApiKeyRequest{Name: "widget", Scopes: []string{"chat"}})
	require.NoError(t, err)
	require.Equal(t, http.StatusForbidden, e.Do("DELETE", "/api/contacts/"+erin.ID, chatKey.GetSecret(), nil).Status)
	require.Equal(t, http.StatusNotFound, e.Do("DELETE", "/api/contacts/"+uuid.NewString(), e.A.Key, nil).Status)
	require.Equal(t, http.StatusNotFound, e.Do("DELETE", "/api/contacts/not-an-id", e.A.Key, nil).Status)
	require.Len(t, byEmail(e.A.Key, "erase@example.com"), 1, "a refused delete deleted")

	r = e.Do("DELETE", "/api/contacts/"+erin.ID, e.A.Key, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	require.JSONEq(t, `{"id":"`+erin.ID+`","deleted":true}`, string(r.Body))
	require.Empty(t, byEmail(e.A.Key, "erase@example.com"))
	require.Equal(t, http.StatusNotFound, e.Do("GET", "/api/contacts/"+erin.ID, e.A.Key, nil).Status)
	require.Equal(t, http.StatusNotFound, e.Do("DELETE", "/api/contacts/"+erin.ID, e.A.Key, nil).Status, "deleted once")
	require.Len(t, byEmail(e.A.Key, "keep@example.com"), 1, "only that contact")

	// Its conversation stays, without it.
	r = e.Do("GET", "/api/v2/conversations/d1", e.A.Key, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var conv struct {
		Contact  *contactJSON
		Messages []struct{ Text string }
	}
	r.JSON(t, &conv)
	require.Nil(t, conv.Contact)
	require.Len(t, conv.Messages, 2)

	// Over Connect; the same details later make a new contact.
	contacts := parleyv1connect.NewContactServiceClient(http.DefaultClient, e.URL, connect.WithInterceptors(testenv.Bearer(e.A.Key)))
	_, err = contacts.DeleteContact(context.Background(), &parleyv1.DeleteContactRequest{Id: keep.ID})
	require.NoError(t, err)
	_, err = contacts.GetContact(context.Background(), &parleyv1.GetContactRequest{Id: keep.ID})
	require.Equal(t, connect.CodeNotFound, connect.CodeOf(err))
	chatAs(t, e, e.A.Key, agent, "d3", map[string]any{"email": "erase@example.com"})
	again := byEmail(e.A.Key, "erase@example.com")
	require.Len(t, again, 1)
	require.NotEqual(t, erin.ID, again[0].ID)
}

// A contact that lead_capture recorded is deleted: the conversations it was
// linked to keep their messages, but the tool calls that recorded it no
// longer hold its details (the arguments, the result naming them), in the
// history as every reader gets it. Another contact's call is untouched.
func TestDeleteContactForgetsLeadCapture(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	r := e.Do("POST", "/api/agents", e.A.Key, map[string]any{"name": "Sales", "instructions": "Help.", "tools": []string{"lead_capture"}})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var ag struct{ ID string }
	r.JSON(t, &ag)
	say := func(conv, query string) {
		t.Helper()
		r := e.Do("POST", "/api/v2/agent/"+ag.ID+"/chat", e.A.Key, map[string]any{"query": query, "conversationId": conv})
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	}
	say("lead1", "Hi, my name is Erin Gone, reach me at erin.gone@example.com or +33612345678")
	say("lead1", "Thanks")
	say("lead2", "my name is Kim Kept, kim.kept@example.com")
	type call struct{ Name, Arguments, Result, Status string }
	calls := func(conv string) []call {
		t.Helper()
		r := e.Do("GET", "/api/v2/conversations/"+conv, e.A.Key, nil)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		var c struct {
			Messages []struct{ ToolCalls []call }
		}
		r.JSON(t, &c)
		var out []call
		for _, m := range c.Messages {
			out = append(out, m.ToolCalls...)
		}
		return out
	}
	before := calls("lead1")
	require.Len(t, before, 1)
	require.Contains(t, before[0].Arguments, "erin.gone@example.com")
	require.Contains(t, before[0].Result, "erin.gone@example.com")

	r = e.Do("GET", "/api/contacts?email=erin.gone@example.com", e.A.Key, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var p pageJSON
	r.JSON(t, &p)
	require.Len(t, p.Contacts, 1)
	r = e.Do("DELETE", "/api/contacts/"+p.Contacts[0].ID, e.A.Key, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)

	after := calls("lead1")
	require.Len(t, after, 1, "the call stays, as a call")
	require.Equal(t, "lead_capture", after[0].Name)
	require.Equal(t, before[0].Status, after[0].Status)
	for _, s := range []string{"erin", "Erin", "Gone", "612345678"} {
		require.NotContains(t, after[0].Arguments+after[0].Result, s, "the deleted contact's details")
	}
	kept := calls("lead2")
	require.Len(t, kept, 1)
	require.Contains(t, kept[0].Arguments, "kim.kept@example.com", "another contact's call")
	require.Contains(t, kept[0].Result, "kim.kept@example.com")
}

// A visitor of an agent on the offline engine gives an email address and a
// national phone number: the address is recorded (lead_capture refused the
// number, and with it the whole call), and the name is the one given.
func TestOfflineLeadCaptureKeepsEmailBesideNationalNumber(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	r := e.Do("POST", "/api/agents", e.A.Key, map[string]any{"name": "Sales", "instructions": "Help.", "tools": []string{"lead_capture"}})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var ag struct{ ID string }
	r.JSON(t, &ag)
	r = e.Do("POST", "/api/v2/agent/"+ag.ID+"/chat", e.A.Key, map[string]any{
		"query": "My name is Nina and my email is nina.nat@example.com, phone 06 12 34 56 78", "conversationId": "natl1",
	})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var rep struct{ Answer string }
	r.JSON(t, &rep)
	require.Contains(t, rep.Answer, "I have noted your contact details")

	r = e.Do("GET", "/api/contacts?email=nina.nat@example.com", e.A.Key, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var p pageJSON
	r.JSON(t, &p)
	require.Len(t, p.Contacts, 1, "the email address given is recorded")
	require.Equal(t, "Nina", p.Contacts[0].FirstName)
	require.Empty(t, p.Contacts[0].LastName, `"and" is no last name`)
}

// A deleted contact leaves the webhook deliveries that carried it, whose
// bodies are kept for retries and replays until --webhook-retention ends:
// its lead.created delivery goes (never sent, listed or replayed again),
// and its conversation's conversation.created delivery loses it, as the
// conversation does. Another contact's stay as they were.
func TestDeleteContactLeavesItsWebhookDeliveries(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	ctx := context.Background()
	r := e.Do("POST", "/api/webhooks", e.A.Key, map[string]any{
		"url": "https://203.0.113.7/hook", "events": []string{"lead.created", "conversation.created"},
	})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var hook struct{ ID string }
	r.JSON(t, &hook)
	agent := newAgent(t, e, e.A.Key)
	chatAs(t, e, e.A.Key, agent, "lead-gone", map[string]any{"email": "gone@example.com", "firstName": "Gwendolyn", "phoneNumber": "+33612345678"})
	chatAs(t, e, e.A.Key, agent, "lead-kept", map[string]any{"email": "kept@example.com"})
	type delivery struct{ ID, EventType string }
	deliveries := func() map[string]string {
		t.Helper()
		r := e.Do("GET", "/api/webhooks/"+hook.ID+"/deliveries", e.A.Key, nil)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		var p struct{ Deliveries []delivery }
		r.JSON(t, &p)
		out := map[string]string{}
		for _, d := range p.Deliveries {
			out[d.ID] = d.EventType
		}
		return out
	}
	// bodies are the bodies of the deliveries holding text, by id.
	bodies := func(text string) map[string]string {
		t.Helper()
		out := map[string]string{}
		require.NoError(t, e.App.Store.TenantTx(ctx, e.A.ID, func(tx pgx.Tx, _ *dbq.Queries) error {
			rows, err := tx.Query(ctx, `SELECT id::text, convert_from(body, 'UTF8') FROM webhook_deliveries
				WHERE org_id = $1 AND position($2 in convert_from(body, 'UTF8')) > 0`, e.A.ID, text)
			if err != nil {
				return err
			}
			for rows.Next() {
				var id, body string
				if err := rows.Scan(&id, &body); err != nil {
					return err
				}
				out[id] = body
			}
			return rows.Err()
		}))
		return out
	}
	before := deliveries()
	require.Len(t, before, 4)
	gone, kept := bodies("gone@example.com"), bodies("kept@example.com")
	require.Len(t, gone, 2, "its lead.created and conversation.created deliveries")
	require.Len(t, kept, 2)
	var lead, conv string
	for id := range gone {
		switch before[id] {
		case "lead.created":
			lead = id
		case "conversation.created":
			conv = id
		}
	}
	require.NotEmpty(t, lead)
	require.NotEmpty(t, conv)
	r = e.Do("GET", "/api/contacts?email=gone@example.com", e.A.Key, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var p pageJSON
	r.JSON(t, &p)
	require.Len(t, p.Contacts, 1)

	r = e.Do("DELETE", "/api/contacts/"+p.Contacts[0].ID, e.A.Key, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)

	after := deliveries()
	require.Len(t, after, 3, "its lead.created delivery is gone")
	require.NotContains(t, after, lead)
	require.Contains(t, after, conv, "its conversation's delivery stays")
	for _, s := range []string{"gone@example.com", "Gwendolyn", "612345678", p.Contacts[0].ID} {
		require.Empty(t, bodies(s), "a delivery still holds the deleted contact's %q", s)
	}
	require.Equal(t, kept, bodies("kept@example.com"), "another contact's deliveries are untouched")
	r = e.Do("POST", "/api/webhooks/"+hook.ID+"/deliveries/"+lead+"/replay", e.A.Key, nil)
	require.Equal(t, http.StatusNotFound, r.Status, "a replay sends the deleted contact's details again: %s", r.Body)
	// What the conversation's delivery now sends is its summary without a
	// contact, as the conversation reads.
	var body struct {
		Type string
		Data map[string]any
	}
	require.NoError(t, e.App.Store.TenantTx(ctx, e.A.ID, func(tx pgx.Tx, _ *dbq.Queries) error {
		var raw []byte
		if err := tx.QueryRow(ctx, `SELECT body FROM webhook_deliveries WHERE org_id = $1 AND id = $2`, e.A.ID, conv).Scan(&raw); err != nil {
			return err
		}
		return json.Unmarshal(raw, &body)
	}))
	require.Equal(t, "conversation.created", body.Type)
	require.Equal(t, "lead-gone", body.Data["id"])
	require.Nil(t, body.Data["contact"])
	require.Equal(t, "", body.Data["contactId"])
}
