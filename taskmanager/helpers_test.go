package taskmanager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/stream"

	"github.com/weirstream/weir/test/polltest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// Generous: CI is a small, noisy 2-core machine.
const waitTimeout = 20 * time.Second

// waitFor polls cond until it holds, failing the test after waitTimeout.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	polltest.Eventually(t, waitTimeout, what, cond)
}

// heartbeatStatus returns id's status in heartbeat hb, or nil.
func heartbeatStatus(hb *weirpb.HeartbeatRequest, id *weirpb.ExecutionID) *weirpb.TaskStatus {
	for _, st := range hb.GetTasks() {
		if proto.Equal(st.GetId(), id) {
			return st
		}
	}
	return nil
}

// logRecorder is a slog handler keeping every message, for waiting on
// events that have no other observable effect and for failure diagnostics.
type logRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }

func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", rec.Level, rec.Message)
	rec.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	r.mu.Lock()
	r.msgs = append(r.msgs, b.String())
	r.mu.Unlock()
	return nil
}

func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *logRecorder) WithGroup(string) slog.Handler      { return r }

// count reports how many messages contain sub.
func (r *logRecorder) count(sub string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, m := range r.msgs {
		if strings.Contains(m, sub) {
			n++
		}
	}
	return n
}

func (r *logRecorder) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.msgs...)
}

// harness runs one TaskManager and holds a TaskExecutorService client to it.
type harness struct {
	tm     *TaskManager
	conn   *grpc.ClientConn
	exec   weirpb.TaskExecutorServiceClient
	logs   *logRecorder
	cancel context.CancelFunc
	done   chan error

	stopOnce sync.Once
	runErr   error
}

const testTaskManagerID = "tm-test"

// startTaskManager runs a TaskManager registering with jmAddr and waits
// until it listens. edit, if not nil, adjusts the config first. Cleanup
// stops it and fails the test if Run does not return.
func startTaskManager(t testing.TB, jmAddr string, reg *stream.Registry, edit func(*Config)) *harness {
	t.Helper()
	logs := &logRecorder{}
	cfg := DefaultConfig()
	cfg.ID = testTaskManagerID
	cfg.JobManagerAddress = jmAddr
	cfg.RPCAddress = "127.0.0.1:0"
	cfg.Slots = 3
	cfg.RegisterRetry = 50 * time.Millisecond
	cfg.Logger = slog.New(logs)
	if edit != nil {
		edit(&cfg)
	}
	tm, err := New(cfg, reg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	// The fencing tests send epochs without an etcd to verify them
	// against; TestEpochVerified turns the check back on.
	tm.testAcceptEpochs.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	h := &harness{tm: tm, logs: logs, cancel: cancel, done: make(chan error, 1)}
	go func() { h.done <- tm.Run(ctx) }()
	t.Cleanup(func() {
		h.stop(t)
		if t.Failed() {
			for _, m := range logs.all() {
				t.Log(m)
			}
		}
	})
	select {
	case <-tm.Ready():
	case err := <-h.done:
		t.Fatalf("Run returned before the taskmanager was ready: %v", err)
	case <-time.After(waitTimeout):
		t.Fatal("taskmanager not ready")
	}
	conn, err := grpc.NewClient(tm.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() }) // a second Close is harmless
	h.conn = conn
	h.exec = weirpb.NewTaskExecutorServiceClient(conn)
	return h
}

// stop cancels Run and waits for it to return; it returns Run's error.
func (h *harness) stop(t testing.TB) error {
	t.Helper()
	h.stopOnce.Do(func() {
		h.cancel()
		select {
		case h.runErr = <-h.done:
		case <-time.After(waitTimeout):
			h.runErr = errors.New("Run did not return after its context was cancelled")
			t.Error(h.runErr)
		}
	})
	return h.runErr
}

func (h *harness) submit(t testing.TB, d *weirpb.TaskDeployment) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	_, err := h.exec.SubmitTask(ctx, &weirpb.SubmitTaskRequest{Task: d, InstanceId: h.tm.Instance()})
	return err
}

