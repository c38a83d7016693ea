package jobs

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/parleyhq/parley/backend/account"
	"github.com/parleyhq/parley/backend/apperr"
	"github.com/parleyhq/parley/backend/auth"
	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/dbtest"
	"github.com/parleyhq/parley/backend/embed"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/knowledge"
	"github.com/parleyhq/parley/backend/netguard"
	"github.com/parleyhq/parley/backend/seal"
	"github.com/parleyhq/parley/backend/webhook"
)

// received is one request a receiver got.
type received struct {
	header http.Header
	body   []byte
}

// receiver is a local endpoint answering with answer(n) for its nth
// request (from 1), recording each.
type receiver struct {
	*httptest.Server
	mu     sync.Mutex
	got    []received
	answer func(n int, w http.ResponseWriter, r *http.Request)
}

func newReceiver(t *testing.T, answer func(n int, w http.ResponseWriter, r *http.Request)) *receiver {
	rc := &receiver{answer: answer}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		rc.got = append(rc.got, received{header: r.Header.Clone(), body: body})
		n := len(rc.got)
		rc.mu.Unlock()
		rc.answer(n, w, r)
	}))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *receiver) requests() []received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]received(nil), rc.got...)
}

var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}

type hookFixture struct {
	store   *db.Store
	org     uuid.UUID
	ctx     context.Context // the organization's admin principal
	svc     *webhook.Service
	d       *webhook.Deliverer
	newJobs func() *Client
}

// setupHooks makes an organization and the webhook service over a River
// client that runs deliveries; the service accepts loopback URLs, and so
// does the deliverer unless dialGuarded (then every dial is checked as in
// production).
func setupHooks(t *testing.T, dialGuarded bool) hookFixture {
	t.Helper()
	pool, _ := dbtest.NewPool(t)
	store := &db.Store{Pool: pool}
	org, _, err := account.Bootstrap(context.Background(), store, "A", "pro")
	require.NoError(t, err)
	key := make([]byte, 32)
	sealer, err := seal.New(key)
	require.NoError(t, err)
	allow := loopback
	if dialGuarded {
		allow = nil
	}
	d := &webhook.Deliverer{Store: store, Sealer: sealer, Guard: webhook.NewGuard(netguard.Config{Allow: allow})}
	f := hookFixture{store: store, org: org, d: d}
	f.newJobs = func() *Client {
		c, err := New(pool, nil, Config{Workers: true, Webhooks: d})
		require.NoError(t, err)
		return c
	}
	f.svc = &webhook.Service{
		Store: store, Sealer: sealer, Guard: webhook.NewGuard(netguard.Config{Allow: loopback}),
		Hooks: &webhook.Emitter{Jobs: f.newJobs()},
	}
	f.ctx = auth.WithPrincipal(context.Background(), &auth.Principal{OrgID: org, Scopes: []string{"admin"}})
	return f
}

// runSmall runs, until the test ends, the job workers of a small instance:
// one of each kind, so 4 delivery workers, 2 of them one organization's
// share.
func (f hookFixture) runSmall(t *testing.T) {
	t.Helper()
	c, err := New(f.store.Pool, nil, Config{Workers: true, MaxWorkers: 1, Webhooks: f.d, Store: f.store})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, 200*time.Millisecond, 15*time.Second) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// run runs a River client until the test ends or stop is called.
func (f hookFixture) run(t *testing.T) (stop func()) {
	t.Helper()
	c := f.newJobs()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, 200*time.Millisecond, 10*time.Second) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			require.NoError(t, <-done)
		})
	}
	t.Cleanup(stop)
	return stop
}

func (f hookFixture) create(t *testing.T, url string, events ...string) (*parleyv1.Webhook, string) {
	t.Helper()
	resp, err := f.svc.CreateWebhook(f.ctx, &parleyv1.CreateWebhookRequest{Url: url, Events: events})
	require.NoError(t, err)
	return resp.GetWebhook(), resp.GetSecret()
}

func (f hookFixture) deliveries(t *testing.T, hook string) []*parleyv1.WebhookDelivery {
	t.Helper()
	resp, err := f.svc.ListWebhookDeliveries(f.ctx, &parleyv1.ListWebhookDeliveriesRequest{WebhookId: hook})
	require.NoError(t, err)
	return resp.GetDeliveries()
}

