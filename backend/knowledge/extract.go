package knowledge

import (
	"archive/zip"
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"runtime/debug"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"codeberg.org/readeck/go-readability"
	"github.com/JohannesKaufmann/html-to-markdown/v2/converter"
	"github.com/JohannesKaufmann/html-to-markdown/v2/plugin/base"
	"github.com/JohannesKaufmann/html-to-markdown/v2/plugin/commonmark"
	"github.com/JohannesKaufmann/html-to-markdown/v2/plugin/table"
	"github.com/ledongthuc/pdf"
	"github.com/xuri/excelize/v2"
	"golang.org/x/net/html"
)

// Limits of extraction.
const (
	// MaxFileBytes bounds an uploaded file.
	MaxFileBytes = 20 << 20
	// maxUnzipped bounds what a zip-based file (DOCX, PPTX, XLSX) may
	// decompress to, against decompression bombs.
	maxUnzipped = 100 << 20
	// minText is the least text an extraction may produce; a file may
	// produce textPerByte times its size when that is more. Text rarely
	// grows past its file (a spreadsheet's rows repeat their short
	// headers): 4 × MaxFileBytes still holds any real document, while a
	// crafted one (a header cell of megabytes repeated on every row, a
	// JSON path thousands of levels deep on every leaf) stops there
	// instead of exhausting memory.
	minText     = 16 << 20
	textPerByte = 4
	// maxLabel bounds a label repeated on each line: a table's header
	// cell, a JSON value's path.
	maxLabel = 160
	// maxPDFPages and maxPDFNodes bound the walk of a PDF's page tree,
	// whose /Count and /Kids a crafted file sets at will (or makes
	// cyclic).
	maxPDFPages = 10_000
	maxPDFNodes = 4 * maxPDFPages
	maxPDFDepth = 64
)

// maxText is how many bytes of text a file of n bytes may produce.
func maxText(n int) int { return max(minText, textPerByte*n) }

// ErrUnsupported is a file type Parley cannot read.
var ErrUnsupported = errors.New("unsupported file type")

// Kinds of file, detected from their bytes.
const (
	KindPDF      = "application/pdf"
	KindDOCX     = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
	KindPPTX     = "application/vnd.openxmlformats-officedocument.presentationml.presentation"
	KindXLSX     = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
	KindHTML     = "text/html"
	KindMarkdown = "text/markdown"
	KindCSV      = "text/csv"
	KindJSON     = "application/json"
	KindText     = "text/plain"
)

// Detect tells a file's kind from its bytes (and, between the kinds of
// plain text, from its name's extension), never from a declared
// Content-Type.
func Detect(name string, b []byte) (string, error) {
	switch {
	case bytes.HasPrefix(b, []byte("%PDF-")):
		return KindPDF, nil
	case bytes.HasPrefix(b, []byte("PK\x03\x04")):
		zr, err := zip.NewReader(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			return "", fmt.Errorf("%w: a damaged zip archive", ErrUnsupported)
		}
		for _, f := range zr.File {
			switch {
			case f.Name == "word/document.xml":
				return KindDOCX, nil
			case strings.HasPrefix(f.Name, "ppt/slides/"):
				return KindPPTX, nil
			case f.Name == "xl/workbook.xml":
				return KindXLSX, nil
			}
		}
		return "", fmt.Errorf("%w: a zip archive that is not DOCX, PPTX or XLSX", ErrUnsupported)
	}
	if !utf8.Valid(b) {
		return "", fmt.Errorf("%w: binary content (%s)", ErrUnsupported, http.DetectContentType(b))
	}
	ext := strings.ToLower(path.Ext(name))
	sniff := http.DetectContentType(b)
	switch {
	// Markdown may hold HTML, and a README often opens with some (a
	// centred <p align="center"> logo, a <!-- comment -->), which the
	// sniffer takes for a page: read as HTML, its headings and sections
	// were lost and its text came out escaped (\# Install, \*\*bold\**).
	// Only a whole HTML document named .md is a page.
	case (ext == ".md" || ext == ".markdown") && !htmlDocument(b):
		return KindMarkdown, nil
	case strings.HasPrefix(sniff, "text/html") || ext == ".html" || ext == ".htm":
		return KindHTML, nil
	case ext == ".md" || ext == ".markdown":
		return KindMarkdown, nil
	case ext == ".csv":
		return KindCSV, nil
	case ext == ".json" || (json.Valid(b) && len(bytes.TrimSpace(b)) > 0 && (bytes.TrimSpace(b)[0] == '{' || bytes.TrimSpace(b)[0] == '[')):
		return KindJSON, nil
	}
	return KindText, nil
}

// htmlDocument reports whether b's beginning holds the tags of a whole
// HTML document (a doctype, <html>, <head> or <body>), not only the
// fragments Markdown may embed.
func htmlDocument(b []byte) bool {
	head := bytes.ToLower(b[:min(len(b), 1024)])
	for _, tag := range []string{"<!doctype html", "<html", "<head", "<body"} {
		if bytes.Contains(head, []byte(tag)) {
			return true
		}
	}
	return false
}

// errUnreadable is a file that made a reader fail unexpectedly (a damaged
// or crafted file).
var errUnreadable = errors.New("the file is damaged or unreadable")

// errFull stops an extraction that has produced all the text it may.
var errFull = errors.New("extraction full")

// Extract turns a file's bytes into a document. It stops when ctx ends,
// and refuses a file whose text would pass maxText (a file crafted to
// expand). Its errors other than ctx's are about the file: retrying
// cannot fix them.
func Extract(ctx context.Context, name string, b []byte, pageURL string) (Document, string, error) {
	doc, kind, _, err := extract(ctx, name, b, pageURL, maxText(len(b)), false)
	return doc, kind, err
}

