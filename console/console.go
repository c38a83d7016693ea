package console

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"

	"buf.build/go/protovalidate"
	"github.com/a-h/templ"
	"github.com/alexedwards/scs/v2"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/proto"

	"github.com/parleyhq/parley/backend/account"
	"github.com/parleyhq/parley/backend/apperr"
	"github.com/parleyhq/parley/backend/auth"
	"github.com/parleyhq/parley/backend/chat"
	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/backend/db/dbq"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/gen/parley/v1/parleyv1connect"
	"github.com/parleyhq/parley/backend/knowledge"
	"github.com/parleyhq/parley/backend/member"
	"github.com/parleyhq/parley/backend/ratelimit"
	"github.com/parleyhq/parley/backend/reqinfo"
	"github.com/parleyhq/parley/backend/webhook"
	"github.com/parleyhq/parley/compat/wire"
)

// Deps are the services the console drives: the same ones the Connect and
// REST handlers serve.
type Deps struct {
	// Store's Timeout bounds the console's session reads and writes too.
	Store      *db.Store
	Members    *member.Service
	Accounts   *account.Service
	Agents     parleyv1connect.AgentServiceHandler
	Datastores *knowledge.Service
	Turns      *chat.Service
	Admit      *chat.Admitter // the playground's turns, as the signed-in member
	Limits     *ratelimit.Limiter
	Validator  protovalidate.Validator
	// Hooks emits the webhook events of the inbox's changes (status,
	// people's replies); nil: none.
	Hooks *webhook.Emitter
	// Webhooks manages the organization's endpoints (the webhooks page).
	Webhooks *webhook.Service
	// Secure marks the session cookie Secure: the public URL is https.
	Secure bool
	// PublicURL is where people reach the console (invitation links).
	PublicURL string
}

// Console is the web console's handler.
type Console struct {
	Deps
	sessions *scs.SessionManager
	mux      *http.ServeMux
	// stopCleanup ends the sessions' cleanup (Close).
	stopCleanup func()
}

// Session lifetimes: a session ends after IdleTimeout without a request,
// and in any case Lifetime after sign-in.
const (
	IdleTimeout = 2 * time.Hour
	Lifetime    = 7 * 24 * time.Hour
)

// New returns the console.
func New(d Deps) *Console {
	sm := scs.New()
	store, stopCleanup := newSessionStore(d.Store)
	sm.Store = store
	sm.IdleTimeout = IdleTimeout
	sm.Lifetime = Lifetime
	sm.Cookie.Name = "parley_session"
	if d.Secure {
		// Over https, a __Host- cookie: a browser takes it only from this
		// host, over https, for every path, so that neither a sibling
		// subdomain nor a man in the middle of plain http can plant its
		// own session (signing the member into someone else's account).
		sm.Cookie.Name = "__Host-parley_session"
	}
	sm.Cookie.HttpOnly = true
	sm.Cookie.SameSite = http.SameSiteLaxMode
	sm.Cookie.Secure = d.Secure
	sm.Cookie.Path = "/"
	c := &Console{Deps: d, sessions: sm, mux: http.NewServeMux(), stopCleanup: stopCleanup}
	// A session the database could not read or write in time is a 503
	// page (errorPage logs internal errors itself).
	sm.ErrorFunc = func(w http.ResponseWriter, r *http.Request, err error) {
		if apperr.CodeOf(err) != apperr.Internal {
			slog.WarnContext(r.Context(), "console session", "err", err)
		}
		c.errorPage(w, r, err)
	}
	c.routes()
	return c
}

// sessionStore keeps the console's sessions in the sessions table, with
// the statements of scs's pgxstore, under the SHA-256 of their token: a
// leaked sessions table signs nobody in. pgxstore runs them without a
// deadline (context.Background), so a database that stopped answering held
// every console request for good; here each runs under the request's
// context within the Store's bound (db.Store.Bounded: 503 past it). scs
// calls the Ctx methods when a store has them.
type sessionStore struct {
	store *db.Store
}

var _ scs.CtxStore = sessionStore{}

// sessionCleanupInterval is how often expired sessions are deleted, and
// one-time links used or expired member.LinkRetention ago.
const sessionCleanupInterval = 30 * time.Minute

