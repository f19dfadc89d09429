package nexmark_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/weirstream/weir/connectors"
	"github.com/weirstream/weir/connectors/nexmark"
	"github.com/weirstream/weir/dataflow/dataflowtest"
	"github.com/weirstream/weir/jobspec"
	"github.com/weirstream/weir/operators"
	"github.com/weirstream/weir/operators/join"
	"github.com/weirstream/weir/operators/keyed"
	"github.com/weirstream/weir/operators/lifetime"
	"github.com/weirstream/weir/operators/topn"
	"github.com/weirstream/weir/operators/window"
	"github.com/weirstream/weir/stream"
)

// collectType is the test-only sink type that replaces each query's
// "discard" sink: it renders every row it receives into a sinkRows.
const collectType = "collect"

// sinkRows gathers the rendered rows of every subtask of a collect sink.
type sinkRows struct {
	mu   sync.Mutex
	rows []string
}

// sorted returns the rows collected so far, sorted.
func (c *sinkRows) sorted() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := slices.Clone(c.rows)
	slices.Sort(out)
	return out
}

// collectSink is one subtask of a collect sink.
type collectSink struct {
	stream.BaseOperator
	c   *sinkRows
	buf []string
}

func (s *collectSink) Open(context.Context, *stream.OperatorContext) error { return nil }

func (s *collectSink) ProcessBatch(_ int, b *stream.Batch, _ stream.Collector) error {
	defer b.Release()
	if err := b.Validate(); err != nil {
		return fmt.Errorf("collect: invalid batch: %w", err)
	}
	s.buf = s.buf[:0]
	for i := range b.Len() {
		s.buf = append(s.buf, render(b.Row(i)))
	}
	s.c.mu.Lock()
	s.c.rows = append(s.c.rows, s.buf...)
	s.c.mu.Unlock()
	return nil
}

// registry holds every built-in type plus this (builtin.Registry
// will include them once the lead wires them in) and a collect sink that
// writes to c.
func registry(c *sinkRows) *stream.Registry {
	r := stream.NewRegistry()
	connectors.Register(r)
	operators.Register(r)
	window.Register(r)
	keyed.Register(r)
	nexmark.Register(r)
	join.Register(r)
	topn.Register(r)
	lifetime.Register(r)
	r.Register(stream.OperatorType{
		Name: collectType,
		Kind: stream.KindSink,
		Plan: func(*stream.PlanContext) (*stream.Schema, error) { return nil, nil },
		NewOperator: func([]byte) (stream.Operator, error) {
			return &collectSink{c: c}, nil
		},
		Doc: "test sink: collects rendered rows",
	})
	return r
}

// loadQuery loads query spec q (QuerySpec) with every Nexmark source set to
// cfg, every vertex at parallelism 1 and its "discard" sink replaced by a
// collect sink, and plans it against reg.
func loadQuery(t *testing.T, q string, cfg nexmark.Config, reg *stream.Registry) *stream.JobGraph {
	t.Helper()
	spec, err := nexmark.QuerySpec(q)
	if err != nil {
		t.Fatal(err)
	}
	g, err := jobspec.Parse(q+".yaml", spec, reg)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(cfg)
	sinks := 0
	for _, v := range g.Vertices {
		if strings.HasPrefix(v.Type, "nexmark_") {
			v.Config = raw
		}
		if v.Type == "discard" {
			v.Type, v.Config = collectType, nil
			sinks++
		}
		v.Parallelism = 1
	}
	if sinks != 1 {
		t.Fatalf("%s: %d discard sinks, want 1 to collect the result from", q, sinks)
	}
	g.Parallelism = 1
	if err := stream.Plan(g, reg); err != nil {
		t.Fatal(err)
	}
	return g
}

// runQuery runs query q over cfg's events on the task runtime and returns
// the rows that reached its sink, sorted.
func runQuery(t *testing.T, q string, cfg nexmark.Config) []string {
	t.Helper()
	c := &sinkRows{}
	reg := registry(c)
	g := loadQuery(t, q, cfg, reg)
	if err := dataflowtest.RunGraph(t.Context(), g, reg); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return c.sorted()
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
