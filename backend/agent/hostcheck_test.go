package agent_test

import (
	"context"
	"net"
	"net/http"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/testenv"
)

// An http_request endpoint's host is checked when the agent is saved; the
// answer must not tell an organization's admin which names exist inside
// the operator's network. A name that resolved to a private address (here
// the machine's own name, which its hosts file gives a loopback or private
// address) was refused (400) while a name that resolves nowhere was saved
// (200): any tenant could map the internal DNS (redis.internal,
// postgres.svc.cluster.local, ...) one update at a time. Names are now
// checked when each call connects, where both read alike
// (netguard.CheckDestination).
func TestEndpointHostCheckIsNoDNSOracle(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	own, err := os.Hostname()
	require.NoError(t, err)
	addrs, err := net.DefaultResolver.LookupNetIP(context.Background(), "ip", own)
	require.NoError(t, err, "this test needs the machine's name to resolve (its hosts file)")
	require.False(t, addrs[0].IsGlobalUnicast() && !addrs[0].IsPrivate(), "%s resolves to a public address, %v", own, addrs)
	id := createAgent(t, e, e.A.Key, map[string]any{"name": "Probe", "instructions": "Answer."})
	status := func(host string) int {
		r := e.Do("PUT", "/api/agents/"+id, e.A.Key, map[string]any{"toolSettings": map[string]any{
			"http_request": map[string]any{"endpoints": []map[string]any{{"name": "probe", "url": "http://" + host + "/"}}},
		}})
		return r.Status
	}
	internal, nowhere := status(own), status("no-such-host.invalid")
	require.Equal(t, internal, nowhere,
		"a name resolving to a private address answers %d, a name resolving nowhere %d: the difference says which internal names exist", internal, nowhere)
	require.Equal(t, http.StatusOK, internal)
	// localhost is loopback by definition (RFC 6761), not by a lookup: it
	// is refused without one.
	require.Equal(t, http.StatusBadRequest, status("localhost"))
	require.Equal(t, http.StatusBadRequest, status("api.LOCALHOST."))
}
