package knowledge

import (
	"bytes"
	"compress/zlib"
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// deflated is a stream object of b, compressed.
func deflated(b []byte) string {
	var z bytes.Buffer
	w, _ := zlib.NewWriterLevel(&z, zlib.BestSpeed)
	_, _ = w.Write(b)
	_ = w.Close()
	return fmt.Sprintf("<< /Length %d /Filter /FlateDecode >>\nstream\n%s\nendstream", z.Len(), z.Bytes())
}

// bombPage is a one-page PDF's objects whose content stream is content and
// whose font, when toUnicode is set, maps its codes with that CMap.
func bombPage(content, toUnicode []byte) []string {
	font := "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"
	objs := []string{
		"<< /Type /Catalog /Pages 2 0 R >>",
		"<< /Type /Pages /Kids [4 0 R] /Count 1 >>",
		font,
		"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> /Contents 5 0 R >>",
		deflated(content),
	}
	if toUnicode != nil {
		objs[2] = "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /ToUnicode 6 0 R >>"
		objs = append(objs, deflated(toUnicode))
	}
	return objs
}

// SECURITY: files a keyless visitor can send as a chat attachment, each of
// which made the PDF reader (github.com/ledongthuc/pdf, patched in
// third_party/pdf) allocate GiBs from a few bytes: a number in the file
// sizing an allocation, or an operand stack that grew without bound. Some
// killed the process with a fatal out-of-memory that no recover catches.
// Each must now be an error (or a small document) for a few MiB of
// allocation: TotalAlloc counts every byte allocated, so the bound is
// deterministic, not a timing. Not parallel, so that other tests'
// allocations do not count.
func TestExtractPDFAllocationBombs(t *testing.T) {
	text := []byte("BT /F1 12 Tf 72 720 Td (Hello world) Tj ET")
	// 48 MiB of operands, under maxPDFPageContent: 24 Mi values on the
	// reader's operand stack, GiBs of it.
	flood := bytes.Repeat([]byte("0 "), 24<<20)
	// The table's Prev points back at itself.
	prevLoop := func() []byte {
		b := pdfOf(onePage("x"), nil)
		start := bytes.LastIndex(b, []byte("\nxref\n")) + 1
		return bytes.Replace(b, []byte("/Root 1 0 R"), fmt.Appendf(nil, "/Root 1 0 R /Prev %d", start), 1)
	}

	for _, tc := range []struct {
		name string
		pdf  []byte
	}{
		// An object stream whose /N is an object inside itself: resolving
		// it resolved the stream, which resolved /N ... until the Go stack
		// overflowed (fatal, no recover).
		{"object stream resolving itself", objStmCycle()},
		// The reviewer's file: an xref stream of /Size 2³³ (make of 256 GiB).
		{"xref stream size", []byte("%PDF-1.5\n1 0 obj\n<< /Type /XRef /Size 8589934592 /W [1 1 1] /Root 2 0 R /Length 3 >>\nstream\n\x01\x00\x00\nendstream\nendobj\nstartxref\n9\n%%EOF")},
		// An xref table subsection starting at object 40,000,000 (1.2 GiB).
		{"xref table subsection", []byte("%PDF-1.4\n1 0 obj\n<< /Type /Catalog >>\nendobj\nxref\n40000000 1\n0000000009 00000 n \ntrailer\n<< /Size 1 /Root 1 0 R >>\nstartxref\n45\n%%EOF\n")},
		// An xref stream's field 2 GB wide (a 2 GB row buffer).
		{"xref stream field width", []byte("%PDF-1.5\n1 0 obj\n<< /Type /XRef /Size 1 /W [1 1 2000000000] /Root 2 0 R /Length 3 >>\nstream\n\x01\x00\x00\nendstream\nendobj\nstartxref\n9\n%%EOF")},
		{"xref prev loop", prevLoop()},
		{"content stream flood", pdfOf(bombPage(flood, nil), nil)},
		{"tounicode flood", pdfOf(bombPage(text, flood), nil)},
		// A CMap block claiming 20 M mappings, none given (640 MB of them).
		{"tounicode count", pdfOf(bombPage(text, []byte("20000000 beginbfchar endbfchar")), nil)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Logf("%d bytes", len(tc.pdf))
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			doc, _, err := Extract(context.Background(), "bomb.pdf", tc.pdf, "")
			runtime.ReadMemStats(&after)
			alloc := after.TotalAlloc - before.TotalAlloc
			t.Logf("allocated %d MiB; err: %v", alloc>>20, err)
			require.Less(t, alloc, uint64(256<<20), "allocated %d MiB", alloc>>20)
			if err == nil {
				require.Less(t, textLen(doc), 1<<20)
			}
		})
	}
}

