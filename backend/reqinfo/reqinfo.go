// Package reqinfo carries what a request's log line and metrics need to
// know of it (its id, route, organization, key, error code and the real
// status) from the layers that learn it (the gate, the Connect interceptor,
// the REST error writer) back to the request log, which writes them when the
// request ends.
//
// It must never hold a key's secret, only its id. Its setters are called
// from the request's own goroutine, before the handler returns.
package reqinfo

import (
	"context"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"
)

// Info is what is known of one request.
type Info struct {
	// ID is the request id (X-Request-Id).
	ID string
	// Route is the RPC procedure of a Connect, gRPC or gRPC-Web call, the
	// pattern the console's own mux matched, or else the one the server's
	// mux matched; empty when none did.
	Route string
	// OrgID and KeyID are the caller's organization and API key, once the
	// gate or the service knows them (zero: none).
	OrgID, KeyID uuid.UUID
	// Code is the error code: the Connect code of a failed call
	// ("not_found"), or the REST error code of a failed REST request
	// ("NOT_FOUND").
	Code string
	// Status is the status the error stands for, when it differs from the
	// HTTP status written (a gRPC error travels in trailers behind a 200);
	// 0: the written status is the real one.
	Status int
	// Span is the RPC's span (otelconnect starts it after the request log
	// has run), for the log line's trace and span ids.
	Span trace.SpanContext
}

type key struct{}

// With returns ctx carrying i.
func With(ctx context.Context, i *Info) context.Context { return context.WithValue(ctx, key{}, i) }

// From returns the request's Info, nil outside a request.
func From(ctx context.Context) *Info {
	i, _ := ctx.Value(key{}).(*Info)
	return i
}

// SetCaller notes the caller's organization and key (uuid.Nil: none, as for
// a visitor of a public agent or a console member).
func SetCaller(ctx context.Context, org, key uuid.UUID) {
	if i := From(ctx); i != nil {
		i.OrgID, i.KeyID = org, key
	}
}

// SetError notes a failed request's error code and the status it stands
// for (0: the one written).
func SetError(ctx context.Context, code string, status int) {
	if i := From(ctx); i != nil {
		i.Code, i.Status = code, status
	}
}
