package form

import (
	"regexp/syntax"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// patternSize counts, without compiling, exactly the instructions
// syntax.Compile makes (as regexp compiles the pattern).
func TestPatternSizeIsTheProgramsSize(t *testing.T) {
	t.Parallel()
	for _, p := range []string{
		``, `a`, `abc`, `(?i)hello`, `a|b|c`, `x*y+z?`, `(?:ab){2,}`, `(a|bc){3,5}`, `\d+`, `[^<>]*`, `^$`, `\bword\b`,
		`(?:(?:ab)+|c){2,7}x{0,3}`, `[a-z0-9._%+-]{1,64}@[a-z0-9.-]{1,255}\.[a-z]{2,24}`, `.{0,1000}`, `(?:.*){90}`,
		`[A-Z]{1,2}[0-9][A-Z0-9]? ?[0-9][A-Z]{2}`, `x{0}`, `(?:)`, `(?:a{2}){3}`, `(a*)*`, `(?s).+?`, `[\p{Greek}\p{Han}]{3,}`,
		strings.Repeat(`(.{1000})`, 55), `(?:` + strings.Repeat("a", 490) + `){1000}`, strings.Repeat(`(?:.*){999}`, 40),
	} {
		re, err := syntax.Parse(`^(?:`+p+`)$`, syntax.Perl)
		require.NoError(t, err, p)
		prog, err := syntax.Compile(re.Simplify())
		require.NoError(t, err, p)
		n, err := patternSize(p)
		require.NoError(t, err, p)
		require.Equal(t, len(prog.Inst), n, "%q", p)
	}
	_, err := patternSize(`(?<=a)b`)
	require.Error(t, err)
}

// A stored schema is compiled once per version of its fields.
func TestStoredSchemasAreCompiledOnce(t *testing.T) {
	t.Parallel()
	v1 := []byte(`[{"name":"code","type":"text","pattern":"[A-Z]{2}[0-9]{3}"}]`)
	v2 := []byte(`[{"name":"code","type":"text","pattern":"[A-Z]{3}[0-9]{3}"}]`)
	a, err := StoredSchema(v1)
	require.NoError(t, err)
	b, err := StoredSchema(append([]byte(nil), v1...))
	require.NoError(t, err)
	require.Same(t, a, b, "the same fields compiled again")
	c, err := StoredSchema(v2)
	require.NoError(t, err)
	require.NotSame(t, a, c, "changed fields kept their old schema")
	require.Equal(t, "[A-Z]{3}[0-9]{3}", c.Fields()[0].GetPattern())
}

// FuzzPatternSize compares patternSize with the program syntax.Compile
// makes: a count below it would let a costlier pattern past
// MaxPatternInstructions and MaxPatternWork.
func FuzzPatternSize(f *testing.F) {
	for _, p := range []string{`(?:(?:ab)+|c){2,7}x{0,3}`, `(a*)*`, `(?:a{2}){3}`, `[\p{Greek}\p{Han}]{3,}`, `(?i)k\b|$^`, `(?:|a)*{2}`} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if len(p) > 200 {
			return
		}
		n, err := patternSize(p)
		if err != nil {
			return
		}
		re, err := syntax.Parse(`^(?:`+p+`)$`, syntax.Perl)
		if err != nil {
			t.Fatalf("%q: patternSize read it, Parse did not: %v", p, err)
		}
		prog, err := syntax.Compile(re.Simplify())
		if err != nil {
			return
		}
		if n != len(prog.Inst) {
			t.Fatalf("%q: patternSize %d, compiled %d instructions", p, n, len(prog.Inst))
		}
	})
}
