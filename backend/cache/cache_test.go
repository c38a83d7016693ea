package cache

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestTTL(t *testing.T) {
	c := New[string, int](time.Second, 2)
	loads := 0
	load := func(v int) func() (int, error) { return func() (int, error) { loads++; return v, nil } }

	v, err := c.Get("a", load(1))
	require.NoError(t, err)
	require.Equal(t, 1, v)
	v, _ = c.Get("a", load(2))
	require.Equal(t, 1, v, "fresh: from the cache")
	require.Equal(t, 1, loads)

	// A hit does not extend the entry: it is read again after the ttl.
	for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); {
		c.Get("a", load(3))
	}
	require.Equal(t, 1, loads)
	time.Sleep(time.Second)
	v, _ = c.Get("a", load(4))
	require.Equal(t, 4, v)

	// A failed load is not kept.
	_, err = c.Get("b", func() (int, error) { return 0, errors.New("down") })
	require.Error(t, err)
	v, _ = c.Get("b", load(5))
	require.Equal(t, 5, v)

	// Forget drops an entry; ForgetFunc those that match.
	c.Forget("a")
	v, _ = c.Get("a", load(6))
	require.Equal(t, 6, v)
	c.ForgetFunc(func(k string, v int) bool { return v == 5 })
	v, _ = c.Get("b", load(7))
	require.Equal(t, 7, v)
	v, _ = c.Get("a", load(8))
	require.Equal(t, 6, v, "not matched: kept")

	// Capacity: a third key pushes the least recently used out.
	c.Get("c", load(9))
	require.Equal(t, 2, c.c.Len())
}

// A value read while the entry was forgotten (a change committed during
// the read) is returned but not kept: the next Get reads again.
func TestForgetDuringLoad(t *testing.T) {
	c := New[string, int](time.Minute, 10)
	v, _ := c.Get("a", func() (int, error) { c.Forget("a"); return 1, nil })
	require.Equal(t, 1, v)
	v, _ = c.Get("a", func() (int, error) { return 2, nil })
	require.Equal(t, 2, v)
}

// A Forget that runs once a load has read its value drops that value,
// however the two interleave: one that fell between Get's check of the
// Forgets and its Set left the value cached for a whole ttl (a key revoked,
// an agent changed or a webhook created through this instance, trusted
// here as it was for up to CacheTTL; about 1 in 100,000 tries).
func TestForgetAfterLoadIsNeverUndone(t *testing.T) {
	c := New[int, int](time.Minute, 1<<20)
	for i, end := 0, time.Now().Add(time.Second); time.Now().Before(end); i++ {
		loaded := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-loaded
			c.Forget(i)
		}()
		_, _ = c.Get(i, func() (int, error) { close(loaded); return 1, nil })
		wg.Wait()
		_, kept := c.Peek(i)
		require.False(t, kept, "try %d: the value read before Forget is still cached", i)
	}
}
