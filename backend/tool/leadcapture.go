package tool

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/parleyhq/parley/backend/apperr"
	"github.com/parleyhq/parley/backend/contact"
	"github.com/parleyhq/parley/backend/db/dbq"
)

// LeadCapture is the name of the tool that records the visitor's contact
// details.
const LeadCapture = "lead_capture"

var leadCapture = Registration{
	Name:    LeadCapture,
	Missing: optIn(LeadCapture),
	New:     func(d *Deps, t *Turn) Tool { return &Lead{Deps: d, Turn: t} },
}

// optIn is the Missing of a tool that acts on the organization's data or
// people (lead_capture, request_human): an agent uses it only when its
// owner lists it, never merely because its list is empty.
func optIn(name string) func(*Deps, *Profile) string {
	return func(_ *Deps, p *Profile) string {
		if !slices.Contains(p.Tools, name) {
			return "the agent does not list it"
		}
		return ""
	}
}

// Lead is the lead_capture tool of one turn: it merges what the visitor
// gave into its organization's contacts (backend/contact, the same contacts
// a chat request's contact field feeds) and links the contact to the turn's
// conversation.
type Lead struct {
	*Deps
	*Turn
}

func (*Lead) Name() string { return LeadCapture }

func (*Lead) Description() string {
	return "Record the visitor's contact details (an email address and/or a phone number, their name) and a note of what they want, " +
		"so that the team can follow up. Use only details the visitor gave in this conversation; never guess or invent them. " +
		"Call it again when the visitor corrects or adds a detail."
}

func (*Lead) Parameters() map[string]any {
	str := func(desc string) map[string]any { return map[string]any{"type": "string", "description": desc} }
	return map[string]any{
		"type": "object",
		"properties": map[string]any{
			"email":       str("The visitor's email address."),
			"phoneNumber": str("The visitor's phone number in international E.164 format: a plus, the country code and the number, e.g. +33612345678."),
			"firstName":   str("The visitor's first name."),
			"lastName":    str("The visitor's last name."),
			"note":        str("What the visitor wants or asked about, in a sentence or two, for whoever follows up (at most 1000 characters)."),
		},
		"description": "At least an email or a phoneNumber.",
	}
}

func (*Lead) Traits() Traits { return Traits{} }

// Run records one call. Arguments the model got wrong (no email nor phone
// number, an address or number that is not one) get an error result naming
// the field; only the database failing is an error of the turn.
func (l *Lead) Run(ctx context.Context, call Call) (Result, error) {
	var args struct {
		Email       string `json:"email"`
		PhoneNumber string `json:"phoneNumber"`
		FirstName   string `json:"firstName"`
		LastName    string `json:"lastName"`
		Note        string `json:"note"`
	}
	if err := json.Unmarshal([]byte(call.Arguments), &args); err != nil {
		return Errorf("the arguments must be a JSON object of strings: email, phoneNumber, firstName, lastName, note"), nil
	}
	// Unverified: the model took these from the conversation, where anyone
	// can type another person's email; they must not rewrite that
	// person's contact.
	f := contact.Fields{Email: args.Email, PhoneNumber: args.PhoneNumber, FirstName: args.FirstName, LastName: args.LastName, Note: args.Note, Unverified: true}
	if err := f.Normalize(); err != nil {
		var e *apperr.Error
		if errors.As(err, &e) && e.Code == apperr.Invalid {
			return Errorf("nothing was recorded: %s", e.Message), nil
		}
		return Result{}, err
	}
	// SECURITY: the turn's organization, for the conversation, the contact
	// and the link between them.
	err := l.Store.TenantTx(ctx, l.Org, func(tx pgx.Tx, q *dbq.Queries) error {
		var prefer *uuid.UUID
		if l.ConversationID != "" {
			c, err := q.GetConversation(ctx, dbq.GetConversationParams{OrgID: l.Org, ID: l.ConversationID})
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
			// SECURITY: only the turn's conversation's contact, not that
			// of one started again under its id.
			if err == nil && c.CreatedAt.Equal(l.ConversationCreatedAt) {
				prefer = c.ContactID
			}
		}
		id, created, err := contact.Merge(ctx, tx, l.Org, f, prefer)
		if err != nil {
			return err
		}
		if created {
			if err := contact.EmitCreated(ctx, tx, l.Hooks, l.Org, id); err != nil {
				return err
			}
		}
		if l.ConversationID == "" {
			return nil
		}
		return q.LinkConversationContact(ctx, dbq.LinkConversationContactParams{
			OrgID: l.Org, ConversationID: l.ConversationID, ConversationCreatedAt: l.ConversationCreatedAt, ContactID: &id,
		})
	})
	if err != nil {
		return Result{}, err
	}
	var got []string
	for _, kv := range [][2]string{{"email", f.Email}, {"phone number", f.PhoneNumber}, {"name", strings.TrimSpace(f.FirstName + " " + f.LastName)}} {
		if kv[1] != "" {
			got = append(got, kv[0]+" "+kv[1])
		}
	}
	if f.Note != "" {
		got = append(got, "a note")
	}
	return Result{
		Content: "Recorded the visitor's " + strings.Join(got, ", ") + ". Do not ask for these details again.",
		Summary: "contact recorded: " + strings.Join(got, ", "),
	}, nil
}
