package knowledge

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// htmlArticle is a page whose main content readability keeps, with extra
// inside it.
func htmlArticle(extra string) []byte {
	return []byte(`<html><head><title>Prices</title></head><body><article><h1>Prices</h1>` +
		`<p>Our prices are listed below for every product we sell, with the usual terms and conditions applying to each of them.</p>` +
		extra +
		`<p>More text follows the table, describing the details of the prices above in several sentences.</p></article></body></html>`)
}

// The table converter expands a cell's colspan and rowspan into as many
// cells: a page of 416 bytes with one cell of 10000 by 1000 took 1.7 GiB,
// one of 100000 by 100000 ended the process (a fatal out-of-memory, which
// no recover catches), for a visitor's attachment as for an upload.
func TestExtractHTMLSpanBomb(t *testing.T) {
	bomb := htmlArticle(`<table><tr><th>a</th><th>b</th></tr><tr><td colspan="3000" rowspan="1000">x</td><td>y</td></tr></table>`)
	var doc Document
	var err error
	n := allocated(func() { doc, _, err = Extract(context.Background(), "bomb.html", bomb, "https://example.com/") })
	require.Less(t, n, uint64(64<<20), "allocated %d MiB", n>>20)
	require.NoError(t, err)
	require.Contains(t, allText(doc), "More text follows")
	require.Less(t, textLen(doc), 4096)

	// Many cells of a small span each: the spans together are bounded.
	many := htmlArticle(`<table><tr><th>a</th><th>b</th></tr>` + strings.Repeat(`<tr><td colspan="100" rowspan="100">x</td><td>y</td></tr>`, 2000) + `</table>`)
	n = allocated(func() { doc, _, err = Extract(context.Background(), "many.html", many, "https://example.com/") })
	require.Less(t, n, uint64(maxBombAlloc), "allocated %d MiB", n>>20)
	if err == nil {
		require.Contains(t, allText(doc), "More text follows")
	}

	// Real spans are kept: the merged cell's row keeps its columns.
	real := htmlArticle(`<table><tr><th>Plan</th><th>Price</th><th>Seats</th></tr><tr><td colspan="2">Free</td><td>1</td></tr><tr><td>Team</td><td>10</td><td>5</td></tr></table>`)
	doc, _, err = Extract(context.Background(), "real.html", real, "https://example.com/")
	require.NoError(t, err)
	require.Contains(t, allText(doc), "| Free |       | 1     |")
}

// A page is held as a tree of nodes several times over, some 600 bytes a
// node: 2.8 MB of "<p>x<b>" took 700 MiB to read (a page of 20 MiB, 5 GiB;
// a chat attachment of 5 MiB, 1.3 GiB, and a message may have many). A
// page of too many tokens is refused, and its head read up to its limit.
func TestExtractHTMLNodeBomb(t *testing.T) {
	bomb := []byte("<html><body><p>Refunds take fourteen days.</p>" + strings.Repeat("<p>x<b>", 400_000) + "</body></html>")
	var err, headErr error
	var head Document
	var cut bool
	n := allocated(func() {
		_, _, err = Extract(context.Background(), "bomb.html", bomb, "https://example.com/")
		head, _, cut, headErr = ExtractHead(context.Background(), "bomb.html", bomb, "https://example.com/", 64<<10)
	})
	// Without the bound: 2,336 MiB. With it, about 120 MiB, and 260 under
	// the race detector (which drops a share of sync.Pool's reuse).
	require.Less(t, n, uint64(512<<20), "allocated %d MiB", n>>20)
	require.ErrorContains(t, err, "HTML tags")
	require.NoError(t, headErr)
	require.True(t, cut)
	require.LessOrEqual(t, textLen(head), 64<<10)
	require.Contains(t, allText(head), "Refunds take fourteen days.")
}
