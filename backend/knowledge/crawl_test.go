package knowledge

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

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
