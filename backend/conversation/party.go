package conversation

import (
	"context"
	"errors"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/parleyhq/parley/backend/access"
	"github.com/parleyhq/parley/backend/apperr"
	"github.com/parleyhq/parley/backend/auth"
	"github.com/parleyhq/parley/backend/chat"
	"github.com/parleyhq/parley/backend/conversation/view"
	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/gen/parley/v1/parleyv1connect"
	"github.com/parleyhq/parley/backend/handoff"
	"github.com/parleyhq/parley/backend/origin"
	"github.com/parleyhq/parley/backend/ratelimit"
)

// Party is who acts on conversations: a principal of their organization (an
// API key, a console member), or a public agent's visitor, who reaches only
// its own conversations with that agent.
type Party struct {
	Org uuid.UUID
	// Principal is nil for a visitor.
	Principal *auth.Principal
	// Agent and Visitor are a visitor's public agent and id.
	Agent   uuid.UUID
	Visitor string
	// Author signs the party's replies and status changes (a console
	// member's email); empty for a key, whose name signs them.
	Author string
	// Rate is the rate-limit state to report, nil when none was counted.
	Rate *ratelimit.Result
	// standing checks, without counting a request, that the party may
	// still act as it was admitted: its key not revoked, its agent still
	// public. A long-lived stream asks it at each heartbeat; nil for a
	// console member, whose removal ends its sessions.
	standing func(context.Context) error
}

// readScope is the key scope that reads, follows and rates conversations,
// as the schema declares it for ConversationService.
var readScope = access.MustFor(parleyv1connect.ConversationServiceGetConversationProcedure).Scope

// manageScope changes a conversation's status and replies as a person:
// acting for the organization, beyond what a key that chats may do (a chat
// key often sits in a website's backend). The schema declares it for
// PostMessage; UpdateConversation, open to visitors who rate, checks it
// when a status is asked for.
var manageScope = access.MustFor(parleyv1connect.ConversationServicePostMessageProcedure).Scope

// AdmitCaller lets a caller act on conversations. With a key: a valid key with
// the chat scope, or the admin scope (which manages them, and so reads them:
// mayManage), for its organization's conversations. Without one:
// agentID must name a public agent and visitorID its visitor (limits then
// count per visitor and client IP, as in chat). The returned Party carries
// the rate state; on a rate-limit refusal, err is set and the Party too.
func (s *Service) AdmitCaller(ctx context.Context, c chat.Caller, agentID, visitorID string) (*Party, error) {
	if c.Authorization != "" {
		adm, err := s.Admit.Gate.Admit(ctx, c.Authorization, readScope, manageScope)
		if err != nil {
			return &Party{Rate: adm.Rate}, err
		}
		// SECURITY: a key revoked (or expired) after its stream began.
		standing := func(ctx context.Context) error {
			_, err := s.Admit.Gate.Auth.Authenticate(ctx, c.Authorization)
			return err
		}
		return &Party{Org: adm.Principal.OrgID, Principal: adm.Principal, Rate: adm.Rate, standing: standing}, nil
	}
	if agentID == "" {
		return nil, apperr.New(apperr.Unauthenticated,
			"send Authorization: Bearer <API key>, or the agentId and visitorId of a public agent's visitor")
	}
	adm, err := s.Admit.Admit(ctx, c, agentID, visitorID)
	if err != nil {
		var rate *ratelimit.Result
		if adm != nil {
			rate = adm.Rate
		}
		return &Party{Rate: rate}, err
	}
	// SECURITY: an agent made private (or deleted) after its visitor's
	// stream began, or the origin of the page that opened it dropped from
	// the agent's list.
	from, marked := origin.Of(ctx)
	standing := func(ctx context.Context) error { return s.Admit.StillPublic(ctx, adm.Agent.ID, from, marked) }
	return &Party{Org: adm.OrgID(), Agent: adm.Agent.ID, Visitor: visitorID, Rate: adm.Rate, standing: standing}, nil
}

// MemberParty is the party of the principal in ctx (a console member, whose
// email signs its replies).
func MemberParty(ctx context.Context, email string) (*Party, error) {
	p, err := auth.FromContext(ctx)
	if err != nil {
		return nil, err
	}
	return &Party{Org: p.OrgID, Principal: p, Author: email}, nil
}

