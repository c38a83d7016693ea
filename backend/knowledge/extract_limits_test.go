package knowledge

import (
	"bytes"
	"compress/zlib"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// pdfOf writes a PDF of the given objects (numbered from 1, the catalog
// first); xref, when set, changes the offsets its table gives.
func pdfOf(objs []string, xref func(offsets []int)) []byte {
	var b bytes.Buffer
	var offsets []int
	b.WriteString("%PDF-1.4\n")
	for i, o := range objs {
		offsets = append(offsets, b.Len())
		fmt.Fprintf(&b, "%d 0 obj\n%s\nendobj\n", i+1, o)
	}
	if xref != nil {
		xref(offsets)
	}
	start := b.Len()
	fmt.Fprintf(&b, "xref\n0 %d\n0000000000 65535 f \n", len(offsets)+1)
	for _, o := range offsets {
		fmt.Fprintf(&b, "%010d 00000 n \n", o)
	}
	fmt.Fprintf(&b, "trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n", len(offsets)+1, start)
	return b.Bytes()
}

// onePage is a valid PDF's objects: one page showing text.
func onePage(text string) []string {
	stream := fmt.Sprintf("BT /F1 12 Tf 72 720 Td (%s) Tj ET", text)
	return []string{
		"<< /Type /Catalog /Pages 2 0 R >>",
		"<< /Type /Pages /Kids [4 0 R] /Count 1 >>",
		"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>",
		"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> /Contents 5 0 R >>",
		fmt.Sprintf("<< /Length %d >>\nstream\n%s\nendstream", len(stream), stream),
	}
}

// A damaged or crafted PDF is an error, promptly: not a panic (which
// would bring down the server reading a visitor's attachment), not a loop
// over the 2⁶³ pages its /Count claims or round a cycle of its tree.
func TestExtractDamagedPDF(t *testing.T) {
	t.Parallel()
	doc, _, err := Extract(context.Background(), "ok.pdf", pdfOf(onePage("Returns within 30 days"), nil), "")
	require.NoError(t, err)
	require.Contains(t, allText(doc), "Returns within 30 days")

	with := func(i int, obj string) []string {
		objs := onePage("x")
		objs[i] = obj
		return objs
	}
	for name, tc := range map[string]struct {
		pdf  []byte
		want string
	}{
		"root xref to another object": {pdfOf(onePage("x"), func(o []int) { o[0] = o[2] }), "damaged or unreadable"},
		"root xref into a stream":     {pdfOf(onePage("x"), func(o []int) { o[0] = o[4] + 30 }), ""},
		"pages counting 2^63 no kids": {pdfOf(with(1, "<< /Type /Pages /Count 9223372036854775807 >>"), nil), "no text"},
		"pages counting 2^63":         {pdfOf(with(1, "<< /Type /Pages /Kids [4 0 R] /Count 9223372036854775807 >>"), nil), ""},
		"pages its own kid":           {pdfOf(with(1, "<< /Type /Pages /Kids [2 0 R 4 0 R] /Count 5 >>"), nil), "page tree"},
		"page its own parent":         {pdfOf(with(3, "<< /Type /Page /Parent 4 0 R /Contents 5 0 R >>"), nil), "no text"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			doc, _, err := Extract(ctx, "x.pdf", tc.pdf, "")
			require.NoError(t, ctx.Err(), "Extract returned only at its deadline")
			if tc.want == "" { // read as far as it can be
				if err == nil {
					require.Contains(t, allText(doc), "x")
				}
				return
			}
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// A page whose content stream is a few hundred KiB deflated and 100 MiB
// inflated is refused before the reader interprets it (and gathers its
// text in memory); a page of ordinary deflated content still reads.
func TestExtractPDFContentBomb(t *testing.T) {
	t.Parallel()
	deflated := func(content []byte) string {
		var z bytes.Buffer
		w := zlib.NewWriter(&z)
		_, _ = w.Write(content)
		_ = w.Close()
		return fmt.Sprintf("<< /Length %d /Filter /FlateDecode >>\nstream\n%s\nendstream", z.Len(), z.Bytes())
	}
	ok := onePage("x")
	ok[4] = deflated([]byte("BT /F1 12 Tf 72 720 Td (Deflated text reads) Tj ET"))
	doc, _, err := Extract(context.Background(), "ok.pdf", pdfOf(ok, nil), "")
	require.NoError(t, err)
	require.Contains(t, allText(doc), "Deflated text reads")

	bomb := onePage("x")
	show := []byte("(xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx) Tj\n")
	bomb[4] = deflated(append([]byte("BT /F1 12 Tf 72 720 Td "), bytes.Repeat(show, (100<<20)/len(show))...))
	b := pdfOf(bomb, nil)
	require.Less(t, len(b), 1<<20, "the bomb itself is small")
	_, _, err = Extract(context.Background(), "bomb.pdf", b, "")
	require.ErrorContains(t, err, "content expands past")
}

// A CSV whose huge header cell every row repeats cannot grow without
// bound: the header is cut, and a file whose text would pass its limit is
// refused (for ingestion) or read to the limit (for a chat attachment).
func TestExtractCSVRepeatingHeader(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	b.WriteString(strings.Repeat("H", 1<<20) + ",b\n") // a 1 MiB header cell
	for range 200_000 {
		b.WriteString("x,y\n")
	}
	// Repeated whole, the header would make 200 GB of text.
	_, _, err := Extract(context.Background(), "t.csv", b.Bytes(), "")
	require.ErrorContains(t, err, "longer than")

	doc, _, cut, err := ExtractHead(context.Background(), "t.csv", b.Bytes(), "", 64<<10)
	require.NoError(t, err)
	require.True(t, cut)
	require.LessOrEqual(t, textLen(doc), 64<<10)
	line, _, _ := strings.Cut(doc.Sections[0].Text, "\n")
	require.Equal(t, strings.Repeat("H", maxLabel-len("…"))+"…: x; b: y", line)

	// A few rows under such a header are read, each line short.
	small := []byte(strings.Repeat("H", 1<<20) + ",b\nx,y\nz,w\n")
	doc, _, err = Extract(context.Background(), "t.csv", small, "")
	require.NoError(t, err)
	require.Less(t, len(doc.Sections[0].Text), 2*maxLabel+40)
}

// A JSON nested thousands of levels deep around many leaves: the path
// written on each leaf's line is cut, so the text stays proportionate.
func TestExtractDeepJSON(t *testing.T) {
	t.Parallel()
	const depth, leaves = 5_000, 50_000
	var b bytes.Buffer
	b.WriteString(strings.Repeat(`{"key":`, depth) + "[")
	for i := range leaves {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('1')
	}
	b.WriteString("]" + strings.Repeat("}", depth))
	// Uncut, each line would carry a path of 20 kB: 1 GB in all.
	doc, _, err := Extract(context.Background(), "deep.json", b.Bytes(), "")
	require.NoError(t, err)
	text := doc.Sections[0].Text
	require.Equal(t, leaves, strings.Count(text, "\n"))
	require.Less(t, len(text), leaves*(maxLabel+10))

	doc, _, cut, err := ExtractHead(context.Background(), "deep.json", b.Bytes(), "", 4<<10)
	require.NoError(t, err)
	require.True(t, cut)
	require.LessOrEqual(t, textLen(doc), 4<<10)
}

// An extraction whose context ends stops with the context's error.
func TestExtractStopsWithItsContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, _, err := Extract(ctx, "t.csv", []byte("a,b\n1,2\n3,4\n"), "")
	require.ErrorIs(t, err, context.Canceled)
}

// NUL bytes (which Postgres refuses in text) and invalid UTF-8 never leave
// an extraction.
func TestExtractCleansText(t *testing.T) {
	t.Parallel()
	doc, _, err := Extract(context.Background(), "t.txt", []byte("# Ti\x00tle\n\na\x00b"), "")
	require.NoError(t, err)
	require.Equal(t, "Title", doc.Title)
	require.Equal(t, "Title", doc.Sections[0].Heading)
	require.Equal(t, "ab", strings.TrimSpace(doc.Sections[0].Text))

	// A two-byte font's text, as the PDF reader gives it.
	doc = Clean(Document{Sections: []Section{{Text: "\x00A\x00B\xff"}}})
	require.Equal(t, "AB\uFFFD", doc.Sections[0].Text)
}
