package dataflow

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/weirstream/weir/dataflow/batchcodec"
	"github.com/weirstream/weir/internal/errkind"
	"github.com/weirstream/weir/statebackend/backends"
	"github.com/weirstream/weir/stream"
)

// This file is the task side of checkpoints: triggers at sources, barrier
// alignment at other tasks (the bookkeeping is the pure aligner of
// align.go), the synchronous snapshot of the chain, restore, and checkpoint
// notifications. Everything here runs on the task goroutine except the
// public Trigger/Notify methods, which only queue a message for it.

// SnapshotStats describes how a task took one checkpoint.
type SnapshotStats struct {
	// Alignment is the time from the first barrier of the checkpoint to the
	// last (0 at sources and tasks with one input channel).
	Alignment time.Duration
	// Sync is the time the synchronous snapshot of the chain took.
	Sync time.Duration
	// ChannelStateBytes is the size of the batches an unaligned barrier
	// overtook, saved with the snapshot (TaskSpec.Unaligned); 0 when the
	// checkpoint is aligned.
	ChannelStateBytes int64
}

// CheckpointHooks receive a task's checkpoint outcomes; the taskmanager
// implements them. Both methods are called on the task goroutine and must
// not block (hand the work to another goroutine).
type CheckpointHooks interface {
	// SnapshotTaken is called right after the synchronous snapshot of
	// checkpoint id, before the barrier goes downstream. snaps has one entry
	// per operator of the chain that implements stream.Checkpointed, by
	// operator uid (an operator with nothing to save has an empty
	// snapshot). Ownership of snaps passes to the callee, which encodes,
	// uploads and acknowledges asynchronously.
	SnapshotTaken(id int64, timestamp int64, snaps map[string]*stream.OperatorSnapshot, stats SnapshotStats)
	// SnapshotFailed reports that the task could not take checkpoint id: an
	// operator's SnapshotState failed, alignment was abandoned because a
	// later checkpoint's barrier arrived first, the trigger was not newer
	// than the last one, or the task ended first (an error wrapping
	// ErrTaskEnded). The taskmanager declines the checkpoint. The task
	// itself keeps running.
	SnapshotFailed(id int64, err error)
}

// InputEndedHook is an optional capability of CheckpointHooks: a source task
// calls SourceInputEnded (on its goroutine; it must not block) once its input
// is exhausted and it starts waiting for its final checkpoint, so that the
// coordinator can trigger that checkpoint at once rather than at the next
// interval.
type InputEndedHook interface {
	SourceInputEnded()
}

// Errors of TriggerCheckpoint, for errors.Is.
var (
	// ErrNotSourceTask: only source tasks are triggered; the others
	// checkpoint when barriers arrive.
	ErrNotSourceTask = errors.New("dataflow: not a source task")
	// ErrTaskNotRunning: Run has not started or the task has ended.
	ErrTaskNotRunning = errors.New("dataflow: task is not running")
	// ErrTaskEnded is the ErrTaskNotRunning of a task that has ended: a
	// trigger that raced with the end of its task, not a failure.
	// SnapshotFailed gets an error wrapping it for a checkpoint the task
	// ended before taking.
	ErrTaskEnded = fmt.Errorf("%w: it has ended", ErrTaskNotRunning)
	// ErrCheckpointingOff: the task was deployed without checkpointing.
	ErrCheckpointingOff = errors.New("dataflow: checkpointing is off")
	// ErrUnalignedRescale: the task restores an unaligned checkpoint,
	// which holds records in flight between subtasks, at a parallelism
	// other than the one it was taken at.
	ErrUnalignedRescale = errors.New("dataflow: an unaligned checkpoint cannot be restored at another parallelism")
)

// ctlKind is the kind of a message to the task goroutine.
type ctlKind uint8

const (
	ctlTrigger ctlKind = iota + 1
	ctlComplete
	ctlAbort
)

type ctlMsg struct {
	kind      ctlKind
	id, ts    int64
	full      bool // a trigger of a savepoint
	drain     bool // a trigger of a stop with --drain (full too)
	unaligned bool // TriggerUnalignedCheckpoint
}

type ctlState uint8

const (
	ctlNew ctlState = iota
	ctlRunning
	ctlDone
)

// taskControl carries triggers and notifications from any goroutine to the
// task goroutine, which checks wake between batches (a receive with a
// default case: no lock on the data path) and while it waits.
type taskControl struct {
	wake chan struct{} // capacity 1

	mu struct {
		sync.Mutex
		state ctlState
		queue []ctlMsg
	}
}

func (c *taskControl) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// take moves the queued messages into buf.
func (c *taskControl) take(buf []ctlMsg) []ctlMsg {
	c.mu.Lock()
	buf = append(buf[:0], c.mu.queue...)
	clear(c.mu.queue)
	c.mu.queue = c.mu.queue[:0]
	c.mu.Unlock()
	return buf
}

