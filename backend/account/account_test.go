package account_test

import (
	"context"
	"crypto/sha256"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/parleyhq/parley/backend/account"
	"github.com/parleyhq/parley/backend/apikey"
	"github.com/parleyhq/parley/backend/apperr"
	"github.com/parleyhq/parley/backend/auth"
	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/dbtest"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/gen/parley/v1/parleyv1connect"
	"github.com/parleyhq/parley/backend/plan"
	"github.com/parleyhq/parley/backend/testenv"
)

func keysClient(e *testenv.Env, key string) parleyv1connect.ApiKeyServiceClient {
	return parleyv1connect.NewApiKeyServiceClient(http.DefaultClient, e.URL, connect.WithInterceptors(testenv.Bearer(key)))
}

func TestMalformedKeyIsRefusedWithoutAQuery(t *testing.T) {
	t.Parallel()
	pool, _ := dbtest.NewPool(t)
	pool.Close() // any query now fails: only a refusal made before querying can be Unauthenticated
	a := auth.NewAuthenticator(&db.Store{Pool: pool})
	key, err := apikey.Generate()
	require.NoError(t, err)
	s := key.String()
	typo := s[:10] + string("ab"[boolIndex(s[10] == 'a')]) + s[11:]
	for _, bad := range []string{"Bearer " + typo, "Bearer " + s[:len(s)-1], "Bearer sk-abc"} {
		_, err := a.Authenticate(context.Background(), bad)
		require.Equal(t, apperr.Unauthenticated, apperr.CodeOf(err), "%q: %v", bad, err)
	}
	// The well-formed key does reach the (closed) database.
	_, err = a.Authenticate(context.Background(), "Bearer "+s)
	require.Equal(t, apperr.Internal, apperr.CodeOf(err), "a well-formed key must be looked up: %v", err)
}

