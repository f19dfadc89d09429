package coordinator

import (
	"fmt"
	"strings"
	"time"
)

// Action is something the shell must carry out. The concrete types are
// TriggerAction, WriteManifestAction, NotifyCompleteAction, AbortAction,
// DiscardAction and FailJobAction; the set is closed.
type Action interface {
	isAction()
	String() string
}

// TriggerAction tells the source tasks to inject barrier ID.
type TriggerAction struct {
	ID        int64
	Timestamp time.Time
	Sources   []TaskID
}

// WriteManifestAction says that every required task acknowledged checkpoint
// ID: the shell writes the manifest (with the acks' payloads) and then the
// completed-checkpoint pointer, and reports with ManifestWritten. At most one
// is outstanding at a time, in increasing id order.
type WriteManifestAction struct {
	ID        int64
	Timestamp time.Time // trigger time
	// Acks are the acknowledgements' payloads, one per task that
	// acknowledged, ordered by task. The slice is the coordinator's own
	// (it keeps it as the completed checkpoint's) and must not be
	// modified.
	Acks []Ack
	// Finished lists the tasks that had finished at trigger time and
	// those that finished afterwards without acknowledging, in order; the
	// manifest must record them as finished so that a restore does not
	// start them again from scratch (and replay their input).
	Finished []TaskID
	// Retained are the completed checkpoints retained once this one
	// completes, ascending, ending with ID: the shell records them with
	// the pointer, so that a later leader retains (and deletes) the same.
	Retained []int64
}

// Ack is one task's acknowledgement of a checkpoint: the payload it passed
// to Coordinator.Ack.
type Ack struct {
	Task    TaskID
	Payload any
}

// NotifyCompleteAction says checkpoint ID is complete: the shell tells the
// tasks (checkpointComplete), whereupon two-phase-commit sinks commit.
type NotifyCompleteAction struct {
	ID    int64
	Tasks []TaskID
}

// AbortAction says checkpoint ID ended without completing: the shell tells
// the tasks (checkpointAborted) and deletes the checkpoint's files. No
// manifest write of it is in flight: a checkpoint whose manifest is being
// written is aborted only by a failed write (CauseWriteFailed), reported
// with ManifestWritten.
type AbortAction struct {
	ID    int64
	Cause AbortCause
	// Reason explains Cause for people (logs, history); never parse it.
	Reason string
	Tasks  []TaskID
}

// DiscardAction lists completed checkpoints that are no longer retained: the
// shell deletes their files. It never names the latest completed checkpoint.
type DiscardAction struct {
	IDs []int64
}

// FailJobAction says too many consecutive checkpoints failed: the shell
// fails the job over. The coordinator has stopped (as by Stop with
// CauseTooManyFailures); call Reset after the restart.
type FailJobAction struct {
	// ID is the checkpoint whose failure exceeded the tolerance and Cause
	// why it failed (Cause.IsFailure() holds).
	ID     int64
	Cause  AbortCause
	Reason string
}

// AbortCause says why a checkpoint ended without completing. The zero
// value is invalid.
type AbortCause uint8

// The causes. Only the failures (IsFailure) count against
// Config.TolerableFailures: the other causes end a checkpoint for reasons
// outside it (a newer checkpoint, finished tasks, a stop) and say nothing
// about whether checkpoints can succeed.
const (
	// CauseDeclined: a task declined the checkpoint (Decline). A failure.
	CauseDeclined AbortCause = iota + 1
	// CauseExpired: not every task acknowledged within Config.Timeout. A
	// failure.
	CauseExpired
	// CauseWriteFailed: ManifestWritten reported an error. A failure.
	CauseWriteFailed
	// CauseTasksFinished: every task the checkpoint waited for finished
	// without acknowledging (TaskFinished).
	CauseTasksFinished
	// CauseSubsumed: a checkpoint with a higher id completed first.
	CauseSubsumed
	// CauseTooManyFailures: aborted by the stop that comes with
	// FailJobAction, because another checkpoint failed once too often.
	CauseTooManyFailures
	// CauseFailover: Stop for a failover or restart of (part of) the job,
	// or Reset.
	CauseFailover
	// CauseJobEnded: Stop because the job ends (finished, cancelled or
	// failed for good).
	CauseJobEnded
)

var causeNames = [...]string{
	CauseDeclined:        "declined",
	CauseExpired:         "expired",
	CauseWriteFailed:     "write-failed",
	CauseTasksFinished:   "tasks-finished",
	CauseSubsumed:        "subsumed",
	CauseTooManyFailures: "too-many-failures",
	CauseFailover:        "failover",
	CauseJobEnded:        "job-ended",
}

