package conversation_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	sse "github.com/tmaxmax/go-sse"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/parleyhq/parley/backend/conversation"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/gen/parley/v1/parleyv1connect"
	"github.com/parleyhq/parley/backend/server"
	"github.com/parleyhq/parley/backend/testenv"
)

// fixture is an instance with a fake model, a public and a private agent
// of organization A, and a chat-only key of A's.
type fixture struct {
	*testenv.Env
	fake            *testenv.FakeProvider
	public, private string
	chatKey         string
}

func setup(t *testing.T) *fixture {
	t.Helper()
	fake := testenv.NewFakeProvider(t)
	f := &fixture{Env: testenv.New(t, testenv.WithFakeModels(fake)), fake: fake}
	f.public = f.agent(t, `{"name":"Public","instructions":"You are public.","visibility":"public"}`)
	f.private = f.agent(t, `{"name":"Private","instructions":"You are private."}`)
	keys := parleyv1connect.NewApiKeyServiceClient(http.DefaultClient, f.URL, connect.WithInterceptors(testenv.Bearer(f.A.Key)))
	k, err := keys.CreateApiKey(context.Background(), &parleyv1.CreateApiKeyRequest{Name: "widget backend", Scopes: []string{"chat"}})
	require.NoError(t, err)
	f.chatKey = k.GetSecret()
	return f
}

func (f *fixture) agent(t *testing.T, body string) string {
	t.Helper()
	r := f.Do("POST", "/api/agents", f.A.Key, body)
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var a struct{ ID string }
	r.JSON(t, &a)
	return a.ID
}

type chatReply struct {
	Answer, ConversationID, MessageID string
	Metadata                          struct {
		Model   string
		Handoff bool
	}
}

// chat sends a message (a visitor's on the public agent when key is "").
func (f *fixture) chat(t *testing.T, agent, key, conv, visitor, query string) chatReply {
	t.Helper()
	body := map[string]any{"query": query, "conversationId": conv}
	if visitor != "" {
		body["visitorId"] = visitor
	}
	r := f.Do("POST", "/api/v2/agent/"+agent+"/chat", key, body)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	var out chatReply
	r.JSON(t, &out)
	return out
}

type summary struct {
	ID, AgentID, Status, Channel, VisitorID, LastMessage string
	StatusReason, StatusChangedBy                        string
	CreatedAt, UpdatedAt                                 time.Time
	MessagesCount                                        int
	Rating                                               *int
	Contact                                              *struct{ ID, Email, FirstName string }
}

type message struct {
	ID, Role, Text, Author, Model string
	CreatedAt                     time.Time
	Sources                       []map[string]any
	ToolCalls                     []map[string]any
}

type detail struct {
	summary
	Messages    []message
	LastEventID int64
}

type listing struct {
	Conversations []summary
	NextCursor    *string
}

func ids(l listing) []string {
	var out []string
	for _, c := range l.Conversations {
		out = append(out, c.ID)
	}
	return out
}

func visitorQuery(agent, visitor string) string {
	return "?" + url.Values{"agentId": {agent}, "visitorId": {visitor}}.Encode()
}

