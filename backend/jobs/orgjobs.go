package jobs

import (
	"context"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/parleyhq/parley/backend/account"
)

var _ account.OrgJobs = (*Client)(nil)

// orgJobsBatch is how many jobs one statement of DeleteOrgJobs deletes
// (River's bound is 10,000).
const orgJobsBatch = 1000

// DeleteOrgJobs implements account.OrgJobs: it deletes, in tx, every job
// whose arguments name org (every kind's org_id: ingestion, deliveries,
// the forgetting of cited text, and any kind to come that names it so),
// but a running one, which River never deletes and which ends on its own
// finding its rows gone. A job another transaction holds (being fetched)
// is skipped too, and starts to find the same.
func (c *Client) DeleteOrgJobs(ctx context.Context, tx pgx.Tx, org uuid.UUID) (int64, error) {
	params := river.NewJobDeleteManyParams().First(orgJobsBatch).
		Where("args @> jsonb_build_object('org_id', @org::text)", river.NamedArgs{"org": org.String()})
	var n int64
	for {
		res, err := c.river.JobDeleteManyTx(ctx, tx, params)
		if err != nil {
			return n, err
		}
		n += int64(len(res.Jobs))
		if len(res.Jobs) < orgJobsBatch {
			return n, nil
		}
	}
}
