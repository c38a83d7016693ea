package page

import (
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
