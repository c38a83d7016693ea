// Package account is an organization's own account: its plan and usage
// (OrganizationService), its API keys (ApiKeyService), and the operator
// commands that create organizations and set enterprise limits.
package account

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/parleyhq/parley/backend/apikey"
	"github.com/parleyhq/parley/backend/apperr"
	"github.com/parleyhq/parley/backend/auth"
	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/backend/db/dbq"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/gen/parley/v1/parleyv1connect"
	"github.com/parleyhq/parley/backend/page"
	"github.com/parleyhq/parley/backend/plan"
	"github.com/parleyhq/parley/backend/ratelimit"
)

// Service implements ApiKeyService and OrganizationService.
type Service struct {
	store  *db.Store
	auth   *auth.Authenticator
	limits *ratelimit.Limiter
}

var (
	_ parleyv1connect.ApiKeyServiceHandler       = (*Service)(nil)
	_ parleyv1connect.OrganizationServiceHandler = (*Service)(nil)
)

// New returns the account services. authn is told of revocations so that they
// take effect on this instance at once; limits is read for usage.
func New(store *db.Store, authn *auth.Authenticator, limits *ratelimit.Limiter) *Service {
	return &Service{store: store, auth: authn, limits: limits}
}

// MaxKeys bounds an organization's working (not revoked, not expired)
// API keys issued through the API and the console.
const MaxKeys = 100

// CreateApiKey issues a key for the caller's organization.
func (s *Service) CreateApiKey(ctx context.Context, req *parleyv1.CreateApiKeyRequest) (*parleyv1.CreateApiKeyResponse, error) {
	p, err := auth.FromContext(ctx)
	if err != nil {
		return nil, err
	}
	var expires *time.Time
	if req.ExpireTime != nil {
		expires = ptr(req.GetExpireTime().AsTime())
	}
	var resp *parleyv1.CreateApiKeyResponse
	err = s.store.Tenant(ctx, p.OrgID, func(q *dbq.Queries) error {
		orgPlan, err := q.LockOrganizationPlan(ctx, p.OrgID)
		if err != nil {
			return db.OrgRow(err)
		}
		keyPlan := orgPlan
		if p.IsKey() && plan.AtMost(p.Plan, orgPlan) {
			keyPlan = p.Plan // a key's keys default to its own plan
		}
		if req.Plan != nil {
			keyPlan = req.GetPlan()
		}
		if expires, err = withinIssuer(p, orgPlan, keyPlan, req.GetScopes(), expires); err != nil {
			return err
		}
		// SECURITY: limits count per key: without a bound, an organization
		// multiplied its plan's by issuing keys (a free key issues 1,000 a
		// day, each with its own 10 a minute), and each key is a row
		// ListApiKeys returns and a count GetOrganization reads.
		if n, err := q.CountLiveKeys(ctx, p.OrgID); err != nil {
			return err
		} else if n >= MaxKeys {
			return apperr.New(apperr.FailedPrecondition, "an organization has at most %d working API keys; revoke one first", MaxKeys)
		}
		by, err := makerOf(ctx, q, p)
		if err != nil {
			return err
		}
		row, secret, err := issue(ctx, q, p.OrgID, orgPlan, req.GetName(), keyPlan, req.GetScopes(), expires, by)
		if err != nil {
			return err
		}
		resp = &parleyv1.CreateApiKeyResponse{ApiKey: keyToProto(row), Secret: secret}
		return nil
	})
	return resp, err
}

// withinIssuer bounds a key issued by another key: at most the issuer's
// scopes and plan, and expiring no later than it (at its expiry when none
// is asked), so that a key given for a while, or for one purpose, cannot
// leave behind a lasting or broader one. It returns the expiry to store.
// A console member (admin or owner) issues any key the organization's plan
// allows.
func withinIssuer(p *auth.Principal, orgPlan, keyPlan string, scopes []string, expires *time.Time) (*time.Time, error) {
	if !p.IsKey() {
		return expires, nil
	}
	// SECURITY: a key never issues one beyond itself.
	for _, s := range scopes {
		if !p.Has(auth.Scope(s)) {
			return nil, apperr.New(apperr.Forbidden, "scopes: this API key lacks the %s scope, so it cannot issue a key with it", s)
		}
	}
	// A plan above the organization's is issue's refusal (failed_precondition).
	if plan.AtMost(keyPlan, orgPlan) && !plan.AtMost(keyPlan, p.Plan) {
		return nil, apperr.New(apperr.Forbidden, "plan: %q is higher than this API key's plan %q", keyPlan, p.Plan)
	}
	if p.Expires != nil {
		if expires == nil {
			return p.Expires, nil
		}
		if expires.After(*p.Expires) {
			return nil, apperr.New(apperr.Forbidden, "expireTime: a key cannot issue one that outlives it (this key expires at %s)", p.Expires.UTC().Format(time.RFC3339))
		}
	}
	return expires, nil
}

