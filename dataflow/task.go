package dataflow

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weirstream/weir/dataflow/batchcodec"
	"github.com/weirstream/weir/statebackend/backends"
	"github.com/weirstream/weir/stream"
)

// ChainedOperator is one operator of a task's chain.
type ChainedOperator struct {
	Vertex *stream.Vertex
	// InputSchemas has one schema per input of the operator (the head's
	// inputs arrive through the task's input gates; a chained operator has
	// one input, the previous operator's output).
	InputSchemas []*stream.Schema
	// InputKeys holds the key fields of inputs that arrive over a hash edge,
	// else nil.
	InputKeys [][]string
}

// InputGate is one edge into the head operator: the task reads one channel
// from each upstream subtask (only from its own-index subtask on a Forward
// edge).
type InputGate struct {
	Input               int // the head operator's input number
	UpstreamVertex      int // the vertex id at the edge's upstream end
	UpstreamParallelism int
	Partitioning        stream.Partitioning
}

// Output is one edge out of the last operator of the chain.
type Output struct {
	// SideOutput names the last operator's output the edge reads: "" is
	// its main output, anything else one of its vertex's SideOutSchemas.
	// Only the last operator's outputs leave the task, so a side output of
	// an operator earlier in the chain has no reader.
	SideOutput            string
	DownstreamVertex      int // the vertex id at the edge's downstream end
	DownstreamInput       int
	DownstreamParallelism int
	Partitioning          stream.Partitioning
	// KeyFields are the key of a Hash edge, fields of the schema of the
	// output the edge reads.
	KeyFields []string
	// Targets has the exchange address of the taskmanager running each
	// downstream subtask, indexed by subtask.
	Targets []string
}

// TaskSpec describes one subtask to run.
type TaskSpec struct {
	JobID   string
	Attempt int64
	// VertexID is the vertex id of the chain's head.
	VertexID       int
	Subtask        int
	Parallelism    int
	MaxParallelism int // default stream.DefaultMaxParallelism
	// TaskName is for logs and errors; default "<head name> (<subtask+1>/<parallelism>)".
	TaskName string
	// Chain lists the operators, head first; each after the first consumes
	// the previous one's output directly.
	Chain   []ChainedOperator
	Inputs  []InputGate
	Outputs []Output

	// Checkpointing turns barrier checkpoints on, in Mode (default
	// stream.ExactlyOnce). Hooks receive the snapshots and must be set when
	// Checkpointing is.
	Checkpointing bool
	Mode          stream.CheckpointMode
	Hooks         CheckpointHooks
	// AlignedCheckpointTimeout, when positive, switches a checkpoint (not
	// a savepoint) that has aligned at this task for longer than it, from
	// its first barrier, to unaligned: the task snapshots, forwards an
	// unaligned barrier, and keeps the batches still ahead of the missing
	// barriers as channel state (stream.CheckpointConfig
	// AlignedCheckpointTimeout). ExactlyOnce only; 0: never switch.
	AlignedCheckpointTimeout time.Duration
	// CommitGuard, when set, is asked before a checkpoint completion is
	// delivered to the chain's operators (where two-phase-commit sinks
	// commit); an error drops the notification, logged, and the task runs
	// on. The taskmanager refuses commits of tasks deployed by a
	// jobmanager that has since been deposed (fencing). Called on the
	// task goroutine.
	CommitGuard func(checkpointID int64) error
	// StateRestored, when set, is called on the task goroutine once the
	// chain's state is in place — keyed state opened (a Pebble backend
	// replays its changelog then, streaming it from storage), operators
	// opened, operator and channel state restored — before the first
	// record is processed. Not called if the task fails or is cancelled
	// before.
	StateRestored func()
	// RestoreCheckpointID is the checkpoint the task starts from; 0 is a
	// fresh start.
	RestoreCheckpointID int64
	// RestoreJobID is the job that took that checkpoint: JobID after an
	// ordinary failover, another job when this one was submitted from that
	// job's checkpoint. It is passed to the operators
	// (stream.OperatorContext.RestoreJobID, before Open, and
	// stream.RestoreContext.JobID), so it must be set before NewTask, even
	// when the state itself (Restore, RestoreCheckpointID) is filled in
	// later. Empty with a RestoreCheckpointID set at NewTask means JobID;
	// empty otherwise means a fresh start.
	RestoreJobID string
	// Restore holds, by operator uid, the state to load (already fetched,
	// verified and filtered to this subtask by the taskmanager). An operator
	// without an entry starts empty.
	Restore map[string]*stream.OperatorSnapshot
	// RestoreFinished says the task had finished as of the restored
	// checkpoint: its operators start empty (Restore is ignored) and a
	// source behaves as exhausted, so that its input is not produced twice.
	RestoreFinished bool
	// StateBackend, FullSnapshots, LocalStateDir, StateCacheBytes and
	// StateCache are passed to operators in stream.OperatorContext.
	StateBackend    string
	FullSnapshots   bool
	LocalStateDir   string
	StateCacheBytes int64
	StateCache      any
	// Paths confines the files operators may read and write
	// (OperatorContext.Paths); nil allows every path.
	Paths *stream.PathPolicy
	// Clock returns the processing time in Unix milliseconds, against
	// which the processing-time timers of the chain's operators fire
	// (stream.ProcessingTimeAware); operators read it through
	// stream.OperatorContext.ProcessingTime. It is called on the task
	// goroutine only. Default: the wall clock. Between timers the task
	// sleeps for as long as Clock says the earliest one is away, so with a
	// clock that runs ahead of the wall clock (a test's manual clock) a
	// timer fires when that sleep ends, or earlier if the earliest timer
	// changes.
	Clock func() int64
}

