package form

import (
	"context"
	"net"
	"time"

	"connectrpc.com/connect"

	"github.com/parleyhq/parley/backend/apperr"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/gen/parley/v1/parleyv1connect"
	"github.com/parleyhq/parley/backend/ratelimit"
)

// handler is FormService over Connect: the Service, with GetForm and
// SubmitForm reading the caller's address for the limits of callers
// without a key.
type handler struct{ *Service }

var _ parleyv1connect.FormServiceHandler = (*handler)(nil)

// NewHandler returns FormService. access admits its management methods
// (admin key) and every call that sends a key; keyless GetForm and
// SubmitForm calls reach it unadmitted and s admits them per form.
func NewHandler(s *Service) parleyv1connect.FormServiceHandler { return &handler{s} }

func (h *handler) GetForm(ctx context.Context, req *parleyv1.GetFormRequest) (*parleyv1.GetFormResponse, error) {
	info, _ := connect.CallInfoForHandlerContext(ctx)
	resp, rate, err := h.Form(ctx, callerOf(info), req)
	return resp, withRate(ctx, info, rate, err)
}

func (h *handler) SubmitForm(ctx context.Context, req *parleyv1.SubmitFormRequest) (*parleyv1.SubmitFormResponse, error) {
	info, _ := connect.CallInfoForHandlerContext(ctx)
	resp, rate, err := h.Submit(ctx, callerOf(info), req)
	return resp, withRate(ctx, info, rate, err)
}

func callerOf(info connect.CallInfo) Caller {
	if info == nil {
		return Caller{}
	}
	host, _, err := net.SplitHostPort(info.Peer().Addr)
	if err != nil {
		host = info.Peer().Addr
	}
	return Caller{ClientIP: host}
}

// withRate reports the rate-limit state of a keyless call: in the response
// headers, or in the error's metadata.
func withRate(ctx context.Context, info connect.CallInfo, rate *ratelimit.Result, err error) error {
	if err == nil {
		if info != nil {
			ratelimit.WriteHeaders(info.ResponseHeader(), rate, time.Now())
		}
		return nil
	}
	cerr := apperr.ToConnect(ctx, err)
	if ce, ok := cerr.(*connect.Error); ok {
		ratelimit.WriteHeaders(ce.Meta(), rate, time.Now())
	}
	return cerr
}
