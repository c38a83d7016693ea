package agent_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	validatepb "buf.build/gen/go/bufbuild/protovalidate/protocolbuffers/go/buf/validate"
	"buf.build/go/protovalidate"
	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/gen/parley/v1/parleyv1connect"
	"github.com/parleyhq/parley/backend/testenv"
)

// agentAPI is AgentService as one protocol client sees it.
type agentAPI interface {
	CreateAgent(context.Context, *parleyv1.CreateAgentRequest) (*parleyv1.CreateAgentResponse, error)
	GetAgent(context.Context, *parleyv1.GetAgentRequest) (*parleyv1.GetAgentResponse, error)
	ListAgents(context.Context, *parleyv1.ListAgentsRequest) (*parleyv1.ListAgentsResponse, error)
	UpdateAgent(context.Context, *parleyv1.UpdateAgentRequest) (*parleyv1.UpdateAgentResponse, error)
	DeleteAgent(context.Context, *parleyv1.DeleteAgentRequest) (*parleyv1.DeleteAgentResponse, error)
}

// grpcAgents calls AgentService with grpc-go, an implementation independent
// of connect-go.
type grpcAgents struct {
	conn *grpc.ClientConn
	key  string
}

func (g grpcAgents) call(ctx context.Context, method string, req, resp proto.Message) error {
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+g.key)
	return g.conn.Invoke(ctx, "/parley.v1.AgentService/"+method, req, resp)
}

func (g grpcAgents) CreateAgent(ctx context.Context, r *parleyv1.CreateAgentRequest) (*parleyv1.CreateAgentResponse, error) {
	out := new(parleyv1.CreateAgentResponse)
	return out, g.call(ctx, "CreateAgent", r, out)
}

func (g grpcAgents) GetAgent(ctx context.Context, r *parleyv1.GetAgentRequest) (*parleyv1.GetAgentResponse, error) {
	out := new(parleyv1.GetAgentResponse)
	return out, g.call(ctx, "GetAgent", r, out)
}

func (g grpcAgents) ListAgents(ctx context.Context, r *parleyv1.ListAgentsRequest) (*parleyv1.ListAgentsResponse, error) {
	out := new(parleyv1.ListAgentsResponse)
	return out, g.call(ctx, "ListAgents", r, out)
}

func (g grpcAgents) UpdateAgent(ctx context.Context, r *parleyv1.UpdateAgentRequest) (*parleyv1.UpdateAgentResponse, error) {
	out := new(parleyv1.UpdateAgentResponse)
	return out, g.call(ctx, "UpdateAgent", r, out)
}

func (g grpcAgents) DeleteAgent(ctx context.Context, r *parleyv1.DeleteAgentRequest) (*parleyv1.DeleteAgentResponse, error) {
	out := new(parleyv1.DeleteAgentResponse)
	return out, g.call(ctx, "DeleteAgent", r, out)
}

// code is the status code of an error from any of the clients.
func code(err error) connect.Code {
	if err == nil {
		return 0
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Code()
	}
	if s, ok := status.FromError(err); ok {
		return connect.Code(s.Code())
	}
	return connect.CodeUnknown
}

// violatedFields lists the fields named by a validation error's details.
func violatedFields(t *testing.T, err error) []string {
	t.Helper()
	var ce *connect.Error
	require.ErrorAs(t, err, &ce)
	var fields []string
	for _, d := range ce.Details() {
		v, derr := d.Value()
		require.NoError(t, derr)
		if vs, ok := v.(*validatepb.Violations); ok {
			for _, viol := range vs.GetViolations() {
				fields = append(fields, protovalidate.FieldPathString(viol.GetField()))
			}
		}
	}
	return fields
}

type protocol struct {
	name   string
	client func(e *testenv.Env, key string) agentAPI
}

