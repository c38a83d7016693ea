package apperr

import (
	"context"
	"errors"
	"log/slog"
	"strconv"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/durationpb"
)

// ToConnect turns a service error into a Connect error, logging internal
// ones. Errors that already are Connect errors (from interceptors such as
// validation) pass through.
func ToConnect(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce
	}
	if errors.Is(err, context.Canceled) {
		return connect.NewError(connect.CodeCanceled, errors.New("request canceled"))
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return connect.NewError(connect.CodeDeadlineExceeded, errors.New("deadline exceeded"))
	}
	if CodeOf(err) == Internal {
		slog.ErrorContext(ctx, "internal error", "err", err)
	}
	pub := Public(err)
	out := connect.NewError(Lookup(pub.Code).Connect, errors.New(pub.Message))
	if secs, ok := pub.RetryAfterSeconds(); ok {
		if d, derr := connect.NewErrorDetail(&errdetails.RetryInfo{RetryDelay: durationpb.New(pub.RetryAfter)}); derr == nil {
			out.AddDetail(d)
		}
		out.Meta().Set("Retry-After", strconv.FormatInt(secs, 10))
	}
	if pub.Code == Invalid && pub.Field != "" {
		br := &errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: pub.Field, Description: pub.Message}}}
		if d, derr := connect.NewErrorDetail(br); derr == nil {
			out.AddDetail(d)
		}
	}
	return out
}

// connectHTTPStatus is the HTTP status of each Connect code, as the Connect
// protocol specifies it (connectrpc.com/docs/protocol, "Error Codes").
var connectHTTPStatus = map[connect.Code]int{
	connect.CodeCanceled:           499,
	connect.CodeUnknown:            500,
	connect.CodeInvalidArgument:    400,
	connect.CodeDeadlineExceeded:   504,
	connect.CodeNotFound:           404,
	connect.CodeAlreadyExists:      409,
	connect.CodePermissionDenied:   403,
	connect.CodeResourceExhausted:  429,
	connect.CodeFailedPrecondition: 400,
	connect.CodeAborted:            409,
	connect.CodeOutOfRange:         400,
	connect.CodeUnimplemented:      501,
	connect.CodeInternal:           500,
	connect.CodeUnavailable:        503,
	connect.CodeDataLoss:           500,
	connect.CodeUnauthenticated:    401,
}

// ConnectHTTPStatus is the HTTP status a Connect code stands for (500 for
// an unknown code). Logs and metrics count a failed gRPC call, which
// travels behind an HTTP 200, by it.
func ConnectHTTPStatus(c connect.Code) int {
	if s, ok := connectHTTPStatus[c]; ok {
		return s
	}
	return 500
}
