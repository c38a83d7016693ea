package webhook_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/auth"
	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/backend/db/dbq"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/testenv"
	"github.com/parleyhq/parley/backend/webhook"
)

// Deleting an endpoint takes its deliveries and their attempts with it: a
// busy organization's endpoint holds a retention's worth of them (two
// message.created a chat turn, 30 days), millions. The delete is bounded
// as deleting an agent or a datastore is (db.DeleteTimeout), not by a
// request's transaction bound, which it outlived: the endpoint could not
// be deleted at all (503), however often asked. The bound is shortened
// here below what the delete of the deliveries below takes.
func TestDeleteWebhookOfManyDeliveriesIsNotCutShort(t *testing.T) {
	t.Parallel()
	e := testenv.New(t, allowLoopback)
	ctx := context.Background()
	rcv := newSink(t)
	id := subscribe(t, e, e.A.Key, rcv, webhook.FormSubmitted)
	require.NoError(t, e.App.Store.TenantTx(ctx, e.A.ID, func(tx pgx.Tx, _ *dbq.Queries) error {
		_, err := tx.Exec(ctx, `INSERT INTO webhook_deliveries (org_id, id, webhook_id, event_id, event_type, body, status)
			SELECT $1, gen_random_uuid(), $2, 'msg_x', 'form.submitted', '\x7b7d'::bytea, 'succeeded'
			FROM generate_series(1, 30000)`, e.A.ID, id)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO webhook_attempts (org_id, delivery_id, attempt, status_code)
			SELECT org_id, id, 1, 200 FROM webhook_deliveries WHERE org_id = $1`, e.A.ID)
		return err
	}))

	svc := &webhook.Service{Store: &db.Store{Pool: e.App.Store.Pool, Timeout: 20 * time.Millisecond}}
	actx := auth.WithPrincipal(ctx, &auth.Principal{OrgID: e.A.ID, KeyID: uuid.New(), Scopes: []string{"admin"}})
	_, err := svc.DeleteWebhook(actx, &parleyv1.DeleteWebhookRequest{Id: id})
	require.NoError(t, err)

	var left int
	require.NoError(t, e.App.Store.TenantTx(ctx, e.A.ID, func(tx pgx.Tx, _ *dbq.Queries) error {
		return tx.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries WHERE org_id = $1`, e.A.ID).Scan(&left)
	}))
	require.Zero(t, left)
}
