package conversation_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/gen/parley/v1/parleyv1connect"
	"github.com/parleyhq/parley/backend/handoff"
	"github.com/parleyhq/parley/backend/testenv"
)

// A key's name is free text, and it signs the key's replies and status
// changes. A key named "agent" must not pass for the agent's model
// (handoff.ByAgent: the console shows "by the agent", a webhook's
// statusChangedBy says the model handed over), nor one named like an email
// for the member of that email, whose replies are signed so, nor one
// named "API key <id>" for the unnamed key of that id.
func TestKeyNamesDoNotPassForAnotherAuthor(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	keys := parleyv1connect.NewApiKeyServiceClient(http.DefaultClient, f.URL, connect.WithInterceptors(testenv.Bearer(f.A.Key)))
	for i, name := range []string{handoff.ByAgent, " Agent ", "owner@example.com", "API key 0193a1b2-7c4d-7e5f-8a6b-9c0d1e2f3a4b", "api key 7"} {
		k, err := keys.CreateApiKey(ctx, &parleyv1.CreateApiKeyRequest{Name: name, Scopes: []string{"admin"}})
		require.NoError(t, err)
		conv := fmt.Sprintf("named-%d", i)
		f.chat(t, f.public, "", conv, "ada", "Hello")

		r := f.Do("POST", "/api/v2/conversations/"+conv+"/messages", k.GetSecret(), `{"text":"A person here."}`)
		require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
		var posted struct {
			message
			Conversation summary
		}
		r.JSON(t, &posted)
		require.Equal(t, "API key "+name, posted.Author, "the reply")
		require.Equal(t, "API key "+name, posted.Conversation.StatusChangedBy, "the take-over")

		r = f.Do("PUT", "/api/v2/conversations/"+conv, k.GetSecret(), `{"status":"resolved"}`)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		var s summary
		r.JSON(t, &s)
		require.Equal(t, "API key "+name, s.StatusChangedBy, "the resolution")
	}
}
