package knowledge

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
)

// A web_page fails as a crawl's start page does (temporary): for good when
// the site says the page is gone (a 404, a 410), with an error the ingest
// worker retries when the failure may pass (a 5xx, a 429) or when the
// job's context ended.
func TestFetchWebPageFailures(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name      string
		code      int
		cancelled bool
		permanent bool
	}{
		{"404", http.StatusNotFound, false, true},
		{"410", http.StatusGone, false, true},
		{"503", http.StatusServiceUnavailable, false, false},
		{"429", http.StatusTooManyRequests, false, false},
		{"context ended", http.StatusNotFound, true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				http.Error(w, http.StatusText(c.code), c.code)
			}))
			defer srv.Close()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if c.cancelled {
				cancel()
			}
			_, err := loopbackKnowledge().fetch(ctx, srv.URL+"/page")
			if err == nil {
				t.Fatal("fetch succeeded")
			}
			msg, perm := Permanent(err)
			if got, want := perm, c.permanent; got != want {
				t.Fatalf("permanent = %v, want %v: %v (%s)", got, want, err, msg)
			}
		})
	}
}