// TriggerCheckpoint asks a source task to take checkpoint id, triggered at
// timestamp (Unix ms). It only queues the trigger: the task snapshots
// between two Poll calls (also while the source is idle, or after its
// input ended while it waits for its final checkpoint), then reports to
// its hooks and emits the barrier. It is safe from any goroutine, also
// before Run (the trigger waits for it). It fails with ErrNotSourceTask,
// ErrCheckpointingOff, or ErrTaskEnded (an ErrTaskNotRunning) once the
// task ended.
func (t *Task) TriggerCheckpoint(id, timestamp int64) error {
	return t.trigger(ctlMsg{kind: ctlTrigger, id: id, ts: timestamp})
}

// TriggerUnalignedCheckpoint is TriggerCheckpoint for an unaligned
// checkpoint. An ExactlyOnce source task never waits for credit while it
// sends (what its output channels cannot take waits in the task, one Poll's
// output at most, and goes as credit arrives), so it takes a trigger
// between two Poll calls even while its output is backpressured. The
// barrier of an aligned checkpoint then queues behind the batches waiting
// in the task; that of an unaligned one overtakes them, and the snapshot
// keeps them as channel state (list state of the chain's head, under names
// starting "weir.channel-state/"; SnapshotStats.ChannelStateBytes), which a
// restore at the same parallelism sends first, before any new output.
//
// Downstream the barrier is unaligned too: it overtakes the batches
// buffered in the input channel it arrives on (the network queue's included
// once they land), the task snapshots at its first barrier without
// blocking any channel and forwards the barrier at once, and the batches
// overtaken, and those the task takes from a channel before that channel's
// barrier, are its channel state, reported with the snapshot once every
// channel delivered the barrier; a restore puts them in front of their
// channels. A task restoring channel state at another parallelism fails
// with ErrUnalignedRescale. At-least-once tasks take an aligned
// checkpoint, and so does a source whose input ended (the final checkpoint
// must cover all the output); a task that receives aligned and unaligned
// barriers of one checkpoint takes it unaligned. A source blocked inside its own Poll sees the trigger only
// when Poll returns, and a task with inputs blocked sending a batch sees a
// barrier once that send got its credit.
func (t *Task) TriggerUnalignedCheckpoint(id, timestamp int64) error {
	return t.trigger(ctlMsg{kind: ctlTrigger, id: id, ts: timestamp, unaligned: true})
}

// TriggerSavepoint is TriggerCheckpoint for the checkpoint of a savepoint:
// every operator of the job snapshots its keyed state in the canonical
// format (stream.SnapshotContext.Full), whatever its state backend, so
// that the savepoint restores into any backend.
func (t *Task) TriggerSavepoint(id, timestamp int64) error {
	return t.trigger(ctlMsg{kind: ctlTrigger, id: id, ts: timestamp, full: true})
}

// TriggerDrain is TriggerSavepoint for the savepoint of a stop with
// --drain. Before its snapshot the source task ends its input as if its
// source had returned stream.PollEnd: processing-time timers stop and the
// chain emits stream.MaxWatermark, so that every event-time timer and
// window downstream fires and emits its output ahead of the barrier. The
// source is not polled again. Once checkpoint id completes, the task
// finishes like a source whose input ended. Should checkpoint id be
// aborted instead, or the task be told the outcome of a later checkpoint
// first (the stop did not happen at id), Run fails with an error wrapping
// ErrDrainAborted: its output went past the maximum watermark, so it must
// restart from a checkpoint. A source whose input had already ended only
// takes the savepoint.
func (t *Task) TriggerDrain(id, timestamp int64) error {
	return t.trigger(ctlMsg{kind: ctlTrigger, id: id, ts: timestamp, full: true, drain: true})
}

// ErrDrainAborted is wrapped by the error of a source task whose
// checkpoint of a stop with --drain was aborted (TriggerDrain).
var ErrDrainAborted = errors.New("dataflow: the checkpoint of a stop with --drain was aborted")

func (t *Task) trigger(m ctlMsg) error {
	id := m.id
	if t.chain[0].src == nil {
		return fmt.Errorf("task %s: checkpoint %d: %w; only source tasks are triggered, the others checkpoint when barriers arrive", t.name, id, ErrNotSourceTask)
	}
	if !t.spec.Checkpointing {
		return fmt.Errorf("task %s: checkpoint %d: %w; deploy the task with Checkpointing set", t.name, id, ErrCheckpointingOff)
	}
	c := &t.ctl
	c.mu.Lock()
	if c.mu.state == ctlDone {
		c.mu.Unlock()
		return fmt.Errorf("task %s: checkpoint %d: %w", t.name, id, ErrTaskEnded)
	}
	// Before Run too: a deployed task may be triggered while it restores
	// its state; it takes the checkpoint once it runs (or reports it
	// failed if it ends first).
	c.mu.queue = append(c.mu.queue, m)
	c.mu.Unlock()
	c.signal()
	return nil
}

