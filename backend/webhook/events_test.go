package webhook_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/parleyhq/parley/backend/db/dbq"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/handoff"
	"github.com/parleyhq/parley/backend/llm"
	"github.com/parleyhq/parley/backend/testenv"
	"github.com/parleyhq/parley/backend/tool"
	"github.com/parleyhq/parley/backend/webhook"
)

// The events of conversations, messages and leads, each through the HTTP
// API of a real instance, delivered to a local endpoint.

// event is one delivered payload.
type event struct {
	Type      string
	Timestamp string
	Data      map[string]any
}

// events are what rcv has received so far, in arrival order.
func (s *sink) events(t *testing.T) []event {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]event, 0, len(s.bod))
	for _, b := range s.bod {
		var ev event
		require.NoError(t, json.Unmarshal(b, &ev), "%s", b)
		// As the README shows it: UTC, to the millisecond.
		require.Regexp(t, `^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`, ev.Timestamp)
		out = append(out, ev)
	}
	return out
}

// await waits until rcv has n events, gives stragglers a moment, and
// returns them: exactly n.
func (s *sink) await(t *testing.T, n int) []event {
	t.Helper()
	require.Eventually(t, func() bool { return s.count() >= n }, 15*time.Second, 20*time.Millisecond, "waiting for %d events", n)
	time.Sleep(200 * time.Millisecond)
	evs := s.events(t)
	require.Len(t, evs, n, "events: %+v", evs)
	return evs
}

// ofType keeps the events of one type.
func ofType(evs []event, typ string) []event {
	var out []event
	for _, ev := range evs {
		if ev.Type == typ {
			out = append(out, ev)
		}
	}
	return out
}

// byRole is the message.created events by their message's role and text.
func byRole(evs []event, role string) []event {
	var out []event
	for _, ev := range ofType(evs, webhook.MessageCreated) {
		if ev.Data["role"] == role {
			out = append(out, ev)
		}
	}
	return out
}

// subscribe creates an endpoint of org for events.
func subscribe(t *testing.T, e *testenv.Env, key string, rcv *sink, events ...string) string {
	t.Helper()
	r := e.Do("POST", "/api/webhooks", key, map[string]any{"url": rcv.URL + "/in", "events": events})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var h hookJSON
	r.JSON(t, &h)
	return h.ID
}

func newAgent(t *testing.T, e *testenv.Env, key string, tools ...string) string {
	t.Helper()
	body := map[string]any{"name": "Hooked", "instructions": "Be brief."}
	if len(tools) > 0 {
		body["tools"] = tools
	}
	r := e.Do("POST", "/api/agents", key, body)
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var a struct{ ID string }
	r.JSON(t, &a)
	return a.ID
}

type chatReply struct{ Answer, ConversationID, MessageID string }

func chatTurn(t *testing.T, e *testenv.Env, agent, key string, body map[string]any) chatReply {
	t.Helper()
	r := e.Do("POST", "/api/v2/agent/"+agent+"/chat", key, body)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var rep chatReply
	r.JSON(t, &rep)
	return rep
}

// actor plays a tool-calling model: a question "lead:{json}" calls
// lead_capture with those arguments, "human:reason" calls request_human;
// given tool results it says "Noted."; else it says hello.
func actor(_ int, body map[string]any) testenv.FakeReply {
	msgs, _ := body["messages"].([]any)
	last, _ := msgs[len(msgs)-1].(map[string]any)
	if last["role"] == "tool" {
		return testenv.FakeReply{Tokens: []string{"Noted."}}
	}
	q, _ := last["content"].(string)
	switch {
	case strings.HasPrefix(q, "lead:"):
		return testenv.FakeReply{ToolCalls: []llm.ToolCall{{ID: "lc_1", Name: tool.LeadCapture, Arguments: strings.TrimPrefix(q, "lead:")}}}
	case strings.HasPrefix(q, "human:"):
		args, _ := json.Marshal(map[string]string{"reason": strings.TrimPrefix(q, "human:")})
		return testenv.FakeReply{ToolCalls: []llm.ToolCall{{ID: "rh_1", Name: tool.RequestHuman, Arguments: string(args)}}}
	}
	return testenv.FakeReply{Tokens: []string{"Hello", " there."}}
}