// AbortCauses lists every valid cause, in order.
func AbortCauses() []AbortCause {
	out := make([]AbortCause, 0, len(causeNames)-1)
	for c := CauseDeclined; int(c) < len(causeNames); c++ {
		out = append(out, c)
	}
	return out
}

func (c AbortCause) String() string {
	if c == 0 || int(c) >= len(causeNames) {
		return fmt.Sprintf("AbortCause(%d)", uint8(c))
	}
	return causeNames[c]
}

// IsFailure reports whether the checkpoint failed by its own fault
// (declined, expired, manifest write failed) rather than being aborted for
// another reason (subsumed, stopped, its tasks finished). Failures count
// against Config.TolerableFailures while the coordinator runs.
func (c AbortCause) IsFailure() bool {
	return c == CauseDeclined || c == CauseExpired || c == CauseWriteFailed
}

// stopCause reports whether the shell may pass c to Stop.
func (c AbortCause) stopCause() bool { return c == CauseFailover || c == CauseJobEnded }

func (TriggerAction) isAction()        {}
func (WriteManifestAction) isAction()  {}
func (NotifyCompleteAction) isAction() {}
func (AbortAction) isAction()          {}
func (DiscardAction) isAction()        {}
func (FailJobAction) isAction()        {}

func formatTasks(ts []TaskID) string {
	parts := make([]string, len(ts))
	for i, t := range ts {
		parts[i] = t.String()
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func (a TriggerAction) String() string {
	return fmt.Sprintf("trigger %d sources=%s", a.ID, formatTasks(a.Sources))
}

func (a WriteManifestAction) String() string {
	parts := make([]string, len(a.Acks))
	for i, ack := range a.Acks {
		parts[i] = fmt.Sprintf("%v=%v", ack.Task, ack.Payload)
	}
	s := fmt.Sprintf("write-manifest %d acks=[%s]", a.ID, strings.Join(parts, " "))
	if len(a.Finished) > 0 {
		s += " finished=" + formatTasks(a.Finished)
	}
	if len(a.Retained) > 0 {
		s += fmt.Sprintf(" retained=%v", a.Retained)
	}
	return s
}

func (a NotifyCompleteAction) String() string {
	return fmt.Sprintf("notify-complete %d tasks=%s", a.ID, formatTasks(a.Tasks))
}

func (a AbortAction) String() string {
	return fmt.Sprintf("abort %d tasks=%s cause=%v reason=%q", a.ID, formatTasks(a.Tasks), a.Cause, a.Reason)
}

func (a DiscardAction) String() string { return fmt.Sprintf("discard %v", a.IDs) }

func (a FailJobAction) String() string {
	return fmt.Sprintf("fail-job %d cause=%v reason=%q", a.ID, a.Cause, a.Reason)
}

// Status is where a checkpoint is in its life.
type Status int

const (
	InProgress Status = iota + 1
	Completed
	Failed
)

func (s Status) String() string {
	switch s {
	case InProgress:
		return "in_progress"
	case Completed:
		return "completed"
	case Failed:
		return "failed"
	}
	return "invalid"
}

// Stats describe one checkpoint, for `weir checkpoints list` and metrics.
type Stats struct {
	ID          int64
	Status      Status
	Manual      bool // triggered by TriggerNow
	TriggerTime time.Time
	EndTime     time.Time // zero while in progress
	// Acked of Total required tasks have acknowledged. Total shrinks when a
	// task finishes without acknowledging.
	Acked, Total int
	// Bytes is the sum of the acknowledged state sizes.
	Bytes int64
	// SlowestTask acknowledged last, SlowestAck after the trigger.
	SlowestTask TaskID
	SlowestAck  time.Duration
	// The largest synchronous, asynchronous and alignment durations reported
	// by any task, and the largest start delay (SubtaskStats.StartDelay).
	MaxSync, MaxAsync, MaxAlignment, MaxStartDelay time.Duration
	// ChannelStateBytes is the sum of the acknowledged in-flight data.
	ChannelStateBytes int64
	// Storage are the requests made to checkpoint storage for the
	// checkpoint: the acknowledged tasks' uploads and the manifest's
	// write.
	Storage StorageRequests
	// Cause and Failure say why a failed checkpoint ended: Failure is
	// Cause's text for people.
	Cause   AbortCause
	Failure string
}

// Duration is EndTime - TriggerTime, or 0 while in progress.
func (s Stats) Duration() time.Duration {
	if s.EndTime.IsZero() {
		return 0
	}
	return s.EndTime.Sub(s.TriggerTime)
}
