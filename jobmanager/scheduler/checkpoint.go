package scheduler

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/weirstream/weir/coordinator"
	"github.com/weirstream/weir/stream"
)

// The checkpoint half of the scheduler: it owns one coordinator.Coordinator per
// job that takes checkpoints, feeds it the job's events and turns its
// actions into the shell's actions. Everything here runs under the shell's
// lock, like the rest of the scheduler.

// AckStats are the measurements of a checkpoint acknowledgement.
type AckStats = coordinator.AckStats

// startCheckpointing creates or resets j's coordinator when j reaches
// RUNNING: every execution must acknowledge, and the executions of tasks
// whose head is a source receive the triggers.
func (c *Scheduler) startCheckpointing(j *job, now time.Time) []Action {
	if !j.opts.Checkpoint.Enabled() {
		return nil
	}
	var tasks, sources []coordinator.TaskID
	for _, ex := range j.execs {
		tasks = append(tasks, ex.taskID())
		if len(j.graph.Inputs(ex.spec.Head)) == 0 {
			sources = append(sources, ex.taskID())
		}
	}
	if j.coord == nil {
		j.coord = coordinator.New(coordinator.ConfigFrom(j.opts.Checkpoint), tasks, sources, max(j.opts.FirstCheckpointID, 1), now)
		if r := j.opts.Restore; r != nil && !j.opts.RestoreForeign {
			// Retained like the coordinator's own, until a newer one
			// completes and retention discards it.
			j.coord.AdoptCompleted(r.CheckpointID(), nil)
			j.coord.AdoptOlder(j.opts.RestoreRetained)
		}
	} else {
		j.coord.Reset(now, tasks, sources)
	}
	for _, ex := range j.execs {
		if ex.state == TaskFinished {
			j.coord.TaskFinished(now, ex.taskID())
		}
	}
	return c.drainCoordinator(j, now)
}

// stopCheckpointing stops j's coordinator, aborting its pending
// checkpoints with cause (coordinator.CauseFailover or CauseJobEnded). A
// checkpoint whose manifest is being written is not aborted: the
// coordinator ends it when the write returns (manifestWritten), so that a
// checkpoint whose manifest and pointer were written is never deleted.
func (c *Scheduler) stopCheckpointing(j *job, cause coordinator.AbortCause, reason string, now time.Time) []Action {
	abandoned := j.stopAt > 0 && !j.stopped
	if abandoned {
		j.stopFailed = fmt.Sprintf("checkpoint %d of the stop did not complete: %s", j.stopAt, reason)
		c.log.Warn("stop with a savepoint abandoned", "job", j.id, "checkpoint", j.stopAt, "reason", reason)
		j.stopAt = 0
	}
	var acts []Action
	if j.coord != nil && !j.coord.Stopped() {
		j.coord.Stop(now, cause, reason)
		acts = c.drainCoordinator(j, now)
	}
	if abandoned {
		// Only now: a drained source learns of the abort of the drained
		// checkpoint and fails (its region restarts from the latest
		// completed checkpoint), while the checkpoints withheld after it
		// are aborted without a word to the tasks, which never took them.
		j.drainAt = 0
	}
	return acts
}

// writingManifest reports whether a manifest write of j is in flight.
func writingManifest(j *job) bool {
	if j.coord == nil {
		return false
	}
	_, ok := j.coord.Writing()
	return ok
}

// retainedCheckpoints are the completed checkpoints of j whose files
// exist: the coordinator's, or before it started the one the job was
// recovered from. None once the job's checkpoints were swept.
func retainedCheckpoints(j *job) []int64 {
	switch {
	case j.swept:
		return nil
	case j.coord != nil:
		return j.coord.Retained()
	case j.opts.Restore != nil && !j.opts.RestoreForeign:
		id := j.opts.Restore.CheckpointID()
		older := slices.DeleteFunc(slices.Clone(j.opts.RestoreRetained), func(o int64) bool { return o >= id })
		return append(older, id)
	}
	return nil
}

// checkpointFailures counts the checkpoints of j that ended without
// completing: failed by their own fault (declined, expired, manifest write
// failed) and aborted for another reason (subsumed, stopped by a failover,
// a cancel or the end of the job, their tasks finished).
func checkpointFailures(j *job) (failed, aborted int64) {
	if j.coord == nil {
		return 0, 0
	}
	for cause, n := range j.coord.AbortCounts() {
		if cause.IsFailure() {
			failed += int64(n)
		} else {
			aborted += int64(n)
		}
	}
	return failed, aborted
}

