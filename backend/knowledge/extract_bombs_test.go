package knowledge

import (
	"archive/zip"
	"bytes"
	"context"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/xuri/excelize/v2"
)

// Files of a few KiB or MiB crafted to make a reader allocate GiBs. Each
// test bounds the allocation of its extractions (TotalAlloc is
// deterministic, where time is not); the tests do not run in parallel,
// so that no other test's allocation counts. The old readers allocated
// more than 1 GiB on each of these files.

// maxBombAlloc bounds what an extraction of a crafted file may allocate:
// 512 MiB, under the old readers' 835 MiB (JSON) to 8.5 GiB (DOCX), and
// above what the race detector's instrumented build allocates (274 MiB
// for the paragraph bomb's two extractions, 200-odd without it).
const maxBombAlloc = 512 << 20

// allocated is how many bytes f allocates.
func allocated(f func()) uint64 {
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// zipWith writes a zip of the given parts; a part's body is written by
// its function, so that it need not be held whole.
func zipWith(t *testing.T, parts map[string]func(w io.Writer)) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for name, write := range parts {
		w, err := zw.Create(name)
		require.NoError(t, err)
		write(w)
	}
	require.NoError(t, zw.Close())
	return buf.Bytes()
}

// zipParts is the parts of zip b, each as zipWith writes it back.
func zipParts(t *testing.T, b []byte) map[string]func(w io.Writer) {
	t.Helper()
	zr, err := zip.NewReader(bytes.NewReader(b), int64(len(b)))
	require.NoError(t, err)
	parts := map[string]func(w io.Writer){}
	for _, zf := range zr.File {
		rc, err := zf.Open()
		require.NoError(t, err)
		body, err := io.ReadAll(rc)
		require.NoError(t, err)
		parts[zf.Name] = text(string(body))
	}
	return parts
}

func text(s string) func(w io.Writer) {
	return func(w io.Writer) { _, _ = io.WriteString(w, s) }
}

// repeated writes head, n times body, then tail.
func repeated(head, body, tail string, n int) func(w io.Writer) {
	return func(w io.Writer) {
		_, _ = io.WriteString(w, head)
		chunk := strings.Repeat(body, 4096)
		for ; n >= 4096; n -= 4096 {
			_, _ = io.WriteString(w, chunk)
		}
		_, _ = io.WriteString(w, strings.Repeat(body, n)+tail)
	}
}

// xlsxWith is a valid workbook (written by excelize) whose first sheet's
// XML is replaced by sheet.
func xlsxWith(t *testing.T, sheet func(w io.Writer)) []byte {
	t.Helper()
	f := excelize.NewFile()
	require.NoError(t, f.SetCellValue("Sheet1", "A1", "x"))
	var b bytes.Buffer
	require.NoError(t, f.Write(&b))
	parts := zipParts(t, b.Bytes())
	require.Contains(t, parts, "xl/worksheets/sheet1.xml")
	parts["xl/worksheets/sheet1.xml"] = sheet
	return zipWith(t, parts)
}

const sheetHead = `<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"><sheetData>`

const sheetTail = `</sheetData></worksheet>`

// A row of one cell at column XFD is 16,384 cells to the reader, padded
// with empty ones: 4,000 such rows (a file of 20 KiB) made GiBs.
func TestExtractXLSXFarColumnBomb(t *testing.T) {
	rows := func(w io.Writer) {
		_, _ = io.WriteString(w, sheetHead)
		for i := 1; i <= 4000; i++ {
			fmt.Fprintf(w, `<row r="%d"><c r="XFD%d" t="inlineStr"><is><t>a</t></is></c></row>`, i, i)
		}
		_, _ = io.WriteString(w, sheetTail)
	}
	b := xlsxWith(t, rows)
	require.Less(t, len(b), 64<<10, "the bomb itself is small")
	var err, headErr error
	n := allocated(func() {
		_, _, err = Extract(context.Background(), "wide.xlsx", b, "")
		_, _, _, headErr = ExtractHead(context.Background(), "wide.xlsx", b, "", 64<<10)
	})
	require.ErrorContains(t, err, fmt.Sprintf("more than %d columns", maxColumns))
	require.ErrorContains(t, headErr, fmt.Sprintf("more than %d columns", maxColumns))
	require.Less(t, n, uint64(maxBombAlloc))

	// A sheet of ordinary width, its cells spread out, still reads.
	ok := xlsxWith(t, text(sheetHead+
		`<row r="1"><c r="A1" t="inlineStr"><is><t>Name</t></is></c><c r="ALL1" t="inlineStr"><is><t>Note</t></is></c></row>`+
		`<row r="3"><c r="A3" t="inlineStr"><is><t>Ada</t></is></c><c r="ALL3" t="inlineStr"><is><t>engineer</t></is></c></row>`+
		sheetTail))
	doc, _, err := Extract(context.Background(), "ok.xlsx", ok, "")
	require.NoError(t, err)
	require.Equal(t, "Name: Ada; Note: engineer\n", doc.Sections[0].Text)
}

