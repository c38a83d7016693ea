package chat_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/dbtest"
	"github.com/parleyhq/parley/backend/server"
	"github.com/parleyhq/parley/backend/testenv"
)

func TestListConversations(t *testing.T) {
	t.Parallel()
	f := setup(t)
	send := func(agent, key, conv, visitor, q string) {
		body := fmt.Sprintf(`{"query":%q,"conversationId":%q,"visitorId":%q}`, q, conv, visitor)
		status, _, raw := f.chat(t, agent, key, body)
		require.Equal(t, 200, status, "%s", raw.Body)
	}
	for i := range 12 {
		send(f.public, "", fmt.Sprintf("ada-%02d", i), "ada", "hello")
	}
	send(f.public, "", "ada-11", "ada", "second message")
	send(f.public, "", "eve-1", "eve", "I am Eve")

	type summary struct {
		ID, LastMessage, Status string
		CreatedAt               time.Time
		MessagesCount           int
	}
	list := func(key, query string) (int, []summary, testenv.Response) {
		r := f.Do("GET", "/api/v2/agent/"+f.public+"/conversations"+query, key, nil)
		var out struct{ Conversations []summary }
		if r.Status == 200 {
			r.JSON(t, &out)
		}
		return r.Status, out.Conversations, r
	}

	status, ada, raw := list("", "?visitorId=ada")
	require.Equal(t, 200, status, "%s", raw.Body)
	require.Len(t, ada, 10, "limit defaults to 10")
	require.Equal(t, "ada-11", ada[0].ID, "newest first")
	for i := 1; i < len(ada); i++ {
		require.False(t, ada[i].CreatedAt.After(ada[i-1].CreatedAt), "not newest first")
	}
	for _, c := range ada {
		require.NotEqual(t, "eve-1", c.ID, "a visitor sees another's conversation")
		require.Equal(t, "unresolved", c.Status)
	}
	require.Equal(t, 4, ada[0].MessagesCount)
	require.Equal(t, "Hello from the fake model.", ada[0].LastMessage)
	require.Equal(t, 2, ada[1].MessagesCount)

	_, ada50, _ := list("", "?visitorId=ada&limit=50")
	require.Len(t, ada50, 12)
	_, three, _ := list("", "?visitorId=ada&limit=3")
	require.Len(t, three, 3)

	status, _, raw = list("", "?visitorId=ada&limit=51")
	require.Equal(t, 400, status)
	require.Equal(t, "limit", raw.Err(t).Error.Field)
	status, _, raw = list("", "?visitorId=ada&limit=zero")
	require.Equal(t, 400, status)
	status, _, raw = list("", "")
	require.Equal(t, 400, status, "a public agent's listing without a key needs visitorId")
	require.Equal(t, "visitorId", raw.Err(t).Error.Field)

	// The owner's key sees every visitor's, or one visitor's.
	_, all, _ := list(f.A.Key, "?limit=50")
	require.Len(t, all, 13)
	_, eve, _ := list(f.A.Key, "?visitorId=eve")
	require.Len(t, eve, 1)
	require.Equal(t, "Hello from the fake model.", eve[0].LastMessage)

	// Private agents need a key; other organizations get 403.
	r := f.Do("GET", "/api/v2/agent/"+f.private+"/conversations?visitorId=ada", "", nil)
	require.Equal(t, 401, r.Status)
	r = f.Do("GET", "/v2/agent/"+f.private+"/conversations", f.B.Key, nil)
	require.Equal(t, 403, r.Status)
}

