package phone

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func TestNormalizeAndValid(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"+33 6 12 34 56 78":                          "+33612345678",
		"+33 (0)6 12 34 56 78":                       "+33612345678",
		"+44 (0)20 7946-0958":                        "+442079460958",
		"+1 (415) 555.2671":                          "+14155552671",
		" +49/30/901820 ":                            "+4930901820",
		"+33\u00a06\u00a012\u00a034\u00a056\u00a078": "+33612345678",
		"+33\u202f6\u202f12\u202f34\u202f56\u202f78": "+33612345678",
		"+1 415\u2013555\u20112671":                  "+14155552671",
	} {
		got := Normalize(in)
		require.Equal(t, want, got, in)
		require.True(t, Valid(got), in)
	}
	for _, bad := range []string{"+12", "+123456", "0612345678", "+0612345678", "+1234567890123456", "+33 6 12 34 56 78x", ""} {
		require.False(t, Valid(Normalize(bad)), bad)
	}
}

// Whatever is typed, Normalize neither panics nor keeps a separator (what
// it returns normalizes to itself), and a number Valid accepts is ASCII
// and at most 16 bytes.
func FuzzNormalize(f *testing.F) {
	for _, s := range []string{"+33 (0)6 12 34 56 78", "(0(0))", "+44\u00a020", "\xff+1", strings.Repeat("(0)", 1000), ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n := Normalize(s)
		if again := Normalize(n); again != n {
			t.Fatalf("Normalize(%q) = %q, but Normalize(%q) = %q", s, n, n, again)
		}
		if Valid(n) && (len(n) > 16 || !utf8.ValidString(n) || strings.IndexFunc(n, func(r rune) bool { return r >= utf8.RuneSelf }) >= 0) {
			t.Fatalf("Valid(%q), from %q", n, s)
		}
	})
}
