package console

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/a-h/templ"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/testenv/syncbuf"
)

// A client that goes away mid-page is logged at debug (a sweep logged
// hundreds of "broken pipe" errors); a component that fails is still an
// error. Not parallel: it swaps the default logger.
func TestRenderLogsClientGoneAtDebug(t *testing.T) {
	logs := &syncbuf.Buffer{}
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	t.Cleanup(func() { slog.SetDefault(prev) })

	rendered := make(chan struct{}, 2)
	chunk := strings.Repeat("x", 64<<10)
	// A page far larger than the socket buffers, written in pieces, so
	// that writes go on after the client has gone.
	big := templ.ComponentFunc(func(_ context.Context, w io.Writer) error {
		for range 2048 {
			if _, err := io.WriteString(w, chunk); err != nil {
				return err
			}
		}
		return nil
	})
	broken := templ.ComponentFunc(func(context.Context, io.Writer) error { return errors.New("template exploded") })
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() { rendered <- struct{}{} }()
		if r.URL.Path == "/broken" {
			render(w, r, http.StatusOK, broken)
			return
		}
		render(w, r, http.StatusOK, big)
	}))
	defer srv.Close()

	// The client reads the headers and a little of the page, then hangs up.
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	require.NoError(t, err)
	_, err = io.WriteString(conn, "GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
	require.NoError(t, err)
	_, err = io.ReadFull(conn, make([]byte, 4096))
	require.NoError(t, err)
	require.NoError(t, conn.Close())
	select {
	case <-rendered:
	case <-time.After(30 * time.Second):
		t.Fatal("the page was still being written 30 s after the client left")
	}

	resp, err := http.Get(srv.URL + "/broken")
	require.NoError(t, err)
	resp.Body.Close()
	<-rendered

	out := logs.String()
	require.Contains(t, out, `level=DEBUG msg="console render: the client went away"`, "%s", out)
	require.Contains(t, out, `level=ERROR msg="console render" err="template exploded"`, "%s", out)
	require.Equal(t, 1, strings.Count(out, "level=ERROR"), "only the failed component is an error:\n%s", out)
}

// A request whose client went away while it waited (a sign-in for a
// password check's slot, a query) is logged at debug, not as an internal
// error: an address could send its sign-ins and hang up, an error logged
// for each. An internal error of a request still there is one. Not
// parallel: it swaps the default logger.
func TestErrorPageLogsClientGoneAtDebug(t *testing.T) {
	logs := &syncbuf.Buffer{}
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	t.Cleanup(func() { slog.SetDefault(prev) })

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	gone := httptest.NewRequestWithContext(ctx, http.MethodPost, "/console/signin", nil)
	(&Console{}).errorPage(httptest.NewRecorder(), gone, context.Canceled)
	require.Contains(t, logs.String(), `level=DEBUG msg="console: the client went away"`)
	require.NotContains(t, logs.String(), "level=ERROR")

	there := httptest.NewRequest(http.MethodPost, "/console/signin", nil)
	(&Console{}).errorPage(httptest.NewRecorder(), there, errors.New("boom"))
	require.Equal(t, 1, strings.Count(logs.String(), `level=ERROR msg="console internal error"`), "%s", logs.String())
}
