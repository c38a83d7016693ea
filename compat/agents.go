package compat

import (
	"net/http"
	"strconv"
	"time"

	"github.com/parleyhq/parley/backend/apperr"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/compat/wire"
)

// agentJSON is an agent as SPEC §2.1 shows it.
type agentJSON struct {
	ID             string                `json:"id"`
	Name           string                `json:"name"`
	Description    string                `json:"description"`
	Instructions   string                `json:"instructions"`
	Model          string                `json:"model"`
	Temperature    float64               `json:"temperature"`
	Tools          []string              `json:"tools"`
	Datastores     []string              `json:"datastores"`
	Visibility     string                `json:"visibility"`
	HandoffMessage string                `json:"handoffMessage"`
	Status         string                `json:"status"`
	CreatedAt      string                `json:"createdAt"`
	UpdatedAt      string                `json:"updatedAt"`
	ToolSettings   wire.ToolSettingsJSON `json:"toolSettings"`
	AllowedOrigins []string              `json:"allowedOrigins"`
	Stats          *statsJSON            `json:"stats,omitempty"`
	// Warnings come with the detail (as stats do): why a listed tool is not
	// offered to the model.
	Warnings *[]string `json:"warnings,omitempty"`
}

type statsJSON struct {
	TotalConversations int64   `json:"totalConversations"`
	TotalMessages      int64   `json:"totalMessages"`
	AverageRating      float64 `json:"averageRating"`
}

func toAgentJSON(a *parleyv1.Agent) agentJSON {
	out := agentJSON{
		ID: a.GetId(), Name: a.GetName(), Description: a.GetDescription(), Instructions: a.GetInstructions(),
		Model: a.GetModel(), Temperature: a.GetTemperature(), Tools: nonNil(a.GetTools()),
		Datastores: nonNil(a.GetDatastores()), Visibility: a.GetVisibility(), Status: a.GetStatus(), HandoffMessage: a.GetHandoffMessage(),
		CreatedAt:      a.GetCreateTime().AsTime().UTC().Format(time.RFC3339Nano),
		UpdatedAt:      a.GetUpdateTime().AsTime().UTC().Format(time.RFC3339Nano),
		ToolSettings:   wire.ToolSettingsOf(a.GetToolSettings()),
		AllowedOrigins: nonNil(a.GetAllowedOrigins()),
	}
	if s := a.GetStats(); s != nil {
		out.Stats = &statsJSON{s.GetTotalConversations(), s.GetTotalMessages(), s.GetAverageRating()}
		w := nonNil(a.GetWarnings())
		out.Warnings = &w
	}
	return out
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func (h *Handler) createAgent(w http.ResponseWriter, r *http.Request) error {
	body, err := wire.ReadBody(w, r)
	if err != nil {
		return err
	}
	req, err := wire.DecodeCreateAgent(body)
	if err != nil {
		return err
	}
	if err := h.validate(req); err != nil {
		return err
	}
	resp, err := h.agents.CreateAgent(r.Context(), req)
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/api/agents/"+resp.GetAgent().GetId())
	writeJSON(w, http.StatusCreated, toAgentJSON(resp.GetAgent()))
	return nil
}

func (h *Handler) getAgent(w http.ResponseWriter, r *http.Request) error {
	req := &parleyv1.GetAgentRequest{Id: r.PathValue("agentId")}
	if err := h.validate(req); err != nil {
		return err
	}
	resp, err := h.agents.GetAgent(r.Context(), req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toAgentJSON(resp.GetAgent()))
	return nil
}

func (h *Handler) listAgents(w http.ResponseWriter, r *http.Request) error {
	req := &parleyv1.ListAgentsRequest{}
	// Over REST, 0 is not "the default" as over Connect: the bounds are
	// said as REST takes them.
	for _, p := range []struct {
		name string
		dst  *int32
		max  int64
	}{{"page", &req.Page, 1_000_000}, {"limit", &req.Limit, 100}} {
		raw := r.URL.Query().Get(p.name)
		if raw == "" {
			continue
		}
		n, err := strconv.ParseInt(raw, 10, 32)
		if err != nil || n < 1 || n > p.max {
			return apperr.InvalidField(p.name, "must be a whole number from 1 to %d", p.max)
		}
		*p.dst = int32(n)
	}
	if err := h.validate(req); err != nil {
		return err
	}
	resp, err := h.agents.ListAgents(r.Context(), req)
	if err != nil {
		return err
	}
	out := struct {
		Agents []agentJSON `json:"agents"`
		Total  int64       `json:"total"`
		Page   int32       `json:"page"`
		Limit  int32       `json:"limit"`
	}{Agents: []agentJSON{}, Total: resp.GetTotal(), Page: resp.GetPage(), Limit: resp.GetLimit()}
	for _, a := range resp.GetAgents() {
		out.Agents = append(out.Agents, toAgentJSON(a))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (h *Handler) updateAgent(w http.ResponseWriter, r *http.Request) error {
	body, err := wire.ReadBody(w, r)
	if err != nil {
		return err
	}
	req, err := wire.DecodeUpdateAgent(r.PathValue("agentId"), body)
	if err != nil {
		return err
	}
	if err := h.validate(req); err != nil {
		return err
	}
	resp, err := h.agents.UpdateAgent(r.Context(), req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toAgentJSON(resp.GetAgent()))
	return nil
}

// deleteAgent answers 200 with {"id","deleted":true} (SPEC §4.7 leaves the
// status open; a body lets clients that always parse JSON succeed).
func (h *Handler) deleteAgent(w http.ResponseWriter, r *http.Request) error {
	req := &parleyv1.DeleteAgentRequest{Id: r.PathValue("agentId")}
	if err := h.validate(req); err != nil {
		return err
	}
	if _, err := h.agents.DeleteAgent(r.Context(), req); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": req.GetId(), "deleted": true})
	return nil
}