// drainCoordinator turns the coordinator's pending actions into the
// shell's.
func (c *Scheduler) drainCoordinator(j *job, now time.Time) []Action {
	var acts []Action
	var fail string
	for _, a := range j.coord.Ready() {
		switch a := a.(type) {
		case coordinator.TriggerAction:
			if j.drainAt > 0 && a.ID > j.drainAt {
				// Past the drained checkpoint the sources read nothing,
				// and must learn no outcome but the drained checkpoint's
				// (a drained source fails on any other): the trigger is
				// withheld; the stop, or its failure, aborts it.
				c.log.Debug("checkpoint trigger withheld: a stop with --drain is in progress", "job", j.id, "checkpoint", a.ID, "drain", j.drainAt)
				continue
			}
			c.log.Debug("checkpoint triggered", "job", j.id, "checkpoint", a.ID, "sources", len(a.Sources))
			for _, t := range a.Sources {
				ex := j.exec(t.Vertex, t.Subtask)
				if ex == nil || ex.tm == nil {
					continue
				}
				acts = append(acts, TriggerAction{Target: targetOf(j, ex), CheckpointID: a.ID, Timestamp: a.Timestamp,
					Savepoint: j.savepoints[a.ID], Drain: a.ID == j.drainAt,
					// With an aligned-checkpoint timeout, checkpoints start
					// aligned and the tasks switch them (the deployment
					// carries the timeout).
					Unaligned: j.opts.Checkpoint.Unaligned && j.opts.Checkpoint.AlignedCheckpointTimeout == 0 && !j.savepoints[a.ID]})
			}
		case coordinator.WriteManifestAction:
			finished := append(slices.Clone(a.Finished), restoredFinished(j)...)
			slices.SortFunc(finished, func(x, y coordinator.TaskID) int {
				return cmp.Or(cmp.Compare(x.Vertex, y.Vertex), cmp.Compare(x.Subtask, y.Subtask))
			})
			acts = append(acts, WriteManifestAction{JobID: j.id, Graph: j.graph, Mode: j.opts.Checkpoint.Mode, ID: a.ID,
				Triggered: a.Timestamp, Completed: now, Acks: a.Acks, Finished: slices.Compact(finished), Retained: a.Retained})
		case coordinator.NotifyCompleteAction:
			acts = append(acts, c.notifyActions(j, a.ID, a.Tasks, true)...)
		case coordinator.AbortAction:
			if a.Cause.IsFailure() {
				c.log.Warn("checkpoint failed", "job", j.id, "checkpoint", a.ID, "cause", a.Cause.String(), "reason", a.Reason)
			} else {
				c.log.Info("checkpoint aborted", "job", j.id, "checkpoint", a.ID, "cause", a.Cause.String(), "reason", a.Reason)
			}
			if j.drainAt == 0 || a.ID <= j.drainAt { // later ones were withheld: no task took them
				acts = append(acts, c.notifyActions(j, a.ID, a.Tasks, false)...)
			}
			// No manifest write of it is in flight (the coordinator aborts a
			// checkpoint being written only when the write failed), so
			// nothing names its files.
			acts = append(acts, DeleteCheckpointsAction{JobID: j.id, IDs: []int64{a.ID}})
		case coordinator.DiscardAction:
			acts = append(acts, DeleteCheckpointsAction{JobID: j.id, IDs: slices.Clone(a.IDs)})
		case coordinator.FailJobAction:
			fail = a.Reason
		}
	}
	if fail != "" && j.state.active() {
		acts = append(acts, c.jobFailure(j, "checkpointing failed: "+fail, now)...)
	}
	return acts
}

// notifyActions tells the listed tasks of j about checkpoint id, unless
// the job has ended or a task never reached its taskmanager.
func (c *Scheduler) notifyActions(j *job, id int64, tasks []coordinator.TaskID, complete bool) []Action {
	if j.state.Terminal() {
		return nil
	}
	acts := make([]Action, 0, len(tasks))
	for _, t := range tasks {
		ex := j.exec(t.Vertex, t.Subtask)
		if ex == nil || ex.tm == nil || !ex.deployed || ex.state.Terminal() {
			continue
		}
		acts = append(acts, NotifyAction{Target: targetOf(j, ex), CheckpointID: id, Complete: complete})
	}
	return acts
}

