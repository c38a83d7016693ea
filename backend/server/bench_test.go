package server_test

import (
	"context"
	"io"
	"net/http"
	"testing"

	"connectrpc.com/connect"

	"github.com/parleyhq/parley/backend/account"
	"github.com/parleyhq/parley/backend/auth"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/gen/parley/v1/parleyv1connect"
	"github.com/parleyhq/parley/backend/plan"
	"github.com/parleyhq/parley/backend/ratelimit"
	"github.com/parleyhq/parley/backend/testenv"
)

// benchEnv is an instance with an enterprise organization whose limits no
// benchmark reaches, and one agent.
func benchEnv(b *testing.B) (*testenv.Env, testenv.Org, string) {
	e := testenv.New(b)
	org := e.Bootstrap("Bench", plan.Enterprise)
	if err := account.SetLimits(context.Background(), e.App.Store, org.ID, plan.Limits{PerMinute: 2_000_000_000, PerDay: 2_000_000_000}); err != nil {
		b.Fatal(err)
	}
	c := parleyv1connect.NewAgentServiceClient(http.DefaultClient, e.URL, connect.WithInterceptors(testenv.Bearer(org.Key)))
	a, err := c.CreateAgent(context.Background(), &parleyv1.CreateAgentRequest{Name: "bench", Instructions: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	return e, org, a.GetAgent().GetId()
}

// BenchmarkRESTGetAgent: an authenticated GET /api/agents/{id} end to end on
// loopback (HTTP/1.1 keep-alive, JSON, auth, rate limit, two queries).
func BenchmarkRESTGetAgent(b *testing.B) {
	e, org, id := benchEnv(b)
	req, _ := http.NewRequest("GET", e.URL+"/api/agents/"+id, nil)
	req.Header.Set("Authorization", "Bearer "+org.Key)
	b.ReportAllocs()
	for b.Loop() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
}

// BenchmarkConnectGetAgent: the same read as a Connect unary call.
func BenchmarkConnectGetAgent(b *testing.B) {
	e, org, id := benchEnv(b)
	c := parleyv1connect.NewAgentServiceClient(http.DefaultClient, e.URL, connect.WithInterceptors(testenv.Bearer(org.Key)))
	ctx := context.Background()
	req := &parleyv1.GetAgentRequest{Id: id}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.GetAgent(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGateAdmit: authentication (cached key) and the in-memory rate
// limit alone, as every request pays them.
func BenchmarkGateAdmit(b *testing.B) {
	e, org, _ := benchEnv(b)
	gate := &auth.Gate{Auth: e.App.Auth, Limits: ratelimit.NewMemory()}
	ctx := context.Background()
	header := "Bearer " + org.Key
	b.ReportAllocs()
	for b.Loop() {
		if _, err := gate.Admit(ctx, header, auth.ScopeAdmin); err != nil {
			b.Fatal(err)
		}
	}
}
