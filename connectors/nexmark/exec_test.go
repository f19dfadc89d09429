package nexmark_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/weirstream/weir/connectors"
	"github.com/weirstream/weir/connectors/nexmark"
	"github.com/weirstream/weir/jobspec"
	"github.com/weirstream/weir/operators"
	"github.com/weirstream/weir/operators/join"
	"github.com/weirstream/weir/operators/keyed"
	"github.com/weirstream/weir/operators/topn"
	"github.com/weirstream/weir/operators/window"
	"github.com/weirstream/weir/stream"
)

// registry holds every built-in type plus this (builtin.Registry
// will include them once the lead wires them in).
func registry() *stream.Registry {
	r := stream.NewRegistry()
	connectors.Register(r)
	operators.Register(r)
	window.Register(r)
	keyed.Register(r)
	nexmark.Register(r)
	join.Register(r)
	topn.Register(r)
	return r
}

// loadQuery loads examples/nexmark/<q>.yaml with every Nexmark source set to
// cfg and every vertex at parallelism 1.
func loadQuery(t *testing.T, q string, cfg nexmark.Config) *stream.JobGraph {
	t.Helper()
	reg := registry()
	g, err := jobspec.Load(filepath.Join("..", "..", "examples", "nexmark", q+".yaml"), reg)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(cfg)
	for _, v := range g.Vertices {
		if strings.HasPrefix(v.Type, "nexmark_") {
			v.Config = raw
		}
		v.Parallelism = 1
	}
	g.Parallelism = 1
	if err := stream.Plan(g, reg); err != nil {
		t.Fatal(err)
	}
	return g
}

// node is one vertex of an in-process run.
type node struct {
	x    *executor
	v    *stream.Vertex
	src  stream.Source
	op   stream.Operator
	outs []target
	inWM []int64
	wm   int64
	sink bool
	rows []string
}

type target struct {
	to    *node
	input int
}

// executor runs a planned graph of parallelism 1 in this goroutine,
// calling the operators as the task runtime does: sources polled round
// robin, batches pushed through, the minimum watermark over a vertex's
// inputs delivered when it advances, MaxWatermark at the end of a source,
// Finish in topological order. Discard sinks capture their rows.
type executor struct {
	t     *testing.T
	nodes []*node
	order []int
	err   error
}

func newExecutor(t *testing.T, g *stream.JobGraph) *executor {
	x := &executor{t: t}
	reg := registry()
	order, err := g.TopoOrder()
	if err != nil {
		t.Fatal(err)
	}
	x.order = order
	for _, v := range g.Vertices {
		n := &node{x: x, v: v, wm: stream.MinWatermark}
		ins := g.Inputs(v.ID)
		octx := &stream.OperatorContext{JobID: "test", TaskName: v.UID, OperatorUID: v.UID, Parallelism: 1, MaxParallelism: g.MaxParallelism,
			KeyGroups: stream.KeyGroupRangeFor(g.MaxParallelism, 1, 0), OutputSchema: v.OutSchema, Config: v.Config}
		for _, e := range ins {
			octx.InputSchemas = append(octx.InputSchemas, g.Vertices[e.From].OutSchema)
			var keys []string
			if e.Partitioning == stream.Hash {
				keys = e.KeyFields
			}
			octx.InputKeys = append(octx.InputKeys, keys)
			n.inWM = append(n.inWM, stream.MinWatermark)
		}
		typ, ok := reg.Lookup(v.Type, len(ins) == 0)
		if !ok {
			t.Fatalf("no type %s", v.Type)
		}
		switch {
		case typ.Kind == stream.KindSource:
			s, err := typ.NewSource(v.Config)
			if err != nil {
				t.Fatal(err)
			}
			n.src = s
			if err := s.Open(context.Background(), octx); err != nil {
				t.Fatal(err)
			}
		case v.Type == "discard":
			n.sink = true
		default:
			op, err := typ.NewOperator(v.Config)
			if err != nil {
				t.Fatal(err)
			}
			n.op = op
			if err := op.Open(context.Background(), octx); err != nil {
				t.Fatal(err)
			}
		}
		x.nodes = append(x.nodes, n)
	}
	for _, e := range g.Edges {
		x.nodes[e.From].outs = append(x.nodes[e.From].outs, target{x.nodes[e.To], e.Input})
	}
	return x
}

