package seal_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/seal"
)

// A sealed value opens only with its own bound and with the key that
// sealed it; the sealed form does not hold the value; bad keys are refused.
func TestSealer(t *testing.T) {
	t.Parallel()
	s, err := seal.New(make([]byte, 32))
	require.NoError(t, err)
	plain := []byte("a value worth keeping from a copy of the database")
	bound := seal.Bind("test", []byte("owner-1"))
	sealed, err := s.Seal(plain, bound)
	require.NoError(t, err)
	require.NotContains(t, string(sealed), string(plain))
	got, err := s.Open(sealed, bound)
	require.NoError(t, err)
	require.Equal(t, plain, got)
	again, err := s.Seal(plain, bound)
	require.NoError(t, err)
	require.NotEqual(t, sealed, again, "a fresh nonce each time")

	_, err = s.Open(sealed, seal.Bind("test", []byte("owner-2")))
	require.ErrorIs(t, err, seal.ErrOpen, "opened for another owner")
	_, err = s.Open(sealed, seal.Bind("other", []byte("owner-1")))
	require.ErrorIs(t, err, seal.ErrOpen, "opened as another kind")
	_, err = s.Open(append([]byte{2}, sealed[1:]...), bound)
	require.ErrorIs(t, err, seal.ErrVersion)
	_, err = s.Open(sealed[:5], bound)
	require.ErrorIs(t, err, seal.ErrVersion)
	other, err := seal.New(append(make([]byte, 31), 1))
	require.NoError(t, err)
	_, err = other.Open(sealed, bound)
	require.ErrorIs(t, err, seal.ErrOpen, "opened with another key")

	_, err = seal.New(make([]byte, 16))
	require.Error(t, err)
	_, err = seal.ParseKey("c2hvcnQ=")
	require.Error(t, err)
	key, err := seal.ParseKey("AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=")
	require.NoError(t, err)
	require.Len(t, key, 32)
}

// Bind's parts are length-prefixed: moving bytes from one part to the next
// gives another bound.
func TestBindIsUnambiguous(t *testing.T) {
	t.Parallel()
	require.NotEqual(t, seal.Bind("k", []byte("ab"), []byte("c")), seal.Bind("k", []byte("a"), []byte("bc")))
	require.NotEqual(t, seal.Bind("ka", []byte("b")), seal.Bind("k", []byte("ab")))
	require.NotEqual(t, seal.Bind("k"), seal.Bind("k", nil))
}

// A Sealer with previous keys seals under its current key only, opens
// what any of its keys sealed, and refuses what none did; Reseal moves a
// value to the current key, and leaves one already under it as it is.
func TestSealerWithPreviousKeys(t *testing.T) {
	t.Parallel()
	key := func(b byte) []byte { return bytes.Repeat([]byte{b}, 32) }
	bound := seal.Bind("test", []byte("owner-1"))
	plain := []byte("a value sealed before the key changed")
	old, err := seal.New(key(1))
	require.NoError(t, err)
	older, err := seal.New(key(2))
	require.NoError(t, err)
	underOld, err := old.Seal(plain, bound)
	require.NoError(t, err)
	underOlder, err := older.Seal(plain, bound)
	require.NoError(t, err)

	s, err := seal.New(key(3), key(1), key(2), key(3))
	require.NoError(t, err)
	for _, sealed := range [][]byte{underOld, underOlder} {
		got, err := s.Open(sealed, bound)
		require.NoError(t, err)
		require.Equal(t, plain, got)
		_, err = s.Open(sealed, seal.Bind("test", []byte("owner-2")))
		require.ErrorIs(t, err, seal.ErrOpen, "opened for another owner under a previous key")
	}
	current, err := seal.New(key(3))
	require.NoError(t, err)
	sealed, err := s.Seal(plain, bound)
	require.NoError(t, err)
	got, err := current.Open(sealed, bound)
	require.NoError(t, err, "sealed under a previous key, not the current one")
	require.Equal(t, plain, got)
	_, err = old.Open(sealed, bound)
	require.ErrorIs(t, err, seal.ErrOpen)

	unknown, err := seal.New(key(4))
	require.NoError(t, err)
	stranger, err := unknown.Seal(plain, bound)
	require.NoError(t, err)
	_, err = s.Open(stranger, bound)
	require.ErrorIs(t, err, seal.ErrOpen, "opened what no key of its sealed")

	var tally seal.Tally
	resealed, changed, err := s.Reseal(underOld, bound)
	require.NoError(t, err)
	require.True(t, changed)
	_, err = tally.Add(changed, err)
	require.NoError(t, err)
	got, err = current.Open(resealed, bound)
	require.NoError(t, err, "resealed under the current key")
	require.Equal(t, plain, got)
	same, changed, err := s.Reseal(resealed, bound)
	require.NoError(t, err)
	require.False(t, changed)
	require.Equal(t, resealed, same)
	_, err = tally.Add(changed, err)
	require.NoError(t, err)
	same, changed, err = s.Reseal(stranger, bound)
	require.ErrorIs(t, err, seal.ErrOpen)
	require.Equal(t, stranger, same)
	opened, err := tally.Add(changed, err)
	require.NoError(t, err)
	require.False(t, opened)
	require.Equal(t, seal.Tally{Resealed: 1, Current: 1, Unopenable: 1}, tally)

	keys, err := seal.ParseKeys(" AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE= ,AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI=")
	require.NoError(t, err)
	require.Equal(t, [][]byte{key(1), key(2)}, keys)
	_, err = seal.ParseKeys("AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=,c2hvcnQ=")
	require.ErrorContains(t, err, "key 2 of the list")
	_, err = seal.New(key(1), make([]byte, 16))
	require.Error(t, err)
}
