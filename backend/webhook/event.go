package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/parleyhq/parley/backend/cache"
	"github.com/parleyhq/parley/backend/db/dbq"
)

// The event types an endpoint may subscribe to (the schema's list in
// webhook.proto says the same).
const (
	ConversationCreated        = "conversation.created"
	ConversationHumanRequested = "conversation.human_requested"
	ConversationResolved       = "conversation.resolved"
	MessageCreated             = "message.created"
	LeadCreated                = "lead.created"
	FormSubmitted              = "form.submitted"
	DatasourceSynced           = "datasource.synced"
	DatasourceFailed           = "datasource.failed"
	// Test is what TestWebhook sends; no endpoint subscribes to it.
	Test = "webhook.test"
)

// Events lists the event types endpoints subscribe to.
var Events = []string{
	ConversationCreated, ConversationHumanRequested, ConversationResolved, MessageCreated,
	LeadCreated, FormSubmitted, DatasourceSynced, DatasourceFailed,
}

// Enqueuer enqueues the River job of one delivery in tx (backend/jobs).
type Enqueuer interface {
	EnqueueDelivery(ctx context.Context, tx pgx.Tx, org, delivery uuid.UUID) error
}

// Emitter turns events into deliveries. A nil Emitter emits nothing (a
// process without webhooks, tests of other packages).
//
// Chat emits message.created twice a turn, so what an event costs an
// organization without endpoints matters: the Emitter remembers, per
// organization and for CacheTTL, whether it has any enabled endpoint, and
// an organization without one pays no query at all. Service forgets an
// organization's answer when it creates, changes or deletes one of its
// endpoints, so this instance sees the change at once; an endpoint created
// through another instance may miss the events of its first CacheTTL
// (as a key revoked elsewhere is trusted for auth.CacheTTL). Only the
// answer "none" can be stale in a way that loses events: with endpoints,
// each event still asks which of them subscribe. Neither a stale "some"
// nor an endpoint deleted after that question can fail the event's
// transaction: a delivery is written only to an endpoint that still
// exists, locked until the transaction ends (deliver).
type Emitter struct {
	Jobs Enqueuer
	// Now is the clock of payload timestamps; time.Now when nil.
	Now func() time.Time

	// known: whether an organization has any enabled endpoint (made on
	// first use, so that the zero Emitter works).
	once  sync.Once
	known *cache.TTL[uuid.UUID, bool]
}

// CacheTTL is how long the Emitter trusts what it read of whether an
// organization has any enabled endpoint.
const CacheTTL = 5 * time.Second

// maxKnown bounds the organizations remembered (the least recently used
// leave first).
const maxKnown = 10000

func (e *Emitter) orgs() *cache.TTL[uuid.UUID, bool] {
	e.once.Do(func() { e.known = cache.New[uuid.UUID, bool](CacheTTL, maxKnown) })
	return e.known
}

// Forget drops what the Emitter knows of org's endpoints: Service calls it
// after a change to them commits.
func (e *Emitter) Forget(org uuid.UUID) {
	if e == nil {
		return
	}
	e.orgs().Forget(org)
}

// Silent reports that org is known, within CacheTTL, to have no enabled
// endpoint: Emit would write nothing for it. A caller may then store an
// event's resource in a transaction that has no room for Emit (chat sends
// an answer's insert and its commit in one round trip). False when not
// known: Emit asks.
func (e *Emitter) Silent(org uuid.UUID) bool {
	if e == nil {
		return true
	}
	has, known := e.orgs().Peek(org)
	return known && !has
}

// hasWebhooks reports whether org has any enabled endpoint, from the
// cache or by asking q (org's tenant transaction).
func (e *Emitter) hasWebhooks(ctx context.Context, q *dbq.Queries, org uuid.UUID) (bool, error) {
	return e.orgs().Get(org, func() (bool, error) { return q.OrgHasWebhooks(ctx, org) })
}

