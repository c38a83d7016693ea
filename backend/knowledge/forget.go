package knowledge

import (
	"cmp"
	"context"
	"errors"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/parleyhq/parley/backend/db/dbq"
)

// ForgetJob is what the job that takes deleted datasources' text out of
// the answers that cited them needs to know (Knowledge.ForgetCited).
type ForgetJob struct {
	OrgID         uuid.UUID
	DatasourceIDs []uuid.UUID
}

// forgetBatchRows is how many of an organization's messages one
// transaction of ForgetCited reads: each transaction stays short (tens of
// milliseconds), whatever the organization's history.
const forgetBatchRows = 2000

// ForgetCited takes the text (chunk, excerpt, heading) of the passages of
// the given datasources, deleted, out of org's answers that cited them,
// in the messages of ids greater than after (uuid.Nil: all of them), and
// out of the bodies of the message.created webhook deliveries that carried
// those answers (kept for retries and replays until retention removes
// them; their ids are UUIDv7s made with the message's). An answer keeps
// the passages it cited and the conversation's history returns them; a
// document deleted (it may have held what it should not) is expected to be
// gone from there too. The citation stays.
//
// It walks the organization's messages, then its deliveries, in batches of
// the primary key, a transaction each, and changes only what still holds
// such text: run again (a retry after a crash), it changes nothing. An
// organization since deleted has no messages left, and nothing happens.
// It returns how many answers and deliveries it changed.
func (k *Knowledge) ForgetCited(ctx context.Context, org uuid.UUID, datasources []uuid.UUID, after uuid.UUID) (int64, error) {
	if len(datasources) == 0 {
		return 0, nil
	}
	// As messages.sources and the deliveries' data.sources hold them
	// (protojson's datasourceId).
	ids := make([]string, len(datasources))
	for i, id := range datasources {
		ids[i] = id.String()
	}
	answers, err := k.forgetIn(ctx, org, after, func(q *dbq.Queries, after uuid.UUID, rows int32) (uuid.UUID, error) {
		return q.MessageBatchEnd(ctx, dbq.MessageBatchEndParams{OrgID: org, After: after, BatchRows: rows})
	}, func(q *dbq.Queries, after, upto uuid.UUID) (int64, error) {
		return q.ForgetCitedText(ctx, dbq.ForgetCitedTextParams{OrgID: org, DatasourceIds: ids, After: after, Upto: upto})
	})
	if err != nil {
		return answers, err
	}
	deliveries, err := k.forgetIn(ctx, org, after, func(q *dbq.Queries, after uuid.UUID, rows int32) (uuid.UUID, error) {
		return q.DeliveryBatchEnd(ctx, dbq.DeliveryBatchEndParams{OrgID: org, After: after, BatchRows: rows})
	}, func(q *dbq.Queries, after, upto uuid.UUID) (int64, error) {
		if err := q.LockWebhooksForForget(ctx, org); err != nil {
			return 0, err
		}
		// Locked, then changed in a statement of its own: the copies that
		// replays of them commit meanwhile are changed too.
		if err := q.LockDeliveredText(ctx, dbq.LockDeliveredTextParams{OrgID: org, DatasourceIds: ids, After: after, Upto: upto}); err != nil {
			return 0, err
		}
		return q.ForgetDeliveredText(ctx, dbq.ForgetDeliveredTextParams{OrgID: org, DatasourceIds: ids, After: after, Upto: upto})
	})
	return answers + deliveries, err
}

// forgetIn walks one table of org's rows of ids above after, a batch of
// rows a transaction: end gives the id of a batch's last row (no row when
// fewer are left: the last batch then ends at the greatest uuid), forget
// changes the rows of ids in (after, upto]. It returns how many changed.
func (k *Knowledge) forgetIn(ctx context.Context, org, after uuid.UUID,
	end func(q *dbq.Queries, after uuid.UUID, rows int32) (uuid.UUID, error),
	forget func(q *dbq.Queries, after, upto uuid.UUID) (int64, error),
) (int64, error) {
	batch := int32(cmp.Or(k.forgetBatch, forgetBatchRows))
	var changed int64
	for {
		upto, last, n := uuid.Max, false, int64(0)
		err := k.Store.Tenant(ctx, org, func(q *dbq.Queries) error {
			var err error
			upto, err = end(q, after, batch)
			if errors.Is(err, pgx.ErrNoRows) {
				upto, last, err = uuid.Max, true, nil
			}
			if err != nil {
				return err
			}
			n, err = forget(q, after, upto)
			return err
		})
		if err == nil {
			changed += n
		}
		if err != nil || last {
			return changed, err
		}
		after = upto
	}
}