// CommandLine is the maker of keys made by `parley admin`.
const CommandLine = "parley admin"

// maker is who made a key: created_by (a member's email, "API key <name>
// (<prefix>…)", CommandLine) and the member it descends from.
type maker struct{ createdBy, member string }

// commandLine is the maker of keys made by `parley admin`.
var commandLine = maker{createdBy: CommandLine}

// makerOf is the principal as a key's maker: the console member, or the
// issuing key, whose member the new key inherits. The issuing key is read
// again in the transaction, under the organization's lock that revocations
// take: a key revoked on another instance, still in this one's cache for
// up to auth.CacheTTL, issues nothing.
func makerOf(ctx context.Context, q *dbq.Queries, p *auth.Principal) (maker, error) {
	if !p.IsKey() {
		return maker{createdBy: p.Member, member: p.Member}, nil
	}
	k, err := q.APIKeyMaker(ctx, dbq.APIKeyMakerParams{OrgID: p.OrgID, ID: p.KeyID})
	if errors.Is(err, pgx.ErrNoRows) {
		// SECURITY: a key made now would outlive the revocation.
		return maker{}, apperr.New(apperr.Unauthenticated, "this API key was revoked, has expired or no longer exists")
	}
	if err != nil {
		return maker{}, err
	}
	return maker{createdBy: fmt.Sprintf("API key %s (%s…)", k.Name, k.DisplayPrefix), member: k.Member}, nil
}

// issue creates a key row and returns it with the key, which exists nowhere
// else from then on.
func issue(ctx context.Context, q *dbq.Queries, org uuid.UUID, orgPlan, name, keyPlan string, scopes []string, expires *time.Time, by maker) (dbq.ApiKey, string, error) {
	// SECURITY: per-plan issuance: a key's plan is never above its organization's.
	if !plan.AtMost(keyPlan, orgPlan) {
		return dbq.ApiKey{}, "", apperr.New(apperr.FailedPrecondition,
			"plan %q is higher than the organization's plan %q", keyPlan, orgPlan)
	}
	key, err := apikey.Generate()
	if err != nil {
		return dbq.ApiKey{}, "", err
	}
	id, err := uuid.NewV7()
	if err != nil {
		return dbq.ApiKey{}, "", err
	}
	h := key.Hash()
	row, err := q.CreateAPIKey(ctx, dbq.CreateAPIKeyParams{
		OrgID: org, ID: id, Name: name, KeyHash: h[:], DisplayPrefix: key.DisplayPrefix(),
		Plan: keyPlan, Scopes: scopes, ExpiresAt: expires, CreatedBy: by.createdBy, Member: by.member,
	})
	return row, key.String(), err
}

// MaxListLimit bounds a page of API keys; it is also the default, as for
// datastores and datasources.
const MaxListLimit = 100

// ListApiKeys lists a page of the caller's organization's keys, newest
// first. A cursor that is not one of a listing's is Invalid, naming
// "cursor".
//
// Decision: revoked keys stay in the listing, in their place by creation
// (revoke_time set), neither sorted last nor filtered out. The keyset is
// what never changes (creation time, id), as every paged listing's, so a
// key revoked between two pages is still listed exactly once; sorting
// revoked keys last would key on revoke_time, list such a key on two
// pages, and need a cursor of another shape than page's. Revoked keys
// still accumulate, but now cost a page, not the whole list; a filter can
// be added later without changing the cursor.
func (s *Service) ListApiKeys(ctx context.Context, req *parleyv1.ListApiKeysRequest) (*parleyv1.ListApiKeysResponse, error) {
	p, err := auth.FromContext(ctx)
	if err != nil {
		return nil, err
	}
	limit := page.Size(req.GetLimit(), MaxListLimit, MaxListLimit)
	beforeTime, beforeID, err := page.After(req.GetCursor())
	if err != nil {
		return nil, err
	}
	resp := &parleyv1.ListApiKeysResponse{ApiKeys: []*parleyv1.ApiKey{}}
	err = s.store.Tenant(ctx, p.OrgID, func(q *dbq.Queries) error {
		// SECURITY: RLS and the org_id keep the page to the caller's
		// organization; a cursor naming another's key only places it.
		rows, err := q.PageAPIKeys(ctx, dbq.PageAPIKeysParams{OrgID: p.OrgID, BeforeTime: beforeTime, BeforeID: beforeID, MaxRows: limit + 1})
		if err != nil {
			return err
		}
		rows, resp.NextCursor = page.Cut(rows, limit, func(k dbq.ApiKey) (time.Time, string) { return k.CreatedAt, k.ID.String() })
		for _, r := range rows {
			resp.ApiKeys = append(resp.ApiKeys, keyToProto(r))
		}
		return nil
	})
	return resp, err
}