func protocols(t *testing.T) []protocol {
	return []protocol{
		{"connect", func(e *testenv.Env, key string) agentAPI {
			return parleyv1connect.NewAgentServiceClient(http.DefaultClient, e.URL, connect.WithInterceptors(testenv.Bearer(key)))
		}},
		{"grpc-web", func(e *testenv.Env, key string) agentAPI {
			return parleyv1connect.NewAgentServiceClient(http.DefaultClient, e.URL, connect.WithGRPCWeb(), connect.WithInterceptors(testenv.Bearer(key)))
		}},
		{"grpc (connect-go over h2c)", func(e *testenv.Env, key string) agentAPI {
			return parleyv1connect.NewAgentServiceClient(testenv.H2C(), e.URL, connect.WithGRPC(), connect.WithInterceptors(testenv.Bearer(key)))
		}},
		{"grpc (grpc-go)", func(e *testenv.Env, key string) agentAPI {
			return grpcAgents{conn: testenv.GRPC(t, e.URL), key: key}
		}},
	}
}

func TestAgentCRUDOverRPCProtocols(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	ctx := context.Background()
	for _, p := range protocols(t) {
		t.Run(p.name, func(t *testing.T) {
			c := p.client(e, e.A.Key)
			created, err := c.CreateAgent(ctx, &parleyv1.CreateAgentRequest{
				Name: "Support " + p.name, Instructions: "Answer politely.", Tools: []string{"web_search", "lead_capture"},
			})
			require.NoError(t, err)
			a := created.GetAgent()
			require.NotEmpty(t, a.GetId())
			if got, want := a.GetModel(), "gpt-4o-mini"; got != want {
				t.Fatalf("default model = %q, want %q", got, want)
			}
			if got, want := a.GetTemperature(), 0.7; got != want {
				t.Fatalf("default temperature = %v, want %v", got, want)
			}
			require.Equal(t, "private", a.GetVisibility())
			require.Equal(t, "active", a.GetStatus())

			got, err := c.GetAgent(ctx, &parleyv1.GetAgentRequest{Id: a.GetId()})
			require.NoError(t, err)
			require.Equal(t, "Answer politely.", got.GetAgent().GetInstructions())
			require.Equal(t, []string{"web_search", "lead_capture"}, got.GetAgent().GetTools())
			require.NotNil(t, got.GetAgent().GetStats())

			list, err := c.ListAgents(ctx, &parleyv1.ListAgentsRequest{Limit: 100})
			require.NoError(t, err)
			require.Contains(t, ids(list.GetAgents()), a.GetId())
			require.EqualValues(t, len(list.GetAgents()), list.GetTotal())

			temp := 0.2
			upd, err := c.UpdateAgent(ctx, &parleyv1.UpdateAgentRequest{
				Id: a.GetId(), Temperature: &temp, Tools: nil,
				UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"temperature", "tools"}},
			})
			require.NoError(t, err)
			require.Equal(t, 0.2, upd.GetAgent().GetTemperature())
			require.Empty(t, upd.GetAgent().GetTools())
			require.Equal(t, a.GetName(), upd.GetAgent().GetName(), "a field outside the mask changed")

			_, err = c.DeleteAgent(ctx, &parleyv1.DeleteAgentRequest{Id: a.GetId()})
			require.NoError(t, err)
			_, err = c.GetAgent(ctx, &parleyv1.GetAgentRequest{Id: a.GetId()})
			require.Equal(t, connect.CodeNotFound, code(err), "get after delete: %v", err)
		})
	}
}

func ids(agents []*parleyv1.Agent) []string {
	out := make([]string, len(agents))
	for i, a := range agents {
		out[i] = a.GetId()
	}
	return out
}