// retentionDeletes deletes the checkpoints of a job that ended CANCELED or
// FINISHED, unless its checkpoints are retained on cancel: the retained
// ones, and whatever else of the job's is still in storage (the files of
// checkpoints whose deletion failed, for one). A FAILED job keeps its
// retained checkpoints, so that it can later be restored from them.
func (c *Scheduler) retentionDeletes(j *job) []Action {
	if !j.state.Terminal() || writingManifest(j) || j.swept || !j.opts.Checkpoint.Enabled() {
		return nil
	}
	if j.state == JobFailed || j.opts.Checkpoint.Retention == stream.RetainOnCancel {
		// Kept: only what no retained checkpoint needs goes.
		if j.tidied {
			return nil
		}
		j.tidied = true
		return []Action{DeleteCheckpointsAction{JobID: j.id, Tidy: true}}
	}
	ids := retainedCheckpoints(j)
	j.swept = true
	c.log.Info("deleting the job's checkpoints", "job", j.id, "state", j.state.String(), "retained", ids)
	return []Action{DeleteCheckpointsAction{JobID: j.id, IDs: ids, All: true}}
}

// restoredFinished are the executions of j that their attempt restored as
// finished.
func restoredFinished(j *job) []coordinator.TaskID {
	var out []coordinator.TaskID
	for _, ex := range j.execs {
		if ex.restoredFinished {
			out = append(out, ex.taskID())
		}
	}
	return out
}

// checkpointExec finds the execution an acknowledgement or decline is
// about, or nil (counted as stale) when it is not the execution's current
// attempt, the execution is unknown, it was not deployed to taskmanager
// tmID (an empty or another id never matches), or the job is not
// RUNNING.
func (c *Scheduler) checkpointExec(tmID, jobID string, vertex, subtask int, attempt int64) (*job, *execution) {
	j := c.jobs[jobID]
	var ex *execution
	if j != nil {
		ex = j.exec(vertex, subtask)
	}
	if ex == nil || j.coord == nil || j.state != JobRunning || attempt != ex.attempt ||
		ex.tm == nil || ex.tm.id != tmID || ex.tm.lost {
		c.staleAcks++
		current := int64(0)
		if ex != nil {
			current = ex.attempt
		}
		c.log.Debug("stale checkpoint acknowledgement or decline dropped", "job", jobID, "vertex", vertex, "subtask", subtask,
			"attempt", attempt, "currentAttempt", current, "taskmanager", tmID)
		return nil, nil
	}
	return j, ex
}

// Ack records a task's acknowledgement of checkpoint id; payload is what
// the task wrote (opaque here; WriteManifestAction.Acks carries it back).
func (c *Scheduler) Ack(tmID, jobID string, vertex, subtask int, attempt, id int64, payload any, st AckStats, now time.Time) []Action {
	j, ex := c.checkpointExec(tmID, jobID, vertex, subtask, attempt)
	if ex == nil {
		return nil
	}
	ex.alignment = st.AlignmentDuration
	j.coord.Ack(now, ex.taskID(), id, payload, st)
	return c.drainCoordinator(j, now)
}

// Decline records that a task could not take checkpoint id.
func (c *Scheduler) Decline(tmID, jobID string, vertex, subtask int, attempt, id int64, reason string, now time.Time) []Action {
	j, ex := c.checkpointExec(tmID, jobID, vertex, subtask, attempt)
	if ex == nil {
		return nil
	}
	j.coord.Decline(now, ex.taskID(), id, reason)
	return c.drainCoordinator(j, now)
}

// TriggerFailed records that a trigger could not be delivered: the source
// declines the checkpoint.
func (c *Scheduler) TriggerFailed(a TriggerAction, err error, now time.Time) []Action {
	return c.Decline(a.TaskManager, a.JobID, a.Vertex, a.Subtask, a.Attempt, a.CheckpointID,
		fmt.Sprintf("the trigger could not be delivered to taskmanager %s at %s: %v", a.TaskManager, a.Addr, err), now)
}

// ManifestWritten records the outcome of a WriteManifestAction. The
// coordinator decides what it means, also when checkpointing was stopped
// while the write was in flight: on success the checkpoint completes (the
// manifest and pointer are written, so it is the newest to restore), on
// failure it is aborted and deleted.
func (c *Scheduler) ManifestWritten(jobID string, cp Checkpoint, err error, now time.Time) []Action {
	return c.ManifestWrittenWith(jobID, cp, err, coordinator.StorageRequests{}, now)
}