func boolIndex(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestKeyLifecycle(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	ctx := context.Background()
	admin := keysClient(e, e.A.Key)

	created, err := admin.CreateApiKey(ctx, &parleyv1.CreateApiKeyRequest{Name: "ci", Scopes: []string{"admin"}})
	require.NoError(t, err)
	secret := created.GetSecret()
	_, err = apikey.Parse(secret)
	require.NoError(t, err)
	require.Equal(t, "pro", created.GetApiKey().GetPlan(), "default plan is the organization's")
	require.True(t, strings.HasPrefix(secret, created.GetApiKey().GetDisplayPrefix()))

	r := e.Do("GET", "/api/agents", secret, nil)
	require.Equal(t, http.StatusOK, r.Status)

	t.Run("no secret in the database", func(t *testing.T) {
		tx, err := e.App.Pool.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx) //nolint:errcheck
		_, err = tx.Exec(ctx, "SELECT set_config('app.org_id', $1, true)", e.A.ID.String())
		require.NoError(t, err)
		rows, err := tx.Query(ctx, "SELECT row_to_json(k)::text, k.key_hash FROM api_keys k")
		require.NoError(t, err)
		var dump []string
		hashes := map[[32]byte]bool{}
		for rows.Next() {
			var js string
			var h []byte
			require.NoError(t, rows.Scan(&js, &h))
			dump = append(dump, js)
			hashes[[32]byte(h)] = true
		}
		require.NoError(t, rows.Err())
		require.Len(t, dump, 2)
		all := strings.Join(dump, "\n")
		for _, k := range []string{secret, e.A.Key} {
			require.NotContains(t, all, k)
			require.NotContains(t, all, k[len(apikey.Prefix)+6:], "the secret part of a key is stored")
			require.True(t, hashes[sha256.Sum256([]byte(k))], "the key's SHA-256 is what is stored")
		}
	})

	t.Run("the last admin key cannot be revoked", func(t *testing.T) {
		org := e.Bootstrap("Lonely", "starter")
		lonely := keysClient(e, org.Key)
		keys, err := lonely.ListApiKeys(ctx, &parleyv1.ListApiKeysRequest{})
		require.NoError(t, err)
		require.Len(t, keys.GetApiKeys(), 1)
		_, err = lonely.RevokeApiKey(ctx, &parleyv1.RevokeApiKeyRequest{Id: keys.GetApiKeys()[0].GetId()})
		require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(err), "%v", err)
		require.Equal(t, http.StatusOK, e.Do("GET", "/api/agents", org.Key, nil).Status, "the key was revoked anyway")
		// With a second admin key, the first may go.
		second, err := lonely.CreateApiKey(ctx, &parleyv1.CreateApiKeyRequest{Name: "second", Scopes: []string{"admin"}})
		require.NoError(t, err)
		_, err = lonely.RevokeApiKey(ctx, &parleyv1.RevokeApiKeyRequest{Id: keys.GetApiKeys()[0].GetId()})
		require.NoError(t, err)
		_, err = keysClient(e, second.GetSecret()).RevokeApiKey(ctx, &parleyv1.RevokeApiKeyRequest{Id: second.GetApiKey().GetId()})
		require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(err))
	})

	t.Run("revoked key is refused at once on this instance", func(t *testing.T) {
		_, err := admin.RevokeApiKey(ctx, &parleyv1.RevokeApiKeyRequest{Id: created.GetApiKey().GetId()})
		require.NoError(t, err)
		r := e.Do("GET", "/api/agents", secret, nil)
		require.Equal(t, http.StatusUnauthorized, r.Status)
		require.Equal(t, "UNAUTHORIZED", r.Err(t).Error.Code)
		list, err := admin.ListApiKeys(ctx, &parleyv1.ListApiKeysRequest{})
		require.NoError(t, err)
		var found bool
		for _, k := range list.GetApiKeys() {
			if k.GetId() == created.GetApiKey().GetId() {
				found = true
				require.NotNil(t, k.GetRevokeTime())
			}
		}
		require.True(t, found)
	})

	t.Run("scopes", func(t *testing.T) {
		chatOnly, err := admin.CreateApiKey(ctx, &parleyv1.CreateApiKeyRequest{Name: "widget", Scopes: []string{"chat"}})
		require.NoError(t, err)
		r := e.Do("GET", "/api/agents", chatOnly.GetSecret(), nil)
		require.Equal(t, http.StatusForbidden, r.Status)
		require.Equal(t, "FORBIDDEN", r.Err(t).Error.Code)
		_, err = keysClient(e, chatOnly.GetSecret()).ListApiKeys(ctx, &parleyv1.ListApiKeysRequest{})
		require.Equal(t, connect.CodePermissionDenied, connect.CodeOf(err))
	})

	t.Run("expired key", func(t *testing.T) {
		short, err := admin.CreateApiKey(ctx, &parleyv1.CreateApiKeyRequest{
			Name: "short", Scopes: []string{"admin"}, ExpireTime: timestamppb.New(time.Now().Add(1500 * time.Millisecond)),
		})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, e.Do("GET", "/api/agents", short.GetSecret(), nil).Status)
		time.Sleep(1600 * time.Millisecond)
		r := e.Do("GET", "/api/agents", short.GetSecret(), nil)
		require.Equal(t, http.StatusUnauthorized, r.Status)
		require.Contains(t, r.Err(t).Error.Message, "expired")
	})

	t.Run("an expiry beyond the year 9999", func(t *testing.T) {
		// A binary Timestamp may hold any seconds; Postgres stores up to
		// 294276 AD. Refused by the schema, naming the field, not a 500.
		for _, sec := range []int64{1e13, 253402300800} {
			_, err := admin.CreateApiKey(ctx, &parleyv1.CreateApiKeyRequest{
				Name: "far", Scopes: []string{"chat"}, ExpireTime: &timestamppb.Timestamp{Seconds: sec},
			})
			require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err), "%d: %v", sec, err)
			require.Contains(t, err.Error(), "expire_time")
		}
		_, err := admin.CreateApiKey(ctx, &parleyv1.CreateApiKeyRequest{
			Name: "far but fine", Scopes: []string{"chat"}, ExpireTime: &timestamppb.Timestamp{Seconds: 253402300799},
		})
		require.NoError(t, err)
	})

	t.Run("per-plan issuance", func(t *testing.T) {
		_, err := admin.CreateApiKey(ctx, &parleyv1.CreateApiKeyRequest{Name: "big", Scopes: []string{"chat"}, Plan: ptr("enterprise")})
		require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(err))
		low, err := admin.CreateApiKey(ctx, &parleyv1.CreateApiKeyRequest{Name: "small", Scopes: []string{"admin"}, Plan: ptr("free")})
		require.NoError(t, err)
		// The free key gets the free plan's limits even in a pro organization.
		r := e.Do("GET", "/api/agents", low.GetSecret(), nil)
		require.Equal(t, "10", r.Header.Get("X-RateLimit-Limit"))
	})

	t.Run("another organization's key cannot be revoked", func(t *testing.T) {
		bKeys, err := keysClient(e, e.B.Key).ListApiKeys(ctx, &parleyv1.ListApiKeysRequest{})
		require.NoError(t, err)
		require.Len(t, bKeys.GetApiKeys(), 1)
		_, err = admin.RevokeApiKey(ctx, &parleyv1.RevokeApiKeyRequest{Id: bKeys.GetApiKeys()[0].GetId()})
		require.Equal(t, connect.CodePermissionDenied, connect.CodeOf(err))
		require.Equal(t, http.StatusOK, e.Do("GET", "/api/agents", e.B.Key, nil).Status)
	})
}

