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
		name, ops, want string
	}{
		{"undeclared, dotted", `
  - uid: o
    type: sink
    inputs: [counts.lat]
`, `job.yaml:7: operator "o": input 0 reads side output "lat" of "counts", but operator type "split" declares only "late", "stats"`},
		{"undeclared, mapping", `
  - uid: o
    type: sink
    inputs:
      - {from: counts,
         output: lat}
`, `job.yaml:9: operator "o": input 0 reads side output "lat" of "counts", but operator type "split" declares only "late", "stats"`},
		{"type without side outputs", `
  - uid: o
    type: sink
    input: events.late
`, `job.yaml:7: operator "o": input 0 reads side output "late" of "events", but operator type "gen" declares no side outputs; read its main output ("events") instead`},
		{"no such operator", `
  - uid: o
    type: sink
    input: cuonts.late
`, `job.yaml:7: operator "o": input: no operator has uid "cuonts.late" or "cuonts" (did you mean "counts"?) (read a side output as <uid>.<output>)`},
		{"bad dotted name", `
  - uid: o
    type: sink
    input: counts.9x
`, `job.yaml:7: operator "o": input: "counts.9x" reads operator "counts", but "9x" is not a side-output name (1-64 letters, digits, '_' or '-', starting with a letter)`},
		{"bad mapping name", `
  - uid: o
    type: sink
    inputs: [{from: counts, output: "a.b"}]
`, `job.yaml:7: operator "o": inputs[0].output: "a.b" is not a side-output name (1-64 letters, digits, '_' or '-', starting with a letter)`},
		{"sink", `
  - uid: s
    type: sink
  - uid: o
    type: sink
    input: s.late
`, `job.yaml:9: operator "o": input: "s" is a sink and has no side outputs; read the operator that feeds it instead`},
		{"key not in the side output", `
  - uid: o
    type: sink
    inputs: [{from: counts, output: stats, keyBy: key}]
`, `job.yaml:7: operator "o": keyBy: no field "key" (the input has n)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("job.yaml", spec(head+strings.TrimPrefix(tc.ops, "\n")), sideRegistry())
			if err == nil || err.Error() != tc.want {
				t.Fatalf("error\n %v\nwant\n %s", err, tc.want)
			}
			var se *Error
			if !errors.As(err, &se) {
				t.Fatalf("error %#v is not a *jobspec.Error", err)
			}
			var ve *stream.VertexError
			if strings.Contains(tc.want, "reads side output") && !errors.As(err, &ve) {
				t.Fatalf("planning error %v does not wrap a *stream.VertexError", err)
			}
		})
	}
}
