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
// in the messages of ids greater than after (uuid.Nil: all of them). An
// answer keeps the passages it cited and the conversation's history
// returns them; a document deleted (it may have held what it should not)
// is expected to be gone from there too. The citation stays.
//
// It walks the organization's messages in batches of the primary key, a
// transaction each, and changes only what still holds such text: run
// again (a retry after a crash), it changes nothing. An organization since
// deleted has no messages left, and nothing happens. It returns how many
// answers it changed.
func (k *Knowledge) ForgetCited(ctx context.Context, org uuid.UUID, datasources []uuid.UUID, after uuid.UUID) (int64, error) {
	if len(datasources) == 0 {
		return 0, nil
	}
	// As messages.sources holds them (protojson's datasourceId).
	ids := make([]string, len(datasources))
	for i, id := range datasources {
		ids[i] = id.String()
	}
	batch := cmp.Or(k.forgetBatch, forgetBatchRows)
	var changed int64
	for {
		end, last, n := uuid.Max, false, int64(0)
		err := k.Store.Tenant(ctx, org, func(q *dbq.Queries) error {
			var err error
			end, err = q.MessageBatchEnd(ctx, dbq.MessageBatchEndParams{OrgID: org, After: after, BatchRows: int32(batch)})
			if errors.Is(err, pgx.ErrNoRows) {
				end, last, err = uuid.Max, true, nil
			}
			if err != nil {
				return err
			}
			n, err = q.ForgetCitedText(ctx, dbq.ForgetCitedTextParams{OrgID: org, DatasourceIds: ids, After: after, Upto: end})
			return err
		})
		if err == nil {
			changed += n
		}
		if err != nil || last {
			return changed, err
		}
		after = end
	}
}
