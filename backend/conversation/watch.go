package conversation

import (
	"context"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/parleyhq/parley/backend/apperr"
	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/backend/db/dbq"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
)

// HeartbeatEvery is how often a quiet stream says it is alive.
const HeartbeatEvery = 15 * time.Second

// eventsPerRead bounds the events one read sends, and eventBytesPerRead
// their messages' text (the first event goes whatever its size). SECURITY:
// a visitor replays its conversation from Last-Event-ID 0 with no key, and
// a hundred questions of 32,000 characters made each read 12 MB, held
// several times over while it was encoded, for each of its streams.
const (
	eventsPerRead     = 100
	eventBytesPerRead = 1 << 20
)

// Watch is an open stream of one conversation's events: its new messages
// and status changes, numbered 1, 2, ... within the conversation.
type Watch struct {
	s     *Service
	sub   *Sub
	party *Party
	conv  string
	// born is when the conversation followed was created: a conversation
	// deleted and made again under the same id (ids are the clients' own)
	// is another conversation, perhaps another visitor's, whose events the
	// stream must not send.
	born time.Time
	// after is the number of the last event sent (or the starting point).
	after int64
	// release gives back the stream's slot (Service.Watch); nil: none.
	release func()
}

// Follow opens a stream of one of the party's conversations' events after
// the one numbered after, or, with after nil, of those to come. Run sends
// them; Close (or the end of Run) releases the stream.
func (s *Service) Follow(ctx context.Context, p *Party, id string, after *int64) (*Watch, error) {
	if s.Live == nil {
		return nil, apperr.New(apperr.Unavailable, "this server does not stream conversations")
	}
	// The party's own conversation, before anything is listened to.
	if err := s.Store.Tenant(ctx, p.Org, func(q *dbq.Queries) error {
		_, err := p.own(ctx, q, id)
		return err
	}); err != nil {
		return nil, err
	}
	sub, err := s.Live.Subscribe(ctx, p.Org, id)
	if err != nil {
		return nil, err
	}
	// The starting point is read once the hub listens: every later event
	// is then either read by Run or wakes it.
	var last int64
	var born time.Time
	err = s.Store.Tenant(ctx, p.Org, func(q *dbq.Queries) error {
		c, err := p.own(ctx, q, id)
		last, born = c.EventSeq, c.CreatedAt
		return err
	})
	if err != nil {
		sub.Close()
		return nil, err
	}
	w := &Watch{s: s, sub: sub, party: p, conv: id, born: born, after: last}
	if after != nil && *after < last {
		w.after = max(*after, 0)
	}
	return w, nil
}

// Close releases the stream.
func (w *Watch) Close() {
	w.sub.Close()
	if w.release != nil {
		w.release()
	}
}