func ptr[T any](v T) *T { return &v }

func TestEnterpriseLimitsAreTheOperators(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	ctx := context.Background()
	ent := e.Bootstrap("Big Co", plan.Enterprise)
	r := e.Do("GET", "/api/agents", ent.Key, nil)
	require.Equal(t, "1000", r.Header.Get("X-RateLimit-Limit"), "enterprise default before the operator sets limits")

	require.NoError(t, account.SetLimits(ctx, e.App.Store, ent.ID, plan.Limits{PerMinute: 50, PerDay: 5000}))
	require.Error(t, account.SetLimits(ctx, e.App.Store, e.A.ID, plan.Limits{PerMinute: 3, PerDay: 5}), "only enterprise limits are per organization")
	require.Error(t, account.SetLimits(ctx, e.App.Store, ent.ID, plan.Limits{PerMinute: 0, PerDay: 5}))

	// The auth cache may hold the old limits for up to auth.CacheTTL.
	require.Eventually(t, func() bool {
		return e.Do("GET", "/api/agents", ent.Key, nil).Header.Get("X-RateLimit-Limit") == "50"
	}, auth.CacheTTL+2*time.Second, 200*time.Millisecond)

	org, err := parleyv1connect.NewOrganizationServiceClient(http.DefaultClient, e.URL, connect.WithInterceptors(testenv.Bearer(ent.Key))).
		GetOrganization(ctx, &parleyv1.GetOrganizationRequest{})
	require.NoError(t, err)
	require.Equal(t, "enterprise", org.GetOrganization().GetPlan())
	require.EqualValues(t, 50, org.GetOrganization().GetLimits().GetRequestsPerMinute())
	require.Len(t, org.GetUsage(), 1)
	require.EqualValues(t, 50, org.GetUsage()[0].GetLimits().GetRequestsPerMinute())
	require.Positive(t, org.GetUsage()[0].GetRequestsThisMinute())
}

