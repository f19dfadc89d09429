package dataflow

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"

	"github.com/weirstream/weir/stream"

	"github.com/weirstream/weir/test/polltest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	polltest.Eventually(t, 10*time.Second, what, cond)
}

var genSchema = stream.MustSchema(
	stream.Field{Name: "id", Type: stream.TypeInt64},
	stream.Field{Name: "key", Type: stream.TypeInt64},
	stream.Field{Name: "name", Type: stream.TypeString},
)

// testState is what the test operators of one test report to.
type testState struct {
	emitted  atomic.Int64 // rows emitted by gen sources
	consumed atomic.Int64 // rows taken by sinks
	opened   atomic.Int64
	closed   atomic.Int64
	// slowSink, when set, is called by sinks before each batch.
	slowSink func()

	mu       sync.Mutex
	rows     map[string][]sinkRow // by sink uid
	wms      map[string][]int64   // watermarks seen by sink uid and subtask
	finished map[string]int
}

type sinkRow struct {
	subtask int
	id, key int64
	name    string
}

func newTestState() *testState {
	return &testState{rows: map[string][]sinkRow{}, wms: map[string][]int64{}, finished: map[string]int{}}
}

// genConfig configures the "gen" source: subtask s of p emits ids s, s+p,
// s+2p, … below Rows (forever when Rows < 0) with key id%Keys and name
// "n<key>", in batches of Batch rows, and after each batch the watermark
// (its largest id) unless NoWatermarks. IdleEvery > 0 makes every
// IdleEvery-th poll idle.
type genConfig struct {
	Rows         int64 `json:"rows"`
	Batch        int   `json:"batch"`
	Keys         int64 `json:"keys"`
	IdleEvery    int   `json:"idleEvery"`
	NoWatermarks bool  `json:"noWatermarks"`
}

type genSource struct {
	st    *testState
	cfg   genConfig
	next  int64
	step  int64
	polls int
}

func (g *genSource) Open(_ context.Context, octx *stream.OperatorContext) error {
	g.st.opened.Add(1)
	g.next, g.step = int64(octx.Subtask), int64(octx.Parallelism)
	if g.cfg.Batch <= 0 {
		g.cfg.Batch = 100
	}
	if g.cfg.Keys <= 0 {
		g.cfg.Keys = 10
	}
	return nil
}

func (g *genSource) Poll(_ context.Context, out stream.Collector) (stream.PollStatus, error) {
	g.polls++
	if g.cfg.IdleEvery > 0 && g.polls%g.cfg.IdleEvery == 0 {
		return stream.PollIdle, nil
	}
	b := stream.NewBatch(genSchema, g.cfg.Batch)
	ids, keys, names := b.Cols[0].Ints, b.Cols[1].Ints, b.Cols[2].Strs
	for len(ids) < g.cfg.Batch && (g.cfg.Rows < 0 || g.next < g.cfg.Rows) {
		k := g.next % g.cfg.Keys
		ids = append(ids, g.next)
		keys = append(keys, k)
		names = append(names, fmt.Sprintf("n%d", k))
		g.next += g.step
	}
	b.Cols[0].Ints, b.Cols[1].Ints, b.Cols[2].Strs = ids, keys, names
	b.SetLen(len(ids))
	if len(ids) == 0 {
		b.Release()
		return stream.PollEnd, nil
	}
	last := ids[len(ids)-1]
	g.st.emitted.Add(int64(len(ids)))
	out.Collect(b)
	if !g.cfg.NoWatermarks {
		out.EmitWatermark(last)
	}
	return stream.PollEmitted, nil
}

func (g *genSource) Close() error { g.st.closed.Add(1); return nil }

// addOne adds 1000000 to every id (column-wise); it fails with failAt > 0
// on its failAt-th batch.
type addOne struct {
	stream.BaseOperator
	st     *testState
	failAt int
	n      int
}

func (a *addOne) Open(context.Context, *stream.OperatorContext) error {
	a.st.opened.Add(1)
	return nil
}

// errBoom is the failure of addOne at failAt.
var errBoom = errors.New("boom")

func (a *addOne) ProcessBatch(_ int, b *stream.Batch, out stream.Collector) error {
	a.n++
	if a.failAt > 0 && a.n == a.failAt {
		b.Release()
		return errBoom
	}
	ids := b.Cols[0].Ints
	for i := range ids {
		ids[i] += 1000000
	}
	out.Collect(b)
	return nil
}