// Rows numbered up to the last one Excel allows, in many sheets: each
// empty row is work to step over; the workbook's rows and cells are
// bounded.
func TestExtractXLSXRowsBomb(t *testing.T) {
	last := func(w io.Writer) {
		_, _ = io.WriteString(w, sheetHead+`<row r="1"><c r="A1" t="inlineStr"><is><t>a</t></is></c></row>`)
		for i := 1_048_000; i <= 1_048_576; i++ {
			fmt.Fprintf(w, `<row r="%d"><c r="A%d" t="inlineStr"><is><t>b</t></is></c></row>`, i, i)
		}
		_, _ = io.WriteString(w, sheetTail)
	}
	b := xlsxWith(t, last)
	var err error
	n := allocated(func() { _, _, err = Extract(context.Background(), "tall.xlsx", b, "") })
	require.NoError(t, err) // one sheet of 1,048,576 rows is within bounds
	require.Less(t, n, uint64(maxBombAlloc))

	// Four such sheets are not.
	f, ferr := excelize.OpenReader(bytes.NewReader(b))
	require.NoError(t, ferr)
	for _, s := range []string{"S2", "S3", "S4"} {
		_, ferr = f.NewSheet(s)
		require.NoError(t, ferr)
	}
	var out bytes.Buffer
	require.NoError(t, f.Write(&out))
	parts := zipParts(t, out.Bytes())
	for name := range parts {
		if strings.HasPrefix(name, "xl/worksheets/sheet") {
			parts[name] = last
		}
	}
	b = zipWith(t, parts)
	n = allocated(func() { _, _, err = Extract(context.Background(), "tall.xlsx", b, "") })
	require.ErrorContains(t, err, fmt.Sprintf("more than %d cells", maxCells))
	require.Less(t, n, uint64(maxBombAlloc))
	doc, _, cut, err := ExtractHead(context.Background(), "tall.xlsx", b, "", 1<<30)
	require.NoError(t, err)
	require.True(t, cut)
	require.Contains(t, doc.Sections[0].Text, "a: b\n")
}

