package knowledge

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/embed"
	"github.com/parleyhq/parley/backend/netguard"
)

// cancelSite is a site whose root links to /slow, a page that blocks until
// the client goes away; entered is closed when /slow (or the root, when
// blockRoot) is first requested. hits counts requests by path.
type cancelSite struct {
	srv     *httptest.Server
	entered chan struct{}
	hits    map[string]*atomic.Int64
}

func newCancelSite(t *testing.T, blockRoot bool) *cancelSite {
	t.Helper()
	s := &cancelSite{entered: make(chan struct{}), hits: map[string]*atomic.Int64{"/": {}, "/slow": {}, "/sitemap.xml": {}}}
	var once atomic.Bool
	block := func(r *http.Request) {
		if once.CompareAndSwap(false, true) {
			close(s.entered)
		}
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		s.hits["/"].Add(1)
		if blockRoot {
			block(r)
			return
		}
		fmt.Fprint(w, `<html><head><title>Home</title></head><body><article><h1>Welcome</h1><p>Our bakery sells sourdough bread baked every single morning before dawn.</p><a href="/slow">Slow</a></article></body></html>`)
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		s.hits["/slow"].Add(1)
		block(r)
	})
	mux.HandleFunc("/sitemap.xml", func(w http.ResponseWriter, r *http.Request) {
		s.hits["/sitemap.xml"].Add(1)
		fmt.Fprintf(w, `<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><url><loc>http://%s/slow</loc></url></urlset>`, r.Host)
	})
	s.srv = httptest.NewServer(mux)
	t.Cleanup(s.srv.Close)
	return s
}

func loopbackKnowledge() *Knowledge {
	return New(nil, embed.Lexical{}, netguard.New(netguard.Config{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}))
}

// requireStopped: a crawl whose context ended fails with the context's
// error, which the ingest worker retries, never a permanent one, which
// would cancel the job and fail the datasource for good.
func requireStopped(t *testing.T, err, want error) {
	t.Helper()
	require.Error(t, err)
	require.ErrorIs(t, err, want)
	msg, perm := Permanent(err)
	require.False(t, perm, "a cancelled crawl failed for good: %s", msg)
}

// A crawl cancelled (a graceful shutdown) while a page is being fetched
// returns the context's error, whether the page is the start page, a linked
// page or a sitemap's page.
func TestCrawlCancelledMidFetch(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name      string
		path      string
		blockRoot bool
	}{
		{"start page", "/", true},
		{"linked page", "/", false},
		{"sitemap page", "/sitemap.xml", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			site := newCancelSite(t, c.blockRoot)
			// River cancels a job's context with a cause on shutdown.
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			go func() {
				<-site.entered
				cancel(errors.New("stop initiated"))
			}()
			done := make(chan struct{})
			var docs []Document
			var err error
			go func() {
				defer close(done)
				docs, err = loopbackKnowledge().crawl(ctx, site.srv.URL+c.path, 10)
			}()
			select {
			case <-done:
			case <-time.After(8 * time.Second):
				t.Fatal("the crawl did not stop when its context was cancelled")
			}
			requireStopped(t, err, context.Canceled)
			require.Nil(t, docs, "a cancelled crawl returned part of the site as if it were whole")
		})
	}
}

// A crawl whose attempt runs out of time mid-fetch returns
// context.DeadlineExceeded, not a permanent failure.
func TestCrawlAttemptTimeout(t *testing.T) {
	t.Parallel()
	for _, blockRoot := range []bool{true, false} {
		t.Run(fmt.Sprint("blockRoot=", blockRoot), func(t *testing.T) {
			t.Parallel()
			site := newCancelSite(t, blockRoot)
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			_, err := loopbackKnowledge().crawl(ctx, site.srv.URL+"/", 10)
			requireStopped(t, err, context.DeadlineExceeded)
		})
	}
}

// The start page of a crawl (not a sitemap) is fetched once.
func TestCrawlFetchesStartPageOnce(t *testing.T) {
	t.Parallel()
	var root, about atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		root.Add(1)
		fmt.Fprint(w, `<html><head><title>Home</title></head><body><article><h1>Welcome</h1><p>Our bakery sells sourdough bread baked every single morning before dawn.</p><a href="/about">About</a> <a href="/">Home</a></article></body></html>`)
	})
	mux.HandleFunc("/about", func(w http.ResponseWriter, r *http.Request) {
		about.Add(1)
		fmt.Fprint(w, `<html><head><title>About</title></head><body><article><h1>About us</h1><p>The bakery was founded in 1921 by two sisters who loved rye and spelt flour.</p><a href="/">Home</a></article></body></html>`)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	docs, err := loopbackKnowledge().crawl(context.Background(), srv.URL+"/", 10)
	require.NoError(t, err)
	require.Len(t, docs, 2)
	require.Equal(t, srv.URL+"/", docs[0].URL)
	require.Equal(t, srv.URL+"/about", docs[1].URL)
	require.EqualValues(t, 1, root.Load(), "the start page was fetched more than once")
	require.EqualValues(t, 1, about.Load())
}

// A site none of whose pages can be read still fails for good, with a
// context that did not end.
func TestCrawlUnreadableSiteIsPermanent(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	mux.HandleFunc("/sitemap.xml", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><url><loc>http://%s/gone/1</loc></url><url><loc>http://%s/gone/2</loc></url></urlset>`, r.Host, r.Host)
	})
	srv := httptest.NewServer(mux) // everything else 404s
	defer srv.Close()
	k := loopbackKnowledge()
	for _, start := range []string{srv.URL + "/sitemap.xml", srv.URL + "/missing"} {
		_, err := k.crawl(context.Background(), start, 10)
		require.Error(t, err, start)
		_, perm := Permanent(err)
		require.True(t, perm, "%s: %v", start, err)
		require.False(t, errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded), "%s: %v", start, err)
	}
}

// A web_site datasource deleted while its crawl waits on a page ends the
// run at the next look (goneEvery), without error and without fetching on:
// the crawl ran to its end before, writing nothing.
func TestCrawlOfADeletedDatasourceStops(t *testing.T) {
	t.Parallel()
	e := setupIngest(t, "")
	site := newCancelSite(t, false)
	ctx := context.Background()
	id := uuid.New()
	require.NoError(t, e.store.Tenant(ctx, e.org, func(q *dbq.Queries) error {
		_, err := q.CreateDatasource(ctx, dbq.CreateDatasourceParams{OrgID: e.org, ID: id, DatastoreID: e.store_, Type: "web_site",
			Name: "site", Config: []byte(fmt.Sprintf(`{"url": %q, "maxPages": 10}`, site.srv.URL+"/"))})
		return err
	}))
	k := loopbackKnowledge()
	k.Store, k.goneEvery = e.store, 50*time.Millisecond
	done := make(chan error, 1)
	go func() { done <- k.Ingest(ctx, e.org, id) }()

	<-site.entered // the crawl waits on /slow, which answers in 10 s
	require.NoError(t, e.store.Tenant(ctx, e.org, func(q *dbq.Queries) error {
		_, err := q.DeleteDatasource(ctx, dbq.DeleteDatasourceParams{OrgID: e.org, ID: id})
		return err
	}))
	select {
	case err := <-done:
		require.NoError(t, err, "a deleted datasource's run ends quietly")
	case <-time.After(5 * time.Second):
		t.Fatal("the crawl of a deleted datasource went on")
	}
	require.EqualValues(t, 1, site.hits["/slow"].Load())
}