// ExtractHead is Extract for a reader that uses at most limit bytes of
// text: it stops once it has that much and returns the document's
// beginning, reporting whether it cut.
func ExtractHead(ctx context.Context, name string, b []byte, pageURL string, limit int) (doc Document, kind string, cut bool, err error) {
	return extract(ctx, name, b, pageURL, min(limit, maxText(len(b))), true)
}

// extraction is the state of one extraction: its context, and the text it
// has produced against its limit.
type extraction struct {
	ctx         context.Context
	used, limit int
	tokens      int // XML tokens of Office parts read (markup)
}

// markup counts an XML token of an Office part: a limitError once past
// limit/bytesPerToken of them.
func (x *extraction) markup() error {
	if x.tokens++; x.tokens > x.limit/bytesPerToken {
		return limitError(fmt.Sprintf("the document's markup is longer than %d XML elements and runs of text", x.limit/bytesPerToken))
	}
	return nil
}

// take counts n more bytes of text: errFull once past the limit, or ctx's
// error once it has ended.
func (x *extraction) take(n int) error {
	x.used += n
	if x.used > x.limit {
		return errFull
	}
	return x.ctx.Err()
}

func extract(ctx context.Context, name string, b []byte, pageURL string, limit int, head bool) (doc Document, kind string, cut bool, err error) {
	if len(b) > MaxFileBytes {
		return Document{}, "", false, fmt.Errorf("the file is larger than %d bytes", MaxFileBytes)
	}
	kind, err = Detect(name, b)
	if err != nil {
		return Document{}, "", false, err
	}
	// The readers (the PDF one above all) may panic on a damaged file:
	// that is the file's fault, not a reason to bring the server down.
	defer func() {
		if r := recover(); r != nil {
			slog.WarnContext(ctx, "extraction: a reader panicked", "name", name, "kind", kind, "panic", r, "stack", string(debug.Stack()))
			doc, cut, err = Document{}, false, errUnreadable
		}
	}()
	x := &extraction{ctx: ctx, limit: limit}
	switch kind {
	case KindPDF:
		doc, err = extractPDF(x, b)
	case KindDOCX:
		doc, err = extractDOCX(x, b)
	case KindPPTX:
		doc, err = extractPPTX(x, b)
	case KindXLSX:
		doc, err = extractXLSX(x, b)
	case KindHTML:
		doc, err = extractHTML(x, b, pageURL, head)
	case KindMarkdown, KindText:
		doc = Markdown(string(b))
	case KindCSV:
		doc, err = extractCSV(x, b)
	case KindJSON:
		doc, err = extractJSON(x, b)
	}
	if err == nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	if err == nil && textLen(doc) > limit {
		err = errFull // from a reader that does not count as it goes
	}
	if errors.Is(err, errFull) {
		var bound limitError
		if !head && errors.As(err, &bound) {
			return Document{}, kind, false, bound
		}
		if !head {
			return Document{}, kind, false, fmt.Errorf("the file's text is longer than %d bytes", limit)
		}
		doc, cut, err = clipDocument(doc, limit), true, nil
	}
	if err != nil {
		return Document{}, kind, false, err
	}
	if doc.Title == "" {
		// Cleaned with the rest: a page's name is its URL's decoded path,
		// whose %00 or %FF Postgres refuses in text (every attempt failed).
		doc.Title = name
	}
	doc = Clean(doc)
	if empty(doc) {
		return Document{}, kind, false, errors.New("the document holds no text")
	}
	return doc, kind, cut, nil
}

// textLen is the length of a document's headings and text.
func textLen(d Document) int {
	n := 0
	for _, s := range d.Sections {
		n += len(s.Heading) + len(s.Text)
	}
	return n
}

// clipDocument keeps the first limit bytes of a document's headings and
// text.
func clipDocument(d Document, limit int) Document {
	var out []Section
	for _, s := range d.Sections {
		if limit <= 0 {
			break
		}
		s.Heading = clip(s.Heading, limit)
		limit -= len(s.Heading)
		s.Text = clip(s.Text, max(limit, 0))
		limit -= len(s.Text)
		out = append(out, s)
	}
	d.Sections = out
	return d
}

// clip cuts s to at most n bytes, on a character boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// label cuts a label repeated on each line (a header cell, a JSON path)
// to maxLabel bytes, marking the cut.
func label(s string) string {
	if len(s) <= maxLabel {
		return s
	}
	return clip(s, maxLabel-len("…")) + "…"
}

// maxHeading bounds a document's title and a section's heading path, in
// bytes: every chunk of the section repeats them (stored, indexed and
// embedded with each), and a heading line of a megabyte over a section of
// thousands of chunks wrote gigabytes (or failed every attempt, past the
// megabyte a tsvector holds).
const maxHeading = 1000

// clipHeading cuts a title or heading path to maxHeading bytes, marking the cut.
func clipHeading(s string) string {
	if len(s) <= maxHeading {
		return s
	}
	return clip(s, maxHeading-len("…")) + "…"
}

// Clean makes a document's strings storable text: valid UTF-8 without
// NUL bytes (which PDFs with two-byte fonts yield, and which Postgres
// refuses in text), its title and headings at most maxHeading bytes.
func Clean(d Document) Document {
	d.Title = clipHeading(cleanText(d.Title))
	sections := make([]Section, len(d.Sections))
	for i, s := range d.Sections {
		s.Heading, s.Text = clipHeading(cleanText(s.Heading)), cleanText(s.Text)
		sections[i] = s
	}
	d.Sections = sections
	return d
}

func cleanText(s string) string {
	return strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", ""), "\uFFFD")
}

func empty(d Document) bool {
	for _, s := range d.Sections {
		if strings.TrimSpace(s.Text) != "" {
			return false
		}
	}
	return true
}

