package compat

import (
	"net/http"

	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/parleyhq/parley/backend/apperr"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/gen/parley/v1/parleyv1connect"
	"github.com/parleyhq/parley/compat/wire"
)

// WithWebhooks adds the webhook paths.
func (h *Handler) WithWebhooks(s parleyv1connect.WebhookServiceHandler) *Handler {
	h.webhooks = s
	return h
}

// webhookRoutes are the webhook paths (under /api and without it).
func (h *Handler) webhookRoutes() []Route {
	return []Route{
		{http.MethodGet, "/webhooks", h.rpc(parleyv1connect.WebhookServiceListWebhooksProcedure, h.listWebhooks)},
		{http.MethodPost, "/webhooks", h.rpc(parleyv1connect.WebhookServiceCreateWebhookProcedure, h.createWebhook)},
		{http.MethodGet, "/webhooks/{id}", h.rpc(parleyv1connect.WebhookServiceGetWebhookProcedure, h.getWebhook)},
		{http.MethodPut, "/webhooks/{id}", h.rpc(parleyv1connect.WebhookServiceUpdateWebhookProcedure, h.updateWebhook)},
		{http.MethodDelete, "/webhooks/{id}", h.rpc(parleyv1connect.WebhookServiceDeleteWebhookProcedure, h.deleteWebhook)},
		{http.MethodPost, "/webhooks/{id}/rotate-secret", h.rpc(parleyv1connect.WebhookServiceRotateWebhookSecretProcedure, h.rotateWebhookSecret)},
		{http.MethodPost, "/webhooks/{id}/test", h.rpc(parleyv1connect.WebhookServiceTestWebhookProcedure, h.testWebhook)},
		{http.MethodGet, "/webhooks/{id}/deliveries", h.rpc(parleyv1connect.WebhookServiceListWebhookDeliveriesProcedure, h.listWebhookDeliveries)},
		{http.MethodPost, "/webhooks/{id}/deliveries/{deliveryId}/replay", h.rpc(parleyv1connect.WebhookServiceReplayWebhookDeliveryProcedure, h.replayWebhookDelivery)},
	}
}

// webhookBody is an endpoint as REST clients write it; absent keys are nil.
type webhookBody struct {
	URL         *string   `json:"url"`
	Events      *[]string `json:"events"`
	Description *string   `json:"description"`
	Enabled     *bool     `json:"enabled"`
}

func readWebhook(w http.ResponseWriter, r *http.Request) (*webhookBody, error) {
	body, err := wire.ReadBody(w, r)
	if err != nil {
		return nil, err
	}
	var b webhookBody
	if err := wire.DecodeStrict(body, &b); err != nil {
		return nil, err
	}
	return &b, nil
}

func webhookJSON(x *parleyv1.Webhook) map[string]any {
	return map[string]any{
		"id": x.GetId(), "url": x.GetUrl(), "description": x.GetDescription(), "events": x.GetEvents(),
		"enabled": x.GetEnabled(), "failing": x.GetFailing(), "failingSince": ts(x.GetFailingSince()),
		"lastError": x.GetLastError(), "createdAt": ts(x.GetCreateTime()), "updatedAt": ts(x.GetUpdateTime()),
	}
}

func deliveryJSON(d *parleyv1.WebhookDelivery) map[string]any {
	attempts := []map[string]any{}
	for _, a := range d.GetAttempts() {
		attempts = append(attempts, map[string]any{
			"attempt": a.GetAttempt(), "time": ts(a.GetTime()), "statusCode": a.GetStatusCode(),
			"durationMs": a.GetDurationMs(), "error": a.GetError(),
		})
	}
	return map[string]any{
		"id": d.GetId(), "webhookId": d.GetWebhookId(), "eventId": d.GetEventId(), "eventType": d.GetEventType(),
		"status": d.GetStatus(), "attempts": attempts, "createdAt": ts(d.GetCreateTime()), "updatedAt": ts(d.GetUpdateTime()),
	}
}

// createWebhook is POST /api/webhooks: {url, events, description} → 201
// {id, secret, ...}; the secret is shown this once.
func (h *Handler) createWebhook(w http.ResponseWriter, r *http.Request) error {
	b, err := readWebhook(w, r)
	if err != nil {
		return err
	}
	if b.Enabled != nil {
		return apperr.InvalidField("enabled", "a new webhook is enabled; change it with PUT")
	}
	req := &parleyv1.CreateWebhookRequest{Url: deref(b.URL), Description: deref(b.Description)}
	if b.Events != nil {
		req.Events = *b.Events
	}
	if err := h.validate(req); err != nil {
		return err
	}
	resp, err := h.webhooks.CreateWebhook(r.Context(), req)
	if err != nil {
		return err
	}
	out := webhookJSON(resp.GetWebhook())
	out["secret"] = resp.GetSecret()
	w.Header().Set("Location", "/api/webhooks/"+resp.GetWebhook().GetId())
	writeJSON(w, http.StatusCreated, out)
	return nil
}

