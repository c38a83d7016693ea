package chat_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/parleyhq/parley/backend/account"
	"github.com/parleyhq/parley/backend/llm"
	"github.com/parleyhq/parley/backend/plan"
	"github.com/parleyhq/parley/backend/server"
	"github.com/parleyhq/parley/backend/testenv"
)

// instant is an in-process model that answers at once: five tokens and usage.
type instant struct{}

func (instant) Provider() string { return "instant" }

func (instant) Stream(_ context.Context, _ llm.Request, yield func(llm.Event) error) error {
	for _, t := range []string{"Hello", " from", " the", " instant", " model."} {
		if err := yield(llm.Event{Text: t}); err != nil {
			return err
		}
	}
	return yield(llm.Event{Usage: &llm.Usage{PromptTokens: 10, CompletionTokens: 5}})
}

func benchChat(b *testing.B) (*testenv.Env, string, string) {
	e := testenv.New(b, func(c *server.Config) {
		var routes []llm.Route
		for _, n := range llm.SpecModels {
			routes = append(routes, llm.Route{Name: n, Upstream: n, Model: instant{}})
		}
		c.Catalog = llm.NewCatalog(routes...)
	})
	org := e.Bootstrap("Bench", plan.Enterprise)
	if err := account.SetLimits(context.Background(), e.App.Store, org.ID, plan.Limits{PerMinute: 2_000_000_000, PerDay: 2_000_000_000}); err != nil {
		b.Fatal(err)
	}
	r := e.Do("POST", "/api/agents", org.Key, `{"name":"bench","instructions":"Be brief."}`)
	var a struct{ ID string }
	r.JSON(b, &a)
	return e, org.Key, a.ID
}

func post(b *testing.B, url, key, body string) *http.Response {
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	if resp.StatusCode != 200 {
		b.Fatalf("status %d", resp.StatusCode)
	}
	return resp
}

// BenchmarkChatJSON: one REST JSON chat turn end to end on loopback (auth,
// rate limit, two transactions, the model, the reply). Each iteration is a
// new conversation, so history stays empty.
func BenchmarkChatJSON(b *testing.B) {
	e, key, agent := benchChat(b)
	url := e.URL + "/api/v2/agent/" + agent + "/chat"
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		resp := post(b, url, key, fmt.Sprintf(`{"query":"Hi","conversationId":"json-%d"}`, i))
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// BenchmarkChatSSE: the same turn streamed as Server-Sent Events, read to
// the end.
func BenchmarkChatSSE(b *testing.B) {
	e, key, agent := benchChat(b)
	url := e.URL + "/api/v2/agent/" + agent + "/chat"
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		resp := post(b, url, key, fmt.Sprintf(`{"query":"Hi","conversationId":"sse-%d","streaming":true}`, i))
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// BenchmarkTimeToFirstToken: from sending a streaming request to reading its
// first token, against the model's own time to its first token when called
// directly. Reports both, and their difference as parley's overhead.
func BenchmarkTimeToFirstToken(b *testing.B) {
	e, key, agent := benchChat(b)
	url := e.URL + "/api/v2/agent/" + agent + "/chat"
	var viaParley, direct time.Duration
	i := 0
	for b.Loop() {
		i++
		start := time.Now()
		resp := post(b, url, key, fmt.Sprintf(`{"query":"Hi","conversationId":"ttft-%d","streaming":true}`, i))
		rd := bufio.NewReader(resp.Body)
		for {
			line, err := rd.ReadString('\n')
			if err != nil {
				b.Fatal(err)
			}
			if strings.HasPrefix(line, "data: ") {
				break
			}
		}
		viaParley += time.Since(start)
		_, _ = io.Copy(io.Discard, rd)
		resp.Body.Close()

		start = time.Now()
		first := true
		_ = instant{}.Stream(context.Background(), llm.Request{}, func(llm.Event) error {
			if first {
				direct += time.Since(start)
				first = false
			}
			return nil
		})
	}
	n := float64(b.N)
	b.ReportMetric(float64(viaParley.Microseconds())/n, "µs-ttft-parley")
	b.ReportMetric(float64(direct.Nanoseconds())/n/1000, "µs-ttft-direct")
	b.ReportMetric(float64((viaParley-direct).Microseconds())/n, "µs-ttft-added")
}

// BenchmarkToolRound: one REST JSON turn against the scripted fake OpenAI
// model on loopback, answering at once (none), or first calling a tool and
// answering after its result ("none" lists datastore_query and has no
// datastores: it is offered no tool). The difference is what one tool round adds
// (a second model call, the tool's run, the tool_call bookkeeping).
// http_request calls an endpoint on loopback; web_search a fake SearXNG.
func BenchmarkToolRound(b *testing.B) {
	endpoint := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"42","status":"shipped"}`)
	}))
	defer endpoint.Close()
	searx := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"results":[{"url":"https://example.org/1","title":"One","content":"First."},
			{"url":"https://example.org/2","title":"Two","content":"Second."}]}`)
	}))
	defer searx.Close()
	fp := testenv.NewFakeProvider(b)
	fp.Reply = func(_ int, body map[string]any) testenv.FakeReply {
		msgs := body["messages"].([]any)
		last := msgs[len(msgs)-1].(map[string]any)
		tools, _ := body["tools"].([]any)
		if last["role"] == "tool" || len(tools) == 0 {
			return testenv.FakeReply{Tokens: []string{"Hello", " from", " the", " fake", " model."}}
		}
		name := tools[0].(map[string]any)["function"].(map[string]any)["name"].(string)
		args := `{"query":"parley"}`
		if name == "http_request" {
			args = `{"endpoint":"orders","query":{"id":"42"}}`
		}
		return testenv.FakeReply{ToolCalls: []llm.ToolCall{{ID: "c1", Name: name, Arguments: args}}}
	}
	e := testenv.New(b, testenv.WithFakeModels(fp), func(c *server.Config) {
		c.FetchAllow = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
		c.WebSearch.SearxngURL = searx.URL
	})
	org := e.Bootstrap("Bench", plan.Enterprise)
	if err := account.SetLimits(context.Background(), e.App.Store, org.ID, plan.Limits{PerMinute: 2_000_000_000, PerDay: 2_000_000_000}); err != nil {
		b.Fatal(err)
	}
	agents := map[string]string{
		"none":         `{"name":"none","instructions":"Be brief.","tools":["datastore_query"]}`,
		"http_request": `{"name":"http","instructions":"Be brief.","tools":["http_request"],"toolSettings":{"http_request":{"endpoints":[{"name":"orders","url":"` + endpoint.URL + `/orders"}]}}}`,
		"web_search":   `{"name":"web","instructions":"Be brief.","tools":["web_search"]}`,
	}
	for _, name := range []string{"none", "http_request", "web_search"} {
		r := e.Do("POST", "/api/agents", org.Key, agents[name])
		if r.Status != 201 {
			b.Fatalf("%s: %d %s", name, r.Status, r.Body)
		}
		var a struct{ ID string }
		r.JSON(b, &a)
		url := e.URL + "/api/v2/agent/" + a.ID + "/chat"
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				resp := post(b, url, org.Key, fmt.Sprintf(`{"query":"Hi","conversationId":"%s-%d"}`, name, i))
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
}