// Markdown splits text into sections at its headings, each with its heading
// path: ATX headings (# ...) outside fenced code blocks (a "# comment" line
// in a code sample is not a heading), and reStructuredText/Setext headings
// (a line underlined by a run of =, -, ~, ^ or " at least as long as it),
// whose levels follow the order in which the underline characters first
// appear, as in reStructuredText.
func Markdown(text string) Document {
	text = loneCRs(text)
	var doc Document
	var path []string
	// A section's text is the run of lines between two headings: a slice
	// of text, from its first line up to where the next line starts.
	from, to := 0, 0 // the section so far is text[from:to]
	var rest string  // the text from the line being read on
	write := func(line string) {
		at := len(text) - len(rest) // where line starts
		if from == to {
			from = at
		}
		to = at + len(line)
	}
	flush := func() {
		if section := text[from:to]; strings.TrimSpace(section) != "" {
			var names []string
			for _, p := range path {
				if p != "" {
					names = append(names, p)
				}
			}
			doc.Sections = append(doc.Sections, Section{Heading: strings.Join(names, " > "), Text: section})
		}
		from, to = 0, 0
	}
	heading := func(level int, title string) {
		flush()
		if level-1 < len(path) {
			path = path[:level-1]
		}
		for len(path) < level-1 {
			path = append(path, "")
		}
		path = append(path, title)
		if doc.Title == "" && level == 1 {
			doc.Title = title
		}
	}
	// Lines are cut from the text as the loop reaches them, each with its
	// "\n" (a slice of every line would cost 16 bytes a line: 320 MB for
	// 20 MB of blank lines).
	fence := ""       // the fence that opened the code block we are in
	underlines := ""  // underline characters in order of first use
	prevBlank := true // the line before the current one is blank
	for rest = text; rest != ""; {
		line, after := cutLine(rest)
		trim := strings.TrimSpace(line)
		if fence != "" {
			if strings.HasPrefix(trim, fence) {
				fence = ""
			}
			write(line)
			rest = after
			continue
		}
		if strings.HasPrefix(trim, "```") || strings.HasPrefix(trim, "~~~") {
			fence = trim[:3]
			write(line)
			rest = after
			continue
		}
		level := 0
		for level < len(trim) && trim[level] == '#' {
			level++
		}
		if level > 0 && level <= 6 && len(trim) > level && trim[level] == ' ' {
			heading(level, strings.TrimSpace(trim[level:]))
			prevBlank = true
			rest = after
			continue
		}
		// A numbered heading of plain text ("7.12. How do I put a package
		// on hold?", "Chapter 7. Basics"), wrapped over up to 3 lines.
		if prevBlank && trim != "" && line[0] != ' ' && line[0] != '\t' {
			var ahead [4]string
			if level, title, n := numberedHeading(firstLines(ahead[:0], rest)); n > 0 {
				heading(level, title)
				for range n {
					_, rest = cutLine(rest)
				}
				prevBlank = true
				continue
			}
		}
		// An underlined heading: a short text line after a blank line (or
		// the start), starting at the margin, followed by its underline.
		if after != "" && prevBlank && trim != "" && line[0] != ' ' && line[0] != '\t' && utf8.RuneCountInString(trim) <= 120 {
			next, afterNext := cutLine(after)
			if c, ok := underline(strings.TrimSpace(next), utf8.RuneCountInString(trim)); ok {
				if !strings.ContainsRune(underlines, c) {
					underlines += string(c)
				}
				heading(min(strings.IndexRune(underlines, c)+1, 6), trim)
				rest = afterNext
				prevBlank = true
				continue
			}
		}
		prevBlank = trim == ""
		write(line)
		rest = after
	}
	flush()
	return doc
}

// loneCRs is text with each CR that ends a line alone (classic Mac OS
// files; CRLF ends it with LF) made a LF: read as one line, a text starting
// with "# Title" was a document whose title was all of it, and nothing of
// it was indexed. The length is kept, and CRLF text is not copied.
func loneCRs(text string) string {
	i := strings.IndexByte(text, '\r')
	for i >= 0 && i+1 < len(text) && text[i+1] == '\n' {
		j := strings.IndexByte(text[i+1:], '\r')
		if j < 0 {
			return text
		}
		i += 1 + j
	}
	if i < 0 {
		return text
	}
	b := []byte(text)
	for ; i < len(b); i++ {
		if b[i] == '\r' && (i+1 == len(b) || b[i+1] != '\n') {
			b[i] = '\n'
		}
	}
	return string(b)
}

// cutLine splits s after its first line, whose "\n" it keeps.
func cutLine(s string) (line, rest string) {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i+1], s[i+1:]
	}
	return s, ""
}

// firstLines appends s's first lines to dst, up to its capacity.
func firstLines(dst []string, s string) []string {
	for s != "" && len(dst) < cap(dst) {
		var line string
		line, s = cutLine(s)
		dst = append(dst, line)
	}
	return dst
}

// numberedRE matches the start of a numbered heading: "Chapter 7. " (or
// Part, Appendix, Section; the period is required: "Section 3 of the
// contract says" is a sentence), or a number of two parts or more ("7.12. ",
// "3.2.1 "). A lone "7. " is not one: it starts list items too. Spaces
// may be no-break spaces (DocBook's text output puts them there).
var numberedRE = regexp.MustCompile(`^(?:(?:Chapter|Part|Appendix|Section)[\s\p{Zs}]+([0-9]+|[A-Z])\.|([0-9]+(?:\.[0-9]+)+)\.?)[\s\p{Zs}]+[^\s\p{Zs}]`)

