package webhook

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/netguard"
	"github.com/parleyhq/parley/backend/seal"
)

// Limits of one attempt.
const (
	// AttemptTimeout bounds one attempt: connecting, sending, the answer.
	AttemptTimeout = 10 * time.Second
	// responseBytes is how much of an answer is read (its start goes into
	// the attempt's error).
	responseBytes = 4 << 10
	// errorChars bounds an attempt's recorded error.
	errorChars = 300
)

// Schedule is the wait before each retry: the first within seconds, then
// longer, about a day in all (23 h 53 min). After the last retry fails,
// the delivery is failed and its endpoint marked failing.
var Schedule = []time.Duration{
	3 * time.Second, 30 * time.Second, 2 * time.Minute, 5 * time.Minute, 15 * time.Minute, 30 * time.Minute,
	time.Hour, 2 * time.Hour, 4 * time.Hour, 8 * time.Hour, 8 * time.Hour,
}

// MaxAttempts is the first attempt and one per retry.
var MaxAttempts = len(Schedule) + 1

// NextRetry is when to try again after attempt (1 for the first) failed at
// failedAt.
func NextRetry(attempt int, failedAt time.Time) time.Time {
	i := min(max(attempt, 1), len(Schedule)) - 1
	return failedAt.Add(Schedule[i])
}

// NewGuard is the client deliveries go through: netguard with the
// operator's allowed ranges, AttemptTimeout, no redirect followed, a
// small read of the answer.
func NewGuard(cfg netguard.Config) *netguard.Client {
	cfg.Timeout, cfg.MaxBytes, cfg.NoRedirects = AttemptTimeout, responseBytes, true
	return netguard.New(cfg)
}

// Deliverer sends deliveries.
type Deliverer struct {
	Store  *db.Store
	Sealer *seal.Sealer
	// Guard is NewGuard's client.
	Guard *netguard.Client
}

// ErrAttempt is a failed attempt that River retries.
var ErrAttempt = errors.New("webhook delivery attempt failed")