// objStmCycle is a PDF whose catalog's /Pages (object 3) is in object
// stream 2, whose /N is object 3: an xref stream (object 4) says so.
func objStmCycle() []byte {
	var b bytes.Buffer
	b.WriteString("%PDF-1.5\n")
	off := map[int]int{}
	obj := func(n int, body string) {
		off[n] = b.Len()
		fmt.Fprintf(&b, "%d 0 obj\n%s\nendobj\n", n, body)
	}
	obj(1, "<< /Type /Catalog /Pages 3 0 R >>")
	inner := "3 0 << /Type /Pages /Kids [] /Count 0 >>"
	obj(2, fmt.Sprintf("<< /Type /ObjStm /N 3 0 R /First 4 /Length %d >>\nstream\n%s\nendstream", len(inner), inner))
	entry := func(typ byte, f2 uint32, f3 uint16) []byte {
		return []byte{typ, byte(f2 >> 24), byte(f2 >> 16), byte(f2 >> 8), byte(f2), byte(f3 >> 8), byte(f3)}
	}
	off[4] = b.Len()
	var rows []byte
	rows = append(rows, entry(0, 0, 0xffff)...)
	rows = append(rows, entry(1, uint32(off[1]), 0)...)
	rows = append(rows, entry(1, uint32(off[2]), 0)...)
	rows = append(rows, entry(2, 2, 0)...) // object 3: in stream 2, first
	rows = append(rows, entry(1, uint32(off[4]), 0)...)
	fmt.Fprintf(&b, "4 0 obj\n<< /Type /XRef /Size 5 /W [1 4 2] /Root 1 0 R /Length %d >>\nstream\n%s\nendstream\nendobj\n", len(rows), rows)
	fmt.Fprintf(&b, "startxref\n%d\n%%%%EOF\n", off[4])
	return b.Bytes()
}

// A font's ToUnicode CMap is interpreted once for each name a page gives
// the font: a CMap of 60 MiB of spaces (75 KB deflated) took 0.11 s a
// name, a page naming it a thousand times 2 minutes, and no context is
// heeded within a page. The CMaps count with the content streams.
func TestExtractPDFToUnicodeNamedManyTimes(t *testing.T) {
	cmap := []byte("/CIDInit /ProcSet findresource begin 12 dict begin begincmap 1 begincodespacerange <00> <FF> endcodespacerange 1 beginbfchar <61> <0041> endbfchar" +
		strings.Repeat(" ", 60<<20) + " endcmap")
	var fonts, content strings.Builder
	content.WriteString("BT ")
	for i := range 40 {
		fmt.Fprintf(&fonts, "/F%d 3 0 R ", i)
		fmt.Fprintf(&content, "/F%d 12 Tf (a) Tj ", i)
	}
	content.WriteString("ET")
	b := pdfOf([]string{
		"<< /Type /Catalog /Pages 2 0 R >>",
		"<< /Type /Pages /Kids [4 0 R] /Count 1 >>",
		"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /ToUnicode 6 0 R >>",
		"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << " + fonts.String() + ">> >> /Contents 5 0 R >>",
		deflated([]byte(content.String())),
		deflated(cmap),
	}, nil)
	start := time.Now()
	_, _, err := Extract(context.Background(), "fonts.pdf", b, "")
	took := time.Since(start)
	require.ErrorContains(t, err, "expands past")
	require.Less(t, took, 2*time.Second, "the CMap was interpreted for each name")
}
