package webhook_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/gen/parley/v1/parleyv1connect"
	"github.com/parleyhq/parley/backend/server"
	"github.com/parleyhq/parley/backend/testenv"
	"github.com/parleyhq/parley/backend/webhook"
)

type hookJSON struct {
	ID, URL, Description, Secret string
	Events                       []string
	Enabled, Failing             bool
}

type errJSON struct {
	Error struct{ Code, Message, Field string }
}

func allowLoopback(c *server.Config) {
	c.FetchAllow = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
}

// sink is a local endpoint that answers 200 and keeps what it got.
type sink struct {
	*httptest.Server
	mu  sync.Mutex
	got []*http.Request
	bod [][]byte
}

func newSink(t *testing.T) *sink {
	s := &sink{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.got, s.bod = append(s.got, r), append(s.bod, b)
		s.mu.Unlock()
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *sink) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.got)
}

// The REST paths manage an endpoint end to end: the secret is shown at
// create and rotate only, a test event arrives signed with the current
// secret and is listed among the deliveries, and a deleted endpoint is
// gone. The paths also answer without /api.
func TestWebhooksREST(t *testing.T) {
	t.Parallel()
	e := testenv.New(t, testenv.WithWorkers, allowLoopback)
	rcv := newSink(t)
	r := e.Do("POST", "/api/webhooks", e.A.Key, map[string]any{
		"url": rcv.URL + "/in", "events": []string{"form.submitted", "lead.created"}, "description": "CRM",
	})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var created hookJSON
	r.JSON(t, &created)
	require.NotEmpty(t, created.ID)
	require.True(t, strings.HasPrefix(created.Secret, "whsec_"))
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(created.Secret, "whsec_"))
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(key), 24)
	require.Equal(t, "/api/webhooks/"+created.ID, r.Header.Get("Location"))
	require.True(t, created.Enabled)

	for _, path := range []string{"/api/webhooks/" + created.ID, "/webhooks/" + created.ID, "/api/webhooks"} {
		r = e.Do("GET", path, e.A.Key, nil)
		require.Equal(t, http.StatusOK, r.Status, "%s %s", path, r.Body)
		require.NotContains(t, string(r.Body), "whsec_", "%s shows the secret", path)
		require.NotContains(t, string(r.Body), `"secret"`)
	}
	var page struct {
		Webhooks   []hookJSON
		NextCursor *string
	}
	r.JSON(t, &page)
	require.Len(t, page.Webhooks, 1)
	require.Nil(t, page.NextCursor)
	require.Equal(t, []string{"form.submitted", "lead.created"}, page.Webhooks[0].Events)

	r = e.Do("PUT", "/api/webhooks/"+created.ID, e.A.Key, map[string]any{"description": "CRM (prod)", "events": []string{"lead.created"}})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var updated hookJSON
	r.JSON(t, &updated)
	require.Equal(t, "CRM (prod)", updated.Description)
	require.Equal(t, []string{"lead.created"}, updated.Events)
	require.Equal(t, rcv.URL+"/in", updated.URL)

	r = e.Do("POST", "/api/webhooks/"+created.ID+"/rotate-secret", e.A.Key, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var rotated hookJSON
	r.JSON(t, &rotated)
	require.True(t, strings.HasPrefix(rotated.Secret, "whsec_"))
	require.NotEqual(t, created.Secret, rotated.Secret)

	r = e.Do("POST", "/api/webhooks/"+created.ID+"/test", e.A.Key, nil)
	require.Equal(t, http.StatusAccepted, r.Status, "%s", r.Body)
	var d struct{ ID, EventID, EventType, Status string }
	r.JSON(t, &d)
	require.Equal(t, "webhook.test", d.EventType)
	require.Equal(t, "pending", d.Status)
	require.Eventually(t, func() bool { return rcv.count() == 1 }, 15*time.Second, 50*time.Millisecond)
	rcv.mu.Lock()
	req, body := rcv.got[0], rcv.bod[0]
	rcv.mu.Unlock()
	// Signed with the rotated secret (checked by hand, as a receiver would).
	newKey, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(rotated.Secret, "whsec_"))
	require.NoError(t, err)
	mac := hmac.New(sha256.New, newKey)
	mac.Write([]byte(req.Header.Get("webhook-id") + "." + req.Header.Get("webhook-timestamp") + "." + string(body)))
	require.Equal(t, "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)), req.Header.Get("webhook-signature"))
	require.Equal(t, d.EventID, req.Header.Get("webhook-id"))
	var payload struct {
		Type      string
		Timestamp time.Time
		Data      map[string]any
	}
	require.NoError(t, json.Unmarshal(body, &payload))
	require.Equal(t, "webhook.test", payload.Type)
	require.WithinDuration(t, time.Now(), payload.Timestamp, time.Minute)
	require.Equal(t, created.ID, payload.Data["id"])
	require.NotContains(t, string(body), "whsec_")

	require.Eventually(t, func() bool {
		r = e.Do("GET", "/api/webhooks/"+created.ID+"/deliveries", e.A.Key, nil)
		return strings.Contains(string(r.Body), `"status":"succeeded"`)
	}, 10*time.Second, 50*time.Millisecond)
	var deliveries struct {
		Deliveries []struct {
			ID, EventType, Status string
			Attempts              []struct {
				Attempt, StatusCode int
				DurationMs          int64
				Time, Error         string
			}
		}
		NextCursor *string
	}
	r.JSON(t, &deliveries)
	require.Len(t, deliveries.Deliveries, 1)
	require.Len(t, deliveries.Deliveries[0].Attempts, 1)
	require.Equal(t, 200, deliveries.Deliveries[0].Attempts[0].StatusCode)
	require.NotEmpty(t, deliveries.Deliveries[0].Attempts[0].Time)

	r = e.Do("POST", "/api/webhooks/"+created.ID+"/deliveries/"+d.ID+"/replay", e.A.Key, nil)
	require.Equal(t, http.StatusAccepted, r.Status, "%s", r.Body)
	require.Eventually(t, func() bool { return rcv.count() == 2 }, 15*time.Second, 50*time.Millisecond)

	r = e.Do("DELETE", "/webhooks/"+created.ID, e.A.Key, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	r = e.Do("GET", "/api/webhooks/"+created.ID, e.A.Key, nil)
	require.Equal(t, http.StatusNotFound, r.Status, "%s", r.Body)
}

// Bad input is 400 naming the field; a URL at a private, loopback or
// metadata address is refused unless --fetch-allow opens its range.
func TestWebhookValidation(t *testing.T) {
	t.Parallel()
	e := testenv.New(t, testenv.WithWorkers)
	good := []string{"form.submitted"}
	for _, tc := range []struct {
		name  string
		body  map[string]any
		field string
	}{
		{"no url", map[string]any{"events": good}, "url"},
		{"not a url", map[string]any{"url": "not a url", "events": good}, "url"},
		{"ftp", map[string]any{"url": "ftp://example.com/x", "events": good}, "url"},
		{"credentials", map[string]any{"url": "https://user:pw@example.com/x", "events": good}, "url"},
		{"loopback", map[string]any{"url": "http://127.0.0.1:8080/hook", "events": good}, "url"},
		{"ipv6 loopback", map[string]any{"url": "http://[::1]/hook", "events": good}, "url"},
		{"private", map[string]any{"url": "http://10.1.2.3/hook", "events": good}, "url"},
		{"metadata", map[string]any{"url": "http://169.254.169.254/latest/meta-data", "events": good}, "url"},
		{"localhost", map[string]any{"url": "http://localhost:9/hook", "events": good}, "url"},
		{"octal notation", map[string]any{"url": "http://0177.0.0.1/hook", "events": good}, "url"},
		{"no events", map[string]any{"url": "https://203.0.113.7/hook"}, "events"},
		{"empty events", map[string]any{"url": "https://203.0.113.7/hook", "events": []string{}}, "events"},
		{"unknown event", map[string]any{"url": "https://203.0.113.7/hook", "events": []string{"lead.created", "lead.deleted"}}, "events[1]"},
		{"repeated event", map[string]any{"url": "https://203.0.113.7/hook", "events": []string{"lead.created", "lead.created"}}, "events"},
		{"long description", map[string]any{"url": "https://203.0.113.7/hook", "events": good, "description": strings.Repeat("x", 501)}, "description"},
		{"unknown key", map[string]any{"url": "https://203.0.113.7/hook", "events": good, "secret": "whsec_x"}, "secret"},
	} {
		r := e.Do("POST", "/api/webhooks", e.A.Key, tc.body)
		require.Equal(t, http.StatusBadRequest, r.Status, "%s: %s", tc.name, r.Body)
		var b errJSON
		r.JSON(t, &b)
		require.Equal(t, tc.field, b.Error.Field, "%s: %s", tc.name, r.Body)
	}
	r := e.Do("POST", "/api/webhooks", e.A.Key, map[string]any{"url": "https://203.0.113.7/hook", "events": good})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var h hookJSON
	r.JSON(t, &h)
	for _, tc := range []struct {
		body  map[string]any
		field string
	}{
		{map[string]any{"url": "http://192.168.1.1/"}, "url"},
		{map[string]any{"events": []string{}}, "events"},
		{map[string]any{"events": []string{"nope"}}, "events[0]"},
		{map[string]any{}, "body"},
	} {
		r := e.Do("PUT", "/api/webhooks/"+h.ID, e.A.Key, tc.body)
		require.Equal(t, http.StatusBadRequest, r.Status, "%v: %s", tc.body, r.Body)
		var b errJSON
		r.JSON(t, &b)
		require.Equal(t, tc.field, b.Error.Field, "%v: %s", tc.body, r.Body)
	}
	r = e.Do("GET", "/api/webhooks/"+h.ID, e.A.Key, nil)
	require.Contains(t, string(r.Body), "203.0.113.7", "a refused update changed the endpoint")

	// An organization has at most MaxWebhooks endpoints; deleting one makes
	// room.
	for i := 1; i < webhook.MaxWebhooks; i++ {
		r = e.Do("POST", "/api/webhooks", e.A.Key, map[string]any{"url": fmt.Sprintf("https://203.0.113.7/hook/%d", i), "events": good})
		require.Equal(t, http.StatusCreated, r.Status, "%d: %s", i, r.Body)
	}
	r = e.Do("POST", "/api/webhooks", e.A.Key, map[string]any{"url": "https://203.0.113.7/one-more", "events": good})
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%s", r.Body)
	require.Contains(t, string(r.Body), "at most")
	require.Equal(t, http.StatusOK, e.Do("DELETE", "/api/webhooks/"+h.ID, e.A.Key, nil).Status)
	r = e.Do("POST", "/api/webhooks", e.A.Key, map[string]any{"url": "https://203.0.113.7/one-more", "events": good})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)

	// --fetch-allow opens a range.
	open := testenv.New(t, testenv.WithWorkers, allowLoopback)
	r = open.Do("POST", "/api/webhooks", open.A.Key, map[string]any{"url": "http://127.0.0.1:9/hook", "events": good})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	r = open.Do("POST", "/api/webhooks", open.A.Key, map[string]any{"url": "http://10.1.2.3/hook", "events": good})
	require.Equal(t, http.StatusBadRequest, r.Status, "%s", r.Body)
}