// newSessionStore returns the store and starts deleting expired sessions
// every sessionCleanupInterval until stop is called (as pgxstore did),
// and with them the sign-in links and invitations used or expired
// member.LinkRetention ago (member.PruneLinks), with the email each holds.
func newSessionStore(store *db.Store) (_ sessionStore, stop func()) {
	s := sessionStore{store: store}
	ctx, stop := context.WithCancel(context.Background())
	go func() {
		t := time.NewTicker(sessionCleanupInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			err := s.store.Bounded(ctx, func(ctx context.Context) error {
				return dbq.New(s.store.Pool).DeleteExpiredSessions(ctx)
			})
			if err != nil && ctx.Err() == nil {
				slog.Warn("console session cleanup", "err", err)
			}
			if _, err := member.PruneLinks(ctx, s.store, time.Now().Add(-member.LinkRetention)); err != nil && ctx.Err() == nil {
				slog.Warn("console link cleanup", "err", err)
			}
		}
	}()
	return s, stop
}

// Close stops the sessions' cleanup; the console still serves.
func (c *Console) Close() { c.stopCleanup() }

func hashToken(t string) string {
	h := sha256.Sum256([]byte(t))
	return hex.EncodeToString(h[:])
}

// FindCtx returns the data of an unexpired session.
func (s sessionStore) FindCtx(ctx context.Context, token string) (b []byte, found bool, err error) {
	err = s.store.Bounded(ctx, func(ctx context.Context) error {
		b, err = dbq.New(s.store.Pool).FindSession(ctx, hashToken(token))
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, nil
	}
	return b, err == nil, err
}

// CommitCtx stores a session's data until expiry.
func (s sessionStore) CommitCtx(ctx context.Context, token string, b []byte, expiry time.Time) error {
	return s.store.Bounded(ctx, func(ctx context.Context) error {
		return dbq.New(s.store.Pool).CommitSession(ctx, dbq.CommitSessionParams{Token: hashToken(token), Data: b, Expiry: expiry})
	})
}

// endedSessionKept is how long, at least, an ended session's emptied row
// is kept (DeleteCtx): longer than any request that read the session
// before it ended may run.
const endedSessionKept = IdleTimeout

// DeleteCtx ends a session: signed out, renewed at sign-in, found stale.
//
// SECURITY: its row is emptied, not deleted, and kept until it would have
// expired (endedSessionKept at least), so that a request that read the
// session before and commits it after (scs commits every session read,
// its idle timeout moved on) cannot insert it again: deleted, a sign-out
// during a page's load in another tab left the browser signed in, and a
// stolen cookie kept alive by one slow request after another outlived
// every sign-out. scs deletes the token "" of a session never stored.
func (s sessionStore) DeleteCtx(ctx context.Context, token string) error {
	if token == "" {
		return nil
	}
	return s.store.Bounded(ctx, func(ctx context.Context) error {
		return dbq.New(s.store.Pool).EndSession(ctx, dbq.EndSessionParams{Token: hashToken(token), Expiry: time.Now().Add(endedSessionKept)})
	})
}

// Find, Commit and Delete complete scs.Store; scs calls the Ctx methods.
func (s sessionStore) Find(token string) ([]byte, bool, error) {
	return s.FindCtx(context.Background(), token)
}

func (s sessionStore) Commit(token string, b []byte, expiry time.Time) error {
	return s.CommitCtx(context.Background(), token, b, expiry)
}

func (s sessionStore) Delete(token string) error { return s.DeleteCtx(context.Background(), token) }

// Handler serves the console: / and everything under /console/.
func (c *Console) Handler() http.Handler {
	// SECURITY: state-changing requests from other sites are refused (403):
	// Sec-Fetch-Site, else Origin against Host.
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.errorPage(w, r, apperr.New(apperr.Forbidden, "this request came from another site and was refused"))
	}))
	// SECURITY: no console request body is larger than a datasource's
	// upload and its form; bounded here, before anything parses one (Go's
	// multipart parser keeps up to 32 MiB in memory and writes the rest to
	// temporary files, without end). Forms are read at maxFormBytes
	// (readForms).
	return securityHeaders(c.Secure, http.MaxBytesHandler(c.sessions.LoadAndSave(cop.Handler(c.readForms(c.noteRoute(c.mux)))), maxBodyBytes))
}