// numberedHeading reads a numbered heading at the start of lines (which
// follows a blank line): its first line matches numberedRE, it runs at the
// margin for at most 3 lines (a hard-wrapped title) and a blank line (or
// the end) follows. It returns its level (1 for a chapter, else the
// number's parts), its title on one line and how many lines it took; n is
// 0 when lines do not start with one.
func numberedHeading(lines []string) (level int, title string, n int) {
	m := numberedRE.FindStringSubmatch(lines[0])
	if m == nil {
		return 0, "", 0
	}
	level = 1
	if m[2] != "" {
		level = min(strings.Count(m[2], ".")+1, 6)
	}
	var parts []string
	for n < len(lines) && n < 4 {
		l := lines[n]
		t := strings.TrimSpace(l)
		if t == "" {
			break
		}
		if n == 3 || l[0] == ' ' || l[0] == '\t' {
			return 0, "", 0 // longer than a title, or a body follows at once
		}
		parts = append(parts, t)
		n++
	}
	title = strings.Join(strings.Fields(strings.Join(parts, " ")), " ")
	if utf8.RuneCountInString(title) > 200 || (strings.HasSuffix(title, ".") && !strings.HasSuffix(title, "...")) {
		// Too long, or a sentence ("2.1 Version 2 adds a field."), not a title.
		return 0, "", 0
	}
	return level, title, n
}

// underline reports whether s is a heading underline for a title of n
// runes: one of =-~^" repeated, at least n times and at least 3.
func underline(s string, n int) (rune, bool) {
	if len(s) < 3 || len(s) < n {
		return 0, false
	}
	c := rune(s[0])
	if !strings.ContainsRune("=-~^\"", c) {
		return 0, false
	}
	for _, r := range s {
		if r != c {
			return 0, false
		}
	}
	return c, true
}

// ExtractHTML keeps a page's main content (readability) as Markdown.
func ExtractHTML(b []byte, pageURL string) (Document, error) {
	return extractHTML(&extraction{ctx: context.Background(), limit: maxText(len(b))}, b, pageURL, false)
}

// Bounds of a web page. Its readers hold it as a tree of nodes several
// times over (the parser's, readability's copy, the converter's), some
// 600 bytes a node: 2.8 MB of "<p>x<b>" took 700 MiB, a page of 20 MiB
// would take 5 GiB. And a table cell's colspan and rowspan are expanded
// by the converter into as many cells: a page of 416 bytes with one cell
// of colspan 10000 and rowspan 1000 took 1.7 GiB, one of 100000 by
// 100000 would end the process (a fatal out-of-memory).
const (
	// maxHTMLTokens bounds a page's tokens (tags, runs of text, comments):
	// at most about 200 MiB to read (510,000 tokens took 400 MiB); a long
	// article has tens of thousands.
	maxHTMLTokens = 1 << 18
	// maxSpanCells bounds the cells a page's colspan and rowspan add.
	maxSpanCells = 10_000
)

// extractHTML is ExtractHTML for an extraction: a page of more than
// maxHTMLTokens tokens (fewer for a head: what its text limit needs, at
// least 64 Ki) is refused, or for a head read up to there.
func extractHTML(x *extraction, b []byte, pageURL string, head bool) (Document, error) {
	limit := maxHTMLTokens
	if head {
		limit = min(limit, max(x.limit, 1<<16))
	}
	cut := false
	if n := htmlPrefix(b, limit); n < len(b) {
		if !head {
			return Document{}, limitError(fmt.Sprintf("the page has more than %d HTML tags and runs of text", limit))
		}
		b, cut = b[:n], true
	}
	if err := x.ctx.Err(); err != nil {
		return Document{}, err
	}
	u, _ := url.Parse(pageURL)
	article, err := readability.FromReader(bytes.NewReader(b), u)
	if err != nil || article.Node == nil {
		return Document{}, fmt.Errorf("the page has no readable content")
	}
	if err := x.ctx.Err(); err != nil {
		return Document{}, err
	}
	boundSpans(article.Node)
	conv := converter.NewConverter(converter.WithPlugins(base.NewBasePlugin(), commonmark.NewCommonmarkPlugin(), table.NewTablePlugin()))
	md, err := conv.ConvertNode(article.Node)
	if err != nil {
		return Document{}, err
	}
	doc := Markdown(string(md))
	if article.Title != "" {
		doc.Title = article.Title
	}
	doc.URL = pageURL
	if cut {
		return doc, errFull
	}
	return doc, nil
}

// htmlPrefix is the length of b's first limit tokens (all of b when it
// has no more), read with the tokenizer alone, which keeps nothing.
func htmlPrefix(b []byte, limit int) int {
	z := html.NewTokenizer(bytes.NewReader(b))
	n := 0
	for range limit {
		if z.Next() == html.ErrorToken {
			return len(b)
		}
		n += len(z.Raw())
	}
	if z.Next() == html.ErrorToken {
		return len(b)
	}
	return n
}

