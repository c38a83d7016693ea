package account_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"slices"
	"strings"
	"testing"

	validatepb "buf.build/gen/go/bufbuild/protovalidate/protocolbuffers/go/buf/validate"
	"buf.build/go/protovalidate"
	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/parleyhq/parley/backend/account"
	"github.com/parleyhq/parley/backend/db/dbq"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/gen/parley/v1/parleyv1connect"
	"github.com/parleyhq/parley/backend/testenv"
)

// keyPages reads ListApiKeys page after page (limit keys each, from
// cursor) and returns the keys it gave, in order.
func keyPages(t *testing.T, c parleyv1connect.ApiKeyServiceClient, limit int32, cursor string) []*parleyv1.ApiKey {
	t.Helper()
	var keys []*parleyv1.ApiKey
	for range 200 {
		resp, err := c.ListApiKeys(context.Background(), &parleyv1.ListApiKeysRequest{Limit: limit, Cursor: cursor})
		require.NoError(t, err)
		require.LessOrEqual(t, len(resp.GetApiKeys()), int(limit))
		keys = append(keys, resp.GetApiKeys()...)
		if resp.GetNextCursor() == "" {
			return keys
		}
		require.Len(t, resp.GetApiKeys(), int(limit), "a page short of its limit has a next one")
		cursor = resp.GetNextCursor()
	}
	t.Fatal("no last page after 200")
	return nil
}

func names(keys []*parleyv1.ApiKey) []string {
	var out []string
	for _, k := range keys {
		out = append(out, k.GetName())
	}
	return out
}

func ids(keys []*parleyv1.ApiKey) []string {
	var out []string
	for _, k := range keys {
		out = append(out, k.GetId())
	}
	return out
}

// newestFirst says whether keys are ordered by creation time, then id,
// both descending.
func newestFirst(keys []*parleyv1.ApiKey) bool {
	return slices.IsSortedFunc(keys, func(a, b *parleyv1.ApiKey) int {
		if c := b.GetCreateTime().AsTime().Compare(a.GetCreateTime().AsTime()); c != 0 {
			return c
		}
		return strings.Compare(b.GetId(), a.GetId())
	})
}

// badField is the field a Connect error names: a BadRequest violation (the
// service's checks) or a protovalidate one (the schema's).
func badField(t *testing.T, err error) string {
	t.Helper()
	var ce *connect.Error
	require.ErrorAs(t, err, &ce)
	for _, d := range ce.Details() {
		v, derr := d.Value()
		require.NoError(t, derr)
		switch x := v.(type) {
		case *errdetails.BadRequest:
			return x.GetFieldViolations()[0].GetField()
		case *validatepb.Violations:
			return protovalidate.FieldPathString(x.GetViolations()[0].GetField())
		}
	}
	t.Fatalf("no field in %v", err)
	return ""
}

// ListApiKeys comes a page at a time by cursor: every key once, newest
// first, revoked ones in their place; never another organization's, whose
// cursor only places the page.
func TestListApiKeysPagesByCursor(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	ctx := context.Background()
	a, b := keysClient(e, e.A.Key), keysClient(e, e.B.Key)
	var made []string
	for i := range 4 {
		k, err := a.CreateApiKey(ctx, &parleyv1.CreateApiKeyRequest{Name: fmt.Sprintf("k%d", i), Scopes: []string{"chat"}})
		require.NoError(t, err)
		made = append(made, k.GetApiKey().GetId())
	}
	_, err := a.RevokeApiKey(ctx, &parleyv1.RevokeApiKeyRequest{Id: made[1]})
	require.NoError(t, err)
	_, err = b.CreateApiKey(ctx, &parleyv1.CreateApiKeyRequest{Name: "B's", Scopes: []string{"chat"}})
	require.NoError(t, err)

	aKeys := keyPages(t, a, 2, "")
	require.Equal(t, []string{"k3", "k2", "k1", "k0", "bootstrap"}, names(aKeys), "newest first, each once, none of B's")
	require.True(t, newestFirst(aKeys))
	require.NotNil(t, aKeys[2].GetRevokeTime(), "a revoked key stays in its place")
	for _, limit := range []int32{1, 3, 5, 100} {
		require.Equal(t, ids(aKeys), ids(keyPages(t, a, limit, "")), "limit %d", limit)
	}
	bKeys := keyPages(t, b, 1, "")
	require.Equal(t, []string{"B's", "bootstrap"}, names(bKeys))
	for _, id := range ids(bKeys) {
		require.NotContains(t, ids(aKeys), id)
	}

	// SECURITY: a cursor names a key by its creation time and id; another
	// organization's (B's newest key is newer than all of A's) reaches
	// none of its keys, and tells nothing of them.
	first, err := b.ListApiKeys(ctx, &parleyv1.ListApiKeysRequest{Limit: 1})
	require.NoError(t, err)
	require.NotEmpty(t, first.GetNextCursor())
	require.Equal(t, ids(aKeys), ids(keyPages(t, a, 2, first.GetNextCursor())), "A's keys after B's cursor: all of A's, none of B's")
	mid, err := a.ListApiKeys(ctx, &parleyv1.ListApiKeysRequest{Limit: 2})
	require.NoError(t, err)
	require.Equal(t, ids(bKeys[1:]), ids(keyPages(t, b, 2, mid.GetNextCursor())), "B's keys after A's cursor: B's older ones only")
}

