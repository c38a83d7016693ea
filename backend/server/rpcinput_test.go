package server_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/testenv"
)

// A call whose request connect-go cannot read (before any interceptor) is
// the caller's fault: invalid_argument, never 500 unknown or internal, nor
// 501 for a stream with no message or two.
func TestUnreadableRPCRequestIsInvalidArgument(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	connectErr := func(t *testing.T, r io.Reader) (code, message string) {
		t.Helper()
		var body struct{ Code, Message string }
		require.NoError(t, json.NewDecoder(r).Decode(&body))
		return body.Code, body.Message
	}

	// A Connect GET whose message is not base64.
	req, err := http.NewRequest("GET", e.URL+"/parley.v1.AgentService/ListAgents?encoding=json&base64=1&message=!!!", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+e.A.Key)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	code, msg := connectErr(t, resp.Body)
	require.Equal(t, "invalid_argument", code)
	require.Equal(t, "message: not URL-safe base64", msg)

	// A body whose chunked encoding breaks, on the wire.
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.URL, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	fmt.Fprintf(conn, "POST /parley.v1.AgentService/CreateAgent HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n2\r\n{}\r\nZZ\r\n", e.A.Key)
	raw, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	defer raw.Body.Close()
	require.Equal(t, http.StatusBadRequest, raw.StatusCode)
	code, msg = connectErr(t, raw.Body)
	require.Equal(t, "invalid_argument", code)
	require.Contains(t, msg, "the request body could not be read")

	// Server streams whose one message is malformed, missing or doubled.
	envelope := func(flags byte, payload string) string {
		b := []byte{flags, 0, 0, 0, 0}
		binary.BigEndian.PutUint32(b[1:], uint32(len(payload)))
		return string(b) + payload
	}
	msg1 := envelope(0, `{"agentId":"5f1d7c3e-8a2b-4c6d-9e0f-1a2b3c4d5e6f","query":"hi","conversationId":"c1"}`)
	for name, body := range map[string]string{
		"cut envelope":   "\x00\x00",
		"unknown flags":  envelope(0x80, `{}`),
		"no message":     "",
		"two messages":   msg1 + msg1,
		"end-of-stream":  envelope(0x02, `{}`),
		"cut in message": msg1[:12],
	} {
		resp := e.Post("/parley.v1.ChatService/ChatStream", map[string]string{
			"Content-Type": "application/connect+json", "Authorization": "Bearer " + e.A.Key,
		}, body)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, name)
		end := lastEnvelope(t, resp.Body)
		var trailer struct {
			Error struct{ Code, Message string }
		}
		require.NoError(t, json.Unmarshal(end, &trailer), "%s: %s", name, end)
		require.Equal(t, "invalid_argument", trailer.Error.Code, "%s: %s", name, end)
		require.Contains(t, trailer.Error.Message, "the request could not be read", name)
	}
}

// lastEnvelope is the payload of a Connect stream's last envelope (its
// end-of-stream message).
func lastEnvelope(t *testing.T, r io.Reader) []byte {
	t.Helper()
	var last []byte
	for {
		var head [5]byte
		if _, err := io.ReadFull(r, head[:]); err == io.EOF {
			return last
		} else {
			require.NoError(t, err)
		}
		last = make([]byte, binary.BigEndian.Uint32(head[1:]))
		_, err := io.ReadFull(r, last)
		require.NoError(t, err)
	}
}

// A unary gRPC or gRPC-Web call whose envelope is malformed, or that sends
// no message or two, is invalid_argument as a stream's request is: it was
// 13 internal (counted as the server's 500) or 12 unimplemented.
func TestUnreadableUnaryGRPCRequestIsInvalidArgument(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	envelope := func(flags byte, payload []byte) []byte {
		b := []byte{flags, 0, 0, 0, 0}
		binary.BigEndian.PutUint32(b[1:], uint32(len(payload)))
		return append(b, payload...)
	}
	msg1 := envelope(0, nil) // an empty ListAgentsRequest
	for name, body := range map[string][]byte{
		"cut envelope":          {0, 0},
		"unknown flags":         envelope(0x80, nil),
		"compressed, no codec":  envelope(1, []byte{8, 1}),
		"no message":            nil,
		"two messages":          append(append([]byte{}, msg1...), msg1...),
		"cut in message":        envelope(0, []byte{8, 1})[:6],
		"length past the bytes": {0, 0, 0, 0, 100, 1},
	} {
		for _, ct := range []string{"application/grpc", "application/grpc-web+proto"} {
			client := http.DefaultClient
			if ct == "application/grpc" {
				client = testenv.H2C()
			}
			req, err := http.NewRequest("POST", e.URL+"/parley.v1.AgentService/ListAgents", bytes.NewReader(body))
			require.NoError(t, err)
			req.Header.Set("Content-Type", ct)
			req.Header.Set("Authorization", "Bearer "+e.A.Key)
			resp, err := client.Do(req)
			require.NoError(t, err)
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			status := resp.Header.Get("Grpc-Status") + resp.Trailer.Get("Grpc-Status")
			message := resp.Header.Get("Grpc-Message") + resp.Trailer.Get("Grpc-Message")
			require.Equal(t, "3", status, "%s over %s: %s", name, ct, message)
			require.Contains(t, message, "the request could not be read", "%s over %s", name, ct)
		}
	}

	// A well-formed call still works, compressed or not.
	for _, compressed := range []bool{false, true} {
		body, enc := envelope(0, nil), ""
		if compressed {
			var z bytes.Buffer
			zw := gzip.NewWriter(&z)
			require.NoError(t, zw.Close())
			body, enc = envelope(1, z.Bytes()), "gzip"
		}
		req, err := http.NewRequest("POST", e.URL+"/parley.v1.AgentService/ListAgents", bytes.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/grpc")
		req.Header.Set("Grpc-Encoding", enc)
		req.Header.Set("Authorization", "Bearer "+e.A.Key)
		resp, err := testenv.H2C().Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		require.Equal(t, "0", resp.Header.Get("Grpc-Status")+resp.Trailer.Get("Grpc-Status"), "compressed %v: %s", compressed, resp.Trailer.Get("Grpc-Message"))
	}
}
