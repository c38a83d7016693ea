package knowledge

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/embed"
	"github.com/parleyhq/parley/backend/netguard"
)

// A crawl keeps at most SiteBytes of text: it stops before the page that
// would pass the bound and reads no further page, whatever maxPages asks.
func TestCrawlKeepsAtMostSiteBytes(t *testing.T) {
	t.Parallel()
	var fetched atomic.Int64
	page := strings.Repeat("Sourdough needs a starter, flour, water and salt. ", 200) // 10,200 bytes
	site := http.NewServeMux()
	site.HandleFunc("/sitemap.xml", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">`)
		for i := range 50 {
			fmt.Fprintf(w, "<url><loc>http://%s/p/%d.txt</loc></url>", r.Host, i)
		}
		fmt.Fprint(w, `</urlset>`)
	})
	site.HandleFunc("/p/", func(w http.ResponseWriter, r *http.Request) {
		fetched.Add(1)
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprint(w, page)
	})
	srv := httptest.NewServer(site)
	defer srv.Close()
	k := New(nil, embed.Lexical{}, netguard.New(netguard.Config{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}))
	require.Equal(t, CrawlBytes, k.SiteBytes)

	k.SiteBytes = 35_000
	docs, err := k.crawl(context.Background(), srv.URL+"/sitemap.xml", 50)
	require.NoError(t, err)
	require.Equal(t, 3, len(docs), "three pages of about 10 KB fit in 35,000 bytes, a fourth does not")
	total := 0
	for _, d := range docs {
		total += d.size()
	}
	require.LessOrEqual(t, total, k.SiteBytes)
	require.EqualValues(t, 4, fetched.Load(), "pages were read past the bound")

	// Under the bound, maxPages decides as before.
	fetched.Store(0)
	k.SiteBytes = CrawlBytes
	docs, err = k.crawl(context.Background(), srv.URL+"/sitemap.xml", 50)
	require.NoError(t, err)
	require.Equal(t, 50, len(docs))
}

// A start page that fails for a reason that may pass (a 5xx, a 429, the
// guard's timeout, a connection cut) fails the crawl with an error the
// ingest worker retries; one the site means (a 404, a 410) fails it for
// good, as does a refused destination.
func TestCrawlStartPageTemporaryFailureIsRetried(t *testing.T) {
	t.Parallel()
	status := func(code int) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, http.StatusText(code), code)
		}
	}
	for _, c := range []struct {
		name      string
		handler   http.HandlerFunc
		permanent bool
	}{
		{"503", status(http.StatusServiceUnavailable), false},
		{"500", status(http.StatusInternalServerError), false},
		{"429", status(http.StatusTooManyRequests), false},
		{"guard timeout", func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		}, false},
		{"connection cut", func(w http.ResponseWriter, r *http.Request) {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
		}, false},
		{"404", http.NotFound, true},
		{"410", status(http.StatusGone), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(c.handler)
			defer srv.Close()
			k := New(nil, embed.Lexical{}, netguard.New(netguard.Config{
				Allow:   []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
				Timeout: 300 * time.Millisecond,
			}))
			docs, err := k.crawl(context.Background(), srv.URL+"/", 10)
			require.Error(t, err)
			require.Nil(t, docs)
			msg, perm := Permanent(err)
			if got, want := perm, c.permanent; got != want {
				t.Fatalf("permanent = %v, want %v: %v (%s)", got, want, err, msg)
			}
		})
	}

	// A destination the guard refuses stays permanent.
	_, err := New(nil, embed.Lexical{}, netguard.New(netguard.Config{})).crawl(context.Background(), "http://127.0.0.1:1/", 10)
	_, perm := Permanent(err)
	require.True(t, perm, "%v", err)
}

// A site whose start page (a sitemap) is read but none of whose pages can
// be read, for now, is retried too; pages that are gone stay permanent
// (TestCrawlUnreadableSiteIsPermanent).
func TestCrawlSiteUnreadableForNowIsRetried(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	mux.HandleFunc("/sitemap.xml", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><url><loc>http://%s/busy/1</loc></url><url><loc>http://%s/busy/2</loc></url></urlset>`, r.Host, r.Host)
	})
	mux.HandleFunc("/busy/", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "busy", http.StatusServiceUnavailable)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	docs, err := loopbackKnowledge().crawl(context.Background(), srv.URL+"/sitemap.xml", 10)
	require.Error(t, err)
	require.Nil(t, docs)
	msg, perm := Permanent(err)
	require.False(t, perm, "a site unreadable for now failed for good: %s", msg)
}