// A page holds 100 keys unless asked for fewer, and no more; keys made at
// the same moment are ordered by id, each on exactly one page.
func TestListApiKeysPageSize(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	ctx := context.Background()
	org := e.Bootstrap("Many keys", "pro")
	// One transaction, one creation time: more keys than a page, revoked
	// (past the bound of working keys) as they accumulate.
	require.NoError(t, e.App.Store.Tenant(ctx, org.ID, func(q *dbq.Queries) error {
		for i := range account.MaxListLimit + 20 {
			id := uuid.New()
			h := sha256.Sum256(id[:])
			k, err := q.CreateAPIKey(ctx, dbq.CreateAPIKeyParams{
				OrgID: org.ID, ID: id, Name: fmt.Sprintf("old %03d", i), KeyHash: h[:], DisplayPrefix: "prly_x",
				Plan: "pro", Scopes: []string{"chat"},
			})
			if err != nil {
				return err
			}
			if _, err := q.RevokeAPIKey(ctx, dbq.RevokeAPIKeyParams{OrgID: org.ID, ID: k.ID}); err != nil {
				return err
			}
		}
		return nil
	}))
	c := keysClient(e, org.Key)
	page, err := c.ListApiKeys(ctx, &parleyv1.ListApiKeysRequest{})
	require.NoError(t, err)
	require.Equal(t, 100, len(page.GetApiKeys()), "the default page")
	require.NotEmpty(t, page.GetNextCursor())
	all := keyPages(t, c, 100, "")
	require.Len(t, all, account.MaxListLimit+21)
	require.Equal(t, ids(page.GetApiKeys()), ids(all[:100]))
	require.True(t, newestFirst(all))
	seen := ids(all)
	slices.Sort(seen)
	require.Len(t, slices.Compact(seen), account.MaxListLimit+21, "a key on two pages")
	require.Equal(t, ids(all), ids(keyPages(t, c, 7, "")))

	for _, tc := range []struct {
		req       *parleyv1.ListApiKeysRequest
		wantField string
	}{
		{&parleyv1.ListApiKeysRequest{Limit: -1}, "limit"},
		{&parleyv1.ListApiKeysRequest{Limit: 101}, "limit"},
		{&parleyv1.ListApiKeysRequest{Cursor: "nope"}, "cursor"},
		{&parleyv1.ListApiKeysRequest{Cursor: "123_not-a-uuid"}, "cursor"},
		{&parleyv1.ListApiKeysRequest{Cursor: "-300000000000000000_" + all[0].GetId()}, "cursor"},
		{&parleyv1.ListApiKeysRequest{Cursor: "1_" + strings.Repeat("a", 200)}, "cursor"},
	} {
		_, err := c.ListApiKeys(ctx, tc.req)
		require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err), "%v: %v", tc.req, err)
		require.Equal(t, tc.wantField, badField(t, err), "%v", tc.req)
	}
}
