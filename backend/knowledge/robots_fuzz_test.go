package knowledge

import (
	"net/url"
	"strings"
	"testing"

	"github.com/jimsmart/grobotstxt"
)

// robotsOfBytes builds a robots.txt from b: user-agent lines, allow and
// disallow lines of short paths over a small alphabet, blank lines.
func robotsOfBytes(b []byte) string {
	agents := []string{"*", "Parley", "parley/1.0", "other"}
	alphabet := []rune("ab/*$%.?=é")
	var sb strings.Builder
	for len(b) > 0 {
		c := b[0]
		b = b[1:]
		switch c % 4 {
		case 0:
			sb.WriteString("User-agent: " + agents[int(c/4)%len(agents)] + "\n")
		case 1, 2:
			n := min(int(c/4)%8, len(b))
			var p strings.Builder
			for _, x := range b[:n] {
				p.WriteRune(alphabet[int(x)%len(alphabet)])
			}
			b = b[n:]
			field := "Disallow"
			if c%4 == 2 {
				field = "Allow"
			}
			sb.WriteString(field + ": /" + p.String() + "\n")
		default:
			sb.WriteString("\n")
		}
	}
	return sb.String()
}

// FuzzRobotsDiff compares parseRobots and allowed with Google's own
// robots.txt parser and matcher (grobotstxt, RFC 9309's reference) on
// files of user-agent groups and rules, and any URL path.
func FuzzRobotsDiff(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4}, "/ab")
	f.Add([]byte{4, 9, 1, 2, 3, 0, 6, 7, 8, 9, 3, 12, 5, 33}, "/a*b$?x=1")
	f.Add([]byte{8, 9, 200, 201, 202}, "/%C3%A9/b")
	f.Fuzz(func(t *testing.T, b []byte, path string) {
		txt := robotsOfBytes(b)
		u, err := url.Parse("http://example.com" + path)
		if err != nil || u.Host != "example.com" || u.Fragment != "" || u.RawFragment != "" {
			return
		}
		for _, r := range path {
			if r < 0x21 || r > 0x7e || r == '#' || r == '\\' {
				return
			}
		}
		got := parseRobots([]byte(txt)).allowed(u)
		want := grobotstxt.AgentAllowed(txt, "Parley", u.String())
		if got != want {
			t.Fatalf("robots %q, url %s: allowed %v, Google's matcher %v", txt, u, got, want)
		}
	})
}
