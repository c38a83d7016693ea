// Package apperr is Parley's one error vocabulary. Services return *Error
// values; the transports (Connect and the legacy REST paths) turn them into
// statuses with the single table in this file. Anything that is not an *Error
// is internal: it is logged whole and the client sees a generic message, so
// nothing from SQL or a provider leaks out.
package apperr

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"connectrpc.com/connect"
)

// Code classifies an error.
type Code string

// The codes, each mapped once in the table below.
const (
	Invalid         Code = "invalid"
	Unauthenticated Code = "unauthenticated"
	Forbidden       Code = "forbidden"
	NotFound        Code = "not_found"
	Conflict        Code = "conflict"
	// Aborted: the request collided with another changing the same rows
	// (a deadlock Postgres broke); nothing was done, and it may be sent
	// again as it is.
	Aborted            Code = "aborted"
	FailedPrecondition Code = "failed_precondition"
	RateLimited        Code = "rate_limited"
	Unavailable        Code = "unavailable"
	Upstream           Code = "upstream"
	// Timeout: the model gave no complete answer within a turn's deadline
	// (--turn-timeout). A gateway timeout, as Connect maps
	// deadline_exceeded: the service waited on a provider for the client.
	Timeout Code = "timeout"
	// ShuttingDown: the instance stopped the work because it is shutting
	// down; the same request sent again reaches another instance (or this
	// one, restarted).
	ShuttingDown Code = "shutting_down"
	// Overloaded: the instance runs as many chat turns as it may and its
	// wait list is full (or the wait took too long); nothing was done, and
	// the same request sent after RetryAfter may get in.
	Overloaded Code = "overloaded"
	// TooLarge: the request body is larger than its route takes. Connect
	// says resource_exhausted, as connect-go does of an oversized message.
	TooLarge Code = "too_large"
	// MethodNotAllowed: the path is a route, served for other methods
	// (REST; the reply's Allow header names them).
	MethodNotAllowed Code = "method_not_allowed"
	Internal         Code = "internal"
)

// Mapping is how one code appears on each transport.
type Mapping struct {
	Connect    connect.Code
	HTTPStatus int
	// SpecCode is the `error.code` of the REST body (SPEC.md §7).
	SpecCode string
}

var table = map[Code]Mapping{
	Invalid:            {connect.CodeInvalidArgument, http.StatusBadRequest, "BAD_REQUEST"},
	Unauthenticated:    {connect.CodeUnauthenticated, http.StatusUnauthorized, "UNAUTHORIZED"},
	Forbidden:          {connect.CodePermissionDenied, http.StatusForbidden, "FORBIDDEN"},
	NotFound:           {connect.CodeNotFound, http.StatusNotFound, "NOT_FOUND"},
	Conflict:           {connect.CodeAlreadyExists, http.StatusConflict, "CONFLICT"},
	Aborted:            {connect.CodeAborted, http.StatusConflict, "CONFLICT"},
	FailedPrecondition: {connect.CodeFailedPrecondition, http.StatusUnprocessableEntity, "FAILED_PRECONDITION"},
	RateLimited:        {connect.CodeResourceExhausted, http.StatusTooManyRequests, "RATE_LIMIT_EXCEEDED"},
	Unavailable:        {connect.CodeUnavailable, http.StatusServiceUnavailable, "UPSTREAM_UNAVAILABLE"},
	Upstream:           {connect.CodeUnavailable, http.StatusBadGateway, "UPSTREAM_ERROR"},
	Timeout:            {connect.CodeDeadlineExceeded, http.StatusGatewayTimeout, "UPSTREAM_TIMEOUT"},
	ShuttingDown:       {connect.CodeUnavailable, http.StatusServiceUnavailable, "SHUTTING_DOWN"},
	Overloaded:         {connect.CodeUnavailable, http.StatusServiceUnavailable, "OVERLOADED"},
	TooLarge:           {connect.CodeResourceExhausted, http.StatusRequestEntityTooLarge, "PAYLOAD_TOO_LARGE"},
	MethodNotAllowed:   {connect.CodeUnimplemented, http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED"},
	Internal:           {connect.CodeInternal, http.StatusInternalServerError, "INTERNAL_ERROR"},
}

// Lookup returns the transport mapping of a code; unknown codes map as Internal.
func Lookup(c Code) Mapping {
	if m, ok := table[c]; ok {
		return m
	}
	return table[Internal]
}

// Error is a domain error whose message is safe to show to the client.
type Error struct {
	Code    Code
	Message string
	// Field names the request field at fault, for Invalid.
	Field string
	// RetryAfter is when to try again: set for RateLimited and Overloaded,
	// and for Unavailable when it is known. The transports send it as
	// retryAfter (whole seconds, at least 1) and Retry-After.
	RetryAfter time.Duration
	// cause is what the error stands for, if anything (Wrap): logs and
	// errors.As see it; the client never does.
	cause error
}

func (e *Error) Error() string { return e.Message }

// Unwrap is the cause Wrap was given (nil for New's errors).
func (e *Error) Unwrap() error { return e.cause }

// Wrap returns an error with a client-safe message that stands for cause:
// errors.Is and errors.As still find cause through it.
func Wrap(cause error, code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...), cause: cause}
}

// New returns an error with a client-safe message.
func New(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// InvalidField returns an Invalid error about one request field. The message
// starts with the field's name.
func InvalidField(field, format string, args ...any) *Error {
	return &Error{Code: Invalid, Field: field, Message: field + ": " + fmt.Sprintf(format, args...)}
}

// CodeOf returns the code of err, Internal for anything that is not an *Error.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return Internal
}

// Public returns err as an *Error safe to show to a client: internal errors
// become a generic message.
func Public(err error) *Error {
	var e *Error
	if errors.As(err, &e) && e.Code != Internal {
		return e
	}
	return &Error{Code: Internal, Message: "internal error"}
}

// RetryAfterSeconds is e's RetryAfter in whole seconds, rounded up, at least
// one; ok is false when e says nothing of when to retry (a rate limit always
// does, even at 0).
func (e *Error) RetryAfterSeconds() (secs int64, ok bool) {
	if e.Code != RateLimited && e.RetryAfter <= 0 {
		return 0, false
	}
	if e.Code == RateLimited {
		// Counted by the rate limiter in whole seconds already.
		return int64(e.RetryAfter / time.Second), true
	}
	return max(1, int64((e.RetryAfter+time.Second-1)/time.Second)), true
}
