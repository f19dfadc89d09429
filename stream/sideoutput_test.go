package stream

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// sideRegistry is testRegistry plus "split", a transform with side outputs
// "odd" (the input's schema) and "meta" (one string field), and types that
// declare side outputs wrongly.
func sideRegistry() *Registry {
	r := testRegistry()
	meta := MustSchema(Field{"note", TypeString})
	r.Register(OperatorType{Name: "split", Kind: KindTransform,
		Plan: func(p *PlanContext) (*Schema, error) {
			p.DeclareSideOutput("odd", p.Inputs[0].Schema)
			p.DeclareSideOutput("meta", meta)
			return p.Inputs[0].Schema, nil
		},
		NewOperator: func([]byte) (Operator, error) { return fakeOp{}, nil }})
	bad := map[string]func(p *PlanContext){
		"dotted":   func(p *PlanContext) { p.DeclareSideOutput("a.b", meta) },
		"twice":    func(p *PlanContext) { p.DeclareSideOutput("x", meta); p.DeclareSideOutput("x", meta) },
		"noschema": func(p *PlanContext) { p.DeclareSideOutput("x", nil) },
	}
	for name, declare := range bad {
		r.Register(OperatorType{Name: name, Kind: KindTransform,
			Plan: func(p *PlanContext) (*Schema, error) {
				declare(p)
				return p.Inputs[0].Schema, nil
			},
			NewOperator: func([]byte) (Operator, error) { return fakeOp{}, nil }})
	}
	r.Register(OperatorType{Name: "sidesink", Kind: KindSink,
		Plan: func(p *PlanContext) (*Schema, error) {
			p.DeclareSideOutput("x", meta)
			return nil, nil
		},
		NewOperator: func([]byte) (Operator, error) { return fakeOp{}, nil }})
	return r
}

func TestPlanSideOutputs(t *testing.T) {
	reg := sideRegistry()
	b := NewBuilder("job").Parallelism(2)
	split := b.Source("s", "src", nil).Then("split", "split", nil)
	split.Then("even", "sink", nil)
	split.SideOutput("odd").KeyBy("k").Then("odd", "sink", nil).SetParallelism(3)
	split.SideOutput("meta").Broadcast().Then("meta", "sink", nil)
	g, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	if err := Plan(g, reg); err != nil {
		t.Fatal(err)
	}
	sv := g.Vertices[1]
	if len(sv.SideOutSchemas) != 2 || sv.OutputSchema("meta").Names()[0] != "note" || !sv.OutputSchema("odd").Equal(sv.OutSchema) {
		t.Fatalf("split's side outputs = %v", sv.SideOutSchemas)
	}
	if sv.OutputSchema("nope") != nil || sv.OutputSchema("") != sv.OutSchema {
		t.Fatal("OutputSchema of a missing or the main output is wrong")
	}
	want := []struct {
		to   string
		side string
		part Partitioning
		in   string // first field of the edge's schema
	}{
		{"split", "", Forward, "k"},
		{"even", "", Forward, "k"},
		{"odd", "odd", Hash, "k"},
		{"meta", "meta", Broadcast, "note"},
	}
	if len(g.Edges) != len(want) {
		t.Fatalf("%d edges, want %d", len(g.Edges), len(want))
	}
	for i, w := range want {
		e := g.Edges[i]
		if g.Vertices[e.To].UID != w.to || e.SideOutput != w.side || e.Partitioning != w.part || g.EdgeSchema(e).Names()[0] != w.in {
			t.Errorf("edge %d: to %q side %q %v schema %v, want to %q side %q %v first field %q",
				i, g.Vertices[e.To].UID, e.SideOutput, e.Partitioning, g.EdgeSchema(e), w.to, w.side, w.part, w.in)
		}
	}
	if g.Vertices[0].SideOutSchemas != nil {
		t.Errorf("the source declares no side outputs but has %v", g.Vertices[0].SideOutSchemas)
	}
}

