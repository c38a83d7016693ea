package webhook_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/testenv"
)

// Replay and the deliveries listing answer bad ids and cursors as the
// client's mistake (404, 400), never 500: an id that is no UUID, one too
// long, a delivery that does not exist, one of another of the
// organization's endpoints, a cursor of nothing.
func TestReplayBadInput(t *testing.T) {
	t.Parallel()
	e := testenv.New(t, testenv.WithWorkers, allowLoopback)
	rcv := newSink(t)
	var h1, h2 hookJSON
	r := e.Do("POST", "/api/webhooks", e.A.Key, map[string]any{"url": rcv.URL, "events": []string{"lead.created"}})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	r.JSON(t, &h1)
	r = e.Do("POST", "/api/webhooks", e.A.Key, map[string]any{"url": rcv.URL, "events": []string{"lead.created"}})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	r.JSON(t, &h2)
	r = e.Do("POST", "/api/webhooks/"+h1.ID+"/test", e.A.Key, nil)
	require.Equal(t, http.StatusAccepted, r.Status, "%s", r.Body)
	var d struct{ ID string }
	r.JSON(t, &d)
	require.Eventually(t, func() bool { return rcv.count() == 1 }, 15*time.Second, 50*time.Millisecond)

	long := strings.Repeat("a", 100)
	for _, c := range []struct {
		method, path string
		want         int
	}{
		{"POST", "/api/webhooks/" + h1.ID + "/deliveries/not-a-uuid/replay", http.StatusNotFound},
		{"POST", "/api/webhooks/" + h1.ID + "/deliveries/0190a1b2-0000-7000-8000-000000000000/replay", http.StatusNotFound},
		{"POST", "/api/webhooks/" + h2.ID + "/deliveries/" + d.ID + "/replay", http.StatusNotFound},
		{"POST", "/api/webhooks/not-a-uuid/deliveries/" + d.ID + "/replay", http.StatusNotFound},
		{"POST", "/api/webhooks/" + h1.ID + "/deliveries/" + long + "/replay", http.StatusBadRequest},
		{"GET", "/api/webhooks/" + h1.ID + "/deliveries?cursor=zzz", http.StatusBadRequest},
		{"GET", "/api/webhooks/" + h1.ID + "/deliveries?cursor=99999999999999999_x", http.StatusBadRequest},
		{"GET", "/api/webhooks/" + h1.ID + "/deliveries?limit=-1", http.StatusBadRequest},
		{"GET", "/api/webhooks/" + h1.ID + "/deliveries?limit=abc", http.StatusBadRequest},
	} {
		r := e.Do(c.method, c.path, e.A.Key, nil)
		require.Equal(t, c.want, r.Status, "%s %s: %s", c.method, c.path, r.Body)
	}
	// The delivery replays on its own endpoint.
	r = e.Do("POST", "/api/webhooks/"+h1.ID+"/deliveries/"+d.ID+"/replay", e.A.Key, nil)
	require.Equal(t, http.StatusAccepted, r.Status, "%s", r.Body)
	require.Eventually(t, func() bool { return rcv.count() == 2 }, 15*time.Second, 50*time.Millisecond)
}
