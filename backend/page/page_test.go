package page

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

func TestSize(t *testing.T) {
	require.Equal(t, int32(20), Size(0, 20, 100))
	require.Equal(t, int32(20), Size(-3, 20, 100))
	require.Equal(t, int32(7), Size(7, 20, 100))
	require.Equal(t, int32(100), Size(1000, 20, 100))
}

func TestCursor(t *testing.T) {
	at := time.Date(2026, 11, 23, 10, 0, 0, 123456789, time.UTC)
	id := uuid.MustParse("0196f3a0-0000-7000-8000-000000000001")
	gotT, gotID, err := After(Cursor(at, id.String()))
	require.NoError(t, err)
	require.True(t, gotT.Equal(at.Truncate(time.Microsecond)), "microseconds kept, as Postgres stores them")
	require.Equal(t, id, *gotID)

	tm, s, err := Parse(Cursor(at, "conv:1_2"))
	require.NoError(t, err)
	require.Equal(t, "conv:1_2", s, "an id may hold the separator")
	require.True(t, tm.Equal(at.Truncate(time.Microsecond)))

	first, firstID, err := After("")
	require.NoError(t, err)
	require.Nil(t, first)
	require.Nil(t, firstID)
	for _, bad := range []string{"x", "12_", "_abc", "abc_" + id.String(), "12_not-a-uuid"} {
		_, _, err := After(bad)
		require.ErrorContains(t, err, "cursor", bad)
	}

	// A time Postgres cannot hold (it keeps 4713 BC to 294276 AD), or
	// beyond a Timestamp's years 1 to 9999, is refused; the edges are not.
	first9999 := time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)
	last9999 := time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC)
	for _, ok := range []time.Time{first9999, last9999} {
		got, _, err := Parse(Cursor(ok, "a"))
		require.NoError(t, err, ok)
		require.True(t, got.Equal(ok))
	}
	for _, bad := range []string{
		"-300000000000000000_a", "9223372036854775807_a", "-9223372036854775808_a",
		Cursor(first9999.Add(-time.Microsecond), "a"), Cursor(last9999.Add(time.Microsecond), "a"),
	} {
		_, _, err := Parse(bad)
		require.ErrorContains(t, err, "cursor", bad)
		_, _, err = After(bad[:strings.IndexByte(bad, '_')+1] + id.String())
		require.ErrorContains(t, err, "cursor", bad)
	}
}

func TestCut(t *testing.T) {
	type row struct {
		at time.Time
		id string
	}
	base := time.UnixMicro(1_700_000_000_000_000)
	rows := []row{{base.Add(3), "c"}, {base.Add(2), "b"}, {base.Add(1), "a"}}
	key := func(r row) (time.Time, string) { return r.at, r.id }

	got, next := Cut(rows, 2, key)
	require.Len(t, got, 2)
	require.Equal(t, Cursor(base.Add(2), "b"), next, "the next page starts after the page's last row")
	got, next = Cut(rows[:2], 2, key)
	require.Len(t, got, 2)
	require.Empty(t, next, "no row beyond the page: the last page")
	got, next = Cut(rows[:0], 2, key)
	require.Empty(t, got)
	require.Empty(t, next)
}
