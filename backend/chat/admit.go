// Package chat runs one turn of a conversation with an agent: it admits the
// caller (an API key of the agent's organization, or a visitor of a public
// agent), keeps the conversation and its history, calls the model the agent
// (or the request) names, streams the reply, and stores both messages with
// usage, model, provider and latency. Connect handlers and the REST paths
// both call it.
//
// It must never join a conversation of another agent, visitor or
// organization, and never log message contents.
package chat

import (
	"context"
	"errors"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/parleyhq/parley/backend/access"
	"github.com/parleyhq/parley/backend/agent"
	"github.com/parleyhq/parley/backend/apperr"
	"github.com/parleyhq/parley/backend/auth"
	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/gen/parley/v1/parleyv1connect"
	"github.com/parleyhq/parley/backend/origin"
	"github.com/parleyhq/parley/backend/plan"
	"github.com/parleyhq/parley/backend/ratelimit"
	"github.com/parleyhq/parley/backend/reqinfo"
)

// Caller is who sends a request, as the transport sees it.
type Caller struct {
	// Authorization is the header's value, empty when none was sent.
	Authorization string
	// ClientIP is the peer's address, for public agents' per-IP limits.
	ClientIP string
}

// chatScope is the key scope chat needs, as the schema declares it for
// ChatService (and ConversationService, which admits through here too).
var chatScope = access.MustFor(parleyv1connect.ChatServiceChatProcedure).Scope

// Admitted is a request let through to an agent.
type Admitted struct {
	Agent dbq.Agent
	// Principal is the key's, nil for a visitor of a public agent.
	Principal *auth.Principal
	// Rate is the rate-limit state to report.
	Rate *ratelimit.Result
	// Plan is the organization's plan when no principal carries it (a
	// visitor of a public agent), for metrics.
	Plan string
}

// PlanName is the organization's plan, for metrics.
func (a *Admitted) PlanName() string {
	if a.Principal != nil {
		return a.Principal.Plan
	}
	return a.Plan
}

// OrgID is the agent's organization.
func (a *Admitted) OrgID() uuid.UUID { return a.Agent.OrgID }

// Admitter decides who may talk to which agent.
type Admitter struct {
	Store *db.Store
	// Gate admits keys, and counts visitors of public agents on their
	// owner's plan (AdmitVisitor).
	Gate *auth.Gate
	// Agents caches the agents keys reach, shared with the AgentService
	// that drops what it changes (agent.NewCache; required).
	Agents *agent.Cache
}

// Admit lets a caller reach an agent. With a key, the key must be valid,
// carry the chat scope and belong to the agent's organization (403
// otherwise). Without one, the agent must be public (401 for a private
// agent) and visitorID is required; limits then count per visitor and per
// client IP on the owner's plan. The returned Admitted carries the rate state
// even when err is a rate-limit refusal.
func (a *Admitter) Admit(ctx context.Context, c Caller, agentID, visitorID string) (*Admitted, error) {
	id, err := uuid.Parse(agentID)
	if err != nil {
		return nil, apperr.New(apperr.NotFound, "agent %q not found", agentID)
	}
	if c.Authorization != "" {
		adm, err := a.Gate.Admit(ctx, c.Authorization, chatScope)
		if err != nil {
			return &Admitted{Rate: adm.Rate}, err
		}
		out := &Admitted{Principal: adm.Principal, Rate: adm.Rate}
		// SECURITY: read in the key's organization: a key of another
		// organization learns only that the agent exists.
		out.Agent, err = a.agent(ctx, adm.Principal.OrgID, id)
		return out, err
	}

	row, err := a.publicAgent(ctx, id)
	if err != nil {
		return nil, err
	}
	if visitorID == "" {
		return nil, apperr.InvalidField("visitor_id", "required for public agents")
	}
	// SECURITY: a page on an origin the deployment does not list reaches
	// the agent only if its owner lists the origin.
	if err := origin.Admit(ctx, id.String(), row.AllowedOrigins); err != nil {
		return nil, err
	}
	out := &Admitted{Agent: dbq.Agent{
		OrgID: row.OrgID, ID: row.ID, Name: row.Name, Description: row.Description, Instructions: row.Instructions,
		Model: row.Model, Temperature: row.Temperature, Tools: row.Tools, Visibility: row.Visibility,
		Status: row.Status, CreatedAt: row.CreatedAt, UpdatedAt: row.UpdatedAt, HandoffMessage: row.HandoffMessage,
		ToolSettings: row.ToolSettings, AllowedOrigins: row.AllowedOrigins,
	}}
	out.Plan = row.OrgPlan
	reqinfo.SetCaller(ctx, row.OrgID, uuid.Nil)
	lim := plan.Limits{PerMinute: int64(row.OrgRequestsPerMinute), PerDay: int64(row.OrgRequestsPerDay)}
	if out.Rate, err = a.Gate.AdmitVisitor(ctx, id, visitorID, c.ClientIP, row.OrgPlan, lim); err != nil {
		return out, err
	}
	return out, nil
}

