package stream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestKeyGroupRangesCoverExactlyOnce(t *testing.T) {
	for _, maxPar := range []int{1, 7, 128, 1000} {
		for par := 1; par <= min(maxPar, 17); par++ {
			owner := make([]int, maxPar)
			for i := range owner {
				owner[i] = -1
			}
			for idx := 0; idx < par; idx++ {
				r := KeyGroupRangeFor(maxPar, par, idx)
				for kg := r.Start; kg <= r.End; kg++ {
					if owner[kg] != -1 {
						t.Fatalf("max %d par %d: key group %d owned by %d and %d", maxPar, par, kg, owner[kg], idx)
					}
					owner[kg] = idx
				}
			}
			for kg, o := range owner {
				if o == -1 {
					t.Fatalf("max %d par %d: key group %d unowned", maxPar, par, kg)
				}
				if got := SubtaskForKeyGroup(maxPar, par, kg); got != o {
					t.Fatalf("max %d par %d: SubtaskForKeyGroup(%d) = %d, range owner %d", maxPar, par, kg, got, o)
				}
			}
		}
	}
}

func TestHashKeysStableAndSpread(t *testing.T) {
	s := MustSchema(Field{"k", TypeString}, Field{"n", TypeInt64})
	b := NewBatch(s, 4)
	b.AppendRow("a", int64(1))
	b.AppendRow("a", int64(1))
	b.AppendRow("b", int64(1))
	b.AppendRow(nil, int64(1))
	h := make([]uint64, 4)
	HashKeys(b, []int{0, 1}, h)
	if h[0] != h[1] {
		t.Fatalf("equal keys hash differently: %x %x", h[0], h[1])
	}
	if h[0] == h[2] || h[2] == h[3] {
		t.Fatalf("different keys collide: %x", h)
	}
	// The hash decides where state lives; it must never change silently.
	if got, want := fmt.Sprintf("%x", h[0]), "8cba1815839918ff"; got != want {
		t.Fatalf("hash of (a, 1) = %s, want %s: the key hash changed, which breaks restoring checkpoints", got, want)
	}
	counts := make([]int, 8)
	big := NewBatch(MustSchema(Field{"n", TypeInt64}), 8000)
	for i := 0; i < 8000; i++ {
		big.AppendRow(int64(i))
	}
	hs := make([]uint64, 8000)
	HashKeys(big, []int{0}, hs)
	for _, x := range hs {
		counts[SubtaskForKeyGroup(128, 8, KeyGroupForHash(x, 128))]++
	}
	for i, c := range counts {
		if c < 700 || c > 1300 {
			t.Fatalf("subtask %d got %d of 8000 sequential keys: %v", i, c, counts)
		}
	}
}

func TestBatchFilterKeepsNullsAndTimes(t *testing.T) {
	s := MustSchema(Field{"a", TypeInt64}, Field{"b", TypeString}, Field{"c", TypeFloat64}, Field{"d", TypeBool})
	b := NewBatch(s, 8)
	for i := 0; i < 130; i++ {
		var str any = fmt.Sprint("s", i)
		if i%3 == 0 {
			str = nil
		}
		b.AppendRow(int64(i), str, float64(i)/2, i%2 == 0)
		b.Times = append(b.Times, int64(1000+i))
	}
	if err := b.Validate(); err != nil {
		t.Fatal(err)
	}
	var sel []int
	for i := 0; i < 130; i += 5 {
		sel = append(sel, i)
	}
	b.Filter(sel)
	if err := b.Validate(); err != nil {
		t.Fatal(err)
	}
	for k, i := range sel {
		row := b.Row(k)
		wantStr := any(fmt.Sprint("s", i))
		if i%3 == 0 {
			wantStr = nil
		}
		want := []any{int64(i), wantStr, float64(i) / 2, i%2 == 0}
		if fmt.Sprint(row) != fmt.Sprint(want) || b.Times[k] != int64(1000+i) {
			t.Fatalf("row %d (was %d) = %v time %d, want %v time %d", k, i, row, b.Times[k], want, 1000+i)
		}
	}
	b.Release()
}

// fakeOp is a minimal operator type for planning tests.
type fakeOp struct{ BaseOperator }

func (fakeOp) Open(context.Context, *OperatorContext) error        { return nil }
func (fakeOp) ProcessBatch(int, *Batch, Collector) error           { return nil }
func (fakeOp) Poll(context.Context, Collector) (PollStatus, error) { return PollEnd, nil }

func testRegistry() *Registry {
	r := NewRegistry()
	src := MustSchema(Field{"k", TypeString}, Field{"v", TypeInt64})
	r.Register(OperatorType{Name: "src", Kind: KindSource,
		Plan:      func(*PlanContext) (*Schema, error) { return src, nil },
		NewSource: func([]byte) (Source, error) { return fakeOp{}, nil }})
	r.Register(OperatorType{Name: "pass", Kind: KindTransform,
		Plan: func(p *PlanContext) (*Schema, error) {
			var cfg struct{ Fail string }
			if err := DecodeConfig(p.Config, &cfg); err != nil {
				return nil, err
			}
			if cfg.Fail != "" {
				return nil, errors.New(cfg.Fail)
			}
			return p.Inputs[0].Schema, nil
		},
		NewOperator: func([]byte) (Operator, error) { return fakeOp{}, nil }})
	r.Register(OperatorType{Name: "sink", Kind: KindSink,
		Plan:        func(*PlanContext) (*Schema, error) { return nil, nil },
		NewOperator: func([]byte) (Operator, error) { return fakeOp{}, nil }})
	return r
}