func TestListingFiltersAndPages(t *testing.T) {
	t.Parallel()
	f := setup(t)
	// 7 conversations: c0..c6, oldest first; even ones by visitor ada on
	// the public agent (channel website), odd ones on the private agent.
	start := time.Now()
	for i := range 7 {
		conv := fmt.Sprintf("c%d", i)
		if i%2 == 0 {
			r := f.Do("POST", "/api/v2/agent/"+f.public+"/chat", "", map[string]any{
				"query": "hi " + conv, "conversationId": conv, "visitorId": "ada", "channel": "website"})
			require.Equal(t, 200, r.Status, "%s", r.Body)
		} else {
			f.chat(t, f.private, f.A.Key, conv, "", "hi "+conv)
		}
	}
	list := func(key, query string) (testenv.Response, listing) {
		r := f.Do("GET", "/api/v2/conversations"+query, key, nil)
		var l listing
		if r.Status == 200 {
			r.JSON(t, &l)
		}
		return r, l
	}

	// Every agent's, newest first, paged by cursor (also without /api).
	var all []string
	cursor := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 5)
		q := "?limit=3"
		if cursor != "" {
			q += "&cursor=" + url.QueryEscape(cursor)
		}
		r := f.Do("GET", "/v2/conversations"+q, f.A.Key, nil)
		require.Equal(t, 200, r.Status, "%s", r.Body)
		var l listing
		r.JSON(t, &l)
		require.LessOrEqual(t, len(l.Conversations), 3)
		all = append(all, ids(l)...)
		if l.NextCursor == nil {
			break
		}
		cursor = *l.NextCursor
	}
	require.Equal(t, []string{"c6", "c5", "c4", "c3", "c2", "c1", "c0"}, all)

	r, l := list(f.A.Key, "")
	require.Equal(t, 200, r.Status)
	require.Len(t, l.Conversations, 7, "limit defaults to 10")
	c6 := l.Conversations[0]
	require.Equal(t, f.public, c6.AgentID)
	require.Equal(t, "unresolved", c6.Status)
	require.Equal(t, "website", c6.Channel)
	require.Equal(t, "ada", c6.VisitorID)
	require.Equal(t, 2, c6.MessagesCount)
	require.Equal(t, "Hello from the fake model.", c6.LastMessage)
	require.Nil(t, c6.Rating)
	// The answer, stored after the conversation's first transaction, touched it.
	require.True(t, c6.UpdatedAt.After(c6.CreatedAt), "updated %v, created %v", c6.UpdatedAt, c6.CreatedAt)

	// Filters.
	_, l = list(f.A.Key, "?agentId="+f.private)
	require.Equal(t, []string{"c5", "c3", "c1"}, ids(l))
	_, l = list(f.A.Key, "?visitorId=ada")
	require.Equal(t, []string{"c6", "c4", "c2", "c0"}, ids(l))
	_, l = list(f.A.Key, "?channel=website")
	require.Equal(t, []string{"c6", "c4", "c2", "c0"}, ids(l))
	_, l = list(f.A.Key, "?channel=api&agentId="+f.private)
	require.Equal(t, []string{"c5", "c3", "c1"}, ids(l))
	_, l = list(f.A.Key, "?status=resolved")
	require.Empty(t, l.Conversations)
	r = f.Do("PUT", "/api/v2/conversations/c3", f.A.Key, `{"status":"resolved"}`)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	_, l = list(f.A.Key, "?status=resolved")
	require.Equal(t, []string{"c3"}, ids(l))
	_, l = list(f.A.Key, "?since="+url.QueryEscape(start.Add(-time.Minute).UTC().Format(time.RFC3339Nano)))
	require.Len(t, l.Conversations, 7)
	_, l = list(f.A.Key, "?since="+url.QueryEscape(time.Now().Add(time.Minute).UTC().Format(time.RFC3339)))
	require.Empty(t, l.Conversations)

	// A visitor without a key lists its own conversations with the agent.
	_, l = list("", visitorQuery(f.public, "ada"))
	require.Equal(t, []string{"c6", "c4", "c2", "c0"}, ids(l))
	_, l = list("", visitorQuery(f.public, "eve"))
	require.Empty(t, l.Conversations)
	for _, c := range ids(l) {
		require.NotEqual(t, "c6", c)
	}

	// Refusals.
	for _, tc := range []struct {
		key, query string
		status     int
		field      string
	}{
		{f.A.Key, "?limit=51", 400, "limit"},
		{f.A.Key, "?limit=0", 400, "limit"},
		{f.A.Key, "?limit=x", 400, "limit"},
		{f.A.Key, "?status=open", 400, "status"},
		{f.A.Key, "?since=yesterday", 400, "since"},
		{f.A.Key, "?cursor=nonsense", 400, "cursor"},
		// Times Postgres cannot hold (a 500 once), or beyond a Timestamp's
		// years 1 to 9999.
		{f.A.Key, "?cursor=-300000000000000000_a", 400, "cursor"},
		{f.A.Key, "?cursor=9223372036854775807_a", 400, "cursor"},
		{"", visitorQuery(f.public, "ada") + "&cursor=-300000000000000000_a", 400, "cursor"},
		{f.A.Key, "?since=0000-01-01T00:00:00Z", 400, "since"},
		{"", "", 401, ""},
		{"", "?visitorId=ada", 401, ""},
		{"", "?agentId=" + f.public, 400, "visitorId"},
		{"", visitorQuery(f.private, "ada"), 401, ""},
		{f.B.Key, "?agentId=" + f.public, 403, ""},
	} {
		r, _ := list(tc.key, tc.query)
		require.Equal(t, tc.status, r.Status, "%s: %s", tc.query, r.Body)
		require.Equal(t, tc.field, r.Err(t).Error.Field, tc.query)
	}
	// Another organization lists its own: none.
	_, l = list(f.B.Key, "")
	require.Empty(t, l.Conversations)

	// SPEC §4.2's listing gains the cursor too.
	r = f.Do("GET", "/api/v2/agent/"+f.public+"/conversations?visitorId=ada&limit=3", "", nil)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	r.JSON(t, &l)
	require.Equal(t, []string{"c6", "c4", "c2"}, ids(l))
	require.NotNil(t, l.NextCursor)
	r = f.Do("GET", "/api/v2/agent/"+f.public+"/conversations?visitorId=x&cursor=-300000000000000000_a", "", nil)
	require.Equal(t, 400, r.Status, "%s", r.Body)
	require.Equal(t, "cursor", r.Err(t).Error.Field)
}

