package phone

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNormalizeAndValid(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"+33 6 12 34 56 78":    "+33612345678",
		"+33 (0)6 12 34 56 78": "+33612345678",
		"+44 (0)20 7946-0958":  "+442079460958",
		"+1 (415) 555.2671":    "+14155552671",
		" +49/30/901820 ":      "+4930901820",
	} {
		got := Normalize(in)
		require.Equal(t, want, got, in)
		require.True(t, Valid(got), in)
	}
	for _, bad := range []string{"+12", "+123456", "0612345678", "+0612345678", "+1234567890123456", "+33 6 12 34 56 78x", ""} {
		require.False(t, Valid(Normalize(bad)), bad)
	}
}
