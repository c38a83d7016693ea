package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/dbtest"
	"github.com/parleyhq/parley/backend/seal"
	"github.com/parleyhq/parley/backend/server"
	"github.com/parleyhq/parley/backend/testenv"
	"github.com/parleyhq/parley/backend/tool"
)

// The secrets key is rotated as docs/operations.md says: every sealed
// value of every organization (webhook signing secrets, an agent's
// http_request header values) sealed under the old key is sealed again
// under the new one by `parley admin reseal` given both, a value that
// opens under neither is named and left as it is (the command fails), a
// second run finds everything current, and then the new key alone opens
// everything: an instance with it signs a delivery with the endpoint's
// original secret.
func TestResealRotatesTheSecretsKey(t *testing.T) {
	t.Parallel()
	const newKey = "AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI="
	ctx := context.Background()
	loopback := func(c *server.Config) { c.FetchAllow = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")} }
	var mu sync.Mutex
	var got []*http.Request
	var bodies [][]byte
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got, bodies = append(got, r), append(bodies, b)
		mu.Unlock()
	}))
	t.Cleanup(rcv.Close)

	// Under the old key (testenv.TestSecretsKey): an endpoint in each of
	// two organizations, an agent with two header values, and an endpoint
	// whose secret was sealed under a key nobody configures.
	old := testenv.New(t, loopback)
	hook := func(key string) (id, secret string) {
		r := old.Do("POST", "/api/webhooks", key, map[string]any{"url": rcv.URL + "/in", "events": []string{"lead.created"}})
		require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
		var h struct{ ID, Secret string }
		r.JSON(t, &h)
		return h.ID, h.Secret
	}
	hookA, secretA := hook(old.A.Key)
	hookB, _ := hook(old.B.Key)
	lost, _ := hook(old.B.Key)
	r := old.Do("POST", "/api/agents", old.A.Key, map[string]any{
		"name": "crm", "instructions": "i", "tools": []string{"http_request"},
		"toolSettings": map[string]any{"http_request": map[string]any{"endpoints": []any{map[string]any{
			"name": "crm", "url": rcv.URL + "/crm", "headers": map[string]string{"Authorization": "Bearer tok-1", "X-Api-Key": "key-2"},
		}}}},
	})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	stranger, err := seal.New(bytes.Repeat([]byte{9}, 32))
	require.NoError(t, err)
	strangerSealed, err := stranger.Seal([]byte("a key sealed elsewhere"), []byte("anything"))
	require.NoError(t, err)
	secretOf := func(org uuid.UUID, id string) (s []byte) {
		require.NoError(t, old.App.Store.Tenant(ctx, org, func(q *dbq.Queries) error {
			w, err := q.GetWebhook(ctx, dbq.GetWebhookParams{OrgID: org, ID: uuid.MustParse(id)})
			s = w.Secret
			return err
		}))
		return s
	}
	require.NoError(t, old.App.Store.Tenant(ctx, old.B.ID, func(q *dbq.Queries) error {
		_, err := q.SetWebhookSecret(ctx, dbq.SetWebhookSecretParams{OrgID: old.B.ID, ID: uuid.MustParse(lost), Secret: strangerSealed})
		return err
	}))
	before, beforeB := secretOf(old.A.ID, hookA), secretOf(old.B.ID, hookB)

	reseal := func(args ...string) (string, error) {
		var out, errOut bytes.Buffer
		err := run(ctx, append([]string{"admin", "reseal", "--database-url", old.DBURL, "--batch", "1"}, args...), &out, &errOut)
		return out.String(), err
	}
	out, err := reseal("--secrets-key", newKey, "--secrets-key-previous", testenv.TestSecretsKey)
	require.ErrorContains(t, err, "1 sealed values open under none of the keys given")
	require.Equal(t, "webhook signing secrets: 2 resealed, 0 already current, 1 unopenable\n"+
		"http_request header values: 2 resealed, 0 already current, 0 unopenable\n"+
		"unopenable, left as it is: organization "+old.B.ID.String()+" webhook "+lost+"\n", out)
	require.Equal(t, strangerSealed, secretOf(old.B.ID, lost), "an unopenable secret was changed")
	require.NotEqual(t, before, secretOf(old.A.ID, hookA), "not resealed")
	require.NotEqual(t, beforeB, secretOf(old.B.ID, hookB), "not resealed")
	require.NotContains(t, out+err.Error(), strings.TrimPrefix(secretA, "whsec_"))

	// Its owner deletes it (or rotates its secret); the rest is current.
	r = old.Do("DELETE", "/api/webhooks/"+lost, old.B.Key, nil)
	require.Less(t, r.Status, 300, "%s", r.Body)
	out, err = reseal("--secrets-key", newKey, "--secrets-key-previous", testenv.TestSecretsKey+","+newKey)
	require.NoError(t, err)
	require.Equal(t, "webhook signing secrets: 0 resealed, 2 already current, 0 unopenable\n"+
		"http_request header values: 0 resealed, 2 already current, 0 unopenable\n", out)
	out, err = reseal("--secrets-key", newKey)
	require.NoError(t, err, "the new key alone does not open everything")
	require.Equal(t, "webhook signing secrets: 0 resealed, 2 already current, 0 unopenable\n"+
		"http_request header values: 0 resealed, 2 already current, 0 unopenable\n", out)

	// An instance with the new key alone signs with the original secret.
	fresh := testenv.NewOn(t, old.DBURL, testenv.WithWorkers, loopback, func(c *server.Config) { c.SecretsKey = newKey })
	r = fresh.Do("POST", "/api/webhooks/"+hookA+"/test", old.A.Key, nil)
	require.Equal(t, http.StatusAccepted, r.Status, "%s", r.Body)
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == 1 }, 15*time.Second, 50*time.Millisecond)
	mu.Lock()
	req, body := got[0], bodies[0]
	mu.Unlock()
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secretA, "whsec_"))
	require.NoError(t, err)
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(req.Header.Get("webhook-id") + "." + req.Header.Get("webhook-timestamp") + "." + string(body)))
	require.Equal(t, "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)), req.Header.Get("webhook-signature"))
}