// NotifyCheckpointComplete tells the task that checkpoint id completed. On
// the task goroutine, between batches, every operator of the chain that
// implements stream.CheckpointListener is notified, head first. Ids not
// higher than the last notification delivered (complete or aborted) are
// dropped. An error from an operator fails the task. It is safe from any
// goroutine; it does nothing once the task has ended or when checkpointing
// is off.
func (t *Task) NotifyCheckpointComplete(id int64) { t.notify(ctlComplete, id) }

// NotifyCheckpointAborted tells the task that checkpoint id was aborted,
// like NotifyCheckpointComplete. A task still aligning barriers of id (or
// an older checkpoint) stops and unblocks its channels.
func (t *Task) NotifyCheckpointAborted(id int64) { t.notify(ctlAbort, id) }

func (t *Task) notify(kind ctlKind, id int64) {
	if !t.spec.Checkpointing {
		return
	}
	c := &t.ctl
	c.mu.Lock()
	if c.mu.state == ctlDone {
		c.mu.Unlock()
		return
	}
	c.mu.queue = append(c.mu.queue, ctlMsg{kind: kind, id: id})
	c.mu.Unlock()
	c.signal()
}

// checkpointRun is the checkpoint state of one Run call (task goroutine
// only).
type checkpointRun struct {
	on    bool
	hooks CheckpointHooks
	gate  *inputGate
	align *aligner // nil at source tasks
	buf   []ctlMsg

	lastTriggered int64 // sources: highest trigger taken
	lastSnapshot  int64 // highest checkpoint snapshotted successfully
	lastNotified  int64 // highest notification delivered
	lastCompleted int64 // highest completion delivered
	// Sources: inputEnded is set once Poll returned PollEnd, or a trigger
	// drained the source; finalFrom is the first checkpoint snapshotted
	// after that (0: none yet). drainedAt is the checkpoint whose trigger
	// drained the source (0: none).
	inputEnded bool
	finalFrom  int64
	drainedAt  int64
	// full are the savepoints among the checkpoints being aligned (their
	// barriers said so); an entry goes once its checkpoint is taken.
	full map[int64]bool
	// final are the checkpoints being aligned one of whose barriers was
	// final (event.final): they never switch to unaligned.
	final map[int64]bool
	// un is the unaligned checkpoint whose barriers are arriving at a task
	// with inputs (nil: none); unLast the highest one reported or given up.
	un     *unalignedRun
	unLast int64
	// alarm is the checkpoint whose aligned-checkpoint timeout has the
	// timer alarmTimer armed (0: none); the timer wakes the task goroutine.
	alarm      int64
	alarmTimer *time.Timer
}