// Metrics are a task's counters; they may be read while the task runs.
type Metrics struct {
	// RecordsIn counts rows entering the chain: rows the head takes from its
	// input gates or, for a source task, rows the source emits.
	RecordsIn atomic.Int64
	// RecordsOut counts rows the last operator emits to its main output
	// and to side outputs that something reads. Rows a source emits to
	// side outputs count in RecordsIn too.
	RecordsOut atomic.Int64
	// NetworkBufferedBytes is the network memory the task holds: the
	// bytes of batches from other taskmanagers waiting in its input
	// buffers (part of ExchangeStats.BufferedBytes).
	NetworkBufferedBytes atomic.Int64
	// Watermark is the task's current event-time watermark (Unix ms): the
	// latest one its inputs combined to, or its chain emitted;
	// stream.MinWatermark until there is one.
	Watermark atomic.Int64

	// backpressure is the time the task waited for credit to send a batch
	// (BackpressuredTime); idle the time it waited for input (IdleTime).
	backpressure, idle meter
	// run is the time Run ran: from its start to its end (zero: not
	// started, not ended).
	run struct {
		sync.Mutex
		start, end time.Time
	}
}

// meter accumulates the time spent in one kind of wait: the waits that
// ended, and the start of the one in progress (zero when none).
type meter struct {
	sync.Mutex
	total time.Duration
	since time.Time
}

func (m *meter) read() time.Duration {
	m.Lock()
	defer m.Unlock()
	d := m.total
	if !m.since.IsZero() {
		d += time.Since(m.since)
	}
	return d
}

// active reports whether a wait is in progress.
func (m *meter) active() bool {
	m.Lock()
	defer m.Unlock()
	return !m.since.IsZero()
}

func (m *meter) start() {
	m.Lock()
	m.since = time.Now()
	m.Unlock()
}

func (m *meter) end() {
	m.Lock()
	if !m.since.IsZero() {
		m.total += time.Since(m.since)
		m.since = time.Time{}
	}
	m.Unlock()
}

// BackpressuredTime returns how long the task has waited so far for its
// consumers to grant credit for a batch: the time its output was blocked
// because a downstream input buffer was full, the wait in progress
// included. It never decreases. Safe for concurrent use.
func (m *Metrics) BackpressuredTime() time.Duration { return m.backpressure.read() }

// backpressured reports whether the task waits for credit now: a task
// blocked sending a batch, or a source whose deferred channels hold
// batches that wait for credit. Safe for concurrent use.
func (m *Metrics) backpressured() bool { return m.backpressure.active() }

// IdleTime returns how long the task has waited so far for something to
// do: for input to arrive in its buffers (a task with inputs), for its
// idle source's next poll, or for the outcome of its final checkpoint; the
// wait in progress included. It never decreases. Safe for concurrent use.
func (m *Metrics) IdleTime() time.Duration { return m.idle.read() }

// BusyTime returns how long the task has worked so far: the time Run has
// run (until it returned), less IdleTime and BackpressuredTime. It grows
// only while the task works. Safe for concurrent use.
func (m *Metrics) BusyTime() time.Duration {
	m.run.Lock()
	start, end := m.run.start, m.run.end
	m.run.Unlock()
	if start.IsZero() {
		return 0
	}
	if end.IsZero() {
		end = time.Now()
	}
	return max(end.Sub(start)-m.IdleTime()-m.BackpressuredTime(), 0)
}

// startBackpressure and endBackpressure bracket one wait for credit (task
// goroutine only; waits do not nest).
func (m *Metrics) startBackpressure() { m.backpressure.start() }
func (m *Metrics) endBackpressure()   { m.backpressure.end() }

// startIdle and endIdle bracket one wait for work (task goroutine only;
// waits do not nest, nor overlap a wait for credit).
func (m *Metrics) startIdle() { m.idle.start() }
func (m *Metrics) endIdle()   { m.idle.end() }

// Task runs one subtask: the chain of operators, its input gates and its
// outputs. Build it with NewTask and call Run once.
type Task struct {
	spec    *TaskSpec
	name    string
	maxPar  int
	x       *Exchange
	log     *slog.Logger
	chain   []chainLink
	keys    [][]int // key columns per output (Hash outputs)
	metrics Metrics
	started atomic.Bool
	mode    stream.CheckpointMode // resolved from the spec
	// checkpointed counts the chain's operators that implement
	// stream.Checkpointed or have runtime-owned keyed state.
	checkpointed int
	ctl          taskControl
	// awaitingFinal is set while the task waits for the outcome of its final
	// checkpoint; for tests.
	awaitingFinal atomic.Bool
	// clock is the spec's Clock or the wall clock; ptDue is set when the
	// task is to read it again for processing-time timers
	// (wakeProcessingTime).
	clock func() int64
	ptDue atomic.Bool
	// deferred: the task's output channels are deferred
	// (outputChannel.deferred): at ExactlyOnce source tasks, so that they
	// take triggers while their output is backpressured
	// (TriggerUnalignedCheckpoint).
	deferred bool
	// channelState is the source's channel state restored from the
	// checkpoint, by list-state name (outputWriter.replay).
	channelState map[string][][]byte
}

// chainLink is one operator instance of the chain.
type chainLink struct {
	uid  string
	v    *stream.Vertex
	src  stream.Source // head of a source task
	op   stream.Operator
	octx *stream.OperatorContext
	cp   stream.Checkpointed       // src or op, when it keeps state
	cl   stream.CheckpointListener // src or op, when it listens
	// keyed is set for an operator whose keyed state the runtime owns
	// (stream.KeyedStateful); state is its backend while the task runs.
	keyed bool
	state *backends.Managed
}

