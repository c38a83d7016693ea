package knowledge

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"

	"golang.org/x/net/html"

	"github.com/parleyhq/parley/backend/netguard"
)

// Crawl bounds.
const (
	// DefaultMaxPages is a web_site's page cap when none is given.
	DefaultMaxPages = 50
	// MaxPages is the largest cap allowed.
	MaxPages = 1000
	// maxSitemapURLs bounds what a sitemap may list before the cap applies.
	maxSitemapURLs = 50000
	// CrawlBytes bounds the text a site's crawl keeps, as much as the
	// largest file may hold (MaxFileBytes). The pages' text is held until
	// the crawl ends, then chunked: without it, 1,000 pages of 10 MiB (each
	// within the fetch limit) would hold 10 GiB in the worker, which one
	// tenant's datasource must not be able to ask of the process every
	// tenant's ingestion shares.
	CrawlBytes = MaxFileBytes
)

// crawl reads a site: the pages its sitemap lists when the URL is a sitemap,
// else the pages reachable by links from the URL within its host,
// breadth first, up to maxPages and k.SiteBytes of text (the crawl stops,
// logged, before the page that would pass it), none that the site's
// robots.txt disallows (robotsOf). Pages that fail are skipped
// (and logged, whatever the reason); the site fails only if no page could
// be read. It fails with a plain error, which the ingest worker retries,
// when the start page, or a page of a site none of whose pages could be
// read, failed for a reason that may pass (temporary: a 5xx, a 429, a
// timeout); else for good (a permanent error: a 404, a refused destination,
// content that cannot be read).
func (k *Knowledge) crawl(ctx context.Context, start string, maxPages int) ([]Document, error) {
	if maxPages <= 0 {
		maxPages = DefaultMaxPages
	}
	maxPages = min(maxPages, MaxPages)
	root, err := url.Parse(start)
	if err != nil {
		return nil, permanent("invalid URL %q", start)
	}
	// failed is why a fetch of the start (its robots.txt, itself) failed.
	failed := func(err error) error {
		if ctx.Err() != nil {
			return stopped(ctx, start) // cancelled or out of time: not a site that cannot be read
		}
		if temporary(err) {
			return fmt.Errorf("crawling %s: %w", start, err)
		}
		return permanent("%s: %v", start, err)
	}
	// The site's robots.txt, read once for each of its hosts (the start
	// URL's and the one it redirects to), before any other page of the
	// host. A robots.txt that cannot be read for now (a 5xx, a 429, no
	// answer) allows nothing of its host (RFC 9309, as Google does): a
	// crawl whose start URL's cannot be read fails, retried when the
	// failure may pass.
	fetches := 0 // fetches made, read or not: robots.txt and sitemaps included
	rules := map[string]*robots{}
	var robotsErr error // a robots.txt that could not be read, of a host other than the start's
	robotsFor := func(u *url.URL) *robots {
		o := origin(u)
		if r, ok := rules[o]; ok {
			return r
		}
		if fetches++; fetches > maxFetches(maxPages) {
			return &robots{none: true} // the crawl stops at its next fetch
		}
		r, err := k.robotsOf(ctx, u)
		if err != nil {
			slog.WarnContext(ctx, "crawl: robots.txt not read; the host's pages are not fetched", "site", start, "host", u.Host, "err", err)
			robotsErr = fmt.Errorf("the robots.txt of %s could not be read: %w", u.Host, err)
			r = &robots{none: true}
		}
		rules[o] = r
		return r
	}
	if err := k.Guard.CheckDestination(ctx, start); err != nil {
		return nil, failed(err) // refused, not a robots.txt that cannot be read
	}
	fetches++
	rootRules, err := k.robotsOf(ctx, root)
	if err != nil {
		return nil, failed(fmt.Errorf("its robots.txt could not be read: %w", err))
	}
	rules[origin(root)] = rootRules
	if !rootRules.allowed(root) {
		return nil, permanent("%s: the site's robots.txt does not allow crawling it", start)
	}
	fetches++
	first, err := k.Guard.Get(ctx, start)
	if err != nil {
		return nil, failed(err)
	}
	if !robotsFor(first.URL).allowed(first.URL) {
		// The start URL redirected to a page its host's robots.txt
		// does not allow (or whose robots.txt cannot be read for now).
		if robotsErr != nil {
			return nil, failed(robotsErr)
		}
		return nil, permanent("%s: the robots.txt of %s does not allow crawling %s", start, first.URL.Host, first.URL.Redacted())
	}
	// The site is the start URL's host and the one it redirected to
	// (example.com to www.example.com): its links name the latter.
	site := func(u *url.URL) bool { return sameHost(u, root) || sameHost(u, first.URL) }
	var queue []string
	// read is a page already read, the queue's first: the start page,
	// which is not fetched a second time.
	var read *netguard.Page
	// allowed: a page of the site its host's robots.txt allows.
	allowed := func(u *url.URL) bool { return site(u) && robotsFor(u).allowed(u) }
	// get fetches a page or a sitemap within the crawl's fetch budget.
	get := func(u string) (*netguard.Page, error) {
		// SECURITY: a page that fails (fetched or read) is not one of
		// maxPages, but its links are followed: a site of pages without
		// text, each linking to new ones (a calendar, a crawler trap),
		// was fetched until the attempt's time ran out (2 min + 30 s a
		// page: 8 hours for 1,000 pages), 10 MiB a page, on every retry.
		// A sitemap index's sitemaps count too: 50 of 10 MiB each.
		if fetches++; fetches > maxFetches(maxPages) {
			return nil, errFetchBudget
		}
		return k.Guard.Get(ctx, u)
	}
	body, err := sitemapBody(first.Body)
	if err != nil {
		return nil, permanent("%s: %v", start, err)
	}
	sitemap, isSitemap := sitemapOf(body)
	if isSitemap {
		queue = k.sitemapPages(ctx, sitemap, allowed, maxPages, get)
		if len(queue) == 0 {
			if ctx.Err() != nil {
				return nil, stopped(ctx, start)
			}
			if robotsErr != nil {
				return nil, failed(robotsErr)
			}
			return nil, permanent("the sitemap %s lists no page of %s that its robots.txt allows", start, first.URL.Host)
		}
	} else {
		queue = []string{canonical(first.URL)}
		read = first
	}
	seen := map[string]bool{}
	var docs []Document
	var lastErr error
	var tempErr error // the last fetch that failed for a reason that may pass
	kept := 0         // bytes of text in docs
	skipped := 0      // pages fetched that were not read (failed, or redirected away)
	for len(queue) > 0 && len(docs) < maxPages {
		if ctx.Err() != nil {
			return nil, stopped(ctx, start) // an attempt that ran out of time, not a site that cannot be read
		}
		u := queue[0]
		queue = queue[1:]
		if seen[u] {
			continue
		}
		seen[u] = true
		p := read
		read = nil
		if p == nil {
			if p, err = get(u); err != nil {
				if errors.Is(err, errFetchBudget) {
					slog.WarnContext(ctx, "crawl: too many pages fetched; the pages left are not read",
						"site", start, "fetched", fetches-1, "read", len(docs))
					break
				}
				if ctx.Err() != nil {
					// The fetch was cut by the job's end (a shutdown,
					// the attempt's timeout): the page is not at fault.
					return nil, stopped(ctx, start)
				}
				lastErr = err
				if temporary(err) {
					tempErr = err
				}
				skipped++
				slog.WarnContext(ctx, "crawl: page skipped", "url", u, "err", err)
				continue
			}
			if h := p.URL.Hostname(); !strings.EqualFold(h, root.Hostname()) && !strings.EqualFold(h, first.URL.Hostname()) {
				// A page that redirects to another host (an /out?to=
				// redirector) is another site's page: not read, as its
				// links are not followed. (http to https is the site.)
				lastErr = fmt.Errorf("%s redirects off the site, to %s", u, p.URL.Redacted())
				skipped++
				slog.WarnContext(ctx, "crawl: page skipped", "url", u, "err", lastErr)
				continue
			}
			if !robotsFor(p.URL).allowed(p.URL) {
				// A page that redirects to one robots.txt does not allow
				// is not read, nor are its links followed.
				lastErr = fmt.Errorf("%s redirects to %s, which robots.txt does not allow", u, p.URL.Redacted())
				skipped++
				slog.WarnContext(ctx, "crawl: page skipped", "url", u, "err", lastErr)
				continue
			}
		}
		// A page reached by a redirect is not read again under its own URL.
		seen[canonical(p.URL)] = true
		d, _, err := Extract(ctx, pageName(p.URL), p.Body, p.URL.String())
		if ctx.Err() != nil {
			return nil, stopped(ctx, start)
		}
		if err == nil {
			if kept += d.size(); kept > k.SiteBytes && len(docs) > 0 {
				slog.WarnContext(ctx, "crawl: the site's text reached its bound; the pages left are not read",
					"site", start, "pages", len(docs), "bytes", kept-d.size(), "bound", k.SiteBytes)
				break
			}
			d.URL = p.URL.String()
			docs = append(docs, d)
		} else {
			lastErr = err
			skipped++
		}
		if isSitemap {
			continue // a sitemap's pages are the ones it lists
		}
		for l := range links(p.Body, p.URL) {
			if len(queue) >= maxPages*4 {
				break
			}
			// A page may hold many links, each matched against every
			// rule of a robots.txt of up to maxRobotsBytes: the time is
			// looked at between them, not only between pages.
			if ctx.Err() != nil {
				return nil, stopped(ctx, start)
			}
			if c := canonical(l); !seen[c] && allowed(l) {
				queue = append(queue, c)
			}
		}
	}
	if len(docs) == 0 {
		if tempErr == nil && robotsErr != nil && temporary(robotsErr) {
			tempErr = robotsErr // the pages of a host whose robots.txt may be read on a retry
		}
		if tempErr != nil {
			// A retry may read the page that failed for now.
			return nil, fmt.Errorf("no page of %s could be read: %w", start, tempErr)
		}
		if lastErr == nil {
			return nil, permanent("no page of %s could be read", start)
		}
		return nil, permanent("no page of %s could be read: %v", start, lastErr)
	}
	if skipped > 0 {
		slog.InfoContext(ctx, "crawl: pages skipped", "site", start, "read", len(docs), "skipped", skipped)
	}
	return docs, nil
}