func TestConnectRefusesEachSpecRuleNamingTheField(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	c := parleyv1connect.NewAgentServiceClient(http.DefaultClient, e.URL, connect.WithInterceptors(testenv.Bearer(e.A.Key)))
	ctx := context.Background()
	str := func(s string) *string { return &s }
	num := func(f float64) *float64 { return &f }
	valid := func() *parleyv1.CreateAgentRequest {
		return &parleyv1.CreateAgentRequest{Name: "n", Instructions: "i"}
	}
	cases := []struct {
		name      string
		mutate    func(r *parleyv1.CreateAgentRequest)
		wantField string
	}{
		{"name missing", func(r *parleyv1.CreateAgentRequest) { r.Name = "" }, "name"},
		{"name blank", func(r *parleyv1.CreateAgentRequest) { r.Name = "   " }, "name"},
		{"name too long", func(r *parleyv1.CreateAgentRequest) { r.Name = strings.Repeat("n", 201) }, "name"},
		{"instructions missing", func(r *parleyv1.CreateAgentRequest) { r.Instructions = "" }, "instructions"},
		{"instructions too long", func(r *parleyv1.CreateAgentRequest) { r.Instructions = strings.Repeat("i", 20001) }, "instructions"},
		{"description too long", func(r *parleyv1.CreateAgentRequest) { r.Description = strings.Repeat("d", 1001) }, "description"},
		{"unknown model", func(r *parleyv1.CreateAgentRequest) { r.Model = str("gpt-5") }, "model"},
		{"gemini is chat-only", func(r *parleyv1.CreateAgentRequest) { r.Model = str("gemini-1-5-pro") }, "model"},
		{"temperature above 1", func(r *parleyv1.CreateAgentRequest) { r.Temperature = num(1.01) }, "temperature"},
		{"temperature below 0", func(r *parleyv1.CreateAgentRequest) { r.Temperature = num(-0.1) }, "temperature"},
		{"unknown tool", func(r *parleyv1.CreateAgentRequest) { r.Tools = []string{"web_search", "shell"} }, "tools[1]"},
		{"duplicate tool", func(r *parleyv1.CreateAgentRequest) { r.Tools = []string{"web_search", "web_search"} }, "tools"},
		{"unknown visibility", func(r *parleyv1.CreateAgentRequest) { r.Visibility = str("secret") }, "visibility"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := valid()
			tc.mutate(r)
			_, err := c.CreateAgent(ctx, r)
			if got, want := code(err), connect.CodeInvalidArgument; got != want {
				t.Fatalf("code = %v, want %v (%v)", got, want, err)
			}
			require.Contains(t, violatedFields(t, err), tc.wantField)
		})
	}
	// The boundaries themselves are allowed.
	r := valid()
	r.Temperature, r.Name = num(1), strings.Repeat("n", 200)
	_, err := c.CreateAgent(ctx, r)
	require.NoError(t, err)
	r.Temperature = num(0)
	_, err = c.CreateAgent(ctx, r)
	require.NoError(t, err)

	t.Run("update mask", func(t *testing.T) {
		a, err := c.CreateAgent(ctx, valid())
		require.NoError(t, err)
		id := a.GetAgent().GetId()
		_, err = c.UpdateAgent(ctx, &parleyv1.UpdateAgentRequest{Id: id, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"id"}}})
		require.Equal(t, connect.CodeInvalidArgument, code(err))
		require.Contains(t, violatedFields(t, err), "update_mask")
		_, err = c.UpdateAgent(ctx, &parleyv1.UpdateAgentRequest{Id: id})
		require.Equal(t, connect.CodeInvalidArgument, code(err))
		// A masked field with no value would blank it: refused, nothing changes.
		_, err = c.UpdateAgent(ctx, &parleyv1.UpdateAgentRequest{Id: id, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"name"}}})
		require.Equal(t, connect.CodeInvalidArgument, code(err))
		got, err := c.GetAgent(ctx, &parleyv1.GetAgentRequest{Id: id})
		require.NoError(t, err)
		require.Equal(t, "n", got.GetAgent().GetName())
	})
}

