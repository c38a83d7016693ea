package tool

import (
	"context"
	"encoding/json"
	"errors"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/parleyhq/parley/backend/contact"
	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/handoff"
)

// RequestHuman is the name of the tool that hands the conversation to
// people.
const RequestHuman = "request_human"

// maxReason bounds the reason kept for the people taking over, in bytes.
const maxReason = 1000

var requestHuman = Registration{
	Name:    RequestHuman,
	Missing: optIn(RequestHuman),
	New:     func(d *Deps, t *Turn) Tool { return &Handoff{Deps: d, Turn: t} },
}

// Handoff is the request_human tool of one turn: the conversation's status
// becomes human_requested (backend/handoff: recorded with the model's
// reason, its followers notified), the turn ends and the visitor reads the
// agent's handoff message. From then on the model is silent in the
// conversation until a person resolves it or gives it back.
type Handoff struct {
	*Deps
	*Turn
}

func (*Handoff) Name() string { return RequestHuman }

func (*Handoff) Description() string {
	return "Hand this conversation to a person of the team: when the visitor asks for a human, " +
		"or when you cannot help and a person could. After this call you no longer answer in this conversation; " +
		"the visitor is told that a person will answer."
}

func (*Handoff) Parameters() map[string]any {
	return map[string]any{
		"type": "object",
		"properties": map[string]any{
			"reason": map[string]any{"type": "string", "description": "Why a person is needed, in a sentence, for the people taking over."},
		},
		"required": []string{"reason"},
	}
}

// Traits: the model is not called again in the turn; the visitor reads
// Result.Reply.
func (*Handoff) Traits() Traits { return Traits{EndsTurn: true} }

// Run hands the conversation over. A missing reason is no reason to keep
// the visitor from a person: the call succeeds without one. A reason the
// database cannot store (a NUL) is an error result the model can correct.
func (h *Handoff) Run(ctx context.Context, call Call) (Result, error) {
	var args struct {
		Reason string `json:"reason"`
	}
	if err := json.Unmarshal([]byte(call.Arguments), &args); err != nil {
		return Errorf(`the arguments must be a JSON object with a "reason" string`), nil
	}
	if !contact.Storable(args.Reason) {
		return Errorf("the conversation was not handed over: reason: must be UTF-8 text without NUL characters (U+0000)"), nil
	}
	reason := clip(strings.TrimSpace(args.Reason), maxReason)
	// SECURITY: the turn's organization and conversation only.
	err := h.Store.TenantTx(ctx, h.Org, func(tx pgx.Tx, q *dbq.Queries) error {
		if _, err := handoff.RequestHuman(ctx, tx, h.Hooks, h.Org, h.ConversationID, reason); err != nil {
			return err
		}
		// SECURITY: only the turn's conversation: one deleted meanwhile and
		// started again under its id (another visitor's) is rolled back
		// to as it was. Read after the update, which holds the row.
		c, err := q.GetConversation(ctx, dbq.GetConversationParams{OrgID: h.Org, ID: h.ConversationID})
		if errors.Is(err, pgx.ErrNoRows) || err == nil && !c.CreatedAt.Equal(h.ConversationCreatedAt) {
			return handoff.ErrNotFound
		}
		return err
	})
	if err != nil {
		return Result{}, err
	}
	reply := handoff.Message(h.HandoffMessage)
	return Result{
		Content: "The conversation is handed to people; a person will answer the visitor here. The visitor is told: " + reply,
		Summary: "handed to people",
		Reply:   reply,
	}, nil
}
