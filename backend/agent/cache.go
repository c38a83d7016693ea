package agent

import (
	"context"
	"errors"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/parleyhq/parley/backend/auth"
	"github.com/parleyhq/parley/backend/cache"
	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/backend/db/dbq"
)

// maxCached bounds the cache (the least recently used leave first).
const maxCached = 10_000

// Cache keeps the agents chat turns read, as the authenticator keeps keys:
// a turn then admits a cached key to a cached agent without a round trip to
// Postgres. An entry is trusted for auth.CacheTTL; a change made through
// this instance's AgentService takes effect here at once, one made through
// another instance within auth.CacheTTL (as a key's revocation does).
//
// It is keyed by organization and agent: an organization's entry is only
// ever filled by a read in that organization's tenant transaction.
type Cache struct {
	store   *db.Store
	entries *cache.TTL[cacheKey, dbq.Agent]
}

type cacheKey struct{ org, id uuid.UUID }

// NewCache returns an empty cache reading from store.
func NewCache(store *db.Store) *Cache {
	return &Cache{store: store, entries: cache.New[cacheKey, dbq.Agent](auth.CacheTTL, maxCached)}
}

// Get returns org's agent id. An agent org does not have is NotFound, or
// Forbidden when it is another organization's (db.Missing); such answers are
// not cached.
func (c *Cache) Get(ctx context.Context, org, id uuid.UUID) (dbq.Agent, error) {
	return c.entries.Get(cacheKey{org, id}, func() (dbq.Agent, error) {
		var ag dbq.Agent
		err := c.store.Tenant(ctx, org, func(q *dbq.Queries) error {
			var err error
			ag, err = q.GetAgent(ctx, dbq.GetAgentParams{OrgID: org, ID: id})
			if errors.Is(err, pgx.ErrNoRows) {
				// SECURITY: another organization's agent: its id exists, nothing more.
				return db.Missing(ctx, q, "agent", "agent", id)
			}
			return err
		})
		return ag, err
	})
}

// Forget drops an agent changed or deleted through this instance.
func (c *Cache) Forget(org, id uuid.UUID) {
	if c == nil {
		return
	}
	c.entries.Forget(cacheKey{org, id})
}
