package stream

import (
	"errors"
	"fmt"
	"time"
)

// CheckpointMode is the consistency a job's checkpoints give.
type CheckpointMode int

const (
	// ExactlyOnce aligns barriers at tasks with several input channels: a
	// channel whose barrier arrived is blocked until all have arrived, so the
	// snapshot reflects exactly the records before the barrier. The default.
	ExactlyOnce CheckpointMode = iota + 1
	// AtLeastOnce does not block channels: records after a barrier may be in
	// the snapshot and are then replayed after recovery (duplicates, no loss).
	AtLeastOnce
)

func (m CheckpointMode) String() string {
	switch m {
	case ExactlyOnce:
		return "exactly_once"
	case AtLeastOnce:
		return "at_least_once"
	}
	return "invalid"
}

// ParseCheckpointMode is the inverse of CheckpointMode.String.
func ParseCheckpointMode(s string) (CheckpointMode, error) {
	switch s {
	case "exactly_once", "exactly-once", "EXACTLY_ONCE":
		return ExactlyOnce, nil
	case "at_least_once", "at-least-once", "AT_LEAST_ONCE":
		return AtLeastOnce, nil
	}
	return 0, fmt.Errorf("unknown checkpoint mode %q (want exactly_once or at_least_once)", s)
}

// Retention says what happens to a job's retained checkpoints when it is
// cancelled.
type Retention int

const (
	// DeleteOnCancel removes them (the default).
	DeleteOnCancel Retention = iota + 1
	// RetainOnCancel keeps them for a later restore.
	RetainOnCancel
)

// CorruptionPolicy says what a job does when a task fails because an object
// of the checkpoint it restored does not verify (a checksum mismatch, a
// truncated or missing object).
type CorruptionPolicy int

const (
	// FailOnCorruption fails the job at once, without a restart, and
	// leaves its retained checkpoints for the user to resubmit it from
	// one (the default). Restoring an older checkpoint is unsafe when the
	// job's sinks already committed the output of the newer one: it would
	// be written again.
	FailOnCorruption CorruptionPolicy = iota + 1
	// FallbackOnCorruption restarts the job from the newest older retained
	// checkpoint that is not known to be corrupt, through the restart
	// strategy, and fails it like FailOnCorruption when none is left. The
	// output written since that checkpoint is written again: opt in only
	// when the sinks tolerate that.
	FallbackOnCorruption
)

func (p CorruptionPolicy) String() string {
	switch p {
	case FailOnCorruption:
		return "fail"
	case FallbackOnCorruption:
		return "fallback"
	}
	return "invalid"
}

// ParseCorruptionPolicy is the inverse of CorruptionPolicy.String.
func ParseCorruptionPolicy(s string) (CorruptionPolicy, error) {
	switch s {
	case "fail":
		return FailOnCorruption, nil
	case "fallback":
		return FallbackOnCorruption, nil
	}
	return 0, fmt.Errorf("unknown corruption policy %q (want fail or fallback)", s)
}

