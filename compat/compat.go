// Package compat serves the REST paths of the interface specification
// (SPEC.md) on top of the same service code the Connect handlers use: it only
// decodes the legacy JSON into the protobuf requests, runs the same
// validation, admits the request through the same gate, and encodes the reply
// and errors in the legacy shapes. It holds no business rule of its own.
package compat

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"buf.build/go/protovalidate"
	"google.golang.org/protobuf/proto"

	"github.com/parleyhq/parley/backend/access"
	"github.com/parleyhq/parley/backend/apperr"
	"github.com/parleyhq/parley/backend/auth"
	"github.com/parleyhq/parley/backend/chat"
	"github.com/parleyhq/parley/backend/conversation"
	"github.com/parleyhq/parley/backend/form"
	"github.com/parleyhq/parley/backend/gen/parley/v1/parleyv1connect"
	"github.com/parleyhq/parley/backend/knowledge"
	"github.com/parleyhq/parley/backend/reqinfo"
	"github.com/parleyhq/parley/compat/wire"
)

// MaxBodyBytes bounds a REST JSON body (documented in openapi.json).
const MaxBodyBytes = wire.MaxBodyBytes

//go:embed openapi.json
var openAPI []byte

// Handler serves the REST surface.
type Handler struct {
	agents    parleyv1connect.AgentServiceHandler
	gate      *auth.Gate
	validator protovalidate.Validator

	admit *chat.Admitter
	turns *chat.Service
	convs *conversation.Service

	datastores parleyv1connect.DatastoreServiceHandler
	uploads    *knowledge.UploadBudget
	contacts   parleyv1connect.ContactServiceHandler
	forms      *form.Service
	webhooks   parleyv1connect.WebhookServiceHandler
}

// New returns the REST handler over the given services.
func New(agents parleyv1connect.AgentServiceHandler, gate *auth.Gate, validator protovalidate.Validator) *Handler {
	return &Handler{agents: agents, gate: gate, validator: validator}
}

// Route is one registered REST route.
type Route struct {
	Method string
	// Path in OpenAPI form, e.g. /api/agents/{agentId}.
	Path    string
	handler http.HandlerFunc
}

