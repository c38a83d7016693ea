package auth

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/parleyhq/parley/backend/apperr"
	"github.com/parleyhq/parley/backend/metrics"
	"github.com/parleyhq/parley/backend/plan"
	"github.com/parleyhq/parley/backend/ratelimit"
	"github.com/parleyhq/parley/backend/reqinfo"
)

// Gate admits requests: authentication, then the key's rate limits, then its
// scope. A request refused for its scope still counts against the key.
type Gate struct {
	Auth   *Authenticator
	Limits *ratelimit.Limiter
	Now    func() time.Time
}

// Admission is the result of Admit: the principal, and the rate-limit state
// to report in response headers (also when the request is refused for it).
type Admission struct {
	Principal *Principal
	Rate      *ratelimit.Result
}

// Admit authenticates the Authorization header value, counts the request and
// checks that the key carries scope, or one of others (an operation more
// than one scope allows).
func (g *Gate) Admit(ctx context.Context, authorization string, scope Scope, others ...Scope) (Admission, error) {
	p, err := g.Auth.Authenticate(ctx, authorization)
	if err != nil {
		return Admission{}, err
	}
	reqinfo.SetCaller(ctx, p.OrgID, p.KeyID)
	res, err := g.Limits.Allow(ctx, p.KeyID.String(), p.Limits)
	if err != nil {
		return Admission{}, err
	}
	adm := Admission{Principal: p, Rate: &res}
	if !res.Allowed {
		metrics.RateLimited(p.Plan, "key")
		return adm, g.Refusal(res)
	}
	// SECURITY: the key must carry the scope of the operation.
	if !p.Has(scope) && !slices.ContainsFunc(others, p.Has) {
		return adm, Lacks(scope)
	}
	return adm, nil
}

// Lacks is the error for a key without scope, the operation's.
func Lacks(scope Scope) error {
	return apperr.New(apperr.Forbidden, "this API key lacks the %q scope", scope)
}

// AdmitVisitor counts one request of a caller without a key to a public
// resource (a public agent, a published form) against lim, the plan limits
// of the resource's organization (planName, for metrics; empty when not at
// hand): once for the client IP, then, once the IP is admitted, for the
// visitor (unless visitorID is empty), each per resource. It returns the
// state of the window that refused the request, or, when none did, of the
// one with the fewest requests left.
//
// SECURITY: the IP comes first. A visitor id is the caller's to choose, and
// every one counted makes two windows that the limiter keeps (a day's for
// a day): counted before the IP, a new id on every request, the IP's limit
// long spent, grew the limiter's memory (or Redis) without bound. Counted
// after, an address makes at most its own daily limit of them.
func (g *Gate) AdmitVisitor(ctx context.Context, resource uuid.UUID, visitorID, clientIP, planName string, lim plan.Limits) (*ratelimit.Result, error) {
	keys := make([]string, 0, 2)
	keys = append(keys, "pub:"+resource.String()+":ip:"+AddressKey(clientIP))
	if visitorID != "" {
		keys = append(keys, "pub:"+resource.String()+":v:"+visitorID)
	}
	var rate *ratelimit.Result
	for _, key := range keys {
		res, err := g.Limits.Allow(ctx, key, lim)
		if err != nil {
			return rate, err
		}
		if !res.Allowed {
			// SECURITY: the owner's plan bounds what its public resources
			// cost it, per visitor and per address.
			metrics.RateLimited(planName, "visitor")
			return &res, g.Refusal(res)
		}
		// Admitted: the window with the fewest requests left is the one
		// to report (the address's, shared by every visitor behind it, may
		// be nearer its end than the visitor's own).
		if rate == nil || res.Remaining < rate.Remaining {
			rate = &res
		}
	}
	return rate, nil
}

// Refusal is the error for a request res refused.
func (g *Gate) Refusal(res ratelimit.Result) error {
	now := time.Now
	if g.Now != nil {
		now = g.Now
	}
	retry := res.RetryAfter(now())
	return &apperr.Error{
		Code:       apperr.RateLimited,
		Message:    fmt.Sprintf("rate limit exceeded: %d requests allowed; retry after %d seconds", res.Limit, int64(retry/time.Second)),
		RetryAfter: retry,
	}
}

// AddressKey is what a client address is counted as: an IPv4 address
// itself, an IPv6 address its /64. SECURITY: one IPv6 subscriber is
// usually given a whole /64 and may use any address of it, so counting
// each address would let one client multiply its per-address limit at
// will.
func AddressKey(clientIP string) string {
	a, err := netip.ParseAddr(clientIP)
	if err != nil {
		return clientIP
	}
	a = a.Unmap()
	if a.Is4() {
		return a.String()
	}
	p, err := a.Prefix(64)
	if err != nil {
		return clientIP
	}
	return p.String()
}