// Emit records event for every enabled endpoint of org subscribed to it:
// one delivery row and its job each, in tx, which must be org's tenant
// transaction (db.Store.TenantTx). data is the resource as the API returns
// it; it is built only when some endpoint subscribes, so an event nobody
// receives costs one indexed query, and none at all for an organization
// known (within CacheTTL) to have no enabled endpoint.
func (e *Emitter) Emit(ctx context.Context, tx pgx.Tx, org uuid.UUID, event string, data func() (proto.Message, error)) error {
	if e == nil {
		return nil
	}
	q := dbq.New(tx)
	if has, err := e.hasWebhooks(ctx, q, org); err != nil || !has {
		return err
	}
	// SECURITY: the organization's endpoints only, in its tenant transaction.
	hooks, err := q.SubscribedWebhooks(ctx, dbq.SubscribedWebhooksParams{OrgID: org, EventType: event})
	if err != nil || len(hooks) == 0 {
		return err
	}
	msg, err := data()
	if err != nil {
		return err
	}
	body, err := e.payload(event, msg)
	if err != nil {
		return err
	}
	eventID, err := newEventID()
	if err != nil {
		return err
	}
	for _, hook := range hooks {
		// An endpoint deleted since it was read gets nothing: the event's
		// transaction (a chat turn, a form's submission) goes on.
		_, err := e.deliver(ctx, tx, q, org, hook, eventID, event, body)
		if err != nil && !errors.Is(err, errNoEndpoint) {
			return err
		}
	}
	return nil
}

// errNoEndpoint is deliver's answer for an endpoint deleted since it was
// read; it is pgx.ErrNoRows too, which the service's handlers answer 404.
var errNoEndpoint = fmt.Errorf("%w: the webhook endpoint no longer exists", pgx.ErrNoRows)

// deliver writes one delivery of an event to one endpoint and enqueues it.
// It returns errNoEndpoint, and writes nothing, when the endpoint no longer
// exists: whatever read it earlier (an Emit's SubscribedWebhooks, a
// GetWebhook) took no lock, and a delete may have committed since.
// CreateWebhookDelivery locks the endpoint, so that one deleted later
// waits for tx and takes the delivery with it.
func (e *Emitter) deliver(ctx context.Context, tx pgx.Tx, q *dbq.Queries, org, hook uuid.UUID, eventID, event string, body []byte) (dbq.WebhookDelivery, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return dbq.WebhookDelivery{}, err
	}
	d, err := q.CreateWebhookDelivery(ctx, dbq.CreateWebhookDeliveryParams{
		OrgID: org, ID: id, WebhookID: hook, EventID: eventID, EventType: event, Body: body,
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return dbq.WebhookDelivery{}, errNoEndpoint
	}
	if err != nil {
		return dbq.WebhookDelivery{}, err
	}
	return d, e.Jobs.EnqueueDelivery(ctx, tx, org, id)
}

// payload is the body sent: {type, timestamp, data}, data in the API's
// JSON (protojson, every field present).
func (e *Emitter) payload(event string, msg proto.Message) ([]byte, error) {
	data, err := protojson.MarshalOptions{EmitUnpopulated: true}.Marshal(msg)
	if err != nil {
		return nil, err
	}
	now := time.Now
	if e.Now != nil {
		now = e.Now
	}
	return json.Marshal(struct {
		Type      string          `json:"type"`
		Timestamp string          `json:"timestamp"`
		Data      json.RawMessage `json:"data"`
	}{event, now().UTC().Format(timestampLayout), data})
}

// timestampLayout is a payload's timestamp: RFC 3339 in UTC, to the
// millisecond, always three digits (2026-05-04T10:00:00.120Z).
const timestampLayout = "2006-01-02T15:04:05.000Z07:00"

// newEventID is a webhook-id: msg_ and a time-ordered unique id.
func newEventID() (string, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return "", err
	}
	return "msg_" + id.String(), nil
}

// Of wraps an already-built message for Emit.
func Of(m proto.Message) func() (proto.Message, error) {
	return func() (proto.Message, error) { return m, nil }
}