func TestContactsAreUpsertedAndStatsCount(t *testing.T) {
	t.Parallel()
	f := setup(t)
	for i, body := range []string{
		`{"query":"q","conversationId":"k1","contact":{"email":"Ada@Example.com","firstName":"Ada","customFields":{"plan":"gold"}}}`,
		`{"query":"q","conversationId":"k2","contact":{"email":"ada@example.com","lastName":"Lovelace","customFields":{"seats":3}}}`,
		`{"query":"q","conversationId":"k3","contact":{"phoneNumber":"+33612345678","firstName":"Paul"}}`,
	} {
		status, _, raw := f.chat(t, f.private, f.A.Key, body)
		require.Equal(t, 200, status, "%d: %s", i, raw.Body)
	}
	ctx := context.Background()
	tx := asA(t, f)
	var n int
	var first, last, custom string
	require.NoError(t, tx.QueryRow(ctx, "SELECT count(*) FROM contacts").Scan(&n))
	require.Equal(t, 2, n, "one contact per email, one per phone")
	require.NoError(t, tx.QueryRow(ctx, "SELECT first_name, last_name, custom_fields::text FROM contacts WHERE email = 'ada@example.com'").Scan(&first, &last, &custom))
	require.Equal(t, "Ada", first)
	require.Equal(t, "Lovelace", last)
	require.JSONEq(t, `{"plan":"gold","seats":3}`, custom)
	require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM conversations c JOIN contacts k ON k.org_id = c.org_id AND k.id = c.contact_id
		WHERE k.email = 'ada@example.com'`).Scan(&n))
	require.Equal(t, 2, n)
	var channel string
	require.NoError(t, tx.QueryRow(ctx, "SELECT channel FROM messages WHERE conversation_id = 'k1' AND role = 'user'").Scan(&channel))
	require.Equal(t, "api", channel)

	r := f.Do("GET", "/api/agents/"+f.private, f.A.Key, nil)
	var a struct {
		Stats struct{ TotalConversations, TotalMessages int }
	}
	r.JSON(t, &a)
	require.Equal(t, 3, a.Stats.TotalConversations)
	require.Equal(t, 6, a.Stats.TotalMessages)
}

// SECURITY: a public agent's visitor who gives a known email joins that
// contact but renames and renumbers nobody (what differs goes into the
// notes); the organization's key updates the contact.
func TestVisitorChangesNoStoredContact(t *testing.T) {
	t.Parallel()
	f := setup(t)
	contactOf := func() (first, phone, notes string) {
		t.Helper()
		ctx := context.Background()
		tx := asA(t, f)
		defer tx.Rollback(ctx) //nolint:errcheck
		require.NoError(t, tx.QueryRow(ctx, `SELECT first_name, coalesce(phone_number, ''), notes FROM contacts
			WHERE email = 'grace@example.com'`).Scan(&first, &phone, &notes))
		return first, phone, notes
	}
	status, _, raw := f.chat(t, f.private, f.A.Key,
		`{"query":"q","conversationId":"g1","contact":{"email":"grace@example.com","firstName":"Grace","phoneNumber":"+442079460958"}}`)
	require.Equal(t, 200, status, raw.Body)

	status, _, raw = f.chat(t, f.public, "",
		`{"query":"q","conversationId":"g2","visitorId":"mallory","contact":{"email":"grace@example.com","firstName":"Mallory","phoneNumber":"+15005550006"}}`)
	require.Equal(t, 200, status, raw.Body)
	first, phone, notes := contactOf()
	require.Equal(t, "Grace", first)
	require.Equal(t, "+442079460958", phone)
	require.Contains(t, notes, "phone number +15005550006, first name Mallory")

	status, _, raw = f.chat(t, f.private, f.A.Key,
		`{"query":"q","conversationId":"g3","contact":{"email":"grace@example.com","firstName":"Grace B.","phoneNumber":"+15005550006"}}`)
	require.Equal(t, 200, status, raw.Body)
	first, phone, _ = contactOf()
	require.Equal(t, "Grace B.", first)
	require.Equal(t, "+15005550006", phone)
}

func TestClientDisconnectMidStream(t *testing.T) {
	f := setup(t) // not parallel: it counts goroutines
	f.fake.Reply = func(int, map[string]any) testenv.FakeReply {
		return testenv.FakeReply{Tokens: []string{"tick "}, Delay: 20 * time.Millisecond, Forever: true}
	}
	before := turnGoroutines()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", f.URL+"/api/v2/agent/"+f.private+"/chat",
		strings.NewReader(`{"query":"count","conversationId":"gone","streaming":true}`))
	req.Header.Set("Authorization", "Bearer "+f.A.Key)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	rd := bufio.NewReader(resp.Body)
	tokens := 0
	for tokens < 5 {
		line, err := rd.ReadString('\n')
		require.NoError(t, err)
		if strings.HasPrefix(line, "data: ") {
			tokens++
		}
	}
	during := turnGoroutines()
	require.Greater(t, during, before, "the count does not see the turn's goroutines")
	cancel()
	resp.Body.Close()

	require.Eventually(t, func() bool { return f.fake.Canceled() == 1 }, 5*time.Second, 20*time.Millisecond,
		"the provider call was not cancelled")
	content, incomplete := lastAnswer(t, f, "gone")
	require.True(t, incomplete)
	require.True(t, strings.HasPrefix(content, "tick tick tick tick tick"), "stored %q", content)
	http.DefaultClient.CloseIdleConnections()
	if !assert.Eventually(t, func() bool { return turnGoroutines() <= before }, 5*time.Second, 50*time.Millisecond,
		"goroutines of the turn left behind: %d before, %d after", before, turnGoroutines()) {
		var stacks strings.Builder
		_ = pprof.Lookup("goroutine").WriteTo(&stacks, 1)
		t.Log(stacks.String())
	}
}

// turnGoroutines counts the goroutines that serve a chat turn: the HTTP
// connections (server and client side), the turn, its provider call. The
// process's others come and go on their own (River's maintenance services
// start when its leader is elected, the pools check their connections), so
// counting every goroutine failed now and then with nothing leaked.
func turnGoroutines() int {
	var b strings.Builder
	_ = pprof.Lookup("goroutine").WriteTo(&b, 2)
	n := 0
	for _, g := range strings.Split(b.String(), "\n\n") {
		for _, mark := range []string{"parleyhq/parley/backend/chat.", "parleyhq/parley/compat", "parleyhq/parley/backend/llm", "net/http.(*conn).serve", "net/http.(*persistConn)"} {
			if strings.Contains(g, mark) {
				n++
				break
			}
		}
	}
	return n
}

func TestShutdownEndsOpenStreams(t *testing.T) {
	t.Parallel()
	fake := testenv.NewFakeProvider(t)
	fake.Reply = func(int, map[string]any) testenv.FakeReply {
		return testenv.FakeReply{Tokens: []string{"word "}, Delay: 50 * time.Millisecond, Forever: true}
	}
	u := dbtest.New(t)
	cfg := server.Config{DatabaseURL: u, Migrate: true, ShutdownTimeout: 3 * time.Second, LastUsedFlush: time.Hour}
	testenv.WithFakeModels(fake)(&cfg)
	app, err := server.New(context.Background(), cfg)
	require.NoError(t, err)
	defer app.Close()
	org := (&testenv.Env{T: t, App: app}).Bootstrap("Org", "pro")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- app.Serve(ctx, ln) }()
	e := &testenv.Env{T: t, App: app, URL: "http://" + ln.Addr().String()}
	r := e.Do("POST", "/api/agents", org.Key, `{"name":"n","instructions":"i"}`)
	require.Equal(t, 201, r.Status, "%s", r.Body)
	var a struct{ ID string }
	r.JSON(t, &a)

	type result struct {
		last  map[string]any
		done  bool
		count int
	}
	results := make(chan result, 2)
	for i := range 2 {
		resp := e.Post("/api/v2/agent/"+a.ID+"/chat", bearer(org.Key), fmt.Sprintf(`{"query":"q","conversationId":"open-%d","streaming":true}`, i))
		go func() {
			defer resp.Body.Close()
			var res result
			for _, ev := range testenv.ReadSSE(t, resp.Body) {
				res.count++
				if ev.Data == "[DONE]" {
					res.done = true
					continue
				}
				var m map[string]any
				if json.Unmarshal([]byte(ev.Data), &m) == nil {
					res.last = m
				}
			}
			results <- res
		}()
	}
	time.Sleep(300 * time.Millisecond) // both streams are producing
	start := time.Now()
	stop() // what SIGTERM does in parley serve
	for range 2 {
		select {
		case res := <-results:
			require.Equal(t, "error", res.last["type"], "a stream's last event is not a final error: %v", res.last)
			require.Equal(t, "SHUTTING_DOWN", res.last["error"].(map[string]any)["code"])
			require.True(t, res.done, "the stream did not close with [DONE]")
		case <-time.After(5 * time.Second):
			t.Fatal("a stream was still open after the grace period")
		}
	}
	select {
	case err := <-served:
		require.NoError(t, err)
		require.Less(t, time.Since(start), 3*time.Second, "the server outlived its shutdown deadline")
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return")
	}
	for i := range 2 {
		tx, err := app.Pool.Begin(context.Background())
		require.NoError(t, err)
		_, err = tx.Exec(context.Background(), "SELECT set_config('app.org_id', $1, true)", org.ID.String())
		require.NoError(t, err)
		var content string
		var incomplete bool
		require.NoError(t, tx.QueryRow(context.Background(), `SELECT content, incomplete FROM messages
			WHERE conversation_id = $1 AND role = 'assistant'`, fmt.Sprintf("open-%d", i)).Scan(&content, &incomplete))
		require.NoError(t, tx.Rollback(context.Background()))
		require.True(t, incomplete)
		require.True(t, strings.HasPrefix(content, "word word"), "what was generated is stored: %q", content)
	}
}