// Routes lists every route, each under /api and without it (SPEC §4 leaves
// open whether {base_url} carries the /api prefix).
func (h *Handler) Routes() []Route {
	base := []Route{
		{http.MethodGet, "/agents", h.rpc(parleyv1connect.AgentServiceListAgentsProcedure, h.listAgents)},
		{http.MethodPost, "/agents", h.rpc(parleyv1connect.AgentServiceCreateAgentProcedure, h.createAgent)},
		{http.MethodGet, "/agents/{agentId}", h.rpc(parleyv1connect.AgentServiceGetAgentProcedure, h.getAgent)},
		{http.MethodPut, "/agents/{agentId}", h.rpc(parleyv1connect.AgentServiceUpdateAgentProcedure, h.updateAgent)},
		{http.MethodDelete, "/agents/{agentId}", h.rpc(parleyv1connect.AgentServiceDeleteAgentProcedure, h.deleteAgent)},
		{http.MethodGet, "/datastores", h.rpc(parleyv1connect.DatastoreServiceListDatastoresProcedure, h.listDatastores)},
		{http.MethodPost, "/datastores", h.rpc(parleyv1connect.DatastoreServiceCreateDatastoreProcedure, h.createDatastore)},
		{http.MethodGet, "/datastores/{id}", h.rpc(parleyv1connect.DatastoreServiceGetDatastoreProcedure, h.getDatastore)},
		{http.MethodPatch, "/datastores/{id}", h.rpc(parleyv1connect.DatastoreServiceUpdateDatastoreProcedure, h.updateDatastore)},
		{http.MethodDelete, "/datastores/{id}", h.rpc(parleyv1connect.DatastoreServiceDeleteDatastoreProcedure, h.deleteDatastore)},
		{http.MethodGet, "/datastores/{id}/datasources", h.rpc(parleyv1connect.DatastoreServiceListDatasourcesProcedure, h.listDatasources)},
		{http.MethodPost, "/datastores/{id}/datasources", h.rpc(parleyv1connect.DatastoreServiceCreateDatasourceProcedure, h.createDatasource)},
		{http.MethodPost, "/datastores/{id}/query", h.rpc(parleyv1connect.DatastoreServiceQueryProcedure, h.queryDatastore)},
		{http.MethodGet, "/datasources/{id}", h.rpc(parleyv1connect.DatastoreServiceGetDatasourceProcedure, h.getDatasource)},
		{http.MethodDelete, "/datasources/{id}", h.rpc(parleyv1connect.DatastoreServiceDeleteDatasourceProcedure, h.deleteDatasource)},
		{http.MethodPost, "/datasources/{id}/resync", h.rpc(parleyv1connect.DatastoreServiceResyncDatasourceProcedure, h.resyncDatasource)},
		{http.MethodGet, "/contacts", h.rpc(parleyv1connect.ContactServiceListContactsProcedure, h.listContacts)},
		{http.MethodGet, "/contacts/{id}", h.rpc(parleyv1connect.ContactServiceGetContactProcedure, h.getContact)},
		{http.MethodDelete, "/contacts/{id}", h.rpc(parleyv1connect.ContactServiceDeleteContactProcedure, h.deleteContact)},
		{http.MethodGet, "/forms", h.rpc(parleyv1connect.FormServiceListFormsProcedure, h.listForms)},
		{http.MethodPost, "/forms", h.rpc(parleyv1connect.FormServiceCreateFormProcedure, h.createForm)},
		// Without a key: a published form (FormService admits the caller).
		{http.MethodGet, "/forms/{formId}", h.rpc(parleyv1connect.FormServiceGetFormProcedure, h.getForm)},
		{http.MethodPost, "/forms/{formId}", h.rpc(parleyv1connect.FormServiceSubmitFormProcedure, h.submitForm)},
		{http.MethodPut, "/forms/{formId}", h.rpc(parleyv1connect.FormServiceUpdateFormProcedure, h.updateForm)},
		{http.MethodDelete, "/forms/{formId}", h.rpc(parleyv1connect.FormServiceDeleteFormProcedure, h.deleteForm)},
		{http.MethodGet, "/forms/{formId}/submissions", h.rpc(parleyv1connect.FormServiceListSubmissionsProcedure, h.listSubmissions)},
		{http.MethodDelete, "/forms/{formId}/submissions/{submissionId}", h.rpc(parleyv1connect.FormServiceDeleteSubmissionProcedure, h.deleteSubmission)},
	}
	base = append(base, h.webhookRoutes()...)
	base = append(base,
		Route{http.MethodPost, "/v2/agent/{agentId}/chat", h.chatV2},
		Route{http.MethodGet, "/v2/agent/{agentId}/conversations", handle(h.listConversations)},
		Route{http.MethodGet, "/v2/conversations", handle(h.listConversationsV2)},
		Route{http.MethodGet, "/v2/conversations/{id}", handle(h.getConversation)},
		Route{http.MethodPut, "/v2/conversations/{id}", handle(h.updateConversation)},
		Route{http.MethodPost, "/v2/conversations/{id}/messages", h.rpc(parleyv1connect.ConversationServicePostMessageProcedure, h.postMessage)},
		Route{http.MethodDelete, "/v2/conversations/{id}", h.rpc(parleyv1connect.ConversationServiceDeleteConversationProcedure, h.deleteConversation)},
		Route{http.MethodGet, "/v2/conversations/{id}/events", noHead(handle(h.watchConversation))},
		Route{http.MethodPost, "/agents/{agentId}/query", h.chatV1},
	)
	routes := []Route{{http.MethodGet, "/api/openapi.json", serveOpenAPI}}
	for _, prefix := range []string{"/api", ""} {
		for _, r := range base {
			routes = append(routes, Route{r.Method, prefix + r.Path, r.handler})
		}
	}
	return routes
}

// Register adds every route to mux.
func (h *Handler) Register(mux *http.ServeMux) {
	for _, r := range h.Routes() {
		mux.HandleFunc(r.Method+" "+r.Path, r.handler)
	}
}

func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openAPI)
}

// noHead guards a GET route whose reply is a stream that does not end
// (Server-Sent Events) from HEAD, which Go's mux routes to GET: run, the
// handler would hold the connection for the stream's life (an hour), its
// body discarded, and a keep-alive client's next request would wait as
// long. HEAD is answered 405 with Allow: GET, not with the stream's headers
// alone: those would need the caller admitted (its key checked, a
// rate-limit token spent, the conversation looked up) to say nothing a
// client can use, and a stream has no length to report.
func noHead(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodHead {
			reqinfo.SetError(r.Context(), "METHOD_NOT_ALLOWED", 0)
			w.Header().Set("Allow", http.MethodGet)
			w.WriteHeader(http.StatusMethodNotAllowed) // a reply to HEAD has no body
			return
		}
		next(w, r)
	}
}