// Another organization's endpoint and deliveries are refused on every
// path and RPC, as the API refuses other organizations' resources
// (DESIGN.md: 403), and nothing of them changes; unknown ids are 404.
func TestWebhookTenantIsolation(t *testing.T) {
	t.Parallel()
	e := testenv.New(t, testenv.WithWorkers, allowLoopback)
	rcv := newSink(t)
	r := e.Do("POST", "/api/webhooks", e.A.Key, map[string]any{"url": rcv.URL, "events": []string{"lead.created"}, "description": "A's"})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var h hookJSON
	r.JSON(t, &h)
	r = e.Do("POST", "/api/webhooks/"+h.ID+"/test", e.A.Key, nil)
	require.Equal(t, http.StatusAccepted, r.Status, "%s", r.Body)
	var d struct{ ID string }
	r.JSON(t, &d)
	require.Eventually(t, func() bool { return rcv.count() == 1 }, 15*time.Second, 50*time.Millisecond)

	base := "/api/webhooks/" + h.ID
	for _, c := range []struct{ method, path string }{
		{"GET", base}, {"PUT", base}, {"DELETE", base}, {"POST", base + "/rotate-secret"}, {"POST", base + "/test"},
		{"GET", base + "/deliveries"}, {"POST", base + "/deliveries/" + d.ID + "/replay"},
	} {
		var body any
		if c.method == "PUT" {
			body = map[string]any{"description": "B's now"}
		}
		r := e.Do(c.method, c.path, e.B.Key, body)
		require.Equal(t, http.StatusForbidden, r.Status, "%s %s: %s", c.method, c.path, r.Body)
		require.NotContains(t, string(r.Body), rcv.URL)
		unknown := strings.Replace(c.path, h.ID, "0190a1b2-0000-7000-8000-000000000000", 1)
		r = e.Do(c.method, unknown, e.A.Key, body)
		require.Equal(t, http.StatusNotFound, r.Status, "%s %s: %s", c.method, unknown, r.Body)
	}
	// B's own endpoint cannot replay A's delivery.
	r = e.Do("POST", "/api/webhooks", e.B.Key, map[string]any{"url": rcv.URL, "events": []string{"lead.created"}})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var hb hookJSON
	r.JSON(t, &hb)
	r = e.Do("POST", "/api/webhooks/"+hb.ID+"/deliveries/"+d.ID+"/replay", e.B.Key, nil)
	require.Equal(t, http.StatusForbidden, r.Status, "%s", r.Body)
	r = e.Do("GET", "/api/webhooks", e.B.Key, nil)
	require.NotContains(t, string(r.Body), h.ID)

	client := parleyv1connect.NewWebhookServiceClient(http.DefaultClient, e.URL, connect.WithInterceptors(testenv.Bearer(e.B.Key)))
	ctx := context.Background()
	for name, call := range map[string]func() error{
		"get": func() error { _, err := client.GetWebhook(ctx, &parleyv1.GetWebhookRequest{Id: h.ID}); return err },
		"update": func() error {
			_, err := client.UpdateWebhook(ctx, &parleyv1.UpdateWebhookRequest{Id: h.ID, UpdateMask: mask("description"), Description: ptr("x")})
			return err
		},
		"delete": func() error {
			_, err := client.DeleteWebhook(ctx, &parleyv1.DeleteWebhookRequest{Id: h.ID})
			return err
		},
		"rotate": func() error {
			_, err := client.RotateWebhookSecret(ctx, &parleyv1.RotateWebhookSecretRequest{Id: h.ID})
			return err
		},
		"test": func() error { _, err := client.TestWebhook(ctx, &parleyv1.TestWebhookRequest{Id: h.ID}); return err },
		"deliveries": func() error {
			_, err := client.ListWebhookDeliveries(ctx, &parleyv1.ListWebhookDeliveriesRequest{WebhookId: h.ID})
			return err
		},
		"replay": func() error {
			_, err := client.ReplayWebhookDelivery(ctx, &parleyv1.ReplayWebhookDeliveryRequest{WebhookId: h.ID, DeliveryId: d.ID})
			return err
		},
	} {
		err := call()
		var ce *connect.Error
		require.True(t, errors.As(err, &ce), "%s: %v", name, err)
		require.Equal(t, connect.CodePermissionDenied, ce.Code(), "%s: %v", name, err)
	}

	// A's endpoint is as it was, and got only A's test event.
	r = e.Do("GET", base, e.A.Key, nil)
	require.Equal(t, http.StatusOK, r.Status)
	require.Contains(t, string(r.Body), `"description":"A's"`)
	r = e.Do("GET", base+"/deliveries", e.A.Key, nil)
	var page struct{ Deliveries []struct{ ID string } }
	r.JSON(t, &page)
	require.Len(t, page.Deliveries, 1)
	require.Equal(t, 1, rcv.count())
}