// A sitemap index is read one level down: the pages its sitemaps list on
// the site, and no others (no link of theirs is followed). A start URL
// that redirects to another host (example.com to www.example.com) crawls
// that host's links; a sitemap listing no page of the site says so.
func TestCrawlSitemapIndexAndRedirectedHost(t *testing.T) {
	t.Parallel()
	var fetched sync.Map
	site := http.NewServeMux()
	site.HandleFunc("/index.xml", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `<?xml version="1.0"?><sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">`+
			`<sitemap><loc>http://%s/a.xml</loc></sitemap><sitemap><loc>http://%s/b.xml</loc></sitemap>`+
			`<sitemap><loc>http://elsewhere.example/c.xml</loc></sitemap></sitemapindex>`, r.Host, r.Host)
	})
	for _, m := range []string{"a", "b"} {
		site.HandleFunc("/"+m+".xml", func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, `<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><url><loc>http://%s/p/%s1</loc></url><url><loc>http://%s/p/%s2</loc></url></urlset>`, r.Host, m, r.Host, m)
		})
	}
	site.HandleFunc("/empty.xml", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><url><loc>http://elsewhere.example/x</loc></url></urlset>`)
	})
	site.HandleFunc("/p/", func(w http.ResponseWriter, r *http.Request) {
		fetched.Store(r.URL.Path, true)
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<html><body><p>Page %s of the handbook.</p><a href="/p/linked">more</a></body></html>`, r.URL.Path)
	})
	srv := httptest.NewServer(site)
	defer srv.Close()
	k := loopbackKnowledge()

	docs, err := k.crawl(context.Background(), srv.URL+"/index.xml", 50)
	require.NoError(t, err)
	var urls []string
	for _, d := range docs {
		urls = append(urls, strings.TrimPrefix(d.URL, srv.URL))
	}
	require.ElementsMatch(t, []string{"/p/a1", "/p/a2", "/p/b1", "/p/b2"}, urls)
	_, linked := fetched.Load("/p/linked")
	require.False(t, linked, "a sitemap crawl followed a page's link")

	_, err = k.crawl(context.Background(), srv.URL+"/empty.xml", 50)
	msg, ok := Permanent(err)
	require.True(t, ok, "%v", err)
	require.Contains(t, msg, "lists no page of")

	// 127.0.0.2 redirects to the site at 127.0.0.1 (another host).
	l, err := net.Listen("tcp", "127.0.0.2:0")
	require.NoError(t, err)
	moved := &httptest.Server{Listener: l, Config: &http.Server{Handler: http.RedirectHandler(srv.URL+"/p/home", http.StatusMovedPermanently)}}
	moved.Start()
	defer moved.Close()
	docs, err = k.crawl(context.Background(), moved.URL+"/", 50)
	require.NoError(t, err)
	urls = nil
	for _, d := range docs {
		urls = append(urls, strings.TrimPrefix(d.URL, srv.URL))
	}
	require.ElementsMatch(t, []string{"/p/home", "/p/linked"}, urls, "the redirected host's links were not followed")
}

// A site of pages that cannot be read, each linking to new ones (a
// crawler trap), is fetched a bounded number of times, not until the
// attempt's time runs out.
func TestCrawlTrapOfUnreadablePages(t *testing.T) {
	t.Parallel()
	var fetched atomic.Int64
	site := http.NewServeMux()
	site.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		n := fetched.Add(1)
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<html><body><a href="/p/%d"></a><a href="/p/%d-b"></a></body></html>`, n, n)
	})
	srv := httptest.NewServer(site)
	defer srv.Close()
	k := New(nil, embed.Lexical{}, netguard.New(netguard.Config{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := k.crawl(ctx, srv.URL+"/", 5)
	require.Error(t, err)
	require.NoError(t, ctx.Err(), "the crawl ran until its context ended, after %d pages", fetched.Load())
	require.LessOrEqual(t, fetched.Load(), int64(maxFetches(5)))
}

// A page's links are read one at a time, up to what the queue takes: a
// page of 10 MiB of "<a href=a>" is a million links, which were all held
// (236 MiB) for the crawl to keep a few.
func TestCrawlPageOfManyLinks(t *testing.T) {
	body := "Refunds take fourteen days.\n" + strings.Repeat(`<a href=a>`, 1<<20-10)
	site := http.NewServeMux()
	site.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprint(w, body)
	})
	srv := httptest.NewServer(site)
	defer srv.Close()
	k := New(nil, embed.Lexical{}, netguard.New(netguard.Config{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}))
	var docs []Document
	var err error
	n := allocated(func() { docs, err = k.crawl(context.Background(), srv.URL+"/page.txt", 1) })
	require.NoError(t, err)
	require.Len(t, docs, 1)
	require.Less(t, n, uint64(160<<20), "allocated %d MiB", n>>20)
}