// Run sends the stream's events until ctx ends, the server drains, the
// stream has lasted StreamLife, the conversation is deleted (NotFound) or
// send fails (its error); the database out of reach does not end it. It starts with a heartbeat carrying the starting
// point, sends one every HeartbeatEvery when nothing else went out, and
// closes the stream when it returns.
func (w *Watch) Run(ctx context.Context, send func(*parleyv1.WatchConversationResponse) error) error {
	defer w.Close()
	if err := send(w.heartbeat()); err != nil {
		return err
	}
	every := w.s.Heartbeat
	if every <= 0 {
		every = HeartbeatEvery
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	grace := time.NewTimer(FollowGrace) // see Hub.Subscribe
	defer grace.Stop()
	life := w.s.StreamLife
	if life <= 0 {
		life = StreamLife
	}
	end := time.NewTimer(life)
	defer end.Stop()
	var drain <-chan struct{}
	if w.s.Drain != nil {
		drain = w.s.Drain.Done()
	}
	for {
		more, err := w.flush(ctx, send)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			// The database out of reach for a moment: the stream stays
			// and reads again at its next wake-up (the hub wakes every
			// stream once it listens again) or heartbeat. Ending it would
			// send every client of the instance back at once.
			if !db.Unavailable(err) {
				return err
			}
		}
		if more {
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-drain:
			return nil
		case <-end.C:
			return nil // the client reconnects where it left off
		case <-w.sub.C:
		case <-grace.C:
		case <-tick.C:
			// Quiet or not, read again below: a lost notification costs
			// one heartbeat of latency at most.
			if err := w.alive(ctx); err != nil && !db.Unavailable(err) {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			if err := send(w.heartbeat()); err != nil {
				return err
			}
		}
	}
}

func (w *Watch) heartbeat() *parleyv1.WatchConversationResponse {
	return &parleyv1.WatchConversationResponse{
		EventId: w.after, CreateTime: timestamppb.Now(),
		Event: &parleyv1.WatchConversationResponse_Heartbeat{Heartbeat: &parleyv1.Heartbeat{}},
	}
}

// alive ends a stream whose conversation is gone (its agent deleted), or
// whose party may no longer follow it (its key revoked, its public agent
// made private): a stream outlives its admission by an hour otherwise.
func (w *Watch) alive(ctx context.Context) error {
	if w.party.standing != nil {
		if err := w.party.standing(ctx); err != nil {
			return err
		}
	}
	return w.s.Store.Tenant(ctx, w.party.Org, func(q *dbq.Queries) error { return w.still(ctx, q) })
}

// still checks, in q's transaction, that the conversation followed is
// still the party's and the one the stream began on: NotFound when it was
// deleted, or deleted and made again under its id (by another visitor,
// perhaps).
func (w *Watch) still(ctx context.Context, q *dbq.Queries) error {
	c, err := w.party.own(ctx, q, w.conv)
	if err != nil {
		return err
	}
	if !c.CreatedAt.Equal(w.born) {
		return notFound(w.conv)
	}
	return nil
}

// flush sends the events after w.after, at most eventsPerRead (and
// eventBytesPerRead); more reports that others may follow at once.
func (w *Watch) flush(ctx context.Context, send func(*parleyv1.WatchConversationResponse) error) (more bool, err error) {
	var rows []dbq.ConversationEventsRow
	// SECURITY: the events of the party's conversation, read by its
	// organization, and only while it is the conversation the stream began
	// on: events are read by id, and an id deleted and made again is
	// another conversation, perhaps another visitor's. still ends the
	// stream then; the read itself takes only the events of the
	// conversation born when this one was (one snapshot), should it be made
	// again between the two.
	err = w.s.Store.Tenant(ctx, w.party.Org, func(q *dbq.Queries) error {
		if err := w.still(ctx, q); err != nil {
			return err
		}
		var err error
		rows, err = q.ConversationEvents(ctx, dbq.ConversationEventsParams{
			OrgID: w.party.Org, ConversationID: w.conv, ConversationCreatedAt: w.born, AfterSeq: w.after, MaxRows: eventsPerRead,
			MaxBytes: eventBytesPerRead,
		})
		return err
	})
	if err != nil {
		return false, err
	}
	for _, r := range rows {
		if err := send(eventOf(ctx, w.party, w.conv, r)); err != nil {
			return false, err
		}
		w.after = r.Seq
	}
	return len(rows) == eventsPerRead || len(rows) > 0 && int64(len(rows)) < rows[0].Fetched, nil
}

// eventOf is a stored event as the API sends it to p.
func eventOf(ctx context.Context, p *Party, conv string, r dbq.ConversationEventsRow) *parleyv1.WatchConversationResponse {
	out := &parleyv1.WatchConversationResponse{EventId: r.Seq, CreateTime: timestamppb.New(r.CreatedAt)}
	if r.Kind == "status" {
		st := &parleyv1.StatusChange{Status: deref(r.Status)}
		if !p.IsVisitor() {
			// SECURITY: who and why are the organization's (view.SummaryOf).
			st.Reason, st.ChangedBy = r.Reason, r.ChangedBy
		}
		out.Event = &parleyv1.WatchConversationResponse_Status{Status: st}
		return out
	}
	m := Message{ConversationID: conv, Role: deref(r.Role), Content: deref(r.Content), Author: p.shownAuthor(deref(r.Author)), Model: deref(r.Model)}
	if r.MessageID != nil {
		m.ID = r.MessageID.String()
		m.Sources, m.ToolCalls = readJSON(ctx, *r.MessageID, r.Sources, r.ToolCalls)
	} else {
		m.Sources, m.ToolCalls = readJSON(ctx, uuid.Nil, r.Sources, r.ToolCalls)
	}
	if r.MessageCreatedAt != nil {
		m.CreateTime = *r.MessageCreatedAt
	}
	if r.Incomplete != nil {
		m.Incomplete = *r.Incomplete
	}
	out.Event = &parleyv1.WatchConversationResponse_Message{Message: m.Proto()}
	return out
}