// errFetchBudget ends a crawl that made maxFetches fetches.
var errFetchBudget = errors.New("the crawl's fetch budget is spent")

// maxFetches bounds the pages a crawl of maxPages fetches, those that fail
// included.
func maxFetches(maxPages int) int { return 2*maxPages + 10 }

// stopped is the error of a crawl whose context ended (a graceful
// shutdown, the attempt's timeout): the context's, which the ingest worker
// retries, never a permanent one, which would fail the datasource for good.
func stopped(ctx context.Context, start string) error {
	err := ctx.Err()
	if cause := context.Cause(ctx); cause != nil && cause != err {
		return fmt.Errorf("crawling %s: %w (%v)", start, err, cause)
	}
	return fmt.Errorf("crawling %s: %w", start, err)
}

// temporary reports whether err, a page's fetch failing while the job's
// context has not ended, may pass on its own: the site answered 408, 429 or
// a 5xx, or the fetch timed out, or its connection was reset or cut, or the
// DNS lookup timed out. Anything else is taken as the site's answer: a
// 404 or 410, a destination the guard refuses, a refused connection or a
// host that does not resolve, a page too large. It is the one rule for a
// crawl's pages and a web_page's (fetch).
func temporary(err error) bool {
	if netguard.Blocked(err) {
		return false
	}
	var status *netguard.StatusError
	if errors.As(err, &status) {
		return status.Code == http.StatusRequestTimeout || status.Code == http.StatusTooManyRequests || status.Code >= 500
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return dnsErr.IsTimeout || dnsErr.IsTemporary
	}
	var netErr net.Error
	return errors.As(err, &netErr) && netErr.Timeout() ||
		errors.Is(err, context.DeadlineExceeded) || // the guard's own timeout
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) // closed before or while answering
}