// A start URL without a path (https://example.com) is the page its links
// to "/" name: the home page is read once, not once more for its own
// links back to it.
func TestCrawlStartWithoutPathReadOnce(t *testing.T) {
	t.Parallel()
	var home atomic.Int64
	site := http.NewServeMux()
	site.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		if r.URL.Path == "/" {
			home.Add(1)
		}
		fmt.Fprintf(w, `<html><body><p>Page %s of the handbook.</p><a href="/">home</a><a href="/about">about</a></body></html>`, r.URL.Path)
	})
	srv := httptest.NewServer(site)
	defer srv.Close()
	docs, err := loopbackKnowledge().crawl(context.Background(), srv.URL, 10)
	require.NoError(t, err)
	require.Len(t, docs, 2, "the home page was read twice")
	require.EqualValues(t, 1, home.Load())
}

// A page of the site that redirects to another host (a link shortener, an
// /out?to= redirector) is not read: the crawl keeps to its site whatever a
// page redirects to, as it does for links.
func TestCrawlPageRedirectedOffSiteNotRead(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.2:0")
	require.NoError(t, err)
	other := &httptest.Server{Listener: l, Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, `<html><body><p>Another site's page about casinos.</p></body></html>`)
	})}}
	other.Start()
	defer other.Close()
	site := http.NewServeMux()
	site.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, `<html><body><p>The handbook.</p><a href="/out">partner</a></body></html>`)
	})
	site.Handle("/out", http.RedirectHandler(other.URL+"/casino", http.StatusFound))
	srv := httptest.NewServer(site)
	defer srv.Close()
	docs, err := loopbackKnowledge().crawl(context.Background(), srv.URL+"/", 10)
	require.NoError(t, err)
	for _, d := range docs {
		require.True(t, strings.HasPrefix(d.URL, srv.URL), "read %s, off the site", d.URL)
	}
	require.Len(t, docs, 1)
}

func gzipped(t *testing.T, write func(w io.Writer)) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	require.NoError(t, err)
	write(zw)
	require.NoError(t, zw.Close())
	return buf.Bytes()
}

// A gzipped sitemap (sitemap.xml.gz, served as application/gzip) is read,
// as the start URL and as a sitemap index's sitemap.
func TestCrawlSitemapGzipped(t *testing.T) {
	t.Parallel()
	site := http.NewServeMux()
	urlset := func(host string, pages ...string) []byte {
		return gzipped(t, func(w io.Writer) {
			fmt.Fprint(w, `<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">`)
			for _, p := range pages {
				fmt.Fprintf(w, "<url><loc>http://%s%s</loc></url>", host, p)
			}
			fmt.Fprint(w, `</urlset>`)
		})
	}
	site.HandleFunc("/sitemap.xml.gz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/gzip")
		w.Write(urlset(r.Host, "/p/1", "/p/2"))
	})
	site.HandleFunc("/index.xml", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `<?xml version="1.0"?><sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><sitemap><loc>http://%s/child.xml.gz</loc></sitemap></sitemapindex>`, r.Host)
	})
	site.HandleFunc("/child.xml.gz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-gzip")
		w.Write(urlset(r.Host, "/p/3"))
	})
	site.HandleFunc("/p/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<html><body><p>Page %s of the handbook.</p></body></html>`, r.URL.Path)
	})
	srv := httptest.NewServer(site)
	defer srv.Close()
	docs, err := loopbackKnowledge().crawl(context.Background(), srv.URL+"/sitemap.xml.gz", 10)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"/p/1", "/p/2"}, docPaths(docs, srv.URL))
	docs, err = loopbackKnowledge().crawl(context.Background(), srv.URL+"/index.xml", 10)
	require.NoError(t, err)
	require.Equal(t, []string{"/p/3"}, docPaths(docs, srv.URL))
}

