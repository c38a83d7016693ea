package form

import (
	"encoding/csv"
	"encoding/json"
	"io"
	"slices"
	"strings"
	"time"
)

// CSV writes submissions as a spreadsheet: a header row of the form's
// field names then submitted_at and id, and one row per submission.
type CSV struct {
	w     *csv.Writer
	names []string
}

// NewCSV starts an export of a form with these field names and writes its
// header row. A field may be named submitted_at or id itself: the trailing
// columns are then _submitted_at and _id (no field's name starts with an
// underscore), so that every column keeps a header of its own.
func NewCSV(w io.Writer, names []string) (*CSV, error) {
	c := &CSV{w: csv.NewWriter(w), names: names}
	header := append(append([]string{}, names...), trailing("submitted_at", names), trailing("id", names))
	for i, h := range header {
		header[i] = Cell(h)
	}
	return c, c.w.Write(header)
}

// trailing is the header of the column after the fields named col:
// _col when a field has that name.
func trailing(col string, names []string) string {
	if slices.Contains(names, col) {
		return "_" + col
	}
	return col
}

// Row writes one submission: its stored values (a JSON object), the time
// it was sent and its id. Values of fields the form no longer has are left
// out; the JSON listing keeps them.
func (c *CSV) Row(data []byte, at time.Time, id string) error {
	var values map[string]any
	if err := json.Unmarshal(data, &values); err != nil {
		return err
	}
	row := make([]string, 0, len(c.names)+2)
	for _, n := range c.names {
		row = append(row, cellOf(values[n]))
	}
	row = append(row, at.UTC().Format(time.RFC3339), id)
	return c.w.Write(row)
}

// Flush writes what is buffered; its error is the first write's.
func (c *CSV) Flush() error {
	c.w.Flush()
	return c.w.Error()
}

// cellOf is a stored value as a cell: strings neutralised (Cell), numbers
// as JSON writes them, checkboxes true or false, a multiselect's choices
// joined by "; ".
func cellOf(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return Cell(x)
	case float64:
		// A number is written by us from a float: digits, a sign, a dot
		// and an exponent, never a formula; a leading minus stays so that
		// spreadsheets read it as a number.
		return formatNumber(x)
	case bool:
		if x {
			return "true"
		}
		return "false"
	case []any:
		parts := make([]string, 0, len(x))
		for _, p := range x {
			if s, ok := p.(string); ok {
				parts = append(parts, s)
			}
		}
		return Cell(strings.Join(parts, "; "))
	}
	return ""
}

// Cell neutralises text against formula injection (CSV injection): a
// spreadsheet runs a cell that begins with =, +, -, @, a tab or a carriage
// return as a formula, so such a cell gets a leading apostrophe, which
// spreadsheets show as text and hide (OWASP's advice). Leading spaces and
// line feeds do not hide the character behind them, and the full-width
// forms (＝＋－＠) count too. Phone numbers (+33...) are text and get one
// as well.
func Cell(s string) string {
	t := strings.TrimLeft(s, " \n")
	if t == "" {
		return s
	}
	for _, c := range []string{"=", "+", "-", "@", "\t", "\r", "＝", "＋", "－", "＠"} {
		if strings.HasPrefix(t, c) {
			return "'" + s
		}
	}
	return s
}
