package knowledge

import (
	"archive/zip"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"regexp"
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
)

// Limits of extraction.
const (
	// MaxFileBytes bounds an uploaded file.
	MaxFileBytes = 20 << 20
	// maxUnzipped bounds what a zip-based file (DOCX, PPTX, XLSX) may
	// decompress to, against decompression bombs.
	maxUnzipped = 100 << 20
)

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

// Extract turns a file's bytes into a document.
func Extract(name string, b []byte, pageURL string) (Document, string, error) {
	if len(b) > MaxFileBytes {
		return Document{}, "", fmt.Errorf("the file is larger than %d bytes", MaxFileBytes)
	}
	kind, err := Detect(name, b)
	if err != nil {
		return Document{}, "", err
	}
	var doc Document
	switch kind {
	case KindPDF:
		doc, err = extractPDF(b)
	case KindDOCX:
		doc, err = extractDOCX(b)
	case KindPPTX:
		doc, err = extractPPTX(b)
	case KindXLSX:
		doc, err = extractXLSX(b)
	case KindHTML:
		doc, err = ExtractHTML(b, pageURL)
	case KindMarkdown, KindText:
		doc = Markdown(string(b))
	case KindCSV:
		doc, err = extractCSV(b)
	case KindJSON:
		doc, err = extractJSON(b)
	}
	if err != nil {
		return Document{}, kind, err
	}
	if doc.Title == "" {
		doc.Title = name
	}
	if empty(doc) {
		return Document{}, kind, errors.New("the document holds no text")
	}
	return doc, kind, nil
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
	var doc Document
	var path []string
	var b strings.Builder
	flush := func() {
		if strings.TrimSpace(b.String()) != "" {
			var names []string
			for _, p := range path {
				if p != "" {
					names = append(names, p)
				}
			}
			doc.Sections = append(doc.Sections, Section{Heading: strings.Join(names, " > "), Text: b.String()})
		}
		b.Reset()
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
	lines := strings.SplitAfter(text, "\n")
	fence := ""       // the fence that opened the code block we are in
	underlines := ""  // underline characters in order of first use
	prevBlank := true // the line before the current one is blank
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		trim := strings.TrimSpace(line)
		if fence != "" {
			if strings.HasPrefix(trim, fence) {
				fence = ""
			}
			b.WriteString(line)
			continue
		}
		if strings.HasPrefix(trim, "```") || strings.HasPrefix(trim, "~~~") {
			fence = trim[:3]
			b.WriteString(line)
			continue
		}
		level := 0
		for level < len(trim) && trim[level] == '#' {
			level++
		}
		if level > 0 && level <= 6 && len(trim) > level && trim[level] == ' ' {
			heading(level, strings.TrimSpace(trim[level:]))
			prevBlank = true
			continue
		}
		// A numbered heading of plain text ("7.12. How do I put a package
		// on hold?", "Chapter 7. Basics"), wrapped over up to 3 lines.
		if prevBlank && trim != "" && line[0] != ' ' && line[0] != '\t' {
			if level, title, n := numberedHeading(lines[i:]); n > 0 {
				heading(level, title)
				i += n - 1
				prevBlank = true
				continue
			}
		}
		// An underlined heading: a short text line after a blank line (or
		// the start), starting at the margin, followed by its underline.
		if i+1 < len(lines) && prevBlank && trim != "" && line[0] != ' ' && line[0] != '\t' && utf8.RuneCountInString(trim) <= 120 {
			if c, ok := underline(strings.TrimSpace(lines[i+1]), utf8.RuneCountInString(trim)); ok {
				if !strings.ContainsRune(underlines, c) {
					underlines += string(c)
				}
				heading(min(strings.IndexRune(underlines, c)+1, 6), trim)
				i++
				prevBlank = true
				continue
			}
		}
		prevBlank = trim == ""
		b.WriteString(line)
	}
	flush()
	return doc
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
	u, _ := url.Parse(pageURL)
	article, err := readability.FromReader(bytes.NewReader(b), u)
	if err != nil || article.Node == nil {
		return Document{}, fmt.Errorf("the page has no readable content")
	}
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
	return doc, nil
}

func extractPDF(b []byte) (Document, error) {
	r, err := pdf.NewReader(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		return Document{}, fmt.Errorf("not a readable PDF: %v", err)
	}
	var doc Document
	for i := 1; i <= r.NumPage(); i++ {
		p := r.Page(i)
		if p.V.IsNull() {
			continue
		}
		text, err := p.GetPlainText(nil)
		if err != nil {
			return Document{}, fmt.Errorf("page %d: %v", i, err)
		}
		doc.Sections = append(doc.Sections, Section{Text: text, Page: i})
	}
	return doc, nil
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

func readZip(f *zip.File) ([]byte, error) {
	rc, err := f.Open()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	// The header's size can lie: read one byte past it at most.
	b, err := io.ReadAll(io.LimitReader(rc, int64(f.UncompressedSize64)+1))
	if err != nil {
		return nil, err
	}
	if uint64(len(b)) > f.UncompressedSize64 {
		return nil, errors.New("a zip entry is larger than it says")
	}
	return b, nil
}

// ooxmlParagraphs reads the text runs (w:t or a:t) of an Office Open XML
// part, one string per paragraph (w:p or a:p), with the paragraph's style.
func ooxmlParagraphs(x []byte) ([][2]string, error) {
	dec := xml.NewDecoder(bytes.NewReader(x))
	var out [][2]string
	var cur strings.Builder
	style := ""
	inText := false
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		switch t := tok.(type) {
		case xml.StartElement:
			switch t.Name.Local {
			case "t":
				inText = true
			case "pStyle":
				for _, a := range t.Attr {
					if a.Name.Local == "val" {
						style = a.Value
					}
				}
			case "tab":
				cur.WriteByte('\t')
			case "br":
				cur.WriteByte('\n')
			}
		case xml.EndElement:
			switch t.Name.Local {
			case "t":
				inText = false
			case "p":
				out = append(out, [2]string{cur.String(), style})
				cur.Reset()
				style = ""
			}
		case xml.CharData:
			if inText {
				cur.Write(t)
			}
		}
	}
	return out, nil
}

