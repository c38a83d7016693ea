package knowledge

import (
	"archive/zip"
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/xuri/excelize/v2"
)

func zipOf(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for name, body := range files {
		w, err := zw.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(body))
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// minimalPDF writes a valid PDF with one page of text per argument, with a
// correct cross-reference table.
func minimalPDF(pages ...string) []byte {
	var b bytes.Buffer
	var offsets []int
	obj := func(s string) {
		offsets = append(offsets, b.Len())
		fmt.Fprintf(&b, "%d 0 obj\n%s\nendobj\n", len(offsets), s)
	}
	b.WriteString("%PDF-1.4\n")
	n := len(pages)
	kids := make([]string, n)
	for i := range pages {
		kids[i] = fmt.Sprintf("%d 0 R", 4+2*i)
	}
	obj("<< /Type /Catalog /Pages 2 0 R >>")
	obj(fmt.Sprintf("<< /Type /Pages /Kids [%s] /Count %d >>", strings.Join(kids, " "), n))
	obj("<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>")
	for i, text := range pages {
		stream := fmt.Sprintf("BT /F1 12 Tf 72 720 Td (%s) Tj ET", text)
		obj(fmt.Sprintf("<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> /Contents %d 0 R >>", 5+2*i))
		obj(fmt.Sprintf("<< /Length %d >>\nstream\n%s\nendstream", len(stream), stream))
	}
	xref := b.Len()
	fmt.Fprintf(&b, "xref\n0 %d\n0000000000 65535 f \n", len(offsets)+1)
	for _, o := range offsets {
		fmt.Fprintf(&b, "%010d 00000 n \n", o)
	}
	fmt.Fprintf(&b, "trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n", len(offsets)+1, xref)
	return b.Bytes()
}

func allText(d Document) string {
	var b strings.Builder
	for _, s := range d.Sections {
		b.WriteString(s.Heading + "|" + s.Text + "\n")
	}
	return b.String()
}

func TestExtractors(t *testing.T) {
	t.Parallel()
	xlsx := excelize.NewFile()
	xlsx.SetSheetRow("Sheet1", "A1", &[]any{"Product", "Price"})
	xlsx.SetSheetRow("Sheet1", "A2", &[]any{"Widget", 42})
	var xbuf bytes.Buffer
	if err := xlsx.Write(&xbuf); err != nil {
		t.Fatal(err)
	}
	docx := zipOf(t, map[string]string{"word/document.xml": `<?xml version="1.0"?>
<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body>
<w:p><w:pPr><w:pStyle w:val="Heading1"/></w:pPr><w:r><w:t>Returns</w:t></w:r></w:p>
<w:p><w:r><w:t>Refunds take </w:t></w:r><w:r><w:t>fourteen days.</w:t></w:r></w:p>
</w:body></w:document>`})
	pptx := zipOf(t, map[string]string{
		"ppt/slides/slide1.xml": `<p:sld xmlns:p="p" xmlns:a="a"><p:txBody><a:p><a:r><a:t>Welcome deck</a:t></a:r></a:p></p:txBody></p:sld>`,
		"ppt/slides/slide2.xml": `<p:sld xmlns:p="p" xmlns:a="a"><p:txBody><a:p><a:r><a:t>Quarterly revenue grew</a:t></a:r></a:p></p:txBody></p:sld>`,
		"ppt/presentation.xml":  `<p/>`,
	})
	for _, tc := range []struct {
		name, file string
		body       []byte
		kind       string
		want       []string
		page       int // a section with this page must exist
	}{
		{"pdf", "guide.pdf", minimalPDF("Opening hours are nine to five", "Closed on Sundays"), KindPDF, []string{"Opening hours are nine to five", "Closed on Sundays"}, 2},
		{"docx", "policy.docx", docx, KindDOCX, []string{"Returns|", "Refunds take fourteen days."}, 0},
		{"pptx", "deck.pptx", pptx, KindPPTX, []string{"Slide 1|Welcome deck", "Slide 2|Quarterly revenue grew"}, 2},
		{"xlsx", "prices.xlsx", xbuf.Bytes(), KindXLSX, []string{"Sheet1|Product: Widget; Price: 42"}, 0},
		{"html", "page.html", []byte(`<html><head><title>Shop FAQ</title></head><body><nav>Home | About</nav><article><h1>Shipping</h1><p>We ship worldwide within three days of your order being placed with us, tracked.</p><h2>Costs</h2><p>Shipping is free above fifty euros for every destination in Europe, and otherwise five euros.</p><table><tr><th>Zone</th><th>Days</th></tr><tr><td>EU</td><td>3</td></tr></table></article><footer>© Shop</footer></body></html>`), KindHTML, []string{"We ship worldwide within three days", "Costs|", "Shipping is free above fifty euros", "| EU"}, 0},
		{"markdown", "notes.md", []byte("# Guide\nIntro text.\n## Install\nRun make run.\n"), KindMarkdown, []string{"Guide|Intro text.", "Guide > Install|Run make run."}, 0},
		{"text", "notes.txt", []byte("Plain words here."), KindText, []string{"Plain words here."}, 0},
		{"csv", "people.csv", []byte("name,role\nAda,engineer\nGrace,admiral\n"), KindCSV, []string{"name: Ada; role: engineer", "name: Grace; role: admiral"}, 0},
		{"json", "data.json", []byte(`{"faq":[{"q":"Open on Sunday?","a":"No"}]}`), KindJSON, []string{"faq[0].a: No", "faq[0].q: Open on Sunday?"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc, kind, err := Extract(context.Background(), tc.file, tc.body, "https://shop.example/faq")
			if err != nil {
				t.Fatal(err)
			}
			if kind != tc.kind {
				t.Fatalf("kind %q, want %q", kind, tc.kind)
			}
			got := allText(doc)
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Fatalf("%q not in extracted text:\n%s", w, got)
				}
			}
			if tc.page > 0 {
				found := false
				for _, s := range doc.Sections {
					found = found || s.Page == tc.page
				}
				if !found {
					t.Fatalf("no section for page %d", tc.page)
				}
			}
			if tc.name == "html" && strings.Contains(got, "Home | About") {
				t.Fatal("navigation kept: readability should keep the main content")
			}
		})
	}
}

