package webhook

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/parleyhq/parley/backend/apperr"
	"github.com/parleyhq/parley/backend/auth"
	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/backend/db/dbq"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/gen/parley/v1/parleyv1connect"
	"github.com/parleyhq/parley/backend/netguard"
	"github.com/parleyhq/parley/backend/page"
	"github.com/parleyhq/parley/backend/seal"
)

// Page sizes of the listings.
const (
	DefaultPageSize = 50
	MaxPageSize     = 100
)

// Service is WebhookService: it acts for the principal in the context (an
// API key admitted by access with the admin scope, or a console member).
// Requests were validated by the schema (protovalidate).
type Service struct {
	Store *db.Store
	// Sealer seals signing keys; without one (no --secrets-key) endpoints
	// cannot be created.
	Sealer *seal.Sealer
	// Guard refuses, at create and update, a URL it would not dial.
	Guard *netguard.Client
	// Hooks enqueues the deliveries of TestWebhook and ReplayWebhookDelivery.
	Hooks *Emitter
}

var _ parleyv1connect.WebhookServiceHandler = (*Service)(nil)

// MaxWebhooks bounds an organization's endpoints: each event is delivered
// to every one that takes it (up to MaxAttempts times), so without a bound
// one chat turn of a public agent's visitor could fan out to any number of
// requests, all to one host if the owner chose.
const MaxWebhooks = 20

