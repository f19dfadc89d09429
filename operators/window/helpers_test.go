package window

import (
	"context"
	"fmt"
	"testing"

	"github.com/weirstream/weir/dataflow/dataflowtest"
	"github.com/weirstream/weir/stream"
)

// event is one thing a recorder saw: a batch or a watermark.
type event struct {
	isWM  bool
	wm    int64
	rows  [][]any
	times []int64
	// For batches from a window: the window's input watermark when the batch
	// was emitted, the one before it, and whether it was emitted while
	// processing a watermark (rather than a batch).
	inWM, prevWM int64
	onWM         bool
}

// recorder is a stream.Collector that records batches (as rows) and
// watermarks in order, and checks the Collector contract as it goes.
type recorder struct {
	t      testing.TB
	events []event
	lastWM int64
	// side holds the rows of side output LateOutput, each with its event
	// time, formatted as fmt.Sprint of its values.
	side []string
	// ctx is filled in by a chain to describe the window's input.
	ctx *chain
}

func newRecorder(t testing.TB) *recorder { return &recorder{t: t, lastWM: stream.MinWatermark} }

func (r *recorder) Collect(b *stream.Batch) {
	r.t.Helper()
	if err := b.Validate(); err != nil {
		r.t.Fatalf("collected an invalid batch: %v", err)
	}
	e := event{times: append([]int64(nil), b.Times...)}
	for i := 0; i < b.Len(); i++ {
		e.rows = append(e.rows, b.Row(i))
	}
	if r.ctx != nil {
		e.inWM, e.prevWM, e.onWM = r.ctx.wm, r.ctx.prevWM, r.ctx.inWatermark
	}
	r.events = append(r.events, e)
	b.Release()
}

// CollectSide implements stream.SideOutputCollector for LateOutput.
func (r *recorder) CollectSide(name string, b *stream.Batch) bool {
	r.t.Helper()
	defer b.Release()
	if name != LateOutput {
		r.t.Fatalf("batch for side output %q", name)
	}
	if err := b.Validate(); err != nil {
		r.t.Fatalf("collected an invalid side batch: %v", err)
	}
	tsCol := b.Schema.Index("ts")
	for i := range b.Len() {
		row := b.Row(i)
		if tsCol >= 0 && b.Times[i] != row[tsCol] {
			r.t.Fatalf("late row %v has event time %d, want its ts %v", row, b.Times[i], row[tsCol])
		}
		r.side = append(r.side, fmt.Sprint(row...))
	}
	return true
}

func (r *recorder) EmitWatermark(wm int64) {
	r.t.Helper()
	if wm < r.lastWM {
		r.t.Fatalf("watermark went back from %d to %d", r.lastWM, wm)
	}
	r.lastWM = wm
	r.events = append(r.events, event{isWM: true, wm: wm})
}

// rows returns every row collected, in order.
func (r *recorder) rows() [][]any {
	var out [][]any
	for _, e := range r.events {
		out = append(out, e.rows...)
	}
	return out
}

// watermarks returns the watermarks collected, in order.
func (r *recorder) watermarks() []int64 {
	var out []int64
	for _, e := range r.events {
		if e.isWM {
			out = append(out, e.wm)
		}
	}
	return out
}

// chain is the collector of an upstream operator that feeds a downstream
// operator the way the task runtime does: batches go to ProcessBatch, and
// watermarks to ProcessWatermark only when they advance.
type chain struct {
	t           testing.TB
	next        stream.Operator
	out         *recorder
	wm, prevWM  int64
	inWatermark bool
}

func newChain(t testing.TB, next stream.Operator, out *recorder) *chain {
	c := &chain{t: t, next: next, out: out, wm: stream.MinWatermark, prevWM: stream.MinWatermark}
	out.ctx = c
	return c
}

func (c *chain) Collect(b *stream.Batch) {
	c.t.Helper()
	if err := c.next.ProcessBatch(0, b, c.out); err != nil {
		c.t.Fatalf("ProcessBatch: %v", err)
	}
}

func (c *chain) EmitWatermark(wm int64) {
	c.t.Helper()
	if wm <= c.wm {
		return
	}
	c.prevWM, c.wm = c.wm, wm
	c.inWatermark = true
	defer func() { c.inWatermark = false }()
	if err := c.next.ProcessWatermark(wm, c.out); err != nil {
		c.t.Fatalf("ProcessWatermark: %v", err)
	}
}

