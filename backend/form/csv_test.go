package form_test

import (
	"bytes"
	"encoding/csv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/form"
)

// Cells that a spreadsheet would run as formulas get a leading apostrophe;
// others are left as they are.
func TestCellNeutralisesFormulas(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"=1+1":                                  "'=1+1",
		"=HYPERLINK(\"http://evil\",\"click\")": "'=HYPERLINK(\"http://evil\",\"click\")",
		"+33612345678":                          "'+33612345678",
		"-2+3":                                  "'-2+3",
		"@SUM(A1:A2)":                           "'@SUM(A1:A2)",
		"\t=1":                                  "'\t=1",
		"\r=1":                                  "'\r=1",
		"  =1":                                  "'  =1",
		"\n=1":                                  "'\n=1",
		"＝1+1":                                  "'＝1+1",
		"＠A1":                                   "'＠A1",
		"Ada":                                   "Ada",
		"a=b":                                   "a=b",
		"1+1":                                   "1+1",
		"'already":                              "'already",
		"":                                      "",
		"   ":                                   "   ",
		"née":                                   "née",
	} {
		if got := form.Cell(in); got != want {
			t.Errorf("Cell(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestCSVExport(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	out, err := form.NewCSV(&buf, []string{"name", "age", "topics", "ok", "gone"})
	require.NoError(t, err)
	at := time.Date(2025, 3, 31, 10, 0, 0, 0, time.FixedZone("x", 3600))
	require.NoError(t, out.Row([]byte(`{"name":"=cmd|' /C calc'!A0","age":-5,"topics":["-a","b"],"ok":true,"other":"x"}`), at, "id-1"))
	require.NoError(t, out.Row([]byte(`{"name":"Ada, \"the\" first\nline 2","age":1e21}`), at, "id-2"))
	require.NoError(t, out.Row([]byte(`{}`), at, "id-3"))
	require.NoError(t, out.Flush())

	rows, err := csv.NewReader(&buf).ReadAll()
	require.NoError(t, err)
	require.Equal(t, [][]string{
		{"name", "age", "topics", "ok", "gone", "submitted_at", "id"},
		// A number is ours (digits and a sign), so -5 stays a number.
		{"'=cmd|' /C calc'!A0", "-5", "'-a; b", "true", "", "2025-03-31T09:00:00Z", "id-1"},
		{"Ada, \"the\" first\nline 2", "1e+21", "", "", "", "2025-03-31T09:00:00Z", "id-2"},
		{"", "", "", "", "", "2025-03-31T09:00:00Z", "id-3"},
	}, rows)
}

// A field may be named as a trailing column (id, submitted_at): every
// column still has a header of its own, and the field's values stay under
// the field's name.
func TestCSVHeaderKeepsFieldsNamedLikeItsOwnColumns(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	out, err := form.NewCSV(&buf, []string{"id", "submitted_at", "name"})
	require.NoError(t, err)
	at := time.Date(2025, 3, 31, 9, 0, 0, 0, time.UTC)
	require.NoError(t, out.Row([]byte(`{"id":"customer-7","submitted_at":"yesterday","name":"Ada"}`), at, "sub-1"))
	require.NoError(t, out.Flush())

	rows, err := csv.NewReader(&buf).ReadAll()
	require.NoError(t, err)
	require.Equal(t, [][]string{
		{"id", "submitted_at", "name", "_submitted_at", "_id"},
		{"customer-7", "yesterday", "Ada", "2025-03-31T09:00:00Z", "sub-1"},
	}, rows)
	seen := map[string]bool{}
	for _, h := range rows[0] {
		require.False(t, seen[h], "header %q is repeated", h)
		seen[h] = true
	}
}