func (a *addOne) Close() error { a.st.closed.Add(1); return nil }

// counter passes batches through and, at Finish, emits one row whose id is
// -(rows seen).
type counter struct {
	stream.BaseOperator
	st *testState
	n  int64
}

func (c *counter) Open(context.Context, *stream.OperatorContext) error {
	c.st.opened.Add(1)
	return nil
}

func (c *counter) ProcessBatch(_ int, b *stream.Batch, out stream.Collector) error {
	c.n += int64(b.Len())
	out.Collect(b)
	return nil
}

func (c *counter) Finish(out stream.Collector) error {
	b := stream.NewBatch(genSchema, 1)
	b.AppendRow(-c.n, int64(-1), "count")
	out.Collect(b)
	return nil
}

func (c *counter) Close() error { c.st.closed.Add(1); return nil }

// collectSink records rows and watermarks in the test state.
type collectSink struct {
	st      *testState
	uid     string
	subtask int
}

func (s *collectSink) Open(_ context.Context, octx *stream.OperatorContext) error {
	s.st.opened.Add(1)
	s.uid, s.subtask = octx.OperatorUID, octx.Subtask
	return nil
}

func (s *collectSink) ProcessBatch(_ int, b *stream.Batch, _ stream.Collector) error {
	if s.st.slowSink != nil {
		s.st.slowSink()
	}
	rows := make([]sinkRow, b.Len())
	for i := range rows {
		rows[i] = sinkRow{subtask: s.subtask, id: b.Cols[0].Ints[i], key: b.Cols[1].Ints[i], name: b.Cols[2].Strs[i]}
	}
	s.st.mu.Lock()
	s.st.rows[s.uid] = append(s.st.rows[s.uid], rows...)
	s.st.mu.Unlock()
	s.st.consumed.Add(int64(b.Len()))
	b.Release()
	return nil
}

func (s *collectSink) ProcessWatermark(wm int64, _ stream.Collector) error {
	k := fmt.Sprintf("%s/%d", s.uid, s.subtask)
	s.st.mu.Lock()
	s.st.wms[k] = append(s.st.wms[k], wm)
	s.st.mu.Unlock()
	return nil
}

func (s *collectSink) Finish(stream.Collector) error {
	s.st.mu.Lock()
	s.st.finished[fmt.Sprintf("%s/%d", s.uid, s.subtask)]++
	s.st.mu.Unlock()
	return nil
}

func (s *collectSink) Close() error { s.st.closed.Add(1); return nil }

// discardSink releases every batch; for benchmarks.
type discardSink struct{ stream.BaseOperator }

func (discardSink) Open(context.Context, *stream.OperatorContext) error { return nil }
func (discardSink) ProcessBatch(_ int, b *stream.Batch, _ stream.Collector) error {
	b.Release()
	return nil
}

func samePlan(p *stream.PlanContext) (*stream.Schema, error) { return p.Inputs[0].Schema, nil }

func newTestRegistry(st *testState) *stream.Registry {
	reg := stream.NewRegistry()
	reg.Register(stream.OperatorType{
		Name: "gen", Kind: stream.KindSource,
		Plan: func(*stream.PlanContext) (*stream.Schema, error) { return genSchema, nil },
		NewSource: func(config []byte) (stream.Source, error) {
			g := &genSource{st: st}
			return g, stream.DecodeConfig(config, &g.cfg)
		},
	})
	reg.Register(stream.OperatorType{
		Name: "addOne", Kind: stream.KindTransform, Plan: samePlan,
		NewOperator: func(config []byte) (stream.Operator, error) {
			var cfg struct {
				FailAt int `json:"failAt"`
			}
			err := stream.DecodeConfig(config, &cfg)
			return &addOne{st: st, failAt: cfg.FailAt}, err
		},
	})
	reg.Register(stream.OperatorType{
		Name: "counter", Kind: stream.KindTransform, Plan: samePlan,
		NewOperator: func([]byte) (stream.Operator, error) { return &counter{st: st}, nil },
	})
	reg.Register(stream.OperatorType{
		Name: "collect", Kind: stream.KindSink,
		Plan:        func(*stream.PlanContext) (*stream.Schema, error) { return nil, nil },
		NewOperator: func([]byte) (stream.Operator, error) { return &collectSink{st: st}, nil },
	})
	reg.Register(stream.OperatorType{
		Name: "discard", Kind: stream.KindSink,
		Plan:        func(*stream.PlanContext) (*stream.Schema, error) { return nil, nil },
		NewOperator: func([]byte) (stream.Operator, error) { return discardSink{}, nil },
	})
	return reg
}