// CheckpointConfig holds a job's checkpoint settings; zero fields take the
// defaults of DefaultCheckpointConfig. Checkpointing is off while Interval is
// zero and Adaptive is false: it costs storage and pauses, so a job opts in.
type CheckpointConfig struct {
	// Interval between checkpoint triggers; 0 turns checkpointing off.
	Interval time.Duration
	// Timeout after which a pending checkpoint is aborted. Default 10m.
	Timeout time.Duration
	// MinPause is the least time from the end of one checkpoint to the next
	// trigger. Default 0.
	MinPause time.Duration
	// MaxConcurrent is how many checkpoints may be pending at once. Default 1.
	MaxConcurrent int
	// Mode: ExactlyOnce (default) or AtLeastOnce.
	Mode CheckpointMode
	// TolerableFailures is how many consecutive checkpoint failures are
	// tolerated before the job fails over. Default 0.
	TolerableFailures int
	// Retained is how many completed checkpoints are kept. Default 1.
	Retained int
	// Retention on cancel. Default DeleteOnCancel.
	Retention Retention
	// Storage is where checkpoints are written: file:///path or
	// s3://bucket/prefix. Empty means the cluster default.
	Storage string
	// OnCorruption is what the job does when a checkpoint it restores does
	// not verify. Default FailOnCorruption.
	OnCorruption CorruptionPolicy
	// Unaligned makes the checkpoints (not savepoints, which are always
	// aligned) unaligned: a source task whose output is backpressured
	// emits the barrier at once, ahead of the batches it could not send
	// yet, and at every task the barrier overtakes the batches buffered in
	// its input channels; what a barrier overtook is saved with the
	// snapshot as channel state and processed first after a restore. Only
	// with ExactlyOnce. A job restores an unaligned checkpoint only at the
	// parallelism it was taken at; to rescale, take a savepoint. Default
	// false.
	Unaligned bool
	// AlignedCheckpointTimeout, with Unaligned, starts every checkpoint
	// aligned: a task switches it to unaligned once it has aligned it for
	// longer than this, from the first barrier that reached it (the
	// batches still ahead of the missing barriers become channel state,
	// and an unaligned barrier goes downstream). So a checkpoint keeps no
	// channel state unless backpressure delays it. 0 (the default): every
	// checkpoint is unaligned from the start.
	AlignedCheckpointTimeout time.Duration
	// Adaptive lets the coordinator choose the interval: after each
	// completed periodic checkpoint it lengthens or shortens the interval
	// so that the time tasks spend in synchronous snapshots and alignment
	// stays under MaxOverhead of it, within [MinInterval, MaxInterval].
	// Interval is then the starting interval (default MinInterval).
	// Default false.
	Adaptive bool
	// MaxOverhead is the adaptive interval's target: the fraction of the
	// interval (0 < MaxOverhead < 1) a task may spend in synchronous
	// snapshots and alignment. Default 0.03.
	MaxOverhead float64
	// MinInterval and MaxInterval bound the adaptive interval. Defaults
	// 1s and 60s.
	MinInterval, MaxInterval time.Duration
}

// Defaults of the adaptive interval (CheckpointConfig.Adaptive).
const (
	DefaultMaxOverhead = 0.03
	DefaultMinInterval = time.Second
	DefaultMaxInterval = time.Minute
)

// Enabled reports whether checkpoints are taken.
func (c CheckpointConfig) Enabled() bool { return c.Interval > 0 || c.Adaptive }

// WithDefaults returns c with zero fields set to their defaults.
func (c CheckpointConfig) WithDefaults() CheckpointConfig {
	if c.Timeout == 0 {
		c.Timeout = 10 * time.Minute
	}
	if c.MaxConcurrent == 0 {
		c.MaxConcurrent = 1
	}
	if c.Mode == 0 {
		c.Mode = ExactlyOnce
	}
	if c.Retained == 0 {
		c.Retained = 1
	}
	if c.Retention == 0 {
		c.Retention = DeleteOnCancel
	}
	if c.OnCorruption == 0 {
		c.OnCorruption = FailOnCorruption
	}
	if c.Adaptive {
		if c.MaxOverhead == 0 {
			c.MaxOverhead = DefaultMaxOverhead
		}
		if c.MinInterval == 0 {
			c.MinInterval = DefaultMinInterval
			if c.MaxInterval > 0 {
				c.MinInterval = min(c.MinInterval, c.MaxInterval)
			}
		}
		if c.MaxInterval == 0 {
			c.MaxInterval = max(DefaultMaxInterval, c.MinInterval)
		}
		if c.Interval == 0 {
			c.Interval = c.MinInterval
		}
	}
	return c
}

