package dataflowtest_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/weirstream/weir/connectors"
	"github.com/weirstream/weir/dataflow/dataflowtest"
	"github.com/weirstream/weir/operators/keyed"
	"github.com/weirstream/weir/stream"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// collected gathers the rows every subtask of a "collect" sink receives.
type collected struct {
	mu   sync.Mutex
	rows [][2]int64 // key, count
	// failAfter makes a sink subtask fail once it has seen that many rows
	// (0: never).
	failAfter int
	// seen is closed when the first batch arrives.
	seen     chan struct{}
	seenOnce sync.Once
}

type collectSink struct {
	stream.BaseOperator
	c *collected
	n int
}

var errSinkFull = errors.New("collect: sink is full")

func (s *collectSink) Open(context.Context, *stream.OperatorContext) error { return nil }

func (s *collectSink) ProcessBatch(_ int, b *stream.Batch, _ stream.Collector) error {
	defer b.Release()
	s.c.seenOnce.Do(func() { close(s.c.seen) })
	keys, counts := b.Cols[0].Ints, b.Cols[1].Ints
	s.c.mu.Lock()
	for i := range b.Len() {
		s.c.rows = append(s.c.rows, [2]int64{keys[i], counts[i]})
	}
	s.c.mu.Unlock()
	s.n += b.Len()
	if s.c.failAfter > 0 && s.n >= s.c.failAfter {
		return errSinkFull
	}
	return nil
}

// registry has datagen, running_count and a "collect" sink writing to c.
func registry(c *collected) *stream.Registry {
	r := stream.NewRegistry()
	connectors.Register(r)
	keyed.Register(r)
	r.Register(stream.OperatorType{
		Name: "collect",
		Kind: stream.KindSink,
		Plan: func(*stream.PlanContext) (*stream.Schema, error) { return nil, nil },
		NewOperator: func([]byte) (stream.Operator, error) {
			return &collectSink{c: c}, nil
		},
	})
	return r
}

// countGraph is datagen (rows rows, key = seq % keys) → keyBy key →
// running_count → collect, at the given parallelisms.
func countGraph(t *testing.T, reg *stream.Registry, rows, keys int64, srcPar, countPar, sinkPar int) *stream.JobGraph {
	t.Helper()
	gen := connectors.DatagenConfig{Rows: rows, BatchSize: 100, Fields: []connectors.DatagenField{
		{Name: "seq", Kind: "sequence"},
		{Name: "key", Kind: "sequence", Modulo: keys},
	}}
	b := stream.NewBuilder("count").MaxParallelism(16)
	b.Source("gen", "datagen", gen).SetParallelism(srcPar).
		KeyBy("key").
		Then("count", keyed.TypeRunningCount, nil).SetParallelism(countPar).
		Rebalance().
		Then("sink", "collect", nil).SetParallelism(sinkPar)
	g, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Plan(g, reg); err != nil {
		t.Fatal(err)
	}
	return g
}

func TestRunGraphRunningCount(t *testing.T) {
	tests := []struct {
		name                      string
		rows, keys                int64
		srcPar, countPar, sinkPar int
	}{
		{"parallelism 1", 2_000, 7, 1, 1, 1},
		{"fan out and in", 10_000, 13, 2, 3, 2},
		{"more subtasks than keys", 500, 2, 3, 4, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &collected{seen: make(chan struct{})}
			reg := registry(c)
			g := countGraph(t, reg, tc.rows, tc.keys, tc.srcPar, tc.countPar, tc.sinkPar)
			if err := dataflowtest.RunGraph(t.Context(), g, reg); err != nil {
				t.Fatal(err)
			}
			// Independent oracle: key k gets every seq with seq%keys == k,
			// so its rows count 1..n_k, whatever the order of arrival.
			var want [][2]int64
			n := map[int64]int64{}
			for seq := range tc.rows {
				k := seq % tc.keys
				n[k]++
				want = append(want, [2]int64{k, n[k]})
			}
			got := c.rows
			cmp := func(a, b [2]int64) int {
				if a[0] != b[0] {
					return int(a[0] - b[0])
				}
				return int(a[1] - b[1])
			}
			slices.SortFunc(got, cmp)
			slices.SortFunc(want, cmp)
			if len(got) != len(want) {
				t.Fatalf("got %d rows, want %d", len(got), len(want))
			}
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("row %d (sorted): got key %d count %d, want key %d count %d", i, got[i][0], got[i][1], want[i][0], want[i][1])
				}
			}
		})
	}
}

func TestRunGraphReturnsTaskError(t *testing.T) {
	c := &collected{seen: make(chan struct{}), failAfter: 100}
	reg := registry(c)
	// Unbounded source: only the failure can end the run.
	g := countGraph(t, reg, 0, 5, 2, 2, 1)
	err := dataflowtest.RunGraph(t.Context(), g, reg)
	if !errors.Is(err, errSinkFull) {
		t.Fatalf("got %v, want the sink's error %v", err, errSinkFull)
	}
	if !strings.Contains(err.Error(), `"sink"`) {
		t.Errorf("error %q does not name the failing operator", err)
	}
}

func TestRunGraphCancel(t *testing.T) {
	c := &collected{seen: make(chan struct{})}
	reg := registry(c)
	g := countGraph(t, reg, 0, 5, 1, 2, 1)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- dataflowtest.RunGraph(ctx, g, reg) }()
	select {
	case <-c.seen:
	case err := <-done:
		t.Fatalf("RunGraph of an unbounded source returned %v before any row reached the sink", err)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
}

func TestRunGraphUnplanned(t *testing.T) {
	b := stream.NewBuilder("raw")
	b.Source("gen", "datagen", nil).Then("sink", "collect", nil)
	g, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	err = dataflowtest.RunGraph(t.Context(), g, registry(&collected{}))
	if err == nil || !strings.Contains(err.Error(), "stream.Plan") {
		t.Fatalf("got %v, want an error telling to plan the graph", err)
	}
}