func TestPlan(t *testing.T) {
	reg := testRegistry()
	build := func(f func(b *Builder)) *JobGraph {
		b := NewBuilder("job").Parallelism(4)
		f(b)
		g, err := b.Build()
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	g := build(func(b *Builder) {
		b.Source("s", "src", nil).SetParallelism(2).Then("p", "pass", nil).KeyBy("k").Then("o", "sink", nil)
	})
	if err := Plan(g, reg); err != nil {
		t.Fatal(err)
	}
	if g.MaxParallelism != 128 || g.Vertices[0].Parallelism != 2 || g.Vertices[1].Parallelism != 4 {
		t.Fatalf("defaults not filled: %+v %+v", g, g.Vertices[1])
	}
	if g.Edges[0].Partitioning != Rebalance {
		t.Fatalf("forward edge between parallelism 2 and 4 became %v, want rebalance", g.Edges[0].Partitioning)
	}
	if !g.Vertices[1].OutSchema.Equal(g.Vertices[0].OutSchema) || g.Vertices[2].OutSchema != nil {
		t.Fatal("schemas not propagated")
	}

	bad := []struct {
		name string
		g    *JobGraph
		want string
	}{
		{"unknown type", build(func(b *Builder) { b.Source("s", "nope", nil) }), `operator "s": unknown operator type "nope"`},
		{"key field", build(func(b *Builder) { b.Source("s", "src", nil).KeyBy("user").Then("p", "pass", nil) }), `operator "p": keyBy: no field "user" (the input has k, v)`},
		{"config error", build(func(b *Builder) { b.Source("s", "src", nil).Then("p", "pass", map[string]string{"Fail": "boom"}) }), `operator "p": boom`},
		{"unknown config key", build(func(b *Builder) { b.Source("s", "src", nil).Then("p", "pass", map[string]string{"Fial": "x"}) }), `unknown field "Fial"`},
		{"parallelism 0 job", build(func(b *Builder) { b.Parallelism(-1); b.Source("s", "src", nil) }), "must be at least 1"},
		{"negative vertex parallelism", build(func(b *Builder) { b.Source("s", "src", nil).SetParallelism(-2) }), `operator "s": parallelism -2`},
		{"above max", build(func(b *Builder) { b.MaxParallelism(2); b.Source("s", "src", nil) }), "exceeds maxParallelism 2"},
		{"dup uid", build(func(b *Builder) { b.Source("s", "src", nil).Then("s", "sink", nil) }), "uid is used by another operator"},
		{"read sink", build(func(b *Builder) { b.Source("s", "src", nil).Then("o", "sink", nil).Then("p", "pass", nil) }), `"sink" is a sink`},
		{"transform without input", build(func(b *Builder) { b.Source("p", "pass", nil) }), `"pass" needs an input`},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			before := fmt.Sprintf("%+v", tc.g.Edges)
			err := Plan(tc.g, reg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Plan error = %v, want it to contain %q", err, tc.want)
			}
			if after := fmt.Sprintf("%+v", tc.g.Edges); after != before {
				t.Fatalf("a failed Plan changed the edges: %s, was %s", after, before)
			}
		})
	}
	// A forward edge between parallelisms 2 and 4 planned before a later
	// operator fails: the edge stays forward.
	g = build(func(b *Builder) {
		b.Source("s", "src", nil).SetParallelism(2).Then("p", "pass", nil).Then("q", "pass", map[string]string{"Fail": "boom"})
	})
	if err := Plan(g, reg); err == nil {
		t.Fatal("Plan succeeded with a failing operator")
	}
	if g.Edges[0].Partitioning != Forward || g.Vertices[1].Parallelism != 0 || g.Vertices[0].OutSchema != nil {
		t.Fatalf("a failed Plan changed the graph: edge %v, parallelism %d, schema %v", g.Edges[0].Partitioning, g.Vertices[1].Parallelism, g.Vertices[0].OutSchema)
	}
}

func TestDecodeConfigRejectsUnknownFields(t *testing.T) {
	var v struct {
		Size string `json:"size"`
	}
	if err := DecodeConfig(json.RawMessage(`{"size":"1s"}`), &v); err != nil || v.Size != "1s" {
		t.Fatalf("DecodeConfig = %v, %+v", err, v)
	}
	if err := DecodeConfig(json.RawMessage(`{"sise":"1s"}`), &v); err == nil || !strings.Contains(err.Error(), `unknown field "sise"`) {
		t.Fatalf("DecodeConfig(misspelt) = %v", err)
	}
}
