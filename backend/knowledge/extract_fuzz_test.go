package knowledge

import (
	"archive/zip"
	"bytes"
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/xuri/excelize/v2"
)

// fuzzNames are the names FuzzExtract gives its input, chosen by the
// input's first byte: half of the bytes choose a PDF, the reader most
// exposed to hostile files.
var fuzzNames = []string{".pdf", ".docx", ".xlsx", ".pptx", ".csv", ".json", ".html", ".md"}

func fuzzName(c byte) string {
	if c < 128 {
		return "f.pdf"
	}
	return "f" + fuzzNames[int(c)%len(fuzzNames)]
}

// fuzzSeed is the input FuzzExtract reads as a file called name with body b.
func fuzzSeed(name string, b []byte) []byte {
	c := byte(0)
	for c < 255 && fuzzName(c) != "f"+name {
		c++
	}
	return append([]byte{c}, b...)
}

// zipBytes is a zip of the given parts, in order.
func zipBytes(parts ...string) []byte {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for i := 0; i+1 < len(parts); i += 2 {
		w, _ := zw.Create(parts[i])
		_, _ = w.Write([]byte(parts[i+1]))
	}
	_ = zw.Close()
	return buf.Bytes()
}

// fuzzSeeds are small valid files of each kind and the hostile files of
// extract_pdf_bombs_test.go (floods made small).
func fuzzSeeds() [][]byte {
	text := []byte("BT /F1 12 Tf 72 720 Td (Hello world) Tj ET")
	flood := bytes.Repeat([]byte("0 "), 4096)
	x := excelize.NewFile()
	_ = x.SetSheetRow("Sheet1", "A1", &[]any{"Product", "Price"})
	_ = x.SetSheetRow("Sheet1", "A2", &[]any{"Widget", 42})
	var xlsx bytes.Buffer
	_ = x.Write(&xlsx)
	seeds := [][]byte{
		fuzzSeed(".pdf", minimalPDF("Hello world", "Second page")),
		fuzzSeed(".pdf", pdfOf(onePage("Returns within 30 days"), nil)),
		fuzzSeed(".pdf", pdfOf(bombPage(text, []byte("1 begincodespacerange <00> <FF> endcodespacerange 1 beginbfchar <48> <0041> endbfchar 1 beginbfrange <61> <7A> <0061> endbfrange")), nil)),
		fuzzSeed(".pdf", objStmCycle()),
		fuzzSeed(".pdf", []byte("%PDF-1.5\n1 0 obj\n<< /Type /XRef /Size 8589934592 /W [1 1 1] /Root 2 0 R /Length 3 >>\nstream\n\x01\x00\x00\nendstream\nendobj\nstartxref\n9\n%%EOF")),
		fuzzSeed(".pdf", []byte("%PDF-1.4\n1 0 obj\n<< /Type /Catalog >>\nendobj\nxref\n40000000 1\n0000000009 00000 n \ntrailer\n<< /Size 1 /Root 1 0 R >>\nstartxref\n45\n%%EOF\n")),
		fuzzSeed(".pdf", []byte("%PDF-1.5\n1 0 obj\n<< /Type /XRef /Size 1 /W [1 1 2000000000] /Root 2 0 R /Length 3 >>\nstream\n\x01\x00\x00\nendstream\nendobj\nstartxref\n9\n%%EOF")),
		fuzzSeed(".pdf", pdfOf(bombPage(flood, nil), nil)),
		fuzzSeed(".pdf", pdfOf(bombPage(text, flood), nil)),
		fuzzSeed(".pdf", pdfOf(bombPage(text, []byte("20000000 beginbfchar endbfchar")), nil)),
		fuzzSeed(".docx", zipBytes("word/document.xml", `<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body><w:p><w:pPr><w:pStyle w:val="Heading1"/></w:pPr><w:r><w:t>Title</w:t></w:r></w:p><w:p><w:r><w:t>Body text</w:t></w:r></w:p></w:body></w:document>`)),
		fuzzSeed(".pptx", zipBytes("ppt/slides/slide1.xml", `<p:sld xmlns:p="http://schemas.openxmlformats.org/presentationml/2006/main" xmlns:a="http://schemas.openxmlformats.org/drawingml/2006/main"><p:cSld><p:spTree><p:sp><p:txBody><a:p><a:r><a:t>Slide one</a:t></a:r></a:p></p:txBody></p:sp></p:spTree></p:cSld></p:sld>`)),
		fuzzSeed(".xlsx", xlsx.Bytes()),
		fuzzSeed(".csv", []byte("name,price\nwidget,42\n\"a \"\"quoted\"\" one\",7\n")),
		fuzzSeed(".json", []byte(`{"name":"widget","price":42,"tags":["a","b"],"nested":{"x":[1,{"y":null}]}}`)),
		fuzzSeed(".html", []byte("<html><head><title>T</title></head><body><h1>Head</h1><p>Text <b>bold</b></p><table><tr><td>1</td></tr></table></body></html>")),
		fuzzSeed(".md", []byte("# Title\n\nSome text.\n\n## Part\n\n- item\n\n```\ncode\n```\n")),
	}
	return seeds
}

