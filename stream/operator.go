package stream

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"time"
)

// MaxWatermark is the watermark that says no more records will arrive. A
// source task emits it when its input ends, so event-time windows fire.
const MaxWatermark int64 = math.MaxInt64

// MinWatermark is the watermark before any has been seen.
const MinWatermark int64 = math.MinInt64

// Collector receives an operator's output. It is called only from the task
// goroutine that calls the operator, never concurrently.
type Collector interface {
	// Collect passes b downstream; b belongs to the callee from then on.
	// Empty batches may be dropped.
	Collect(b *Batch)
	// EmitWatermark passes a watermark downstream: no later record will carry
	// an event time at or below wm. Watermarks must not decrease.
	EmitWatermark(wm int64)
}

// SideOutputCollector is the optional interface of a Collector that can
// pass batches to the operator's side outputs: named extra outputs,
// declared at planning with PlanContext.DeclareSideOutput, that other
// operators read through edges naming them (Edge.SideOutput). The task runtime's collectors implement
// it; operators call it through CollectSide, which also copes with
// collectors that do not (test fakes, wrappers).
//
// Side-output batches travel like main-output ones: through the edge's
// partitioning, in order with the watermarks, checkpoint barriers and
// end-of-partition that the operator's task emits on all its outputs, so
// exactly-once holds for them too.
type SideOutputCollector interface {
	// CollectSide passes b to the side output called name; b belongs to
	// the callee from then on and must have the schema declared for name.
	// It reports whether anything reads that output: when nothing does, b
	// is released and dropped (that is not an error). Emitting to a name
	// the operator did not declare, or with another schema, fails the task.
	// Like Collect, it is called only from the task goroutine.
	CollectSide(name string, b *Batch) bool
}

// CollectSide passes b to the side output called name of the operator whose
// collector is out, and reports whether anything reads that output. When
// out cannot pass side outputs, or nothing reads this one, b is released
// and CollectSide returns false; an operator may count such batches as
// dropped.
func CollectSide(out Collector, name string, b *Batch) bool {
	if so, ok := out.(SideOutputCollector); ok {
		return so.CollectSide(name, b)
	}
	b.Release()
	return false
}

// LateRecordsCounter is implemented by an operator that drops records
// arriving after the windows they belong to were emitted (later than its
// allowed lateness). The taskmanager exports the count as the Prometheus
// metric weir_operator_late_records_dropped_total. LateRecordsDropped may be
// called from any goroutine while the operator runs, concurrently with its
// other methods; the count starts at 0 for every operator instance and
// never decreases.
type LateRecordsCounter interface {
	LateRecordsDropped() int64
}

