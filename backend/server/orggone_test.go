package server_test

import (
	"context"
	"net/http"
	"testing"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/gen/parley/v1/parleyv1connect"
	"github.com/parleyhq/parley/backend/testenv"
)

// deleteOrg deletes an organization as an operator would, in SQL (its rows
// go with it).
func deleteOrg(t *testing.T, e *testenv.Env, org uuid.UUID) {
	t.Helper()
	ctx := context.Background()
	tx, err := e.App.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	_, err = tx.Exec(ctx, "SELECT set_config('app.org_id', $1, true)", org.String())
	require.NoError(t, err)
	tag, err := tx.Exec(ctx, "DELETE FROM organizations WHERE id = $1", org)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
	require.NoError(t, tx.Commit(ctx))
}

// A deleted organization's key, still in the authentication cache, is 401
// on its next write (REST and Connect), never a 500 from the broken foreign
// key; from then on this instance refuses it at once, reads included.
func TestDeletedOrganizationsKeyIsUnauthorized(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	// Both keys are cached by a first request.
	require.Equal(t, http.StatusOK, e.Do("GET", "/api/agents", e.A.Key, nil).Status)
	agents := parleyv1connect.NewAgentServiceClient(http.DefaultClient, e.URL, connect.WithInterceptors(testenv.Bearer(e.B.Key)))
	_, err := agents.ListAgents(context.Background(), &parleyv1.ListAgentsRequest{})
	require.NoError(t, err)

	deleteOrg(t, e, e.A.ID)
	r := e.Do("POST", "/api/agents", e.A.Key, `{"name":"n","instructions":"i"}`)
	require.Equal(t, http.StatusUnauthorized, r.Status, "%s", r.Body)
	eb := r.Err(t)
	require.Equal(t, "UNAUTHORIZED", eb.Error.Code)
	require.Contains(t, eb.Error.Message, "organization no longer exists", "the write, not the key lookup, refused it")
	r = e.Do("GET", "/api/agents", e.A.Key, nil)
	require.Equal(t, http.StatusUnauthorized, r.Status, "the cached key was dropped: %s", r.Body)
	require.Equal(t, "invalid API key", r.Err(t).Error.Message)

	deleteOrg(t, e, e.B.ID)
	_, err = agents.CreateAgent(context.Background(), &parleyv1.CreateAgentRequest{Name: "n", Instructions: "i"})
	require.Equal(t, connect.CodeUnauthenticated, connect.CodeOf(err), "%v", err)
	_, err = agents.ListAgents(context.Background(), &parleyv1.ListAgentsRequest{})
	require.Equal(t, connect.CodeUnauthenticated, connect.CodeOf(err), "%v", err)
}

// The calls that read or lock the organization's own row first answer the
// same 401 (they were 500: no rows): a key's creation or revocation, the
// organization's read, a webhook endpoint's creation.
func TestDeletedOrganizationsRowIsUnauthorized(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for name, call := range map[string]func(key string, e *testenv.Env) error{
		"CreateApiKey": func(key string, e *testenv.Env) error {
			_, err := parleyv1connect.NewApiKeyServiceClient(http.DefaultClient, e.URL, connect.WithInterceptors(testenv.Bearer(key))).
				CreateApiKey(ctx, &parleyv1.CreateApiKeyRequest{Name: "n", Scopes: []string{"chat"}})
			return err
		},
		"RevokeApiKey": func(key string, e *testenv.Env) error {
			_, err := parleyv1connect.NewApiKeyServiceClient(http.DefaultClient, e.URL, connect.WithInterceptors(testenv.Bearer(key))).
				RevokeApiKey(ctx, &parleyv1.RevokeApiKeyRequest{Id: uuid.NewString()})
			return err
		},
		"GetOrganization": func(key string, e *testenv.Env) error {
			_, err := parleyv1connect.NewOrganizationServiceClient(http.DefaultClient, e.URL, connect.WithInterceptors(testenv.Bearer(key))).
				GetOrganization(ctx, &parleyv1.GetOrganizationRequest{})
			return err
		},
		"CreateWebhook": func(key string, e *testenv.Env) error {
			_, err := parleyv1connect.NewWebhookServiceClient(http.DefaultClient, e.URL, connect.WithInterceptors(testenv.Bearer(key))).
				CreateWebhook(ctx, &parleyv1.CreateWebhookRequest{Url: "https://example.com/hook", Events: []string{"form.submitted"}})
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := testenv.New(t)
			require.Equal(t, http.StatusOK, e.Do("GET", "/api/agents", e.A.Key, nil).Status) // cached
			deleteOrg(t, e, e.A.ID)
			err := call(e.A.Key, e)
			require.Equal(t, connect.CodeUnauthenticated, connect.CodeOf(err), "%v", err)
			require.Contains(t, err.Error(), "organization no longer exists")
		})
	}
}