// emit sends a form.submitted event in a tenant transaction that commits
// unless fail is set.
func (f hookFixture) emit(t *testing.T, fail bool) error {
	t.Helper()
	sub := &parleyv1.Submission{Id: uuid.NewString(), FormId: uuid.NewString(), Values: &structpb.Struct{Fields: map[string]*structpb.Value{
		"email": structpb.NewStringValue("ada@example.com"),
	}}}
	return f.store.TenantTx(context.Background(), f.org, func(tx pgx.Tx, _ *dbq.Queries) error {
		if err := f.svc.Hooks.Emit(context.Background(), tx, f.org, webhook.FormSubmitted, webhook.Of(sub)); err != nil {
			return err
		}
		if fail {
			return errors.New("the change fails after emitting")
		}
		return nil
	})
}

// verify checks a request's signature the way the specification defines
// it, without the library Parley signs with: base64 of HMAC-SHA256 over
// "id.timestamp.body" keyed with the secret's decoded bytes.
func verify(t *testing.T, secret string, r received) {
	t.Helper()
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(key), 24)
	id, ts := r.header.Get("webhook-id"), r.header.Get("webhook-timestamp")
	require.NotEmpty(t, id)
	sec, err := strconv.ParseInt(ts, 10, 64)
	require.NoError(t, err)
	require.InDelta(t, time.Now().Unix(), sec, 60)
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "." + string(r.body)))
	want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
	require.Equal(t, want, r.header.Get("webhook-signature"))
	require.Equal(t, "application/json", r.header.Get("Content-Type"))
}

