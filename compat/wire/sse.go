package wire

import (
	"bytes"
	"strings"
)

// Frame encodes one event: an optional event line, then the data, one data
// line per line of it (so that data holding newlines survives), then a blank
// line. Carriage returns, which SSE also treats as line ends, are split on
// too.
//
// It runs for every token of every stream (issue 13): data without line
// ends, the usual case (JSON), takes one allocation.
func Frame(name string, data []byte) []byte {
	if strings.ContainsAny(name, "\r\n") {
		name = nameLineEnds.Replace(name)
	}
	if bytes.ContainsAny(data, "\r\n") {
		data = []byte(lineEnds.Replace(string(data)))
	}
	size := len(data) + len("data: \n\n") + 6*bytes.Count(data, []byte("\n"))
	if name != "" {
		size += len("event: \n") + len(name)
	}
	b := make([]byte, 0, size)
	if name != "" {
		b = append(b, "event: "...)
		b = append(b, name...)
		b = append(b, '\n')
	}
	for {
		line, rest, more := bytes.Cut(data, []byte("\n"))
		b = append(b, "data: "...)
		b = append(b, line...)
		b = append(b, '\n')
		if !more {
			break
		}
		data = rest
	}
	return append(b, '\n')
}

var (
	nameLineEnds = strings.NewReplacer("\r", "", "\n", "")
	lineEnds     = strings.NewReplacer("\r\n", "\n", "\r", "\n")
)
