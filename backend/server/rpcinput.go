package server

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"io"
	"net/http"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// connect-go reads a unary call's request, and a server stream's one
// message, before Parley's interceptors: a body it cannot read (a broken
// chunked encoding, a client that stops sending until the read timeout), a
// Connect GET whose base64 message does not decode, or a malformed
// envelope, was answered as the server's fault (500 unknown, 504
// deadline_exceeded naming the server's socket, 500 internal or 501
// unimplemented), where the REST paths answer 400. These are the caller's
// faults, answered invalid_argument (400, gRPC status 3) without detail
// about the server.

// rpcErrors writes an error in the protocol of the call.
var rpcErrors = connect.NewErrorWriter()

// errUnreadableBody is what a call whose body cannot be read is answered
// (a new error each time: connect-go may add to it).
func errUnreadableBody() error {
	return connect.NewError(connect.CodeInvalidArgument, errors.New("the request body could not be read: it ended early, was malformed, or came too slowly"))
}

// checkRPCInput prepares a served RPC's request: read errors of its body
// become errUnreadableBody, and a Connect GET's base64 message is checked
// first. It reports false when it has answered the call.
func checkRPCInput(w http.ResponseWriter, r *http.Request) bool {
	if r.Method == http.MethodGet {
		q := r.URL.Query()
		if q.Get("base64") == "1" && !queryBase64(q.Get("message")) {
			_ = rpcErrors.Write(w, r, connect.NewError(connect.CodeInvalidArgument, errors.New("message: not URL-safe base64")))
			return false
		}
		return true
	}
	r.Body = rpcBody{r.Body}
	if unaryEnveloped(r) {
		enc := r.Header.Get("Grpc-Encoding")
		r.Body = &unaryEnvelope{ReadCloser: r.Body, compressed: enc != "" && enc != "identity"}
	}
	return true
}

// unaryEnveloped reports whether r calls a unary method of the schema over
// gRPC or gRPC-Web, whose one message comes in an envelope. connect-go reads
// it before Parley's interceptors (a stream's request, errorInterceptor
// sees: streamInputError), and answered a malformed one as the server's
// fault (13 internal) and none or two messages with 12 unimplemented.
func unaryEnveloped(r *http.Request) bool {
	ct := strings.ToLower(r.Header.Get("Content-Type"))
	if !strings.HasPrefix(ct, "application/grpc") {
		return false
	}
	svc, method, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(svc))
	if err != nil {
		return false
	}
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		return false
	}
	m := sd.Methods().ByName(protoreflect.Name(method))
	return m != nil && !m.IsStreamingClient() && !m.IsStreamingServer()
}

// unaryEnvelope is the body of a unary gRPC or gRPC-Web call, read as
// exactly one envelope: flags 0 (or 1, compressed, when the call names its
// compression), a length, that many bytes, then the end. Anything else is
// the caller's fault, answered invalid_argument as a stream's request is.
type unaryEnvelope struct {
	io.ReadCloser
	compressed bool
	prefix     [5]byte
	got        int   // prefix bytes read
	left       int64 // message bytes still to come once the prefix is read
	whole      bool  // the one message was read
}

func (u *unaryEnvelope) Read(p []byte) (int, error) {
	n, err := u.ReadCloser.Read(p)
	for i := 0; i < n; {
		switch {
		case u.whole:
			return 0, malformedUnary("more than the one message due")
		case u.got < len(u.prefix):
			u.prefix[u.got] = p[i]
			u.got++
			i++
			if u.got < len(u.prefix) {
				continue
			}
			if flags := u.prefix[0]; flags > 1 || flags == 1 && !u.compressed {
				return 0, malformedUnary("malformed envelope flags")
			}
			u.left = int64(binary.BigEndian.Uint32(u.prefix[1:]))
			u.whole = u.left == 0
		default:
			k := min(u.left, int64(n-i))
			i += int(k)
			u.left -= k
			u.whole = u.left == 0
		}
	}
	if errors.Is(err, io.EOF) && !u.whole {
		if u.got == 0 {
			return n, malformedUnary("no message where one is due")
		}
		return n, malformedUnary("the message was cut short")
	}
	return n, err
}

func malformedUnary(what string) error {
	return connect.NewError(connect.CodeInvalidArgument, errors.New("the request could not be read: "+what))
}

// queryBase64 reports whether s decodes as connect-go decodes a GET's
// message: URL-safe base64, padded or not.
func queryBase64(s string) bool {
	enc := base64.URLEncoding
	if len(s)%4 != 0 {
		enc = base64.RawURLEncoding
	}
	_, err := io.Copy(io.Discard, base64.NewDecoder(enc, strings.NewReader(s)))
	return err == nil
}

// rpcBody is a request body whose read errors are the caller's: all but
// the end of the body and a body over the size limit (which connect-go
// answers itself).
type rpcBody struct{ io.ReadCloser }

func (b rpcBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	var tooLarge *http.MaxBytesError
	if err == nil || errors.Is(err, io.EOF) || errors.As(err, &tooLarge) {
		return n, err
	}
	return n, errUnreadableBody()
}

// receivedConn notes whether a stream's request was read whole: one
// message, then the end of the body.
type receivedConn struct {
	connect.StreamingHandlerConn
	got   *int // messages received
	whole *bool
}

func (c receivedConn) Receive(m any) error {
	err := c.StreamingHandlerConn.Receive(m)
	switch {
	case err == nil:
		*c.got++
	case errors.Is(err, io.EOF) && *c.got == 1:
		*c.whole = true
	}
	return err
}

// streamInputError is a stream's error as the caller is answered: the
// protocol errors connect-go reports while reading the request (internal
// for a malformed envelope, unimplemented for none or two messages) are
// invalid_argument. Once the request was read whole, err is the handler's.
func streamInputError(ctx context.Context, whole bool, err error) error {
	var ce *connect.Error
	if whole || !errors.As(err, &ce) || ctx.Err() != nil {
		return err
	}
	if c := ce.Code(); c == connect.CodeInternal || c == connect.CodeUnimplemented {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("the request could not be read: "+ce.Message()))
	}
	return err
}