func extractDOCX(b []byte) (Document, error) {
	files, err := zipFiles(b)
	if err != nil {
		return Document{}, err
	}
	x, err := readZip(files["word/document.xml"])
	if err != nil {
		return Document{}, err
	}
	paras, err := ooxmlParagraphs(x)
	if err != nil {
		return Document{}, fmt.Errorf("not a readable DOCX: %v", err)
	}
	// Headings (Heading1..) become Markdown headings, so sections follow them.
	var md strings.Builder
	for _, p := range paras {
		if n, ok := strings.CutPrefix(strings.ToLower(p[1]), "heading"); ok {
			level, _ := strconv.Atoi(n)
			level = min(max(level, 1), 6)
			md.WriteString(strings.Repeat("#", level) + " " + p[0] + "\n")
			continue
		}
		md.WriteString(p[0] + "\n\n")
	}
	return Markdown(md.String()), nil
}

func extractPPTX(b []byte) (Document, error) {
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
		x, err := readZip(files[fmt.Sprintf("ppt/slides/slide%d.xml", i)])
		if err != nil {
			return Document{}, err
		}
		paras, err := ooxmlParagraphs(x)
		if err != nil {
			return Document{}, fmt.Errorf("slide %d: %v", i, err)
		}
		var b strings.Builder
		for _, p := range paras {
			if strings.TrimSpace(p[0]) != "" {
				b.WriteString(p[0] + "\n")
			}
		}
		doc.Sections = append(doc.Sections, Section{Heading: fmt.Sprintf("Slide %d", i), Text: b.String(), Page: i})
	}
	return doc, nil
}

func extractXLSX(b []byte) (Document, error) {
	if _, err := zipFiles(b); err != nil {
		return Document{}, err
	}
	f, err := excelize.OpenReader(bytes.NewReader(b), excelize.Options{UnzipSizeLimit: maxUnzipped, UnzipXMLSizeLimit: maxUnzipped / 4})
	if err != nil {
		return Document{}, fmt.Errorf("not a readable XLSX: %v", err)
	}
	defer f.Close()
	var doc Document
	for _, sheet := range f.GetSheetList() {
		rows, err := f.GetRows(sheet)
		if err != nil {
			return Document{}, err
		}
		doc.Sections = append(doc.Sections, Section{Heading: sheet, Text: rowsText(rows)})
	}
	return doc, nil
}

// rowsText writes table rows as "header: value; ..." lines, so that each
// line stands alone in a chunk.
func rowsText(rows [][]string) string {
	if len(rows) == 0 {
		return ""
	}
	header := rows[0]
	var b strings.Builder
	for _, r := range rows[1:] {
		var cells []string
		for i, v := range r {
			if strings.TrimSpace(v) == "" {
				continue
			}
			if i < len(header) && header[i] != "" {
				cells = append(cells, header[i]+": "+v)
			} else {
				cells = append(cells, v)
			}
		}
		if len(cells) > 0 {
			b.WriteString(strings.Join(cells, "; ") + "\n")
		}
	}
	if len(rows) == 1 {
		b.WriteString(strings.Join(header, "; ") + "\n")
	}
	return b.String()
}

func extractCSV(b []byte) (Document, error) {
	r := csv.NewReader(bytes.NewReader(b))
	r.FieldsPerRecord = -1
	rows, err := r.ReadAll()
	if err != nil {
		return Document{}, fmt.Errorf("not a readable CSV: %v", err)
	}
	return Document{Sections: []Section{{Text: rowsText(rows)}}}, nil
}

func extractJSON(b []byte) (Document, error) {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return Document{}, fmt.Errorf("not valid JSON: %v", err)
	}
	var lines strings.Builder
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		switch t := v.(type) {
		case map[string]any:
			keys := make([]string, 0, len(t))
			for k := range t {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				walk(strings.TrimPrefix(prefix+"."+k, "."), t[k])
			}
		case []any:
			for i, x := range t {
				walk(fmt.Sprintf("%s[%d]", prefix, i), x)
			}
		default:
			lines.WriteString(fmt.Sprintf("%s: %v\n", prefix, t))
		}
	}
	walk("", v)
	return Document{Sections: []Section{{Text: lines.String()}}}, nil
}