func TestRevocationReachesEveryInstanceWithin5s(t *testing.T) {
	t.Parallel()
	one := testenv.New(t)
	two := testenv.NewOn(t, one.DBURL)
	ctx := context.Background()
	k, err := keysClient(one, one.A.Key).CreateApiKey(ctx, &parleyv1.CreateApiKeyRequest{Name: "shared", Scopes: []string{"admin"}})
	require.NoError(t, err)
	// Instance two has the key in its cache.
	require.Equal(t, http.StatusOK, two.Do("GET", "/api/agents", k.GetSecret(), nil).Status)
	_, err = keysClient(one, one.A.Key).RevokeApiKey(ctx, &parleyv1.RevokeApiKeyRequest{Id: k.GetApiKey().GetId()})
	require.NoError(t, err)
	revoked := time.Now()
	for two.Do("GET", "/api/agents", k.GetSecret(), nil).Status != http.StatusUnauthorized {
		if time.Since(revoked) > 5*time.Second {
			t.Fatal("instance two still accepts a key revoked 5 s ago")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A key revoked on one instance, still trusted by another's cache for a
// few seconds, issues no key there: a key it made would outlive the
// revocation (made then, it was never revoked).
func TestRevokedKeyIssuesNoKeyOnAnotherInstance(t *testing.T) {
	t.Parallel()
	one := testenv.New(t)
	two := testenv.NewOn(t, one.DBURL)
	ctx := context.Background()
	k, err := keysClient(one, one.A.Key).CreateApiKey(ctx, &parleyv1.CreateApiKeyRequest{Name: "leaked", Scopes: []string{"admin"}})
	require.NoError(t, err)
	// Instance two has the key in its cache.
	cached := time.Now()
	require.Equal(t, http.StatusOK, two.Do("GET", "/api/agents", k.GetSecret(), nil).Status)
	_, err = keysClient(one, one.A.Key).RevokeApiKey(ctx, &parleyv1.RevokeApiKeyRequest{Id: k.GetApiKey().GetId()})
	require.NoError(t, err)
	made, err := keysClient(two, k.GetSecret()).CreateApiKey(ctx, &parleyv1.CreateApiKeyRequest{Name: "backdoor", Scopes: []string{"admin"}})
	require.Less(t, time.Since(cached), auth.CacheTTL, "too slow: instance two's cache entry may have expired, and the test proves nothing")
	require.Equal(t, connect.CodeUnauthenticated, connect.CodeOf(err), "a revoked key issued %v", made.GetApiKey())
	list, err := keysClient(one, one.A.Key).ListApiKeys(ctx, &parleyv1.ListApiKeysRequest{})
	require.NoError(t, err)
	require.NotContains(t, names(list.GetApiKeys()), "backdoor")
}

// A key that no longer works (expired, or revoked already) can be revoked
// by an organization left without a working admin key: the organization
// loses nothing it had, and its console must be able to tidy its list.
func TestRevokingADeadAdminKeyIsNotRefusedAsTheLast(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	ctx := context.Background()
	org := e.Bootstrap("Expired", "starter")
	first, err := keysClient(e, org.Key).ListApiKeys(ctx, &parleyv1.ListApiKeysRequest{})
	require.NoError(t, err)
	require.Len(t, first.GetApiKeys(), 1)
	short, err := keysClient(e, org.Key).CreateApiKey(ctx, &parleyv1.CreateApiKeyRequest{
		Name: "short", Scopes: []string{"admin"}, ExpireTime: timestamppb.New(time.Now().Add(1500 * time.Millisecond)),
	})
	require.NoError(t, err)
	_, err = keysClient(e, short.GetSecret()).RevokeApiKey(ctx, &parleyv1.RevokeApiKeyRequest{Id: first.GetApiKeys()[0].GetId()})
	require.NoError(t, err)
	time.Sleep(1600 * time.Millisecond)

	// The console's owner, as console.signedIn makes its principal.
	owner := auth.WithPrincipal(ctx, &auth.Principal{OrgID: org.ID, Plan: plan.Starter, Member: "owner@example.com",
		Scopes: []string{string(auth.ScopeAdmin), string(auth.ScopeChat)}})
	s := account.New(e.App.Store, e.App.Auth, nil)
	for _, id := range []string{short.GetApiKey().GetId(), first.GetApiKeys()[0].GetId()} {
		resp, err := s.RevokeApiKey(owner, &parleyv1.RevokeApiKeyRequest{Id: id})
		require.NoError(t, err, "revoking %s, which no longer works", id)
		require.NotNil(t, resp.GetApiKey().GetRevokeTime())
	}
}

func TestLastUsedIsWrittenInBatches(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	ctx := context.Background()
	// Key B is used; A (whose own uses are recorded too) only reads B.
	b, err := keysClient(e, e.A.Key).CreateApiKey(ctx, &parleyv1.CreateApiKeyRequest{Name: "b", Scopes: []string{"admin"}})
	require.NoError(t, err)
	for range 3 {
		require.Equal(t, http.StatusOK, e.Do("GET", "/api/agents", b.GetSecret(), nil).Status)
	}
	lastUsed := func() *timestamppb.Timestamp {
		t.Helper()
		l, err := keysClient(e, e.A.Key).ListApiKeys(ctx, &parleyv1.ListApiKeysRequest{})
		require.NoError(t, err)
		for _, k := range l.GetApiKeys() {
			if k.GetId() == b.GetApiKey().GetId() {
				return k.GetLastUsedTime()
			}
		}
		t.Fatal("key b not listed")
		return nil
	}
	require.Nil(t, lastUsed(), "last use must not be written per request")
	// A flush that fails (here: its context ended) keeps the times for the
	// next one; they were dropped.
	ended, cancel := context.WithCancel(ctx)
	cancel()
	require.Error(t, e.App.Auth.FlushLastUsed(ended))
	require.Nil(t, lastUsed())
	require.NoError(t, e.App.Auth.FlushLastUsed(ctx))
	got := lastUsed()
	require.NotNil(t, got)
	require.WithinDuration(t, time.Now(), got.AsTime(), 10*time.Second)
}

// Two revocations of the last two admin keys take turns: the first is held
// open after its count (it saw the other key live); the second, revoking
// that other key, must wait for it and then see it, and is refused. Without
// the lock the second counted the first's key as live and both went.
func TestConcurrentRevocationsKeepAnAdminKey(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	ctx := context.Background()
	admin := keysClient(e, e.A.Key)
	second, err := admin.CreateApiKey(ctx, &parleyv1.CreateApiKeyRequest{Name: "second", Scopes: []string{"admin"}})
	require.NoError(t, err)
	secondID := uuid.MustParse(second.GetApiKey().GetId())
	list, err := admin.ListApiKeys(ctx, &parleyv1.ListApiKeysRequest{})
	require.NoError(t, err)
	var firstID uuid.UUID
	for _, k := range list.GetApiKeys() {
		if k.GetId() != second.GetApiKey().GetId() && slices.Contains(k.GetScopes(), "admin") {
			firstID = uuid.MustParse(k.GetId())
		}
	}
	require.NotEqual(t, uuid.Nil, firstID)

	// The first revocation, as RevokeApiKey makes it, held before commit.
	tx, err := e.App.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	_, err = tx.Exec(ctx, "SELECT set_config('app.org_id', $1, true)", e.A.ID.String())
	require.NoError(t, err)
	q := dbq.New(tx)
	_, err = q.LockOrganization(ctx, e.A.ID)
	require.NoError(t, err)
	_, err = q.RevokeAPIKey(ctx, dbq.RevokeAPIKeyParams{OrgID: e.A.ID, ID: firstID})
	require.NoError(t, err)
	n, err := q.CountLiveAdminKeys(ctx, e.A.ID)
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "the first sees the second key live")

	// The second, through the API.
	done := make(chan error, 1)
	go func() {
		_, err := admin.RevokeApiKey(ctx, &parleyv1.RevokeApiKeyRequest{Id: secondID.String()})
		done <- err
	}()
	// Until it has finished or waits on a lock in this database.
	var secondErr error
	finished := false
	for deadline := time.Now().Add(10 * time.Second); !finished; {
		select {
		case secondErr = <-done:
			finished = true
			continue
		case <-time.After(10 * time.Millisecond):
		}
		var waiting int
		require.NoError(t, e.App.Pool.QueryRow(ctx,
			"SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'").Scan(&waiting))
		if waiting > 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "the second revocation neither finished nor waited")
	}
	require.NoError(t, tx.Commit(ctx))
	if !finished {
		secondErr = <-done
	}
	require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(secondErr), "%v", secondErr)

	list, err = keysClient(e, second.GetSecret()).ListApiKeys(ctx, &parleyv1.ListApiKeysRequest{})
	require.NoError(t, err, "the second key still works")
	for _, k := range list.GetApiKeys() {
		if k.GetId() == secondID.String() {
			require.Nil(t, k.GetRevokeTime(), "the second key was kept")
		}
	}
}

