// Package plan names Parley's plans and orders them. Their request limits
// live in the database (table plans; enterprise limits per organization).
package plan

// The plans, lowest first.
const (
	Free       = "free"
	Starter    = "starter"
	Pro        = "pro"
	Enterprise = "enterprise"
)

var rank = map[string]int{Free: 1, Starter: 2, Pro: 3, Enterprise: 4}

// Valid reports whether p names a plan.
func Valid(p string) bool { _, ok := rank[p]; return ok }

// AtMost reports whether plan p is no higher than ceiling: an API key may be
// issued for its organization's plan or a lower one.
func AtMost(p, ceiling string) bool {
	rp, ok1 := rank[p]
	rc, ok2 := rank[ceiling]
	return ok1 && ok2 && rp <= rc
}

// Limits are the requests one API key may make.
type Limits struct {
	PerMinute int64
	PerDay    int64
}