// ManifestWrittenWith is ManifestWritten that also counts the storage
// requests the write made in the checkpoint's statistics.
func (c *Scheduler) ManifestWrittenWith(jobID string, cp Checkpoint, err error, storage coordinator.StorageRequests, now time.Time) []Action {
	j := c.jobs[jobID]
	if j == nil || j.coord == nil {
		return nil
	}
	id := cp.CheckpointID()
	if w, ok := j.coord.Writing(); !ok || w != id {
		return nil
	}
	j.coord.ManifestWrittenWith(now, id, err, storage)
	stop := false
	if latest, ok := j.coord.LatestID(); ok && latest == id {
		j.latest = cp
		keepRestorable(j, cp)
		c.log.Info("checkpoint completed", "job", j.id, "checkpoint", id, "coordinatorStopped", j.coord.Stopped())
		// A stop waits for its savepoint, or for any later checkpoint
		// that completes first: the job must end at the newest one, or
		// output its sinks committed would be replayed on resume.
		stop = j.stopAt > 0 && id >= j.stopAt && j.state == JobRunning
	}
	acts := c.drainCoordinator(j, now)
	if stop {
		drained := j.drainAt > 0 && id >= j.drainAt
		j.stopAt = id
		j.stopped = true
		acts = append(acts, c.stopCheckpointing(j, coordinator.CauseJobEnded, "job stopped with a savepoint", now)...)
		j.state = JobCanceling
		if drained {
			// The drained sources finish once they learn that the
			// checkpoint completed, and every other task after its
			// notification (so two-phase-commit sinks commit the windows
			// the maximum watermark fired); cancelling them now could
			// overtake the notifications. Stragglers are cancelled at
			// the deadline (drainTimedOut).
			j.drainWait = true
			j.cancelDeadline = now.Add(c.cfg.CancelTimeout)
			c.log.Info("job finishing after its drained savepoint", "job", j.id, "name", j.graph.Name, "checkpoint", id)
			return append(acts, c.maybeFinalize(j, now)...)
		}
		c.log.Info("job stopping after its savepoint", "job", j.id, "name", j.graph.Name, "checkpoint", id)
		acts = append(acts, c.cancelJobExecs(j, now)...)
		return append(acts, c.maybeFinalize(j, now)...)
	}
	acts = append(acts, c.retentionDeletes(j)...)
	acts = append(acts, c.maybeRestart(j, now)...)
	return append(acts, c.maybeRedeployRegions(j, now)...)
}

// keepRestorable records cp, just completed, as restorable and forgets the
// restorable checkpoints that retention discarded.
func keepRestorable(j *job, cp Checkpoint) {
	if j.restorable == nil {
		j.restorable = make(map[int64]Checkpoint)
	}
	j.restorable[cp.CheckpointID()] = cp
	retained := retainedCheckpoints(j)
	maps.DeleteFunc(j.restorable, func(id int64, _ Checkpoint) bool { return !slices.Contains(retained, id) })
}

// TriggerNow triggers a checkpoint of a running job at once.
func (c *Scheduler) TriggerNow(jobID string, now time.Time) (int64, []Action, error) {
	return c.triggerNow(jobID, false, now)
}

// triggerNow is TriggerNow; a savepoint's checkpoint does not wait behind
// periodic ones, and its triggers ask for canonical snapshots.
func (c *Scheduler) triggerNow(jobID string, savepoint bool, now time.Time) (int64, []Action, error) {
	j := c.jobs[jobID]
	switch {
	case j == nil:
		return 0, nil, notFound(jobID)
	case !j.opts.Checkpoint.Enabled():
		return 0, nil, fmt.Errorf("%w: job %s does not take checkpoints; set a checkpointing interval in its spec and submit it again", ErrCheckpointingOff, jobID)
	case j.state != JobRunning || j.coord == nil:
		return 0, nil, fmt.Errorf("%w: job %s is %s; checkpoints can be triggered only while it is RUNNING", ErrJobNotRunning, jobID, j.state)
	case restarting(j) > 0:
		return 0, nil, fmt.Errorf("%w: job %s has %d region(s) restarting; checkpoints resume once every region runs again", ErrJobNotRunning, jobID, restarting(j))
	}
	trigger := j.coord.TriggerNow
	if savepoint {
		trigger = j.coord.TriggerSavepoint
		if j.savepoints == nil {
			j.savepoints = make(map[int64]bool)
		}
		for id := range j.savepoints { // ended: older than the latest
			if latest, ok := j.coord.LatestID(); ok && id <= latest {
				delete(j.savepoints, id)
			}
		}
		// The id the trigger will take, so that its trigger actions,
		// drained below, are marked.
		j.savepoints[j.coord.NextID()] = true
	}
	id, err := trigger(now)
	if err != nil && savepoint {
		delete(j.savepoints, j.coord.NextID())
	}
	acts := c.drainCoordinator(j, now)
	if err != nil {
		return 0, acts, fmt.Errorf("%w: job %s: %v", ErrCheckpointNotTriggered, jobID, err)
	}
	return id, acts, nil
}