// A key issues keys with at most its own scopes and plan, expiring no later
// than itself (at its expiry when none is asked): a key given for an hour,
// or for one purpose, cannot leave a lasting or broader one behind.
func TestKeysIssueNoMoreThanThemselves(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	ctx := context.Background()
	expiry := time.Now().Add(time.Hour).Truncate(time.Second)
	short, err := keysClient(e, e.A.Key).CreateApiKey(ctx, &parleyv1.CreateApiKeyRequest{
		Name: "contractor", Plan: ptr("starter"), Scopes: []string{"admin"}, ExpireTime: timestamppb.New(expiry),
	})
	require.NoError(t, err)
	k := keysClient(e, short.GetSecret())

	for _, c := range []struct {
		name string
		req  *parleyv1.CreateApiKeyRequest
		want string
	}{
		{"a scope it lacks", &parleyv1.CreateApiKeyRequest{Name: "x", Scopes: []string{"admin", "chat"}}, "lacks the chat scope"},
		{"a higher plan", &parleyv1.CreateApiKeyRequest{Name: "x", Plan: ptr("pro"), Scopes: []string{"admin"}}, `plan: "pro" is higher than this API key's plan "starter"`},
		{"a later expiry", &parleyv1.CreateApiKeyRequest{Name: "x", Scopes: []string{"admin"}, ExpireTime: timestamppb.New(expiry.Add(time.Minute))}, "expireTime: a key cannot issue one that outlives it"},
	} {
		_, err := k.CreateApiKey(ctx, c.req)
		require.Equal(t, connect.CodePermissionDenied, connect.CodeOf(err), "%s: %v", c.name, err)
		require.ErrorContains(t, err, c.want)
	}

	// Within it: its plan and its expiry unless asked for less.
	same, err := k.CreateApiKey(ctx, &parleyv1.CreateApiKeyRequest{Name: "same", Scopes: []string{"admin"}})
	require.NoError(t, err)
	require.Equal(t, "starter", same.GetApiKey().GetPlan())
	require.Equal(t, "API key contractor ("+short.GetApiKey().GetDisplayPrefix()+"…)", same.GetApiKey().GetCreatedBy(), "who made it")
	require.True(t, strings.HasPrefix(short.GetApiKey().GetCreatedBy(), "API key bootstrap (prly_"), short.GetApiKey().GetCreatedBy())
	require.True(t, expiry.Equal(same.GetApiKey().GetExpireTime().AsTime()), "%v", same.GetApiKey().GetExpireTime().AsTime())
	less, err := k.CreateApiKey(ctx, &parleyv1.CreateApiKeyRequest{Name: "less", Plan: ptr("free"), Scopes: []string{"admin"}, ExpireTime: timestamppb.New(expiry.Add(-time.Minute))})
	require.NoError(t, err)
	require.Equal(t, "free", less.GetApiKey().GetPlan())
	require.True(t, expiry.Add(-time.Minute).Equal(less.GetApiKey().GetExpireTime().AsTime()))

	// The organization's first key (no expiry, every scope) still issues
	// lasting keys of the organization's plan.
	lasting, err := keysClient(e, e.A.Key).CreateApiKey(ctx, &parleyv1.CreateApiKeyRequest{Name: "lasting", Scopes: []string{"chat"}})
	require.NoError(t, err)
	require.Nil(t, lasting.GetApiKey().GetExpireTime())
	all, err := keysClient(e, e.A.Key).ListApiKeys(ctx, &parleyv1.ListApiKeysRequest{})
	require.NoError(t, err)
	require.Equal(t, account.CommandLine, all.GetApiKeys()[len(all.GetApiKeys())-1].GetCreatedBy(), "the first key, made by parley admin")
	require.Equal(t, "pro", lasting.GetApiKey().GetPlan())
}

