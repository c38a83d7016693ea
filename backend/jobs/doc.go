// Package jobs runs Parley's background work on River (Postgres-backed
// jobs): the ingestion of datasources, webhook deliveries and their
// retention, and the forgetting of deleted datasources' cited text. Jobs are enqueued in the
// transaction of the change that needs them, so a job exists if and only if
// its change committed; workers are idempotent, since River retries them.
//
// It decides how a job is run (timeouts, retries, cancellation of permanent
// failures); what a job does lives in the domain packages (knowledge).
package jobs
