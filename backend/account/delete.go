package account

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/backend/db/dbq"
)

// OrgJobs deletes an organization's background jobs that are not running
// (jobs.Client): those whose arguments name it.
type OrgJobs interface {
	DeleteOrgJobs(ctx context.Context, tx pgx.Tx, org uuid.UUID) (int64, error)
}

// DefaultDeleteBatch is how many rows each of a deletion's transactions
// deletes at most (of chunks: how many its datasources hold, give or take
// one datasource; of datasources, synced or not, no more than that).
const DefaultDeleteBatch = 5000

// ActionOrgDeleted is the operator_audit action of a deletion (the
// operator package's actions are named alike).
const ActionOrgDeleted = "organization.deleted"

// Deleter deletes organizations (parley admin delete-org).
type Deleter struct {
	Store *db.Store
	Jobs  OrgJobs
	// Batch is DefaultDeleteBatch when 0.
	Batch int
	// Progress, when set, hears of each batch as it commits.
	Progress func(what string, n int64)
}

// Deleted counts what a deletion deleted, in the order it deleted them.
type Deleted []Count

// Count is how many rows of one kind were deleted.
type Count struct {
	What string
	N    int64
}

// DeleteOrg deletes the organization org, named confirm, and everything of
// it, without one huge transaction: a large organization's hundreds of
// thousands of messages or chunks deleted at once held their locks, and the
// write-ahead log, for minutes. In order, each step its own transactions:
//
//  1. its jobs that are not running, so that none starts meanwhile;
//  2. its API keys, sign-in links and members: no one gets in any more
//     (a key still cached by an instance, within auth's 5 s, reads an
//     organization being emptied, which the README allows for);
//  3. its bulk, in batches of Batch rows: messages, conversation events,
//     conversations, webhook attempts and deliveries, form submissions,
//     contacts, and datasources with their chunks;
//  4. in one transaction, what is left (agents, datastores, forms,
//     webhooks), the organization's row, whose cascade takes every other
//     row (usage_deleted, follows, whatever its public agents' visitors
//     wrote since), the jobs enqueued meanwhile, and the audit row.
//
// The organization's row goes last, so that a deletion interrupted (a
// signal, a lost connection) is finished by running it again. Messages go
// before their conversations: the conversations' delete trigger sums their
// answers into usage_deleted (migration 00024) while the organization
// exists, and finds none to sum; a few written meanwhile are summed into
// rows the organization's own delete takes.
//
// A job running meanwhile is left to end: each finds its rows gone and
// ends without error (ingestion, deliveries, the forgetting of cited text),
// and none can write a row once the organization's row is gone (every
// table's foreign keys lead to it).
func (d *Deleter) DeleteOrg(ctx context.Context, org uuid.UUID, confirm string) (Deleted, error) {
	err := d.Store.Tenant(ctx, org, func(q *dbq.Queries) error {
		o, err := q.GetOrganization(ctx, org)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("no organization %s", org)
		}
		if err != nil {
			return err
		}
		if o.Name != confirm {
			return fmt.Errorf("--confirm %q is not the name of organization %s (%q): nothing was deleted", confirm, org, o.Name)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out Deleted
	add := func(what string, n int64) {
		for i := range out {
			if out[i].What == what {
				out[i].N += n
				return
			}
		}
		out = append(out, Count{what, n})
	}
	if err := d.Store.TenantTx(ctx, org, func(tx pgx.Tx, _ *dbq.Queries) error {
		n, err := d.Jobs.DeleteOrgJobs(ctx, tx, org)
		add("jobs", n)
		return err
	}); err != nil {
		return out, err
	}
	if err := d.Store.Tenant(ctx, org, func(q *dbq.Queries) error {
		for _, s := range []struct {
			what string
			del  func(context.Context, uuid.UUID) (int64, error)
		}{
			{"api keys", q.DeleteOrgAPIKeys}, {"sign-in links", q.DeleteOrgMemberLinks}, {"members", q.DeleteOrgMembers},
		} {
			n, err := s.del(ctx, org)
			if err != nil {
				return err
			}
			add(s.what, n)
		}
		return nil
	}); err != nil {
		return out, err
	}
	if err := d.batches(ctx, org, add); err != nil {
		return out, err
	}
	err = d.Store.CommandLineTx(ctx, org, func(tx pgx.Tx, q *dbq.Queries) error {
		var rest []Count
		for _, s := range []struct {
			what string
			del  func(context.Context, uuid.UUID) (int64, error)
		}{
			{"agents", q.DeleteOrgAgents}, {"datastores", q.DeleteOrgDatastores}, {"forms", q.DeleteOrgForms},
			{"webhooks", q.DeleteOrgWebhooks}, {"organizations", q.DeleteOrganization},
		} {
			n, err := s.del(ctx, org)
			if err != nil {
				return err
			}
			rest = append(rest, Count{s.what, n})
		}
		if rest[len(rest)-1].N != 1 {
			return fmt.Errorf("organization %s was deleted meanwhile", org)
		}
		jobs, err := d.Jobs.DeleteOrgJobs(ctx, tx, org)
		if err != nil {
			return err
		}
		rest = append(rest, Count{"jobs", jobs})
		all := append(append(Deleted{}, out...), rest...)
		detail, err := json.Marshal(map[string]any{"name": confirm, "deleted": all.Map()})
		if err != nil {
			return err
		}
		// SECURITY: operator_audit's command_line_write policy lets only
		// this transaction (app.command_line) write in the nil operator's
		// name.
		if err := q.InsertOperatorAudit(ctx, dbq.InsertOperatorAuditParams{
			ID: uuid.Must(uuid.NewV7()), OperatorID: uuid.Nil, OperatorEmail: CommandLine,
			Action: ActionOrgDeleted, Target: org.String(), Detail: detail,
		}); err != nil {
			return err
		}
		for _, c := range rest {
			add(c.What, c.N)
		}
		return nil
	})
	return out, err
}

// batches deletes org's bulk (DeleteOrg's third step), each batch its own
// transaction, until none is left.
func (d *Deleter) batches(ctx context.Context, org uuid.UUID, add func(string, int64)) error {
	size := d.Batch
	if size <= 0 {
		size = DefaultDeleteBatch
	}
	steps := []struct {
		what string
		next func(q *dbq.Queries) (batch, error)
	}{
		{"messages", func(q *dbq.Queries) (batch, error) {
			r, err := q.DeleteOrgMessages(ctx, dbq.DeleteOrgMessagesParams{OrgID: org, BatchRows: int32(size)})
			return batch(r), err
		}},
		{"conversation events", func(q *dbq.Queries) (batch, error) {
			r, err := q.DeleteOrgConversationEvents(ctx, dbq.DeleteOrgConversationEventsParams{OrgID: org, BatchRows: int32(size)})
			return batch(r), err
		}},
		{"conversations", func(q *dbq.Queries) (batch, error) {
			r, err := q.DeleteOrgConversations(ctx, dbq.DeleteOrgConversationsParams{OrgID: org, BatchRows: int32(size)})
			return batch(r), err
		}},
		{"webhook attempts", func(q *dbq.Queries) (batch, error) {
			r, err := q.DeleteOrgWebhookAttempts(ctx, dbq.DeleteOrgWebhookAttemptsParams{OrgID: org, BatchRows: int32(size)})
			return batch(r), err
		}},
		{"webhook deliveries", func(q *dbq.Queries) (batch, error) {
			r, err := q.DeleteOrgWebhookDeliveries(ctx, dbq.DeleteOrgWebhookDeliveriesParams{OrgID: org, BatchRows: int32(size)})
			return batch(r), err
		}},
		{"form submissions", func(q *dbq.Queries) (batch, error) {
			r, err := q.DeleteOrgFormSubmissions(ctx, dbq.DeleteOrgFormSubmissionsParams{OrgID: org, BatchRows: int32(size)})
			return batch(r), err
		}},
		{"contacts", func(q *dbq.Queries) (batch, error) {
			r, err := q.DeleteOrgContacts(ctx, dbq.DeleteOrgContactsParams{OrgID: org, BatchRows: int32(size)})
			return batch(r), err
		}},
	}
	for _, s := range steps {
		for {
			var b batch
			err := d.Store.Tenant(ctx, org, func(q *dbq.Queries) error {
				var err error
				b, err = s.next(q)
				return err
			})
			if err != nil {
				return fmt.Errorf("deleting %s: %w", s.what, err)
			}
			add(s.what, b.Deleted)
			d.progress(s.what, b.Deleted)
			// Until a batch finds less than a batch, whatever it deleted:
			// a batch names its rows by their place (ctid), and a row
			// another transaction updated meanwhile (a delivery's status,
			// a conversation's last message) is left to the next. Rows
			// written after (a public agent's visitors, a published
			// form's) go with the organization's row: waiting for a batch
			// that finds none, a write between every two batches kept
			// the step going for as long as they wrote.
			if b.Found < int64(size) {
				break
			}
		}
	}
	for {
		var r dbq.DeleteOrgDatasourcesRow
		// A datasource's chunks go with it, in its transaction: bounded as
		// a datasource's deletion through the API is.
		dctx, cancel := context.WithTimeout(ctx, db.DeleteTimeout)
		err := d.Store.Tenant(dctx, org, func(q *dbq.Queries) error {
			ids, err := q.OrgDatasourceBatch(dctx, dbq.OrgDatasourceBatchParams{OrgID: org, BatchRows: int64(size)})
			if err != nil || len(ids) == 0 {
				return err
			}
			r, err = q.DeleteOrgDatasources(dctx, dbq.DeleteOrgDatasourcesParams{OrgID: org, Ids: ids})
			return err
		})
		cancel()
		if err != nil {
			return fmt.Errorf("deleting datasources: %w", err)
		}
		add("datasources", r.Datasources)
		add("chunks", r.Chunks)
		d.progress("datasources", r.Datasources)
		if r.Datasources == 0 {
			return nil
		}
	}
}

// batch is what one batch of DeleteOrg's third step found of its rows
// and deleted (the queries' DeleteOrg<Rows>Row, all alike).
type batch struct {
	Found, Deleted int64
}

func (d *Deleter) progress(what string, n int64) {
	if d.Progress != nil && n > 0 {
		d.Progress(what, n)
	}
}

// Map is the counts by name, summed (the audit row's detail).
func (c Deleted) Map() map[string]int64 {
	m := make(map[string]int64, len(c))
	for _, x := range c {
		m[x.What] += x.N
	}
	return m
}