// 60 MiB of empty paragraphs (a file of 60 KiB) were 10 million
// paragraphs kept in memory, then as many lines of Markdown.
func TestExtractOfficeParagraphBomb(t *testing.T) {
	const paras = 10 << 20
	docx := zipWith(t, map[string]func(w io.Writer){
		"word/document.xml": repeated(`<w:document xmlns:w="w"><w:body>`, `<w:p/>`, `</w:body></w:document>`, paras),
	})
	pptx := zipWith(t, map[string]func(w io.Writer){
		"ppt/slides/slide1.xml": repeated(`<p:sld xmlns:p="p" xmlns:a="a"><p:txBody>`, `<a:p/>`, `</p:txBody></p:sld>`, paras),
	})
	// Markup that is no paragraph: 16 M empty runs in one paragraph took
	// 7 s and 3 GiB of allocations for no text.
	runs := zipWith(t, map[string]func(w io.Writer){
		"word/document.xml": repeated(`<w:document xmlns:w="w"><w:body><w:p>`, `<w:r/>`, `</w:p></w:body></w:document>`, 16<<20),
	})
	for name, b := range map[string][]byte{"bomb.docx": docx, "bomb.pptx": pptx, "runs.docx": runs} {
		require.Less(t, len(b), 1<<20, "the bomb itself is small")
		var err, headErr error
		var head Document
		n := allocated(func() {
			_, _, err = Extract(context.Background(), name, b, "")
			head, _, _, headErr = ExtractHead(context.Background(), name, b, "", 64<<10)
		})
		require.Less(t, n, uint64(maxBombAlloc), name)
		require.ErrorContains(t, err, "longer than", name)
		if headErr == nil {
			require.LessOrEqual(t, textLen(head), 64<<10, name)
		}
	}

	// The head of a long document is read up to its limit, not whole.
	long := zipWith(t, map[string]func(w io.Writer){
		"word/document.xml": repeated(`<w:document xmlns:w="w"><w:body>`, `<w:p><w:r><w:t>Refunds take fourteen days.</w:t></w:r></w:p>`, `</w:body></w:document>`, 1<<20),
	})
	var doc Document
	var cut bool
	var err error
	n := allocated(func() { doc, _, cut, err = ExtractHead(context.Background(), "long.docx", long, "", 64<<10) })
	require.NoError(t, err)
	require.True(t, cut)
	require.LessOrEqual(t, textLen(doc), 64<<10)
	require.Contains(t, allText(doc), "Refunds take fourteen days.")
	// About 1.3 MB read so; the whole document 320 MB. The race detector
	// (CI) multiplies both by about twelve (15 and 3,970 MB): the bound
	// leaves room for that and still tells a head from the whole.
	require.Less(t, n, uint64(64<<20))
}

// A CSV of 16 MiB of commas is one record of 16 million empty fields,
// which the CSV reader holds whole: refused before it is read.
func TestExtractCSVFieldBomb(t *testing.T) {
	b := bytes.Repeat([]byte(","), 16<<20)
	var err, headErr error
	n := allocated(func() {
		_, _, err = Extract(context.Background(), "commas.csv", b, "")
		_, _, _, headErr = ExtractHead(context.Background(), "commas.csv", b, "", 64<<10)
	})
	require.Less(t, n, uint64(maxBombAlloc))
	want := fmt.Sprintf("more than %d fields in the record on line 1", maxFields)
	require.ErrorContains(t, err, want)
	require.ErrorContains(t, headErr, want)

	// Commas in quotes are not fields; a wide record further down is
	// named by its line.
	quoted := []byte("name,note\nAda,\"" + strings.Repeat("a,", 2*maxFields) + "\"\n")
	doc, _, err := Extract(context.Background(), "q.csv", quoted, "")
	require.NoError(t, err)
	require.Contains(t, doc.Sections[0].Text, "name: Ada; note: a,a,")
	wide := []byte("a,b\n\"x\ny\",2\n" + strings.Repeat(",", maxFields) + "\n")
	_, _, err = Extract(context.Background(), "w.csv", wide, "")
	require.ErrorContains(t, err, "record on line 4")

	// A lone header row of empty cells is no text, not "; ; ; ".
	_, _, err = Extract(context.Background(), "e.csv", bytes.Repeat([]byte(","), 5000), "")
	require.ErrorContains(t, err, "no text")
}