// Deliver makes attempt (1 for the first) at sending delivery id of org,
// and records it. It returns an error wrapping ErrAttempt when the
// endpoint did not answer 2xx in time, or the attempt could not be signed
// (River then retries); last says no
// retry follows, and the delivery is then failed and its endpoint marked
// failing. A delivery that is gone (its endpoint deleted) or already
// settled is not sent again, and one whose endpoint is deleted while it
// is sent ends there, unrecorded, without an error.
func (d *Deliverer) Deliver(ctx context.Context, org, id uuid.UUID, attempt int, last bool) error {
	var t dbq.GetDeliveryTargetRow
	// SECURITY: the delivery and its endpoint are read in their
	// organization's tenant transaction.
	err := d.Store.Tenant(ctx, org, func(q *dbq.Queries) error {
		var err error
		t, err = q.GetDeliveryTarget(ctx, dbq.GetDeliveryTargetParams{OrgID: org, ID: id})
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return err
	}
	if t.Status != "pending" {
		return nil
	}
	if !t.Enabled {
		return ended(d.record(ctx, org, t, attempt, 0, 0, endpointDisabled, "failed"))
	}
	header, err := d.signed(org, t, time.Now())
	if err != nil {
		// A secret this instance cannot open (another --secrets-key) is
		// a failed attempt like any: recorded, retried (another instance
		// may hold the right key), and on the last one the delivery fails
		// and the endpoint is marked failing. Returned bare, River gave up
		// the job with the delivery pending for good and no attempt listed.
		outcome := "pending"
		if last {
			outcome = "failed"
		}
		if rerr := d.record(ctx, org, t, attempt, 0, 0, unsignable, outcome); rerr != nil {
			return ended(rerr)
		}
		return fmt.Errorf("%w: %s: %w", ErrAttempt, unsignable, err)
	}

	actx, cancel := context.WithTimeout(ctx, AttemptTimeout)
	defer cancel()
	start := time.Now()
	resp, sendErr := d.Guard.Send(actx, netguard.Request{Method: http.MethodPost, URL: t.Url, Header: header, Body: t.Body})
	took := time.Since(start)
	status, problem := 0, ""
	switch {
	case sendErr != nil && errors.Is(ctx.Err(), context.Canceled):
		// The worker is stopping: the endpoint did not fail, so the
		// attempt neither fails the delivery nor marks the endpoint
		// failing, and it is sent again when a worker runs. (The job's
		// own deadline passing is a failed attempt, retried later.)
		if err := d.record(ctx, org, t, attempt, 0, took, Interrupted, "pending"); err != nil {
			return ended(err)
		}
		return ErrInterrupted
	case sendErr != nil:
		problem = short(sendErr.Error())
		if errors.Is(sendErr, context.DeadlineExceeded) || actx.Err() != nil && ctx.Err() == nil {
			problem = "no answer within " + AttemptTimeout.String()
		}
	case resp.Status < 200 || resp.Status > 299:
		status = resp.Status
		problem = short(fmt.Sprintf("HTTP %d: %s", resp.Status, strings.TrimSpace(string(resp.Body))))
	default:
		status = resp.Status
	}
	outcome := "succeeded"
	if problem != "" {
		outcome = "pending"
		if last {
			outcome = "failed"
		}
	}
	if err := d.record(ctx, org, t, attempt, status, took, problem, outcome); err != nil {
		return ended(err)
	}
	if problem != "" {
		return fmt.Errorf("%w: %s", ErrAttempt, problem)
	}
	return nil
}

// endpointDisabled is the error recorded for a delivery dropped because
// its endpoint was paused meanwhile: the endpoint did not fail, and it is
// not marked failing.
const endpointDisabled = "the endpoint is disabled"

// unsignable is the error recorded for an attempt not sent because the
// endpoint's signing secret cannot be opened with this server's secrets
// key (what seal says is for the log only).
const unsignable = "the signing secret cannot be opened with this server's secrets keys: rotate the secret, or give the server the key that sealed it (--secrets-key, or --secrets-key-previous while the key is rotated)"

// signed is the headers of an attempt at t.Body made at now: the Standard
// Webhooks id, timestamp and signature with the endpoint's secret.
func (d *Deliverer) signed(org uuid.UUID, t dbq.GetDeliveryTargetRow, now time.Time) (http.Header, error) {
	key, err := openSecret(d.Sealer, org, t.WebhookID, t.Secret)
	if err != nil {
		return nil, err
	}
	hook, err := standardwebhooks.NewWebhookRaw(key)
	if err != nil {
		return nil, err
	}
	sig, err := hook.Sign(t.EventID, now, t.Body)
	if err != nil {
		return nil, err
	}
	header := http.Header{}
	header.Set("Content-Type", "application/json")
	header.Set(standardwebhooks.HeaderWebhookID, t.EventID)
	header.Set(standardwebhooks.HeaderWebhookTimestamp, strconv.FormatInt(now.Unix(), 10))
	header.Set(standardwebhooks.HeaderWebhookSignature, sig)
	return header, nil
}

// Interrupted is the error recorded for an attempt cut short by its
// worker stopping (Parley shutting down) before the endpoint answered.
const Interrupted = "interrupted: Parley stopped before the endpoint answered; it will be sent again"

// ErrInterrupted is Deliver's answer for such an attempt: the delivery is
// to be run again without counting it (the jobs' worker snoozes it).
var ErrInterrupted = errors.New("webhook delivery interrupted")

// errGone is record's answer when the delivery's endpoint was deleted
// meanwhile (and the delivery with it): nothing is left to record or retry.
var errGone = errors.New("webhook endpoint deleted")

// ended is Deliver's answer after record: a delivery whose endpoint is
// gone ends without an error (River then neither retries nor logs it).
func ended(err error) error {
	if errors.Is(err, errGone) {
		return nil
	}
	return err
}

// record stores an attempt and what it made of the delivery and its
// endpoint, or returns errGone when the endpoint no longer exists. It runs
// even when the job's context ended (a worker stopping): the attempt
// happened.
func (d *Deliverer) record(ctx context.Context, org uuid.UUID, t dbq.GetDeliveryTargetRow, attempt, status int, took time.Duration, problem, outcome string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	gone := false
	// SECURITY: written in the delivery's organization.
	err := d.Store.Tenant(ctx, org, func(q *dbq.Queries) error {
		// The endpoint's row first, as DeleteWebhook takes it before its
		// cascade reaches the delivery and its attempts: taken in the
		// other order, the two deadlocked. A delete in progress is waited
		// for, and its endpoint found gone.
		_, err := q.LockDeliveryWebhook(ctx, dbq.LockDeliveryWebhookParams{OrgID: org, ID: t.WebhookID})
		if err == nil {
			// Then the delivery, which may be gone while its endpoint
			// stays (its form submission deleted, or retention).
			_, err = q.LockWebhookDelivery(ctx, dbq.LockWebhookDeliveryParams{OrgID: org, ID: t.ID})
		}
		if errors.Is(err, pgx.ErrNoRows) {
			gone = true
			return nil
		}
		if err != nil {
			return err
		}
		if err := q.RecordWebhookAttempt(ctx, dbq.RecordWebhookAttemptParams{
			OrgID: org, DeliveryID: t.ID, Attempt: int32(attempt), StatusCode: int32(status),
			DurationMs: took.Milliseconds(), Error: problem,
		}); err != nil {
			return err
		}
		if outcome == "pending" {
			return nil
		}
		if err := q.SetWebhookDeliveryStatus(ctx, dbq.SetWebhookDeliveryStatusParams{OrgID: org, ID: t.ID, Status: outcome}); err != nil {
			return err
		}
		if outcome == "succeeded" {
			return q.ClearWebhookFailing(ctx, dbq.ClearWebhookFailingParams{OrgID: org, ID: t.WebhookID})
		}
		if problem == endpointDisabled {
			// Dropped because the endpoint was paused: it did not fail.
			return nil
		}
		return q.SetWebhookFailing(ctx, dbq.SetWebhookFailingParams{OrgID: org, ID: t.WebhookID, LastError: problem})
	})
	if err == nil && gone {
		return errGone
	}
	return err
}

// short cuts an error to errorChars characters on one line of text
// Postgres stores: invalid UTF-8 becomes U+FFFD and control characters
// (NUL among them, which a text column refuses) become spaces. An answer's
// body is the endpoint's to choose; an error that cannot be stored would
// leave the attempt unrecorded and the delivery pending for ever.
func short(s string) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, "\uFFFD"))
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= errorChars {
		return s
	}
	r := []rune(s)
	return string(r[:errorChars-1]) + "…"
}