func (h *harness) mustSubmit(t testing.TB, d *weirpb.TaskDeployment) {
	t.Helper()
	if err := h.submit(t, d); err != nil {
		t.Fatalf("SubmitTask %s: %v", d.GetTaskName(), err)
	}
}

func (h *harness) cancelTask(t testing.TB, id *weirpb.ExecutionID) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if _, err := h.exec.CancelTask(ctx, &weirpb.CancelTaskRequest{Id: id}); err != nil {
		t.Fatalf("CancelTask %v: %v", id, err)
	}
}

// ---- test operators ----

var rowSchema = stream.MustSchema(
	stream.Field{Name: "id", Type: stream.TypeInt64},
	stream.Field{Name: "k", Type: stream.TypeInt64},
)

// testState is what one test's operators report to.
type testState struct {
	opened, closed atomic.Int64 // operator instances (sources and sinks)
	sinkRows       atomic.Int64
	sinkIDSum      atomic.Int64

	// holdClose makes "hold" sinks block in Close: closeEntered is closed
	// when the first one enters Close, and they return when releaseClose
	// is closed.
	closeOnce    sync.Once
	closeEntered chan struct{}
	releaseClose chan struct{}
}

func newTestState() *testState {
	return &testState{closeEntered: make(chan struct{}), releaseClose: make(chan struct{})}
}

// genConfig configures the "gen" source: it emits ids 0..Rows-1 with k =
// id%7 in batches of Batch rows, then ends, or with Forever stays idle
// until cancelled.
type genConfig struct {
	Rows    int64 `json:"rows"`
	Batch   int   `json:"batch"`
	Forever bool  `json:"forever"`
}

type genSource struct {
	st   *testState
	cfg  genConfig
	next int64
}

func (g *genSource) Open(context.Context, *stream.OperatorContext) error {
	g.st.opened.Add(1)
	if g.cfg.Batch <= 0 {
		g.cfg.Batch = 100
	}
	return nil
}

func (g *genSource) Poll(_ context.Context, out stream.Collector) (stream.PollStatus, error) {
	if g.next >= g.cfg.Rows {
		if g.cfg.Forever {
			return stream.PollIdle, nil
		}
		return stream.PollEnd, nil
	}
	n := min(int64(g.cfg.Batch), g.cfg.Rows-g.next)
	b := stream.NewBatch(rowSchema, int(n))
	ids, ks := b.Cols[0].Ints, b.Cols[1].Ints
	for i := int64(0); i < n; i++ {
		ids = append(ids, g.next+i)
		ks = append(ks, (g.next+i)%7)
	}
	b.Cols[0].Ints, b.Cols[1].Ints = ids, ks
	b.SetLen(int(n))
	g.next += n
	out.Collect(b)
	return stream.PollEmitted, nil
}

func (g *genSource) Close() error { g.st.closed.Add(1); return nil }

// sinkConfig configures the "count" and "hold" sinks: with FailAt > 0 the
// FailAt-th batch fails the task.
type sinkConfig struct {
	FailAt int `json:"failAt"`
}

type countSink struct {
	stream.BaseOperator
	st      *testState
	cfg     sinkConfig
	batches int
	hold    bool
}

func (s *countSink) Open(context.Context, *stream.OperatorContext) error {
	s.st.opened.Add(1)
	return nil
}

func (s *countSink) ProcessBatch(_ int, b *stream.Batch, _ stream.Collector) error {
	defer b.Release()
	s.batches++
	if s.cfg.FailAt > 0 && s.batches == s.cfg.FailAt {
		return errors.New("boom: failing on purpose")
	}
	var sum int64
	for _, id := range b.Cols[0].Ints {
		sum += id
	}
	s.st.sinkIDSum.Add(sum)
	s.st.sinkRows.Add(int64(b.Len()))
	return nil
}

func (s *countSink) Close() error {
	if s.hold {
		s.st.closeOnce.Do(func() { close(s.st.closeEntered) })
		<-s.st.releaseClose
	}
	s.st.closed.Add(1)
	return nil
}

