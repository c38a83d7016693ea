// Package metrics defines every Prometheus metric Parley exports, in one
// place, and the small functions the rest of the code calls to record them.
// Metrics are served by Handler on their own listener (--metrics-addr),
// never on the public API port.
//
// Labels are bounded sets only: route patterns and RPC procedures (never raw
// paths), providers and upstream models from the configured catalog, plan
// names, error kinds, job kinds and states. It must never label a metric with
// an organization, key, agent, conversation or any other per-tenant id: the
// series count would grow with the customers.
package metrics