func TestReadUpdateAndIsolation(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.chat(t, f.public, "", "ada-1", "ada", "Hello, I am Ada")
	r := f.Do("POST", "/api/v2/agent/"+f.private+"/chat", f.A.Key, map[string]any{
		"query": "Hi", "conversationId": "priv-1", "contact": map[string]any{"email": "Grace@example.com", "firstName": "Grace"}})
	require.Equal(t, 200, r.Status, "%s", r.Body)
	// B has a conversation with the same client id: ids are per organization.
	rb := f.Do("POST", "/api/agents", f.B.Key, `{"name":"B","instructions":"b"}`)
	var bAgent struct{ ID string }
	rb.JSON(t, &bAgent)
	f.chat(t, bAgent.ID, f.B.Key, "priv-1", "", "B's own")

	get := func(key, path string) (testenv.Response, detail) {
		r := f.Do("GET", "/api/v2/conversations/"+path, key, nil)
		var d detail
		if r.Status == 200 {
			r.JSON(t, &d)
		}
		return r, d
	}

	// The key reads the conversation and its messages, oldest first.
	r, d := get(f.A.Key, "priv-1")
	require.Equal(t, 200, r.Status, "%s", r.Body)
	require.Equal(t, "priv-1", d.ID)
	require.Equal(t, f.private, d.AgentID)
	require.Equal(t, "unresolved", d.Status)
	require.Equal(t, "api", d.Channel)
	require.Equal(t, 2, d.MessagesCount)
	require.NotNil(t, d.Contact)
	require.Equal(t, "grace@example.com", d.Contact.Email)
	require.NotEmpty(t, d.Contact.ID)
	require.Len(t, d.Messages, 2)
	require.Equal(t, "user", d.Messages[0].Role)
	require.Equal(t, "Hi", d.Messages[0].Text)
	require.Equal(t, "assistant", d.Messages[1].Role)
	require.Equal(t, "Hello from the fake model.", d.Messages[1].Text)
	require.Equal(t, "gpt-4o-mini", d.Messages[1].Model)
	require.NotNil(t, d.Messages[1].Sources)
	require.NotNil(t, d.Messages[1].ToolCalls)
	require.Equal(t, int64(2), d.LastEventID, "one event per message")
	_, d = get(f.B.Key, "priv-1")
	require.Equal(t, "B's own", d.Messages[0].Text, "each organization reads its own priv-1")

	// The visitor reads its own, with agentId and visitorId and no key; a
	// visitor's read leaves out the contact.
	r, d = get("", "ada-1"+visitorQuery(f.public, "ada"))
	require.Equal(t, 200, r.Status, "%s", r.Body)
	require.Equal(t, "Hello, I am Ada", d.Messages[0].Text)
	require.Nil(t, d.Contact)

	// A chat-only key (a website widget's, perhaps in a page) reads the
	// conversation without its contact's details, which the Contacts API
	// keeps to the admin scope; the admin key's listing has them.
	r, d = get(f.chatKey, "priv-1")
	require.Equal(t, 200, r.Status, "%s", r.Body)
	require.Len(t, d.Messages, 2)
	require.Nil(t, d.Contact)
	for key, contact := range map[string]bool{f.chatKey: false, f.A.Key: true} {
		r := f.Do("GET", "/api/v2/conversations?agentId="+f.private, key, nil)
		require.Equal(t, 200, r.Status, "%s", r.Body)
		var l listing
		r.JSON(t, &l)
		require.Len(t, l.Conversations, 1)
		require.Equal(t, contact, l.Conversations[0].Contact != nil, "%s", r.Body)
		require.Equal(t, contact, strings.Contains(string(r.Body), "grace@example.com"))
	}

	// Every refusal of an id is 404, whoever asks.
	for _, tc := range []struct {
		name, key, path string
		status          int
	}{
		{"another visitor", "", "ada-1" + visitorQuery(f.public, "eve"), 404},
		{"a visitor of another agent's conversation", "", "priv-1" + visitorQuery(f.public, "ada"), 404},
		{"another organization", f.B.Key, "ada-1", 404},
		{"another agent named", f.A.Key, "priv-1?agentId=" + f.public, 200}, // keys read by organization
		{"unknown", f.A.Key, "nope", 404},
		{"no key, no agent", "", "ada-1?visitorId=ada", 401},
		{"a private agent's visitor", "", "priv-1" + visitorQuery(f.private, "ada"), 401},
	} {
		r, _ := get(tc.key, tc.path)
		require.Equal(t, tc.status, r.Status, "%s: %s", tc.name, r.Body)
	}

	// PUT validation names the field.
	for _, tc := range []struct {
		body, field string
	}{
		{`{"rating":0}`, "rating"},
		{`{"rating":6}`, "rating"},
		{`{"rating":"x"}`, "rating"},
		{`{"rating":3.5}`, "rating"},
		{`{"rating":true}`, "rating"},
		{`{"status":"open"}`, "status"},
		{`{"status":5}`, "status"},
		{`{}`, "body"},
		{`{"rating":null}`, "body"},
		{`{"colour":"red"}`, "colour"},
		{``, "body"},
	} {
		r := f.Do("PUT", "/api/v2/conversations/priv-1", f.A.Key, tc.body)
		require.Equal(t, 400, r.Status, "%s: %s", tc.body, r.Body)
		e := r.Err(t)
		require.Equal(t, "BAD_REQUEST", e.Error.Code, tc.body)
		require.Equal(t, tc.field, e.Error.Field, "%s: %s", tc.body, r.Body)
	}

	// Ratings: the key, and the visitor on its own conversation (rating
	// only); status needs the admin scope.
	r = f.Do("PUT", "/api/v2/conversations/priv-1", f.A.Key, `{"rating":4}`)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	var s summary
	r.JSON(t, &s)
	require.Equal(t, 4, *s.Rating)
	r = f.Do("PUT", "/v2/conversations/ada-1"+visitorQuery(f.public, "ada"), "", `{"rating":2}`)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	r = f.Do("PUT", "/api/v2/conversations/ada-1"+visitorQuery(f.public, "ada"), "", `{"status":"resolved"}`)
	require.Equal(t, 403, r.Status, "a visitor only rates: %s", r.Body)
	r = f.Do("PUT", "/api/v2/conversations/ada-1"+visitorQuery(f.public, "eve"), "", `{"rating":1}`)
	require.Equal(t, 404, r.Status, "another visitor")
	r = f.Do("PUT", "/api/v2/conversations/ada-1", f.chatKey, `{"rating":5}`)
	require.Equal(t, 200, r.Status, "a chat key rates: %s", r.Body)
	r = f.Do("PUT", "/api/v2/conversations/ada-1", f.chatKey, `{"status":"resolved"}`)
	require.Equal(t, 403, r.Status, "a chat key does not change a status: %s", r.Body)
	r = f.Do("PUT", "/api/v2/conversations/ada-1", f.B.Key, `{"rating":1}`)
	require.Equal(t, 404, r.Status, "another organization")
	r = f.Do("PUT", "/api/v2/conversations/ada-1", f.A.Key, `{"status":"resolved","reason":"answered"}`)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	r.JSON(t, &s)
	require.Equal(t, "resolved", s.Status)
	require.Equal(t, 5, *s.Rating)
	require.Equal(t, "answered", s.StatusReason)
	require.Equal(t, "bootstrap", s.StatusChangedBy, "signed with the key's name")

	// A key with the admin scope alone manages conversations, and so reads
	// them too (it needed the chat scope as well to change a status).
	keys := parleyv1connect.NewApiKeyServiceClient(http.DefaultClient, f.URL, connect.WithInterceptors(testenv.Bearer(f.A.Key)))
	ak, err := keys.CreateApiKey(context.Background(), &parleyv1.CreateApiKeyRequest{Name: "desk", Scopes: []string{"admin"}})
	require.NoError(t, err)
	adminOnly := ak.GetSecret()
	r = f.Do("PUT", "/api/v2/conversations/ada-1", adminOnly, `{"status":"unresolved"}`)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	r.JSON(t, &s)
	require.Equal(t, "unresolved", s.Status)
	require.Equal(t, "desk", s.StatusChangedBy)
	r, d = get(adminOnly, "priv-1")
	require.Equal(t, 200, r.Status, "%s", r.Body)
	require.NotNil(t, d.Contact, "the admin scope reads contacts")
	require.Equal(t, 200, f.Do("GET", "/api/v2/conversations", adminOnly, nil).Status)

	// People's replies: the admin scope, the organization's conversations.
	for _, tc := range []struct {
		name, key, path, body string
		status                int
	}{
		{"no key", "", "ada-1", `{"text":"hi"}`, 401},
		{"a chat key", f.chatKey, "ada-1", `{"text":"hi"}`, 403},
		{"another organization", f.B.Key, "ada-1", `{"text":"hi"}`, 404},
		{"unknown", f.A.Key, "nope", `{"text":"hi"}`, 404},
		{"blank", f.A.Key, "ada-1", `{"text":"  "}`, 400},
		{"no text", f.A.Key, "ada-1", `{}`, 400},
		{"unknown field", f.A.Key, "ada-1", `{"text":"hi","role":"assistant"}`, 400},
	} {
		r := f.Do("POST", "/api/v2/conversations/"+tc.path+"/messages", tc.key, tc.body)
		require.Equal(t, tc.status, r.Status, "%s: %s", tc.name, r.Body)
	}

	// The agent's average rating is the mean of its rated conversations.
	f.chat(t, f.public, "", "ada-2", "ada", "again")
	f.chat(t, f.public, "", "ada-3", "ada", "and again")
	r = f.Do("PUT", "/api/v2/conversations/ada-2", f.A.Key, `{"rating":2}`)
	require.Equal(t, 200, r.Status)
	var ag struct {
		Stats struct{ AverageRating float64 }
	}
	f.Do("GET", "/api/agents/"+f.public, f.A.Key, nil).JSON(t, &ag)
	require.InDelta(t, 3.5, ag.Stats.AverageRating, 1e-9, "(5+2)/2; ada-3 is not rated")
	f.Do("GET", "/api/agents/"+f.private, f.A.Key, nil).JSON(t, &ag)
	require.InDelta(t, 4, ag.Stats.AverageRating, 1e-9)
}

