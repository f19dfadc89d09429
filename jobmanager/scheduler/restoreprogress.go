package scheduler

import "github.com/weirstream/weir/stream"

// Restore progress: how much of the checkpoint state its executions
// restore each current execution of a job has in place. The total comes
// from the checkpoint (RestoreSizer) when an execution is deployed; the
// bytes in place and the end of the restore from its taskmanager's
// reports.

// RestoreSizer is an optional capability of a Checkpoint: the bytes of
// state subtask of task t of graph g restores from it (0 when it restores
// nothing). The scheduler asks it when it deploys the subtask; it must
// not block.
type RestoreSizer interface {
	RestoreBytes(g *stream.JobGraph, t *Task, subtask int) int64
}

// RestoreView sums the restore of a job's current executions.
type RestoreView struct {
	// RestoredBytes of RestoreBytes are in place.
	RestoredBytes, RestoreBytes int64
	// TasksRestoring counts the executions that do not process yet:
	// waiting for slots, deploying, loading their state, or being
	// cancelled for a restart. 0 once every execution runs (or ended).
	TasksRestoring int
}

// restoreBytesOf is what ex, being deployed, restores from j.latest.
func restoreBytesOf(j *job, ex *execution) int64 {
	rs, ok := j.latest.(RestoreSizer)
	if !ok || ex.restoredFinished {
		return 0
	}
	return rs.RestoreBytes(j.graph, ex.spec, ex.subtask)
}

// applyRestoreReport records the restore progress of a report of ex's
// current attempt. Reports may arrive out of order (a heartbeat taken
// before an UpdateTaskState delivered after it), so the bytes only grow
// and the end of the restore, once reported, stays.
func (ex *execution) applyRestoreReport(r TaskReport) {
	ex.restoredBytes = max(ex.restoredBytes, r.RestoredBytes)
	if !r.Restoring && (r.State == TaskRunning || r.State == TaskFinished) {
		ex.restoreDone = true
	}
}

// restoredSoFar is the bytes of ex's state in place, at most what it
// restores (all of it once its taskmanager said it loaded its state).
func (ex *execution) restoredSoFar() int64 {
	if ex.restoreDone {
		return ex.restoreBytes
	}
	return min(ex.restoredBytes, ex.restoreBytes)
}

// restoreViewOf sums the restore of j's executions.
func restoreViewOf(j *job) RestoreView {
	var v RestoreView
	for _, ex := range j.execs {
		v.RestoreBytes += ex.restoreBytes
		v.RestoredBytes += ex.restoredSoFar()
		processing := ex.state == TaskFinished || ex.state == TaskRunning && ex.restoreDone
		if !processing && !ex.state.Terminal() {
			v.TasksRestoring++
		}
	}
	return v
}
