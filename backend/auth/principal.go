// Package auth turns an `Authorization: Bearer <key>` header into a Principal
// (the organization, key, plan and scopes a request acts with) and admits or
// refuses the request against its scope and its plan's rate limits. Connect
// and the legacy REST paths both call Gate.Admit: one code path.
//
// It must never log or store a key; only its SHA-256 leaves this package.
package auth

import (
	"context"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/parleyhq/parley/backend/apperr"
	"github.com/parleyhq/parley/backend/plan"
	"github.com/parleyhq/parley/backend/reqinfo"
)

// Scope is a permission carried by an API key.
type Scope string

// The scopes.
const (
	// ScopeAdmin manages agents, keys and the organization.
	ScopeAdmin Scope = "admin"
	// ScopeChat chats with agents and lists their conversations.
	ScopeChat Scope = "chat"
)

// Principal is who a request acts as.
type Principal struct {
	OrgID  uuid.UUID
	KeyID  uuid.UUID
	Plan   string
	Scopes []string
	Limits plan.Limits
	// Expires is when the principal's key expires; nil for a key that
	// does not, and for a console member.
	Expires *time.Time
	// Member is the console member's email; empty for an API key.
	Member string
}

// IsKey reports whether the principal is an API key (a console member's
// principal has no key).
func (p *Principal) IsKey() bool { return p.KeyID != uuid.Nil }

// Has reports whether the principal carries scope s.
func (p *Principal) Has(s Scope) bool { return slices.Contains(p.Scopes, string(s)) }

type principalKey struct{}

// WithPrincipal returns ctx carrying p (and notes p's organization and key
// for the request's log line).
func WithPrincipal(ctx context.Context, p *Principal) context.Context {
	if p != nil {
		reqinfo.SetCaller(ctx, p.OrgID, p.KeyID)
	}
	return context.WithValue(ctx, principalKey{}, p)
}

// FromContext returns the request's principal. Handlers behind the gate
// always have one; without it they must refuse, never guess an organization.
func FromContext(ctx context.Context) (*Principal, error) {
	p, ok := ctx.Value(principalKey{}).(*Principal)
	if !ok || p == nil {
		return nil, apperr.New(apperr.Unauthenticated, "missing API key")
	}
	return p, nil
}