func TestPlanSideOutputErrors(t *testing.T) {
	reg := sideRegistry()
	build := func(f func(b *Builder)) *JobGraph {
		b := NewBuilder("job")
		f(b)
		g, err := b.Build()
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	for _, tc := range []struct {
		name string
		g    *JobGraph
		want string
	}{
		{"undeclared name",
			build(func(b *Builder) {
				b.Source("s", "src", nil).Then("split", "split", nil).SideOutput("late").Then("o", "sink", nil)
			}),
			`operator "o": input 0 reads side output "late" of "split", but operator type "split" declares only "meta", "odd"`},
		{"no side outputs at all",
			build(func(b *Builder) { b.Source("s", "src", nil).SideOutput("late").Then("o", "sink", nil) }),
			`operator "o": input 0 reads side output "late" of "s", but operator type "src" declares no side outputs; read its main output ("s") instead`},
		{"bad name on the edge",
			build(func(b *Builder) {
				b.Source("s", "src", nil).Then("split", "split", nil).SideOutput("a.b").Then("o", "sink", nil)
			}),
			`operator "o": input 0 reads side output "a.b" of "split": a side-output name is 1-64 letters`},
		{"key not in the side schema",
			build(func(b *Builder) {
				b.Source("s", "src", nil).Then("split", "split", nil).SideOutput("meta").KeyBy("k").Then("o", "sink", nil)
			}),
			`operator "o": keyBy: no field "k" (the input has note)`},
		{"bad declared name",
			build(func(b *Builder) { b.Source("s", "src", nil).Then("d", "dotted", nil) }),
			`operator "d": operator type "dotted": side output "a.b": a side-output name is`},
		{"declared twice",
			build(func(b *Builder) { b.Source("s", "src", nil).Then("d", "twice", nil) }),
			`operator "d": operator type "twice": side output "x" is declared twice`},
		{"declared without schema",
			build(func(b *Builder) { b.Source("s", "src", nil).Then("d", "noschema", nil) }),
			`operator "d": operator type "noschema": side output "x" has no schema`},
		{"sink declares",
			build(func(b *Builder) { b.Source("s", "src", nil).Then("d", "sidesink", nil) }),
			`operator "d": operator type "sidesink" is a sink but declares side outputs (x)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Plan(tc.g, reg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Plan error = %v, want it to contain %q", err, tc.want)
			}
			var ve *VertexError
			if !errors.As(err, &ve) {
				t.Fatalf("Plan error %v is not a *VertexError", err)
			}
			for _, v := range tc.g.Vertices {
				if v.OutSchema != nil || v.SideOutSchemas != nil {
					t.Fatalf("a failed Plan filled in the schemas of %q", v.UID)
				}
			}
		})
	}
}

// recordingCollector implements SideOutputCollector.
type recordingCollector struct {
	main, side []string
	consumed   bool
}

func (c *recordingCollector) Collect(b *Batch) {
	c.main = append(c.main, fmt.Sprint(b.Len()))
	b.Release()
}
func (c *recordingCollector) EmitWatermark(int64) {}
func (c *recordingCollector) CollectSide(name string, b *Batch) bool {
	c.side = append(c.side, fmt.Sprintf("%s:%d", name, b.Len()))
	b.Release()
	return c.consumed
}

type plainCollector struct{ n int }

func (c *plainCollector) Collect(b *Batch)    { c.n++; b.Release() }
func (c *plainCollector) EmitWatermark(int64) {}

func TestCollectSide(t *testing.T) {
	s := MustSchema(Field{"v", TypeInt64})
	batch := func() *Batch {
		b := NewBatch(s, 2)
		b.AppendRow(int64(1))
		b.AppendRow(int64(2))
		return b
	}
	rc := &recordingCollector{consumed: true}
	if !CollectSide(rc, "late", batch()) {
		t.Error("CollectSide = false for a collector whose side output is read")
	}
	rc.consumed = false
	if CollectSide(rc, "late", batch()) {
		t.Error("CollectSide = true for a collector whose side output nothing reads")
	}
	if got := strings.Join(rc.side, " "); got != "late:2 late:2" || len(rc.main) != 0 {
		t.Errorf("side %q main %q, want two batches on side output late", got, rc.main)
	}
	// A collector without side outputs: the batch is released, not
	// passed to its main output.
	pc := &plainCollector{}
	if CollectSide(pc, "late", batch()) || pc.n != 0 {
		t.Errorf("CollectSide on a plain collector passed the batch on (%d batches) or reported a reader", pc.n)
	}
}