// A secret rotated while reseal runs is kept: reseal locks each row from
// its read to its write, so that it reads the rotated secret once the
// rotation commits, rather than write the one it read before over it.
// (The rotation here writes a secret no key opens, to tell the two apart.)
func TestResealKeepsASecretRotatedMeanwhile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := testenv.New(t, func(c *server.Config) { c.FetchAllow = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")} })
	r := e.Do("POST", "/api/webhooks", e.A.Key, map[string]any{"url": "http://127.0.0.1:9/in", "events": []string{"lead.created"}})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var h struct{ ID string }
	r.JSON(t, &h)
	stranger, err := seal.New(bytes.Repeat([]byte{9}, 32))
	require.NoError(t, err)
	rotated, err := stranger.Seal([]byte("the rotated key"), []byte("anything"))
	require.NoError(t, err)

	tx, err := e.App.Store.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, "SELECT set_config('app.org_id', $1, true)", e.A.ID.String())
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "UPDATE webhooks SET secret = $1 WHERE org_id = $2 AND id = $3", rotated, e.A.ID, uuid.MustParse(h.ID))
	require.NoError(t, err)
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		var out, errOut bytes.Buffer
		err := run(ctx, []string{"admin", "reseal", "--database-url", e.DBURL,
			"--secrets-key", "AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI=", "--secrets-key-previous", testenv.TestSecretsKey}, &out, &errOut)
		done <- result{out.String(), err}
	}()
	dbtest.WaitForLockWait(t, e.App.Store.Pool, "webhooks")
	require.NoError(t, tx.Commit(ctx))
	res := <-done
	require.ErrorContains(t, res.err, "1 sealed values open under none of the keys given")
	require.Contains(t, res.out, "unopenable, left as it is: organization "+e.A.ID.String()+" webhook "+h.ID+"\n")
	require.NoError(t, e.App.Store.Tenant(ctx, e.A.ID, func(q *dbq.Queries) error {
		w, err := q.GetWebhook(ctx, dbq.GetWebhookParams{OrgID: e.A.ID, ID: uuid.MustParse(h.ID)})
		require.Equal(t, rotated, w.Secret, "the rotation was written over")
		return err
	}))
}