// NewTask validates spec and builds the chain's operator instances from the
// types in reg. It has no other side effects; nothing is opened or
// registered until Run.
func NewTask(spec *TaskSpec, reg *stream.Registry, ex *Exchange, logger *slog.Logger) (*Task, error) {
	if spec == nil || reg == nil || ex == nil {
		return nil, errors.New("dataflow: NewTask needs a spec, a registry and an exchange")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	t := &Task{spec: spec, x: ex, maxPar: spec.MaxParallelism, mode: spec.Mode, clock: spec.Clock}
	if t.clock == nil {
		t.clock = wallClock
	}
	if t.maxPar == 0 {
		t.maxPar = stream.DefaultMaxParallelism
	}
	if t.mode == 0 && spec.Checkpointing {
		t.mode = stream.ExactlyOnce
	}
	t.ctl.wake = make(chan struct{}, 1)
	t.metrics.Watermark.Store(stream.MinWatermark)
	t.deferred = spec.Checkpointing && t.mode == stream.ExactlyOnce && len(spec.Inputs) == 0
	if err := t.validate(); err != nil {
		return nil, err
	}
	t.log = logger.With("task", t.name, "job", spec.JobID, "attempt", spec.Attempt)
	kg := stream.KeyGroupRangeFor(t.maxPar, spec.Parallelism, spec.Subtask)
	restoreJob := spec.RestoreJobID
	if restoreJob == "" && spec.RestoreCheckpointID != 0 {
		restoreJob = spec.JobID
	}
	for i, co := range spec.Chain {
		v := co.Vertex
		isSource := i == 0 && len(spec.Inputs) == 0
		typ, ok := reg.Lookup(v.Type, isSource)
		if !ok {
			what := "operator"
			if isSource {
				what = "source"
			}
			return nil, fmt.Errorf("dataflow: task %s: operator %q: no %s type %q is registered in this taskmanager; build it with the package that registers %q", t.name, v.UID, what, v.Type, v.Type)
		}
		link := chainLink{uid: v.UID, v: v, octx: &stream.OperatorContext{
			JobID:          spec.JobID,
			TaskName:       t.name,
			OperatorUID:    v.UID,
			Subtask:        spec.Subtask,
			Parallelism:    spec.Parallelism,
			MaxParallelism: t.maxPar,
			KeyGroups:      kg,
			InputSchemas:   co.InputSchemas,
			InputKeys:      co.InputKeys,
			OutputSchema:   v.OutSchema,
			Config:         v.Config,
			Logger:         t.log.With("operator", v.UID),
			Attempt:        spec.Attempt,
			RestoreJobID:   restoreJob,
			Checkpointing:  spec.Checkpointing,
			CheckpointMode: t.mode,
			StateBackend:   spec.StateBackend,
			FullSnapshots:  spec.FullSnapshots,
			LocalStateDir:  spec.LocalStateDir,
			// Every operator of the chain may open a backend; the
			// caches of one task share its slot's budget.
			StateCacheBytes: spec.StateCacheBytes,
			StateCache:      spec.StateCache,
			Paths:           spec.Paths,
			// Shared with the vertex, which nothing modifies once planned.
			SideOutputSchemas: v.SideOutSchemas,
			Clock:             t.clock,
		}}
		var err error
		switch {
		case isSource && typ.Kind == stream.KindSource:
			err = t.guard(&link, "NewSource", func() (err error) {
				link.src, err = typ.NewSource(v.Config)
				return err
			})
		case !isSource && typ.Kind != stream.KindSource:
			if i == 0 && len(co.InputSchemas) < typ.Inputs {
				err = fmt.Errorf("type %q takes %d inputs, the chain gives schemas for %d", v.Type, typ.Inputs, len(co.InputSchemas))
			}
			if i > 0 && typ.Inputs != 1 {
				err = fmt.Errorf("type %q takes %d inputs; only one-input operators can be chained after the head", v.Type, typ.Inputs)
			}
			if i == 0 && len(spec.Inputs) > 0 {
				if err2 := t.checkInputsCovered(typ.Inputs); err2 != nil && err == nil {
					err = err2
				}
			}
			if err == nil {
				err = t.guard(&link, "NewOperator", func() (err error) {
					link.op, err = typ.NewOperator(v.Config)
					return err
				})
			}
		default:
			err = fmt.Errorf("type %q is a %v, which cannot run at position %d of a chain", v.Type, typ.Kind, i)
		}
		if err != nil {
			return nil, fmt.Errorf("dataflow: task %s: operator %q: %w", t.name, v.UID, err)
		}
		var inst any = link.op
		if link.src != nil {
			inst = link.src
		}
		link.cp, _ = inst.(stream.Checkpointed)
		link.cl, _ = inst.(stream.CheckpointListener)
		if ks, ok := inst.(stream.KeyedStateful); ok {
			err = t.guard(&link, "UsesKeyedState", func() error {
				link.keyed = ks.UsesKeyedState()
				return nil
			})
			if err != nil {
				return nil, fmt.Errorf("dataflow: task %s: operator %q: %w", t.name, v.UID, err)
			}
		}
		if link.cp != nil || link.keyed {
			t.checkpointed++
		}
		t.chain = append(t.chain, link)
	}
	return t, nil
}

func (t *Task) validate() error {
	s := t.spec
	if len(s.Chain) == 0 {
		return errors.New("dataflow: task spec has no operators")
	}
	for i, co := range s.Chain {
		if co.Vertex == nil {
			return fmt.Errorf("dataflow: task spec: chain position %d has no vertex", i)
		}
	}
	head := s.Chain[0].Vertex
	t.name = s.TaskName
	if t.name == "" {
		name := head.Name
		if name == "" {
			name = head.UID
		}
		t.name = fmt.Sprintf("%s (%d/%d)", name, s.Subtask+1, s.Parallelism)
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("dataflow: task %s: %s", t.name, fmt.Sprintf(format, args...))
	}
	switch {
	case s.Checkpointing && s.Hooks == nil:
		return bad("checkpointing is on but the spec has no Hooks to receive snapshots")
	case s.Mode != 0 && s.Mode != stream.ExactlyOnce && s.Mode != stream.AtLeastOnce:
		return bad("invalid checkpoint mode %d", s.Mode)
	case s.RestoreCheckpointID < 0:
		return bad("RestoreCheckpointID %d is negative", s.RestoreCheckpointID)
	case s.AlignedCheckpointTimeout < 0:
		return bad("AlignedCheckpointTimeout %v is negative; use 0 for no switch to unaligned", s.AlignedCheckpointTimeout)
	case s.RestoreCheckpointID == 0 && len(s.Restore) > 0:
		return bad("the spec has state to restore but no RestoreCheckpointID; set the id of the checkpoint it comes from")
	}
	if head.ID != s.VertexID {
		return bad("VertexID %d is not the id of the chain's head vertex %q (%d)", s.VertexID, head.UID, head.ID)
	}
	if s.Parallelism < 1 || s.Subtask < 0 || s.Subtask >= s.Parallelism {
		return bad("subtask %d of parallelism %d is out of range", s.Subtask, s.Parallelism)
	}
	if t.maxPar < s.Parallelism {
		return bad("parallelism %d exceeds maxParallelism %d", s.Parallelism, t.maxPar)
	}
	for i, g := range s.Inputs {
		if g.Input < 0 || g.Input >= len(s.Chain[0].InputSchemas) || s.Chain[0].InputSchemas[g.Input] == nil {
			return bad("input gate %d reads input %d, for which the head operator %q has no input schema", i, g.Input, head.UID)
		}
		if g.UpstreamParallelism < 1 {
			return bad("input gate %d: upstream parallelism %d must be at least 1", i, g.UpstreamParallelism)
		}
		switch g.Partitioning {
		case stream.Forward:
			if g.UpstreamParallelism != s.Parallelism {
				return bad("input gate %d is forward, but upstream parallelism %d differs from %d", i, g.UpstreamParallelism, s.Parallelism)
			}
		case stream.Hash, stream.Rebalance, stream.Broadcast:
		default:
			return bad("input gate %d has invalid partitioning %d", i, g.Partitioning)
		}
	}
	tail := s.Chain[len(s.Chain)-1].Vertex
	t.keys = make([][]int, len(s.Outputs))
	for i, o := range s.Outputs {
		schema := tail.OutputSchema(o.SideOutput)
		switch {
		case o.SideOutput == "" && schema == nil:
			return bad("operator %q has outputs but no output schema (is it a sink, or was the job not planned?)", tail.UID)
		case schema == nil:
			return bad("output %d to vertex %d reads side output %q, which operator %q does not have (its side outputs: %s); was the job planned?",
				i, o.DownstreamVertex, o.SideOutput, tail.UID, sideOutputNames(tail))
		}
		if o.DownstreamParallelism < 1 || len(o.Targets) != o.DownstreamParallelism {
			return bad("output %d to vertex %d: %d targets for downstream parallelism %d; give one exchange address per downstream subtask", i, o.DownstreamVertex, len(o.Targets), o.DownstreamParallelism)
		}
		switch o.Partitioning {
		case stream.Forward:
			if o.DownstreamParallelism != s.Parallelism {
				return bad("output %d is forward, but downstream parallelism %d differs from %d", i, o.DownstreamParallelism, s.Parallelism)
			}
		case stream.Hash:
			if len(o.KeyFields) == 0 {
				return bad("output %d is hash-partitioned but has no key fields", i)
			}
			idx, err := schema.Lookup(o.KeyFields...)
			if err != nil {
				return bad("output %d key: %v", i, err)
			}
			t.keys[i] = idx
		case stream.Rebalance, stream.Broadcast:
		default:
			return bad("output %d has invalid partitioning %d", i, o.Partitioning)
		}
		for j, addr := range o.Targets {
			if addr == "" && (o.Partitioning != stream.Forward || j == s.Subtask) {
				return bad("output %d: no exchange address for downstream subtask %d", i, j)
			}
		}
	}
	return nil
}

func (t *Task) checkInputsCovered(inputs int) error {
	seen := make([]bool, inputs)
	for _, g := range t.spec.Inputs {
		if g.Input >= inputs {
			return fmt.Errorf("input gate reads input %d; the operator has %d inputs", g.Input, inputs)
		}
		seen[g.Input] = true
	}
	for i, ok := range seen {
		if !ok {
			return fmt.Errorf("input %d has no input gate", i)
		}
	}
	return nil
}

// OperatorInstance is one operator of a task's chain.
type OperatorInstance struct {
	UID string
	// Instance is the stream.Source or stream.Operator. Other goroutines
	// than the task's may call only the methods its type documents as safe
	// for concurrent use, such as stream.LateRecordsCounter's.
	Instance any
}

// Operators returns the operators of the task's chain, head first, for
// reading capabilities such as stream.LateRecordsCounter while the task
// runs. It may be called from any goroutine at any time.
func (t *Task) Operators() []OperatorInstance {
	out := make([]OperatorInstance, len(t.chain))
	for i := range t.chain {
		l := &t.chain[i]
		out[i] = OperatorInstance{UID: l.uid, Instance: l.op}
		if l.src != nil {
			out[i].Instance = l.src
		}
	}
	return out
}

// Name returns the task's name as used in logs and errors.
func (t *Task) Name() string { return t.name }

// Metrics returns the task's counters.
func (t *Task) Metrics() *Metrics { return &t.metrics }

// taskRun is the state of one Run call (task goroutine only).
type taskRun struct {
	t   *Task
	w   *outputWriter
	err error // first failure inside a collector; ends the run
	ck  checkpointRun
	pt  procTimers
	// sourceOut is the collector a source task's source emits into (nil
	// at other tasks).
	sourceOut stream.Collector
}

func (r *taskRun) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

func (t *Task) opErr(uid string, err error) error {
	return fmt.Errorf("task %s: operator %q: %w", t.name, uid, err)
}

// link is the collector of a chained operator: it calls the next operator.
// Side outputs of the operator have no reader (only the last operator's
// outputs leave the task), so CollectSide drops them.
type link struct {
	r    *taskRun
	from *chainLink
	next *chainLink
	out  stream.Collector
}

var _ stream.SideOutputCollector = (*link)(nil)

func (l *link) CollectSide(name string, b *stream.Batch) bool {
	if l.r.err == nil {
		if err := checkSideOutput(l.from.v, name, b); err != nil {
			l.r.fail(l.r.t.opErr(l.from.uid, err))
		}
	}
	b.Release()
	return false
}

func (l *link) Collect(b *stream.Batch) {
	if l.r.err != nil {
		b.Release()
		return
	}
	if err := l.r.t.processBatch(l.next, 0, b, l.out); err != nil {
		l.r.fail(l.r.t.opErr(l.next.uid, err))
	}
}

func (l *link) EmitWatermark(wm int64) {
	if l.r.err != nil {
		return
	}
	if err := l.r.t.processWatermark(l.next, wm, l.out); err != nil {
		l.r.fail(l.r.t.opErr(l.next.uid, err))
	}
}

// countingCollector counts the rows a source emits.
type countingCollector struct {
	n    *atomic.Int64
	next stream.Collector
}

var _ stream.SideOutputCollector = (*countingCollector)(nil)

func (c *countingCollector) Collect(b *stream.Batch) {
	c.n.Add(int64(b.Len()))
	c.next.Collect(b)
}

func (c *countingCollector) CollectSide(name string, b *stream.Batch) bool {
	c.n.Add(int64(b.Len()))
	return stream.CollectSide(c.next, name, b)
}

func (c *countingCollector) EmitWatermark(wm int64) { c.next.EmitWatermark(wm) }

// Run runs the task until its input ends (it returns nil: the task
// FINISHED), ctx is cancelled (it returns ctx.Err()), or an operator or the
// exchange fails (it returns that error, naming the task and operator). An
// operator or source that panics fails the task the same way, with an error
// wrapping ErrOperatorPanic; the panic does not reach the caller. It
// registers the task's channels with the exchange, opens the operators, and
// on every exit path closes the operators (those it opened) and unregisters
// the channels. Run may be called once.
func (t *Task) Run(ctx context.Context) (err error) {
	if !t.started.CompareAndSwap(false, true) {
		return fmt.Errorf("dataflow: task %s: Run called twice; build a new Task to run again", t.name)
	}
	defer func() {
		if err != nil && ctx.Err() != nil {
			err = ctx.Err()
		}
	}()
	// A panic of the runtime's own code while the task opens or closes
	// fails the task rather than the process (Task.process catches one in
	// the main loop, before the cleanup below runs).
	defer t.recoverRuntime(&err)
	r := &taskRun{t: t}
	t.metrics.run.Lock()
	t.metrics.run.start = time.Now()
	t.metrics.run.Unlock()
	defer func() {
		t.metrics.run.Lock()
		t.metrics.run.end = time.Now()
		t.metrics.run.Unlock()
	}()
	r.ck.on, r.ck.hooks = t.spec.Checkpointing, t.spec.Hooks
	t.ctl.mu.Lock()
	t.ctl.mu.state = ctlRunning
	t.ctl.mu.Unlock()
	defer r.endControl()

	gate, err := t.openInputs()
	if err != nil {
		return err
	}
	defer t.closeInputs(gate)
	r.ck.gate = gate
	if r.ck.on && t.chain[0].src == nil {
		r.ck.align = newAligner(t.mode, len(gate.channels))
	}

	w := &outputWriter{ctx: ctx, r: r, tail: &t.chain[len(t.chain)-1], deferred: t.deferred,
		gated: t.spec.Checkpointing && t.mode == stream.ExactlyOnce && len(t.spec.Inputs) > 0}
	if w.deferred || w.gated {
		w.wake = make(chan struct{}, 1)
	}
	w.linger.timeout = t.x.cfg.CoalesceTimeout
	r.w = w
	finished := false
	defer func() {
		if ferr := t.closeOutputs(ctx, w, finished); ferr != nil && err == nil {
			err = ferr
		}
		w.dropPending()
	}()
	if err := t.openOutputs(w); err != nil {
		return err
	}

	// Collectors from the tail back to the head: outs[i] receives chain[i]'s
	// output.
	outs := make([]stream.Collector, len(t.chain))
	outs[len(outs)-1] = w
	for i := len(t.chain) - 2; i >= 0; i-- {
		outs[i] = &link{r: r, from: &t.chain[i], next: &t.chain[i+1], out: outs[i+1]}
	}

	// Deferred first, so that it runs after the operators' Close below.
	defer func() {
		// After the operators' Close: a finished task's local snapshots
		// are of no more use; a failed or cancelled one keeps them for
		// local recovery.
		if cerr := t.closeKeyedState(finished); cerr != nil && err == nil {
			err = cerr
		}
	}()
	if err := t.openKeyedState(); err != nil {
		return err
	}
	opened := 0
	defer func() {
		for i := opened - 1; i >= 0; i-- {
			l := &t.chain[i]
			cerr := t.guard(l, "Close", func() error {
				if l.src != nil {
					return l.src.Close()
				}
				return l.op.Close()
			})
			if cerr != nil {
				t.log.Warn("closing operator failed", "operator", l.uid, "err", cerr)
				if err == nil {
					err = t.opErr(l.uid, fmt.Errorf("close: %w", cerr))
				}
			}
		}
	}()
	for i := range t.chain {
		l := &t.chain[i]
		opened = i + 1
		oerr := t.guard(l, "Open", func() error {
			if l.src != nil {
				return l.src.Open(ctx, l.octx)
			}
			return l.op.Open(ctx, l.octx)
		})
		if oerr != nil {
			return t.opErr(l.uid, fmt.Errorf("open: %w", oerr))
		}
	}
	if err := t.restore(); err != nil {
		return err
	}
	if len(t.channelState) > 0 {
		replay := func() error {
			if t.chain[0].src == nil {
				return t.replayInputs(gate, t.channelState)
			}
			return w.replay(t.channelState, t.spec.Parallelism, t.outputSchema)
		}
		if err := replay(); err != nil {
			return fmt.Errorf("task %s: restore from checkpoint %d: %w", t.name, t.spec.RestoreCheckpointID, err)
		}
		t.channelState = nil
	}
	if t.spec.StateRestored != nil {
		t.spec.StateRestored()
	}
	r.initProcessingTime(outs)
	defer r.pt.end()

	if err := t.process(ctx, r, gate, outs); err != nil {
		return err
	}
	finished = true
	return nil
}

// process runs the opened chain until its input ends, then flushes it and
// ends the task's output partitions.
func (t *Task) process(ctx context.Context, r *taskRun, gate *inputGate, outs []stream.Collector) (err error) {
	// Operators' panics are recovered where they are called; this catches
	// one of the runtime's own code, and logs it before Run's cleanup runs
	// (a cleanup that hung on what the panic left behind would otherwise
	// hide it).
	defer t.recoverRuntime(&err)
	if t.chain[0].src != nil {
		err = t.runSource(ctx, r, outs)
	} else {
		err = t.runInputs(ctx, r, gate, outs)
	}
	if err != nil {
		return err
	}
	r.endControl()
	// Every input ended: flush the chain, then end the partitions.
	for i := range t.chain {
		l := &t.chain[i]
		if l.src != nil {
			continue
		}
		if ferr := t.guard(l, "Finish", func() error { return l.op.Finish(outs[i]) }); ferr != nil {
			return t.opErr(l.uid, fmt.Errorf("finish: %w", ferr))
		}
		if r.err != nil {
			return r.err
		}
	}
	r.w.broadcast(event{kind: eventEndOfPartition})
	if r.err == nil && r.w.deferred {
		return r.pumpOutput(ctx, nil)
	}
	return r.err
}

const (
	minIdleWait = 200 * time.Microsecond
	maxIdleWait = 5 * time.Millisecond
	// maxHintedWait bounds the wait a stream.IdleHinter asks for.
	maxHintedWait = time.Second
)

func (t *Task) runSource(ctx context.Context, r *taskRun, outs []stream.Collector) error {
	head := &t.chain[0]
	out := &countingCollector{n: &t.metrics.RecordsIn, next: outs[0]}
	r.sourceOut = out
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	wait := minIdleWait
	runnable := []metrics.Sample{{Name: runnableMetric}}
	busy := false // the last poll emitted
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		// Triggers and notifications, and processing-time timers, between
		// two Poll calls.
		select {
		case <-t.ctl.wake:
			if err := r.control(); err != nil {
				return err
			}
		default:
		}
		if r.ck.drainedAt > 0 {
			return r.waitDrained(ctx)
		}
		if err := r.processingTime(); err != nil {
			return err
		}
		if r.w.lingerDue() {
			if err := r.w.flushLinger(); err != nil {
				return fmt.Errorf("task %s: %w", t.name, err)
			}
		}
		if r.w.deferred {
			// The previous Poll's output goes before the next Poll.
			if err := r.pumpOutput(ctx, nil); err != nil {
				return err
			}
			if r.ck.drainedAt > 0 {
				return r.waitDrained(ctx)
			}
		}
		st := stream.PollEnd // a source that had finished before the restored checkpoint
		if !t.spec.RestoreFinished {
			var err error
			if st, err = t.poll(ctx, head, out); err != nil {
				return t.opErr(head.uid, err)
			}
		}
		if r.err != nil {
			return r.err
		}
		switch st {
		case stream.PollEmitted:
			wait = minIdleWait
			if busy { // it read twice in a row: it has more
				yieldIfOthersWait(runnable)
			}
			busy = true
		case stream.PollIdle:
			busy = false
			if r.w.lingering() {
				// What the output holds to coalesce it goes before the
				// task waits (a deferred output's in the next pump).
				if err := r.w.flushLinger(); err != nil {
					return fmt.Errorf("task %s: %w", t.name, err)
				}
				continue
			}
			d := wait
			if h, ok := head.src.(stream.IdleHinter); ok {
				d = min(max(h.IdleFor(), minIdleWait), maxHintedWait)
			}
			if timer == nil {
				timer = time.NewTimer(d)
			} else {
				timer.Reset(d)
			}
			t.metrics.startIdle()
			select {
			case <-timer.C:
				t.metrics.endIdle()
				wait = min(2*wait, maxIdleWait)
			case <-t.ctl.wake:
				t.metrics.endIdle()
				if err := r.control(); err != nil {
					return err
				}
				if r.ck.drainedAt > 0 {
					return r.waitDrained(ctx)
				}
			case <-ctx.Done():
				t.metrics.endIdle()
				return ctx.Err()
			}
		case stream.PollEnd:
			r.pt.end()
			out.EmitWatermark(stream.MaxWatermark)
			if r.err != nil || !r.ck.on {
				return r.err
			}
			// The final checkpoint: wait for a checkpoint taken after the
			// end of input to complete, so that two-phase-commit sinks
			// commit everything before the task finishes.
			ck := &r.ck
			ck.inputEnded = true
			if h, ok := t.spec.Hooks.(InputEndedHook); ok {
				h.SourceInputEnded()
			}
			return r.waitFinal(ctx, func() bool { return ck.finalFrom > 0 && ck.lastCompleted >= ck.finalFrom })
		default:
			return t.opErr(head.uid, fmt.Errorf("source returned unknown poll status %d", st))
		}
	}
}