func (x *executor) fail(err error) {
	if x.err == nil && err != nil {
		x.err = err
	}
}

// Collect passes b to every downstream vertex (a copy to all but the last).
func (n *node) Collect(b *stream.Batch) {
	if b.Len() == 0 {
		b.Release()
		return
	}
	if err := b.Validate(); err != nil {
		n.x.fail(fmt.Errorf("%s emitted an invalid batch: %v", n.v.UID, err))
		return
	}
	for i, o := range n.outs {
		bb := b
		if i < len(n.outs)-1 {
			bb = clone(b)
		}
		o.to.process(o.input, bb)
	}
}

func (n *node) EmitWatermark(wm int64) {
	for _, o := range n.outs {
		o.to.watermark(o.input, wm)
	}
}

func (n *node) process(input int, b *stream.Batch) {
	if n.x.err != nil {
		b.Release()
		return
	}
	if n.sink {
		for i := range b.Len() {
			n.rows = append(n.rows, render(b.Row(i)))
		}
		b.Release()
		return
	}
	n.x.fail(n.op.ProcessBatch(input, b, n))
}

func (n *node) watermark(input int, wm int64) {
	n.inWM[input] = max(n.inWM[input], wm)
	m := slices.Min(n.inWM)
	if m <= n.wm || n.x.err != nil {
		return
	}
	n.wm = m
	if n.sink {
		return
	}
	n.x.fail(n.op.ProcessWatermark(m, n))
}

// run drives the graph to the end and returns the rows of the sink called
// sinkUID.
func (x *executor) run(sinkUID string) []string {
	x.t.Helper()
	live := true
	for live && x.err == nil {
		live = false
		for _, n := range x.nodes {
			if n.src == nil {
				continue
			}
			st, err := n.src.Poll(context.Background(), n)
			x.fail(err)
			switch st {
			case stream.PollEnd:
				n.EmitWatermark(stream.MaxWatermark)
				_ = n.src.Close()
				n.src = nil
			default:
				live = true
			}
		}
	}
	for _, id := range x.order {
		if n := x.nodes[id]; n.op != nil && x.err == nil {
			x.fail(n.op.Finish(n))
			x.fail(n.op.Close())
		}
	}
	if x.err != nil {
		x.t.Fatal(x.err)
	}
	for _, n := range x.nodes {
		if n.v.UID == sinkUID {
			slices.Sort(n.rows)
			return n.rows
		}
	}
	x.t.Fatalf("no sink %q", sinkUID)
	return nil
}

func clone(b *stream.Batch) *stream.Batch {
	c := stream.NewBatch(b.Schema, b.Len())
	for j := range b.Cols {
		src, dst := &b.Cols[j], &c.Cols[j]
		dst.Ints = append(dst.Ints, src.Ints...)
		dst.Floats = append(dst.Floats, src.Floats...)
		dst.Strs = append(dst.Strs, src.Strs...)
		dst.Bools = append(dst.Bools, src.Bools...)
		dst.Nulls = slices.Clone(src.Nulls)
	}
	c.Times = append(c.Times, b.Times...)
	c.SetLen(b.Len())
	return c
}

// render formats a row for comparison: floats with 12 significant digits.
func render(vals []any) string {
	parts := make([]string, len(vals))
	for i, v := range vals {
		switch x := v.(type) {
		case float64:
			parts[i] = strconv.FormatFloat(x, 'g', 12, 64)
		default:
			parts[i] = fmt.Sprint(x)
		}
	}
	return strings.Join(parts, "|")
}

func row(vals ...any) string { return render(vals) }