// size is the bytes of a document's text, its title and headings included.
func (d Document) size() int {
	n := len(d.Title)
	for _, s := range d.Sections {
		n += len(s.Heading) + len(s.Text)
	}
	return n
}

func pageName(u *url.URL) string {
	if u.Path == "" || strings.HasSuffix(u.Path, "/") {
		return u.Path + "index.html"
	}
	return u.Path
}

// sitemapOf reads a sitemap: a urlset's pages, or a sitemap index's
// sitemaps; ok is false when b is not one.
func sitemapOf(b []byte) (sitemap, bool) {
	trimmed := bytes.TrimSpace(b)
	if !bytes.HasPrefix(trimmed, []byte("<?xml")) && !bytes.HasPrefix(trimmed, []byte("<urlset")) && !bytes.HasPrefix(trimmed, []byte("<sitemapindex")) {
		return sitemap{}, false
	}
	var doc struct {
		XMLName xml.Name
		URLs    []struct {
			Loc string `xml:"loc"`
		} `xml:"url"`
		Sitemaps []struct {
			Loc string `xml:"loc"`
		} `xml:"sitemap"`
	}
	if err := xml.Unmarshal(b, &doc); err != nil {
		return sitemap{}, false
	}
	if doc.XMLName.Local != "urlset" && doc.XMLName.Local != "sitemapindex" {
		return sitemap{}, false
	}
	var out sitemap
	for _, u := range doc.URLs[:min(len(doc.URLs), maxSitemapURLs)] {
		out.pages = append(out.pages, strings.TrimSpace(u.Loc))
	}
	for _, m := range doc.Sitemaps[:min(len(doc.Sitemaps), maxSitemaps)] {
		out.sitemaps = append(out.sitemaps, strings.TrimSpace(m.Loc))
	}
	return out, true
}

