package llm_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/llm"
)

// short are deadlines the tests can outlast in well under a second.
var short = llm.Timeouts{Headers: 300 * time.Millisecond, Idle: 300 * time.Millisecond}

func openAIWith(url string, t llm.Timeouts) llm.Model {
	return llm.NewOpenAI(llm.OpenAIConfig{APIKey: "sk-test", BaseURL: url + "/v1", HTTPClient: llm.NewHTTPClient(t)})
}

// A stream that lasts several times every per-phase deadline, each gap
// within them, is not cut: there is no deadline on the whole call (the old
// client's 2-minute Timeout cut any longer answer).
func TestLongStreamIsNotCut(t *testing.T) {
	t.Parallel()
	const pieces = 12 // 12 × 100 ms: four times the deadlines
	srv, _ := openAIServer(t, func(_ int, w http.ResponseWriter, _ map[string]any) {
		streamHeaders(w)
		for i := range pieces {
			time.Sleep(100 * time.Millisecond)
			chunk(w, fmt.Sprintf(`{"content":"%d "}`, i), "")
		}
		finish(w, "stop")
		fmt.Fprint(w, "data: [DONE]\n\n")
	})
	start := time.Now()
	text, _, _, err := collect(t, openAIWith(srv.URL, short), basicReq)
	require.NoError(t, err)
	require.Equal(t, "0 1 2 3 4 5 6 7 8 9 10 11 ", text)
	require.Greater(t, time.Since(start), short.Headers+short.Idle, "the stream outlasted both deadlines together")
}

// A provider that goes quiet mid-answer fails the call with the provider
// timeout once the idle deadline passes, keeping what it sent.
func TestStallBetweenChunksTimesOut(t *testing.T) {
	t.Parallel()
	srv, _ := openAIServer(t, func(_ int, w http.ResponseWriter, _ map[string]any) {
		streamHeaders(w)
		chunk(w, `{"content":"Hel"}`, "")
		time.Sleep(3 * time.Second) // far past the idle deadline
		chunk(w, `{"content":"lo"}`, "")
		finish(w, "stop")
	})
	text, _, _, err := collect(t, llm.Retry(openAIWith(srv.URL, short), 3, time.Millisecond, time.Second), basicReq)
	require.Equal(t, "Hel", text)
	require.Error(t, err)
	var pe *llm.ProviderError
	require.ErrorAs(t, err, &pe)
	require.True(t, llm.IsProviderTimeout(err), "%v", err)
	require.ErrorIs(t, err, context.DeadlineExceeded, "counted as a timeout (metrics)")
	require.Contains(t, err.Error(), "nothing more of the response from the provider within 300ms")
}

// A provider that never sends its response headers fails each try with the
// provider timeout (and, as nothing was said, is tried again).
func TestStallBeforeHeadersTimesOut(t *testing.T) {
	t.Parallel()
	srv, calls := openAIServer(t, func(_ int, w http.ResponseWriter, _ map[string]any) {
		time.Sleep(2 * time.Second)
	})
	_, _, _, err := collect(t, llm.Retry(openAIWith(srv.URL, short), 2, time.Millisecond, time.Second), basicReq)
	require.True(t, llm.IsProviderTimeout(err), "%v", err)
	require.Contains(t, err.Error(), "response headers")
	require.EqualValues(t, 2, calls.Load())
}

// The time the caller takes between reads (a slow client downstream) is not
// the provider's silence.
func TestSlowCallerIsNotAStall(t *testing.T) {
	t.Parallel()
	srv, _ := openAIServer(t, func(_ int, w http.ResponseWriter, _ map[string]any) {
		streamHeaders(w)
		chunk(w, `{"content":"a"}`, "")
		chunk(w, `{"content":"b"}`, "")
		finish(w, "stop")
		fmt.Fprint(w, "data: [DONE]\n\n")
	})
	var text string
	err := openAIWith(srv.URL, short).Stream(context.Background(), basicReq, func(ev llm.Event) error {
		text += ev.Text
		time.Sleep(2 * short.Idle)
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, "ab", text)
}

// Turns reuse the provider's connections: after a first round of concurrent
// calls, the next rounds' calls find one idle. (Go's default transport keeps
// 2 idle connections per host and would open 6 of 8 again each round.) A
// busy machine may still open one now and then (a connection handed back a
// moment after a call looked for one), so the bar is three calls in four.
func TestConnectionsAreReused(t *testing.T) {
	t.Parallel()
	var accepted atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		streamHeaders(w)
		chunk(w, `{"content":"ok"}`, "")
		finish(w, "stop")
		fmt.Fprint(w, `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o-mini","choices":[],"usage":{"prompt_tokens":2,"completion_tokens":1,"total_tokens":3}}`+"\n\n")
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			accepted.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	// The default client: the shared transport every provider uses.
	m := llm.NewOpenAI(llm.OpenAIConfig{APIKey: "sk-test", BaseURL: srv.URL + "/v1"})
	const concurrent, rounds = 8, 4
	// The transport hands a connection back to its idle pool on its own
	// goroutine after the body's end is read, so a round waits until all of
	// the previous round's are back (kept or refused) before it starts:
	// otherwise a busy machine opens new ones for calls that would have
	// reused them a moment later.
	var handedBack, reused atomic.Int64
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
		PutIdleConn: func(error) { handedBack.Add(1) },
		GotConn: func(info httptrace.GotConnInfo) {
			if info.Reused {
				reused.Add(1)
			}
		},
	})
	for round := range rounds {
		var wg sync.WaitGroup
		errs := make(chan error, concurrent)
		for range concurrent {
			wg.Go(func() {
				var text strings.Builder
				err := m.Stream(ctx, basicReq, func(ev llm.Event) error { text.WriteString(ev.Text); return nil })
				if err == nil && text.String() != "ok" {
					err = errors.New("answer " + text.String())
				}
				errs <- err
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		want := int64((round + 1) * concurrent)
		require.Eventually(t, func() bool { return handedBack.Load() >= want }, 5*time.Second, time.Millisecond,
			"round %d: %d of %d connections handed back to the pool", round, handedBack.Load(), want)
	}
	later := int64(concurrent * (rounds - 1))
	require.GreaterOrEqual(t, reused.Load(), later*3/4, "%d of the %d calls after the first round reused a connection (%d opened in all)",
		reused.Load(), later, accepted.Load())
}