// boundSpans removes the colspan and rowspan of a page's table cells
// past maxSpanCells added cells (each cell's product counted, from the
// first), and all of them when a row has more than maxColumns cells: the
// converter inserts each added cell into its row's slice, shifting the
// cells after it.
func boundSpans(root *html.Node) {
	var cells []*html.Node
	wide := false
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode {
			switch n.Data {
			case "td", "th":
				cells = append(cells, n)
			case "tr":
				row := 0
				for c := n.FirstChild; c != nil; c = c.NextSibling {
					if c.Type == html.ElementNode && (c.Data == "td" || c.Data == "th") {
						row++
					}
				}
				wide = wide || row > maxColumns
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(root)
	budget := maxSpanCells
	for _, c := range cells {
		cols, rows := spanOf(c, "colspan"), spanOf(c, "rowspan")
		if cols == 1 && rows == 1 {
			continue
		}
		if added := cols*rows - 1; !wide && added <= budget {
			budget -= added
			continue
		}
		c.Attr = slices.DeleteFunc(c.Attr, func(a html.Attribute) bool {
			return a.Namespace == "" && (strings.EqualFold(a.Key, "colspan") || strings.EqualFold(a.Key, "rowspan"))
		})
	}
}

// spanOf is a cell's colspan or rowspan as the converter reads it (1 when
// absent or not a positive number), at most maxSpanCells+1.
func spanOf(n *html.Node, key string) int {
	for _, a := range n.Attr {
		if a.Namespace == "" && a.Key == key {
			v, err := strconv.Atoi(a.Val)
			if err != nil || v < 1 {
				return 1
			}
			return min(v, maxSpanCells+1)
		}
	}
	return 1
}

func extractPDF(x *extraction, b []byte) (Document, error) {
	r, err := pdf.NewReader(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		return Document{}, fmt.Errorf("not a readable PDF: %v", err)
	}
	var doc Document
	var content int64 // the pages' content streams, decompressed
	err = pdfPages(x, r, func(i int, p pdf.Page) error {
		// SECURITY: a content stream of a few KiB may inflate to GiBs, which
		// the reader interprets and whose text it gathers in memory: its
		// size is read first (streamed, nothing kept), bounded per page and
		// for the file.
		n, err := pdfContentSize(p, maxPDFPageContent+1)
		if err != nil {
			return fmt.Errorf("page %d: %v", i, err)
		}
		// So are its fonts' ToUnicode CMaps, which the reader interprets
		// once for each name a page gives a font, on every page: one CMap
		// of 120 MiB of spaces (a 150 KB file) took 0.22 s a name, and a
		// page naming it a thousand times 4 minutes, its context unheeded.
		if n < maxPDFPageContent && content+n <= maxPDFContent(len(b)) {
			cmaps, err := pdfCMapsSize(p, min(maxPDFPageContent-n, maxPDFContent(len(b))-content-n)+1)
			if err != nil {
				return fmt.Errorf("page %d: %v", i, err)
			}
			n += cmaps
		}
		if content += n; n > maxPDFPageContent || content > maxPDFContent(len(b)) {
			return fmt.Errorf("page %d: the pages' content expands past what a file of %d bytes may (%d MiB a page, %d MiB in all)",
				i, len(b), maxPDFPageContent>>20, maxPDFContent(len(b))>>20)
		}
		if err := x.ctx.Err(); err != nil {
			return err
		}
		text, err := p.GetPlainText(nil)
		if err != nil {
			return fmt.Errorf("page %d: %v", i, err)
		}
		doc.Sections = append(doc.Sections, Section{Text: text, Page: i})
		return x.take(len(text))
	})
	return doc, err
}

// maxPDFPageContent bounds the decompressed content streams of one PDF
// page, and maxPDFContent those of a file of n bytes: a page's content is
// its drawing operators, rarely more than a few MiB even for dense pages.
const maxPDFPageContent = 64 << 20

func maxPDFContent(n int) int64 { return max(256<<20, 64*int64(n)) }

// pdfContentSize is how many bytes p's content streams decompress to,
// reading at most limit of them.
func pdfContentSize(p pdf.Page, limit int64) (int64, error) {
	c := p.V.Key("Contents")
	streams := []pdf.Value{c}
	if c.Kind() == pdf.Array {
		streams = streams[:0]
		for i := range c.Len() {
			streams = append(streams, c.Index(i))
		}
	}
	return pdfStreamsSize(streams, limit)
}

// pdfCMapsSize is how many bytes the ToUnicode CMaps of p's fonts
// decompress to, each counted as often as a name of the page's gives it,
// reading at most limit of them.
func pdfCMapsSize(p pdf.Page, limit int64) (int64, error) {
	fonts := p.Resources().Key("Font")
	var streams []pdf.Value
	for _, name := range fonts.Keys() {
		streams = append(streams, fonts.Key(name).Key("ToUnicode"))
	}
	return pdfStreamsSize(streams, limit)
}

// pdfStreamsSize is how many bytes streams (values of other kinds count
// nothing) decompress to, reading at most limit of them, keeping nothing.
func pdfStreamsSize(streams []pdf.Value, limit int64) (int64, error) {
	var total int64
	for _, s := range streams {
		if s.Kind() != pdf.Stream || total > limit {
			continue
		}
		rd := s.Reader()
		n, err := io.Copy(io.Discard, io.LimitReader(rd, limit-total+1))
		_ = rd.Close()
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// pdfPages calls fn with each page of r in order. It walks the page tree
// itself, where the reader's Page(i) believes the tree's /Count (a crafted
// file claims 2⁶³ pages) and follows /Kids round a cycle forever: it stops
// at maxPDFPages pages, maxPDFNodes nodes or maxPDFDepth levels, and skips
// a page whose /Parent chain does not end (the reader would loop on it
// looking up the page's resources).
func pdfPages(x *extraction, r *pdf.Reader, fn func(i int, p pdf.Page) error) error {
	pages, nodes := 0, 0
	var walk func(v pdf.Value, depth int) error
	walk = func(v pdf.Value, depth int) error {
		nodes++
		if nodes > maxPDFNodes || depth > maxPDFDepth {
			return errors.New("not a readable PDF: a damaged page tree")
		}
		if err := x.ctx.Err(); err != nil {
			return err
		}
		switch v.Key("Type").Name() {
		case "Pages":
			kids := v.Key("Kids")
			for i := range kids.Len() {
				if err := walk(kids.Index(i), depth+1); err != nil {
					return err
				}
			}
		case "Page":
			pages++
			if pages > maxPDFPages {
				return fmt.Errorf("%w: more than %d pages", errFull, maxPDFPages)
			}
			if !parentsEnd(v) {
				return nil
			}
			return fn(pages, pdf.Page{V: v})
		}
		return nil
	}
	return walk(r.Trailer().Key("Root").Key("Pages"), 0)
}

// parentsEnd reports whether a page's chain of /Parent ends (or holds its
// /Resources) within maxPDFDepth links.
func parentsEnd(v pdf.Value) bool {
	for range maxPDFDepth {
		if v.IsNull() || !v.Key("Resources").IsNull() {
			return true
		}
		v = v.Key("Parent")
	}
	return false
}

// zipFiles opens a zip-based document, refusing one that would decompress
// past maxUnzipped.
func zipFiles(b []byte) (map[string]*zip.File, error) {
	zr, err := zip.NewReader(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		return nil, err
	}
	var total uint64
	files := map[string]*zip.File{}
	for _, f := range zr.File {
		total += f.UncompressedSize64
		if total > maxUnzipped {
			return nil, fmt.Errorf("the file decompresses to more than %d bytes", maxUnzipped)
		}
		files[f.Name] = f
	}
	return files, nil
}

// zipPart reads the paragraphs of an Office Open XML part of a zip-based
// document (see ooxmlParagraphs), streaming it: a part may decompress to
// maxUnzipped bytes, which are never held whole.
func zipPart(x *extraction, f *zip.File, each func(text, style string)) error {
	if f == nil {
		return errors.New("a part of the document is missing")
	}
	rc, err := f.Open()
	if err != nil {
		return err
	}
	defer rc.Close()
	// The header's size can lie: read no further than it says (the zip
	// reader also fails on an entry longer than its header).
	return ooxmlParagraphs(x, io.LimitReader(rc, int64(f.UncompressedSize64)), each)
}

// paragraphCost is what a paragraph of an Office document costs against
// an extraction's limit besides its text: its markup (a <w:p/> of 6
// bytes, which a crafted part repeats by millions) is work to parse, and
// a line of output, and must not be free.
const paragraphCost = 16

// bytesPerToken sets how many XML tokens (an element's start or end, a
// comment, a run of characters) the Office parts of an extraction may hold:
// one per bytesPerToken bytes of its text limit, counted apart from the
// text. A part of 16 M empty runs (<w:r/>, 143 KB zipped) took 7 s and
// 3 GiB of allocations to parse for no text at all; it now stops after
// 4 M tokens (1.3 s), a file of up to 4 MiB being allowed 16 MiB of text.
// Real markup is about 14 tokens a run of a few words with its properties
// (about 3 bytes of text a token), so the text limit is reached first, or
// about then; a chat attachment's head stops at whichever comes first.
const bytesPerToken = 4

// ooxmlParagraphs reads the text runs (w:t or a:t) of an Office Open XML
// part, calling each with every paragraph (w:p or a:p) and its style. It
// charges x each paragraph's text and paragraphCost as it goes, keeping
// only the paragraph it is in, and each token (markup); once x is full it
// calls each with what it has of that paragraph and stops with errFull (or
// a limitError, which is one).
func ooxmlParagraphs(x *extraction, r io.Reader, each func(text, style string)) error {
	dec := xml.NewDecoder(r)
	var cur strings.Builder
	style := ""
	inText := false
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		n := 0 // text added to the paragraph
		switch t := tok.(type) {
		case xml.StartElement:
			switch t.Name.Local {
			case "t":
				inText = true
			case "pStyle":
				for _, a := range t.Attr {
					if a.Name.Local == "val" {
						style = label(a.Value)
					}
				}
			case "tab":
				cur.WriteByte('\t')
				n = 1
			case "br":
				cur.WriteByte('\n')
				n = 1
			}
		case xml.EndElement:
			switch t.Name.Local {
			case "t":
				inText = false
			case "p":
				each(cur.String(), style)
				cur.Reset()
				style = ""
				n = paragraphCost
			}
		case xml.CharData:
			if inText {
				cur.Write(t)
				n = len(t)
			}
		}
		err = x.markup()
		if err == nil {
			err = x.take(n)
		}
		if err != nil {
			if cur.Len() > 0 {
				each(cur.String(), style)
			}
			return err
		}
	}
}

func extractDOCX(x *extraction, b []byte) (Document, error) {
	files, err := zipFiles(b)
	if err != nil {
		return Document{}, err
	}
	// Headings (Heading1..) become Markdown headings, so sections follow
	// them.
	var md strings.Builder
	err = zipPart(x, files["word/document.xml"], func(text, style string) {
		if n, ok := strings.CutPrefix(strings.ToLower(style), "heading"); ok {
			level, _ := strconv.Atoi(n)
			level = min(max(level, 1), 6)
			md.WriteString(strings.Repeat("#", level) + " " + text + "\n")
			return
		}
		md.WriteString(text + "\n\n")
	})
	if err != nil && !errors.Is(err, errFull) && !errors.Is(err, x.ctx.Err()) {
		return Document{}, fmt.Errorf("not a readable DOCX: %v", err)
	}
	return Markdown(md.String()), err
}

func extractPPTX(x *extraction, b []byte) (Document, error) {
	files, err := zipFiles(b)
	if err != nil {
		return Document{}, err
	}
	var slides []int
	for name := range files {
		if n, ok := strings.CutPrefix(name, "ppt/slides/slide"); ok {
			if i, err := strconv.Atoi(strings.TrimSuffix(n, ".xml")); err == nil && strings.HasSuffix(n, ".xml") {
				slides = append(slides, i)
			}
		}
	}
	sort.Ints(slides)
	var doc Document
	for _, i := range slides {
		var b strings.Builder
		err := zipPart(x, files[fmt.Sprintf("ppt/slides/slide%d.xml", i)], func(text, _ string) {
			if strings.TrimSpace(text) != "" {
				b.WriteString(text + "\n")
			}
		})
		if b.Len() > 0 || err == nil {
			doc.Sections = append(doc.Sections, Section{Heading: fmt.Sprintf("Slide %d", i), Text: b.String(), Page: i})
		}
		if errors.Is(err, errFull) || (err != nil && errors.Is(err, x.ctx.Err())) {
			return doc, err
		}
		if err != nil {
			return Document{}, fmt.Errorf("slide %d: %v", i, err)
		}
	}
	return doc, nil
}

// Bounds of a table (a spreadsheet, a CSV file). Tables meant to be read
// are far narrower: a row of more cells is a crafted or a broken file.
const (
	// maxColumns bounds a spreadsheet row's last non-empty cell. The
	// reader spreads a row's cells over a slice up to its last one (a
	// row of one cell at column XFD is 16,384 strings), so the bound
	// holds before any row is kept: 1,000 columns is four times what
	// Excel used to allow (256).
	maxColumns = 1_000
	// maxCells bounds a workbook's rows and cell positions (empty ones
	// between cells included), each of which costs the reader work and
	// memory even when it holds no text: 4 million is more than
	// maxUnzipped bytes of sheets can hold cells of text.
	maxCells = 4_000_000
	// maxFields bounds a CSV record's fields: the CSV reader holds a
	// record whole (a line of 20 million commas is 20 million fields).
	maxFields = 10_000
)

// limitError is a bound of extraction that a file passes: errFull for an
// extraction of a file's head (which keeps what it read), else an error
// with its message.
type limitError string

func (e limitError) Error() string        { return string(e) }
func (e limitError) Is(target error) bool { return target == errFull }

func extractXLSX(x *extraction, b []byte) (Document, error) {
	files, err := zipFiles(b)
	if err != nil {
		return Document{}, err
	}
	if err := checkSharedStrings(files["xl/sharedStrings.xml"]); err != nil {
		return Document{}, err
	}
	f, err := excelize.OpenReader(bytes.NewReader(b), excelize.Options{UnzipSizeLimit: maxUnzipped, UnzipXMLSizeLimit: maxUnzipped / 4})
	if err != nil {
		return Document{}, fmt.Errorf("not a readable XLSX: %v", err)
	}
	defer f.Close()
	var doc Document
	cells := 0
	for _, sheet := range f.GetSheetList() {
		text, err := sheetText(x, f, sheet, &cells)
		doc.Sections = append(doc.Sections, Section{Heading: sheet, Text: text})
		if err != nil {
			return doc, err
		}
	}
	return doc, nil
}

// maxSharedStrings bounds a workbook's shared strings table: the reader
// indexes every entry (about 50 bytes and 3 µs each) before the first cell
// is read. 16 million empty entries (80 MiB of <si/> in a 128 KB file)
// took 48 s; a million is more than maxCells of text in a workbook is
// likely to share.
const maxSharedStrings = 1 << 20

// checkSharedStrings refuses a shared strings table of more than
// maxSharedStrings entries, counted by a scan of the part that keeps
// nothing: a <si (or <prefix:si) start tag is an entry.
func checkSharedStrings(f *zip.File) error {
	if f == nil {
		return nil
	}
	rc, err := f.Open()
	if err != nil {
		return fmt.Errorf("not a readable XLSX: %v", err)
	}
	defer rc.Close()
	r := bufio.NewReaderSize(io.LimitReader(rc, int64(f.UncompressedSize64)), 64<<10)
	n := 0
	var prev2, prev1, prev byte // the three bytes before c
	for {
		c, err := r.ReadByte()
		if err != nil {
			return nil
		}
		// "si" after '<' or ':', before a delimiter: the byte c ends it.
		if prev == 'i' && prev1 == 's' && (prev2 == '<' || prev2 == ':') &&
			(c == '>' || c == '/' || c == ' ' || c == '\t' || c == '\n' || c == '\r') {
			if n++; n > maxSharedStrings {
				return fmt.Errorf("the spreadsheet's shared strings table has more than %d entries", maxSharedStrings)
			}
		}
		prev2, prev1, prev = prev1, prev, c
	}
}

// sheetText is rowsText of a sheet, read a row at a time; cells counts
// the workbook's rows and cell positions against maxCells.
func sheetText(x *extraction, f *excelize.File, sheet string, cells *int) (string, error) {
	rows, err := f.Rows(sheet)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	t := tableText{x: x}
	for n := 1; rows.Next(); n++ {
		row, err := rows.Columns()
		if err != nil {
			break // as excelize's GetRows: the sheet ends at a damaged row
		}
		if len(row) > maxColumns {
			return t.b.String(), fmt.Errorf("sheet %q, row %d: the spreadsheet has more than %d columns", sheet, n, maxColumns)
		}
		if *cells += 1 + len(row); *cells > maxCells {
			return t.b.String(), limitError(fmt.Sprintf("the spreadsheet has more than %d cells and rows", maxCells))
		}
		if err := t.row(row); err != nil {
			return t.b.String(), err
		}
	}
	if err := rows.Close(); err != nil {
		return t.b.String(), err
	}
	return t.end()
}

// tableText writes table rows as "header: value; ..." lines, so that each
// line stands alone in a chunk; a header cell is cut to maxLabel bytes
// there, since every line repeats it. Its rows come one at a time: the
// first is the header. Each row costs x its text and a byte per cell; it
// stops with x's error (keeping the lines so far) once x is full or its
// context ends.
type tableText struct {
	x      *extraction
	rows   int
	first  []string // the header row, whole
	header []string // the header row, each cell cut to a label
	more   bool     // a row after the first has cells
	cells  []string
	b      strings.Builder
}

func (t *tableText) row(r []string) error {
	t.rows++
	if t.rows == 1 {
		t.first = slices.Clone(r)
		t.header = make([]string, len(r))
		for i, h := range r {
			t.header[i] = label(h)
		}
		return t.x.take(len(r))
	}
	t.more = t.more || len(r) > 0
	t.cells = t.cells[:0]
	for i, v := range r {
		if strings.TrimSpace(v) == "" {
			continue
		}
		if i < len(t.header) && t.header[i] != "" {
			t.cells = append(t.cells, t.header[i]+": "+v)
		} else {
			t.cells = append(t.cells, v)
		}
	}
	n := t.b.Len()
	if len(t.cells) > 0 {
		t.b.WriteString(strings.Join(t.cells, "; ") + "\n")
	}
	return t.x.take(t.b.Len() - n + len(r))
}

// end finishes the table: a lone header row is the table's content,
// whole (its empty cells left out).
func (t *tableText) end() (string, error) {
	if t.rows > 0 && !t.more {
		t.cells = t.cells[:0]
		for _, v := range t.first {
			if strings.TrimSpace(v) != "" {
				t.cells = append(t.cells, v)
			}
		}
		if len(t.cells) > 0 {
			n := t.b.Len()
			t.b.WriteString(strings.Join(t.cells, "; ") + "\n")
			if err := t.x.take(t.b.Len() - n); err != nil {
				return t.b.String(), err
			}
		}
	}
	return t.b.String(), nil
}

func extractCSV(x *extraction, b []byte) (Document, error) {
	// The reader holds a record whole before returning it: a record too
	// wide is refused before it is read.
	if line := csvTooWide(b, maxFields); line > 0 {
		return Document{}, fmt.Errorf("the CSV file has more than %d fields in the record on line %d", maxFields, line)
	}
	r := csv.NewReader(bytes.NewReader(b))
	r.FieldsPerRecord = -1
	r.ReuseRecord = true
	t := tableText{x: x}
	for {
		rec, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return Document{}, fmt.Errorf("not a readable CSV: %v", err)
		}
		if err := t.row(rec); err != nil {
			return Document{Sections: []Section{{Text: t.b.String()}}}, err
		}
	}
	text, err := t.end()
	return Document{Sections: []Section{{Text: text}}}, err
}

// csvTooWide is the line on which the first record of b with more than
// limit fields starts, or 0 when there is none. It follows encoding/csv's
// syntax (a field in quotes may hold commas, doubled quotes and line
// breaks), reading each byte once and keeping nothing.
func csvTooWide(b []byte, limit int) int {
	fields, line, start := 1, 1, 1
	quoted, fieldStart := false, true
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case quoted:
			if c == '\n' {
				line++
			} else if c == '"' {
				if i+1 < len(b) && b[i+1] == '"' {
					i++
				} else {
					quoted = false
				}
			}
		case c == '"' && fieldStart:
			quoted, fieldStart = true, false
		case c == ',':
			if fields++; fields > limit {
				return start
			}
			fieldStart = true
		case c == '\n':
			line++
			fields, start, fieldStart = 1, line, true
		default:
			fieldStart = false
		}
	}
	return 0
}