// RevokeApiKey revokes one of the caller's keys.
func (s *Service) RevokeApiKey(ctx context.Context, req *parleyv1.RevokeApiKeyRequest) (*parleyv1.RevokeApiKeyResponse, error) {
	p, err := auth.FromContext(ctx)
	if err != nil {
		return nil, err
	}
	id, err := uuid.Parse(req.GetId())
	if err != nil {
		return nil, apperr.New(apperr.NotFound, "API key %q not found", req.GetId())
	}
	var resp *parleyv1.RevokeApiKeyResponse
	err = s.store.Tenant(ctx, p.OrgID, func(q *dbq.Queries) error {
		// Revocations take turns: under READ COMMITTED two of the last two
		// admin keys would each count the other as live, and both go.
		if _, err := q.LockOrganization(ctx, p.OrgID); err != nil {
			return db.OrgRow(err)
		}
		before, err := q.CountLiveAdminKeys(ctx, p.OrgID)
		if err != nil {
			return err
		}
		row, err := q.RevokeAPIKey(ctx, dbq.RevokeAPIKeyParams{OrgID: p.OrgID, ID: id})
		if errors.Is(err, pgx.ErrNoRows) {
			return db.Missing(ctx, q, "api_key", "API key", id)
		}
		if err != nil {
			return err
		}
		// An organization keeps a key that can manage it: revoking the last
		// one would leave only the console (and an operator) to issue keys.
		// A key that no longer worked (expired, revoked already) takes
		// nothing with it, even from an organization left with none.
		if slices.Contains(row.Scopes, string(auth.ScopeAdmin)) {
			n, err := q.CountLiveAdminKeys(ctx, p.OrgID)
			if err != nil {
				return err
			}
			if n == 0 && before > 0 {
				return apperr.New(apperr.FailedPrecondition, "this is the organization's last admin key: create another admin key first")
			}
		}
		resp = &parleyv1.RevokeApiKeyResponse{ApiKey: keyToProto(row)}
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.auth.Forget(id)
	return resp, nil
}

// GetOrganization returns the caller's organization, limits and usage.
func (s *Service) GetOrganization(ctx context.Context, _ *parleyv1.GetOrganizationRequest) (*parleyv1.GetOrganizationResponse, error) {
	p, err := auth.FromContext(ctx)
	if err != nil {
		return nil, err
	}
	resp := &parleyv1.GetOrganizationResponse{Usage: []*parleyv1.KeyUsage{}}
	var keys []dbq.ApiKey
	var plans []dbq.Plan
	err = s.store.Tenant(ctx, p.OrgID, func(q *dbq.Queries) error {
		org, err := q.GetOrganization(ctx, p.OrgID)
		if err != nil {
			return db.OrgRow(err)
		}
		resp.Organization = &parleyv1.Organization{
			Id: org.ID.String(), Name: org.Name, Plan: org.Plan, CreateTime: timestamppb.New(org.CreatedAt),
			Limits:    &parleyv1.Limits{RequestsPerMinute: int64(org.RequestsPerMinute), RequestsPerDay: int64(org.RequestsPerDay)},
			Knowledge: &parleyv1.KnowledgeQuota{Chunks: org.Chunks, MaxChunks: org.KnowledgeChunks},
		}
		if resp.AgentCount, err = q.CountAgents(ctx, p.OrgID); err != nil {
			return err
		}
		if keys, err = q.ListWorkingAPIKeys(ctx, p.OrgID); err != nil {
			return err
		}
		plans, err = q.ListPlans(ctx)
		return err
	})
	if err != nil {
		return nil, err
	}
	for _, k := range keys {
		lim := limitsFor(k.Plan, resp.Organization.Plan, plans, resp.Organization.Limits)
		u, err := s.limits.Peek(ctx, k.ID.String(), lim)
		if err != nil {
			return nil, err
		}
		resp.Usage = append(resp.Usage, &parleyv1.KeyUsage{
			ApiKeyId: k.ID.String(), Plan: k.Plan,
			Limits:             &parleyv1.Limits{RequestsPerMinute: lim.PerMinute, RequestsPerDay: lim.PerDay},
			RequestsThisMinute: u.Minute, RequestsToday: u.Day,
		})
	}
	return resp, nil
}

// limitsFor mirrors GetAPIKeyByHash: enterprise keys take the organization's
// limits, the others their plan's, within an enterprise organization's.
func limitsFor(keyPlan, orgPlan string, plans []dbq.Plan, org *parleyv1.Limits) plan.Limits {
	if keyPlan == plan.Enterprise {
		return plan.Limits{PerMinute: org.RequestsPerMinute, PerDay: org.RequestsPerDay}
	}
	for _, p := range plans {
		if p.ID == keyPlan {
			lim := plan.Limits{PerMinute: int64(p.RequestsPerMinute), PerDay: int64(p.RequestsPerDay)}
			if orgPlan == plan.Enterprise {
				lim = plan.Limits{PerMinute: min(lim.PerMinute, org.RequestsPerMinute), PerDay: min(lim.PerDay, org.RequestsPerDay)}
			}
			return lim
		}
	}
	return plan.Limits{}
}

// Bootstrap creates an organization and its first key, with the admin and
// chat scopes. It is the operator's first-run path (parley admin bootstrap).
func Bootstrap(ctx context.Context, store *db.Store, name, orgPlan string) (orgID uuid.UUID, key string, err error) {
	if !plan.Valid(orgPlan) {
		return uuid.Nil, "", fmt.Errorf("unknown plan %q (free, starter, pro or enterprise)", orgPlan)
	}
	if !isText(name, 200) {
		return uuid.Nil, "", errOrgName
	}
	orgID, err = uuid.NewV7()
	if err != nil {
		return uuid.Nil, "", err
	}
	// The command line's transaction: the database lets no other make an
	// organization (migration 00026).
	err = store.CommandLine(ctx, orgID, func(q *dbq.Queries) error {
		if _, err := q.CreateOrganization(ctx, dbq.CreateOrganizationParams{ID: orgID, Name: name, Plan: orgPlan}); err != nil {
			return err
		}
		_, key, err = issue(ctx, q, orgID, orgPlan, "bootstrap", orgPlan,
			[]string{string(auth.ScopeAdmin), string(auth.ScopeChat)}, nil, commandLine)
		return err
	})
	return orgID, key, err
}

// isText says s is a name a text column holds and a person reads: 1 to
// most characters of UTF-8, not blank, without NUL (which Postgres
// refuses). A name's length is counted in characters, not bytes.
func isText(s string, most int) bool {
	return strings.TrimSpace(s) != "" && utf8.ValidString(s) && utf8.RuneCountInString(s) <= most && !strings.ContainsRune(s, 0)
}

// errOrgName refuses an organization's name (Bootstrap): with NUL it
// was a raw database error, and a 100-character name in a script of
// 3-byte characters was "too long".
var errOrgName = errors.New("the organization name must be 1 to 200 characters of text, not blank")

// CheckOrgName holds an organization's name from the command line to
// Bootstrap's rule, before the database is opened.
func CheckOrgName(name string) error {
	if !isText(name, 200) {
		return errOrgName
	}
	return nil
}

// CheckNewKey holds a key's name and scopes from the command line to the
// API's rules (CreateApiKeyRequest's, which it does not pass through): a
// name of 1 to 100 characters that is not blank, admin and/or chat, each
// once.
func CheckNewKey(name string, scopes []string) error {
	if !isText(name, 100) {
		return apperr.InvalidField("name", "must be 1 to 100 characters of text, not blank")
	}
	if len(scopes) == 0 {
		return apperr.InvalidField("scopes", "name at least one scope")
	}
	for i, sc := range scopes {
		if sc != string(auth.ScopeAdmin) && sc != string(auth.ScopeChat) {
			return apperr.InvalidField("scopes", "%q is not a scope: use admin and/or chat", sc)
		}
		if slices.Contains(scopes[:i], sc) {
			return apperr.InvalidField("scopes", "%q is named twice", sc)
		}
	}
	return nil
}

// CreateKey issues a key for an organization from the command line
// (parley admin create-key): the way back in for an organization whose keys
// are all gone.
func CreateKey(ctx context.Context, store *db.Store, org uuid.UUID, name, keyPlan string, scopes []string) (string, error) {
	if err := CheckNewKey(name, scopes); err != nil {
		return "", err
	}
	var secret string
	err := store.Tenant(ctx, org, func(q *dbq.Queries) error {
		orgPlan, err := q.LockOrganizationPlan(ctx, org)
		if errors.Is(err, pgx.ErrNoRows) {
			return apperr.New(apperr.NotFound, "organization %s not found", org)
		}
		if err != nil {
			return err
		}
		if keyPlan == "" {
			keyPlan = orgPlan
		}
		_, secret, err = issue(ctx, q, org, orgPlan, name, keyPlan, scopes, nil, commandLine)
		return err
	})
	return secret, err
}

// SetLimits sets an enterprise organization's limits (parley admin set-limits).
func SetLimits(ctx context.Context, store *db.Store, org uuid.UUID, lim plan.Limits) error {
	if lim.PerMinute <= 0 || lim.PerDay <= 0 || lim.PerMinute > 1<<31-1 || lim.PerDay > 1<<31-1 {
		return errors.New("limits must be positive 32-bit numbers")
	}
	if lim.PerDay < lim.PerMinute {
		return errors.New("the limit per day must be at least the limit per minute")
	}
	// The command line's transaction: the database lets no other set an
	// organization's limits (migration 00026).
	return store.CommandLine(ctx, org, func(q *dbq.Queries) error {
		o, err := q.GetOrganization(ctx, org)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("no organization %s", org)
		}
		if err != nil {
			return err
		}
		if o.Plan != plan.Enterprise {
			return fmt.Errorf("organization %s is on the %s plan; only enterprise limits are set per organization", org, o.Plan)
		}
		pm, pd := int32(lim.PerMinute), int32(lim.PerDay)
		_, err = q.SetOrganizationLimits(ctx, dbq.SetOrganizationLimitsParams{ID: org, RequestsPerMinute: &pm, RequestsPerDay: &pd})
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("organization %s left the enterprise plan meanwhile; only enterprise limits are set per organization", org)
		}
		return err
	})
}