// Validate reports the first invalid setting.
func (c CheckpointConfig) Validate() error {
	switch {
	case c.Interval < 0:
		return fmt.Errorf("checkpointing interval %v: must not be negative (0 turns checkpointing off)", c.Interval)
	case c.Interval > 0 && c.Interval < 10*time.Millisecond:
		return fmt.Errorf("checkpointing interval %v: must be at least 10ms", c.Interval)
	case c.Timeout < 0:
		return fmt.Errorf("checkpointing timeout %v: must be positive", c.Timeout)
	case c.MinPause < 0:
		return fmt.Errorf("checkpointing minPause %v: must not be negative", c.MinPause)
	case c.MaxConcurrent < 0:
		return fmt.Errorf("checkpointing maxConcurrent %d: must be at least 1", c.MaxConcurrent)
	case c.TolerableFailures < 0:
		return fmt.Errorf("checkpointing tolerableFailures %d: must not be negative", c.TolerableFailures)
	case c.Retained < 0:
		return fmt.Errorf("checkpointing retained %d: must be at least 1", c.Retained)
	}
	if c.Mode != 0 && c.Mode != ExactlyOnce && c.Mode != AtLeastOnce {
		return fmt.Errorf("checkpointing mode %d: invalid", c.Mode)
	}
	if c.OnCorruption != 0 && c.OnCorruption != FailOnCorruption && c.OnCorruption != FallbackOnCorruption {
		return fmt.Errorf("checkpointing onCorruption %d: invalid (want fail or fallback)", c.OnCorruption)
	}
	if err := c.validateAdaptive(); err != nil {
		return err
	}
	if c.AlignedCheckpointTimeout < 0 {
		return fmt.Errorf("checkpointing alignedCheckpointTimeout %v: must not be negative; use 0 for unaligned checkpoints from the start", c.AlignedCheckpointTimeout)
	}
	if c.AlignedCheckpointTimeout > 0 && !c.Unaligned {
		return errors.New("checkpointing alignedCheckpointTimeout: only applies to unaligned checkpoints (it is when an aligned checkpoint switches to unaligned); set unaligned: true or remove it")
	}
	if c.Unaligned && c.Mode == AtLeastOnce {
		return errors.New("checkpointing unaligned: needs mode exactly_once (at_least_once never aligns barriers); remove unaligned or set mode: exactly_once")
	}
	return nil
}

func (c CheckpointConfig) validateAdaptive() error {
	if !c.Adaptive {
		if c.MaxOverhead != 0 || c.MinInterval != 0 || c.MaxInterval != 0 {
			return errors.New("checkpointing maxOverhead, minInterval, maxInterval: only apply to an adaptive interval; set interval: adaptive or remove them")
		}
		return nil
	}
	d := c.WithDefaults()
	switch {
	case d.MaxOverhead <= 0 || d.MaxOverhead >= 1:
		return fmt.Errorf("checkpointing maxOverhead: must be between 0 and 100%% (exclusive), got %g; use a value such as 3%% or 0.03", d.MaxOverhead)
	case d.MinInterval < 10*time.Millisecond:
		return fmt.Errorf("checkpointing minInterval %v: must be at least 10ms", d.MinInterval)
	case d.MaxInterval < d.MinInterval:
		return fmt.Errorf("checkpointing maxInterval %v: must not be below minInterval %v; raise maxInterval or lower minInterval", d.MaxInterval, d.MinInterval)
	case d.Interval < d.MinInterval || d.Interval > d.MaxInterval:
		return fmt.Errorf("checkpointing interval %v: the adaptive starting interval must lie within [minInterval %v, maxInterval %v]", d.Interval, d.MinInterval, d.MaxInterval)
	}
	return nil
}

// RestartConfig is a job's restart strategy. Type is one of "none",
// "fixed-delay", "failure-rate" and "exponential-delay"; empty means the
// cluster default (exponential-delay when checkpointing is on, none
// otherwise). Zero fields take the strategy's defaults.
type RestartConfig struct {
	Type string
	// fixed-delay: Attempts (default 1) restarts, each after Delay
	// (default 1s).
	Attempts int
	Delay    time.Duration
	// failure-rate: at most MaxFailures (default 1) within Interval
	// (default 1m), restarting after Delay.
	MaxFailures int
	Interval    time.Duration
	// exponential-delay: InitialBackoff (1s), MaxBackoff (1m), Multiplier
	// (1.5), Jitter (0.1 of the backoff), ResetBackoffAfter (1h of health).
	InitialBackoff    time.Duration
	MaxBackoff        time.Duration
	Multiplier        float64
	Jitter            float64
	ResetBackoffAfter time.Duration
}