// events follows a conversation's SSE stream with a real SSE parser.
type events struct {
	resp *http.Response
	c    chan sse.Event
}

func follow(t *testing.T, base, path string, header map[string]string) *events {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, base+path, nil)
	require.NoError(t, err)
	req.Header.Set("Accept", "text/event-stream")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { resp.Body.Close() })
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	e := &events{resp: resp, c: make(chan sse.Event, 64)}
	go func() {
		defer close(e.c)
		for ev, err := range sse.Read(resp.Body, nil) {
			if err != nil {
				return
			}
			if ev.Data == "" {
				continue // the opening's id: EventSource fires no event for a block without data
			}
			e.c <- ev
		}
	}()
	return e
}

type streamEvent struct {
	Type      string
	EventID   int64
	Status    string
	Reason    string
	ChangedBy string
	Message   message
	Error     struct{ Code string }
}

func (e *events) next(t *testing.T) (sse.Event, streamEvent) {
	t.Helper()
	select {
	case ev, ok := <-e.c:
		require.True(t, ok, "the stream ended")
		var se streamEvent
		require.NoError(t, json.Unmarshal([]byte(ev.Data), &se), ev.Data)
		return ev, se
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10 s")
	}
	panic("unreachable")
}

func (e *events) close() { e.resp.Body.Close() }

