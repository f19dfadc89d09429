package jobspec

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
)

var errPrefix = regexp.MustCompile(`^f\.yaml:[1-9][0-9]*: `)

// FuzzParse checks that no input makes Parse panic and that every error
// names the file and a line.
func FuzzParse(f *testing.F) {
	for _, name := range []string{"../examples/window-counts.yaml", "../examples/nexmark-q1.yaml"} {
		if data, err := os.ReadFile(name); err == nil {
			f.Add(data)
		}
	}
	f.Add(spec(`
name: x
operators:
  - {uid: a, type: gen, config: &c {rows: 1}}
  - {uid: j, type: join, inputs: [a, {from: a, keyBy: key}], config: {<<: *c}}
  - {uid: s, type: file}
  - {uid: f, type: file}
  - {uid: s2, type: sink, input: f}
`))
	reg := testRegistry()
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := Parse("f.yaml", data, reg)
		if err != nil {
			var se *Error
			if !errors.As(err, &se) || se.File != "f.yaml" || se.Line < 1 || !errPrefix.MatchString(err.Error()) {
				t.Fatalf("error without file:line: %q", err)
			}
			return
		}
		if g == nil || len(g.Vertices) == 0 {
			t.Fatalf("no error and no graph")
		}
	})
}

// Aliases cannot blow a small spec up into a huge config: ten levels of ten
// aliases would expand to 10^10 values.
func TestAliasExpansionIsBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString("name: x\noperators:\n  - uid: a\n    type: gen\n    config:\n      l0: &l0 [a, a, a, a, a, a, a, a, a, a]\n")
	for i := 1; i < 10; i++ {
		fmt.Fprintf(&b, "      l%d: &l%d [%s]\n", i, i, strings.Repeat(fmt.Sprintf("*l%d, ", i-1), 9)+fmt.Sprintf("*l%d", i-1))
	}
	_, err := Parse("f.yaml", []byte(b.String()), testRegistry())
	var se *Error
	if !errors.Is(err, errTooLarge) || !errors.As(err, &se) || se.Line < 1 {
		t.Fatalf("error %v, want a bound on alias expansion at a line of the spec", err)
	}
}
