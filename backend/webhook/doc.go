// Package webhook is WebhookService and the delivery of an organization's
// events to its endpoints, following the Standard Webhooks specification.
//
// A producer (a form submitted, a lead captured, a conversation handed to
// people...) calls Emitter.Emit inside the transaction of its change: the
// delivery rows and their River jobs commit with the change or not at all,
// so no event is lost on a crash and none is sent for a rolled-back change.
// Deliverer sends one delivery (the River worker in backend/jobs calls it),
// signed with the endpoint's secret, through netguard, recording each
// attempt; River retries with NextRetry's back-off for about a day.
//
// It must never log a secret, return one except when it is made (create,
// rotate), store one unsealed, dial an address netguard refuses, or read or
// write another organization's endpoints or deliveries: every query names
// the organization it runs for, inside that organization's tenant
// transaction.
package webhook