// CreateWebhook registers an endpoint and returns its secret.
func (s *Service) CreateWebhook(ctx context.Context, req *parleyv1.CreateWebhookRequest) (*parleyv1.CreateWebhookResponse, error) {
	p, err := auth.FromContext(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.checkURL(ctx, req.GetUrl()); err != nil {
		return nil, err
	}
	if s.Sealer == nil {
		return nil, errNoKey
	}
	id, err := uuid.NewV7()
	if err != nil {
		return nil, err
	}
	key, secret, err := newSecret()
	if err != nil {
		return nil, err
	}
	sealed, err := sealSecret(s.Sealer, p.OrgID, id, key)
	if err != nil {
		return nil, err
	}
	var out *parleyv1.Webhook
	// SECURITY: written in the principal's organization only.
	err = s.Store.Tenant(ctx, p.OrgID, func(q *dbq.Queries) error {
		// SECURITY: an event is delivered to every endpoint that takes it,
		// a public agent's visitors' turns included: the endpoints are
		// bounded, counted under the organization's lock so that two
		// creations take turns.
		if _, err := q.LockOrganization(ctx, p.OrgID); err != nil {
			return db.OrgRow(err)
		}
		n, err := q.CountWebhooks(ctx, p.OrgID)
		if err != nil {
			return err
		}
		if n >= MaxWebhooks {
			return apperr.New(apperr.FailedPrecondition, "an organization has at most %d webhook endpoints; delete one first", MaxWebhooks)
		}
		w, err := q.CreateWebhook(ctx, dbq.CreateWebhookParams{
			OrgID: p.OrgID, ID: id, Url: req.GetUrl(), Description: req.GetDescription(), Events: req.GetEvents(), Secret: sealed,
		})
		out = toProto(w)
		return err
	})
	if err != nil {
		return nil, err
	}
	s.Hooks.Forget(p.OrgID)
	return &parleyv1.CreateWebhookResponse{Webhook: out, Secret: secret}, nil
}

var errNoKey = apperr.New(apperr.FailedPrecondition,
	"webhooks need the server's secrets key (--secrets-key or PARLEY_SECRETS_KEY) to store signing secrets sealed")

// checkURL refuses a URL the guard would not dial: another scheme,
// credentials, a private, loopback or metadata address, or localhost,
// unless --fetch-allow opens it. A name is checked when each delivery
// connects (netguard.CheckDestination says why not here).
func (s *Service) checkURL(ctx context.Context, raw string) error {
	if err := s.Guard.CheckDestination(ctx, raw); err != nil {
		msg := strings.TrimPrefix(err.Error(), netguard.ErrBlocked.Error()+": ")
		return apperr.InvalidField("url", "%s", msg)
	}
	return nil
}

// GetWebhook returns one of the organization's endpoints.
func (s *Service) GetWebhook(ctx context.Context, req *parleyv1.GetWebhookRequest) (*parleyv1.GetWebhookResponse, error) {
	var out *parleyv1.Webhook
	err := s.withWebhook(ctx, req.GetId(), func(_ pgx.Tx, q *dbq.Queries, org, id uuid.UUID) error {
		w, err := q.GetWebhook(ctx, dbq.GetWebhookParams{OrgID: org, ID: id})
		out = toProto(w)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &parleyv1.GetWebhookResponse{Webhook: out}, nil
}

// ListWebhooks lists the organization's endpoints, newest first, by cursor.
func (s *Service) ListWebhooks(ctx context.Context, req *parleyv1.ListWebhooksRequest) (*parleyv1.ListWebhooksResponse, error) {
	p, err := auth.FromContext(ctx)
	if err != nil {
		return nil, err
	}
	limit := page.Size(req.GetLimit(), DefaultPageSize, MaxPageSize)
	params := dbq.ListWebhooksParams{OrgID: p.OrgID, MaxRows: limit + 1}
	if params.BeforeTime, params.BeforeID, err = page.After(req.GetCursor()); err != nil {
		return nil, err
	}
	out := &parleyv1.ListWebhooksResponse{Webhooks: []*parleyv1.Webhook{}}
	// SECURITY: the principal's organization, by tenant transaction and an
	// explicit org_id filter.
	err = s.Store.Tenant(ctx, p.OrgID, func(q *dbq.Queries) error {
		rows, err := q.ListWebhooks(ctx, params)
		if err != nil {
			return err
		}
		rows, out.NextCursor = page.Cut(rows, limit, func(r dbq.Webhook) (time.Time, string) { return r.CreatedAt, r.ID.String() })
		for _, r := range rows {
			out.Webhooks = append(out.Webhooks, toProto(r))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// UpdateWebhook changes what update_mask names.
func (s *Service) UpdateWebhook(ctx context.Context, req *parleyv1.UpdateWebhookRequest) (*parleyv1.UpdateWebhookResponse, error) {
	if len(req.GetUpdateMask().GetPaths()) == 0 {
		// As REST says of an empty body: an empty change is a mistake,
		// not a read (it only moved updated_at).
		return nil, apperr.InvalidField("update_mask", "names no field to update (writable: url, events, description, enabled)")
	}
	var params dbq.UpdateWebhookParams
	for _, path := range req.GetUpdateMask().GetPaths() {
		missing := false
		switch path {
		case "url":
			if missing = req.Url == nil; !missing {
				if err := s.checkURL(ctx, req.GetUrl()); err != nil {
					return nil, err
				}
				params.Url = req.Url
			}
		case "events":
			if len(req.GetEvents()) == 0 {
				return nil, apperr.InvalidField("events", "must name at least one event")
			}
			params.Events = req.GetEvents()
		case "description":
			missing, params.Description = req.Description == nil, req.Description
		case "enabled":
			missing, params.Enabled = req.Enabled == nil, req.Enabled
		default:
			return nil, apperr.InvalidField("update_mask", "unknown path %q", path)
		}
		if missing {
			return nil, apperr.InvalidField(path, "named in update_mask but not given")
		}
	}
	var out *parleyv1.Webhook
	var org uuid.UUID
	err := s.withWebhook(ctx, req.GetId(), func(_ pgx.Tx, q *dbq.Queries, o, id uuid.UUID) error {
		org, params.OrgID, params.ID = o, o, id
		w, err := q.UpdateWebhook(ctx, params)
		out = toProto(w)
		return err
	})
	if err != nil {
		return nil, err
	}
	s.Hooks.Forget(org)
	return &parleyv1.UpdateWebhookResponse{Webhook: out}, nil
}

// DeleteWebhook removes an endpoint and its deliveries.
func (s *Service) DeleteWebhook(ctx context.Context, req *parleyv1.DeleteWebhookRequest) (*parleyv1.DeleteWebhookResponse, error) {
	// Its deliveries and their attempts go with it: a retention's worth
	// of a busy organization's events, millions of rows.
	ctx, cancel := context.WithTimeout(ctx, db.DeleteTimeout)
	defer cancel()
	var org uuid.UUID
	err := s.withWebhook(ctx, req.GetId(), func(_ pgx.Tx, q *dbq.Queries, o, id uuid.UUID) error {
		org = o
		n, err := q.DeleteWebhook(ctx, dbq.DeleteWebhookParams{OrgID: o, ID: id})
		if err == nil && n == 0 {
			return pgx.ErrNoRows
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	s.Hooks.Forget(org)
	return &parleyv1.DeleteWebhookResponse{}, nil
}

// RotateWebhookSecret gives an endpoint a new secret and returns it.
func (s *Service) RotateWebhookSecret(ctx context.Context, req *parleyv1.RotateWebhookSecretRequest) (*parleyv1.RotateWebhookSecretResponse, error) {
	if s.Sealer == nil {
		return nil, errNoKey
	}
	key, secret, err := newSecret()
	if err != nil {
		return nil, err
	}
	err = s.withWebhook(ctx, req.GetId(), func(_ pgx.Tx, q *dbq.Queries, org, id uuid.UUID) error {
		sealed, err := sealSecret(s.Sealer, org, id, key)
		if err != nil {
			return err
		}
		n, err := q.SetWebhookSecret(ctx, dbq.SetWebhookSecretParams{OrgID: org, ID: id, Secret: sealed})
		if err == nil && n == 0 {
			return pgx.ErrNoRows
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return &parleyv1.RotateWebhookSecretResponse{Secret: secret}, nil
}

// TestWebhook sends the endpoint a webhook.test event whose data is the
// endpoint itself.
func (s *Service) TestWebhook(ctx context.Context, req *parleyv1.TestWebhookRequest) (*parleyv1.TestWebhookResponse, error) {
	var out *parleyv1.WebhookDelivery
	err := s.withWebhook(ctx, req.GetId(), func(tx pgx.Tx, q *dbq.Queries, org, id uuid.UUID) error {
		w, err := q.GetWebhook(ctx, dbq.GetWebhookParams{OrgID: org, ID: id})
		if err != nil {
			return err
		}
		if !w.Enabled {
			return errPaused
		}
		body, err := s.Hooks.payload(Test, toProto(w))
		if err != nil {
			return err
		}
		eventID, err := newEventID()
		if err != nil {
			return err
		}
		d, err := s.Hooks.deliver(ctx, tx, q, org, id, eventID, Test, body)
		out = deliveryProto(d, nil)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &parleyv1.TestWebhookResponse{Delivery: out}, nil
}

// errPaused refuses to send to a paused endpoint (a test, a replay): the
// delivery would fail at once without a request.
var errPaused = apperr.New(apperr.FailedPrecondition, "the endpoint is paused (enabled: false): resume it first")

// ListWebhookDeliveries lists an endpoint's deliveries, newest first, with
// their attempts.
func (s *Service) ListWebhookDeliveries(ctx context.Context, req *parleyv1.ListWebhookDeliveriesRequest) (*parleyv1.ListWebhookDeliveriesResponse, error) {
	limit := page.Size(req.GetLimit(), DefaultPageSize, MaxPageSize)
	params := dbq.ListWebhookDeliveriesParams{MaxRows: limit + 1}
	var err error
	if params.BeforeTime, params.BeforeID, err = page.After(req.GetCursor()); err != nil {
		return nil, err
	}
	out := &parleyv1.ListWebhookDeliveriesResponse{Deliveries: []*parleyv1.WebhookDelivery{}}
	err = s.withWebhook(ctx, req.GetWebhookId(), func(_ pgx.Tx, q *dbq.Queries, org, id uuid.UUID) error {
		if _, err := q.GetWebhook(ctx, dbq.GetWebhookParams{OrgID: org, ID: id}); err != nil {
			return err
		}
		params.OrgID, params.WebhookID = org, id
		rows, err := q.ListWebhookDeliveries(ctx, params)
		if err != nil {
			return err
		}
		rows, out.NextCursor = page.Cut(rows, limit, func(r dbq.WebhookDelivery) (time.Time, string) { return r.CreatedAt, r.ID.String() })
		ids := make([]uuid.UUID, len(rows))
		for i, r := range rows {
			ids[i] = r.ID
		}
		attempts, err := q.ListWebhookAttempts(ctx, dbq.ListWebhookAttemptsParams{OrgID: org, DeliveryIds: ids})
		if err != nil {
			return err
		}
		by := map[uuid.UUID][]dbq.WebhookAttempt{}
		for _, a := range attempts {
			by[a.DeliveryID] = append(by[a.DeliveryID], a)
		}
		for _, r := range rows {
			out.Deliveries = append(out.Deliveries, deliveryProto(r, by[r.ID]))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ReplayWebhookDelivery sends a delivery's event again as a new delivery
// (same webhook-id and body, a new signature and timestamp).
func (s *Service) ReplayWebhookDelivery(ctx context.Context, req *parleyv1.ReplayWebhookDeliveryRequest) (*parleyv1.ReplayWebhookDeliveryResponse, error) {
	deliveryID, err := uuid.Parse(req.GetDeliveryId())
	if err != nil {
		return nil, deliveryNotFound(req.GetDeliveryId())
	}
	var out *parleyv1.WebhookDelivery
	err = s.withWebhook(ctx, req.GetWebhookId(), func(tx pgx.Tx, q *dbq.Queries, org, id uuid.UUID) error {
		// The endpoint, then the delivery, held until the copy commits (as
		// the endpoint's deletion takes them): the deletion of the form
		// submission the delivery carries waits for the copy and deletes
		// it too, or is waited for. The copy of a delivery read while it
		// was being deleted outlived it, and sent the values again.
		w, err := q.KeyShareWebhook(ctx, dbq.KeyShareWebhookParams{OrgID: org, ID: id})
		if err != nil {
			return err
		}
		if !w.Enabled {
			return errPaused
		}
		d, err := q.KeyShareWebhookDelivery(ctx, dbq.KeyShareWebhookDeliveryParams{OrgID: org, ID: deliveryID})
		if errors.Is(err, pgx.ErrNoRows) {
			return db.Missing(ctx, q, "webhook_delivery", "delivery", deliveryID)
		}
		if err != nil {
			return err
		}
		if d.WebhookID != id {
			return deliveryNotFound(req.GetDeliveryId())
		}
		again, err := s.Hooks.deliver(ctx, tx, q, org, id, d.EventID, d.EventType, d.Body)
		out = deliveryProto(again, nil)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &parleyv1.ReplayWebhookDeliveryResponse{Delivery: out}, nil
}

// withWebhook runs fn in the principal's tenant transaction for the
// webhook id. When fn finds no row, the id is NotFound, or Forbidden if it
// is another organization's webhook (db.Missing).
func (s *Service) withWebhook(ctx context.Context, rawID string, fn func(tx pgx.Tx, q *dbq.Queries, org, id uuid.UUID) error) error {
	p, err := auth.FromContext(ctx)
	if err != nil {
		return err
	}
	// SECURITY: the principal's organization, by tenant transaction; fn's
	// queries name it too.
	return s.Store.TenantRow(ctx, p.OrgID, "webhook", "webhook", rawID, func(tx pgx.Tx, q *dbq.Queries, id uuid.UUID) error {
		return fn(tx, q, p.OrgID, id)
	})
}

func deliveryNotFound(id string) error {
	return apperr.New(apperr.NotFound, "delivery %q not found", id)
}

// ToProto is an endpoint as the API shows it (never its secret).
func ToProto(w dbq.Webhook) *parleyv1.Webhook { return toProto(w) }

func toProto(w dbq.Webhook) *parleyv1.Webhook {
	out := &parleyv1.Webhook{
		Id: w.ID.String(), Url: w.Url, Description: w.Description, Events: w.Events, Enabled: w.Enabled,
		Failing: w.FailingSince != nil, LastError: w.LastError,
		CreateTime: timestamppb.New(w.CreatedAt), UpdateTime: timestamppb.New(w.UpdatedAt),
	}
	if out.Events == nil {
		out.Events = []string{}
	}
	if w.FailingSince != nil {
		out.FailingSince = timestamppb.New(*w.FailingSince)
	}
	return out
}

func deliveryProto(d dbq.WebhookDelivery, attempts []dbq.WebhookAttempt) *parleyv1.WebhookDelivery {
	out := &parleyv1.WebhookDelivery{
		Id: d.ID.String(), WebhookId: d.WebhookID.String(), EventId: d.EventID, EventType: d.EventType, Status: d.Status,
		Attempts: []*parleyv1.WebhookAttempt{}, CreateTime: timestamppb.New(d.CreatedAt), UpdateTime: timestamppb.New(d.UpdatedAt),
	}
	for _, a := range attempts {
		out.Attempts = append(out.Attempts, &parleyv1.WebhookAttempt{
			Attempt: a.Attempt, Time: timestamppb.New(a.AttemptedAt), StatusCode: a.StatusCode, DurationMs: a.DurationMs, Error: a.Error,
		})
	}
	return out
}
