package conversation_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/account"
	"github.com/parleyhq/parley/backend/agent"
	"github.com/parleyhq/parley/backend/apperr"
	"github.com/parleyhq/parley/backend/auth"
	"github.com/parleyhq/parley/backend/conversation"
	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/dbtest"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
)

func TestReadsForAPrincipal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := db.Open(ctx, dbtest.New(t), 4, nil)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	store := &db.Store{Pool: pool}
	s := &conversation.Service{Store: store}

	orgA, _, err := account.Bootstrap(ctx, store, "A", "pro")
	require.NoError(t, err)
	orgB, _, err := account.Bootstrap(ctx, store, "B", "pro")
	require.NoError(t, err)
	agents := agent.NewHandler(store, nil, nil)
	newAgent := func(org uuid.UUID) uuid.UUID {
		resp, err := agents.CreateAgent(auth.WithPrincipal(ctx, &auth.Principal{OrgID: org, Scopes: []string{"admin"}}),
			&parleyv1.CreateAgentRequest{Name: "a", Instructions: "i"})
		require.NoError(t, err)
		return uuid.MustParse(resp.GetAgent().GetId())
	}
	a, b := newAgent(orgA), newAgent(orgB)
	// 7 conversations of A's agent: the last 3 in one transaction (the same
	// created_at: the id orders them), visitor v1 on the even ones.
	conv := func(q *dbq.Queries, i int) error {
		var visitor *string
		if i%2 == 0 {
			v := "v1"
			visitor = &v
		}
		id := fmt.Sprintf("c%d", i)
		if _, err := q.CreateConversation(ctx, dbq.CreateConversationParams{OrgID: orgA, ID: id, AgentID: a, VisitorID: visitor, Channel: "api"}); err != nil {
			return err
		}
		for j := range i {
			if _, err := q.CreateMessage(ctx, dbq.CreateMessageParams{OrgID: orgA, ID: uuid.Must(uuid.NewV7()), ConversationID: id, Role: "user",
				Content: fmt.Sprintf("m%d of %s", j, id), Channel: "api", Attachments: []byte("[]"), Sources: []byte("[]")}); err != nil {
				return err
			}
		}
		return nil
	}
	for i := range 4 {
		require.NoError(t, store.Tenant(ctx, orgA, func(q *dbq.Queries) error { return conv(q, i) }))
	}
	require.NoError(t, store.Tenant(ctx, orgA, func(q *dbq.Queries) error {
		for i := 4; i < 7; i++ {
			if err := conv(q, i); err != nil {
				return err
			}
		}
		_, err := q.CreateMessage(ctx, dbq.CreateMessageParams{OrgID: orgA, ID: uuid.Must(uuid.NewV7()), ConversationID: "c6", Role: "assistant",
			Content: "answer", Channel: "api", Attachments: []byte("[]"),
			Sources: []byte(`[{"source":"faq.md","score":0.8,"datasourceName":"FAQ","chunk":"the chunk"}]`)})
		return err
	}))
	// B has a conversation with the same client id.
	require.NoError(t, store.Tenant(ctx, orgB, func(q *dbq.Queries) error {
		_, err := q.CreateConversation(ctx, dbq.CreateConversationParams{OrgID: orgB, ID: "c6", AgentID: b, Channel: "api"})
		return err
	}))

	asA := auth.WithPrincipal(ctx, &auth.Principal{OrgID: orgA})
	asB := auth.WithPrincipal(ctx, &auth.Principal{OrgID: orgB})
	ids := func(p *conversation.Page) []string {
		var out []string
		for _, c := range p.Conversations {
			out = append(out, c.GetId())
		}
		return out
	}

	// Paged three at a time, newest first, ties by id.
	var all []string
	cursor := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 5)
		p, err := s.ListForPrincipal(asA, conversation.Filter{AgentID: a.String(), Limit: 3, Cursor: cursor})
		require.NoError(t, err)
		all = append(all, ids(p)...)
		if cursor = p.Next; cursor == "" {
			break
		}
	}
	require.Equal(t, []string{"c6", "c5", "c4", "c3", "c2", "c1", "c0"}, all)
	p, err := s.ListForPrincipal(asA, conversation.Filter{AgentID: a.String()})
	require.NoError(t, err)
	require.Empty(t, p.Next)
	require.Equal(t, int64(7), p.Conversations[0].GetMessagesCount())
	require.Equal(t, "answer", p.Conversations[0].GetLastMessage())

	// Filters.
	p, err = s.ListForPrincipal(asA, conversation.Filter{AgentID: a.String(), VisitorID: "v1"})
	require.NoError(t, err)
	require.Equal(t, []string{"c6", "c4", "c2", "c0"}, ids(p))
	p, err = s.ListForPrincipal(asA, conversation.Filter{AgentID: a.String(), Status: "resolved"})
	require.NoError(t, err)
	require.Empty(t, p.Conversations)
	_, err = s.ListForPrincipal(asA, conversation.Filter{AgentID: a.String(), Status: "open"})
	require.Equal(t, apperr.Invalid, apperr.CodeOf(err))
	_, err = s.ListForPrincipal(asA, conversation.Filter{AgentID: a.String(), Cursor: "nonsense"})
	require.Equal(t, apperr.Invalid, apperr.CodeOf(err))

	// Another organization's agent, an unknown one.
	_, err = s.ListForPrincipal(asB, conversation.Filter{AgentID: a.String()})
	require.Equal(t, apperr.Forbidden, apperr.CodeOf(err))
	_, err = s.ListForPrincipal(asA, conversation.Filter{AgentID: uuid.NewString()})
	require.Equal(t, apperr.NotFound, apperr.CodeOf(err))
	_, err = s.ListForPrincipal(asA, conversation.Filter{AgentID: "x"})
	require.Equal(t, apperr.NotFound, apperr.CodeOf(err))
	_, err = s.ListForPrincipal(ctx, conversation.Filter{AgentID: a.String()})
	require.Equal(t, apperr.Unauthenticated, apperr.CodeOf(err))

	// The transcript, oldest first, with the answer's sources; each
	// organization sees its own c6.
	tr, err := s.TranscriptForPrincipal(asA, "c6")
	require.NoError(t, err)
	require.Equal(t, a.String(), tr.AgentID)
	require.Len(t, tr.Messages, 7)
	require.Equal(t, "m0 of c6", tr.Messages[0].Content)
	last := tr.Messages[6]
	require.Equal(t, "assistant", last.Role)
	require.Len(t, last.Sources, 1)
	require.Equal(t, "FAQ", last.Sources[0].GetDatasourceName())
	require.InDelta(t, 0.8, last.Sources[0].GetScore(), 1e-9)
	tr, err = s.TranscriptForPrincipal(asB, "c6")
	require.NoError(t, err)
	require.Equal(t, b.String(), tr.AgentID)
	require.Empty(t, tr.Messages)
	_, err = s.TranscriptForPrincipal(asB, "c5")
	require.Equal(t, apperr.NotFound, apperr.CodeOf(err))

	// A transcript shows the messages that start within its first
	// MaxTranscriptBytes of text: 80 of 32,000 bytes, the first 66. The
	// console's shows the latest 66 instead: people who have the
	// conversation must read what the visitor wrote last.
	require.False(t, tr.Truncated)
	require.NoError(t, store.Tenant(ctx, orgA, func(q *dbq.Queries) error {
		if _, err := q.CreateConversation(ctx, dbq.CreateConversationParams{OrgID: orgA, ID: "big", AgentID: a, Channel: "api"}); err != nil {
			return err
		}
		for i := range 80 {
			if _, err := q.CreateMessage(ctx, dbq.CreateMessageParams{OrgID: orgA, ID: uuid.Must(uuid.NewV7()), ConversationID: "big", Role: "user",
				Content: strings.Repeat(string(rune('a'+i%26)), 32000), Channel: "api", Attachments: []byte("[]"), Sources: []byte("[]")}); err != nil {
				return err
			}
		}
		return nil
	}))
	shown := (conversation.MaxTranscriptBytes + 31999) / 32000
	party, err := conversation.MemberParty(asA, "")
	require.NoError(t, err)
	tr, err = s.Transcript(asA, party, "big")
	require.NoError(t, err)
	require.True(t, tr.Truncated)
	require.Len(t, tr.Messages, shown)
	require.Equal(t, strings.Repeat("a", 32000), tr.Messages[0].Content)

	tr, err = s.TranscriptForPrincipal(asA, "big")
	require.NoError(t, err)
	require.True(t, tr.Truncated)
	require.Len(t, tr.Messages, shown)
	require.Equal(t, string(rune('a'+(80-shown)%26)), tr.Messages[0].Content[:1], "the latest, oldest first")
	require.Equal(t, string(rune('a'+79%26)), tr.Messages[shown-1].Content[:1], "the last one written")
	for i := 1; i < len(tr.Messages); i++ {
		require.False(t, tr.Messages[i].CreateTime.Before(tr.Messages[i-1].CreateTime), "oldest first")
	}
}