// OperatorSnapshot is one operator instance's state in a checkpoint, in the
// form that survives rescaling: keyed state as opaque chunks per key group,
// operator list state (split among subtasks on restore) and union state
// (given whole to every subtask on restore) as opaque items per name.
type OperatorSnapshot struct {
	Keyed map[int][][]byte
	List  map[string][][]byte
	Union map[string][][]byte
	// Files are local files of an incremental snapshot (see SnapshotFile);
	// the runtime uploads them with the rest.
	Files []SnapshotFile
}

// Empty reports whether the snapshot holds nothing.
func (s *OperatorSnapshot) Empty() bool {
	return s == nil || len(s.Keyed) == 0 && len(s.List) == 0 && len(s.Union) == 0 && len(s.Files) == 0
}

// SnapshotContext is handed to Checkpointed.SnapshotState. Its methods take
// ownership of the byte slices passed in: the operator must not modify them
// afterwards (they are encoded and uploaded asynchronously).
type SnapshotContext struct {
	CheckpointID int64
	// Timestamp is when the checkpoint was triggered (Unix ms).
	Timestamp int64
	KeyGroups KeyGroupRange
	State     OperatorSnapshot
	// Full: the checkpoint is a savepoint's, so keyed state must be
	// written in the canonical format (State.Keyed), never as a state
	// backend's incremental files, so that it restores into any backend.
	Full bool
}

// WriteKeyGroup appends a chunk of keyed state for key group kg, which must
// be in the subtask's range.
func (c *SnapshotContext) WriteKeyGroup(kg int, chunk []byte) {
	if !c.KeyGroups.Contains(kg) {
		panic(fmt.Sprintf("stream: key group %d written outside the subtask's range %v", kg, c.KeyGroups))
	}
	if c.State.Keyed == nil {
		c.State.Keyed = make(map[int][][]byte)
	}
	c.State.Keyed[kg] = append(c.State.Keyed[kg], chunk)
}

// AddListState appends items to the operator list state called name.
func (c *SnapshotContext) AddListState(name string, items ...[]byte) {
	if c.State.List == nil {
		c.State.List = make(map[string][][]byte)
	}
	c.State.List[name] = append(c.State.List[name], items...)
}

// AddUnionState appends items to the union list state called name.
func (c *SnapshotContext) AddUnionState(name string, items ...[]byte) {
	if c.State.Union == nil {
		c.State.Union = make(map[string][][]byte)
	}
	c.State.Union[name] = append(c.State.Union[name], items...)
}

// RestoreContext is handed to Checkpointed.RestoreState. State holds the
// keyed chunks of exactly this subtask's key groups (from however many
// snapshotted subtasks owned them), this subtask's share of each list state,
// and every item of each union state. The operator must not modify it.
type RestoreContext struct {
	CheckpointID int64
	// JobID is the job that took the checkpoint: the operator's own job
	// (OperatorContext.JobID) after an ordinary failover, another one when
	// the job was submitted from that job's checkpoint. It equals
	// OperatorContext.RestoreJobID. The task runtime always sets it; an
	// operator reads an empty JobID (a test calling RestoreState directly)
	// as its own job.
	JobID     string
	KeyGroups KeyGroupRange
	State     *OperatorSnapshot
}

// Checkpointed is implemented by operators and sources that keep state. The
// task runtime calls its methods on the task goroutine.
type Checkpointed interface {
	// SnapshotState captures the state as of checkpoint c.CheckpointID: it is
	// called when the barrier has been aligned (or, for a source, between two
	// Poll calls), before the barrier is passed downstream. It must not keep
	// references to structures it goes on modifying.
	SnapshotState(c *SnapshotContext) error
	// RestoreState loads state from a checkpoint. It is called after Open and
	// before any record or watermark, only when the task starts from a
	// checkpoint.
	RestoreState(c *RestoreContext) error
}

// CheckpointListener is implemented by operators that act when a checkpoint
// completes or is aborted, such as two-phase-commit sinks. Notifications
// come on the task goroutine, at most once per checkpoint id and task, in
// increasing id order, and may be skipped (a later completion subsumes
// earlier ones).
type CheckpointListener interface {
	NotifyCheckpointComplete(id int64) error
	NotifyCheckpointAborted(id int64) error
}
