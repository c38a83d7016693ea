package auth

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/parleyhq/parley/backend/apikey"
	"github.com/parleyhq/parley/backend/apperr"
	"github.com/parleyhq/parley/backend/cache"
	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/plan"
)

// CacheTTL bounds how long a key's record is trusted without asking the
// database again, and so how long a revocation made on another instance takes
// to be seen everywhere (the promise is 5 s).
const CacheTTL = 4 * time.Second

// maxCacheEntries bounds the cache against floods of well-formed unknown
// keys (the least recently used leave first).
const maxCacheEntries = 100_000

type keyRecord struct {
	principal *Principal // nil: no such key
	expiresAt *time.Time
	revoked   bool
}

// Authenticator resolves keys to principals, caching each answer for CacheTTL,
// and remembers when keys were last used without writing on every request.
type Authenticator struct {
	store *db.Store
	now   func() time.Time

	cache *cache.TTL[apikey.Hash, keyRecord]

	usedMu sync.Mutex
	used   map[uuid.UUID]lastUse // key id → last use, not yet written
}

type lastUse struct {
	org uuid.UUID
	at  time.Time
}

// NewAuthenticator returns an Authenticator over store.
func NewAuthenticator(store *db.Store) *Authenticator {
	return &Authenticator{store: store, now: time.Now, cache: cache.New[apikey.Hash, keyRecord](CacheTTL, maxCacheEntries), used: map[uuid.UUID]lastUse{}}
}

// Authenticate resolves an Authorization header value. Missing, malformed,
// unknown, expired and revoked keys are all Unauthenticated; a malformed key
// is refused without touching the database.
func (a *Authenticator) Authenticate(ctx context.Context, authorization string) (*Principal, error) {
	if authorization == "" {
		return nil, apperr.New(apperr.Unauthenticated, "missing API key: send Authorization: Bearer <key>")
	}
	scheme, token, ok := strings.Cut(authorization, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return nil, apperr.New(apperr.Unauthenticated, "the Authorization header must read Bearer <key>")
	}
	key, err := apikey.Parse(strings.TrimSpace(token))
	if err != nil {
		return nil, apperr.New(apperr.Unauthenticated, "invalid API key")
	}
	rec, err := a.lookup(ctx, key.Hash())
	if err != nil {
		return nil, err
	}
	now := a.now()
	switch {
	case rec.principal == nil:
		return nil, apperr.New(apperr.Unauthenticated, "invalid API key")
	case rec.revoked:
		return nil, apperr.New(apperr.Unauthenticated, "API key revoked")
	case rec.expiresAt != nil && !now.Before(*rec.expiresAt):
		return nil, apperr.New(apperr.Unauthenticated, "API key expired")
	}
	a.usedMu.Lock()
	a.used[rec.principal.KeyID] = lastUse{org: rec.principal.OrgID, at: now}
	a.usedMu.Unlock()
	return rec.principal, nil
}

func (a *Authenticator) lookup(ctx context.Context, h apikey.Hash) (keyRecord, error) {
	return a.cache.Get(h, func() (keyRecord, error) {
		var rec keyRecord
		err := a.store.KeyHolder(ctx, h[:], func(q *dbq.Queries) error {
			row, err := q.GetAPIKeyByHash(ctx, h[:])
			if errors.Is(err, pgx.ErrNoRows) {
				return nil
			}
			if err != nil {
				return err
			}
			rec.principal = &Principal{
				OrgID: row.OrgID, KeyID: row.KeyID, Plan: row.Plan, Scopes: row.Scopes,
				Limits:  plan.Limits{PerMinute: int64(row.RequestsPerMinute), PerDay: int64(row.RequestsPerDay)},
				Expires: row.ExpiresAt,
			}
			rec.expiresAt = row.ExpiresAt
			rec.revoked = row.RevokedAt != nil
			return nil
		})
		return rec, err
	})
}

// Forget drops a key from this instance's cache, so that a revocation made
// here takes effect at once (other instances see it within CacheTTL).
func (a *Authenticator) Forget(keyID uuid.UUID) {
	a.cache.ForgetFunc(func(_ apikey.Hash, rec keyRecord) bool {
		return rec.principal != nil && rec.principal.KeyID == keyID
	})
}

// ForgetOrg drops an organization's keys from this instance's cache: the
// organization was deleted (db.Store.OrgGone), so its keys must be looked up
// again, and found missing, at once.
func (a *Authenticator) ForgetOrg(org uuid.UUID) {
	a.cache.ForgetFunc(func(_ apikey.Hash, rec keyRecord) bool {
		return rec.principal != nil && rec.principal.OrgID == org
	})
}

// FlushLastUsed writes the last-use times gathered since the previous flush,
// one transaction per organization. An organization's times that could not
// be written (the database unreachable for a moment) wait for the next
// flush, unless a later use replaced them; they were dropped.
func (a *Authenticator) FlushLastUsed(ctx context.Context) error {
	a.usedMu.Lock()
	pending := a.used
	a.used = map[uuid.UUID]lastUse{}
	a.usedMu.Unlock()
	type batch struct {
		ids   []uuid.UUID
		times []time.Time
	}
	byOrg := map[uuid.UUID]*batch{}
	for id, u := range pending {
		b := byOrg[u.org]
		if b == nil {
			b = &batch{}
			byOrg[u.org] = b
		}
		b.ids = append(b.ids, id)
		b.times = append(b.times, u.at)
	}
	var errs []error
	for org, b := range byOrg {
		err := a.store.Tenant(ctx, org, func(q *dbq.Queries) error {
			return q.TouchAPIKeys(ctx, dbq.TouchAPIKeysParams{OrgID: org, Ids: b.ids, UsedAt: b.times})
		})
		if err != nil {
			a.usedMu.Lock()
			for i, id := range b.ids {
				if u, ok := a.used[id]; !ok || u.at.Before(b.times[i]) {
					a.used[id] = lastUse{org: org, at: b.times[i]}
				}
			}
			a.usedMu.Unlock()
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// lastFlushTimeout bounds the flush at shutdown: a database that stopped
// answering (a stalled failover or network path) held the process for its
// 30 s bound (db.DefaultTimeout) past its shutdown timeout, and an
// orchestrator then killed it; the times of one flush are worth less.
const lastFlushTimeout = 3 * time.Second

// RunLastUsedFlusher flushes every interval until ctx ends, then once more
// within lastFlushTimeout.
func (a *Authenticator) RunLastUsedFlusher(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lastFlushTimeout)
			defer cancel()
			if err := a.FlushLastUsed(fctx); err != nil {
				slog.Error("writing API key last use", "err", err)
			}
			return
		case <-t.C:
			if err := a.FlushLastUsed(ctx); err != nil {
				slog.Error("writing API key last use", "err", err)
			}
		}
	}
}