// waitDrained waits, after a trigger drained the source (TriggerDrain),
// for the drain's checkpoint to complete; then the task finishes like a
// source whose input ended. (The outcome of any other checkpoint first
// fails the task in notified.)
func (r *taskRun) waitDrained(ctx context.Context) error {
	ck := &r.ck
	return r.waitFinal(ctx, func() bool { return ck.lastCompleted >= ck.drainedAt })
}

func (t *Task) runInputs(ctx context.Context, r *taskRun, gate *inputGate, outs []stream.Collector) error {
	head := &t.chain[0]
	inputOf := make([]int, len(gate.channels))
	for i, ch := range gate.channels {
		inputOf[i] = ch.input
	}
	// Inputs without a gate (none after validation) do not hold the
	// watermark back.
	wms := newWatermarkCombiner(inputOf, len(head.octx.InputSchemas))
	advance := func(ch int, wm int64) error {
		if v, ok := wms.update(ch, wm); ok {
			t.metrics.Watermark.Store(v)
			if err := t.processWatermark(head, v, outs[0]); err != nil {
				return t.opErr(head.uid, err)
			}
		}
		return nil
	}
	open := len(gate.channels)
	handle := func(e event, ch *inputChannel) error {
		var err error
		switch e.kind {
		case eventBatch:
			b := e.batch
			if b == nil {
				b, err = decodePayload(&e, ch.schema, ch.dictionary())
				e.release()
				if err != nil {
					return fmt.Errorf("task %s: channel %v: %w", t.name, ch.key, err)
				}
			}
			t.metrics.RecordsIn.Add(int64(b.Len()))
			if r.ck.un != nil {
				r.recordInput(ch, b)
			}
			if err := t.processBatch(head, ch.input, b, outs[0]); err != nil {
				return t.opErr(head.uid, err)
			}
		case eventWatermark:
			err = advance(ch.idx, e.value)
		case eventEndOfPartition:
			ch.ended = true
			open--
			err = advance(ch.idx, stream.MaxWatermark)
			if err == nil && r.ck.align != nil {
				err = r.onEnd(ch)
			}
			if err == nil && r.ck.un != nil {
				err = r.unalignedEnd(ch)
			}
		case eventBarrier:
			switch {
			case r.ck.align == nil:
			case e.unaligned && t.mode == stream.ExactlyOnce,
				// An aligned barrier of an unaligned checkpoint in
				// progress (from a source whose input ended) arrives
				// like an unaligned one; the batches ahead of it were
				// recorded as the task took them.
				r.ck.un != nil && r.ck.un.id == e.value:
				err = r.onUnalignedBarrier(ch, e.value, e.ts)
			default:
				err = r.onBarrier(ch, e.value, e.ts, e.full, e.final)
			}
		case eventError:
			return fmt.Errorf("task %s: %w", t.name, e.err)
		}
		return err
	}
	// Cells may hold watermarks and barriers from before the task started.
	gate.markAllCells()
	var cells []cellMark
	for open > 0 {
		// Notifications, and processing-time timers, between two events.
		select {
		case <-t.ctl.wake:
			if err := r.control(); err != nil {
				return err
			}
		default:
		}
		if err := r.processingTime(); err != nil {
			return err
		}
		if err := r.alignTimeout(); err != nil {
			return err
		}
		if r.w.gated && r.w.isFull() {
			if err := t.awaitOutput(ctx, r, gate, handle); err != nil {
				return err
			}
			if r.err != nil {
				return r.err
			}
			continue
		}
		if gate.cellsDirty.Load() {
			cells = gate.takeCells(cells)
			// An ended channel is at stream.MaxWatermark in wms, which
			// ignores what its cell holds, and takes no barrier.
			for _, c := range cells {
				if err := advance(c.ch, c.wm); err != nil {
					return err
				}
				if r.err != nil {
					return r.err
				}
				if ch := gate.channels[c.ch]; c.barrier != nil && !ch.ended {
					if err := handle(c.barrier.event(), ch); err != nil {
						return err
					}
					if r.err != nil {
						return r.err
					}
				}
			}
		}
		// What the output holds to coalesce it goes before the task waits.
		if r.w.lingering() && (r.w.lingerDue() || !gate.hasData()) {
			if err := r.w.flushLinger(); err != nil {
				return fmt.Errorf("task %s: %w", t.name, err)
			}
		}
		e, ch, err := gate.next(ctx, t.ctl.wake)
		if err != nil {
			return err
		}
		if ch == nil { // woken for a notification
			if err := r.control(); err != nil {
				return err
			}
			continue
		}
		if ch.ended {
			e.release()
			continue
		}
		if err := handle(e, ch); err != nil {
			return err
		}
		if r.err != nil {
			return r.err
		}
	}
	r.pt.end()
	if !r.ck.on {
		return nil
	}
	// Every channel ended. A snapshot whose outcome is unknown must be
	// settled before Finish, so that a two-phase-commit sink commits it
	// first. On an abort the task finishes anyway: no barrier can arrive on
	// ended channels, so no later checkpoint could include this task.
	ck := &r.ck
	return r.waitFinal(ctx, func() bool { return ck.lastNotified >= ck.lastSnapshot })
}