// listWebhooks is GET /api/webhooks.
func (h *Handler) listWebhooks(w http.ResponseWriter, r *http.Request) error {
	limit, cursor, err := pageQuery(r)
	if err != nil {
		return err
	}
	return respond(h, w, r, &parleyv1.ListWebhooksRequest{Limit: limit, Cursor: cursor}, h.webhooks.ListWebhooks, http.StatusOK,
		func(resp *parleyv1.ListWebhooksResponse) any {
			items := []map[string]any{}
			for _, x := range resp.GetWebhooks() {
				items = append(items, webhookJSON(x))
			}
			return map[string]any{"webhooks": items, "nextCursor": nextCursor(resp.GetNextCursor())}
		})
}

// getWebhook is GET /api/webhooks/{id}.
func (h *Handler) getWebhook(w http.ResponseWriter, r *http.Request) error {
	return respond(h, w, r, &parleyv1.GetWebhookRequest{Id: r.PathValue("id")}, h.webhooks.GetWebhook, http.StatusOK,
		func(resp *parleyv1.GetWebhookResponse) any { return webhookJSON(resp.GetWebhook()) })
}

// updateWebhook is PUT /api/webhooks/{id}: the keys given are changed.
func (h *Handler) updateWebhook(w http.ResponseWriter, r *http.Request) error {
	b, err := readWebhook(w, r)
	if err != nil {
		return err
	}
	req := &parleyv1.UpdateWebhookRequest{
		Id: r.PathValue("id"), UpdateMask: &fieldmaskpb.FieldMask{}, Url: b.URL, Description: b.Description, Enabled: b.Enabled,
	}
	if b.Events != nil {
		req.Events = *b.Events
		req.UpdateMask.Paths = append(req.UpdateMask.Paths, "events")
	}
	for path, set := range map[string]bool{"url": b.URL != nil, "description": b.Description != nil, "enabled": b.Enabled != nil} {
		if set {
			req.UpdateMask.Paths = append(req.UpdateMask.Paths, path)
		}
	}
	if len(req.UpdateMask.Paths) == 0 {
		return apperr.InvalidField("body", "nothing to change: send url, events, description or enabled")
	}
	return respond(h, w, r, req, h.webhooks.UpdateWebhook, http.StatusOK,
		func(resp *parleyv1.UpdateWebhookResponse) any { return webhookJSON(resp.GetWebhook()) })
}

// deleteWebhook is DELETE /api/webhooks/{id}.
func (h *Handler) deleteWebhook(w http.ResponseWriter, r *http.Request) error {
	req := &parleyv1.DeleteWebhookRequest{Id: r.PathValue("id")}
	return respond(h, w, r, req, h.webhooks.DeleteWebhook, http.StatusOK,
		func(*parleyv1.DeleteWebhookResponse) any { return map[string]any{"id": req.GetId(), "deleted": true} })
}

// rotateWebhookSecret is POST /api/webhooks/{id}/rotate-secret → {id, secret}.
func (h *Handler) rotateWebhookSecret(w http.ResponseWriter, r *http.Request) error {
	req := &parleyv1.RotateWebhookSecretRequest{Id: r.PathValue("id")}
	return respond(h, w, r, req, h.webhooks.RotateWebhookSecret, http.StatusOK,
		func(resp *parleyv1.RotateWebhookSecretResponse) any {
			return map[string]any{"id": req.GetId(), "secret": resp.GetSecret()}
		})
}

// testWebhook is POST /api/webhooks/{id}/test → 202 with the delivery.
func (h *Handler) testWebhook(w http.ResponseWriter, r *http.Request) error {
	return respond(h, w, r, &parleyv1.TestWebhookRequest{Id: r.PathValue("id")}, h.webhooks.TestWebhook, http.StatusAccepted,
		func(resp *parleyv1.TestWebhookResponse) any { return deliveryJSON(resp.GetDelivery()) })
}

// listWebhookDeliveries is GET /api/webhooks/{id}/deliveries.
func (h *Handler) listWebhookDeliveries(w http.ResponseWriter, r *http.Request) error {
	limit, cursor, err := pageQuery(r)
	if err != nil {
		return err
	}
	req := &parleyv1.ListWebhookDeliveriesRequest{WebhookId: r.PathValue("id"), Limit: limit, Cursor: cursor}
	return respond(h, w, r, req, h.webhooks.ListWebhookDeliveries, http.StatusOK,
		func(resp *parleyv1.ListWebhookDeliveriesResponse) any {
			items := []map[string]any{}
			for _, d := range resp.GetDeliveries() {
				items = append(items, deliveryJSON(d))
			}
			return map[string]any{"deliveries": items, "nextCursor": nextCursor(resp.GetNextCursor())}
		})
}

// replayWebhookDelivery is POST /api/webhooks/{id}/deliveries/{deliveryId}/replay
// → 202 with the new delivery.
func (h *Handler) replayWebhookDelivery(w http.ResponseWriter, r *http.Request) error {
	req := &parleyv1.ReplayWebhookDeliveryRequest{WebhookId: r.PathValue("id"), DeliveryId: r.PathValue("deliveryId")}
	return respond(h, w, r, req, h.webhooks.ReplayWebhookDelivery, http.StatusAccepted,
		func(resp *parleyv1.ReplayWebhookDeliveryResponse) any { return deliveryJSON(resp.GetDelivery()) })
}
