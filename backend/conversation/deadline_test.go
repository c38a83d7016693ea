package conversation_test

import (
	"bytes"
	"encoding/binary"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/testenv"
)

// A watch whose client set a deadline ends deadline_exceeded when it
// passes, over each protocol: it ended OK (grpc-status 0, an empty Connect
// end-stream), as a drain or the stream's life does, so a caller could not
// tell its own deadline from the server's end.
func TestWatchEndsAtTheClientsDeadline(t *testing.T) {
	t.Parallel()
	f := setup(t)
	r := f.Do("POST", "/api/v2/agent/"+f.public+"/chat", "", `{"query":"q","conversationId":"dl-1","visitorId":"v"}`)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	msg, err := proto.Marshal(&parleyv1.WatchConversationRequest{ConversationId: "dl-1", AgentId: f.public, VisitorId: "v"})
	require.NoError(t, err)
	body := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(msg)))
	body = append(body, msg...)
	for _, c := range []struct {
		name, contentType, header, timeout string
		status                             func(resp *http.Response, body []byte) string
	}{
		{"grpc", "application/grpc", "Grpc-Timeout", "300m", func(resp *http.Response, _ []byte) string {
			return resp.Trailer.Get("Grpc-Status")
		}},
		{"grpc-web", "application/grpc-web+proto", "Grpc-Timeout", "300m", func(_ *http.Response, body []byte) string {
			if i := bytes.Index(body, []byte("grpc-status: ")); i >= 0 {
				return string(body[i+13 : i+14])
			}
			return ""
		}},
		{"connect", "application/connect+proto", "Connect-Timeout-Ms", "300", func(_ *http.Response, body []byte) string {
			if bytes.Contains(body, []byte(`"code":"deadline_exceeded"`)) {
				return "4"
			}
			return "not deadline_exceeded"
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			req, err := http.NewRequest("POST", f.URL+"/parley.v1.ConversationService/WatchConversation", bytes.NewReader(body))
			require.NoError(t, err)
			req.Header.Set("Content-Type", c.contentType)
			req.Header.Set("TE", "trailers")
			req.Header.Set(c.header, c.timeout)
			start := time.Now()
			resp, err := testenv.H2C().Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			got, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.Less(t, time.Since(start), 5*time.Second)
			require.Equal(t, "4", c.status(resp, got), "%q", got)
		})
	}
}