// A chat turn emits conversation.created when it starts a conversation and
// message.created for the question and the answer, with the summary and
// the messages as the API returns them. A turn before the endpoint existed
// sent nothing (and the Emitter, which then knew the organization had no
// endpoint, learns of the new one at once); another organization's turns
// send nothing to it.
func TestChatEmitsConversationAndMessages(t *testing.T) {
	t.Parallel()
	fake := testenv.NewFakeProvider(t)
	fake.Reply = actor
	e := testenv.New(t, testenv.WithWorkers, allowLoopback, testenv.WithFakeModels(fake))
	rcv := newSink(t)
	agent := newAgent(t, e, e.A.Key)
	chatTurn(t, e, agent, e.A.Key, map[string]any{"query": "before any endpoint", "conversationId": "early"})

	subscribe(t, e, e.A.Key, rcv, webhook.ConversationCreated, webhook.MessageCreated)
	rep := chatTurn(t, e, agent, e.A.Key, map[string]any{"query": "hello", "conversationId": "hooked-1", "visitorId": "v-1"})
	evs := rcv.await(t, 3)

	created := ofType(evs, webhook.ConversationCreated)
	require.Len(t, created, 1)
	conv := created[0].Data
	require.Equal(t, "hooked-1", conv["id"])
	require.Equal(t, agent, conv["agentId"])
	require.Equal(t, "unresolved", conv["status"])
	require.Equal(t, "api", conv["channel"])
	require.Equal(t, "v-1", conv["visitorId"])
	require.Contains(t, conv, "createTime")
	_, err := time.Parse(time.RFC3339Nano, created[0].Timestamp)
	require.NoError(t, err)

	q := byRole(evs, "user")
	require.Len(t, q, 1)
	require.Equal(t, "hello", q[0].Data["text"])
	require.Equal(t, "hooked-1", q[0].Data["conversationId"])
	require.NotEmpty(t, q[0].Data["id"])
	a := byRole(evs, "assistant")
	require.Len(t, a, 1)
	require.Equal(t, "Hello there.", a[0].Data["text"])
	require.Equal(t, rep.MessageID, a[0].Data["id"])
	require.Equal(t, "hooked-1", a[0].Data["conversationId"])
	require.NotEmpty(t, a[0].Data["model"])
	require.Equal(t, false, a[0].Data["incomplete"])

	// The same ids as the conversation's transcript shows.
	r := e.Do("GET", "/api/v2/conversations/hooked-1", e.A.Key, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var tr struct {
		Messages []struct{ ID, Role, Text string }
	}
	r.JSON(t, &tr)
	require.Len(t, tr.Messages, 2)
	require.Equal(t, q[0].Data["id"], tr.Messages[0].ID)
	require.Equal(t, a[0].Data["id"], tr.Messages[1].ID)

	// Another organization's turns reach none of A's endpoints; A's next
	// turn continues the conversation: two messages, no new conversation.
	chatTurn(t, e, newAgent(t, e, e.B.Key), e.B.Key, map[string]any{"query": "hello from B", "conversationId": "b-1"})
	chatTurn(t, e, agent, e.A.Key, map[string]any{"query": "again", "conversationId": "hooked-1", "visitorId": "v-1"})
	evs = rcv.await(t, 5)
	require.Len(t, ofType(evs, webhook.ConversationCreated), 1)
	require.Len(t, byRole(evs, "user"), 2)
	for _, ev := range evs {
		require.NotEqual(t, "hello from B", ev.Data["text"])
		if ev.Type == webhook.MessageCreated {
			require.Equal(t, "hooked-1", ev.Data["conversationId"])
		}
	}
}

// Status changes through PUT are conversation.resolved and
// conversation.human_requested (none when the status does not change); a
// person's reply takes the conversation (human_requested) and is a
// message.created of role human; while people have it, the visitor's
// message and the handoff reply are messages too.
func TestStatusAndRepliesEmitEvents(t *testing.T) {
	t.Parallel()
	fake := testenv.NewFakeProvider(t)
	fake.Reply = actor
	e := testenv.New(t, testenv.WithWorkers, allowLoopback, testenv.WithFakeModels(fake))
	rcv := newSink(t)
	agent := newAgent(t, e, e.A.Key)
	subscribe(t, e, e.A.Key, rcv, webhook.ConversationHumanRequested, webhook.ConversationResolved, webhook.MessageCreated)
	chatTurn(t, e, agent, e.A.Key, map[string]any{"query": "hello", "conversationId": "st-1"})
	rcv.await(t, 2)

	r := e.Do("PUT", "/api/v2/conversations/st-1", e.A.Key, map[string]any{"status": "resolved", "reason": "answered"})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	evs := rcv.await(t, 3)
	res := ofType(evs, webhook.ConversationResolved)
	require.Len(t, res, 1)
	require.Equal(t, "st-1", res[0].Data["id"])
	require.Equal(t, "resolved", res[0].Data["status"])
	require.Equal(t, "answered", res[0].Data["statusReason"])
	require.Equal(t, agent, res[0].Data["agentId"])
	require.Equal(t, "2", res[0].Data["messagesCount"], "int64 in protojson: a string")

	r = e.Do("POST", "/api/v2/conversations/st-1/messages", e.A.Key, map[string]any{"text": "A person here."})
	require.Less(t, r.Status, 300, "%s", r.Body)
	evs = rcv.await(t, 5)
	hr := ofType(evs, webhook.ConversationHumanRequested)
	require.Len(t, hr, 1)
	require.Equal(t, "human_requested", hr[0].Data["status"])
	require.Equal(t, "a person replied", hr[0].Data["statusReason"])
	human := byRole(evs, "human")
	require.Len(t, human, 1)
	require.Equal(t, "A person here.", human[0].Data["text"])
	require.Equal(t, "st-1", human[0].Data["conversationId"])
	require.NotEmpty(t, human[0].Data["author"])

	// Already with people: no change, no event.
	r = e.Do("PUT", "/api/v2/conversations/st-1", e.A.Key, map[string]any{"status": "human_requested"})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	// The visitor writes while people have it: its message and the
	// handoff reply.
	rep := chatTurn(t, e, agent, e.A.Key, map[string]any{"query": "still there?", "conversationId": "st-1"})
	require.Equal(t, handoff.DefaultMessage, rep.Answer)
	evs = rcv.await(t, 7)
	require.Len(t, ofType(evs, webhook.ConversationHumanRequested), 1)
	replies := byRole(evs, "assistant")
	require.Len(t, replies, 2)
	texts := map[any]any{}
	for _, ev := range replies {
		texts[ev.Data["id"]] = ev.Data["text"]
	}
	require.Equal(t, handoff.DefaultMessage, texts[rep.MessageID])
}

// lead_capture creating a contact is lead.created with the contact as the
// API shows it (a later call adding to the same contact is not a new
// lead); request_human is conversation.human_requested, changed by the
// agent.
func TestToolsEmitLeadAndHandoff(t *testing.T) {
	t.Parallel()
	fake := testenv.NewFakeProvider(t)
	fake.Reply = actor
	e := testenv.New(t, testenv.WithWorkers, allowLoopback, testenv.WithFakeModels(fake))
	rcv := newSink(t)
	agent := newAgent(t, e, e.A.Key, tool.LeadCapture, tool.RequestHuman)
	subscribe(t, e, e.A.Key, rcv, webhook.LeadCreated, webhook.ConversationHumanRequested)

	chatTurn(t, e, agent, e.A.Key, map[string]any{"conversationId": "lead-1",
		"query": `lead:{"email":"Ada@Example.com","firstName":"Ada","note":"Wants a quote."}`})
	evs := rcv.await(t, 1)
	require.Equal(t, webhook.LeadCreated, evs[0].Type)
	lead := evs[0].Data
	require.Equal(t, "ada@example.com", lead["email"])
	require.Equal(t, "Ada", lead["firstName"])
	require.Equal(t, "Wants a quote.", lead["notes"])
	r := e.Do("GET", "/api/contacts/"+lead["id"].(string), e.A.Key, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)

	// The same visitor adds a phone number: the same contact, no new lead.
	chatTurn(t, e, agent, e.A.Key, map[string]any{"conversationId": "lead-1", "query": `lead:{"phoneNumber":"+442079460958"}`})
	chatTurn(t, e, agent, e.A.Key, map[string]any{"conversationId": "lead-1", "query": "human:wants a discount"})
	evs = rcv.await(t, 2)
	require.Len(t, ofType(evs, webhook.LeadCreated), 1)
	hr := ofType(evs, webhook.ConversationHumanRequested)
	require.Len(t, hr, 1)
	require.Equal(t, "lead-1", hr[0].Data["id"])
	require.Equal(t, handoff.ByAgent, hr[0].Data["statusChangedBy"])
	require.Equal(t, "wants a discount", hr[0].Data["statusReason"])
	require.Equal(t, lead["id"], hr[0].Data["contactId"], "the summary carries the conversation's contact")
}

// recorder is an Enqueuer that only counts.
type recorder struct {
	mu sync.Mutex
	n  int
}

func (r *recorder) EnqueueDelivery(context.Context, pgx.Tx, uuid.UUID, uuid.UUID) error {
	r.mu.Lock()
	r.n++
	r.mu.Unlock()
	return nil
}

// A status change whose transaction rolls back leaves no delivery behind,
// though the event was emitted in it; the conversation keeps its status.
func TestRolledBackStatusChangeSendsNothing(t *testing.T) {
	t.Parallel()
	fake := testenv.NewFakeProvider(t)
	e := testenv.New(t, testenv.WithWorkers, allowLoopback, testenv.WithFakeModels(fake))
	rcv := newSink(t)
	agent := newAgent(t, e, e.A.Key)
	hook := subscribe(t, e, e.A.Key, rcv, webhook.ConversationResolved)
	chatTurn(t, e, agent, e.A.Key, map[string]any{"query": "hello", "conversationId": "rb-1"})

	jobs := &recorder{}
	hooks := &webhook.Emitter{Jobs: jobs}
	errRollback := errors.New("rolled back")
	err := e.App.Store.TenantTx(context.Background(), e.A.ID, func(tx pgx.Tx, _ *dbq.Queries) error {
		changed, err := handoff.SetStatus(context.Background(), tx, hooks, e.A.ID, "rb-1", handoff.Resolved, "", "test")
		require.NoError(t, err)
		require.True(t, changed)
		return errRollback
	})
	require.ErrorIs(t, err, errRollback)
	require.Equal(t, 1, jobs.n, "the event was emitted in the transaction")

	r := e.Do("GET", "/api/webhooks/"+hook+"/deliveries", e.A.Key, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var page struct{ Deliveries []map[string]any }
	r.JSON(t, &page)
	require.Empty(t, page.Deliveries)
	r = e.Do("GET", "/api/v2/conversations/rb-1", e.A.Key, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var c struct{ Status string }
	r.JSON(t, &c)
	require.Equal(t, "unresolved", c.Status)
	require.Zero(t, rcv.count())
}

// Silent is known only once a look found no enabled endpoint, and is
// forgotten with the organization's endpoints (chat then stores an answer
// in one round trip: nothing to emit).
func TestSilentOrganizations(t *testing.T) {
	t.Parallel()
	e := testenv.New(t, testenv.WithWorkers, allowLoopback)
	ctx := context.Background()
	subscribe(t, e, e.A.Key, newSink(t), webhook.MessageCreated)
	hooks := &webhook.Emitter{Jobs: &recorder{}}
	emit := func(org uuid.UUID) {
		require.NoError(t, e.App.Store.TenantTx(ctx, org, func(tx pgx.Tx, _ *dbq.Queries) error {
			return hooks.Emit(ctx, tx, org, webhook.MessageCreated, func() (proto.Message, error) { return &parleyv1.Agent{}, nil })
		}))
	}
	require.False(t, hooks.Silent(e.B.ID), "not known before a look")
	emit(e.B.ID)
	require.True(t, hooks.Silent(e.B.ID), "B has no endpoint")
	emit(e.A.ID)
	require.False(t, hooks.Silent(e.A.ID), "A has one")
	hooks.Forget(e.B.ID)
	require.False(t, hooks.Silent(e.B.ID))
	var none *webhook.Emitter
	require.True(t, none.Silent(e.A.ID), "no Emitter emits nothing")
}