func keyToProto(k dbq.ApiKey) *parleyv1.ApiKey {
	out := &parleyv1.ApiKey{
		Id: k.ID.String(), Name: k.Name, DisplayPrefix: k.DisplayPrefix, Plan: k.Plan, Scopes: k.Scopes,
		CreateTime: timestamppb.New(k.CreatedAt), CreatedBy: k.CreatedBy,
	}
	if k.ExpiresAt != nil {
		out.ExpireTime = timestamppb.New(*k.ExpiresAt)
	}
	if k.LastUsedAt != nil {
		out.LastUsedTime = timestamppb.New(*k.LastUsedAt)
	}
	if k.RevokedAt != nil {
		out.RevokeTime = timestamppb.New(*k.RevokedAt)
	}
	return out
}

func ptr[T any](v T) *T { return &v }

// Plan is one plan of the catalog with its standard limits.
type Plan struct {
	Name   string
	Limits plan.Limits
	// KnowledgeChunks is how many chunks its organizations' datastores may
	// hold.
	KnowledgeChunks int64
}

// Plans returns the plan catalog, lowest first, as the database holds it
// (an enterprise organization's own limits are its Organization's).
func (s *Service) Plans(ctx context.Context) ([]Plan, error) {
	var rows []dbq.Plan
	// Read outside the Store (the catalog is no tenant's), bounded as a
	// Store transaction is.
	ctx, cancel := context.WithTimeout(ctx, db.DefaultTimeout)
	defer cancel()
	err := pgx.BeginFunc(ctx, s.store.Pool, func(tx pgx.Tx) (err error) {
		rows, err = dbq.New(tx).ListPlans(ctx)
		return err
	})
	if err != nil {
		return nil, err
	}
	var out []Plan
	for _, name := range []string{plan.Free, plan.Starter, plan.Pro, plan.Enterprise} {
		for _, r := range rows {
			if r.ID == name {
				out = append(out, Plan{
					Name: name, Limits: plan.Limits{PerMinute: int64(r.RequestsPerMinute), PerDay: int64(r.RequestsPerDay)},
					KnowledgeChunks: r.KnowledgeChunks,
				})
			}
		}
	}
	return out, nil
}
