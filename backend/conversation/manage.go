package conversation

import (
	"context"
	"errors"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/proto"

	"github.com/parleyhq/parley/backend/apperr"
	"github.com/parleyhq/parley/backend/db/dbq"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/handoff"
	"github.com/parleyhq/parley/backend/webhook"
)

// Changes to a conversation: its status (who has it: the model or people),
// its rating, and people's replies. The database records each new message
// and status change as an event and notifies the streams following the
// conversation (migration 00010's triggers), on whichever instance they are.

// Change is what Update changes; nil fields stay as they are.
type Change struct {
	// Status is one of Statuses. human_requested takes the conversation
	// from the model; resolved and unresolved give it back.
	Status *string
	// Reason says why the status changes (shown in the inbox).
	Reason string
	// Rating is 1 to 5.
	Rating *int32
	// Created, when set, is the creation time of the conversation the
	// person read (see sameConversation).
	Created time.Time
}

// sameConversation checks that conversation id, created at created, is the
// one a person read, created at read (the console's forms carry it): ids
// are the clients' own, and a conversation deleted may be started again
// under its id by another visitor. A reply, a status change or a deletion
// sent with read acts on that conversation only: one made since under the
// same id is refused (Aborted, REST 409), so that words typed for one visitor never
// reach another. read zero: not checked. read is compared to the
// microsecond, as Postgres keeps created (and as DeleteConversation's
// statement compares it): digits past it do not make a conversation
// another, refused here and deleted there.
func sameConversation(id string, created, read time.Time) error {
	if read.IsZero() || created.Equal(read.Truncate(time.Microsecond)) {
		return nil
	}
	return apperr.New(apperr.Aborted,
		"conversation %q was deleted and started again since you read it: nothing was done; read it again", id)
}

// MaxReply bounds a person's reply, as a chat message is bounded.
const MaxReply = 32000

// MaxReason bounds why a status changes, as the schema does
// (UpdateConversationRequest.reason): checked here too, for the callers
// that do not pass through it (the console's forms).
const MaxReason = 500

