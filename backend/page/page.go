// Package page pages listings newest first by keyset (creation time, then
// id, both descending): a page is read with one row more than it shows, and
// when that row exists the page's last row becomes the cursor of the next.
// A cursor is opaque to clients; it carries the row's creation time in
// microseconds (Postgres' precision) and its id.
package page

import (
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/parleyhq/parley/backend/apperr"
)

// Size is a requested page size: def when n is 0 (or less), at most most.
func Size(n, def, most int32) int32 {
	if n <= 0 {
		return def
	}
	return min(n, most)
}

// Cursor names the last row of a page.
func Cursor(t time.Time, id string) string {
	return strconv.FormatInt(t.UnixMicro(), 10) + "_" + id
}

// The times a listing accepts: the years 1 to 9999, as a protobuf
// Timestamp holds them. Postgres keeps 4713 BC to 294276 AD and refuses a
// time beyond (a 500 if it got that far).
var (
	earliest = time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)
	beyond   = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
)

// inRange says whether t is a time a listing accepts (years 1 to 9999).
func inRange(t time.Time) bool {
	return !t.Before(earliest) && t.Before(beyond)
}

// Parse reads a cursor; a bad one is Invalid, naming the field "cursor".
// Its time must be inRange: a cursor is the client's to write.
func Parse(c string) (time.Time, string, error) {
	us, id, ok := strings.Cut(c, "_")
	n, err := strconv.ParseInt(us, 10, 64)
	if !ok || err != nil || id == "" || !inRange(time.UnixMicro(n)) {
		return time.Time{}, "", apperr.InvalidField("cursor", "not a cursor of this listing")
	}
	return time.UnixMicro(n), id, nil
}

// After reads the cursor of a listing keyed by UUID, as the row to read
// after: nil and nil for the first page (no cursor).
func After(c string) (*time.Time, *uuid.UUID, error) {
	if c == "" {
		return nil, nil, nil
	}
	t, raw, err := Parse(c)
	if err != nil {
		return nil, nil, err
	}
	id, err := uuid.Parse(raw)
	if err != nil {
		return nil, nil, apperr.InvalidField("cursor", "not a cursor of this listing")
	}
	return &t, &id, nil
}

// Cut cuts rows, read with size+1 rows at most, to size, and returns the
// cursor of the next page: empty when rows was the last page.
func Cut[T any](rows []T, size int32, key func(T) (time.Time, string)) ([]T, string) {
	if len(rows) <= int(size) {
		return rows, ""
	}
	rows = rows[:size]
	t, id := key(rows[len(rows)-1])
	return rows, Cursor(t, id)
}
