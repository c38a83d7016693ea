// Package agent is AgentService: the agents of an organization. Every method
// acts within the caller's organization only; an agent of another
// organization is PermissionDenied (SPEC §5.6) and nothing of it is read
// beyond the fact that its id exists.
package agent

import (
	"context"
	"errors"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/parleyhq/parley/backend/apperr"
	"github.com/parleyhq/parley/backend/auth"
	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/backend/db/dbq"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/gen/parley/v1/parleyv1connect"
	"github.com/parleyhq/parley/backend/handoff"
	"github.com/parleyhq/parley/backend/origin"
	"github.com/parleyhq/parley/backend/tool"
)

// Defaults of a new agent (SPEC §2.1).
const (
	DefaultModel       = "gpt-4o-mini"
	DefaultTemperature = 0.7
	DefaultVisibility  = "private"
	// DefaultPageSize and MaxPageSize bound ListAgents.
	DefaultPageSize = 20
	MaxPageSize     = 100
)

type handler struct {
	store *db.Store
	tools *tool.Deps
	cache *Cache
}

var _ parleyv1connect.AgentServiceHandler = (*handler)(nil)

// NewHandler returns the AgentService implementation. It expects requests
// already validated (protovalidate) and a principal in the context. tools
// is what the deployment gives agents' tools: an agent's detail warns about
// the tools it lists that its model will not be offered. cache, when not
// nil, is the chat turns' cache of agents: what changes here is dropped
// from it.
func NewHandler(store *db.Store, tools *tool.Deps, cache *Cache) parleyv1connect.AgentServiceHandler {
	if tools == nil {
		tools = &tool.Deps{}
	}
	return &handler{store: store, tools: tools, cache: cache}
}