// keyParty is the party of the principal the gate admitted (PostMessage).
func keyParty(ctx context.Context) (*Party, error) {
	p, err := auth.FromContext(ctx)
	if err != nil {
		return nil, err
	}
	return &Party{Org: p.OrgID, Principal: p}, nil
}

// IsVisitor reports whether the party is a public agent's visitor.
func (p *Party) IsVisitor() bool { return p.Principal == nil }

// audience is what the party reads of a conversation (view.Audience): a
// console member (no key) and a key with the admin scope read its contact;
// a key without it does not.
func (p *Party) audience() view.Audience {
	switch {
	case p.Principal == nil:
		return view.Visitor
	case !p.Principal.IsKey() || p.Principal.Has(manageScope):
		return view.Manager
	}
	return view.Organization
}

// mayManage refuses parties that may not change a status or reply.
func (p *Party) mayManage() error {
	// SECURITY: a visitor only reads, follows and rates its conversation;
	// keys and members need the admin scope to act for the organization.
	if p.Principal == nil {
		return apperr.New(apperr.Forbidden, "a visitor may read, follow and rate its conversation, nothing more")
	}
	if !p.Principal.Has(manageScope) {
		return apperr.New(apperr.Forbidden, "this needs the %q scope", manageScope)
	}
	return nil
}

// notFound is every refusal of a conversation id: another organization's,
// another visitor's and a missing one read alike (ids are the clients' own,
// unique only within an organization).
func notFound(id string) error {
	return apperr.New(apperr.NotFound, "conversation %q not found", id)
}

// own returns the party's conversation id, read in the party's tenant
// transaction q: NotFound unless it is the organization's and, for a
// visitor, its agent's and its own.
func (p *Party) own(ctx context.Context, q *dbq.Queries, id string) (dbq.Conversation, error) {
	// SECURITY: the party's organization scopes the read (tenant
	// transaction and explicit org_id); a visitor's conversation must be
	// its public agent's and carry its visitor id.
	c, err := q.GetConversation(ctx, dbq.GetConversationParams{OrgID: p.Org, ID: id})
	if errors.Is(err, pgx.ErrNoRows) {
		return c, notFound(id)
	}
	if err != nil {
		return c, err
	}
	if p.IsVisitor() && (c.AgentID != p.Agent || c.VisitorID == nil || *c.VisitorID != p.Visitor) {
		return c, notFound(id)
	}
	return c, nil
}

// author is who the party's replies and status changes are signed with: a
// member's email, a key's name.
func (p *Party) author(ctx context.Context, q *dbq.Queries) (string, error) {
	if p.Author != "" {
		return p.Author, nil
	}
	if p.Principal == nil || p.Principal.KeyID == uuid.Nil {
		return "", apperr.New(apperr.Forbidden, "only a person of the organization may do this")
	}
	name, err := q.APIKeyName(ctx, dbq.APIKeyNameParams{OrgID: p.Org, ID: p.Principal.KeyID})
	if errors.Is(err, pgx.ErrNoRows) {
		return "", apperr.New(apperr.Unauthenticated, "this API key no longer exists")
	}
	if err != nil {
		return "", err
	}
	switch {
	case name == "":
		name = "API key " + p.Principal.KeyID.String()
	case readsAsAnotherAuthor(name):
		// A key's name is free text: one that reads as another author
		// (the model, handoff.ByAgent; a member, signed by its email;
		// another key, an unnamed one signed "API key <id>") says it is
		// this key's, as a key's created_by does.
		name = "API key " + name
	}
	return name, nil
}

// readsAsAnotherAuthor reports whether a key's name would read, to a
// person, as the model, a member or another key: compared without case or
// surrounding space, as "Agent " reads as the agent.
func readsAsAnotherAuthor(name string) bool {
	n := strings.ToLower(strings.TrimSpace(name))
	return n == handoff.ByAgent || strings.Contains(n, "@") || strings.HasPrefix(n, "api key")
}

// shownAuthor is a message's author as the party reads it: a visitor sees
// that a person of the organization wrote (the role "human") but not who
// (a member's email, a key's name).
func (p *Party) shownAuthor(author string) string {
	if p.IsVisitor() {
		return ""
	}
	return author
}