// OperatorContext describes where an operator instance runs. It is filled by
// the task runtime before Open and is read-only for the operator.
type OperatorContext struct {
	JobID       string
	TaskName    string // for logs, e.g. "window (2/4)"
	OperatorUID string
	// Subtask is this instance's index in [0, Parallelism).
	Subtask        int
	Parallelism    int
	MaxParallelism int
	// KeyGroups is the key-group range this subtask owns when its input is
	// keyed.
	KeyGroups KeyGroupRange
	// InputSchemas has one schema per input; InputKeys the key fields of each
	// input when it arrives over a hash (keyBy) edge, else nil.
	InputSchemas []*Schema
	InputKeys    [][]string
	// OutputSchema is what Plan returned (nil for sinks).
	OutputSchema *Schema
	// SideOutputSchemas are the side outputs Plan declared, by name (nil
	// when none); the map must not be modified.
	SideOutputSchemas map[string]*Schema

	Config []byte // the operator's JSON config
	Logger *slog.Logger
	// Attempt is the execution attempt: it grows with every deployment of
	// the job and never repeats, across restarts of the jobmanager and
	// changes of leader too, so that it can name files and transactions.
	// A jobmanager's attempts start at term*AttemptsPerTerm + 1 (term 0
	// without a job store); DeploymentOf gives the count within the term.
	Attempt int64
	// RestoreJobID is the job that took the checkpoint this subtask
	// restores, set before Open: JobID itself after an ordinary failover,
	// another job's id when the job was submitted from a checkpoint or
	// savepoint of that job (weir submit --from). It is empty when the
	// subtask starts fresh. An operator that keeps something outside the
	// checkpoint under the job's name (a sink's files, a claim on a
	// directory) uses it to find, and take over, what the restored job
	// left there.
	RestoreJobID string
	// Checkpointing says whether the job takes checkpoints, and in which
	// mode. Two-phase-commit sinks commit on NotifyCheckpointComplete when
	// it is on, and at Finish otherwise.
	Checkpointing  bool
	CheckpointMode CheckpointMode
	// StateBackend names the keyed-state backend operators should use
	// (StateBackendHeap or StateBackendPebble; empty means heap).
	StateBackend string
	// FullSnapshots asks a backend that can snapshot incrementally to take
	// full snapshots (StateConfig.FullSnapshots).
	FullSnapshots bool
	// Paths confines the files the operator may read or write (checked
	// again here, in the process that touches them, after the jobmanager
	// checked them when it planned the job); nil allows every path.
	Paths *PathPolicy
	// LocalStateDir is a directory private to this task where a backend may
	// keep files (empty: use a temporary directory).
	LocalStateDir string
	// StateCacheBytes is the memory in bytes this subtask's keyed-state
	// backend may use for caches (Pebble: its block cache and its
	// write-back value cache, half each); 0 leaves the backend's defaults.
	StateCacheBytes int64
	// StateCache, if not nil, is a cache the process shares among its
	// keyed-state backends (the taskmanager's block cache, a
	// *backends.SharedCache); the backend then takes its block cache
	// from it rather than from StateCacheBytes.
	StateCache any
	// KeyedState is the operator's keyed-state backend (a
	// statebackend.Backend; get it with statebackend.KeyedBackend) for an
	// operator that implements KeyedStateful; nil otherwise. The runtime
	// opens it for KeyGroups before Open, already restored from the
	// checkpoint the task starts from, snapshots it at every barrier after
	// the operator's own SnapshotState, and closes it after Close. It is
	// typed any because package stream cannot name the statebackend types.
	KeyedState any
	// Clock returns the task's processing time in Unix milliseconds: the
	// time its processing-time timers fire against (see
	// ProcessingTimeAware). The runtime sets it (a test may give the task
	// a manual clock); nil is the wall clock. Read it with ProcessingTime.
	Clock func() int64
}

// ProcessingTime returns the task's processing time in Unix milliseconds
// (Clock, or the wall clock if it is nil). An operator registers its
// processing-time timers relative to it, not to the wall clock, so that
// tests can drive it.
func (c *OperatorContext) ProcessingTime() int64 {
	if c.Clock != nil {
		return c.Clock()
	}
	return time.Now().UnixMilli()
}

// KeyedStateful is implemented by an operator that keeps keyed state. When
// UsesKeyedState returns true (it is asked once, after the operator is built
// from its config and before Open), the task runtime owns the operator's
// keyed state: see OperatorContext.KeyedState. The operator then does not
// snapshot or restore that state itself; Checkpointed remains for operator
// (non-keyed) state.
type KeyedStateful interface {
	UsesKeyedState() bool
}

// ProcessingTimeAware is implemented by a keyed operator (KeyedStateful)
// that registers processing-time timers in its keyed state (the
// RegisterProcessingTimeTimer of statebackend.TimerService). The task
// runtime calls OnProcessingTime whenever the earliest of those timers is
// due by the task's clock (OperatorContext.ProcessingTime), with now the
// clock's time: on the task goroutine, between batches, so never
// concurrently with ProcessBatch, ProcessWatermark or a snapshot. The
// operator fires its due timers with the TimerService's
// AdvanceProcessingTime(now, ...) and emits their results to out; a call
// that leaves timers at or before now unfired is repeated.
//
// The runtime wakes for the earliest timer without input arriving, and
// after a restore calls OnProcessingTime at once for restored timers that
// are already due. It does not call it once the task's input has ended
// (processing-time timers still pending then do not fire; Finish may flush
// what they guard), nor for an operator whose keyed state it does not own
// unless the operator is a ProcessingTimeDeadline. An error fails the task.
type ProcessingTimeAware interface {
	OnProcessingTime(now int64, out Collector) error
}