// TriggerSavepoint is TriggerNow for the checkpoint of a savepoint: its
// triggers ask every task to snapshot keyed state in the canonical format.
func (c *Scheduler) TriggerSavepoint(jobID string, now time.Time) (int64, []Action, error) {
	return c.triggerNow(jobID, true, now)
}

// StopWithSavepoint triggers a checkpoint of a running job and stops the
// job once it completes: its tasks are cancelled and it ends FINISHED,
// the checkpoint being the last state of the job (the shell copies it
// into a savepoint). Should the checkpoint fail, the job runs on and
// StopFailed says why.
//
// With drain (a stop with --drain) the triggers drain the sources
// (TriggerAction.Drain): each ends its input and emits the maximum
// watermark before the barrier, so that every event-time timer and window
// fires into the checkpoint. Once it completes, the tasks are not
// cancelled but finish by themselves after their completion notification
// (two-phase-commit sinks commit first); those still running after the
// cancel timeout are cancelled. Should the checkpoint fail, the job fails
// over (its restart strategy decides), since its sources' output already
// went past the maximum watermark.
func (c *Scheduler) StopWithSavepoint(jobID string, drain bool, now time.Time) (int64, []Action, error) {
	j := c.jobs[jobID]
	if j != nil && j.stopAt > 0 {
		return 0, nil, fmt.Errorf("%w: job %s is already stopping at checkpoint %d", ErrCheckpointNotTriggered, jobID, j.stopAt)
	}
	if drain && j != nil && j.coord != nil {
		// The id the trigger will take, so that its trigger actions,
		// drained in TriggerSavepoint, drain the sources.
		j.drainAt = j.coord.NextID()
	}
	id, acts, err := c.TriggerSavepoint(jobID, now)
	if err != nil {
		if j != nil {
			j.drainAt = 0
		}
		return 0, acts, err
	}
	j.stopAt, j.stopFailed = id, ""
	c.log.Info("job stopping with a savepoint", "job", jobID, "checkpoint", id, "drain", drain)
	return id, acts, nil
}

// checkStop gives up a stop whose checkpoint ended without completing. A
// drained one fails the job over: its sources emitted the maximum
// watermark and read no more input, so it cannot run on.
func (c *Scheduler) checkStop(j *job, now time.Time) []Action {
	if j.stopAt == 0 || j.stopped {
		return nil
	}
	if slices.Contains(j.coord.Pending(), j.stopAt) {
		return nil
	}
	if w, ok := j.coord.Writing(); ok && w >= j.stopAt {
		return nil
	}
	if latest, ok := j.coord.LatestID(); ok && latest >= j.stopAt {
		return nil
	}
	if j.drainAt > 0 {
		j.stopFailed = fmt.Sprintf("checkpoint %d of the stop with --drain did not complete; the job failed over, since its sources had emitted the maximum watermark", j.stopAt)
		c.log.Warn("stop with a drained savepoint failed: its checkpoint did not complete; the job fails over", "job", j.id, "checkpoint", j.stopAt)
		j.stopAt = 0
		// drainAt stays while the failover stops checkpointing, so that
		// checkpoints withheld after the drained one stay untold.
		acts := c.jobFailure(j, "the checkpoint of a stop with --drain did not complete after the sources emitted the maximum watermark", now)
		j.drainAt = 0
		return acts
	}
	j.stopFailed = fmt.Sprintf("checkpoint %d of the stop did not complete; the job runs on", j.stopAt)
	c.log.Warn("stop with a savepoint failed: its checkpoint did not complete; the job runs on", "job", j.id, "checkpoint", j.stopAt)
	j.stopAt = 0
	return nil
}