func TestExtractRefusesBadFiles(t *testing.T) {
	t.Parallel()
	bomb := func() []byte {
		var buf bytes.Buffer
		zw := zip.NewWriter(&buf)
		w, _ := zw.Create("word/document.xml")
		zeros := make([]byte, 1<<20)
		for i := 0; i < (maxUnzipped>>20)+2; i++ {
			w.Write(zeros)
		}
		zw.Close()
		return buf.Bytes()
	}()
	for name, tc := range map[string]struct {
		file string
		body []byte
		want string
	}{
		"binary":        {"x.bin", []byte{0xff, 0xfe, 0x00, 0x01, 0x80, 0x81}, "unsupported"},
		"plain zip":     {"x.zip", zipOf(t, map[string]string{"a.txt": "hi"}), "not DOCX, PPTX or XLSX"},
		"mislabeled":    {"report.pdf", []byte("just text pretending"), ""},
		"empty":         {"empty.txt", []byte("  \n\t "), "no text"},
		"bomb":          {"bomb.docx", bomb, "decompresses to more than"},
		"broken pdf":    {"x.pdf", []byte("%PDF-1.4\ngarbage"), "PDF"},
		"too large":     {"big.txt", bytes.Repeat([]byte("a"), MaxFileBytes+1), "larger than"},
		"broken json":   {"x.json", []byte(`{"a":`), "JSON"},
		"truncated zip": {"x.docx", []byte("PK\x03\x04junk"), "damaged"},
	} {
		t.Run(name, func(t *testing.T) {
			doc, kind, err := Extract(context.Background(), tc.file, tc.body, "")
			if tc.want == "" { // a .pdf name on text: read as the text it is
				if err != nil || kind != KindText || !strings.Contains(allText(doc), "pretending") {
					t.Fatalf("mislabeled text: %v %q", err, kind)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error with %q", err, tc.want)
			}
		})
	}
}

// A line may end with CR alone (classic Mac OS files): read as one line,
// a text starting with "# Title" was a document whose title was all of
// it, of no section, and nothing of it was indexed.
// A Markdown file that opens with HTML, as many a README does (a centred
// logo, a comment), is Markdown: read as a page, its headings and sections
// were lost and its text escaped. A whole HTML document named .md is still
// a page.
func TestMarkdownOpeningWithHTML(t *testing.T) {
	t.Parallel()
	for _, opening := range []string{`<p align="center"><img src="logo.png" alt="Acme"></p>`, `<div align="center">Acme</div>`, `<!-- generated by docs -->`} {
		b := []byte(opening + "\n\n# Acme Widget\n\nAcme is a widget.\n\n## Install\n\nRun `make install` then **restart** the daemon.\n")
		kind, err := Detect("README.md", b)
		require.NoError(t, err)
		require.Equal(t, KindMarkdown, kind, "%s", opening)
		doc, _, err := Extract(context.Background(), "README.md", b, "")
		require.NoError(t, err)
		require.Equal(t, "Acme Widget", doc.Title, "%s", opening)
		require.Contains(t, allText(doc), "Acme Widget > Install|\nRun `make install` then **restart** the daemon.", "%s", opening)
	}
	page := []byte("<!DOCTYPE html>\n<html><head><title>Guide</title></head><body><article><h1>Install</h1><p>Run make install, then restart the daemon to load the new configuration.</p></article></body></html>")
	kind, err := Detect("guide.md", page)
	require.NoError(t, err)
	require.Equal(t, KindHTML, kind)
	kind, err = Detect("guide.md", []byte("<html><body><p>Hi</p></body></html>"))
	require.NoError(t, err)
	require.Equal(t, KindHTML, kind)
}

func TestMarkdownLoneCarriageReturns(t *testing.T) {
	t.Parallel()
	for _, eol := range []string{"\n", "\r\n", "\r"} {
		doc := Markdown(strings.Join([]string{"# Store FAQ", "## Opening hours", "We open at nine.", "", "Returns", "=======", "Thirty days.", ""}, eol))
		require.Equal(t, "Store FAQ", doc.Title, "%q", eol)
		var got []string
		for _, s := range doc.Sections {
			got = append(got, s.Heading+"|"+strings.TrimSpace(s.Text))
		}
		require.Equal(t, []string{"Store FAQ > Opening hours|We open at nine.", "Returns|Thirty days."}, got, "%q", eol)
	}
}

func TestMarkdownHeadings(t *testing.T) {
	t.Parallel()
	doc := Markdown(`# Store FAQ
## Opening hours
We open at nine.

` + "```" + `
# not a heading: a comment in a code sample
` + "```" + `
## Returns
Thirty days.

Packages
========

Binary packages must be .deb files.

Versions
--------
Dates sort year first.

Names
-----
Unique.
`)
	var got []string
	for _, s := range doc.Sections {
		got = append(got, s.Heading+"|"+strings.TrimSpace(s.Text))
	}
	require.Equal(t, []string{
		"Store FAQ > Opening hours|We open at nine.\n\n```\n# not a heading: a comment in a code sample\n```",
		"Store FAQ > Returns|Thirty days.",
		"Packages|Binary packages must be .deb files.",
		"Packages > Versions|Dates sort year first.",
		"Packages > Names|Unique.",
	}, got)
	require.Equal(t, "Store FAQ", doc.Title)
}

// Plain text numbers its headings (the Debian FAQ: "Chapter 7." and
// "7.12." at the margin, hard-wrapped, the answer indented); a table of
// contents, numbered list items and a number inside a sentence are not
// headings.
func TestNumberedHeadings(t *testing.T) {
	t.Parallel()
	// ¤: a no-break space, as DocBook's text output has them.
	doc := Markdown(strings.ReplaceAll(`Table of Contents

1. Basics
    1.1. What is a package?

Chapter¤1.¤Basics

1.1.¤What is a package? How is it
different from a tarball?

    A package is an archive with metadata.

1. Unpack it.

2. Install it.

1.2. Short

    Version 2.3 of the format
    2.4. is not a heading when indented.

Section 4 of the contract applies.

2.2 Version 2 adds a field.

Chapter 2. Tools

2.1.3 A third level

    dpkg and apt.
`, "¤", "\u00a0"))
	var got []string
	for _, s := range doc.Sections {
		got = append(got, s.Heading+"|"+strings.Join(strings.Fields(s.Text), " "))
	}
	require.Equal(t, []string{
		"|Table of Contents 1. Basics 1.1. What is a package?",
		"Chapter 1. Basics > 1.1. What is a package? How is it different from a tarball?|A package is an archive with metadata. 1. Unpack it. 2. Install it.",
		"Chapter 1. Basics > 1.2. Short|Version 2.3 of the format 2.4. is not a heading when indented. Section 4 of the contract applies. 2.2 Version 2 adds a field.",
		"Chapter 2. Tools > 2.1.3 A third level|dpkg and apt.",
	}, got)
}

func TestEmbedText(t *testing.T) {
	t.Parallel()
	require.Equal(t, "Store FAQ > Opening hours\n\nWe open at nine.", EmbedText("Store FAQ", "Store FAQ > Opening hours", "We open at nine."))
	require.Equal(t, "faq.txt > Hours\n\nNine.", EmbedText("faq.txt", "Hours", "Nine."))
	require.Equal(t, "Nine.", EmbedText("", "", "Nine."))
}