// buildSpecs is a miniature scheduler: it turns a planned graph, split into
// chains (vertex ids, head first), into one TaskSpec per subtask of each
// chain. place gives the exchange address of the task whose head is vertex
// v, subtask s.
func buildSpecs(t testing.TB, g *stream.JobGraph, chains [][]int, place func(v, s int) string) []*TaskSpec {
	t.Helper()
	par := func(v int) int { return g.Vertices[v].Parallelism }
	var specs []*TaskSpec
	for _, chain := range chains {
		head, tail := chain[0], chain[len(chain)-1]
		for s := 0; s < par(head); s++ {
			spec := &TaskSpec{JobID: "job-1", Attempt: 3, VertexID: head, Subtask: s, Parallelism: par(head), MaxParallelism: g.MaxParallelism}
			for _, v := range chain {
				co := ChainedOperator{Vertex: g.Vertices[v]}
				for _, e := range g.Inputs(v) {
					co.InputSchemas = append(co.InputSchemas, g.EdgeSchema(e))
					var keys []string
					if e.Partitioning == stream.Hash {
						keys = e.KeyFields
					}
					co.InputKeys = append(co.InputKeys, keys)
				}
				spec.Chain = append(spec.Chain, co)
			}
			for _, e := range g.Inputs(head) {
				spec.Inputs = append(spec.Inputs, InputGate{Input: e.Input, UpstreamVertex: e.From, UpstreamParallelism: par(e.From), Partitioning: e.Partitioning})
			}
			for _, e := range g.Outputs(tail) {
				o := Output{SideOutput: e.SideOutput, DownstreamVertex: e.To, DownstreamInput: e.Input, DownstreamParallelism: par(e.To), Partitioning: e.Partitioning, KeyFields: e.KeyFields}
				for d := 0; d < par(e.To); d++ {
					o.Targets = append(o.Targets, place(e.To, d))
				}
				spec.Outputs = append(spec.Outputs, o)
			}
			specs = append(specs, spec)
		}
	}
	return specs
}

func plan(t testing.TB, b *stream.Builder, reg *stream.Registry) *stream.JobGraph {
	t.Helper()
	g, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Plan(g, reg); err != nil {
		t.Fatal(err)
	}
	return g
}

// runTasks builds and runs every spec (on the exchange named by its
// placement) and returns each task's Run error.
func runTasks(ctx context.Context, t testing.TB, specs []*TaskSpec, reg *stream.Registry, exchangeOf func(*TaskSpec) *Exchange) ([]*Task, []error) {
	t.Helper()
	tasks := make([]*Task, len(specs))
	for i, s := range specs {
		task, err := NewTask(s, reg, exchangeOf(s), nil)
		if err != nil {
			t.Fatalf("NewTask %d: %v", i, err)
		}
		tasks[i] = task
	}
	errs := make([]error, len(tasks))
	var wg sync.WaitGroup
	for i, task := range tasks {
		wg.Go(func() { errs[i] = task.Run(ctx) })
	}
	wg.Wait()
	return tasks, errs
}

// testNode is an exchange served by a real gRPC server on loopback.
type testNode struct {
	x    *Exchange
	srv  *grpc.Server
	addr string
}

func startNode(t testing.TB, credits int) *testNode {
	t.Helper()
	return startNodeWith(t, ExchangeConfig{CreditsPerChannel: credits})
}

// startNodeWith is startNode with an exchange configured by cfg (its
// SelfAddress is set here).
func startNodeWith(t testing.TB, cfg ExchangeConfig) *testNode {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n := &testNode{srv: grpc.NewServer(ExchangeServerOptions()...), addr: lis.Addr().String()}
	cfg.SelfAddress = n.addr
	n.x = NewExchange(cfg)
	n.x.Register(n.srv)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = n.srv.Serve(lis)
	}()
	t.Cleanup(func() {
		n.srv.Stop()
		<-served
		_ = n.x.Close()
	})
	return n
}

func sortRows(rows []sinkRow) {
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].id != rows[j].id {
			return rows[i].id < rows[j].id
		}
		return rows[i].subtask < rows[j].subtask
	})
}
