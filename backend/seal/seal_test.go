package seal_test

import (
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