// StillPublic reports, without counting a request, whether agent id is
// still public: Unauthenticated once it is private, NotFound once it is
// gone (a visitor's stream asks it as it goes on). from is the origin of
// the page that was admitted (origin.Of; "" when the request was not
// marked): Forbidden once the agent's owner no longer lists it.
func (a *Admitter) StillPublic(ctx context.Context, id uuid.UUID, from string, marked bool) error {
	row, err := a.publicAgent(ctx, id)
	if err != nil {
		return err
	}
	// SECURITY: an origin dropped from the agent's list after its page's
	// stream began (made through any instance: read here, not cached).
	if marked && !origin.Match(row.AllowedOrigins, from) {
		return apperr.New(apperr.Forbidden, "agent %s no longer accepts browser calls from %s", id, from)
	}
	return nil
}

// publicAgent reads public agent id: Unauthenticated when it is private,
// NotFound when there is none.
func (a *Admitter) publicAgent(ctx context.Context, id uuid.UUID) (dbq.GetPublicAgentRow, error) {
	var row dbq.GetPublicAgentRow
	err := a.Store.PublicAgent(ctx, id, func(q *dbq.Queries) error {
		var err error
		row, err = q.GetPublicAgent(ctx, id)
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		exists, xerr := q.ResourceExists(ctx, dbq.ResourceExistsParams{ID: id, Kind: "agent"})
		if xerr != nil {
			return xerr
		}
		if exists {
			// SECURITY: a private agent needs its organization's key.
			return apperr.New(apperr.Unauthenticated, "agent %s is private: send Authorization: Bearer <API key>", id)
		}
		return apperr.New(apperr.NotFound, "agent %q not found", id.String())
	})
	return row, err
}

// AdmitPrincipal lets an already authenticated principal (a console member
// signed in to its organization) reach one of its organization's agents. It
// needs the chat scope. The agent is read in p's tenant transaction: an
// agent of another organization is Forbidden and an unknown one NotFound,
// as Admit answers a key.
//
// No rate limit is counted: the caller's own front door (the console's
// session and role check) admitted it, and turns run this way (the
// console's playground, channel "dashboard") do not spend any API key's
// per-minute or per-day allowance. Rate is nil.
func (a *Admitter) AdmitPrincipal(ctx context.Context, p *auth.Principal, agentID string) (*Admitted, error) {
	if p == nil {
		return nil, apperr.New(apperr.Unauthenticated, "sign in to talk to an agent")
	}
	// SECURITY: only principals allowed to chat (console admins and owners).
	if !p.Has(chatScope) {
		return nil, apperr.New(apperr.Forbidden, "this needs the chat scope")
	}
	id, err := uuid.Parse(agentID)
	if err != nil {
		return nil, apperr.New(apperr.NotFound, "agent %q not found", agentID)
	}
	out := &Admitted{Principal: p}
	if out.Agent, err = a.agent(ctx, p.OrgID, id); err != nil {
		return nil, err
	}
	return out, nil
}

// agent reads org's agent id through the cache.
func (a *Admitter) agent(ctx context.Context, org, id uuid.UUID) (dbq.Agent, error) {
	return a.Agents.Get(ctx, org, id)
}