// noteRoute names the request's route by the pattern of the console's mux
// that serves it ("GET /console/keys"), for the request log, its metrics
// and its span: the server's mux sees only "/console/", and the pattern
// this mux matches is set on a copy of the request the server never sees.
// Patterns are the console's own, so the label's values stay bounded.
func (c *Console) noteRoute(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if info := reqinfo.From(r.Context()); info != nil {
			if _, pattern := c.mux.Handler(r); pattern != "" {
				info.Route = pattern
			}
		}
		next.ServeHTTP(w, r)
	})
}

// readForms reads every posted form but a datasource's (its handler reads
// it at the API's limits: knowledge.ReadUpload, readTextForm) before its
// handler runs, at most maxFormBytes, multipart ones too: a handler's
// r.PostFormValue then sees the form, never a body it failed to read as
// empty fields, and never parses a multipart body of up to maxBodyBytes
// into memory itself (SECURITY: r.PostFormValue and r.FormValue would,
// with no bound of their own).
func (c *Console) readForms(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			if _, pattern := c.mux.Handler(r); pattern != uploadRoute {
				if err := readForm(w, r); err != nil {
					c.errorPage(w, r, err)
					return
				}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// uploadRoute is the one route whose body may be larger than
// maxFormBytes: a datasource's file, or its text (routes).
const uploadRoute = "POST /console/datastores/{id}/sources"

// maxBodyBytes bounds every console request's body: an upload of the
// largest file a datasource takes, with its form.
const maxBodyBytes = knowledge.MaxFileBytes + maxFormBytes

// shown is what the console shows of err: apperr.Public's message, code
// and field, but another organization's id as one that exists nowhere
// (SECURITY: the console does not confirm what others hold; the API says
// 403, SPEC §5.6). Every page, form error, flash and stream error of the
// console goes through it.
func shown(err error) *apperr.Error {
	return apperr.Public(db.AsMissing(err))
}

// securityHeaders sets the headers of every console response (HSTS when
// secure: the public URL is https), and a nonce for the page's scripts.
func securityHeaders(secure bool, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b := make([]byte, 16)
		_, _ = rand.Read(b)
		nonce := base64.RawStdEncoding.EncodeToString(b)
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self' 'nonce-"+nonce+"'; style-src 'self'; img-src 'self' data:; "+
			"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'")
		h.Set("Referrer-Policy", "same-origin")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		if secure {
			// Served over https (--public-url): browsers keep to https for
			// a year, so a session cookie never travels in clear.
			h.Set("Strict-Transport-Security", "max-age=31536000")
		}
		if !strings.HasPrefix(r.URL.Path, "/console/static/") {
			h.Set("Cache-Control", "no-store")
		}
		next.ServeHTTP(w, r.WithContext(templ.WithNonce(r.Context(), nonce)))
	})
}

// Session keys.
const (
	sessMember = "member"
	sessOrg    = "org"
	sessEpoch  = "epoch"
	sessFlash  = "flash"
)

// signIn starts a fresh session for m (a new token: no fixation).
func (c *Console) signIn(ctx context.Context, m *member.Member) error {
	if err := c.sessions.RenewToken(ctx); err != nil {
		return err
	}
	c.sessions.Put(ctx, sessMember, m.ID.String())
	c.sessions.Put(ctx, sessOrg, m.OrgID.String())
	c.sessions.Put(ctx, sessEpoch, int(m.SessionEpoch))
	return nil
}

// view is what every signed-in page knows: who, in which organization.
type view struct {
	Member *member.Member
	Org    *parleyv1.Organization
	Flash  string
	Path   string
}

type viewKey struct{}

// viewOf returns the request's view; behind signedIn it is always there.
func viewOf(ctx context.Context) *view {
	v, _ := ctx.Value(viewKey{}).(*view)
	return v
}