// sitemap is what a sitemap lists: pages (a urlset), or other sitemaps (a
// sitemap index).
type sitemap struct{ pages, sitemaps []string }

// maxSitemaps bounds the sitemaps of an index that are read.
const maxSitemaps = 50

// sitemapPages are the pages a sitemap lists that allowed takes (pages of
// the site its robots.txt allows), up to maxPages: those of a urlset, or
// those of the urlsets a sitemap index lists (one level; sitemaps allowed
// only, fetched by get, within the crawl's fetch budget, and one that
// fails is skipped).
func (k *Knowledge) sitemapPages(ctx context.Context, m sitemap, allowed func(*url.URL) bool, maxPages int, get func(string) (*netguard.Page, error)) []string {
	var out []string
	add := func(pages []string) {
		for _, u := range pages {
			if len(out) >= maxPages || ctx.Err() != nil {
				return
			}
			if pu, err := url.Parse(u); err == nil && allowed(pu) {
				out = append(out, canonical(pu))
			}
		}
	}
	add(m.pages)
	for _, loc := range m.sitemaps {
		if len(out) >= maxPages || ctx.Err() != nil {
			break
		}
		if u, err := url.Parse(loc); err != nil || !allowed(u) {
			continue
		}
		p, err := get(loc)
		if errors.Is(err, errFetchBudget) {
			slog.WarnContext(ctx, "crawl: too many sitemaps fetched; the sitemaps left are not read", "url", loc)
			break
		}
		if err != nil {
			slog.WarnContext(ctx, "crawl: sitemap skipped", "url", loc, "err", err)
			continue
		}
		body, err := sitemapBody(p.Body)
		if err != nil {
			slog.WarnContext(ctx, "crawl: sitemap skipped", "url", loc, "err", err)
			continue
		}
		if child, ok := sitemapOf(body); ok {
			add(child.pages)
		}
	}
	return out
}

// maxSitemapBytes bounds a gzipped sitemap once decompressed, as the
// guard bounds a plain one (10 MiB): a gzip bomb of a few KiB would
// otherwise inflate to gigabytes in the worker every tenant's ingestion
// shares.
const maxSitemapBytes = 10 << 20

// sitemapBody is b decompressed when it is gzip (a sitemap.xml.gz, which
// sites serve as application/gzip, not as a Content-Encoding the
// transport undoes), up to maxSitemapBytes; else b. Gzip that cannot be
// read is returned as it is (not a sitemap, then).
func sitemapBody(b []byte) ([]byte, error) {
	if len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		return b, nil
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return b, nil
	}
	out, err := io.ReadAll(io.LimitReader(zr, maxSitemapBytes+1))
	if len(out) > maxSitemapBytes {
		return nil, fmt.Errorf("the sitemap is larger than %d bytes uncompressed", maxSitemapBytes)
	}
	if err != nil {
		return b, nil
	}
	return out, nil
}

// sameHost reports whether a and b name the same host (in any case) and
// port (the scheme's when none is given).
func sameHost(a, b *url.URL) bool {
	return strings.EqualFold(a.Hostname(), b.Hostname()) && effectivePort(a) == effectivePort(b)
}

// canonical is the URL a page is known by: its host in lower case and an
// empty path as "/", so that https://Example.com, the start URL, and a
// page's link to "/" are one page, read once.
func canonical(u *url.URL) string {
	c := *u
	c.Host = strings.ToLower(c.Host)
	if c.Path == "" && c.Opaque == "" {
		c.Path, c.RawPath = "/", ""
	}
	return c.String()
}

func effectivePort(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	if strings.EqualFold(u.Scheme, "https") {
		return "443"
	}
	return "80"
}

// links are a page's <a href> targets, resolved, without fragments, one
// at a time: a page of 10 MiB of "<a href=a>" is a million links, which
// held at once took 236 MiB, where the crawl keeps a few thousand.
func links(b []byte, base *url.URL) iter.Seq[*url.URL] {
	return func(yield func(*url.URL) bool) {
		z := html.NewTokenizer(bytes.NewReader(b))
		for {
			switch z.Next() {
			case html.ErrorToken:
				return
			case html.StartTagToken, html.SelfClosingTagToken:
				name, hasAttr := z.TagName()
				if string(name) != "a" || !hasAttr {
					continue
				}
				for {
					k, v, more := z.TagAttr()
					if string(k) == "href" {
						if u, err := base.Parse(string(v)); err == nil && (u.Scheme == "http" || u.Scheme == "https") {
							u.Fragment = ""
							if !yield(u) {
								return
							}
						}
					}
					if !more {
						break
					}
				}
			}
		}
	}
}