// awaitOutput is one wait of a gated task whose output cannot take a batch
// (outputWriter.gated): it handles an unaligned barrier at the front of an
// input channel if there is one, else waits for credit, a barrier, a
// notification (handled) or, every pumpInterval, to look for a broken
// network stream under the output. The wait counts as backpressure.
func (t *Task) awaitOutput(ctx context.Context, r *taskRun, gate *inputGate, handle func(event, *inputChannel) error) error {
	if e, ch := gate.takeUnaligned(); ch != nil {
		return handle(e, ch)
	}
	// The channels that can take a batch send what they hold to coalesce
	// it (never waiting: a gated task's channel holds only what it can
	// send at once).
	if err := r.w.flushLinger(); err != nil {
		return fmt.Errorf("task %s: %w", t.name, err)
	}
	m := &t.metrics
	m.startBackpressure()
	defer m.endBackpressure()
	timer := time.NewTimer(pumpInterval)
	defer timer.Stop()
	select {
	case <-r.w.wake:
	case <-gate.notify:
		// Data or an unaligned barrier: the caller looks again. (next
		// finds data without the signal.)
	case <-t.ctl.wake:
		return r.control()
	case <-timer.C:
		if err := r.w.brokenErr(); err != nil {
			return fmt.Errorf("task %s: %w", t.name, err)
		}
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

func (t *Task) channelKey(upVertex, upSubtask, downVertex, downInput, downSubtask int) channelKey {
	return channelKey{
		JobID: t.spec.JobID, Attempt: t.spec.Attempt,
		UpstreamVertex: upVertex, UpstreamSubtask: upSubtask,
		DownstreamVertex: downVertex, DownstreamInput: downInput, DownstreamSub: downSubtask,
	}
}

func (t *Task) openInputs() (*inputGate, error) {
	s := t.spec
	gate := newInputGate()
	gate.buffered = &t.metrics.NetworkBufferedBytes
	gate.idle = &t.metrics
	for _, g := range s.Inputs {
		schema := s.Chain[0].InputSchemas[g.Input]
		for u := 0; u < g.UpstreamParallelism; u++ {
			if g.Partitioning == stream.Forward && u != s.Subtask {
				continue
			}
			gate.add(t.channelKey(g.UpstreamVertex, u, s.VertexID, g.Input, s.Subtask), g.Input, schema)
		}
	}
	for i, ch := range gate.channels {
		if err := t.x.registerInput(ch); err != nil {
			for _, done := range gate.channels[:i] {
				t.x.unregisterInput(done)
			}
			gate.close()
			return nil, fmt.Errorf("task %s: %w", t.name, err)
		}
	}
	return gate, nil
}

func (t *Task) closeInputs(gate *inputGate) {
	for _, ch := range gate.channels {
		t.x.unregisterInput(ch)
	}
	gate.close()
}

func (t *Task) openOutputs(w *outputWriter) error {
	s := t.spec
	tail := s.Chain[len(s.Chain)-1].Vertex
	for i, o := range s.Outputs {
		p := &partitioner{
			kind:   o.Partitioning,
			chans:  make([]*outputChannel, o.DownstreamParallelism),
			own:    s.Subtask,
			next:   s.Subtask % o.DownstreamParallelism,
			keys:   t.keys[i],
			maxPar: t.maxPar,
		}
		if o.Partitioning == stream.Hash {
			p.counts = make([]int32, o.DownstreamParallelism)
			p.subs = make([]*stream.Batch, o.DownstreamParallelism)
			p.cols = make([]*stream.Column, o.DownstreamParallelism)
		}
		w.add(o.SideOutput, p)
		for d, target := range o.Targets {
			if o.Partitioning == stream.Forward && d != s.Subtask {
				continue
			}
			key := t.channelKey(tail.ID, s.Subtask, o.DownstreamVertex, o.DownstreamInput, d)
			var ch *outputChannel
			var err error
			if w.deferred || w.gated {
				ch, err = t.x.openOutputWake(key, target, w.wake)
			} else {
				ch, err = t.x.openOutput(key, target)
			}
			if err != nil {
				return fmt.Errorf("task %s: output to vertex %d subtask %d at %s: %w", t.name, o.DownstreamVertex, d, target, err)
			}
			ch.backpressure = &t.metrics
			ch.deferred = w.deferred
			if ch.conn != nil && t.x.cfg.DictionaryBytes > 0 && hasStrings(t.outputSchema(i)) {
				ch.dictBytes = t.x.cfg.DictionaryBytes
			}
			if ch.conn != nil && t.x.cfg.CoalesceRows > 1 {
				ch.coalesce = t.x.cfg.CoalesceRows
				ch.coalesceBytes = int64(t.x.cfg.MaxFrameBytes)
				ch.lingerNeedsCredit = w.gated
				ch.lingerSet = &w.linger
			}
			ch.pendingChans = &p.pendingChans
			if w.gated {
				ch.setFullCounter(&w.full)
			}
			p.chans[d] = ch
		}
		if o.Partitioning != stream.Forward {
			t.openCells(p, o.Targets)
		}
	}
	return nil
}

// openCells sets p up to send watermarks and aligned barriers by cell
// (wmcell.go): one cell per taskmanager its channels go to.
func (t *Task) openCells(p *partitioner, targets []string) {
	if t.x.noCells {
		return
	}
	seen := make(map[string]bool)
	for d, ch := range p.chans {
		if seen[targets[d]] {
			continue
		}
		seen[targets[d]] = true
		if ch.conn == nil {
			p.cells = append(p.cells, cellTarget{local: t.x.acquireCell(cellKeyOf(ch.key))})
		} else {
			p.cells = append(p.cells, cellTarget{conn: ch.conn, id: ch.id})
		}
	}
}

// replayInputs puts the input channel state of an unaligned checkpoint
// (list state by name, as onUnalignedBarrier wrote it) in front of the
// channels it was taken from, ahead of any new input.
func (t *Task) replayInputs(gate *inputGate, state map[string][][]byte) error {
	for _, name := range sortedStateNames(state) {
		var p, in, up int
		if _, err := fmt.Sscanf(strings.TrimPrefix(name, channelStatePrefix), "p%d/in%d/up%d", &p, &in, &up); err != nil {
			return fmt.Errorf("channel state %q: malformed name; the checkpoint was not written by this version of Weir", name)
		}
		if p != t.spec.Parallelism {
			return fmt.Errorf("%w: it holds records in flight of parallelism %d, and this task runs at parallelism %d; "+
				"restore it at parallelism %d, or take a savepoint (savepoints are always aligned) and rescale from that", ErrUnalignedRescale, p, t.spec.Parallelism, p)
		}
		var ch *inputChannel
		for _, c := range gate.channels {
			if c.input == in && c.key.UpstreamSubtask == up {
				ch = c
			}
		}
		if ch == nil {
			return fmt.Errorf("%w: it holds records in flight from subtask %d of input %d, which this task does not read; "+
				"restore it at the parallelism it was taken at, or take a savepoint (savepoints are always aligned) and rescale from that", ErrUnalignedRescale, up, in)
		}
		batches := make([]*stream.Batch, 0, len(state[name]))
		for _, data := range state[name] {
			b, err := batchcodec.Decode(data, ch.schema)
			if err != nil {
				for _, done := range batches {
					done.Release()
				}
				return fmt.Errorf("channel state %q: %w", name, err)
			}
			batches = append(batches, b)
		}
		gate.replay(ch, batches)
	}
	return nil
}

// outputSchema returns the schema of the batches of the task's output i.
func (t *Task) outputSchema(i int) *stream.Schema {
	tail := t.spec.Chain[len(t.spec.Chain)-1].Vertex
	if side := t.spec.Outputs[i].SideOutput; side != "" {
		return tail.SideOutSchemas[side]
	}
	return tail.OutSchema
}

// closeOutputs retires the output channels. After a successful run it waits
// until everything sent has been handed to the network, so a FINISHED task
// has delivered its end-of-partition.
func (t *Task) closeOutputs(ctx context.Context, w *outputWriter, wait bool) error {
	var flushes []<-chan struct{}
	var conns []*peerConn
	for _, p := range w.outs {
		for _, c := range p.cells {
			if c.local != nil {
				t.x.releaseCell(c.local)
			}
		}
		p.cells = nil
		for _, ch := range p.chans {
			if ch == nil {
				continue
			}
			f := t.x.closeOutput(ch)
			if ch.conn != nil {
				flushes = append(flushes, f)
				conns = append(conns, ch.conn)
			}
		}
	}
	if !wait {
		return nil
	}
	for i, f := range flushes {
		select {
		case <-f:
		case <-conns[i].done:
			return fmt.Errorf("task %s: %w", t.name, conns[i].err)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// runnableMetric counts the goroutines ready to run and waiting for a
// processor.
const runnableMetric = "/sched/goroutines/runnable:goroutines"

// yieldIfOthersWait lets the goroutines waiting for a processor run first
// when there are any (s reads runnableMetric). A source task calls it when
// it read twice in a row. Such a source never blocks on its own, and Go
// lets a goroutine run until it blocks or 10ms pass: its consumers in this
// process and the exchange's goroutines that pass batches and credits to
// and from other taskmanagers would wait that long when the process has no
// processor to spare (a CPU per slot, with --cpu-cores or a container's
// limit), and a source in another process that waits for their credits
// would stall. Reading the count costs about 60ns; yielding when nobody
// waits would cost more, a wake-up of another thread when a processor is
// idle. A source that reads what is due and then idles (a rate limit)
// waits anyway and does not yield.
func yieldIfOthersWait(s []metrics.Sample) {
	metrics.Read(s)
	if s[0].Value.Kind() == metrics.KindUint64 && s[0].Value.Uint64() > 0 {
		runtime.Gosched()
	}
}
