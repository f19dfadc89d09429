package jobspec

import (
	"errors"
	"os"
	"regexp"
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
	// Alias bombs: nested sequences, and mappings nested through merge
	// keys, each expanding to far more than MaxExpandedBytes.
	f.Add(aliasBomb(10, 10))
	f.Add(mergeBomb(12))
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