// control handles the queued triggers and notifications.
func (r *taskRun) control() error {
	ck := &r.ck
	ck.buf = r.t.ctl.take(ck.buf)
	for _, m := range ck.buf {
		var err error
		switch m.kind {
		case ctlTrigger:
			err = r.triggered(m)
		case ctlComplete, ctlAbort:
			err = r.notified(m.kind, m.id)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// triggered takes the checkpoint of trigger m at a source task (m.full: of
// a savepoint; m.drain: ending the input first, see TriggerDrain).
func (r *taskRun) triggered(m ctlMsg) error {
	ck := &r.ck
	id, ts, full := m.id, m.ts, m.full
	if id <= ck.lastTriggered {
		ck.hooks.SnapshotFailed(id, fmt.Errorf("task %s: checkpoint %d: not newer than checkpoint %d, which this task already took; checkpoint ids must increase", r.t.name, id, ck.lastTriggered))
		return nil
	}
	ck.lastTriggered = id
	if m.drain && !ck.inputEnded {
		if err := r.drain(id); err != nil {
			return err
		}
	}
	// An unaligned checkpoint (never a savepoint): the barrier overtakes
	// the batches waiting for credit, which the snapshot keeps. Not once
	// the input ended: the final checkpoint must cover all the output, so
	// that two-phase-commit sinks downstream commit everything, and data
	// an unaligned barrier overtook would reach them after it.
	unaligned := m.unaligned && r.w.deferred && !full && !ck.inputEnded
	var channels map[string][][]byte
	var channelBytes int64
	if unaligned {
		var err error
		if channels, channelBytes, err = r.w.channelState(r.t.spec.Parallelism, r.t.outputSchema); err != nil {
			return fmt.Errorf("task %s: %w", r.t.name, err)
		}
	}
	ok := r.snapshotWith(id, ts, 0, full, channels, channelBytes)
	if r.err != nil { // an operator panicked in its snapshot
		return r.err
	}
	// The barrier goes downstream even when the snapshot failed: the
	// checkpoint is declined anyway, and downstream tasks must not wait for
	// it in alignment.
	if unaligned {
		r.w.overtake(event{kind: eventBarrier, value: id, ts: ts, unaligned: true})
	} else {
		r.w.broadcast(event{kind: eventBarrier, value: id, ts: ts, full: full, final: ck.inputEnded})
	}
	if r.err != nil {
		return r.err
	}
	if ok && ck.inputEnded && ck.finalFrom == 0 {
		ck.finalFrom = id
	}
	return nil
}

// drain ends the input of a source task for the stop with --drain whose
// checkpoint is id, as PollEnd does: processing time stops and the chain
// emits the maximum watermark, which fires every event-time timer and
// window of the chain and downstream before id's barrier. The source is
// not polled again (runSource) and finishes once id completes
// (waitDrained).
func (r *taskRun) drain(id int64) error {
	r.t.log.Info("source drained for a stop with a savepoint: maximum watermark emitted", "task", r.t.name, "checkpoint", id)
	r.pt.end()
	r.sourceOut.EmitWatermark(stream.MaxWatermark)
	if r.err != nil {
		return r.err
	}
	ck := &r.ck
	ck.inputEnded, ck.drainedAt = true, id
	return nil
}

// notified delivers a completion or abort notification.
func (r *taskRun) notified(kind ctlKind, id int64) error {
	ck := &r.ck
	if id <= ck.lastNotified {
		return nil
	}
	if d := ck.drainedAt; d > 0 && ck.lastCompleted < d && (id > d || kind == ctlAbort && id == d) {
		// The stop did not happen at the drained checkpoint. The source's
		// output went past the maximum watermark: running on (or
		// finishing at a later checkpoint) would give wrong results, so
		// the task fails and restarts from a checkpoint.
		what := "was aborted"
		if id > d {
			what = fmt.Sprintf("did not complete before checkpoint %d ended", id)
		}
		return fmt.Errorf("task %s: checkpoint %d, of a stop with --drain, %s after the source emitted the maximum watermark; "+
			"the task fails so that it restarts from the latest completed checkpoint; stop the job again: %w", r.t.name, d, what, ErrDrainAborted)
	}
	if g := r.t.spec.CommitGuard; kind == ctlComplete && g != nil {
		if err := g(id); err != nil {
			r.t.log.Warn("checkpoint completion not delivered; nothing is committed", "checkpoint", id, "err", err)
			return nil
		}
	}
	ck.lastNotified = id
	if kind == ctlComplete {
		ck.lastCompleted = id
	}
	if u := ck.un; u != nil && u.id <= id {
		ck.un, ck.unLast = nil, max(ck.unLast, u.id)
	}
	if ck.align != nil {
		// Neither an aborted checkpoint nor one older than a completed one
		// can complete any more: stop aligning it.
		if err := r.applyStep(ck.align.abortUpTo(id), nil, false); err != nil {
			return err
		}
	}
	for i := range r.t.chain {
		l := &r.t.chain[i]
		if l.cl == nil {
			continue
		}
		call, what := "NotifyCheckpointComplete", "complete"
		if kind == ctlAbort {
			call, what = "NotifyCheckpointAborted", "aborted"
		}
		err := r.t.guard(l, call, func() error {
			if kind == ctlComplete {
				return l.cl.NotifyCheckpointComplete(id)
			}
			return l.cl.NotifyCheckpointAborted(id)
		})
		if err != nil {
			return r.t.opErr(l.uid, fmt.Errorf("notification that checkpoint %d %s: %w", id, what, err))
		}
	}
	return nil
}

// snapshot takes the synchronous snapshot of checkpoint id of every
// Checkpointed operator of the chain, head first, and reports it to the
// hooks. It reports whether it succeeded. An operator that fails its
// snapshot fails only the checkpoint; one that panics in it fails the task
// too (r.err), since its state may be broken.
func (r *taskRun) snapshot(id, ts int64, aligning time.Duration, full bool) bool {
	return r.snapshotWith(id, ts, aligning, full, nil, 0)
}

// snapshotWith is snapshot for a checkpoint that keeps channel state too:
// the batches of channels (list state by name, channelBytes in all), kept
// with the snapshot of the chain's head.
func (r *taskRun) snapshotWith(id, ts int64, aligning time.Duration, full bool, channels map[string][][]byte, channelBytes int64) bool {
	snaps, sync, ok := r.syncSnapshot(id, ts, full)
	if ok {
		r.snapshotTaken(id, ts, snaps, SnapshotStats{Alignment: aligning, Sync: sync, ChannelStateBytes: channelBytes}, channels)
	}
	return ok
}

// syncSnapshot takes the synchronous snapshot of checkpoint id of the
// chain, as snapshot does, without reporting it when it succeeds; it
// returns the time it took.
func (r *taskRun) syncSnapshot(id, ts int64, full bool) (map[string]*stream.OperatorSnapshot, time.Duration, bool) {
	t := r.t
	start := time.Now()
	snaps := make(map[string]*stream.OperatorSnapshot, t.checkpointed)
	for i := range t.chain {
		l := &t.chain[i]
		if l.cp == nil && l.state == nil {
			continue
		}
		sc := &stream.SnapshotContext{CheckpointID: id, Timestamp: ts, KeyGroups: l.octx.KeyGroups, Full: full}
		if l.cp != nil {
			if err := t.guard(l, "SnapshotState", func() error { return l.cp.SnapshotState(sc) }); err != nil {
				err = t.opErr(l.uid, fmt.Errorf("snapshot for checkpoint %d: %w", id, err))
				r.ck.hooks.SnapshotFailed(id, err)
				if errors.Is(err, ErrOperatorPanic) {
					r.fail(err)
				}
				return nil, 0, false
			}
		}
		if l.state != nil {
			sc.KeyGroups = l.state.KeyGroups()
			if err := l.state.Snapshot(sc); err != nil {
				r.ck.hooks.SnapshotFailed(id, t.opErr(l.uid, fmt.Errorf("snapshot of keyed state for checkpoint %d: %w", id, err)))
				return nil, 0, false
			}
		}
		snaps[l.uid] = &sc.State
	}
	return snaps, time.Since(start), true
}

// snapshotTaken reports the snapshot snaps of checkpoint id to the hooks,
// with the channel state channels (list state by name) kept with the
// snapshot of the chain's head.
func (r *taskRun) snapshotTaken(id, ts int64, snaps map[string]*stream.OperatorSnapshot, stats SnapshotStats, channels map[string][][]byte) {
	t := r.t
	if len(channels) > 0 {
		head := t.chain[0].uid
		snap := snaps[head]
		if snap == nil {
			snap = &stream.OperatorSnapshot{}
			snaps[head] = snap
		}
		if snap.List == nil {
			snap.List = make(map[string][][]byte, len(channels))
		}
		for name, items := range channels {
			snap.List[name] = items
		}
	}
	r.ck.lastSnapshot = id
	r.ck.hooks.SnapshotTaken(id, ts, snaps, stats)
}

// unalignedRun is an unaligned checkpoint at a task with inputs, between
// its first barrier (when the task snapshots and forwards the barrier) and
// its last (when the task reports the snapshot with the channel state).
type unalignedRun struct {
	id, ts int64
	began  time.Time
	sync   time.Duration
	snaps  map[string]*stream.OperatorSnapshot
	// arrived: the channel delivered the barrier or ended; missing counts
	// the others.
	arrived []bool
	missing int
	// state is the channel state by list-state name, bytes its size.
	state map[string][][]byte
	bytes int64
}

// inputStateName is the list-state name of the channel state of input
// channel ch at a task of parallelism p.
func inputStateName(p int, ch *inputChannel) string {
	return fmt.Sprintf("%sp%d/in%d/up%d", channelStatePrefix, p, ch.input, ch.key.UpstreamSubtask)
}

func (u *unalignedRun) record(name string, data []byte) {
	u.state[name] = append(u.state[name], data)
	u.bytes += int64(len(data))
}

// alignTimeout switches the checkpoint aligning at the task to unaligned
// once it has aligned for longer than TaskSpec.AlignedCheckpointTimeout
// (from its first barrier); before that it arms a timer that wakes the task
// goroutine when the timeout passes. Savepoints never switch.
func (r *taskRun) alignTimeout() error {
	ck := &r.ck
	limit := r.t.spec.AlignedCheckpointTimeout
	if limit <= 0 || ck.align == nil || r.t.mode != stream.ExactlyOnce || len(ck.align.pending) == 0 {
		return nil
	}
	p := ck.align.pending[0]
	if ck.full[p.id] || ck.final[p.id] {
		return nil
	}
	if left := limit - time.Since(p.began); left > 0 {
		if ck.alarm != p.id {
			ck.alarm = p.id
			if ck.alarmTimer == nil {
				ck.alarmTimer = time.AfterFunc(left, r.t.ctl.signal)
			} else {
				ck.alarmTimer.Reset(left)
			}
		}
		return nil
	}
	r.t.log.Debug("aligned checkpoint timeout: switching to unaligned", "task", r.t.name, "checkpoint", p.id, "aligning", time.Since(p.began))
	return r.onUnalignedBarrier(nil, p.id, p.ts)
}

// onUnalignedBarrier handles barrier id of an unaligned checkpoint arriving
// on ch, ahead of the batches it overtook there. A nil ch is the switch of
// the checkpoint aligning at the task to unaligned (alignTimeout): the
// aligned barriers still buffered in the channels that have not delivered
// theirs overtake the batches ahead of them, as unaligned ones do. The first barrier of id
// snapshots the chain and forwards the barrier at once; from then on the
// batches the task takes from a channel whose barrier has not arrived are
// channel state, and so are the batches each barrier overtook. Once every
// channel delivered the barrier or ended, the snapshot is reported with
// that channel state.
func (r *taskRun) onUnalignedBarrier(ch *inputChannel, id, ts int64) error {
	ck := &r.ck
	if (ck.un == nil || ck.un.id != id) && (id <= ck.unLast || id <= ck.align.last) {
		return nil // stale: taken, given up, or superseded
	}
	if u := ck.un; u != nil && u.id != id {
		if id < u.id {
			return nil
		}
		ck.hooks.SnapshotFailed(u.id, errkind.Mark(fmt.Errorf("task %s: checkpoint %d abandoned: the barrier of a later checkpoint arrived before every input channel delivered barrier %d (an upstream task skipped or aborted it)", r.t.name, u.id, u.id), errAbandoned))
		ck.unLast, ck.un = u.id, nil
	}
	if ck.un == nil {
		// Older checkpoints still aligning cannot complete any more. If
		// id itself is aligning (a source whose input ended sends aligned
		// barriers), it goes on unaligned: the channels that delivered
		// its barrier have arrived.
		var alignedArrived []bool
		began := time.Now()
		if p := ck.align.pendingOf(id); p != nil {
			alignedArrived = slices.Clone(p.arrived)
			began = p.began
		}
		step := ck.align.abortUpTo(id)
		step.aborted = slices.DeleteFunc(step.aborted, func(a int64) bool { return a == id })
		if err := r.applyStep(step, nil, true); err != nil {
			return err
		}
		snaps, sync, ok := r.syncSnapshot(id, ts, false)
		if r.err != nil {
			return r.err
		}
		r.w.broadcast(event{kind: eventBarrier, value: id, ts: ts, unaligned: true})
		if r.err != nil {
			return r.err
		}
		if !ok {
			ck.unLast = id
			return nil
		}
		u := &unalignedRun{id: id, ts: ts, began: began, sync: sync, snaps: snaps,
			arrived: make([]bool, len(ck.gate.channels)), state: make(map[string][][]byte)}
		for i, c := range ck.gate.channels {
			if c.ended || alignedArrived != nil && alignedArrived[i] {
				u.arrived[i] = true
			} else {
				u.missing++
			}
		}
		ck.un = u
		if ch == nil {
			for i, c := range ck.gate.channels {
				if !u.arrived[i] {
					ck.gate.promote(c, id)
				}
			}
		}
	}
	u := ck.un
	if ch != nil && !u.arrived[ch.idx] {
		u.arrived[ch.idx] = true
		u.missing--
		name := inputStateName(r.t.spec.Parallelism, ch)
		var err error
		// The batches are decoded ahead of the task, with a copy of the
		// channel dictionary (selfContained).
		var dec *batchcodec.Decoder
		ck.gate.overtaken(ch, id, func(e *event, mark bool) {
			if err != nil {
				return
			}
			if dec == nil && e.batch == nil {
				dec = ch.dictionary().Clone()
			}
			var data []byte
			if data, err = selfContained(e, dec, ch.schema); err == nil && mark {
				u.record(name, data)
			}
		})
		if err != nil {
			return fmt.Errorf("task %s: channel %v: %w", r.t.name, ch.key, err)
		}
	}
	return r.settleUnaligned()
}

// recordInput keeps batch b, taken from ch, as channel state of the
// unaligned checkpoint in progress if ch has not delivered its barrier.
func (r *taskRun) recordInput(ch *inputChannel, b *stream.Batch) {
	u := r.ck.un
	if u == nil || u.arrived[ch.idx] {
		return
	}
	u.record(inputStateName(r.t.spec.Parallelism, ch), batchcodec.Append(nil, b))
}

// unalignedEnd counts the end of ch as its barrier for the unaligned
// checkpoint in progress.
func (r *taskRun) unalignedEnd(ch *inputChannel) error {
	if u := r.ck.un; u != nil && !u.arrived[ch.idx] {
		u.arrived[ch.idx] = true
		u.missing--
	}
	return r.settleUnaligned()
}

// settleUnaligned reports the unaligned checkpoint in progress once every
// channel delivered its barrier or ended.
func (r *taskRun) settleUnaligned() error {
	ck := &r.ck
	u := ck.un
	if u == nil || u.missing > 0 {
		return nil
	}
	ck.un, ck.unLast = nil, u.id
	r.snapshotTaken(u.id, u.ts, u.snaps, SnapshotStats{Alignment: time.Since(u.began), Sync: u.sync, ChannelStateBytes: u.bytes}, u.state)
	return nil
}

// onBarrier handles barrier id arriving on ch (full: of a savepoint;
// final: it must stay aligned, event.final).
func (r *taskRun) onBarrier(ch *inputChannel, id, ts int64, full, final bool) error {
	if full {
		if r.ck.full == nil {
			r.ck.full = make(map[int64]bool)
		}
		r.ck.full[id] = true
	}
	if final {
		if r.ck.final == nil {
			r.ck.final = make(map[int64]bool)
		}
		r.ck.final[id] = true
	}
	return r.applyStep(r.ck.align.barrier(ch.idx, id, ts), ch, true)
}

// onEnd handles the end of ch.
func (r *taskRun) onEnd(ch *inputChannel) error {
	return r.applyStep(r.ck.align.end(ch.idx), ch, true)
}

// applyStep carries out what the aligner decided. report says whether
// abandoned checkpoints are reported as failed (not when the coordinator
// itself aborted them).
func (r *taskRun) applyStep(s alignStep, ch *inputChannel, report bool) error {
	gate := r.ck.gate
	if report {
		for _, id := range s.aborted {
			r.ck.hooks.SnapshotFailed(id, errkind.Mark(fmt.Errorf("task %s: checkpoint %d abandoned: the barrier of a later checkpoint arrived before every input channel delivered barrier %d (an upstream task skipped or aborted it)", r.t.name, id, id), errAbandoned))
		}
	}
	if s.block {
		gate.block(ch)
	}
	for _, d := range s.done {
		full, final := r.ck.full[d.id], r.ck.final[d.id]
		for id := range r.ck.full {
			if id <= d.id {
				delete(r.ck.full, id)
			}
		}
		for id := range r.ck.final {
			if id <= d.id {
				delete(r.ck.final, id)
			}
		}
		r.snapshot(d.id, d.ts, d.aligning, full)
		if r.err != nil { // an operator panicked in its snapshot
			return r.err
		}
		r.w.broadcast(event{kind: eventBarrier, value: d.id, ts: d.ts, full: full, final: final})
		if r.err != nil {
			return r.err
		}
	}
	if len(s.unblock) > 0 {
		gate.unblock(s.unblock)
	}
	return nil
}

// waitFinal blocks until done() holds, handling triggers and notifications
// meanwhile, or until ctx is done.
func (r *taskRun) waitFinal(ctx context.Context, done func() bool) error {
	r.t.awaitingFinal.Store(true)
	defer r.t.awaitingFinal.Store(false)
	if r.w.deferred {
		return r.pumpOutput(ctx, done)
	}
	m := &r.t.metrics
	for !done() {
		m.startIdle()
		select {
		case <-r.t.ctl.wake:
			m.endIdle()
			if err := r.control(); err != nil {
				return err
			}
		case <-ctx.Done():
			m.endIdle()
			return ctx.Err()
		}
	}
	return nil
}

// pumpInterval is how often pumpOutput looks at its channels without a
// signal, so that a network stream that broke under a waiting batch is
// noticed.
const pumpInterval = 50 * time.Millisecond

// pumpOutput sends what waits in the deferred output channels as credit
// arrives, handling triggers and notifications meanwhile, until nothing
// waits and done (nil: at once) holds. Time with batches waiting counts as
// backpressure.
func (r *taskRun) pumpOutput(ctx context.Context, done func() bool) error {
	m := &r.t.metrics
	waiting := false
	defer func() {
		if waiting {
			m.endBackpressure()
		}
	}()
	var tick *time.Ticker
	defer func() {
		if tick != nil {
			tick.Stop()
		}
	}()
	for {
		left, err := r.w.flush()
		if err != nil {
			return fmt.Errorf("task %s: %w", r.t.name, err)
		}
		if left != waiting {
			if left {
				m.startBackpressure()
			} else {
				m.endBackpressure()
			}
			waiting = left
		}
		if !left && (done == nil || done()) {
			return nil
		}
		if !left {
			m.startIdle() // for the outcome of the final checkpoint
		}
		var ticks <-chan time.Time
		if left {
			if tick == nil {
				tick = time.NewTicker(pumpInterval)
			}
			ticks = tick.C
		}
		select {
		case <-r.w.wake:
		case <-ticks:
		case <-r.t.ctl.wake:
			m.endIdle()
			if err := r.control(); err != nil {
				return err
			}
			if r.err != nil {
				return r.err
			}
		case <-ctx.Done():
			m.endIdle()
			return ctx.Err()
		}
		m.endIdle()
	}
}

// endControl stops accepting triggers and notifications and reports the
// checkpoints the task will not take. It is idempotent.
func (r *taskRun) endControl() {
	c := &r.t.ctl
	c.mu.Lock()
	c.mu.state = ctlDone
	queued := c.mu.queue
	c.mu.queue = nil
	c.mu.Unlock()
	if !r.ck.on {
		return
	}
	if r.ck.alarmTimer != nil {
		r.ck.alarmTimer.Stop()
	}
	ending := func(id int64) {
		r.ck.hooks.SnapshotFailed(id, errkind.Mark(fmt.Errorf("task %s: checkpoint %d: the task ended before it took the checkpoint", r.t.name, id), ErrTaskEnded))
	}
	for _, m := range queued {
		if m.kind == ctlTrigger {
			ending(m.id)
		}
	}
	if r.ck.align != nil {
		for _, id := range r.ck.align.abortAll() {
			ending(id)
		}
	}
	if u := r.ck.un; u != nil {
		r.ck.un = nil
		ending(u.id)
	}
}

// restore loads the state of every operator that has some in the spec.
func (t *Task) restore() error {
	if t.spec.RestoreFinished {
		return nil
	}
	id := t.spec.RestoreCheckpointID
	job := t.spec.RestoreJobID
	if job == "" {
		job = t.spec.JobID
	}
	for uid, snap := range t.spec.Restore {
		if !t.inChain(uid) && !snap.Empty() {
			t.log.Warn("restore: the state of an operator that is not in this task's chain is ignored", "operator", uid, "checkpoint", id)
		}
	}
	for i := range t.chain {
		l := &t.chain[i]
		snap := t.spec.Restore[l.uid]
		if snap == nil {
			continue
		}
		if i == 0 {
			snap = t.takeChannelState(snap)
		}
		if l.keyed {
			// The keyed part went to the backend (openKeyedState).
			snap = &stream.OperatorSnapshot{List: snap.List, Union: snap.Union}
		}
		if l.cp == nil {
			if snap.Empty() {
				continue
			}
			return t.opErr(l.uid, fmt.Errorf("restore from checkpoint %d: the checkpoint has state for it, but its type does not implement stream.Checkpointed; was the operator's type changed under the same uid?", id))
		}
		rc := &stream.RestoreContext{CheckpointID: id, JobID: job, KeyGroups: l.octx.KeyGroups, State: snap}
		if err := t.guard(l, "RestoreState", func() error { return l.cp.RestoreState(rc) }); err != nil {
			return t.opErr(l.uid, fmt.Errorf("restore from checkpoint %d: %w", id, err))
		}
	}
	return nil
}

// takeChannelState moves the channel state of an unaligned checkpoint out
// of the source's snapshot into t.channelState, and returns the rest.
func (t *Task) takeChannelState(snap *stream.OperatorSnapshot) *stream.OperatorSnapshot {
	var rest map[string][][]byte
	found := false
	for name := range snap.List {
		if strings.HasPrefix(name, channelStatePrefix) {
			found = true
			break
		}
	}
	if !found {
		return snap
	}
	t.channelState = make(map[string][][]byte)
	for name, items := range snap.List {
		if strings.HasPrefix(name, channelStatePrefix) {
			t.channelState[name] = items
			continue
		}
		if rest == nil {
			rest = make(map[string][][]byte)
		}
		rest[name] = items
	}
	out := *snap
	out.List = rest
	return &out
}

func (t *Task) inChain(uid string) bool {
	for i := range t.chain {
		if t.chain[i].uid == uid {
			return true
		}
	}
	return false
}

// openKeyedState opens, and restores from the checkpoint the task starts
// from, the keyed-state backend of every operator whose keyed state the
// runtime owns, before the operators are opened.
func (t *Task) openKeyedState() error {
	for i := range t.chain {
		l := &t.chain[i]
		if !l.keyed {
			continue
		}
		var snap *stream.OperatorSnapshot
		if !t.spec.RestoreFinished {
			snap = t.spec.Restore[l.uid]
		}
		m, err := backends.OpenManaged(l.octx, t.spec.RestoreCheckpointID, snap)
		if err != nil {
			return t.opErr(l.uid, fmt.Errorf("keyed state: %w", err))
		}
		l.state = m
		l.octx.KeyedState = m.Backend()
	}
	return nil
}

// closeKeyedState closes the keyed-state backends opened by openKeyedState;
// finished says the task finished (its local snapshots are removed too).
func (t *Task) closeKeyedState(finished bool) error {
	var first error
	for i := range t.chain {
		l := &t.chain[i]
		if l.state == nil {
			continue
		}
		if err := l.state.Close(!finished); err != nil {
			t.log.Warn("closing keyed state failed", "operator", l.uid, "err", err)
			if first == nil {
				first = t.opErr(l.uid, fmt.Errorf("closing keyed state: %w", err))
			}
		}
		l.state = nil
		l.octx.KeyedState = nil
	}
	return first
}
