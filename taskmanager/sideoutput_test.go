package taskmanager

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/weirstream/weir/jobmanager/jobmanagertest"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/stream"
)

// oddSchema is the schema of "oddsplit"'s side output "odd".
var oddSchema = stream.MustSchema(stream.Field{Name: "odd_id", Type: stream.TypeInt64})

// sums records, per sink uid, the number and sum of the ids (column 0) that
// "sum" sinks got.
type sums struct {
	mu     sync.Mutex
	n, sum map[string]int64
}

type sumSink struct {
	stream.BaseOperator
	s   *sums
	uid string
}

func (s *sumSink) Open(_ context.Context, octx *stream.OperatorContext) error {
	s.uid = octx.OperatorUID
	return nil
}

func (s *sumSink) ProcessBatch(_ int, b *stream.Batch, _ stream.Collector) error {
	defer b.Release()
	s.s.mu.Lock()
	defer s.s.mu.Unlock()
	for _, id := range b.Cols[0].Ints[:b.Len()] {
		s.s.n[s.uid]++
		s.s.sum[s.uid] += id
	}
	return nil
}

// oddsplit passes rows with an even id on and sends odd ids to side output
// "odd".
type oddsplit struct{ stream.BaseOperator }

func (oddsplit) Open(context.Context, *stream.OperatorContext) error { return nil }

func (oddsplit) ProcessBatch(_ int, b *stream.Batch, out stream.Collector) error {
	odd := stream.NewBatch(oddSchema, b.Len())
	var keep []int
	for i, id := range b.Cols[0].Ints[:b.Len()] {
		if id%2 == 0 {
			keep = append(keep, i)
		} else {
			odd.AppendRow(id)
		}
	}
	b.Filter(keep)
	out.Collect(b)
	if !stream.CollectSide(out, "odd", odd) {
		return fmt.Errorf("side output odd has no reader")
	}
	return nil
}

// lateSink counts every row whose id is a multiple of 3 as a late record.
type lateSink struct {
	stream.BaseOperator
	st   *testState
	late atomic.Int64
}

var _ stream.LateRecordsCounter = (*lateSink)(nil)

func (s *lateSink) Open(context.Context, *stream.OperatorContext) error { return nil }

func (s *lateSink) ProcessBatch(_ int, b *stream.Batch, _ stream.Collector) error {
	defer b.Release()
	for _, id := range b.Cols[0].Ints[:b.Len()] {
		if id%3 == 0 {
			s.late.Add(1)
		}
	}
	s.st.sinkRows.Add(int64(b.Len()))
	return nil
}

func (s *lateSink) LateRecordsDropped() int64 { return s.late.Load() }

// addSideTypes adds "oddsplit", "sum" (writing to s) and "late" (counting
// rows in st) to reg.
func addSideTypes(reg *stream.Registry, st *testState, s *sums) *stream.Registry {
	reg.Register(stream.OperatorType{
		Name: "oddsplit", Kind: stream.KindTransform,
		Plan: func(p *stream.PlanContext) (*stream.Schema, error) {
			p.DeclareSideOutput("odd", oddSchema)
			return p.Inputs[0].Schema, nil
		},
		NewOperator: func([]byte) (stream.Operator, error) { return oddsplit{}, nil },
	})
	reg.Register(stream.OperatorType{
		Name: "sum", Kind: stream.KindSink,
		Plan:        func(*stream.PlanContext) (*stream.Schema, error) { return nil, nil },
		NewOperator: func([]byte) (stream.Operator, error) { return &sumSink{s: s}, nil },
	})
	reg.Register(stream.OperatorType{
		Name: "late", Kind: stream.KindSink,
		Plan:        func(*stream.PlanContext) (*stream.Schema, error) { return nil, nil },
		NewOperator: func([]byte) (stream.Operator, error) { return &lateSink{st: st}, nil },
	})
	return reg
}

