package access

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/parleyhq/parley/backend/auth"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/gen/parley/v1/parleyv1connect"
)

// Every method of every service in the schema declares who may call it: a
// new RPC without a rule fails here before it can be served.
func TestEveryMethodHasARule(t *testing.T) {
	t.Parallel()
	_ = parleyv1.File_parley_v1_access_proto
	methods := 0
	protoregistry.GlobalFiles.RangeFilesByPackage("parley.v1", func(fd protoreflect.FileDescriptor) bool {
		for i := range fd.Services().Len() {
			svc := fd.Services().Get(i)
			for j := range svc.Methods().Len() {
				m := svc.Methods().Get(j)
				_, err := For("/" + string(svc.FullName()) + "/" + string(m.Name()))
				require.NoError(t, err)
				methods++
			}
		}
		return true
	})
	require.GreaterOrEqual(t, methods, 23)
}

func TestRules(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		procedure string
		want      Rule
	}{
		{parleyv1connect.AgentServiceCreateAgentProcedure, Rule{Scope: auth.ScopeAdmin}},
		{parleyv1connect.ApiKeyServiceRevokeApiKeyProcedure, Rule{Scope: auth.ScopeAdmin}},
		{parleyv1connect.OrganizationServiceGetOrganizationProcedure, Rule{Scope: auth.ScopeAdmin}},
		{parleyv1connect.DatastoreServiceQueryProcedure, Rule{Scope: auth.ScopeAdmin}},
		{parleyv1connect.ChatServiceChatStreamProcedure, Rule{Scope: auth.ScopeChat, PublicAgents: true}},
		{parleyv1connect.ConversationServiceListConversationsProcedure, Rule{Scope: auth.ScopeChat, PublicAgents: true}},
		{parleyv1connect.FormServiceCreateFormProcedure, Rule{Scope: auth.ScopeAdmin}},
		{parleyv1connect.FormServiceListSubmissionsProcedure, Rule{Scope: auth.ScopeAdmin}},
		{parleyv1connect.FormServiceGetFormProcedure, Rule{Scope: auth.ScopeAdmin, PublicForms: true}},
		{parleyv1connect.FormServiceSubmitFormProcedure, Rule{Scope: auth.ScopeChat, PublicForms: true}},
		{parleyv1connect.ConversationServiceUpdateConversationProcedure, Rule{Scope: auth.ScopeChat, PublicAgents: true}},
		{parleyv1connect.ConversationServiceWatchConversationProcedure, Rule{Scope: auth.ScopeChat, PublicAgents: true}},
		{parleyv1connect.ConversationServicePostMessageProcedure, Rule{Scope: auth.ScopeAdmin}},
	} {
		got, err := For(tc.procedure)
		require.NoError(t, err, tc.procedure)
		require.Equal(t, tc.want, got, tc.procedure)
	}
	for _, bad := range []string{"/parley.v1.AgentService/Nope", "/nope.Service/X", "/parley.v1.Agent", "", "/google.protobuf.Empty/X"} {
		_, err := For(bad)
		require.Error(t, err, bad)
	}
	require.Panics(t, func() { MustFor("/parley.v1.AgentService/Nope") })
}

// Who the service admits itself: public agents' callers always, public
// forms' only when they send no key (a key is the gate's to check).
func TestSelfAdmitted(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		rule          Rule
		authorization string
		want          bool
	}{
		{Rule{Scope: auth.ScopeAdmin}, "", false},
		{Rule{Scope: auth.ScopeAdmin}, "Bearer x", false},
		{Rule{Scope: auth.ScopeChat, PublicAgents: true}, "", true},
		{Rule{Scope: auth.ScopeChat, PublicAgents: true}, "Bearer x", true},
		{Rule{Scope: auth.ScopeChat, PublicForms: true}, "", true},
		{Rule{Scope: auth.ScopeChat, PublicForms: true}, "Bearer x", false},
		{Rule{Scope: auth.ScopeChat, PublicForms: true}, "Basic x", false},
	} {
		if got := tc.rule.SelfAdmitted(tc.authorization); got != tc.want {
			t.Errorf("%+v.SelfAdmitted(%q) = %v, want %v", tc.rule, tc.authorization, got, tc.want)
		}
	}
}