// An organization's working keys are bounded: limits count per key, so
// without a bound issuing keys multiplied the plan's limits (and each is a
// row every ListApiKeys returns). A revoked key frees its place.
func TestWorkingKeysAreBounded(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	ctx := context.Background()
	keys := keysClient(e, e.A.Key)
	var last string
	for i := 1; i < account.MaxKeys-10; i++ { // the bootstrap key is the first
		resp, err := keys.CreateApiKey(ctx, &parleyv1.CreateApiKeyRequest{Name: "k", Scopes: []string{"chat"}})
		require.NoError(t, err, "key %d", i+1)
		last = resp.GetApiKey().GetId()
	}
	// The last ten places, asked for twenty at once: ten are given.
	codes := make(chan connect.Code, 20)
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			_, err := keys.CreateApiKey(ctx, &parleyv1.CreateApiKeyRequest{Name: "race", Scopes: []string{"chat"}})
			if err == nil {
				codes <- 0 // CodeOf(nil) is Unknown
				return
			}
			codes <- connect.CodeOf(err)
		})
	}
	wg.Wait()
	close(codes)
	count := map[connect.Code]int{}
	for c := range codes {
		count[c]++
	}
	require.Equal(t, map[connect.Code]int{0: 10, connect.CodeFailedPrecondition: 10}, count, "keys issued at once went past the bound")
	_, err := keys.CreateApiKey(ctx, &parleyv1.CreateApiKeyRequest{Name: "one too many", Scopes: []string{"chat"}})
	require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(err), "%v", err)
	// Another organization is not concerned.
	_, err = keysClient(e, e.B.Key).CreateApiKey(ctx, &parleyv1.CreateApiKeyRequest{Name: "b", Scopes: []string{"chat"}})
	require.NoError(t, err)
	_, err = keys.RevokeApiKey(ctx, &parleyv1.RevokeApiKeyRequest{Id: last})
	require.NoError(t, err)
	_, err = keys.CreateApiKey(ctx, &parleyv1.CreateApiKeyRequest{Name: "again", Scopes: []string{"chat"}})
	require.NoError(t, err)
}