// newTestRegistry registers "gen" (source), "count" and "hold" (sinks).
func newTestRegistry(st *testState) *stream.Registry {
	reg := stream.NewRegistry()
	reg.Register(stream.OperatorType{
		Name: "gen", Kind: stream.KindSource,
		Plan: func(*stream.PlanContext) (*stream.Schema, error) { return rowSchema, nil },
		NewSource: func(config []byte) (stream.Source, error) {
			g := &genSource{st: st}
			return g, stream.DecodeConfig(config, &g.cfg)
		},
	})
	for _, name := range []string{"count", "hold"} {
		hold := name == "hold"
		reg.Register(stream.OperatorType{
			Name: name, Kind: stream.KindSink,
			Plan: func(*stream.PlanContext) (*stream.Schema, error) { return nil, nil },
			NewOperator: func(config []byte) (stream.Operator, error) {
				s := &countSink{st: st, hold: hold}
				return s, stream.DecodeConfig(config, &s.cfg)
			},
		})
	}
	return reg
}

// ---- deployments ----

func vertexMsg(id int32, uid, typ, config string, out *stream.Schema) *weirpb.Vertex {
	return &weirpb.Vertex{Id: id, Uid: uid, Name: uid, Type: typ, Config: []byte(config), Parallelism: 1,
		OutSchema: weirpb.FromSchema(out)}
}

func genJSON(rows int64, forever bool) string {
	return fmt.Sprintf(`{"rows": %d, "batch": 256, "forever": %t}`, rows, forever)
}

// chainedTask is one task running gen → sink chained (vertices 0 and 1).
func chainedTask(job string, attempt int64, srcConfig, sinkType, sinkConfig string) *weirpb.TaskDeployment {
	return &weirpb.TaskDeployment{
		Id:       &weirpb.ExecutionID{JobId: job, VertexId: 0, Subtask: 0, Attempt: attempt},
		TaskName: job + "/src->sink", Parallelism: 1, MaxParallelism: 128,
		Chain: []*weirpb.ChainedOperator{
			{Vertex: vertexMsg(0, "src", "gen", srcConfig, rowSchema)},
			{Vertex: vertexMsg(1, "sink", sinkType, sinkConfig, nil),
				InputSchemas: []*weirpb.Schema{weirpb.FromSchema(rowSchema)}},
		},
	}
}

// exchangeTasks is gen (vertex 0, p=1) → hash(k) → count (vertex 1, p=1) as
// two tasks; target is the exchange address of the sink's taskmanager.
func exchangeTasks(job string, attempt int64, rows int64, target string) (src, sink *weirpb.TaskDeployment) {
	src = &weirpb.TaskDeployment{
		Id:       &weirpb.ExecutionID{JobId: job, VertexId: 0, Subtask: 0, Attempt: attempt},
		TaskName: job + "/src", Parallelism: 1, MaxParallelism: 128,
		Chain: []*weirpb.ChainedOperator{{Vertex: vertexMsg(0, "src", "gen", genJSON(rows, false), rowSchema)}},
		Outputs: []*weirpb.OutputSpec{{
			DownstreamVertex: 1, DownstreamInput: 0, DownstreamParallelism: 1,
			Partitioning: weirpb.Partitioning_PARTITIONING_HASH, KeyFields: []string{"k"}, Targets: []string{target},
		}},
	}
	sink = &weirpb.TaskDeployment{
		Id:       &weirpb.ExecutionID{JobId: job, VertexId: 1, Subtask: 0, Attempt: attempt},
		TaskName: job + "/sink", Parallelism: 1, MaxParallelism: 128,
		Chain: []*weirpb.ChainedOperator{{
			Vertex:       vertexMsg(1, "sink", "count", "", nil),
			InputSchemas: []*weirpb.Schema{weirpb.FromSchema(rowSchema)},
			InputKeys:    []*weirpb.KeyFields{{Fields: []string{"k"}}},
		}},
		Inputs: []*weirpb.InputGate{{
			Input: 0, UpstreamVertex: 0, UpstreamParallelism: 1, Partitioning: weirpb.Partitioning_PARTITIONING_HASH,
		}},
	}
	return src, sink
}