// The handoff, end to end, over two instances of one deployment: people
// take the conversation (PUT), the model falls silent and the visitor is
// answered with the handoff message; a person's reply on one instance
// reaches the visitor's stream on the other; resolving it gives it back to
// the model.
func TestHandoffAcrossInstances(t *testing.T) {
	t.Parallel()
	f := setup(t)
	other := testenv.NewOn(t, f.DBURL, testenv.WithFakeModels(f.fake))
	vq := visitorQuery(f.public, "ada")

	rep := f.chat(t, f.public, "", "help-1", "ada", "My order is late")
	require.Equal(t, "Hello from the fake model.", rep.Answer)
	require.False(t, rep.Metadata.Handoff)
	require.Len(t, f.fake.Requests(), 1)

	// The visitor follows its conversation on the other instance.
	visitor := follow(t, other.URL, "/api/v2/conversations/help-1/events"+vq, nil)
	// And someone follows it from the start with the key (Last-Event-ID 0).
	owner := follow(t, f.URL, "/v2/conversations/help-1/events", map[string]string{"Authorization": "Bearer " + f.A.Key, "Last-Event-ID": "0"})
	for _, want := range []string{"user", "assistant"} {
		ev, se := owner.next(t)
		require.Equal(t, "message", se.Type)
		require.Equal(t, want, se.Message.Role)
		require.Equal(t, ev.LastEventID, fmt.Sprint(se.EventID))
	}

	// People take it (the request_human tool does the same, see
	// TestRequestHuman).
	r := f.Do("PUT", "/api/v2/conversations/help-1", f.A.Key, `{"status":"human_requested","reason":"a refund"}`)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	for _, s := range []*events{visitor, owner} {
		ev, se := s.next(t)
		require.Equal(t, "status", se.Type)
		require.Equal(t, "human_requested", se.Status)
		require.Equal(t, "3", ev.LastEventID)
		if s == owner {
			require.Equal(t, "a refund", se.Reason)
			require.Equal(t, "bootstrap", se.ChangedBy)
		} else {
			// Who and why are the organization's own notes.
			require.Empty(t, se.Reason, "the visitor sees no reason")
			require.Empty(t, se.ChangedBy, "the visitor sees not who")
		}
	}
	// Nor in the visitor's read of the conversation.
	var vd detail
	r = f.Do("GET", "/api/v2/conversations/help-1"+vq, "", nil)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	r.JSON(t, &vd)
	require.Equal(t, "human_requested", vd.Status)
	require.NotContains(t, string(r.Body), "bootstrap", "the visitor's read names no key")
	require.NotContains(t, string(r.Body), "a refund")

	// The model is silent: the visitor's message is stored and answered
	// with the handoff message, as JSON and as a stream.
	rep = f.chat(t, f.public, "", "help-1", "ada", "Is anyone there?")
	require.Equal(t, "A person will answer here shortly.", rep.Answer)
	require.True(t, rep.Metadata.Handoff)
	resp := f.Post("/api/v2/agent/"+f.public+"/chat", map[string]string{"Accept": "text/event-stream"},
		`{"query":"Hello?","conversationId":"help-1","visitorId":"ada","streaming":true}`)
	evs := testenv.ReadSSE(t, resp.Body)
	resp.Body.Close()
	var text strings.Builder
	var done map[string]any
	for _, ev := range evs {
		var m map[string]any
		if json.Unmarshal([]byte(ev.Data), &m) != nil {
			continue
		}
		switch m["type"] {
		case "token":
			text.WriteString(m["value"].(string))
		case "done":
			done = m
		}
	}
	require.Equal(t, "A person will answer here shortly.", text.String())
	require.NotNil(t, done)
	require.Equal(t, true, done["metadata"].(map[string]any)["handoff"])
	require.Len(t, f.fake.Requests(), 1, "the model was not called")
	for range 4 { // two questions and two handoff answers
		_, se := visitor.next(t)
		require.Equal(t, "message", se.Type)
	}

	// The agent's own handoff message (the default is shown filled in).
	var ag struct{ HandoffMessage string }
	f.Do("GET", "/api/agents/"+f.public, f.A.Key, nil).JSON(t, &ag)
	require.Equal(t, "A person will answer here shortly.", ag.HandoffMessage)
	r = f.Do("PUT", "/api/agents/"+f.public, f.A.Key, `{"handoffMessage":"Hang on, Ada: a human is on the way."}`)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	r.JSON(t, &ag)
	require.Equal(t, "Hang on, Ada: a human is on the way.", ag.HandoffMessage)
	rep = f.chat(t, f.public, "", "help-1", "ada", "Still there?")
	require.Equal(t, "Hang on, Ada: a human is on the way.", rep.Answer)
	require.Len(t, f.fake.Requests(), 1, "the model was not called")
	r = f.Do("PUT", "/api/agents/"+f.public, f.A.Key, `{"handoffMessage":7}`)
	require.Equal(t, 400, r.Status)
	require.Equal(t, "handoffMessage", r.Err(t).Error.Field)
	for range 2 {
		_, se := visitor.next(t)
		require.Equal(t, "message", se.Type)
	}

	// A person replies on the first instance; the visitor's stream on the
	// other receives it.
	r = f.Do("POST", "/api/v2/conversations/help-1/messages", f.A.Key, `{"text":"Hi Ada, I am refunding you now."}`)
	require.Equal(t, 201, r.Status, "%s", r.Body)
	var posted message
	r.JSON(t, &posted)
	require.Equal(t, "human", posted.Role)
	require.Equal(t, "bootstrap", posted.Author)
	ev, se := visitor.next(t)
	require.Equal(t, "message", se.Type)
	require.Equal(t, "human", se.Message.Role)
	require.Equal(t, "Hi Ada, I am refunding you now.", se.Message.Text)
	require.Empty(t, se.Message.Author, "the visitor sees that a person wrote, not who")
	require.Equal(t, posted.ID, se.Message.ID)
	lastSeen := ev.LastEventID

	// The visitor's stream breaks; meanwhile people resolve the
	// conversation; the visitor resumes where it left off (Last-Event-ID).
	visitor.close()
	r = f.Do("PUT", "/api/v2/conversations/help-1", f.A.Key, `{"status":"resolved"}`)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	visitor = follow(t, other.URL, "/api/v2/conversations/help-1/events"+vq, map[string]string{"Last-Event-ID": lastSeen})
	_, se = visitor.next(t)
	require.Equal(t, "status", se.Type)
	require.Equal(t, "resolved", se.Status)

	// The model answers again, and knows what the person said.
	rep = f.chat(t, f.public, "", "help-1", "ada", "Thanks!")
	require.Equal(t, "Hello from the fake model.", rep.Answer)
	require.False(t, rep.Metadata.Handoff)
	reqs := f.fake.Requests()
	require.Len(t, reqs, 2)
	var sawReply bool
	for _, m := range reqs[1]["messages"].([]any) {
		m := m.(map[string]any)
		if m["content"] == "Hi Ada, I am refunding you now." {
			require.Equal(t, "assistant", m["role"], "a person's reply speaks for the organization")
			sawReply = true
		}
	}
	require.True(t, sawReply)
	for _, want := range []string{"user", "assistant"} {
		_, se := visitor.next(t)
		require.Equal(t, want, se.Message.Role)
	}

	// The transcript has it all, in order.
	var d detail
	f.Do("GET", "/api/v2/conversations/help-1", f.A.Key, nil).JSON(t, &d)
	var roles []string
	for _, m := range d.Messages {
		roles = append(roles, m.Role)
	}
	require.Equal(t, []string{"user", "assistant", "user", "assistant", "user", "assistant", "user", "assistant", "human", "user", "assistant"}, roles)
	require.Equal(t, "resolved", d.Status)
	require.Equal(t, "bootstrap", d.Messages[8].Author, "the organization sees who wrote")
	require.Equal(t, "bootstrap", d.StatusChangedBy)
	r = f.Do("GET", "/api/v2/conversations/help-1"+vq, "", nil)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	require.NotContains(t, string(r.Body), "bootstrap", "the visitor's transcript names no key")

	// Streams refuse strangers as reads do.
	for _, tc := range []struct {
		name, path, key string
		status          int
	}{
		{"another visitor", "/api/v2/conversations/help-1/events" + visitorQuery(f.public, "eve"), "", 404},
		{"another organization", "/api/v2/conversations/help-1/events", f.B.Key, 404},
		{"no key", "/api/v2/conversations/help-1/events", "", 401},
		{"a bad Last-Event-ID", "/api/v2/conversations/help-1/events?lastEventId=x", f.A.Key, 400},
	} {
		r := f.Do("GET", tc.path, tc.key, nil)
		require.Equal(t, tc.status, r.Status, "%s: %s", tc.name, r.Body)
	}

	// A visitor's streams from one address are bounded (the key's stream
	// does not count); one closed makes room for another.
	open := []*events{visitor}
	for len(open) < conversation.MaxVisitorStreams {
		open = append(open, follow(t, other.URL, "/api/v2/conversations/help-1/events"+vq, nil))
	}
	opens := func() int {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, other.URL+"/api/v2/conversations/help-1/events"+vq, nil)
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusTooManyRequests, opens())
	open[1].resp.Body.Close()
	require.Eventually(t, func() bool { return opens() == http.StatusOK }, 5*time.Second, 50*time.Millisecond)
}

