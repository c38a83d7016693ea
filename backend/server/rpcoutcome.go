package server

import (
	"encoding/binary"
	"encoding/json"
	"net/http"
	"strings"

	"connectrpc.com/connect"

	"github.com/parleyhq/parley/backend/reqinfo"
)

// serveRPC serves a call of an RPC the mux serves, noting its procedure and
// outcome in the request's reqinfo.Info when connect-go answers it before
// Parley's interceptors run (observeInterceptor): a message over the size
// limit, a compression it does not know, a malformed Connect-Timeout-Ms. A
// Connect stream's error then travels in its end-of-stream message behind
// a 200, and was logged and counted as a success; a Connect unary call's
// was logged without its code; both under the service's route rather than
// the procedure. (A gRPC or gRPC-Web call's code is in Grpc-Status, which
// requestLog reads.)
func serveRPC(next http.Handler, w http.ResponseWriter, r *http.Request, kind rpcRequestKind) {
	info := reqinfo.From(r.Context())
	if info == nil {
		next.ServeHTTP(w, r)
		return
	}
	// served: the path is a procedure of the schema (or of the health and
	// reflection services), a bounded set.
	info.Route = r.URL.Path
	ct := strings.ToLower(r.Header.Get("Content-Type"))
	stream := strings.HasPrefix(ct, "application/connect+")
	if kind == streamRPC && !stream {
		next.ServeHTTP(w, r) // gRPC, gRPC-Web
		return
	}
	o := &outcomeWriter{ResponseWriter: w, status: http.StatusOK, stream: stream}
	next.ServeHTTP(o, r)
	if info.Code != "" {
		return // the interceptors noted it
	}
	if code, ok := o.code(); ok {
		noteCode(info, connect.NewError(code, nil))
	}
}

// outcomeMaxBytes bounds what outcomeWriter keeps of a response: connect-go's
// own errors are a code and a short message.
const outcomeMaxBytes = 1 << 10

// outcomeWriter keeps the start of a Connect call's response (a unary
// call's only when it failed), from which code reads the error connect-go
// wrote. Unwrap lets http.ResponseController reach the real writer.
type outcomeWriter struct {
	http.ResponseWriter
	status      int
	wroteHeader bool
	stream      bool
	head        []byte
}

func (o *outcomeWriter) WriteHeader(code int) {
	if !o.wroteHeader {
		o.status, o.wroteHeader = code, true
	}
	o.ResponseWriter.WriteHeader(code)
}

func (o *outcomeWriter) Write(b []byte) (int, error) {
	o.wroteHeader = true
	if (o.stream || o.status >= 400) && len(o.head) < outcomeMaxBytes {
		o.head = append(o.head, b[:min(len(b), outcomeMaxBytes-len(o.head))]...)
	}
	return o.ResponseWriter.Write(b)
}

func (o *outcomeWriter) Flush() {
	o.wroteHeader = true
	if f, ok := o.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (o *outcomeWriter) Unwrap() http.ResponseWriter { return o.ResponseWriter }

// code reads the error of a response that is one: a unary call's JSON
// error, or a stream that is only its end-of-stream message (uncompressed)
// carrying an error.
func (o *outcomeWriter) code() (connect.Code, bool) {
	body := o.head
	if o.stream {
		// Flags (end of stream, not compressed), length, then the JSON.
		if len(body) < 5 || body[0] != 0x02 || int(binary.BigEndian.Uint32(body[1:5])) != len(body)-5 {
			return 0, false
		}
		var end struct {
			Error *struct{ Code string }
		}
		if json.Unmarshal(body[5:], &end) != nil || end.Error == nil {
			return 0, false
		}
		body, _ = json.Marshal(end.Error)
	} else if o.status < 400 {
		return 0, false
	}
	var e struct{ Code string }
	var code connect.Code
	if json.Unmarshal(body, &e) != nil || code.UnmarshalText([]byte(e.Code)) != nil {
		return 0, false
	}
	return code, true
}
