// Package access decides who gets into the API, in one place. Each
// service's (or method's) rule is declared in the schema as the option
// parley.v1.service_access / method_access (proto/parley/v1/access.proto);
// Interceptor applies it to Connect, gRPC and gRPC-Web calls and Middleware
// to the REST paths, both through auth.Gate (key, rate limits, scope).
// Methods open to public agents' visitors are admitted per agent by
// chat.Admitter, since only the agent tells who may reach it. Methods open
// to public forms let callers without a key through to the form service,
// which admits them per form; a call with a key is admitted here as any
// other. The console's
// members are admitted by the console's role check (console.signedIn).
//
// It must never let a method without a declared rule through.
package access

import (
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/parleyhq/parley/backend/auth"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
)

// Rule is who may call a method.
type Rule struct {
	// Scope is the API key scope needed.
	Scope auth.Scope
	// PublicAgents: callers without a key may reach a public agent; the
	// service admits each call for its agent.
	PublicAgents bool
	// PublicForms: callers without a key are let through to the service,
	// which admits each call for its (published) form; callers with a key
	// are admitted by the gate with Scope.
	PublicForms bool
}

// SelfAdmitted reports whether the service admits a call sent with
// authorization (the Authorization header, empty when none) itself.
func (r Rule) SelfAdmitted(authorization string) bool {
	return r.PublicAgents || (r.PublicForms && authorization == "")
}

var scopes = map[parleyv1.Scope]auth.Scope{
	parleyv1.Scope_SCOPE_ADMIN: auth.ScopeAdmin,
	parleyv1.Scope_SCOPE_CHAT:  auth.ScopeChat,
}

// For returns the rule of a procedure ("/parley.v1.AgentService/ListAgents"),
// read from the schema: the method's own, else its service's. A procedure
// without one is an error.
func For(procedure string) (Rule, error) {
	name := protoreflect.FullName(strings.ReplaceAll(strings.TrimPrefix(procedure, "/"), "/", "."))
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(name)
	if err != nil {
		return Rule{}, fmt.Errorf("access: unknown procedure %s", procedure)
	}
	m, ok := d.(protoreflect.MethodDescriptor)
	if !ok {
		return Rule{}, fmt.Errorf("access: %s is not a method", procedure)
	}
	a, _ := proto.GetExtension(m.Options(), parleyv1.E_MethodAccess).(*parleyv1.Access)
	if a == nil {
		svc := m.Parent().(protoreflect.ServiceDescriptor)
		a, _ = proto.GetExtension(svc.Options(), parleyv1.E_ServiceAccess).(*parleyv1.Access)
	}
	s, ok := scopes[a.GetScope()]
	if !ok {
		return Rule{}, fmt.Errorf("access: %s declares no access rule", procedure)
	}
	return Rule{Scope: s, PublicAgents: a.GetPublicAgents(), PublicForms: a.GetPublicForms()}, nil
}

// MustFor is For for rules the program is built on (REST routes naming
// their method): a missing rule is a programming error.
func MustFor(procedure string) Rule {
	r, err := For(procedure)
	if err != nil {
		panic(err)
	}
	return r
}
