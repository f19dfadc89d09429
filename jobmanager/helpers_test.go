package jobmanager

import (
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/weirstream/weir/stream"

	"github.com/weirstream/weir/test/polltest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var errNotRunnable = errors.New("test operator types only plan; they do not run in jobmanager tests")

// testRegistry has small operator types that only plan: "gen" (source of
// k, v int64), "pass" (forwards its schema), "count" (k, n int64),
// "merge" (two inputs) and "discard" (sink).
func testRegistry(t testing.TB) *stream.Registry {
	t.Helper()
	kv := mustSchema(t, stream.Field{Name: "k", Type: stream.TypeInt64}, stream.Field{Name: "v", Type: stream.TypeInt64})
	kn := mustSchema(t, stream.Field{Name: "k", Type: stream.TypeInt64}, stream.Field{Name: "n", Type: stream.TypeInt64})
	newOp := func([]byte) (stream.Operator, error) { return nil, errNotRunnable }
	reg := stream.NewRegistry()
	reg.Register(stream.OperatorType{Name: "gen", Kind: stream.KindSource,
		Plan:      func(*stream.PlanContext) (*stream.Schema, error) { return kv, nil },
		NewSource: func([]byte) (stream.Source, error) { return nil, errNotRunnable }})
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

func mustSchema(t testing.TB, fields ...stream.Field) *stream.Schema {
	t.Helper()
	s, err := stream.NewSchema(fields...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// pipeline is src(p=srcPar) -> map(p=srcPar) -keyBy(k)-> window(p=winPar)
// -> sink(p=winPar), unplanned.
func pipeline(t testing.TB, srcPar, winPar int) *stream.JobGraph {
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

func planned(t testing.TB, g *stream.JobGraph, reg *stream.Registry) *stream.JobGraph {
	t.Helper()
	if err := stream.Plan(g, reg); err != nil {
		t.Fatal(err)
	}
	return g
}

// eventually polls cond until it holds or timeout passes.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	polltest.Eventually(t, timeout, what, cond)
}
