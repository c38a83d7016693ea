package knowledge

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
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
// logged, before the page that would pass it). Pages that fail are skipped
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
	first, err := k.Guard.Get(ctx, start)
	if err != nil {
		if ctx.Err() != nil {
			return nil, stopped(ctx, start) // cancelled or out of time: not a site that cannot be read
		}
		if temporary(err) {
			return nil, fmt.Errorf("crawling %s: %w", start, err)
		}
		return nil, permanent("%s: %v", start, err)
	}
	var queue []string
	// read is a page already read, the queue's first: the start page,
	// which is not fetched a second time.
	var read *netguard.Page
	if urls, ok := sitemapURLs(first.Body); ok {
		for _, u := range urls {
			if pu, err := url.Parse(u); err == nil && pu.Host == root.Host {
				queue = append(queue, pu.String())
			}
			if len(queue) >= maxPages {
				break
			}
		}
	} else {
		queue = []string{first.URL.String()}
		read = first
	}
	seen := map[string]bool{}
	var docs []Document
	var lastErr error
	var tempErr error // the last fetch that failed for a reason that may pass
	kept := 0         // bytes of text in docs
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
			if p, err = k.Guard.Get(ctx, u); err != nil {
				if ctx.Err() != nil {
					// The fetch was cut by the job's end (a shutdown,
					// the attempt's timeout): the page is not at fault.
					return nil, stopped(ctx, start)
				}
				lastErr = err
				if temporary(err) {
					tempErr = err
				}
				slog.WarnContext(ctx, "crawl: page skipped", "url", u, "err", err)
				continue
			}
		}
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
		}
		for _, l := range links(p.Body, p.URL) {
			if l.Host == root.Host && !seen[l.String()] && len(queue) < maxPages*4 {
				queue = append(queue, l.String())
			}
		}
	}
	if len(docs) == 0 {
		if tempErr != nil {
			// A retry may read the page that failed for now.
			return nil, fmt.Errorf("no page of %s could be read: %w", start, tempErr)
		}
		return nil, permanent("no page of %s could be read: %v", start, lastErr)
	}
	return docs, nil
}

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

// sitemapURLs reads a sitemap (urlset) or the first level of a sitemap
// index; ok is false when b is not one.
func sitemapURLs(b []byte) ([]string, bool) {
	trimmed := bytes.TrimSpace(b)
	if !bytes.HasPrefix(trimmed, []byte("<?xml")) && !bytes.HasPrefix(trimmed, []byte("<urlset")) && !bytes.HasPrefix(trimmed, []byte("<sitemapindex")) {
		return nil, false
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
		return nil, false
	}
	if doc.XMLName.Local != "urlset" && doc.XMLName.Local != "sitemapindex" {
		return nil, false
	}
	var out []string
	for _, u := range doc.URLs {
		if len(out) >= maxSitemapURLs {
			break
		}
		out = append(out, strings.TrimSpace(u.Loc))
	}
	return out, true
}

// links are a page's <a href> targets, resolved, without fragments.
func links(b []byte, base *url.URL) []*url.URL {
	var out []*url.URL
	z := html.NewTokenizer(bytes.NewReader(b))
	for {
		switch z.Next() {
		case html.ErrorToken:
			return out
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
						out = append(out, u)
					}
				}
				if !more {
					break
				}
			}
		}
	}
}
