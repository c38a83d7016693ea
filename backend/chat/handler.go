package chat

import (
	"context"
	"net"
	"net/http"
	"time"

	"connectrpc.com/connect"

	"github.com/parleyhq/parley/backend/apperr"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/gen/parley/v1/parleyv1connect"
	"github.com/parleyhq/parley/backend/ratelimit"
)

type handler struct {
	admit *Admitter
	svc   *Service
}

var _ parleyv1connect.ChatServiceHandler = (*handler)(nil)

// NewHandler returns ChatService. It admits callers itself (a public agent
// needs no key), so the key gate must not wrap it.
func NewHandler(a *Admitter, s *Service) parleyv1connect.ChatServiceHandler {
	return &handler{admit: a, svc: s}
}

// CallerOf reads the caller of a Connect call.
func CallerOf(header http.Header, peerAddr string) Caller {
	host, _, err := net.SplitHostPort(peerAddr)
	if err != nil {
		host = peerAddr
	}
	return Caller{Authorization: header.Get("Authorization"), ClientIP: host}
}

// ConnectError is err as a Connect error, carrying the rate-limit headers.
func ConnectError(ctx context.Context, err error, rate *ratelimit.Result) error {
	cerr := apperr.ToConnect(ctx, err)
	if ce, ok := cerr.(*connect.Error); ok {
		ratelimit.WriteHeaders(ce.Meta(), rate, time.Now())
	}
	return cerr
}

func rateOf(a *Admitted) *ratelimit.Result {
	if a == nil {
		return nil
	}
	return a.Rate
}

func (h *handler) Chat(ctx context.Context, req *parleyv1.ChatRequest) (*parleyv1.ChatResponse, error) {
	info, _ := connect.CallInfoForHandlerContext(ctx)
	adm, err := h.admit.Admit(ctx, CallerOf(info.RequestHeader(), info.Peer().Addr), req.GetAgentId(), req.GetVisitorId())
	if err != nil {
		return nil, ConnectError(ctx, err, rateOf(adm))
	}
	ratelimit.WriteHeaders(info.ResponseHeader(), adm.Rate, time.Now())
	resp, err := h.svc.Run(ctx, adm, req, nil)
	if err != nil {
		return nil, ConnectError(ctx, err, nil)
	}
	return resp, nil
}

func (h *handler) ChatStream(ctx context.Context, req *parleyv1.ChatRequest, stream *connect.ServerStream[parleyv1.ChatStreamResponse]) error {
	conn := stream.Conn()
	adm, err := h.admit.Admit(ctx, CallerOf(conn.RequestHeader(), conn.Peer().Addr), req.GetAgentId(), req.GetVisitorId())
	if err != nil {
		return ConnectError(ctx, err, rateOf(adm))
	}
	ratelimit.WriteHeaders(stream.ResponseHeader(), adm.Rate, time.Now())
	_, err = h.svc.Run(ctx, adm, req, stream.Send)
	if err != nil {
		return ConnectError(ctx, err, nil)
	}
	return nil
}