func (h *handler) CreateAgent(ctx context.Context, req *parleyv1.CreateAgentRequest) (*parleyv1.CreateAgentResponse, error) {
	p, err := auth.FromContext(ctx)
	if err != nil {
		return nil, err
	}
	id, err := uuid.NewV7()
	if err != nil {
		return nil, err
	}
	params := dbq.CreateAgentParams{
		OrgID: p.OrgID, ID: id, Name: req.GetName(), Description: req.GetDescription(),
		Instructions: req.GetInstructions(), Model: DefaultModel, Temperature: DefaultTemperature,
		Tools: req.GetTools(), Visibility: DefaultVisibility,
	}
	if req.Model != nil {
		params.Model = req.GetModel()
	}
	if req.Temperature != nil {
		params.Temperature = req.GetTemperature()
	}
	if req.Visibility != nil {
		params.Visibility = req.GetVisibility()
	}
	params.HandoffMessage = req.GetHandoffMessage()
	if params.AllowedOrigins, err = origin.CheckList(req.GetAllowedOrigins()); err != nil {
		return nil, err
	}
	if params.Tools == nil {
		params.Tools = []string{}
	}
	if err := checkToolSettings(ctx, h.tools.Guard, req.GetToolSettings()); err != nil {
		return nil, err
	}
	if params.ToolSettings, err = toolSettings(req.GetToolSettings(), tool.Settings{}, owner{h.tools.Sealer, p.OrgID, id}); err != nil {
		return nil, err
	}
	var out *parleyv1.Agent
	err = h.store.Tenant(ctx, p.OrgID, func(q *dbq.Queries) error {
		a, err := q.CreateAgent(ctx, params)
		if err != nil {
			return err
		}
		if err := setDatastores(ctx, q, p.OrgID, id, req.GetDatastores()); err != nil {
			return err
		}
		out, err = h.detail(ctx, q, a)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &parleyv1.CreateAgentResponse{Agent: out}, nil
}

func (h *handler) GetAgent(ctx context.Context, req *parleyv1.GetAgentRequest) (*parleyv1.GetAgentResponse, error) {
	p, err := auth.FromContext(ctx)
	if err != nil {
		return nil, err
	}
	var out *parleyv1.Agent
	err = h.withAgent(ctx, p, req.GetId(), func(q *dbq.Queries, id uuid.UUID) error {
		a, err := q.GetAgent(ctx, dbq.GetAgentParams{OrgID: p.OrgID, ID: id})
		if err != nil {
			return err
		}
		out, err = h.detail(ctx, q, a)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &parleyv1.GetAgentResponse{Agent: out}, nil
}

func (h *handler) ListAgents(ctx context.Context, req *parleyv1.ListAgentsRequest) (*parleyv1.ListAgentsResponse, error) {
	p, err := auth.FromContext(ctx)
	if err != nil {
		return nil, err
	}
	page, limit := req.GetPage(), req.GetLimit()
	if page == 0 {
		page = 1
	}
	if limit == 0 {
		limit = DefaultPageSize
	}
	resp := &parleyv1.ListAgentsResponse{Page: page, Limit: limit, Agents: []*parleyv1.Agent{}}
	err = h.store.Tenant(ctx, p.OrgID, func(q *dbq.Queries) error {
		total, err := q.CountAgents(ctx, p.OrgID)
		if err != nil {
			return err
		}
		resp.Total = total
		rows, err := q.ListAgents(ctx, dbq.ListAgentsParams{
			OrgID: p.OrgID, MaxRows: limit, SkipRows: (page - 1) * limit,
		})
		if err != nil {
			return err
		}
		ids := make([]uuid.UUID, len(rows))
		byID := make(map[uuid.UUID]*parleyv1.Agent, len(rows))
		for i, a := range rows {
			ids[i] = a.ID
			out := toProto(a, nil)
			byID[a.ID] = out
			resp.Agents = append(resp.Agents, out)
		}
		if len(ids) == 0 {
			return nil
		}
		ds, err := q.AgentsDatastores(ctx, dbq.AgentsDatastoresParams{OrgID: p.OrgID, AgentIds: ids})
		if err != nil {
			return err
		}
		for _, d := range ds {
			byID[d.AgentID].Datastores = append(byID[d.AgentID].Datastores, d.DatastoreID.String())
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
}

func (h *handler) UpdateAgent(ctx context.Context, req *parleyv1.UpdateAgentRequest) (*parleyv1.UpdateAgentResponse, error) {
	p, err := auth.FromContext(ctx)
	if err != nil {
		return nil, err
	}
	params := dbq.UpdateAgentParams{OrgID: p.OrgID}
	for _, path := range req.GetUpdateMask().GetPaths() {
		switch path {
		case "name":
			params.Name = ptr(req.GetName())
		case "description":
			params.Description = ptr(req.GetDescription())
		case "instructions":
			params.Instructions = ptr(req.GetInstructions())
		case "model":
			params.Model = ptr(req.GetModel())
		case "temperature":
			params.Temperature = ptr(req.GetTemperature())
		case "tools":
			params.Tools = append([]string{}, req.GetTools()...)
		case "visibility":
			params.Visibility = ptr(req.GetVisibility())
		case "handoff_message":
			params.HandoffMessage = ptr(req.GetHandoffMessage())
		case "allowed_origins":
			if params.AllowedOrigins, err = origin.CheckList(req.GetAllowedOrigins()); err != nil {
				return nil, err
			}
		case "datastores", "tool_settings":
		default:
			return nil, apperr.InvalidField("update_mask", "unknown path %q", path)
		}
	}
	// A path named in the mask must have its value in the request: a mask of
	// "name" with no name would otherwise blank the name.
	if err := requireMasked(req); err != nil {
		return nil, err
	}
	setSettings := slices.Contains(req.GetUpdateMask().GetPaths(), "tool_settings")
	if setSettings {
		if err := checkToolSettings(ctx, h.tools.Guard, req.GetToolSettings()); err != nil {
			return nil, err
		}
	}
	var out *parleyv1.Agent
	err = h.withAgent(ctx, p, req.GetId(), func(q *dbq.Queries, id uuid.UUID) error {
		params.ID = id
		o := owner{h.tools.Sealer, p.OrgID, id}
		if setSettings {
			// Header values left empty keep the stored ones, read under
			// the row's lock: concurrent updates take turns.
			cur, err := q.LockAgent(ctx, dbq.LockAgentParams{OrgID: p.OrgID, ID: id})
			if err != nil {
				return err
			}
			if params.ToolSettings, err = toolSettings(req.GetToolSettings(), tool.ParseSettings(cur.ToolSettings), o); err != nil {
				return err
			}
		}
		a, err := q.UpdateAgent(ctx, params)
		if err != nil {
			return err
		}
		// SECURITY: header values stored in plain text before values were
		// sealed are sealed by the agent's next update, whatever it changes.
		if sealed, err := sealLegacy(tool.ParseSettings(a.ToolSettings), o); err != nil {
			return err
		} else if sealed != nil {
			if a, err = q.UpdateAgent(ctx, dbq.UpdateAgentParams{OrgID: p.OrgID, ID: id, ToolSettings: sealed}); err != nil {
				return err
			}
		}
		if slices.Contains(req.GetUpdateMask().GetPaths(), "datastores") {
			if err := setDatastores(ctx, q, p.OrgID, id, req.GetDatastores()); err != nil {
				return err
			}
		}
		out, err = h.detail(ctx, q, a)
		return err
	})
	if err != nil {
		return nil, err
	}
	h.forget(p.OrgID, req.GetId())
	return &parleyv1.UpdateAgentResponse{Agent: out}, nil
}

func requireMasked(req *parleyv1.UpdateAgentRequest) error {
	for _, path := range req.GetUpdateMask().GetPaths() {
		var set bool
		switch path {
		case "name":
			set = req.Name != nil
		case "description":
			set = req.Description != nil
		case "instructions":
			set = req.Instructions != nil
		case "model":
			set = req.Model != nil
		case "temperature":
			set = req.Temperature != nil
		case "visibility":
			set = req.Visibility != nil
		case "handoff_message":
			set = req.HandoffMessage != nil
		default: // tools, datastores, tool_settings, allowed_origins: empty is a value
			set = true
		}
		if !set {
			return apperr.InvalidField(path, "named in update_mask but not given")
		}
	}
	return nil
}

func (h *handler) DeleteAgent(ctx context.Context, req *parleyv1.DeleteAgentRequest) (*parleyv1.DeleteAgentResponse, error) {
	// Its conversations, messages and events go with it.
	ctx, cancel := context.WithTimeout(ctx, db.DeleteTimeout)
	defer cancel()
	p, err := auth.FromContext(ctx)
	if err != nil {
		return nil, err
	}
	err = h.withAgent(ctx, p, req.GetId(), func(q *dbq.Queries, id uuid.UUID) error {
		n, err := q.DeleteAgent(ctx, dbq.DeleteAgentParams{OrgID: p.OrgID, ID: id})
		if err == nil && n == 0 {
			return pgx.ErrNoRows
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	h.forget(p.OrgID, req.GetId())
	return &parleyv1.DeleteAgentResponse{}, nil
}

// forget drops a changed agent from the chat turns' cache.
func (h *handler) forget(org uuid.UUID, rawID string) {
	if id, err := uuid.Parse(rawID); err == nil {
		h.cache.Forget(org, id)
	}
}

// withAgent runs fn in the caller's tenant transaction for the agent id. When
// fn finds no row, the id is NotFound, or PermissionDenied if it is another
// organization's agent.
func (h *handler) withAgent(ctx context.Context, p *auth.Principal, rawID string, fn func(q *dbq.Queries, id uuid.UUID) error) error {
	return h.store.TenantRow(ctx, p.OrgID, "agent", "agent", rawID, func(_ pgx.Tx, q *dbq.Queries, id uuid.UUID) error {
		return fn(q, id)
	})
}

// detail is the agent's detail: the agent with its datastores, stats
// computed from its conversations and messages, and warnings about the
// tools it lists that its model will not be offered.
func (h *handler) detail(ctx context.Context, q *dbq.Queries, a dbq.Agent) (*parleyv1.Agent, error) {
	st, err := q.AgentStats(ctx, dbq.AgentStatsParams{OrgID: a.OrgID, AgentID: a.ID})
	if err != nil {
		return nil, err
	}
	ds, err := q.AgentDatastores(ctx, dbq.AgentDatastoresParams{OrgID: a.OrgID, AgentID: a.ID})
	if err != nil {
		return nil, err
	}
	out := toProto(a, &parleyv1.AgentStats{
		TotalConversations: st.TotalConversations, TotalMessages: st.TotalMessages, AverageRating: st.AverageRating,
	})
	for _, id := range ds {
		out.Datastores = append(out.Datastores, id.String())
	}
	out.Warnings = tool.Warnings(h.tools, &tool.Profile{Tools: a.Tools, Settings: tool.ParseSettings(a.ToolSettings), HasDatastores: len(ds) > 0})
	return out, nil
}

// setDatastores replaces an agent's datastores. Each must be one of the
// organization's: another organization's is Forbidden, an unknown one
// NotFound, and nothing is changed. The schema's unique rule compares the
// ids as strings, and uuid.Parse also takes upper case, braces and the
// urn:uuid: form, so one datastore spelt twice is attached once.
//
// Every datastore is taken (FOR KEY SHARE) before the agent's links are
// cleared: DeleteDatastore takes the datastore before the links it cascades
// to, and a link cleared here first, then checked against its datastore,
// deadlocked with it. A datastore being deleted is waited for, then missing.
func setDatastores(ctx context.Context, q *dbq.Queries, org, agent uuid.UUID, raw []string) error {
	ids := make([]uuid.UUID, 0, len(raw))
	seen := make(map[uuid.UUID]bool, len(raw))
	for _, r := range raw {
		id, err := uuid.Parse(r)
		if err != nil {
			return apperr.New(apperr.NotFound, "datastore %q not found", r)
		}
		if seen[id] {
			continue
		}
		seen[id] = true
		if _, err := q.KeyShareDatastore(ctx, dbq.KeyShareDatastoreParams{OrgID: org, ID: id}); errors.Is(err, pgx.ErrNoRows) {
			// SECURITY: only the organization's own datastores can be attached.
			return db.Missing(ctx, q, "datastore", "datastore", id)
		} else if err != nil {
			return err
		}
		ids = append(ids, id)
	}
	if err := q.ClearAgentDatastores(ctx, dbq.ClearAgentDatastoresParams{OrgID: org, AgentID: agent}); err != nil {
		return err
	}
	for _, id := range ids {
		if err := q.AddAgentDatastore(ctx, dbq.AddAgentDatastoreParams{OrgID: org, AgentID: agent, DatastoreID: id}); err != nil {
			return err
		}
	}
	return nil
}

func toProto(a dbq.Agent, stats *parleyv1.AgentStats) *parleyv1.Agent {
	return &parleyv1.Agent{
		Id: a.ID.String(), Name: a.Name, Description: a.Description, Instructions: a.Instructions,
		Model: a.Model, Temperature: a.Temperature, Tools: nonNil(a.Tools), Datastores: []string{},
		Visibility: a.Visibility, Status: a.Status, HandoffMessage: handoff.Message(a.HandoffMessage),
		CreateTime: timestamppb.New(a.CreatedAt), UpdateTime: timestamppb.New(a.UpdatedAt),
		Stats: stats, ToolSettings: toolSettingsProto(tool.ParseSettings(a.ToolSettings)),
		AllowedOrigins: nonNil(a.AllowedOrigins),
	}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func ptr[T any](v T) *T { return &v }