// TestSideOutputDeployment deploys gen → oddsplit as one task whose outputs
// are the main output (hash-partitioned) and side output "odd", each read
// by a sink task over the exchange: the side output's name and schema
// travel in the deployment, and each sink gets exactly its rows.
func TestSideOutputDeployment(t *testing.T) {
	jm := jobmanagertest.Start(t)
	st := newTestState()
	s := &sums{n: map[string]int64{}, sum: map[string]int64{}}
	h := startTaskManager(t, jm.Addr(), addSideTypes(newTestRegistry(st), st, s), nil)
	target := h.tm.ExchangeAddr()
	const job, rows = "side", 1000

	split := vertexMsg(1, "split", "oddsplit", "", rowSchema)
	split.SideOutSchemas = map[string]*weirpb.Schema{"odd": weirpb.FromSchema(oddSchema)}
	src := &weirpb.TaskDeployment{
		Id:       &weirpb.ExecutionID{JobId: job, VertexId: 0, Attempt: 1},
		TaskName: "gen -> split", Parallelism: 1, MaxParallelism: 128,
		Chain: []*weirpb.ChainedOperator{
			{Vertex: vertexMsg(0, "src", "gen", genJSON(rows, false), rowSchema)},
			{Vertex: split, InputSchemas: []*weirpb.Schema{weirpb.FromSchema(rowSchema)}},
		},
		Outputs: []*weirpb.OutputSpec{
			{DownstreamVertex: 2, DownstreamParallelism: 1, Partitioning: weirpb.Partitioning_PARTITIONING_HASH,
				KeyFields: []string{"k"}, Targets: []string{target}},
			{SideOutput: "odd", DownstreamVertex: 3, DownstreamParallelism: 1, Partitioning: weirpb.Partitioning_PARTITIONING_FORWARD,
				Targets: []string{target}},
		},
	}
	sink := func(v int32, uid string, in *stream.Schema, part weirpb.Partitioning) *weirpb.TaskDeployment {
		return &weirpb.TaskDeployment{
			Id:       &weirpb.ExecutionID{JobId: job, VertexId: v, Attempt: 1},
			TaskName: uid, Parallelism: 1, MaxParallelism: 128,
			Chain: []*weirpb.ChainedOperator{{Vertex: vertexMsg(v, uid, "sum", "", nil),
				InputSchemas: []*weirpb.Schema{weirpb.FromSchema(in)}, InputKeys: []*weirpb.KeyFields{{}}}},
			Inputs: []*weirpb.InputGate{{Input: 0, UpstreamVertex: 1, UpstreamParallelism: 1, Partitioning: part}},
		}
	}
	h.mustSubmit(t, sink(2, "even", rowSchema, weirpb.Partitioning_PARTITIONING_HASH))
	h.mustSubmit(t, sink(3, "odd", oddSchema, weirpb.Partitioning_PARTITIONING_FORWARD))
	h.mustSubmit(t, src)
	for _, d := range []*weirpb.TaskDeployment{src, sink(2, "even", nil, 0), sink(3, "odd", nil, 0)} {
		jm.WaitReported(t, d.GetId(), weirpb.TaskState_TASK_STATE_FINISHED)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// ids 0..rows-1: half even, half odd.
	wantEvenSum, wantOddSum := int64(0), int64(0)
	for id := range int64(rows) {
		if id%2 == 0 {
			wantEvenSum += id
		} else {
			wantOddSum += id
		}
	}
	if s.n["even"] != rows/2 || s.sum["even"] != wantEvenSum || s.n["odd"] != rows/2 || s.sum["odd"] != wantOddSum {
		t.Fatalf("even sink got %d rows summing to %d, odd sink %d summing to %d; want %d rows each, sums %d and %d",
			s.n["even"], s.sum["even"], s.n["odd"], s.sum["odd"], rows/2, wantEvenSum, wantOddSum)
	}
}

// lateSeries scrapes the taskmanager's registry for
// weir_operator_late_records_dropped_total and renders its series sorted.
func lateSeries(t *testing.T, h *harness) []string {
	t.Helper()
	mfs, err := h.tm.metrics.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, mf := range mfs {
		if mf.GetName() != "weir_operator_late_records_dropped_total" {
			continue
		}
		if mf.GetType() != dto.MetricType_COUNTER {
			t.Errorf("metric type %v, want counter", mf.GetType())
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			out = append(out, fmt.Sprintf("job=%s operator=%s %g", labels["job"], labels["operator"], m.GetCounter().GetValue()))
		}
	}
	sort.Strings(out)
	return out
}

// TestLateRecordsMetric: operators implementing stream.LateRecordsCounter
// are summed per job and operator uid over the subtasks this taskmanager
// runs; other operators have no series. The counts of ended subtasks stay
// while their job is active (a counter never goes down), and go with it.
func TestLateRecordsMetric(t *testing.T) {
	jm := jobmanagertest.New(t)
	jm.SetActive("j1", "j2", "j3")
	jm.Serve(t)
	st := newTestState()
	h := startTaskManager(t, jm.Addr(), addSideTypes(newTestRegistry(st), st, &sums{}), func(c *Config) { c.Slots = 4 })
	h.tm.mu.Lock()
	h.tm.endedSeriesGrace = 0 // series end as soon as their job does
	h.tm.mu.Unlock()
	if got := lateSeries(t, h); len(got) != 0 {
		t.Fatalf("series before any task: %v", got)
	}
	var ids []*weirpb.ExecutionID
	deploy := func(job string, subtask, par int32, rows int64, sinkType string) {
		d := chainedTask(job, 1, genJSON(rows, true), sinkType, "")
		d.Id.Subtask, d.Parallelism = subtask, par
		d.TaskName = fmt.Sprintf("%s (%d/%d)", job, subtask+1, par)
		h.mustSubmit(t, d)
		ids = append(ids, d.GetId())
	}
	// Each subtask's source emits ids 0..rows-1; ids that are multiples of
	// 3 are late: 34 of 100, 4 of 10.
	deploy("j1", 0, 2, 100, "late")
	deploy("j1", 1, 2, 100, "late")
	deploy("j2", 0, 1, 10, "late")
	deploy("j3", 0, 1, 10, "count")
	waitFor(t, "every row to reach the sinks", func() bool { return st.sinkRows.Load() == 220 })
	want := []string{"job=j1 operator=sink 68", "job=j2 operator=sink 4"}
	if got := lateSeries(t, h); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("series:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// The tasks end and, once a heartbeat reported it, are forgotten: the
	// counts stay while the jobs are active.
	for _, id := range ids {
		h.cancelTask(t, id)
	}
	waitFor(t, "the ended tasks to be forgotten", func() bool {
		h.tm.mu.Lock()
		defer h.tm.mu.Unlock()
		return len(h.tm.mu.tasks) == 0
	})
	if got := lateSeries(t, h); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("series once the tasks are forgotten:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	jm.SetActive("j2")
	waitFor(t, "j1's series to end with the job", func() bool {
		return strings.Join(lateSeries(t, h), "\n") == "job=j2 operator=sink 4"
	})
}