// signedIn admits members with at least role need. Signed out, a GET is
// sent to the sign-in page; a member whose role falls short gets 403.
// Requests then run with the member as their principal, so the services
// scope them to the member's organization (and RLS with them).
func (c *Console) signedIn(need member.Role, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		mid, _ := uuid.Parse(c.sessions.GetString(ctx, sessMember))
		oid, _ := uuid.Parse(c.sessions.GetString(ctx, sessOrg))
		var m *member.Member
		if mid != uuid.Nil && oid != uuid.Nil {
			var err error
			m, err = c.Members.Get(ctx, oid, mid)
			if err != nil && apperr.CodeOf(err) != apperr.NotFound {
				c.errorPage(w, r, err)
				return
			}
			// SECURITY: a password changed since this session began ends it.
			if m != nil && int(m.SessionEpoch) != c.sessions.GetInt(ctx, sessEpoch) {
				m = nil
			}
		}
		if m == nil { // signed out, removed, or the password changed since
			_ = c.sessions.Destroy(ctx)
			if r.Method == http.MethodGet {
				http.Redirect(w, r, "/console/signin?next="+url.QueryEscape(safeNext(r.URL.RequestURI())), http.StatusSeeOther)
				return
			}
			c.errorPage(w, r, apperr.New(apperr.Unauthenticated, "your session has ended; sign in again"))
			return
		}
		ctx = auth.WithPrincipal(ctx, m.Principal(""))
		org, err := c.Accounts.GetOrganization(ctx, &parleyv1.GetOrganizationRequest{})
		if err != nil {
			c.errorPage(w, r, err)
			return
		}
		ctx = auth.WithPrincipal(ctx, m.Principal(org.GetOrganization().GetPlan()))
		v := &view{Member: m, Org: org.GetOrganization(), Path: r.URL.Path, Flash: c.sessions.PopString(ctx, sessFlash)}
		r = r.WithContext(context.WithValue(ctx, viewKey{}, v))
		// SECURITY: the one role check of the console; services check scopes.
		if !m.Can(need) {
			c.errorPage(w, r, apperr.New(apperr.Forbidden, "your role (%s) does not allow this", m.Role))
			return
		}
		h(w, r)
	}
}

// flash shows msg once on the next page.
func (c *Console) flash(ctx context.Context, msg string) { c.sessions.Put(ctx, sessFlash, msg) }

// safeNext keeps a post-sign-in destination inside the console.
// A dot segment, even percent-encoded, is refused: a browser resolves
// /console/..//evil.example to //evil.example's path on this host, and
// %2e%2e as it resolves "..". So is any control character: a browser
// drops a tab from a URL (/console/.<tab>./ is /console/../), and
// http.Redirect, failing to parse such a URL, sends it as it is.
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/console/") || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\") ||
		strings.ContainsFunc(next, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return "/console/"
	}
	p, _, _ := strings.Cut(next, "?")
	p, err := url.PathUnescape(p)
	if err != nil {
		return "/console/"
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "." || seg == ".." {
			return "/console/"
		}
	}
	return next
}

// validate runs the schema's rules on a request, as the Connect
// interceptor and the REST paths do.
func (c *Console) validate(req proto.Message) error { return wire.Validate(c.Validator, req) }

// render writes a component with status.
func render(w http.ResponseWriter, r *http.Request, status int, c templ.Component) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	if err := c.Render(r.Context(), w); err != nil {
		if clientGone(r, err) {
			// Not the server's fault, and nothing to fix: a reader that
			// closed the tab or navigated away mid-page.
			slog.DebugContext(r.Context(), "console render: the client went away", "err", err)
			return
		}
		slog.ErrorContext(r.Context(), "console render", "err", err)
	}
}

// clientGone says whether a write failed because the client went away: the
// connection was closed or reset under it, or the request's context ended
// (the server cancels it when the connection goes).
func clientGone(r *http.Request, err error) bool {
	return errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, context.Canceled) || r.Context().Err() != nil
}

// errorPage shows err as a page (or, for htmx, a fragment), with the status
// the API would answer; internal errors are logged and shown generically.
func (c *Console) errorPage(w http.ResponseWriter, r *http.Request, err error) {
	pub := shown(err)
	status := apperr.Lookup(pub.Code).HTTPStatus
	if pub.Code == apperr.Internal {
		if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
			// The client went away while it waited (a sign-in for a
			// password check's slot, a query): nothing to fix.
			slog.DebugContext(r.Context(), "console: the client went away", "err", err, "path", r.URL.Path)
		} else {
			slog.ErrorContext(r.Context(), "console internal error", "err", err, "path", r.URL.Path)
		}
	}
	msg := pub.Message
	if r.Header.Get("HX-Request") == "true" {
		render(w, r, status, inlineError(msg))
		return
	}
	render(w, r, status, errorView(viewOf(r.Context()), status, msg))
}