// ProcessingTimeDeadline is implemented by an operator, keyed or not, that
// keeps a processing-time deadline of its own rather than timers in keyed
// state: the watermarks operator's next periodic emission. Between two
// events the task runtime asks NextProcessingTime (so it must be cheap and
// must not emit); when the deadline is due by the task's clock it calls
// OnProcessingTime, on the task goroutine under the same rules as for
// ProcessingTimeAware, and it keeps one timer armed for the earliest
// deadline or timer of the chain so that the task wakes without input. An
// operator with no deadline returns ok false and costs no timer and no
// wake-up. A deadline still pending when the task's input ends is not
// fired.
type ProcessingTimeDeadline interface {
	ProcessingTimeAware
	// NextProcessingTime returns the deadline (Unix ms of the task's
	// clock), ok false when there is none.
	NextProcessingTime() (deadline int64, ok bool)
}

// Operator is a transformation or a sink. The task runtime calls its methods
// from one goroutine, in this order: Open once; ProcessBatch and
// ProcessWatermark (and the OnProcessingTime of a ProcessingTimeAware
// operator) any number of times; Finish once when every input has ended
// (not when the task is cancelled or fails); Close once, always, even after
// an error.
//
// An error from any method fails the task.
type Operator interface {
	Open(ctx context.Context, octx *OperatorContext) error
	// ProcessBatch handles a batch from input number input (0 for operators
	// with one input). The batch belongs to the operator.
	ProcessBatch(input int, b *Batch, out Collector) error
	// ProcessWatermark is called when the task's combined watermark (the
	// minimum over its inputs) advances. The operator must forward it (or a
	// watermark of its own) with out.EmitWatermark after emitting any results
	// it triggers.
	ProcessWatermark(wm int64, out Collector) error
	// Finish flushes buffered results at the end of bounded input.
	Finish(out Collector) error
	Close() error
}

// PollStatus tells the task runtime what a Source.Poll call did.
type PollStatus int

const (
	// PollEmitted: the source emitted data; call Poll again.
	PollEmitted PollStatus = iota
	// PollIdle: nothing available now (an unbounded source waiting for data
	// or for its rate limit); the runtime may do other work and poll again.
	PollIdle
	// PollEnd: the source is exhausted; Poll will not be called again.
	PollEnd
)

// Source produces the records of one subtask of a source vertex. Its methods
// are called from one goroutine: Open, then Poll until it returns PollEnd or
// the task stops, then Close. Between two Poll calls the runtime may inject
// barriers and watermarks, so a Poll call should emit at most about one batch
// and must not block for long (it should return PollIdle instead).
type Source interface {
	Open(ctx context.Context, octx *OperatorContext) error
	Poll(ctx context.Context, out Collector) (PollStatus, error)
	Close() error
}

// IdleHinter is implemented by a Source that knows, when it returns
// PollIdle, how long it will have nothing to emit (a rate limit): the
// runtime then waits that long for its next Poll (handling barriers,
// notifications and timers meanwhile) instead of polling again and again.
// A source without it is polled with a backoff of up to a few
// milliseconds.
type IdleHinter interface {
	// IdleFor is called right after Poll returned PollIdle.
	IdleFor() time.Duration
}

// BaseOperator gives an Operator the default behaviour of the optional
// methods: watermarks are forwarded, Finish and Close do nothing. Embed it and
// implement Open and ProcessBatch.
type BaseOperator struct{}

func (BaseOperator) ProcessWatermark(wm int64, out Collector) error {
	out.EmitWatermark(wm)
	return nil
}
func (BaseOperator) Finish(Collector) error { return nil }
func (BaseOperator) Close() error           { return nil }

// ErrConfig marks an operator configuration error found at planning time.
var ErrConfig = errors.New("stream: invalid operator config")

// AttemptsPerTerm is the range of execution attempts one jobmanager term
// (a run of a jobmanager with a job store, or a leadership) deploys from:
// its attempts are term*AttemptsPerTerm + 1, + 2, ...
const AttemptsPerTerm = 1 << 16

// DeploymentOf is the deployment an execution attempt is within its
// jobmanager's term: 1 for the first, one more after every restart.
func DeploymentOf(attempt int64) int64 { return attempt % AttemptsPerTerm }