// bearer sets a key on unary and streaming Connect calls.
type bearer string

func (b bearer) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		req.Header().Set("Authorization", "Bearer "+string(b))
		return next(ctx, req)
	}
}

func (b bearer) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		conn.RequestHeader().Set("Authorization", "Bearer "+string(b))
		return conn
	}
}

func (bearer) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

func TestConnect(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	client := func(key string) parleyv1connect.ConversationServiceClient {
		var opts []connect.ClientOption
		if key != "" {
			opts = append(opts, connect.WithInterceptors(bearer(key)))
		}
		return parleyv1connect.NewConversationServiceClient(http.DefaultClient, f.URL, opts...)
	}
	a, b, anon, chatOnly := client(f.A.Key), client(f.B.Key), client(""), client(f.chatKey)
	f.chat(t, f.public, "", "rpc-1", "ada", "Hello")
	f.chat(t, f.private, f.A.Key, "rpc-2", "", "Hello")

	l, err := a.ListConversations(ctx, &parleyv1.ListConversationsRequest{Limit: 1})
	require.NoError(t, err)
	require.Len(t, l.GetConversations(), 1)
	require.Equal(t, "rpc-2", l.GetConversations()[0].GetId())
	require.NotEmpty(t, l.GetNextCursor())
	l, err = a.ListConversations(ctx, &parleyv1.ListConversationsRequest{Limit: 1, Cursor: l.GetNextCursor()})
	require.NoError(t, err)
	require.Equal(t, "rpc-1", l.GetConversations()[0].GetId())
	_, err = a.ListConversations(ctx, &parleyv1.ListConversationsRequest{Limit: 51})
	require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err))
	l, err = anon.ListConversations(ctx, &parleyv1.ListConversationsRequest{AgentId: f.public, VisitorId: "ada"})
	require.NoError(t, err)
	require.Len(t, l.GetConversations(), 1)
	_, err = anon.ListConversations(ctx, &parleyv1.ListConversationsRequest{})
	require.Equal(t, connect.CodeUnauthenticated, connect.CodeOf(err))
	// A binary Timestamp or a cursor Postgres cannot hold is refused, the
	// field named (a 500 once).
	for _, c := range []struct {
		name   string
		client parleyv1connect.ConversationServiceClient
		req    *parleyv1.ListConversationsRequest
		field  string
	}{
		{"since 1e12 s before 1970", a, &parleyv1.ListConversationsRequest{Since: &timestamppb.Timestamp{Seconds: -1e12}}, "since"},
		{"since 1e12 s after 1970", a, &parleyv1.ListConversationsRequest{Since: &timestamppb.Timestamp{Seconds: 1e12}}, "since"},
		{"since, nanos out of range", a, &parleyv1.ListConversationsRequest{Since: &timestamppb.Timestamp{Nanos: -1}}, "since"},
		{"a visitor's since", anon, &parleyv1.ListConversationsRequest{AgentId: f.public, VisitorId: "ada", Since: &timestamppb.Timestamp{Seconds: -1e12}}, "since"},
		{"a visitor's cursor", anon, &parleyv1.ListConversationsRequest{AgentId: f.public, VisitorId: "ada", Cursor: "-300000000000000000_a"}, "cursor"},
	} {
		_, err = c.client.ListConversations(ctx, c.req)
		require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err), "%s: %v", c.name, err)
		require.Contains(t, err.Error(), c.field, c.name)
	}

	g, err := a.GetConversation(ctx, &parleyv1.GetConversationRequest{ConversationId: "rpc-1"})
	require.NoError(t, err)
	require.Equal(t, "ada", g.GetConversation().GetVisitorId())
	require.Len(t, g.GetMessages(), 2)
	require.Equal(t, int64(2), g.GetLastEventId())
	_, err = anon.GetConversation(ctx, &parleyv1.GetConversationRequest{ConversationId: "rpc-1", AgentId: f.public, VisitorId: "ada"})
	require.NoError(t, err)
	for _, c := range []struct {
		name   string
		client parleyv1connect.ConversationServiceClient
		req    *parleyv1.GetConversationRequest
	}{
		{"another organization", b, &parleyv1.GetConversationRequest{ConversationId: "rpc-1"}},
		{"another visitor", anon, &parleyv1.GetConversationRequest{ConversationId: "rpc-1", AgentId: f.public, VisitorId: "eve"}},
		{"another agent's conversation", anon, &parleyv1.GetConversationRequest{ConversationId: "rpc-2", AgentId: f.public, VisitorId: "ada"}},
	} {
		_, err := c.client.GetConversation(ctx, c.req)
		require.Equal(t, connect.CodeNotFound, connect.CodeOf(err), c.name)
	}

	// Ratings: protovalidate names the field; a visitor rates, never sets a status.
	for _, n := range []int32{0, 6} {
		_, err = a.UpdateConversation(ctx, &parleyv1.UpdateConversationRequest{ConversationId: "rpc-1", Rating: &n})
		require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err), n)
		require.Contains(t, err.Error(), "rating")
	}
	_, err = a.UpdateConversation(ctx, &parleyv1.UpdateConversationRequest{ConversationId: "rpc-1"})
	require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err))
	three := int32(3)
	u, err := anon.UpdateConversation(ctx, &parleyv1.UpdateConversationRequest{ConversationId: "rpc-1", AgentId: f.public, VisitorId: "ada", Rating: &three})
	require.NoError(t, err)
	require.Equal(t, int32(3), u.GetConversation().GetRating())
	resolved, human := "resolved", "human_requested"
	_, err = anon.UpdateConversation(ctx, &parleyv1.UpdateConversationRequest{ConversationId: "rpc-1", AgentId: f.public, VisitorId: "ada", Status: &resolved})
	require.Equal(t, connect.CodePermissionDenied, connect.CodeOf(err))
	_, err = chatOnly.UpdateConversation(ctx, &parleyv1.UpdateConversationRequest{ConversationId: "rpc-1", Status: &resolved})
	require.Equal(t, connect.CodePermissionDenied, connect.CodeOf(err))
	_, err = b.UpdateConversation(ctx, &parleyv1.UpdateConversationRequest{ConversationId: "rpc-1", Rating: &three})
	require.Equal(t, connect.CodeNotFound, connect.CodeOf(err))

	// Watch from the start: the two messages, then live events.
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	zero := int64(0)
	stream, err := anon.WatchConversation(wctx, &parleyv1.WatchConversationRequest{ConversationId: "rpc-1", AgentId: f.public, VisitorId: "ada", AfterEventId: &zero})
	require.NoError(t, err)
	defer stream.Close()
	next := func() *parleyv1.WatchConversationResponse {
		t.Helper()
		require.True(t, stream.Receive(), "%v", stream.Err())
		return stream.Msg()
	}
	hb := next()
	require.NotNil(t, hb.GetHeartbeat(), "a stream opens with a heartbeat")
	require.Equal(t, int64(0), hb.GetEventId())
	require.Equal(t, "user", next().GetMessage().GetRole())
	require.Equal(t, "assistant", next().GetMessage().GetRole())

	_, err = a.UpdateConversation(ctx, &parleyv1.UpdateConversationRequest{ConversationId: "rpc-1", Status: &human, Reason: "asked"})
	require.NoError(t, err)
	ev := next()
	require.Equal(t, int64(3), ev.GetEventId())
	require.Equal(t, "human_requested", ev.GetStatus().GetStatus())
	require.Empty(t, ev.GetStatus().GetReason(), "a visitor's stream: not why")
	require.Empty(t, ev.GetStatus().GetChangedBy(), "a visitor's stream: not who")

	_, err = anon.PostMessage(ctx, &parleyv1.PostMessageRequest{ConversationId: "rpc-1", Text: "hi"})
	require.Equal(t, connect.CodeUnauthenticated, connect.CodeOf(err))
	_, err = chatOnly.PostMessage(ctx, &parleyv1.PostMessageRequest{ConversationId: "rpc-1", Text: "hi"})
	require.Equal(t, connect.CodePermissionDenied, connect.CodeOf(err))
	_, err = b.PostMessage(ctx, &parleyv1.PostMessageRequest{ConversationId: "rpc-1", Text: "hi"})
	require.Equal(t, connect.CodeNotFound, connect.CodeOf(err))
	_, err = a.PostMessage(ctx, &parleyv1.PostMessageRequest{ConversationId: "rpc-1", Text: " "})
	require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err))
	pm, err := a.PostMessage(ctx, &parleyv1.PostMessageRequest{ConversationId: "rpc-1", Text: "A person here."})
	require.NoError(t, err)
	require.Equal(t, "human", pm.GetMessage().GetRole())
	require.Equal(t, "bootstrap", pm.GetMessage().GetAuthor())
	ev = next()
	require.Equal(t, int64(4), ev.GetEventId())
	require.Equal(t, "A person here.", ev.GetMessage().GetText())
	require.Empty(t, ev.GetMessage().GetAuthor(), "a visitor's stream: not who wrote")

	// Watch refusals.
	for _, c := range []struct {
		name   string
		client parleyv1connect.ConversationServiceClient
		req    *parleyv1.WatchConversationRequest
		code   connect.Code
	}{
		{"another organization", b, &parleyv1.WatchConversationRequest{ConversationId: "rpc-1"}, connect.CodeNotFound},
		{"another visitor", anon, &parleyv1.WatchConversationRequest{ConversationId: "rpc-1", AgentId: f.public, VisitorId: "eve"}, connect.CodeNotFound},
		{"no key", anon, &parleyv1.WatchConversationRequest{ConversationId: "rpc-2"}, connect.CodeUnauthenticated},
	} {
		s, err := c.client.WatchConversation(ctx, c.req)
		require.NoError(t, err)
		require.False(t, s.Receive(), c.name)
		require.Equal(t, c.code, connect.CodeOf(s.Err()), c.name)
		s.Close()
	}
}