// WebhookService over Connect: an admin key creates and lists; the
// schema's rules and the URL check apply as over REST.
func TestWebhookServiceConnect(t *testing.T) {
	t.Parallel()
	e := testenv.New(t, testenv.WithWorkers)
	client := parleyv1connect.NewWebhookServiceClient(http.DefaultClient, e.URL, connect.WithInterceptors(testenv.Bearer(e.A.Key)))
	ctx := context.Background()
	created, err := client.CreateWebhook(ctx, &parleyv1.CreateWebhookRequest{Url: "https://203.0.113.7/hook", Events: []string{"message.created"}})
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(created.GetSecret(), "whsec_"))
	list, err := client.ListWebhooks(ctx, &parleyv1.ListWebhooksRequest{})
	require.NoError(t, err)
	require.Len(t, list.GetWebhooks(), 1)
	require.Equal(t, created.GetWebhook().GetId(), list.GetWebhooks()[0].GetId())

	_, err = client.CreateWebhook(ctx, &parleyv1.CreateWebhookRequest{Url: "http://127.0.0.1/", Events: []string{"message.created"}})
	require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err), "%v", err)
	_, err = client.CreateWebhook(ctx, &parleyv1.CreateWebhookRequest{Url: "https://203.0.113.7/hook"})
	require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err), "%v", err)

	// An update that names no field is refused, as REST's empty body is.
	id := created.GetWebhook().GetId()
	for _, m := range []*fieldmaskpb.FieldMask{nil, {}} {
		_, err = client.UpdateWebhook(ctx, &parleyv1.UpdateWebhookRequest{Id: id, UpdateMask: m, Description: ptr("ignored")})
		require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err), "%v", err)
		require.ErrorContains(t, err, "update_mask")
	}

	// A paused endpoint is sent no test and no replay: refused, nothing
	// written, rather than a delivery that fails at once.
	sent, err := client.TestWebhook(ctx, &parleyv1.TestWebhookRequest{Id: id})
	require.NoError(t, err)
	off := false
	_, err = client.UpdateWebhook(ctx, &parleyv1.UpdateWebhookRequest{Id: id, Enabled: &off, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"enabled"}}})
	require.NoError(t, err)
	_, err = client.TestWebhook(ctx, &parleyv1.TestWebhookRequest{Id: id})
	require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(err), "%v", err)
	require.ErrorContains(t, err, "paused")
	_, err = client.ReplayWebhookDelivery(ctx, &parleyv1.ReplayWebhookDeliveryRequest{WebhookId: id, DeliveryId: sent.GetDelivery().GetId()})
	require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(err), "%v", err)
	ds, err := client.ListWebhookDeliveries(ctx, &parleyv1.ListWebhookDeliveriesRequest{WebhookId: id})
	require.NoError(t, err)
	require.Len(t, ds.GetDeliveries(), 1, "only the test sent while enabled")
}