// drainTimedOut cancels the tasks of a job stopped at a drained checkpoint
// that did not finish by themselves within the cancel timeout (a lost
// notification, a task stuck in a sink); the job ends FINISHED as a stop
// without --drain does, and what their sinks did not commit is committed
// by a job resumed from the savepoint.
func (c *Scheduler) drainTimedOut(j *job, now time.Time) []Action {
	j.drainWait = false
	var left []string
	for _, ex := range j.execs {
		if !ex.state.Terminal() {
			left = append(left, ex.spec.SubtaskName(ex.subtask))
		}
	}
	c.log.Warn("tasks of a job stopped with a drained savepoint did not finish in time; cancelling them", "job", j.id, "tasks", left,
		"timeout", c.cfg.CancelTimeout)
	acts := c.cancelJobExecs(j, now)
	return append(acts, c.maybeFinalize(j, now)...)
}

// restarting counts the regions of j that restart.
func restarting(j *job) int {
	n := 0
	for _, r := range j.regions {
		if r.restarting {
			n++
		}
	}
	return n
}

// CheckpointsView is a copy of a job's checkpoint state.
type CheckpointsView struct {
	JobID, Storage                string
	Enabled                       bool
	History                       []coordinator.Stats // newest first
	InProgress, Completed, Failed int
	Aborted                       int64 // of Failed: aborted, not failed
	RestoredFrom, Latest          int64
	Retained                      []int64
	TaskNames                     map[coordinator.TaskID]string
	// Interval is the current periodic interval: the configured one, or
	// with an adaptive interval the one the coordinator chose last.
	Interval time.Duration
}

// Checkpoints returns a copy of job jobID's checkpoint state.
func (c *Scheduler) Checkpoints(jobID string) (CheckpointsView, error) {
	j := c.jobs[jobID]
	if j == nil {
		return CheckpointsView{}, notFound(jobID)
	}
	v := CheckpointsView{JobID: j.id, Storage: j.opts.Storage, Enabled: j.opts.Checkpoint.Enabled(), RestoredFrom: j.restoredFrom,
		Retained: retainedCheckpoints(j), TaskNames: make(map[coordinator.TaskID]string)}
	_, v.Aborted = checkpointFailures(j)
	v.Latest = checkpointID(j.latest)
	for _, ex := range j.execs {
		v.TaskNames[ex.taskID()] = ex.spec.SubtaskName(ex.subtask)
	}
	v.Interval = j.opts.Checkpoint.WithDefaults().Interval
	if j.coord != nil {
		v.History = j.coord.History()
		v.InProgress, v.Completed, v.Failed = j.coord.Counts()
		v.Interval = j.coord.Interval()
	}
	return v, nil
}

// CheckpointSubtasks returns checkpoint id of job jobID as History shows
// it, with its tasks' acknowledgements so far (coordinator.SubtaskStats);
// false when the checkpoint is not in the job's recent history.
func (c *Scheduler) CheckpointSubtasks(jobID string, id int64) (coordinator.Stats, []coordinator.SubtaskStats, bool, error) {
	j := c.jobs[jobID]
	if j == nil {
		return coordinator.Stats{}, nil, false, notFound(jobID)
	}
	if j.coord == nil {
		return coordinator.Stats{}, nil, false, nil
	}
	subs, ok := j.coord.SubtaskStats(id)
	if !ok {
		return coordinator.Stats{}, nil, false, nil
	}
	for _, s := range j.coord.History() {
		if s.ID == id {
			return s, subs, true, nil
		}
	}
	return coordinator.Stats{}, nil, false, nil
}

// StorageView is what tidying a job's checkpoint storage needs to know
// of its checkpoints at one moment.
type StorageView struct {
	// Enabled: the job takes checkpoints.
	Enabled bool
	// Ended: the job is in a terminal state.
	Ended bool
	// Retained are the completed checkpoints whose files are kept.
	Retained []int64
	// Pending are the checkpoints in progress; NextID the id the next one
	// will have. No id at or above NextID has been handed out.
	Pending []int64
	NextID  int64
	// PendingAcks are the acknowledgement payloads of the pending
	// checkpoints so far; OldestTrigger is when the oldest of them was
	// triggered (zero when none is pending).
	PendingAcks   []any
	OldestTrigger time.Time
}