// reseal needs the key to seal under, and checks its flags before it
// opens the database. Not parallel: the environment is the process's.
func TestResealChecksItsFlags(t *testing.T) {
	t.Setenv("PARLEY_SECRETS_KEY", "")
	t.Setenv("PARLEY_SECRETS_KEY_PREVIOUS", "")
	nowhere := []string{"--database-url", "postgres://parley@nowhere.invalid/parley"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "--secrets-key (PARLEY_SECRETS_KEY) is required"},
		{[]string{"--secrets-key", "c2hvcnQ="}, "--secrets-key:"},
		{[]string{"--secrets-key", testenv.TestSecretsKey, "--secrets-key-previous", testenv.TestSecretsKey + ",bm9wZS1zM2NyM3Q="}, "--secrets-key-previous: key 2 of the list"},
		{[]string{"--secrets-key", testenv.TestSecretsKey, "--batch", "0"}, "--batch 0"},
	} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), append(append([]string{"admin", "reseal"}, tc.args...), nowhere...), &out, &errOut)
		require.ErrorContains(t, err, tc.want, "%v", tc.args)
		require.NotContains(t, err.Error(), "bm9wZS1zM2NyM3Q")
		require.Empty(t, out.String(), "%v", tc.args)
	}
}

// A header value stored in plain text before values were sealed
// (tool.Endpoint.Legacy) is sealed by reseal too, under the current key
// and bound to its agent, endpoint and header: the next run finds it
// current. Before, reseal passed it over, and "every value sealed under
// the new key" left it readable in the database.
func TestResealSealsLegacyHeaderValues(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := testenv.New(t)
	agent := uuid.New()
	const plain = "legacy-plain-token"
	require.NoError(t, e.App.Store.Tenant(ctx, e.A.ID, func(q *dbq.Queries) error {
		_, err := q.CreateAgent(ctx, dbq.CreateAgentParams{
			OrgID: e.A.ID, ID: agent, Name: "crm", Instructions: "i", Model: "m", Temperature: 0.5,
			Tools: []string{"http_request"}, Visibility: "private",
			ToolSettings: []byte(`{"http_request":{"endpoints":[{"name":"crm","method":"GET","url":"https://crm.example.com/x",` +
				`"headers":{"X-Api-Key":"` + plain + `"}}]}}`),
		})
		return err
	}))
	reseal := func() (string, error) {
		var out, errOut bytes.Buffer
		err := run(ctx, []string{"admin", "reseal", "--database-url", e.DBURL, "--secrets-key", testenv.TestSecretsKey}, &out, &errOut)
		return out.String(), err
	}
	out, err := reseal()
	require.NoError(t, err)
	require.Contains(t, out, "http_request header values: 1 resealed, 0 already current, 0 unopenable\n")
	require.NoError(t, e.App.Store.Tenant(ctx, e.A.ID, func(q *dbq.Queries) error {
		a, err := q.GetAgent(ctx, dbq.GetAgentParams{OrgID: e.A.ID, ID: agent})
		require.NotContains(t, string(a.ToolSettings), plain, "the plain value is still stored")
		eps := tool.ParseSettings(a.ToolSettings).HTTPRequest.Endpoints
		require.Len(t, eps, 1)
		require.Empty(t, eps[0].Legacy)
		require.Equal(t, []string{"X-Api-Key"}, eps[0].HeaderNames())
		return err
	}))
	out, err = reseal()
	require.NoError(t, err)
	require.Contains(t, out, "http_request header values: 0 resealed, 1 already current, 0 unopenable\n")
}