// An array of 9 million zeros (18 MiB) was decoded whole before a line
// was counted.
func TestExtractJSONArrayBomb(t *testing.T) {
	b := []byte("[" + strings.Repeat("0,", 9<<20) + "0]")
	var doc Document
	var cut bool
	var err error
	n := allocated(func() { doc, _, cut, err = ExtractHead(context.Background(), "zeros.json", b, "", 1<<20) })
	require.NoError(t, err)
	require.True(t, cut)
	require.LessOrEqual(t, textLen(doc), 1<<20)
	require.True(t, strings.HasPrefix(doc.Sections[0].Text, "[0]: 0\n[1]: 0\n"))
	require.Less(t, n, uint64(maxBombAlloc))

	// Read whole, its text is longer than the file's limit. (The JSON
	// decoder's tokens cost some 200 bytes a value, which are not kept:
	// what this allocates is proportionate to the limit, not bounded by
	// maxBombAlloc.)
	_, _, err = Extract(context.Background(), "zeros.json", b, "")
	require.ErrorContains(t, err, "longer than")

	// Values keep the document's order and their old forms.
	doc, _, err = Extract(context.Background(), "v.json", []byte(`{"b":[1.5,1e21,12345678,true,null,"s",{},[]],"a":{"c":"d"}}`), "")
	require.NoError(t, err)
	require.Equal(t, "b[0]: 1.5\nb[1]: 1e+21\nb[2]: 1.2345678e+07\nb[3]: true\nb[4]: <nil>\nb[5]: s\na.c: d\n", doc.Sections[0].Text)
	for _, bad := range []string{`{"a":1}{`, `[1,2`, ``, ` `, `{"a" 1}`, `[1]]`} {
		_, _, err = Extract(context.Background(), "bad.json", []byte(bad), "")
		require.ErrorContains(t, err, "JSON", bad)
	}
}

// A workbook's shared strings table of 16 million empty entries (80 MiB of
// `<si/>`, under maxUnzipped; a 100 KiB file): the reader indexes every
// entry before the first cell is read, about a gigabyte of it.
func TestExtractXLSXSharedStringsBomb(t *testing.T) {
	b := xlsxWith(t, text(sheetHead+`<row r="1"><c r="A1" t="s"><v>0</v></c></row>`+sheetTail))
	parts := zipParts(t, b)
	require.Contains(t, parts, "xl/sharedStrings.xml")
	parts["xl/sharedStrings.xml"] = repeated(`<?xml version="1.0" encoding="UTF-8"?><sst xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main">`, "<si/>", "</sst>", 16<<20)
	bomb := zipWith(t, parts)
	t.Logf("%d bytes", len(bomb))
	var headErr error
	n := allocated(func() { _, _, _, headErr = ExtractHead(context.Background(), "strings.xlsx", bomb, "", 64<<10) })
	require.Error(t, headErr)
	require.Contains(t, headErr.Error(), "shared strings")
	require.Less(t, n, uint64(256<<20), "allocated %d MiB", n>>20)
}

// Markdown reads its lines one by one and its sections are slices of the
// text: 20 MB of blank lines, or of short ones, allocate next to nothing
// (a slice of every line and a copy of each section cost 320 to 440 MB).
func TestMarkdownManyLines(t *testing.T) {
	for name, text := range map[string]string{
		"blank": strings.Repeat("\n", 20<<20),
		"short": strings.Repeat("a\n", 10<<20),
	} {
		var doc Document
		n := allocated(func() { doc = Markdown(text) })
		t.Logf("%s: %d MiB allocated", name, n>>20)
		require.Less(t, n, uint64(8<<20), name)
		if name == "short" {
			require.Len(t, doc.Sections, 1)
			require.Len(t, doc.Sections[0].Text, len(text))
		}
	}
}

// A long document of ordinary Word markup is read whole: 40,000
// paragraphs of four formatted runs (7 MB of text, 2.6 M XML tokens). Its
// markup counts apart from its text: charged against the text's limit, it
// was refused as "longer than 16777216 bytes".
func TestExtractLongFormattedDOCX(t *testing.T) {
	const paras = 40000
	run := `<w:r><w:rPr><w:rFonts w:ascii="Calibri"/><w:sz w:val="22"/><w:szCs w:val="22"/><w:lang w:val="en-GB"/></w:rPr>` +
		`<w:t xml:space="preserve">Forty-five characters of ordinary prose here. </w:t></w:r>`
	docx := zipWith(t, map[string]func(w io.Writer){
		"word/document.xml": repeated(`<w:document xmlns:w="w"><w:body>`,
			`<w:p><w:pPr><w:pStyle w:val="Normal"/></w:pPr>`+strings.Repeat(run, 4)+`</w:p>`, `</w:body></w:document>`, paras),
	})
	doc, _, err := Extract(context.Background(), "long.docx", docx, "")
	require.NoError(t, err)
	n := 0
	for _, s := range doc.Sections {
		n += strings.Count(s.Text, "ordinary prose")
	}
	require.Equal(t, paras*4, n)
}