// Stats come from real conversation and message rows, and deleting an agent
// removes everything tied to it.
func TestStatsAndDeleteCascade(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	ctx := context.Background()
	c := parleyv1connect.NewAgentServiceClient(http.DefaultClient, e.URL, connect.WithInterceptors(testenv.Bearer(e.A.Key)))
	a, err := c.CreateAgent(ctx, &parleyv1.CreateAgentRequest{Name: "n", Instructions: "i"})
	require.NoError(t, err)
	id := a.GetAgent().GetId()

	// The chat issue writes these rows; here they are written directly.
	tx, err := e.App.Pool.Begin(ctx)
	require.NoError(t, err)
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{"SELECT set_config('app.org_id', $1, true)", []any{e.A.ID.String()}},
		// Rated 5 and 2; c3 is not rated.
		{"INSERT INTO conversations (org_id, id, agent_id, rating) VALUES ($1, 'c1', $2, 5), ($1, 'c2', $2, 2), ($1, 'c3', $2, NULL)", []any{e.A.ID, id}},
		{`INSERT INTO messages (org_id, id, conversation_id, role, content) VALUES
			($1, gen_random_uuid(), 'c1', 'user', 'hi'),
			($1, gen_random_uuid(), 'c1', 'assistant', 'hello'),
			($1, gen_random_uuid(), 'c2', 'user', 'yo'),
			($1, gen_random_uuid(), 'c2', 'assistant', 'hey')`, []any{e.A.ID}},
	} {
		_, err := tx.Exec(ctx, q.sql, q.args...)
		require.NoError(t, err)
	}
	require.NoError(t, tx.Commit(ctx))

	got, err := c.GetAgent(ctx, &parleyv1.GetAgentRequest{Id: id})
	require.NoError(t, err)
	st := got.GetAgent().GetStats()
	require.EqualValues(t, 3, st.GetTotalConversations())
	require.EqualValues(t, 4, st.GetTotalMessages())
	require.InDelta(t, 3.5, st.GetAverageRating(), 1e-9)

	_, err = c.DeleteAgent(ctx, &parleyv1.DeleteAgentRequest{Id: id})
	require.NoError(t, err)
	tx, err = e.App.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	_, err = tx.Exec(ctx, "SELECT set_config('app.org_id', $1, true)", e.A.ID.String())
	require.NoError(t, err)
	var convs, msgs, events int
	require.NoError(t, tx.QueryRow(ctx, "SELECT (SELECT count(*) FROM conversations), (SELECT count(*) FROM messages), (SELECT count(*) FROM conversation_events)").Scan(&convs, &msgs, &events))
	require.Zero(t, convs)
	require.Zero(t, msgs)
	require.Zero(t, events)
	var ids int
	require.NoError(t, tx.QueryRow(ctx, "SELECT count(*) FROM resource_ids WHERE id = $1", id).Scan(&ids))
	require.Zero(t, ids, "a deleted agent's id stays registered: it would answer 403 instead of 404")
}

func TestCrossTenantOverRPC(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	ctx := context.Background()
	ps := protocols(t)
	a, err := ps[0].client(e, e.A.Key).CreateAgent(ctx, &parleyv1.CreateAgentRequest{Name: "A", Instructions: "A's"})
	require.NoError(t, err)
	id := a.GetAgent().GetId()
	for _, p := range ps {
		t.Run(p.name, func(t *testing.T) {
			b := p.client(e, e.B.Key)
			_, err := b.GetAgent(ctx, &parleyv1.GetAgentRequest{Id: id})
			require.Equal(t, connect.CodePermissionDenied, code(err), "%v", err)
			name := "pwned"
			_, err = b.UpdateAgent(ctx, &parleyv1.UpdateAgentRequest{Id: id, Name: &name, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"name"}}})
			require.Equal(t, connect.CodePermissionDenied, code(err), "%v", err)
			_, err = b.DeleteAgent(ctx, &parleyv1.DeleteAgentRequest{Id: id})
			require.Equal(t, connect.CodePermissionDenied, code(err), "%v", err)
			l, err := b.ListAgents(ctx, &parleyv1.ListAgentsRequest{})
			require.NoError(t, err)
			require.NotContains(t, ids(l.GetAgents()), id)
			_, err = b.GetAgent(ctx, &parleyv1.GetAgentRequest{Id: "01a200f2-0000-7000-8000-000000000000"})
			require.Equal(t, connect.CodeNotFound, code(err))
		})
	}
	got, err := ps[0].client(e, e.A.Key).GetAgent(ctx, &parleyv1.GetAgentRequest{Id: id})
	require.NoError(t, err)
	require.Equal(t, "A", got.GetAgent().GetName())
}
