package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/member"
)

// apiID creates something over the REST API and returns its id.
func apiID(t *testing.T, e *env, path, key string, body any) string {
	t.Helper()
	r := e.api(t, "POST", path, key, body)
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var out struct{ ID string }
	r.JSON(t, &out)
	return out.ID
}

// chat sends one message over the REST API.
func chat(t *testing.T, e *env, key, agent, conv, visitor, query string) {
	t.Helper()
	r := e.api(t, "POST", "/api/v2/agent/"+agent+"/chat", key, map[string]any{"query": query, "conversationId": conv, "visitorId": visitor})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
}

func conversationIDs(p page) []string {
	var out []string
	p.Doc.Find("[data-testid=conversation-row]").Each(func(_ int, s *goquery.Selection) {
		out = append(out, s.AttrOr("data-id", ""))
	})
	return out
}

func testConversations(t *testing.T, e *env) {
	org := e.Bootstrap("Chatty Co", "pro")
	admin := e.as(t, org.ID, member.Admin)

	// Without agents, the page says so.
	p := admin.get("/console/conversations")
	require.Equal(t, http.StatusOK, p.Status, p.Body)
	require.Equal(t, 1, p.Doc.Find("[data-testid=no-agents]").Length())

	// An agent answering (with the offline engine) from a datastore whose
	// text holds markup; two agents, so that the picker has a choice.
	store := apiID(t, e, "/api/datastores", org.Key, map[string]any{"name": "Shop"})
	docName := "Guide " + xssImg
	apiID(t, e, "/api/datastores/"+store+"/datasources", org.Key, map[string]any{"type": "text", "name": docName,
		"text": "Parcels leave the warehouse every weekday and arrive within three days. " + xssScript})
	require.Eventually(t, func() bool {
		return sourcesOf(t, admin.get("/console/datastores/"+store+"/sources"))[docName].Status == "synced"
	}, 30*time.Second, 100*time.Millisecond)
	quiet := apiID(t, e, "/api/agents", org.Key, map[string]any{"name": "Quiet", "instructions": "Say little.", "model": "gpt-4o-mini"})
	agentName := "Shop " + xssScript
	agent := apiID(t, e, "/api/agents", org.Key, map[string]any{"name": agentName, "instructions": "Answer from the documents.",
		"model": "gpt-4o-mini", "datastores": []string{store}})

	question := "When do parcels arrive? " + xssScript + xssImg
	chat(t, e, org.Key, agent, "conv-1", "v1", question)
	chat(t, e, org.Key, agent, "conv-2", "v2", "Do parcels leave on weekdays?")
	chat(t, e, org.Key, agent, "conv-3", "v1", "And on Sundays, do parcels leave?")
	chat(t, e, org.Key, agent, "conv-1", "v1", "Thanks, how many days again for parcels?")
	chat(t, e, org.Key, quiet, "quiet-1", "", "hello")

	// The newest agent is the default; newest conversations first.
	p = admin.get("/console/conversations")
	require.Equal(t, http.StatusOK, p.Status, p.Body)
	noMarkup(t, p)
	require.Equal(t, agent, p.Doc.Find("#conv-agent option[selected]").AttrOr("value", ""))
	require.Equal(t, agentName, strings.TrimSpace(p.Doc.Find("#conv-agent option[selected]").Text()))
	require.Equal(t, []string{"conv-3", "conv-2", "conv-1"}, conversationIDs(p))
	row := p.Doc.Find(`[data-testid=conversation-row][data-id="conv-1"]`)
	require.Contains(t, row.Text(), "4", "conv-1 has 4 messages")
	require.Contains(t, row.Text(), "v1")
	require.Contains(t, row.Text(), "unresolved")

	// The other agent, and filters.
	p = admin.get("/console/conversations?agent=" + quiet)
	require.Equal(t, []string{"quiet-1"}, conversationIDs(p))
	p = admin.get("/console/conversations?" + url.Values{"agent": {agent}, "visitorId": {"v1"}}.Encode())
	require.Equal(t, []string{"conv-3", "conv-1"}, conversationIDs(p))
	require.Equal(t, "v1", p.Doc.Find("#conv-visitor").AttrOr("value", ""))
	p = admin.get("/console/conversations?" + url.Values{"agent": {agent}, "status": {"resolved"}}.Encode())
	require.Empty(t, conversationIDs(p))
	require.Equal(t, 1, p.Doc.Find("[data-testid=no-conversations]").Length())
	p = admin.get("/console/conversations?" + url.Values{"agent": {agent}, "status": {"unresolved"}, "visitorId": {"v2"}}.Encode())
	require.Equal(t, []string{"conv-2"}, conversationIDs(p))
	p = admin.get("/console/conversations?" + url.Values{"agent": {agent}, "status": {"open"}}.Encode())
	require.Equal(t, http.StatusBadRequest, p.Status)
	require.Contains(t, p.Text("[data-testid=error]"), "status")
	p = admin.get("/console/conversations?" + url.Values{"agent": {agent}, "cursor": {"bogus"}}.Encode())
	require.Equal(t, http.StatusBadRequest, p.Status)
	require.Contains(t, p.Text("[data-testid=error]"), "cursor")
	require.Equal(t, http.StatusNotFound, admin.get("/console/conversations?agent=not-an-agent").Status)

	// The transcript: each message as text, the answer with its model,
	// latency and sources.
	link := p.Doc.Find("[data-testid=conversation-link]")
	require.Zero(t, link.Length(), "a refused listing lists nothing")
	p = admin.get("/console/conversations?agent=" + agent)
	href, _ := p.Doc.Find(`[data-testid=conversation-row][data-id="conv-1"] [data-testid=conversation-link]`).Attr("href")
	require.Equal(t, "/console/conversations/conv-1?agent="+agent, href)
	p = admin.get(href)
	require.Equal(t, http.StatusOK, p.Status, p.Body)
	noMarkup(t, p)
	msgs := p.Doc.Find("[data-testid=message]")
	require.Equal(t, 4, msgs.Length())
	require.Equal(t, "user", msgs.First().AttrOr("data-role", ""))
	require.Equal(t, question, msgs.First().Find("[data-testid=message-text]").Text())
	answer := msgs.Eq(1)
	require.Equal(t, "assistant", answer.AttrOr("data-role", ""))
	require.Contains(t, answer.Find("[data-testid=message-text]").Text(), "three days")
	require.NotEmpty(t, strings.TrimSpace(answer.Find("[data-testid=model]").Text()))
	require.NotEmpty(t, strings.TrimSpace(answer.Find("[data-testid=latency]").Text()))
	src := answer.Find("[data-testid=source]").First()
	require.Equal(t, docName, strings.TrimSpace(src.Find("[data-testid=source-name]").Text()))
	require.Contains(t, src.Find("[data-testid=source-chunk]").Text(), xssScript)
	require.NotEmpty(t, strings.TrimSpace(src.Find("[data-testid=source-score]").Text()))
	require.Equal(t, "v1", p.Text("[data-testid=visitor]"))
	require.Equal(t, agentName, p.Text("[data-testid=agent-name]"))

	// Conversation ids are the clients' own, escaped in links.
	odd := "odd:id@x.y-1"
	chat(t, e, org.Key, agent, odd, "", "parcels?")
	p = admin.get("/console/conversations?agent=" + agent)
	href, _ = p.Doc.Find(`[data-testid=conversation-link]`).First().Attr("href")
	p = admin.get(href)
	require.Equal(t, http.StatusOK, p.Status, "%s: %s", href, p.Body)
	require.Equal(t, odd, p.Text("[data-testid=conversation-id]"))

	// A viewer reads; unknown ids and agents are not found.
	viewer := e.as(t, org.ID, member.Viewer)
	require.Equal(t, []string{odd, "conv-3", "conv-2", "conv-1"}, conversationIDs(viewer.get("/console/conversations")))
	require.Equal(t, http.StatusOK, viewer.get("/console/conversations/conv-2").Status)
	require.Equal(t, http.StatusNotFound, viewer.get("/console/conversations/nope").Status)
	require.Equal(t, http.StatusNotFound, viewer.get("/console/conversations/conv-2?agent="+quiet).Status)

	// Another organization sees none of it, even with a conversation of
	// the same id of its own.
	other := e.as(t, e.B.ID, member.Admin)
	for _, p := range []page{
		other.get("/console/conversations/conv-1"),
		other.get("/console/conversations/conv-1?agent=" + agent),
		other.get("/console/conversations?agent=" + agent),
	} {
		require.Contains(t, []int{http.StatusNotFound, http.StatusForbidden}, p.Status, p.Body)
		require.NotContains(t, p.Body, "parcels")
		require.NotContains(t, p.Body, "conv-3")
		require.NotContains(t, p.Body, "Shop")
	}
	bAgent := apiID(t, e, "/api/agents", e.B.Key, map[string]any{"name": "B's", "instructions": "x", "model": "gpt-4o-mini"})
	chat(t, e, e.B.Key, bAgent, "conv-1", "", "B's own question")
	p = other.get("/console/conversations/conv-1")
	require.Equal(t, http.StatusOK, p.Status)
	require.Contains(t, p.Doc.Text(), "B's own question")
	require.NotContains(t, p.Body, "parcels")
	p = admin.get("/console/conversations/conv-1")
	require.NotContains(t, p.Doc.Text(), "B's own question")
}
