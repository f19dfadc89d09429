// Package schedulertest has job graphs for tests of the scheduler and the
// jobmanager: operator types that plan but never run, and small pipelines
// built from them.
package schedulertest

import (
	"errors"
	"testing"

	"github.com/weirstream/weir/stream"
)

// ErrNotRunnable is what the operator types of Registry return when asked
// to run.
var ErrNotRunnable = errors.New("schedulertest: these operator types only plan; they do not run")

// Registry has small operator types that only plan: "gen" (source of k, v
// int64), "pass" (forwards its schema), "count" (k, n int64), "merge" (two
// inputs) and "discard" (sink).
func Registry(t testing.TB) *stream.Registry {
	t.Helper()
	kv := Schema(t, stream.Field{Name: "k", Type: stream.TypeInt64}, stream.Field{Name: "v", Type: stream.TypeInt64})
	kn := Schema(t, stream.Field{Name: "k", Type: stream.TypeInt64}, stream.Field{Name: "n", Type: stream.TypeInt64})
	newOp := func([]byte) (stream.Operator, error) { return nil, ErrNotRunnable }
	reg := stream.NewRegistry()
	reg.Register(stream.OperatorType{Name: "gen", Kind: stream.KindSource,
		Plan:      func(*stream.PlanContext) (*stream.Schema, error) { return kv, nil },
		NewSource: func([]byte) (stream.Source, error) { return nil, ErrNotRunnable }})
	reg.Register(stream.OperatorType{Name: "pass", Kind: stream.KindTransform, NewOperator: newOp,
		Plan: func(p *stream.PlanContext) (*stream.Schema, error) { return p.Inputs[0].Schema, nil }})
	reg.Register(stream.OperatorType{Name: "count", Kind: stream.KindTransform, NewOperator: newOp,
		Plan: func(*stream.PlanContext) (*stream.Schema, error) { return kn, nil }})
	reg.Register(stream.OperatorType{Name: "merge", Kind: stream.KindTransform, Inputs: 2, NewOperator: newOp,
		Plan: func(p *stream.PlanContext) (*stream.Schema, error) { return p.Inputs[0].Schema, nil }})
	reg.Register(stream.OperatorType{Name: "discard", Kind: stream.KindSink, NewOperator: newOp,
		Plan: func(*stream.PlanContext) (*stream.Schema, error) { return nil, nil }})
	return reg
}

// Schema builds a schema of the fields or fails the test.
func Schema(t testing.TB, fields ...stream.Field) *stream.Schema {
	t.Helper()
	s, err := stream.NewSchema(fields...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Pipeline is src(p=srcPar) -> map(p=srcPar) -keyBy(k)-> window(p=winPar)
// -> sink(p=winPar), unplanned: tasks "src -> map" and "window -> sink".
func Pipeline(t testing.TB, srcPar, winPar int) *stream.JobGraph {
	t.Helper()
	b := stream.NewBuilder("pipeline")
	b.Source("src", "gen", nil).SetParallelism(srcPar).
		Then("map", "pass", nil).SetParallelism(srcPar).
		KeyBy("k").
		Then("window", "count", nil).SetParallelism(winPar).
		Then("sink", "discard", nil).SetParallelism(winPar)
	g, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// Planned plans g with reg and returns it.
func Planned(t testing.TB, g *stream.JobGraph, reg *stream.Registry) *stream.JobGraph {
	t.Helper()
	if err := stream.Plan(g, reg); err != nil {
		t.Fatal(err)
	}
	return g
}

// FanOut is src(p) feeding two forward consumers that are not chained to
// it (it has two outputs): b -> bsink and d, unplanned. Tasks: src (head
// 0), b -> bsink (head 1), d (head 3). Each subtask index is its own
// pipelined region.
func FanOut(t testing.TB, p int) *stream.JobGraph {
	t.Helper()
	b := stream.NewBuilder("fanout")
	s := b.Source("src", "gen", nil).SetParallelism(p)
	s.Then("b", "pass", nil).SetParallelism(p).Then("bsink", "discard", nil).SetParallelism(p)
	s.Then("d", "discard", nil).SetParallelism(p)
	g, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return g
}
