package wire

import (
	"bytes"
	"strings"
)

// Frame encodes one event: an optional event line, then the data, one data
// line per line of it (so that data holding newlines survives), then a blank
// line. Carriage returns, which SSE also treats as line ends, are split on
// too.
func Frame(name string, data []byte) []byte {
	var b bytes.Buffer
	if name != "" {
		b.WriteString("event: ")
		b.WriteString(strings.NewReplacer("\r", "", "\n", "").Replace(name))
		b.WriteByte('\n')
	}
	lines := strings.Split(strings.NewReplacer("\r\n", "\n", "\r", "\n").Replace(string(data)), "\n")
	for _, l := range lines {
		b.WriteString("data: ")
		b.WriteString(l)
		b.WriteByte('\n')
	}
	b.WriteByte('\n')
	return b.Bytes()
}
