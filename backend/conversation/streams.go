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
// organization's own and are not bounded here.
const MaxVisitorStreams = 10

// StreamLife is how long a stream stays open: then it ends as at a
// server's drain, and its client reconnects where it left off (SSE's
// Last-Event-ID, after_event_id over Connect).
const StreamLife = time.Hour

// slots counts the streams open per key.
type slots struct {
	mu   sync.Mutex
	open map[string]int
}

// take holds one of key's max slots; release gives it back. It is
// RateLimited when all are held.
func (s *slots) take(key string, limit int) (release func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open[key] >= limit {
		return nil, &apperr.Error{Code: apperr.RateLimited, RetryAfter: 5 * time.Second,
			Message: "too many streams open from this address; close one, or retry later"}
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