// extractJSON writes each leaf value as a line "path: value", in the
// document's order; a path is cut to maxLabel bytes, since a deep one
// would repeat on every leaf. It reads the JSON a token at a time,
// holding only the path to the current value, and charges x each line
// and a byte per value (an array or object at its end: an empty one is
// work too).
func extractJSON(x *extraction, b []byte) (Document, error) {
	type frame struct {
		prefix string // the path of the array or object
		array  bool
		i      int    // the next element's index, in an array
		key    string // the current member's path, in an object
		member bool   // a member's value comes next, in an object
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	var lines strings.Builder
	var stack []frame
	var num []byte
	done := func(err error) (Document, error) {
		return Document{Sections: []Section{{Text: lines.String()}}}, err
	}
	values := 0
	for values == 0 || len(stack) > 0 {
		tok, err := dec.Token()
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		if err != nil {
			return Document{}, fmt.Errorf("not valid JSON: %v", err)
		}
		var path string
		if n := len(stack); n > 0 {
			top := &stack[n-1]
			if d, ok := tok.(json.Delim); ok && (d == '}' || d == ']') {
				stack = stack[:n-1]
				if err := x.take(1); err != nil {
					return done(err)
				}
				continue
			}
			switch {
			case top.array:
				path = label(top.prefix + "[" + strconv.Itoa(top.i) + "]")
				top.i++
			case !top.member: // a key
				k, _ := tok.(string)
				top.key, top.member = label(strings.TrimPrefix(top.prefix+"."+k, ".")), true
				continue
			default:
				path, top.member = top.key, false
			}
		}
		values++
		n := lines.Len()
		switch t := tok.(type) {
		case json.Delim:
			stack = append(stack, frame{prefix: path, array: t == '['})
		case string:
			lines.WriteString(path + ": " + t + "\n")
		case float64:
			num = strconv.AppendFloat(num[:0], t, 'g', -1, 64)
			lines.WriteString(path + ": ")
			lines.Write(num)
			lines.WriteByte('\n')
		case bool:
			lines.WriteString(path + ": " + strconv.FormatBool(t) + "\n")
		case nil:
			lines.WriteString(path + ": <nil>\n")
		}
		cost := lines.Len() - n // a leaf's line, an array or object nothing yet
		if cost > 0 {
			cost++
		}
		if err := x.take(cost); err != nil {
			return done(err)
		}
	}
	if _, err := dec.Token(); err != io.EOF {
		return Document{}, errors.New("not valid JSON: data after the top-level value")
	}
	return done(nil)
}