// openOp opens op for one input of schema in keyed by keys (nil: not keyed),
// with the output schema that plan returns, its keyed state on the heap.
func openOp(t testing.TB, op stream.Operator, plan func(*stream.PlanContext) (*stream.Schema, error), config []byte, in *stream.Schema, keys []string) *stream.Schema {
	t.Helper()
	out, _ := openOpOn(t, op, plan, config, in, keys, stream.StateBackendHeap, 0, nil)
	return out
}

// openOpOn is openOp on the named state backend, restoring snap (taken at
// checkpoint id) if it is not nil. It returns the harness that holds op's
// state; the test's clean-up closes it.
func openOpOn(t testing.TB, op stream.Operator, plan func(*stream.PlanContext) (*stream.Schema, error), config []byte, in *stream.Schema, keys []string,
	backend string, id int64, snap *stream.OperatorSnapshot) (*stream.Schema, *dataflowtest.Harness) {
	return openOpFull(t, op, plan, config, in, keys, backend, false, id, snap)
}

// pebbleSpill names, to openOpOn, the Pebble backend with so little state
// cache (spillCacheBytes) that a window keeps only a few keys resident and
// spills the others to Pebble all the time.
const (
	pebbleSpill     = "pebble-spill"
	spillCacheBytes = 2 << 10
)

// openOpFull is openOpOn, with full (not incremental) snapshots on Pebble
// if fullSnapshots is set, so that they restore on the heap too.
func openOpFull(t testing.TB, op stream.Operator, plan func(*stream.PlanContext) (*stream.Schema, error), config []byte, in *stream.Schema, keys []string,
	backend string, fullSnapshots bool, id int64, snap *stream.OperatorSnapshot) (*stream.Schema, *dataflowtest.Harness) {
	t.Helper()
	return openOpClock(t, op, plan, config, in, keys, backend, fullSnapshots, nil, id, snap)
}

// openOpClock is openOpFull with the task's clock set to clock (nil: the
// wall clock).
func openOpClock(t testing.TB, op stream.Operator, plan func(*stream.PlanContext) (*stream.Schema, error), config []byte, in *stream.Schema, keys []string,
	backend string, fullSnapshots bool, clock func() int64, id int64, snap *stream.OperatorSnapshot) (*stream.Schema, *dataflowtest.Harness) {
	t.Helper()
	out, err := plan(&stream.PlanContext{UID: "op", Config: config, Inputs: []stream.PlanInput{{Schema: in, KeyFields: keys}}, Parallelism: 1})
	if err != nil {
		t.Fatalf("Plan: %v", err)
	}
	var cacheBytes int64
	if backend == pebbleSpill {
		backend, cacheBytes = stream.StateBackendPebble, spillCacheBytes
	}
	octx := &stream.OperatorContext{
		StateCacheBytes: cacheBytes,
		JobID:           "job", TaskName: "op (1/1)", OperatorUID: "op", Parallelism: 1,
		MaxParallelism: stream.DefaultMaxParallelism, KeyGroups: stream.KeyGroupRange{Start: 0, End: stream.DefaultMaxParallelism - 1},
		InputSchemas: []*stream.Schema{in}, InputKeys: [][]string{keys}, OutputSchema: out, Config: config,
		StateBackend: backend, LocalStateDir: t.TempDir(), FullSnapshots: fullSnapshots, Clock: clock,
	}
	h, err := dataflowtest.Open(context.Background(), op, octx, id, snap)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := h.Close(true); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return out, h
}

// batchOf builds a batch of schema from rows.
func batchOf(schema *stream.Schema, rows ...[]any) *stream.Batch {
	b := stream.NewBatch(schema, len(rows))
	for _, r := range rows {
		b.AppendRow(r...)
	}
	return b
}

func fmtRows(rows [][]any) string {
	s := ""
	for _, r := range rows {
		s += fmt.Sprintln(r...)
	}
	return s
}

// keysWithState counts the keys that have panes in w's state.
func keysWithState(w *Window) int {
	n := 0
	w.slots.Flush() // resident keys are written back as for a snapshot
	kg := w.b.KeyGroups()
	for g := kg.Start; g <= kg.End; g++ {
		w.b.Keys(panesTable, g, func([]byte) bool { n++; return true })
	}
	return n
}
