// Package cache keeps what a read from Postgres found, for a short time,
// per instance: API keys, the agents turns reach, whether an organization
// has webhooks. Each user says how long an answer may be trusted (how
// long a change made through another instance takes to be seen); a change
// made through this instance drops its entry at once (Forget).
package cache

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/jellydator/ttlcache/v3"
)

// TTL caches values by key for a fixed time, at most a fixed number of
// them (the least recently used leave first). A hit never extends an
// entry's life: what a key maps to is read again every ttl.
type TTL[K comparable, V any] struct {
	c *ttlcache.Cache[K, V]
	// forgets counts Forget calls: a value read across one may predate the
	// change that caused it, and is returned but not kept.
	forgets atomic.Uint64
	// mu makes Get's check of forgets and its Set one step as Forget sees
	// it: a Forget between the two left the value it was called to drop
	// cached for a whole ttl.
	mu sync.Mutex
}

// New returns an empty cache.
func New[K comparable, V any](ttl time.Duration, capacity uint64) *TTL[K, V] {
	return &TTL[K, V]{c: ttlcache.New(
		ttlcache.WithTTL[K, V](ttl),
		ttlcache.WithCapacity[K, V](capacity),
		ttlcache.WithDisableTouchOnHit[K, V](),
	)}
}

// Get returns key's value: the cached one while it is fresh, else what load
// reads, which is kept unless load fails or a Forget ran meanwhile.
func (t *TTL[K, V]) Get(key K, load func() (V, error)) (V, error) {
	if it := t.c.Get(key); it != nil {
		return it.Value(), nil
	}
	before := t.forgets.Load()
	v, err := load()
	if err != nil {
		return v, err
	}
	t.mu.Lock()
	if t.forgets.Load() == before {
		t.c.Set(key, v, ttlcache.DefaultTTL)
	}
	t.mu.Unlock()
	return v, nil
}

// Peek returns key's value while it is cached and fresh, reading nothing.
func (t *TTL[K, V]) Peek(key K) (V, bool) {
	if it := t.c.Get(key); it != nil {
		return it.Value(), true
	}
	var zero V
	return zero, false
}

// Forget drops key.
func (t *TTL[K, V]) Forget(key K) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.forgets.Add(1)
	t.c.Delete(key)
}

// ForgetFunc drops every entry whose key and value match.
func (t *TTL[K, V]) ForgetFunc(match func(K, V) bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.forgets.Add(1)
	var drop []K
	t.c.Range(func(it *ttlcache.Item[K, V]) bool {
		if match(it.Key(), it.Value()) {
			drop = append(drop, it.Key())
		}
		return true
	})
	for _, k := range drop {
		t.c.Delete(k)
	}
}