// The operator's limits of an enterprise organization bound its keys of a
// lower plan too: a pro key of an organization held to 50 a minute had
// pro's 300.
func TestLowerPlanKeysStayWithinEnterpriseLimits(t *testing.T) {
	t.Parallel()
	url := dbtest.New(t)
	e := testenv.NewOn(t, url)
	ctx := context.Background()
	ent := e.Bootstrap("Small enterprise", plan.Enterprise)
	require.NoError(t, account.SetLimits(ctx, e.App.Store, ent.ID, plan.Limits{PerMinute: 50, PerDay: 5000}))
	pro, err := keysClient(e, ent.Key).CreateApiKey(ctx, &parleyv1.CreateApiKeyRequest{Name: "pro", Plan: ptr(plan.Pro), Scopes: []string{"admin"}})
	require.NoError(t, err)
	r := e.Do("GET", "/api/agents", pro.GetSecret(), nil)
	require.Equal(t, "50", r.Header.Get("X-RateLimit-Limit"))
	org, err := parleyv1connect.NewOrganizationServiceClient(http.DefaultClient, e.URL, connect.WithInterceptors(testenv.Bearer(ent.Key))).
		GetOrganization(ctx, &parleyv1.GetOrganizationRequest{})
	require.NoError(t, err)
	for _, u := range org.GetUsage() {
		require.LessOrEqual(t, u.GetLimits().GetRequestsPerMinute(), int64(50), u.GetPlan())
		require.LessOrEqual(t, u.GetLimits().GetRequestsPerDay(), int64(5000), u.GetPlan())
	}

	// Without limits of its own, an enterprise organization has its plan's,
	// which the operator may set below pro's: its pro keys keep to them
	// too, as GetOrganization says.
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `ALTER TABLE plans NO FORCE ROW LEVEL SECURITY;
		UPDATE plans SET requests_per_minute = 40, requests_per_day = 4000 WHERE id = 'enterprise';
		ALTER TABLE plans FORCE ROW LEVEL SECURITY`)
	require.NoError(t, err)
	plain := e.Bootstrap("Plain enterprise", plan.Enterprise)
	pro, err = keysClient(e, plain.Key).CreateApiKey(ctx, &parleyv1.CreateApiKeyRequest{Name: "pro", Plan: ptr(plan.Pro), Scopes: []string{"admin"}})
	require.NoError(t, err)
	r = e.Do("GET", "/api/agents", pro.GetSecret(), nil)
	require.Equal(t, "40", r.Header.Get("X-RateLimit-Limit"), "a pro key took pro's limits past its enterprise plan's")
}

// GetOrganization's usage is of the keys that still work: revoked and
// expired keys accumulate (only working ones are bounded), and each listed
// cost a read of the limiter's counters.
func TestUsageIsOfWorkingKeys(t *testing.T) {
	t.Parallel()
	url := dbtest.New(t)
	e := testenv.NewOn(t, url)
	ctx := context.Background()
	keys := keysClient(e, e.A.Key)
	made := map[string]string{}
	for _, name := range []string{"working", "revoked", "expired"} {
		resp, err := keys.CreateApiKey(ctx, &parleyv1.CreateApiKeyRequest{Name: name, Scopes: []string{"chat"}})
		require.NoError(t, err)
		made[name] = resp.GetApiKey().GetId()
	}
	_, err := keys.RevokeApiKey(ctx, &parleyv1.RevokeApiKeyRequest{Id: made["revoked"]})
	require.NoError(t, err)
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "SELECT set_config('app.org_id', $1, true)", e.A.ID.String())
	require.NoError(t, err)
	tag, err := tx.Exec(ctx, "UPDATE api_keys SET expires_at = now() - interval '1 hour' WHERE id = $1", made["expired"])
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
	require.NoError(t, tx.Commit(ctx))

	org, err := parleyv1connect.NewOrganizationServiceClient(http.DefaultClient, e.URL, connect.WithInterceptors(testenv.Bearer(e.A.Key))).
		GetOrganization(ctx, &parleyv1.GetOrganizationRequest{})
	require.NoError(t, err)
	var listed []string
	for _, u := range org.GetUsage() {
		listed = append(listed, u.GetApiKeyId())
	}
	require.Contains(t, listed, made["working"])
	require.NotContains(t, listed, made["revoked"])
	require.NotContains(t, listed, made["expired"], "an expired key's usage is listed")
}