// A stream ends with its admission: a key revoked, or a public agent made
// private, while its stream is open stops it at the next heartbeat (it
// went on receiving replies for up to an hour).
func TestStreamsEndWithTheirAdmission(t *testing.T) {
	t.Parallel()
	fake := testenv.NewFakeProvider(t)
	f := &fixture{Env: testenv.New(t, testenv.WithFakeModels(fake), func(c *server.Config) { c.WatchHeartbeat = 100 * time.Millisecond }), fake: fake}
	f.public = f.agent(t, `{"name":"Public","instructions":"You are public.","visibility":"public"}`)
	keys := parleyv1connect.NewApiKeyServiceClient(http.DefaultClient, f.URL, connect.WithInterceptors(testenv.Bearer(f.A.Key)))
	k, err := keys.CreateApiKey(context.Background(), &parleyv1.CreateApiKeyRequest{Name: "widget backend", Scopes: []string{"chat"}})
	require.NoError(t, err)

	f.chat(t, f.public, k.GetSecret(), "by-key", "", "hello")
	f.chat(t, f.public, "", "by-visitor", "ada", "hello")
	byKey := follow(t, f.URL, "/api/v2/conversations/by-key/events", map[string]string{"Authorization": "Bearer " + k.GetSecret()})
	byVisitor := follow(t, f.URL, "/api/v2/conversations/by-visitor/events"+visitorQuery(f.public, "ada"), nil)

	_, err = keys.RevokeApiKey(context.Background(), &parleyv1.RevokeApiKeyRequest{Id: k.GetApiKey().GetId()})
	require.NoError(t, err)
	r := f.Do("PUT", "/api/agents/"+f.public, f.A.Key, `{"visibility":"private"}`)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)

	for name, stream := range map[string]*events{"revoked key": byKey, "agent made private": byVisitor} {
		var last streamEvent
		for {
			_, ev := stream.nextOrEnd(t)
			if ev == nil {
				break
			}
			last = *ev
		}
		require.Equal(t, "UNAUTHORIZED", last.Error.Code, name)
	}
}

// nextOrEnd is the stream's next event, nil once it has ended.
func (e *events) nextOrEnd(t *testing.T) (sse.Event, *streamEvent) {
	t.Helper()
	select {
	case ev, ok := <-e.c:
		if !ok {
			return sse.Event{}, nil
		}
		var se streamEvent
		require.NoError(t, json.Unmarshal([]byte(ev.Data), &se), ev.Data)
		return ev, &se
	case <-time.After(10 * time.Second):
		t.Fatal("the stream went on for 10 s")
	}
	panic("unreachable")
}
