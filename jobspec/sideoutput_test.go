package jobspec

import (
	"errors"
	"strings"
	"testing"

	"github.com/weirstream/weir/stream"
)

var statsSchema = stream.MustSchema(stream.Field{Name: "n", Type: stream.TypeInt64})

// sideRegistry is testRegistry plus "split", which passes its input on and
// declares two side outputs: "late" (the input's schema) and "stats" (one
// int64 field, n).
func sideRegistry() *stream.Registry {
	r := testRegistry()
	r.Register(stream.OperatorType{
		Name: "split", Kind: stream.KindTransform, NewOperator: noOperator,
		Plan: func(p *stream.PlanContext) (*stream.Schema, error) {
			p.DeclareSideOutput("late", p.Inputs[0].Schema)
			p.DeclareSideOutput("stats", statsSchema)
			return p.Inputs[0].Schema, nil
		},
	})
	return r
}

// TestParseSideOutputs: an input reads a side output as <uid>.<output> or
// {from: <uid>, output: <output>}; a uid containing '.' is read whole.
func TestParseSideOutputs(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spec  string
		edges []string
	}{
		{
			name: "dotted references and mappings",
			spec: `
name: side
parallelism: 2
operators:
  - {uid: events, type: gen}
  - {uid: counts, type: split, keyBy: key}
  - {uid: out, type: sink}
  - uid: late-out
    type: sink
    input: counts.late
  - uid: joined
    type: join
    inputs:
      - counts.late
      - {from: counts, output: stats, partitioning: broadcast}
  - {uid: j-out, type: sink}
  - uid: late-by-key
    type: agg
    inputs: [{from: counts, output: late, keyBy: [key]}]
  - {uid: agg-out, type: sink}
`,
			edges: []string{
				"events->counts#0 hash[key]",
				"counts->out#0 forward",
				"counts[late]->late-out#0 forward",
				"counts[late]->joined#0 forward",
				"counts[stats]->joined#1 broadcast",
				"joined->j-out#0 forward",
				"counts[late]->late-by-key#0 hash[key]",
				"late-by-key->agg-out#0 forward",
			},
		},
		{
			name: "a uid with a dot wins over a side output",
			spec: `
name: dots
operators:
  - {uid: a, type: gen}
  - {uid: a.late, type: split}
  - {uid: out, type: sink, input: a.late}
  - {uid: late, type: sink, input: a.late.late}
`,
			edges: []string{"a->a.late#0 forward", "a.late->out#0 forward", "a.late[late]->late#0 forward"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := Parse("job.yaml", spec(tc.spec), sideRegistry())
			if err != nil {
				t.Fatal(err)
			}
			_, es, _ := describeGraph(g)
			if got, want := strings.Join(es, "\n"), strings.Join(tc.edges, "\n"); got != want {
				t.Errorf("edges:\n%s\nwant:\n%s", got, want)
			}
			for _, e := range g.Edges {
				if s := g.EdgeSchema(e); s == nil {
					t.Errorf("edge %d->%d (side output %q) has no schema after planning", e.From, e.To, e.SideOutput)
				}
			}
		})
	}
}

func TestParseSideOutputErrors(t *testing.T) {
	const head = `
name: x
operators:
  - {uid: events, type: gen}
  - {uid: counts, type: split}
`
	for _, tc := range []struct {
		name, ops string
		line      int      // of job.yaml
		names     []string // what the message names
		planning  bool     // the operator type's planning rejects it
	}{
		{"undeclared, dotted", `
  - uid: o
    type: sink
    inputs: [counts.lat]
`, 7, []string{`operator "o"`, `"lat"`, `"counts"`, `"split"`, `"late", "stats"`}, true},
		{"undeclared, mapping", `
  - uid: o
    type: sink
    inputs:
      - {from: counts,
         output: lat}
`, 9, []string{`operator "o"`, `"lat"`, `"counts"`, `"split"`, `"late", "stats"`}, true},
		{"type without side outputs", `
  - uid: o
    type: sink
    input: events.late
`, 7, []string{`operator "o"`, `"late"`, `"events"`, `"gen"`, `main output`}, true},
		{"no such operator", `
  - uid: o
    type: sink
    input: cuonts.late
`, 7, []string{`operator "o"`, `"cuonts.late"`, `"counts"`, `<uid>.<output>`}, false},
		{"bad dotted name", `
  - uid: o
    type: sink
    input: counts.9x
`, 7, []string{`operator "o"`, `"counts.9x"`, `"9x"`, `1-64 letters`}, false},
		{"bad mapping name", `
  - uid: o
    type: sink
    inputs: [{from: counts, output: "a.b"}]
`, 7, []string{`operator "o"`, `inputs[0].output`, `"a.b"`, `1-64 letters`}, false},
		{"sink", `
  - uid: s
    type: sink
  - uid: o
    type: sink
    input: s.late
`, 9, []string{`operator "o"`, `"s"`, `sink`, `the operator that feeds it`}, false},
		{"key not in the side output", `
  - uid: o
    type: sink
    inputs: [{from: counts, output: stats, keyBy: key}]
`, 7, []string{`operator "o"`, `keyBy`, `"key"`, `the input has n`}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("job.yaml", spec(head+strings.TrimPrefix(tc.ops, "\n")), sideRegistry())
			checkSpecError(t, err, "job.yaml", tc.line, tc.names...)
			var ve *stream.VertexError
			if tc.planning && !errors.As(err, &ve) {
				t.Fatalf("planning error %v does not wrap a *stream.VertexError", err)
			}
		})
	}
}