// Without the secrets key no endpoint can be made: the secret could not be
// stored sealed.
func TestWebhooksNeedTheSecretsKey(t *testing.T) {
	t.Parallel()
	e := testenv.New(t, testenv.WithWorkers, func(c *server.Config) { c.SecretsKey = "" })
	r := e.Do("POST", "/api/webhooks", e.A.Key, map[string]any{"url": "https://203.0.113.7/hook", "events": []string{"lead.created"}})
	require.GreaterOrEqual(t, r.Status, 400)
	require.Less(t, r.Status, 500)
	require.Contains(t, string(r.Body), "secrets-key")
}

func ptr[T any](v T) *T { return &v }

func mask(paths ...string) *fieldmaskpb.FieldMask { return &fieldmaskpb.FieldMask{Paths: paths} }

// A form submission reaches a subscribed endpoint as form.submitted with
// the submission as the API shows it; a refused submission sends nothing.
func TestFormSubmittedEvent(t *testing.T) {
	t.Parallel()
	e := testenv.New(t, testenv.WithWorkers, allowLoopback)
	rcv := newSink(t)
	r := e.Do("POST", "/api/webhooks", e.A.Key, map[string]any{"url": rcv.URL, "events": []string{"form.submitted"}})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	r = e.Do("POST", "/api/forms", e.A.Key, map[string]any{
		"name": "Contact", "published": true,
		"fields": []map[string]any{{"name": "email", "label": "Email", "type": "email", "required": true}},
	})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var f struct{ ID string }
	r.JSON(t, &f)
	r = e.Do("POST", "/api/forms/"+f.ID, "", map[string]any{"values": map[string]any{"email": "not an email"}, "visitorId": "v1"})
	require.Equal(t, http.StatusBadRequest, r.Status, "%s", r.Body)
	r = e.Do("POST", "/api/forms/"+f.ID, "", map[string]any{"values": map[string]any{"email": "ada@example.com"}, "visitorId": "v1"})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var sub struct{ ID string }
	r.JSON(t, &sub)
	require.Eventually(t, func() bool { return rcv.count() == 1 }, 15*time.Second, 50*time.Millisecond)
	rcv.mu.Lock()
	body := rcv.bod[0]
	rcv.mu.Unlock()
	var payload struct {
		Type string
		Data struct {
			ID, FormID, VisitorID string
			Values                map[string]any
		}
	}
	require.NoError(t, json.Unmarshal(body, &payload))
	require.Equal(t, "form.submitted", payload.Type)
	require.Equal(t, sub.ID, payload.Data.ID)
	require.Equal(t, f.ID, payload.Data.FormID)
	require.Equal(t, "v1", payload.Data.VisitorID)
	require.Equal(t, "ada@example.com", payload.Data.Values["email"])
	time.Sleep(200 * time.Millisecond)
	require.Equal(t, 1, rcv.count(), "the refused submission was sent")
}
