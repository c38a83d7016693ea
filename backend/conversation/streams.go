package conversation

import (
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/parleyhq/parley/backend/apperr"
	"github.com/parleyhq/parley/backend/auth"
)

// MaxVisitorStreams bounds the streams of a public agent's conversations
// that its visitors hold open from one address (an IPv4 address, an IPv6
// /64), on one instance. SECURITY: a stream costs a pooled read at each
// heartbeat for as long as it lasts, and a visitor needs no key: without a
// bound, one address opened one a request, its limit's worth a day, and
// they went on after it stopped asking. Callers with a key are the
// organization's own, bounded by organization instead (DefaultOrgStreams).
const MaxVisitorStreams = 10

// DefaultOrgStreams is how many streams one organization's keys may hold
// open on one instance unless told otherwise (Service.OrgStreams, the
// --org-streams flag). SECURITY: a key's rate limit counts the request that
// opens a stream, not the hour it stays open: one key opened a stream a
// request, its limit's worth a day, each costing a pooled read at every
// heartbeat and a place in the hub, for as long as it lasted.
const DefaultOrgStreams = 500

// StreamLife is how long a stream stays open: then it ends as at a
// server's drain, and its client reconnects where it left off (SSE's
// Last-Event-ID, after_event_id over Connect).
const StreamLife = time.Hour

// slots counts the streams open per key (visitorKey, orgKey).
type slots struct {
	mu   sync.Mutex
	open map[string]int
}

// take holds one of key's limit slots; release gives it back. It is
// RateLimited with message full when all are held.
func (s *slots) take(key string, limit int, full string) (release func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open[key] >= limit {
		return nil, &apperr.Error{Code: apperr.RateLimited, RetryAfter: 5 * time.Second, Message: full}
	}
	if s.open == nil {
		s.open = map[string]int{}
	}
	s.open[key]++
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.open[key]--; s.open[key] <= 0 {
				delete(s.open, key)
			}
		})
	}, nil
}

// visitorKey is what a visitor's streams are counted by: the agent and the
// address.
func visitorKey(agent uuid.UUID, clientIP string) string {
	return agent.String() + " " + auth.AddressKey(clientIP)
}

// orgKey is what a key's streams are counted by: its organization (every
// key of it together: an organization makes as many keys as it likes).
func orgKey(org uuid.UUID) string { return "org " + org.String() }