// An event is delivered signed; a 500 is retried within seconds with the
// same webhook-id and body, and each attempt is listed.
func TestDeliveryRetriedAfterA500(t *testing.T) {
	t.Parallel()
	f := setupHooks(t, false)
	rc := newReceiver(t, func(n int, w http.ResponseWriter, _ *http.Request) {
		if n == 1 {
			http.Error(w, "the receiver is down", http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	hook, secret := f.create(t, rc.URL+"/hooks", webhook.FormSubmitted)
	require.True(t, strings.HasPrefix(secret, "whsec_"))
	f.run(t)
	require.NoError(t, f.emit(t, false))

	require.Eventually(t, func() bool {
		ds := f.deliveries(t, hook.GetId())
		return len(ds) == 1 && ds[0].GetStatus() == "succeeded"
	}, 20*time.Second, 100*time.Millisecond)
	got := rc.requests()
	require.Len(t, got, 2)
	for _, r := range got {
		verify(t, secret, r)
	}
	require.Equal(t, got[0].header.Get("webhook-id"), got[1].header.Get("webhook-id"), "a retry is the same message")
	require.Equal(t, got[0].body, got[1].body)
	require.Contains(t, string(got[0].body), `"type":"form.submitted"`)
	require.Contains(t, string(got[0].body), `"email":"ada@example.com"`)

	d := f.deliveries(t, hook.GetId())[0]
	require.Equal(t, got[0].header.Get("webhook-id"), d.GetEventId())
	require.Len(t, d.GetAttempts(), 2)
	first, second := d.GetAttempts()[0], d.GetAttempts()[1]
	require.EqualValues(t, 500, first.GetStatusCode())
	require.Contains(t, first.GetError(), "HTTP 500: the receiver is down")
	require.EqualValues(t, 204, second.GetStatusCode())
	require.Empty(t, second.GetError())
	retry := second.GetTime().AsTime().Sub(first.GetTime().AsTime())
	require.Less(t, retry, 10*time.Second, "the first retry comes within 10 s")

	// A replay sends the same message again as a new delivery.
	rep, err := f.svc.ReplayWebhookDelivery(f.ctx, &parleyv1.ReplayWebhookDeliveryRequest{WebhookId: hook.GetId(), DeliveryId: d.GetId()})
	require.NoError(t, err)
	require.NotEqual(t, d.GetId(), rep.GetDelivery().GetId())
	require.Eventually(t, func() bool { return len(rc.requests()) == 3 }, 10*time.Second, 50*time.Millisecond)
	third := rc.requests()[2]
	verify(t, secret, third)
	require.Equal(t, d.GetEventId(), third.header.Get("webhook-id"))
	require.Equal(t, got[0].body, third.body)
}

// A change that rolls back sends nothing: no delivery, no job, no request.
func TestRolledBackChangeSendsNothing(t *testing.T) {
	t.Parallel()
	f := setupHooks(t, false)
	rc := newReceiver(t, func(_ int, w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	hook, _ := f.create(t, rc.URL, webhook.FormSubmitted)
	f.run(t)
	require.Error(t, f.emit(t, true))
	var jobs int
	require.NoError(t, f.store.Pool.QueryRow(context.Background(), "SELECT count(*) FROM river_job WHERE kind = 'webhook_delivery'").Scan(&jobs))
	require.Zero(t, jobs)
	require.Empty(t, f.deliveries(t, hook.GetId()))

	// The same change committed is delivered (the receiver works).
	require.NoError(t, f.emit(t, false))
	require.Eventually(t, func() bool { return len(rc.requests()) == 1 }, 10*time.Second, 50*time.Millisecond)
	time.Sleep(300 * time.Millisecond)
	require.Len(t, rc.requests(), 1, "only the committed change was sent")
}

// An endpoint subscribed to other events, or disabled, gets nothing.
func TestOnlySubscribedEnabledEndpoints(t *testing.T) {
	t.Parallel()
	f := setupHooks(t, false)
	other, _ := f.create(t, "http://127.0.0.1:9/other", webhook.LeadCreated)
	off, _ := f.create(t, "http://127.0.0.1:9/off", webhook.FormSubmitted)
	_, err := f.svc.UpdateWebhook(f.ctx, &parleyv1.UpdateWebhookRequest{Id: off.GetId(), UpdateMask: mask("enabled"), Enabled: ptr(false)})
	require.NoError(t, err)
	on, _ := f.create(t, "http://127.0.0.1:9/on", webhook.FormSubmitted, webhook.LeadCreated)
	require.NoError(t, f.emit(t, false))
	require.Empty(t, f.deliveries(t, other.GetId()))
	require.Empty(t, f.deliveries(t, off.GetId()))
	require.Len(t, f.deliveries(t, on.GetId()), 1)
}

// A worker stopped in the middle of a delivery leaves it to be sent when
// workers run again.
func TestDeliveryResumesAfterRestart(t *testing.T) {
	t.Parallel()
	f := setupHooks(t, false)
	hanging := make(chan struct{})
	rc := newReceiver(t, func(n int, w http.ResponseWriter, r *http.Request) {
		if n == 1 {
			close(hanging)
			<-r.Context().Done() // until the worker gives up the request
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	hook, secret := f.create(t, rc.URL, webhook.FormSubmitted)
	stop := f.run(t)
	require.NoError(t, f.emit(t, false))
	select {
	case <-hanging:
	case <-time.After(10 * time.Second):
		t.Fatal("the delivery never reached the receiver")
	}
	stop() // mid-delivery: the attempt is cancelled
	ds := f.deliveries(t, hook.GetId())
	require.Len(t, ds, 1)
	require.Equal(t, "pending", ds[0].GetStatus())
	// The attempt says what happened to it, not that the endpoint failed.
	require.Len(t, ds[0].GetAttempts(), 1)
	require.Equal(t, webhook.Interrupted, ds[0].GetAttempts()[0].GetError())
	require.Len(t, rc.requests(), 1)

	f.run(t)
	require.Eventually(t, func() bool {
		ds := f.deliveries(t, hook.GetId())
		return ds[0].GetStatus() == "succeeded"
	}, 20*time.Second, 100*time.Millisecond)
	got := rc.requests()
	require.Len(t, got, 2)
	verify(t, secret, got[1])
	require.Equal(t, got[0].header.Get("webhook-id"), got[1].header.Get("webhook-id"))
}

// A delivery whose process was killed mid-attempt (SIGKILL, out of memory,
// a node lost) is left running in River's table; the next process sends it
// once its attempt's time is over, not an hour later (River's default
// rescue), every event of the crash held back meanwhile.
func TestDeliveryOfAKilledProcessIsSentAgainSoon(t *testing.T) {
	t.Parallel()
	f := setupHooks(t, false)
	rc := newReceiver(t, func(int, http.ResponseWriter, *http.Request) {})
	hook, _ := f.create(t, rc.URL, webhook.FormSubmitted)
	require.NoError(t, f.emit(t, false))
	// What a process killed 3 minutes into the attempt leaves.
	tag, err := f.store.Pool.Exec(context.Background(), `UPDATE river_job SET state = 'running', attempt = 1,
		attempted_at = now() - interval '3 minutes', attempted_by = '{killed}' WHERE kind = $1`, DeliverArgs{}.Kind())
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())

	f.run(t)
	require.Eventually(t, func() bool {
		return f.deliveries(t, hook.GetId())[0].GetStatus() == "succeeded"
	}, 45*time.Second, 200*time.Millisecond, "the killed process's delivery was not sent again")
	require.Len(t, rc.requests(), 1)
}

// Every dial is checked: a name that resolves to loopback at send time is
// refused (the receiver is never reached) and the attempt says why.
func TestDialToPrivateAddressRefused(t *testing.T) {
	t.Parallel()
	f := setupHooks(t, true)
	rc := newReceiver(t, func(_ int, w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	port := rc.Listener.Addr().(interface{ AddrPort() netip.AddrPort }).AddrPort().Port()
	// Accepted at create by a service that allows loopback; the deliverer
	// does not.
	hook, _ := f.create(t, "http://127.0.0.1:"+strconv.Itoa(int(port))+"/", webhook.FormSubmitted)
	require.NoError(t, f.emit(t, false))
	ds := f.deliveries(t, hook.GetId())
	require.Len(t, ds, 1)
	id, err := uuid.Parse(ds[0].GetId())
	require.NoError(t, err)
	err = f.d.Deliver(context.Background(), f.org, id, 1, false)
	require.ErrorIs(t, err, webhook.ErrAttempt)
	a := f.deliveries(t, hook.GetId())[0].GetAttempts()
	require.Len(t, a, 1)
	require.Contains(t, a[0].GetError(), "not a public address")
	require.Zero(t, a[0].GetStatusCode())
	require.Empty(t, rc.requests())

	// The same through a name: localhost is looked up, then refused at dial.
	require.NoError(t, f.store.Tenant(context.Background(), f.org, func(q *dbq.Queries) error {
		hid := uuid.MustParse(hook.GetId())
		_, err := q.UpdateWebhook(context.Background(), dbq.UpdateWebhookParams{OrgID: f.org, ID: hid, Url: ptr("http://localhost:" + strconv.Itoa(int(port)) + "/")})
		return err
	}))
	err = f.d.Deliver(context.Background(), f.org, id, 2, false)
	require.ErrorIs(t, err, webhook.ErrAttempt)
	a = f.deliveries(t, hook.GetId())[0].GetAttempts()
	require.Len(t, a, 2)
	require.Contains(t, a[1].GetError(), "localhost:"+strconv.Itoa(int(port))+" does not resolve to a public address")
	require.Empty(t, rc.requests())
}

// An attempt cut by the job's own deadline (not by the worker stopping) is
// a failed attempt like any: on the last one the delivery fails, rather
// than being run again at once as an interrupted one is.
func TestDeadlineIsAFailedAttempt(t *testing.T) {
	t.Parallel()
	f := setupHooks(t, false)
	rc := newReceiver(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done() // no answer
	})
	hook, _ := f.create(t, rc.URL, webhook.FormSubmitted)
	require.NoError(t, f.emit(t, false))
	id := uuid.MustParse(f.deliveries(t, hook.GetId())[0].GetId())
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err := f.d.Deliver(ctx, f.org, id, webhook.MaxAttempts, true)
	require.ErrorIs(t, err, webhook.ErrAttempt)
	require.NotErrorIs(t, err, webhook.ErrInterrupted)
	d := f.deliveries(t, hook.GetId())[0]
	require.Equal(t, "failed", d.GetStatus())
	require.NotEqual(t, webhook.Interrupted, d.GetAttempts()[0].GetError())
}

// The last attempt's failure settles the delivery as failed and marks its
// endpoint failing, until a delivery succeeds; a redirect is an answer,
// not followed.
func TestLastFailureMarksEndpointFailing(t *testing.T) {
	t.Parallel()
	f := setupHooks(t, false)
	var redirect sync.Once
	target := newReceiver(t, func(_ int, w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	rc := newReceiver(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		served := false
		redirect.Do(func() { http.Redirect(w, r, target.URL, http.StatusFound); served = true })
		if !served {
			w.WriteHeader(http.StatusOK)
		}
	})
	hook, _ := f.create(t, rc.URL, webhook.FormSubmitted)
	require.NoError(t, f.emit(t, false))
	ds := f.deliveries(t, hook.GetId())
	id := uuid.MustParse(ds[0].GetId())
	require.ErrorIs(t, f.d.Deliver(context.Background(), f.org, id, webhook.MaxAttempts, true), webhook.ErrAttempt)
	require.Empty(t, target.requests(), "the redirect was followed")

	got, err := f.svc.GetWebhook(f.ctx, &parleyv1.GetWebhookRequest{Id: hook.GetId()})
	require.NoError(t, err)
	require.True(t, got.GetWebhook().GetFailing())
	require.NotNil(t, got.GetWebhook().GetFailingSince())
	require.Contains(t, got.GetWebhook().GetLastError(), "HTTP 302")
	d := f.deliveries(t, hook.GetId())[0]
	require.Equal(t, "failed", d.GetStatus())
	require.EqualValues(t, 302, d.GetAttempts()[0].GetStatusCode())
	// A settled delivery is not sent again.
	require.NoError(t, f.d.Deliver(context.Background(), f.org, id, 1, false))
	require.Len(t, rc.requests(), 1)

	// A later success clears the mark.
	require.NoError(t, f.emit(t, false))
	next := f.deliveries(t, hook.GetId())[0]
	require.NoError(t, f.d.Deliver(context.Background(), f.org, uuid.MustParse(next.GetId()), 1, false))
	got, err = f.svc.GetWebhook(f.ctx, &parleyv1.GetWebhookRequest{Id: hook.GetId()})
	require.NoError(t, err)
	require.False(t, got.GetWebhook().GetFailing())
}

// An answer whose body Postgres cannot store in text (a NUL, bytes that
// are not UTF-8) is still recorded: the attempt is listed with its status
// and a cleaned error, the last one fails the delivery and marks the
// endpoint failing.
func TestUnstorableAnswerBodyRecorded(t *testing.T) {
	t.Parallel()
	f := setupHooks(t, false)
	bodies := []string{"\x00", "bad \xff\xfe body\x01"}
	rc := newReceiver(t, func(n int, w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = io.WriteString(w, bodies[(n-1)%len(bodies)])
	})
	hook, _ := f.create(t, rc.URL, webhook.FormSubmitted)
	require.NoError(t, f.emit(t, false))
	id := uuid.MustParse(f.deliveries(t, hook.GetId())[0].GetId())

	require.ErrorIs(t, f.d.Deliver(context.Background(), f.org, id, 1, false), webhook.ErrAttempt)
	require.ErrorIs(t, f.d.Deliver(context.Background(), f.org, id, webhook.MaxAttempts, true), webhook.ErrAttempt)
	require.Len(t, rc.requests(), 2)
	d := f.deliveries(t, hook.GetId())[0]
	require.Equal(t, "failed", d.GetStatus())
	a := d.GetAttempts()
	require.Len(t, a, 2)
	for _, at := range a {
		require.EqualValues(t, 500, at.GetStatusCode())
	}
	require.Equal(t, "HTTP 500:", a[0].GetError())
	require.Equal(t, "HTTP 500: bad \uFFFD body", a[1].GetError())
	got, err := f.svc.GetWebhook(f.ctx, &parleyv1.GetWebhookRequest{Id: hook.GetId()})
	require.NoError(t, err)
	require.True(t, got.GetWebhook().GetFailing())
	require.Equal(t, "HTTP 500: bad \uFFFD body", got.GetWebhook().GetLastError())
}

// River asks the worker when to retry: webhook.Schedule, attempt by
// attempt.
func TestDeliverWorkerNextRetry(t *testing.T) {
	t.Parallel()
	w := &DeliverWorker{}
	for attempt := 1; attempt < webhook.MaxAttempts; attempt++ {
		before := time.Now()
		next := w.NextRetry(&river.Job[DeliverArgs]{JobRow: &rivertype.JobRow{Attempt: attempt}})
		wait := next.Sub(before)
		require.GreaterOrEqual(t, wait, webhook.Schedule[attempt-1])
		require.Less(t, wait, webhook.Schedule[attempt-1]+time.Second)
	}
	require.Equal(t, webhook.MaxAttempts, DeliverArgs{}.InsertOpts().MaxAttempts)
}

// An endpoint deleted while its deliveries record their last attempts
// (each marks the endpoint failing) is deleted, and the deliveries simply
// end: the delete and the workers take the endpoint's row before its
// deliveries', so neither can wait for the other in a cycle (40P01, which
// answered the delete 500). Each round lets n deliveries reach the
// endpoint together, which answers them all 500 at once as the delete
// starts, so that their records and the delete overlap.
func TestDeleteRacingDeliveriesNeverDeadlocks(t *testing.T) {
	t.Parallel()
	const rounds, n = 10, 8
	f := setupHooks(t, false)
	ctx := context.Background()
	for round := range rounds {
		answer := make(chan struct{})
		var once sync.Once
		rc := newReceiver(t, func(k int, w http.ResponseWriter, _ *http.Request) {
			if k == n {
				once.Do(func() { close(answer) })
			}
			select {
			case <-answer:
			case <-time.After(5 * time.Second):
			}
			http.Error(w, "down", http.StatusInternalServerError)
		})
		hook, _ := f.create(t, rc.URL, webhook.FormSubmitted)
		for range n {
			require.NoError(t, f.emit(t, false))
		}
		ds := f.deliveries(t, hook.GetId())
		require.Len(t, ds, n)

		var wg sync.WaitGroup
		errs := make([]error, n)
		var delErr error
		wg.Add(n + 1)
		for i, d := range ds {
			go func() {
				defer wg.Done()
				errs[i] = f.d.Deliver(ctx, f.org, uuid.MustParse(d.GetId()), webhook.MaxAttempts, true)
			}()
		}
		go func() {
			defer wg.Done()
			select {
			case <-answer:
			case <-time.After(10 * time.Second):
				// Fewer than n deliveries reached the endpoint (each waits
				// 5 s at most there): no delete to race.
				delErr = fmt.Errorf("waited 10 s for %d deliveries to reach the endpoint together (it saw %d): the delete did not run", n, len(rc.requests()))
				return
			}
			_, delErr = f.svc.DeleteWebhook(f.ctx, &parleyv1.DeleteWebhookRequest{Id: hook.GetId()})
		}()
		done := make(chan struct{})
		go func() {
			wg.Wait()
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("round %d: the delete and the deliveries had not ended after 30 s (stuck waiting for each other?)", round)
		}
		require.NoError(t, delErr, "round %d: the delete failed", round)
		for i, err := range errs {
			if err != nil {
				require.ErrorIs(t, err, webhook.ErrAttempt, "round %d, delivery %d", round, i)
			}
		}
		require.Len(t, rc.requests(), n)
		_, err := f.svc.GetWebhook(f.ctx, &parleyv1.GetWebhookRequest{Id: hook.GetId()})
		require.Equal(t, apperr.NotFound, apperr.CodeOf(err))
	}
}

func ptr[T any](v T) *T { return &v }

func mask(paths ...string) *fieldmaskpb.FieldMask { return &fieldmaskpb.FieldMask{Paths: paths} }

// Ingestion's outcome is an event: datasource.failed when the document
// cannot be read, datasource.synced when it is searchable, each with the
// datasource as the API shows it.
func TestDatasourceEvents(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		content, event, status string
	}{
		{"   \n\n  ", webhook.DatasourceFailed, "error"},
		{longText(3), webhook.DatasourceSynced, "synced"},
	} {
		w := &IngestWorker{}
		f := setup(t, tc.content, w)
		w.K = knowledge.New(f.store, embed.Lexical{}, netguard.New(netguard.Config{}))
		sealer, err := seal.New(make([]byte, 32))
		require.NoError(t, err)
		c, err := New(f.store.Pool, nil, Config{})
		require.NoError(t, err)
		w.K.Hooks = &webhook.Emitter{Jobs: c}
		svc := &webhook.Service{Store: f.store, Sealer: sealer, Guard: webhook.NewGuard(netguard.Config{Allow: loopback}), Hooks: w.K.Hooks}
		ctx := auth.WithPrincipal(context.Background(), &auth.Principal{OrgID: f.org, Scopes: []string{"admin"}})
		hook, err := svc.CreateWebhook(ctx, &parleyv1.CreateWebhookRequest{Url: "http://127.0.0.1:9/", Events: []string{webhook.DatasourceSynced, webhook.DatasourceFailed}})
		require.NoError(t, err)

		f.work(t, 1, 5)
		list, err := svc.ListWebhookDeliveries(ctx, &parleyv1.ListWebhookDeliveriesRequest{WebhookId: hook.GetWebhook().GetId()})
		require.NoError(t, err)
		require.Len(t, list.GetDeliveries(), 1, tc.event)
		require.Equal(t, tc.event, list.GetDeliveries()[0].GetEventType())
		var body []byte
		require.NoError(t, f.store.Tenant(context.Background(), f.org, func(q *dbq.Queries) error {
			d, err := q.GetWebhookDelivery(context.Background(), dbq.GetWebhookDeliveryParams{OrgID: f.org, ID: uuid.MustParse(list.GetDeliveries()[0].GetId())})
			body = d.Body
			return err
		}))
		require.Contains(t, string(body), `"id":"`+f.ds.String()+`"`)
		require.Contains(t, string(body), `"status":"`+tc.status+`"`)
	}
}
