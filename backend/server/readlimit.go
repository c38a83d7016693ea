package server

import (
	"compress/gzip"
	"errors"
	"io"

	"connectrpc.com/connect"
)

// readLimit is what every Connect handler of the server reads of one
// message, before its key is checked: at most limit bytes (on the wire and
// once decompressed), and gzip inflated no further than limit+1 bytes.
//
// SECURITY: both bound what an anonymous caller makes the server do.
// connect-go reads a message whole before any interceptor runs, with no
// bound unless told one: the health, reflection and unknown-method
// handlers had none, and a gzip body of 200 KiB sent to
// grpc.health.v1.Health/Check took 512 MiB of memory (a few MiB of gzip,
// the instance's). And past the bound it inflates the rest of a message
// only to report its size: 27 MiB of gzip to a DatastoreService method
// inflated 28 GB, five seconds of a core for each call.
func readLimit(limit int) connect.HandlerOption {
	return connect.WithHandlerOptions(
		connect.WithReadMaxBytes(limit),
		// Unset first: a second gzip would be named twice in Accept-Encoding.
		connect.WithCompression("gzip", nil, nil),
		connect.WithCompression("gzip",
			func() connect.Decompressor { return &boundedGunzip{bound: int64(limit) + 1} },
			func() connect.Compressor { return gzip.NewWriter(io.Discard) }),
	)
}

// errInflatedTooFar ends a gzip message inflated past its bound; connect-go
// answers it resource_exhausted ("message is larger than configured max").
var errInflatedTooFar = errors.New("its gzip inflates further")

// boundedGunzip is a gzip reader that gives at most bound bytes (connect-go
// reads one more than its limit to tell a message over it), then fails.
type boundedGunzip struct {
	gzip.Reader
	bound, left int64
}

func (g *boundedGunzip) Reset(r io.Reader) error {
	g.left = g.bound
	return g.Reader.Reset(r)
}

func (g *boundedGunzip) Read(p []byte) (int, error) {
	if g.left <= 0 {
		return 0, errInflatedTooFar
	}
	n, err := g.Reader.Read(p[:min(int64(len(p)), g.left)])
	g.left -= int64(n)
	return n, err
}