// rpc admits a request by the access rule of the method it fronts
// (backend/access: declared in the schema) and runs fn with the principal in
// its context; any error fn returns is written in the legacy error shape.
func (h *Handler) rpc(procedure string, fn func(w http.ResponseWriter, r *http.Request) error) http.HandlerFunc {
	return access.Middleware(h.gate, procedure, WriteError, func(w http.ResponseWriter, r *http.Request) {
		if err := fn(w, r); err != nil {
			WriteError(w, r, err)
		}
	})
}

// validate runs the schema's protovalidate rules, as the Connect interceptor
// does.
func (h *Handler) validate(msg proto.Message) error { return wire.Validate(h.validator, msg) }

// errorBody is SPEC §7's error shape.
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code       string `json:"code"`
	Message    string `json:"message"`
	Field      string `json:"field,omitempty"`
	RetryAfter *int64 `json:"retryAfter,omitempty"`
}

// WriteError writes err as SPEC §7's error body with its status; internal
// errors are logged whole and sent as a generic message.
func WriteError(w http.ResponseWriter, r *http.Request, err error) {
	status, body := errorFor(r, err)
	errorHeaders(w.Header(), status, body)
	writeJSON(w, status, body)
}

// errorHeaders are an error reply's headers: Retry-After when it says when
// to come back, and on a 401 the scheme that gets in (RFC 9110 §11.6.1: a
// 401 names one).
func errorHeaders(h http.Header, status int, body errorBody) {
	if ra := body.Error.RetryAfter; ra != nil {
		h.Set("Retry-After", strconv.FormatInt(*ra, 10))
	}
	if status == http.StatusUnauthorized {
		h.Set("WWW-Authenticate", "Bearer")
	}
}

// statusClientClosed is the status a request whose client went away is
// logged with (nginx's convention; no client reads it).
const statusClientClosed = 499

// errorFor is the status and body of err.
func errorFor(r *http.Request, err error) (int, errorBody) {
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		// The client went away (as Connect's "canceled"): not a fault of
		// the server's, logged as nginx's 499, and nobody reads the body.
		clientClosed(r)
		return statusClientClosed, errorBody{Error: errorDetail{Code: "CLIENT_CLOSED_REQUEST", Message: "the client closed the request"}}
	}
	if apperr.CodeOf(err) == apperr.Internal {
		slog.ErrorContext(r.Context(), "internal error", "err", err, "method", r.Method, "path", r.URL.Path)
	}
	pub := apperr.Public(err)
	m := apperr.Lookup(pub.Code)
	// The request log line carries the code.
	reqinfo.SetError(r.Context(), m.SpecCode, 0)
	body := errorBody{Error: errorDetail{Code: m.SpecCode, Message: pub.Message, Field: wire.JSONName(pub.Field)}}
	if pub.Field != "" {
		// Services name fields as the schema does (visitor_id); REST clients
		// know them as JSON names (visitorId).
		if rest, ok := strings.CutPrefix(pub.Message, pub.Field+":"); ok {
			body.Error.Message = body.Error.Field + ":" + rest
		}
	}
	if secs, ok := pub.RetryAfterSeconds(); ok {
		body.Error.RetryAfter = &secs
	}
	return m.HTTPStatus, body
}

// clientClosed notes, for the request's log line and metrics, that its
// client went away before the reply was whole (a stream it left): 499, as
// a Connect stream's "canceled" counts, not the 200 that went out first.
func clientClosed(r *http.Request) {
	reqinfo.SetError(r.Context(), "CLIENT_CLOSED_REQUEST", statusClientClosed)
}

// streamFailed is errorFor for a stream whose 200 went out before it
// failed (its error travels as an event): the request's log line and
// metrics take the status the error stands for, as a failed Connect or gRPC
// stream's is counted by its code, not the 200 in front of it.
func streamFailed(r *http.Request, err error) (int, errorBody) {
	status, body := errorFor(r, err)
	reqinfo.SetError(r.Context(), body.Error.Code, status)
	return status, body
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	if err := json.NewEncoder(w).Encode(v); err != nil {
		slog.Warn("writing response", "err", err)
	}
}
