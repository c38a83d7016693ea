package compat_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/testenv"
	"github.com/parleyhq/parley/compat/wire"
)

// A chat message of the 32,000 characters the schema allows is answered
// over REST as over Connect, whatever its script and however its client
// escapes it: in Chinese, written \u4e2d as Python's json writes it by
// default, it is 192 KB, and was refused 413 at the bound REST bodies had
// (64 KiB). Past the Connect message bound it is still 413. So are an
// agent's 20,000 characters of instructions.
func TestChatTakesTheLongestQuery(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	id := create(t, e, e.A.Key, map[string]any{"name": "Long", "instructions": "x", "visibility": "public"}).ID
	query := strings.Repeat(`\u4e2d`, 32000)
	for _, path := range []string{"/api/v2/agent/" + id + "/chat", "/api/agents/" + id + "/query"} {
		r := e.Do("POST", path, "", fmt.Sprintf(`{"query":"%s","conversationId":"long","visitorId":"v1"}`, query))
		require.Equal(t, http.StatusOK, r.Status, "%s: %.300s", path, r.Body)
	}

	r := e.Do("POST", "/api/v2/agent/"+id+"/chat", "", `{"query":"x","conversationId":"c","visitorId":"v1","pad":"`+
		strings.Repeat("y", wire.MaxMessageBytes)+`"}`)
	require.Equal(t, http.StatusRequestEntityTooLarge, r.Status, "%.300s", r.Body)
	require.Equal(t, "body", r.Err(t).Error.Field)

	instructions := strings.Repeat(`\u4e2d`, 20000)
	r = e.Do("POST", "/api/agents", e.A.Key, `{"name":"Long","instructions":"`+instructions+`"}`)
	require.Equal(t, http.StatusCreated, r.Status, "%.300s", r.Body)
	r = e.Do("PUT", "/api/agents/"+id, e.A.Key, `{"instructions":"`+instructions+`"}`)
	require.Equal(t, http.StatusOK, r.Status, "%.300s", r.Body)
}