// FuzzExtract feeds arbitrary files to ExtractHead: each must return
// (an error is fine) within about its 10 s context, without a fatal
// runtime error and without allocating more than 512 MiB. A fuzz worker
// runs its inputs one at a time, so TotalAlloc's growth is this input's.
func FuzzExtract(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) == 0 {
			return
		}
		name := fuzzName(in[0])
		b := in[1:]
		// A call that ignores its context would never reach the checks
		// below: crash the worker, so that the fuzzer keeps the input.
		hang := time.AfterFunc(30*time.Second, func() {
			panic(fmt.Sprintf("ExtractHead(%q, %d bytes) still running after 30 s", name, len(b)))
		})
		defer hang.Stop()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		start := time.Now()
		_, _, _, _ = ExtractHead(ctx, name, b, "", 64<<10)
		took := time.Since(start)
		runtime.ReadMemStats(&after)
		if took > 12*time.Second {
			t.Fatalf("ExtractHead(%q, %d bytes) took %v", name, len(b), took)
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 512<<20 {
			t.Fatalf("ExtractHead(%q, %d bytes) allocated %d MiB", name, len(b), alloc>>20)
		}
	})
}

// SECURITY: PDFs whose text the reader's font decoding (third_party/pdf,
// page.go) made cost hours or GiBs, though their content streams are
// within maxPDFPageContent. Each must now fail, or give a small document,
// promptly and for little allocation. Not parallel, so that other tests'
// allocations do not count.
func TestExtractPDFTextBombs(t *testing.T) {
	shown := "BT /F1 12 Tf 72 720 Td (" + strings.Repeat("A", 4096) + ") Tj ET\n"
	// A font whose /Differences array holds n names.
	differences := func(n int) []byte {
		objs := bombPage([]byte(strings.Repeat(shown, 256)), nil)
		objs[2] = "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding << /Differences [0 " +
			strings.Repeat("/zz ", n) + "] >> >>"
		return pdfOf(objs, nil)
	}
	for _, tc := range []struct {
		name string
		pdf  []byte
	}{
		// A ToUnicode mapping "A" to 64 Ki runes, shown 4,096 times: 256 Mi
		// runes (GiBs of them).
		{"tounicode long destination", pdfOf(bombPage([]byte(shown),
			[]byte("1 begincodespacerange <00> <FF> endcodespacerange 1 beginbfchar <41> <"+strings.Repeat("0041", 1<<16)+"> endbfchar")), nil)},
		// 300,000 bfranges, each scanned for each of 1 Mi codes shown
		// (now looked up in an index: the page's text is read).
		{"tounicode many ranges", pdfOf(bombPage([]byte(strings.Repeat(shown, 256)),
			[]byte("1 begincodespacerange <00> <FF> endcodespacerange "+strings.Repeat("3 beginbfrange <42> <42> <0041> <42> <42> <0041> <42> <42> <0041> endbfrange\n", 100000))), nil)},
		// 300,000 codespace ranges, each scanned for each of 1 Mi codes
		// shown.
		{"tounicode many codespaces", pdfOf(bombPage([]byte(strings.Repeat(shown, 256)),
			[]byte(strings.Repeat("3 begincodespacerange <43> <FF> <00> <FF> <00> <FF> endcodespacerange\n", 100000)+
				"1 beginbfrange <41> <42> <0041> endbfrange")), nil)},
		// 300,000 bfchars, each scanned for each of 1 Mi codes shown.
		{"tounicode many chars", pdfOf(bombPage([]byte(strings.Repeat(shown, 256)),
			[]byte("1 begincodespacerange <00> <FF> endcodespacerange "+strings.Repeat("3 beginbfchar <42> <0041> <42> <0041> <42> <0041> endbfchar\n", 100000))), nil)},
		// /Differences of 500,000 unknown names, each scanned for each of 1 Mi
		// bytes shown.
		{"encoding many differences", differences(500000)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Logf("%d bytes", len(tc.pdf))
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			start := time.Now()
			doc, _, err := Extract(ctx, "bomb.pdf", tc.pdf, "")
			took := time.Since(start)
			runtime.ReadMemStats(&after)
			alloc := after.TotalAlloc - before.TotalAlloc
			t.Logf("took %v, allocated %d MiB; err: %v", took, alloc>>20, err)
			require.NoError(t, ctx.Err(), "Extract returned only at its deadline")
			require.Less(t, took, 10*time.Second)
			require.Less(t, alloc, uint64(256<<20), "allocated %d MiB", alloc>>20)
			if err == nil { // the 1 Mi codes shown, not more
				require.LessOrEqual(t, textLen(doc), 4<<20)
			}
		})
	}
}