// StorageView returns what tidying job jobID's checkpoint storage needs.
func (c *Scheduler) StorageView(jobID string) (StorageView, error) {
	j := c.jobs[jobID]
	if j == nil {
		return StorageView{}, notFound(jobID)
	}
	v := StorageView{Enabled: j.opts.Checkpoint.Enabled(), Ended: j.state.Terminal(), Retained: retainedCheckpoints(j),
		NextID: max(j.opts.FirstCheckpointID, 1)}
	if j.coord != nil {
		v.Pending = j.coord.Pending()
		v.NextID = j.coord.NextID()
		v.OldestTrigger = j.coord.PendingPayloads(func(p any) { v.PendingAcks = append(v.PendingAcks, p) })
	}
	return v, nil
}

// JobMetrics is what the Prometheus collector reports about one job.
type JobMetrics struct {
	ID, Name              string
	State                 JobState
	Restarts              int64
	RestartingRegions     int
	Checkpointing         bool
	InProgress, Completed int
	Failed, Aborted       int64
	LastDuration          time.Duration
	LastSize              int64
	HaveLast              bool
	Alignment             map[string]time.Duration // by subtask name
}

// Metrics returns what the metrics collector reports: per job, and the
// number of live taskmanagers.
func (c *Scheduler) Metrics() (jobs []JobMetrics, tmsLive int) {
	for _, tm := range c.tms {
		if !tm.lost {
			tmsLive++
		}
	}
	for _, j := range c.jobOrder {
		m := JobMetrics{ID: j.id, Name: j.graph.Name, State: j.state, Restarts: j.restarts, Checkpointing: j.opts.Checkpoint.Enabled()}
		m.Failed, m.Aborted = checkpointFailures(j)
		if j.state.active() {
			m.RestartingRegions = restarting(j)
		}
		if j.coord != nil {
			m.InProgress, m.Completed, _ = j.coord.Counts()
			for _, s := range j.coord.History() { // newest first
				if s.Status == coordinator.Completed {
					m.LastDuration, m.LastSize, m.HaveLast = s.Duration(), s.Bytes, true
					break
				}
			}
			m.Alignment = make(map[string]time.Duration, len(j.execs))
			for _, ex := range j.execs {
				name := ex.spec.SubtaskName(ex.subtask)
				if _, dup := m.Alignment[name]; dup { // operator names need not be unique
					name = fmt.Sprintf("%s #%d", name, ex.spec.Head)
				}
				m.Alignment[name] = ex.alignment
			}
		}
		jobs = append(jobs, m)
	}
	return jobs, tmsLive
}

// MinCheckpointInterval is the shortest checkpoint interval of the jobs
// that have not ended (of an adaptive interval, its lower bound), or 0.
func (c *Scheduler) MinCheckpointInterval() time.Duration {
	var d time.Duration
	for _, j := range c.jobOrder {
		ck := j.opts.Checkpoint.WithDefaults()
		iv := ck.Interval
		if ck.Adaptive {
			iv = ck.MinInterval
		}
		if iv > 0 && !j.state.Terminal() && (d == 0 || iv < d) {
			d = iv
		}
	}
	return d
}

// SourceInputEnded records that a source execution's input is exhausted.
// Once every unfinished source of the job has said so, the final checkpoint
// (the one that lets the job finish) is triggered at once rather than at the
// next interval.
func (c *Scheduler) SourceInputEnded(tmID, jobID string, vertex, subtask int, attempt int64, now time.Time) []Action {
	j, ex := c.checkpointExec(tmID, jobID, vertex, subtask, attempt)
	if ex == nil {
		return nil
	}
	ex.inputEnded = true
	j.finalWanted = true
	return c.finalCheckpoint(j, now)
}

// finalCheckpoint triggers a checkpoint when every unfinished source of j
// waits for one; when the coordinator cannot take one now (another is
// pending), the next tick tries again.
func (c *Scheduler) finalCheckpoint(j *job, now time.Time) []Action {
	if j.state != JobRunning || j.coord == nil || j.coord.Stopped() {
		return nil
	}
	for _, ex := range j.execs {
		if len(j.graph.Inputs(ex.spec.Head)) == 0 && ex.state != TaskFinished && !ex.inputEnded {
			return nil
		}
	}
	if _, err := j.coord.TriggerNow(now); err != nil {
		return nil
	}
	j.finalWanted = false
	return c.drainCoordinator(j, now)
}