// A gzipped sitemap is decompressed up to maxSitemapBytes: a gzip bomb (a
// few hundred KiB inflating to 200 MiB) is refused as the start URL and
// skipped as an index's sitemap, without inflating in memory.
func TestCrawlSitemapGzipBomb(t *testing.T) {
	bomb := gzipped(t, func(w io.Writer) {
		fmt.Fprint(w, `<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><url><loc>`)
		zeros := make([]byte, 1<<20)
		for range 200 {
			w.Write(zeros)
		}
		fmt.Fprint(w, `</loc></url></urlset>`)
	})
	site := http.NewServeMux()
	site.HandleFunc("/bomb.xml.gz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/gzip")
		w.Write(bomb)
	})
	site.HandleFunc("/index.xml", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `<?xml version="1.0"?><sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">`+
			`<sitemap><loc>http://%s/bomb.xml.gz</loc></sitemap><sitemap><loc>http://%s/ok.xml</loc></sitemap></sitemapindex>`, r.Host, r.Host)
	})
	site.HandleFunc("/ok.xml", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><url><loc>http://%s/p/1</loc></url></urlset>`, r.Host)
	})
	site.HandleFunc("/p/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `<html><body><p>The handbook.</p></body></html>`)
	})
	srv := httptest.NewServer(site)
	defer srv.Close()
	k := loopbackKnowledge()
	var err error
	n := allocated(func() { _, err = k.crawl(context.Background(), srv.URL+"/bomb.xml.gz", 10) })
	msg, perm := Permanent(err)
	require.True(t, perm, "%v", err)
	require.Contains(t, msg, "uncompressed")
	require.Less(t, n, uint64(80<<20), "allocated %d MiB", n>>20)

	var docs []Document
	n = allocated(func() { docs, err = k.crawl(context.Background(), srv.URL+"/index.xml", 10) })
	require.NoError(t, err)
	require.Equal(t, []string{"/p/1"}, docPaths(docs, srv.URL))
	require.Less(t, n, uint64(80<<20), "allocated %d MiB", n>>20)
}

// The sitemaps of a sitemap index count against the crawl's fetch budget:
// an index of 50 sitemaps that list no page of the site was 50 fetches of
// up to 10 MiB whatever maxPages asked.
func TestCrawlSitemapIndexFetchesBudgeted(t *testing.T) {
	t.Parallel()
	var children atomic.Int64
	site := http.NewServeMux()
	site.HandleFunc("/index.xml", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `<?xml version="1.0"?><sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">`)
		for i := range maxSitemaps {
			fmt.Fprintf(w, "<sitemap><loc>http://%s/s/%d.xml</loc></sitemap>", r.Host, i)
		}
		fmt.Fprint(w, `</sitemapindex>`)
	})
	site.HandleFunc("/s/", func(w http.ResponseWriter, r *http.Request) {
		children.Add(1)
		fmt.Fprint(w, `<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><url><loc>http://elsewhere.example/x</loc></url></urlset>`)
	})
	srv := httptest.NewServer(site)
	defer srv.Close()
	_, err := loopbackKnowledge().crawl(context.Background(), srv.URL+"/index.xml", 1)
	require.Error(t, err)
	require.LessOrEqual(t, children.Load(), int64(maxFetches(1)-2), "robots.txt and the index are fetches too")
	require.Less(t, children.Load(), int64(maxSitemaps))
}