// Update changes one of the party's conversations and returns its summary.
// A status needs a party that may manage conversations (Forbidden
// otherwise); a rating, any party that may read it (its visitor too).
func (s *Service) Update(ctx context.Context, p *Party, id string, ch Change) (*parleyv1.ConversationSummary, error) {
	if ch.Status == nil && ch.Rating == nil {
		return nil, apperr.InvalidField("body", "names no field to update (writable: status, with its reason, and rating)")
	}
	if ch.Status != nil {
		if !handoff.IsStatus(*ch.Status) {
			return nil, apperr.InvalidField("status", "must be one of %s", strings.Join(Statuses, ", "))
		}
		if err := p.mayManage(); err != nil {
			return nil, err
		}
	}
	if utf8.RuneCountInString(ch.Reason) > MaxReason || !utf8.ValidString(ch.Reason) || strings.ContainsRune(ch.Reason, 0) {
		return nil, apperr.InvalidField("reason", "at most %d characters of UTF-8 text, without NUL", MaxReason)
	}
	if r := ch.Rating; r != nil && (*r < 1 || *r > 5) {
		return nil, apperr.InvalidField("rating", "must be an integer from 1 to 5")
	}
	var out *parleyv1.ConversationSummary
	err := s.Store.TenantTx(ctx, p.Org, func(tx pgx.Tx, q *dbq.Queries) error {
		c, err := p.own(ctx, q, id)
		if err != nil {
			return err
		}
		if err := sameConversation(id, c.CreatedAt, ch.Created); err != nil {
			return err
		}
		if err := lockAgent(ctx, q, p.Org, c.ID); err != nil {
			return err
		}
		if ch.Status != nil {
			by, err := p.author(ctx, q)
			if err != nil {
				return err
			}
			if _, err := handoff.SetStatus(ctx, tx, s.Hooks, p.Org, c.ID, *ch.Status, ch.Reason, by); err != nil {
				return err
			}
		}
		if ch.Rating != nil {
			if _, err := q.SetConversationRating(ctx, dbq.SetConversationRatingParams{OrgID: p.Org, ID: c.ID, Rating: ptr(int16(*ch.Rating))}); err != nil {
				return err
			}
		}
		if out, _, err = summary(ctx, q, p, c.ID); err != nil {
			return err
		}
		// Read again after the writes, which hold the row they wrote: the
		// conversation deleted and started again meanwhile is refused too.
		return sameConversation(id, out.GetCreateTime().AsTime(), ch.Created)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Reply adds a person's reply (role human, signed with the party's
// author) to one of the party's conversations, received on channel. People
// take the conversation over: its status becomes human_requested if it was
// not, so that the model does not answer over them. read, when set, is the
// creation time of the conversation the person read: a conversation
// started since under the same id is refused (Aborted, see sameConversation).
func (s *Service) Reply(ctx context.Context, p *Party, id string, read time.Time, text, channel string) (*Message, *parleyv1.ConversationSummary, error) {
	if err := p.mayManage(); err != nil {
		return nil, nil, err
	}
	if strings.TrimSpace(text) == "" {
		return nil, nil, apperr.InvalidField("text", "must not be blank")
	}
	if utf8.RuneCountInString(text) > MaxReply || strings.ContainsRune(text, 0) {
		return nil, nil, apperr.InvalidField("text", "at most %d characters, without NUL", MaxReply)
	}
	var msg *Message
	var sum *parleyv1.ConversationSummary
	err := s.Store.TenantTx(ctx, p.Org, func(tx pgx.Tx, q *dbq.Queries) error {
		c, err := p.own(ctx, q, id)
		if err != nil {
			return err
		}
		if err := sameConversation(id, c.CreatedAt, read); err != nil {
			return err
		}
		if err := lockAgent(ctx, q, p.Org, c.ID); err != nil {
			return err
		}
		by, err := p.author(ctx, q)
		if err != nil {
			return err
		}
		// The status change comes first, so that a stream shows people
		// taking over before their first words.
		if _, err := handoff.SetStatus(ctx, tx, s.Hooks, p.Org, c.ID, handoff.HumanRequested, "a person replied", by); err != nil {
			return err
		}
		mid, err := uuid.NewV7()
		if err != nil {
			return err
		}
		row, err := q.CreateHumanMessage(ctx, dbq.CreateHumanMessageParams{
			OrgID: p.Org, ID: mid, ConversationID: c.ID, Content: text, Channel: channel, Author: by,
		})
		if err != nil {
			return err
		}
		if err := q.TouchConversation(ctx, dbq.TouchConversationParams{OrgID: p.Org, ID: c.ID}); err != nil {
			return err
		}
		msg = &Message{ID: row.ID.String(), ConversationID: c.ID, Role: "human", Content: text, CreateTime: row.CreatedAt, Author: by}
		err = s.Hooks.Emit(ctx, tx, p.Org, webhook.MessageCreated, func() (proto.Message, error) { return msg.Proto(), nil })
		if err != nil {
			return err
		}
		if sum, _, err = summary(ctx, q, p, c.ID); err != nil {
			return err
		}
		// Read again after the writes, which hold the row they wrote: a
		// deletion and a new start between the first read and them are
		// refused too, and nothing is kept.
		return sameConversation(id, sum.GetCreateTime().AsTime(), read)
	})
	if err != nil {
		return nil, nil, err
	}
	return msg, sum, nil
}

// Delete deletes one of the party's organization's conversations with its
// messages (admin scope, as replies). NotFound when it has none of that id;
// with read set, Aborted when its conversation of that id was started
// since (see sameConversation).
func (s *Service) Delete(ctx context.Context, p *Party, id string, read time.Time) error {
	if err := p.mayManage(); err != nil {
		return err
	}
	// SECURITY: the party's organization (tenant transaction and explicit
	// org_id).
	return s.Store.Tenant(ctx, p.Org, func(q *dbq.Queries) error {
		// The agent first, as DeleteAgent and a reply take it.
		if err := lockAgent(ctx, q, p.Org, id); err != nil {
			return err
		}
		params := dbq.DeleteConversationParams{OrgID: p.Org, ID: id}
		if !read.IsZero() {
			params.CreatedAt = &read
		}
		n, err := q.DeleteConversation(ctx, params)
		if err != nil || n > 0 {
			return err
		}
		c, err := q.GetConversation(ctx, dbq.GetConversationParams{OrgID: p.Org, ID: id})
		if errors.Is(err, pgx.ErrNoRows) {
			return notFound(id)
		}
		if err != nil {
			return err
		}
		if err := sameConversation(id, c.CreatedAt, read); err != nil {
			return err
		}
		// Started after the deletion looked (a concurrent first message).
		return notFound(id)
	})
}

// lockAgent takes the agent of conversation id before the transaction
// writes the conversation, as DeleteAgent takes it before the
// conversations it cascades to. A reply writes the conversation several
// times (its status, its message's event, its touch), and every write
// after the first checks the agent's key: taken only then, it waited for
// a deletion of the agent that waited for the conversation, a deadlock.
// NotFound when the conversation went with its agent meanwhile.
func lockAgent(ctx context.Context, q *dbq.Queries, org uuid.UUID, id string) error {
	_, err := q.LockConversationAgent(ctx, dbq.LockConversationAgentParams{OrgID: org, ID: id})
	if errors.Is(err, pgx.ErrNoRows) {
		return notFound(id)
	}
	return err
}

func ptr[T any](v T) *T { return &v }
