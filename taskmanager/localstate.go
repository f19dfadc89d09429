package taskmanager

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/weirstream/weir/statebackend/backends"
)

// Local state layout. Config.StateDir holds one directory per job, and that
// one directory per subtask the taskmanager has run (subtaskStateDir), the
// task's dataflow.TaskSpec.LocalStateDir, shared by all attempts of the
// subtask here. Inside it statebackend/backends keeps the Pebble working
// directory of each keyed operator, the local snapshots kept for local
// recovery (backends.SnapshotRoot, at most backends.LocalSnapshotsKept per
// operator, one more while a snapshot is written) and the files of a
// restore in progress (backends.RestoreRoot). What removes what:
//
//   - a task removes its Pebble working directories when it ends, and its
//     local snapshots too when it finished; a new attempt keeps only the
//     local snapshot of the checkpoint it restores (backends.OpenManaged);
//   - the taskmanager removes a subtask's restore directory before an
//     attempt of it starts and after it ended (runTask);
//   - it removes the directory of a subtask it no longer runs once it
//     holds nothing a restore could use (sweepSubtaskState);
//   - it removes a job's directory once the job ended (sweepLocalState).
//
// A job's directory names the taskmanager that made it (ownerFile), so
// that a taskmanager restarted with the same id and state directory
// removes what the process before it left, even when it runs no task of
// the job itself (adoptLocalState).

// subtaskStateDir is the local state directory of the subtask of vertex
// of job.
func (tm *TaskManager) subtaskStateDir(job string, vertex, subtask int32) string {
	return filepath.Join(tm.cfg.StateDir, job, subtaskDirName(vertex, subtask))
}

func subtaskDirName(vertex, subtask int32) string { return fmt.Sprintf("v%d-s%d", vertex, subtask) }

// parseSubtaskDirName is the inverse of subtaskDirName.
func parseSubtaskDirName(name string) (vertex, subtask int32, ok bool) {
	if _, err := fmt.Sscanf(name, "v%d-s%d", &vertex, &subtask); err != nil || subtaskDirName(vertex, subtask) != name {
		return 0, 0, false
	}
	return vertex, subtask, true
}

// ownerFile, in a job's local state directory, holds the id of the
// taskmanager that made the directory.
const ownerFile = ".taskmanager"

// markJobDir records in job's local state directory that this taskmanager
// made it. A failure only means a restarted process will not clean up
// after this one.
func (tm *TaskManager) markJobDir(job string) {
	dir := filepath.Join(tm.cfg.StateDir, job)
	if err := os.MkdirAll(dir, 0o700); err == nil {
		err = os.WriteFile(filepath.Join(dir, ownerFile), []byte(tm.cfg.ID), 0o600)
		if err == nil {
			return
		}
	}
	tm.log.Warn("cannot mark the local state directory of a job", "job", job, "dir", dir)
}

// adoptLocalState makes the job directories that an earlier process of
// this taskmanager (same id) left in the state directory count as run
// here, so that sweepLocalState and sweepSubtaskState remove them once of
// no use. Directories of other taskmanagers are left alone.
func (tm *TaskManager) adoptLocalState() {
	entries, err := os.ReadDir(tm.cfg.StateDir)
	if err != nil {
		return
	}
	tm.mu.Lock()
	defer tm.mu.Unlock()
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		owner, err := os.ReadFile(filepath.Join(tm.cfg.StateDir, e.Name(), ownerFile))
		if err != nil || string(owner) != tm.cfg.ID {
			continue
		}
		tm.mu.jobsRun[e.Name()] = true
		tm.log.Info("found the local state an earlier process of this taskmanager left", "job", e.Name())
	}
}

// removingPrefix starts the name of a directory under a job's state
// directory that holds subtask directories being removed.
const removingPrefix = ".removing-"

// sweepLocalState removes the local state directories (under
// Config.StateDir, one per job) of jobs that are not in active — the
// jobmanager's list of jobs that have not ended — and of which this
// taskmanager runs no task. Only jobs this process ran tasks of are
// considered, so that a state directory shared by mistake with another
// taskmanager (of another cluster) loses nothing. A task removes its own
// working files when it ends but keeps its latest local snapshots for local
// recovery, should it be restarted here; once the job has ended they are of
// no use.
//
// It also ends the metric series kept for such jobs (forgetEndedLocked).
//
// The decision and the removal happen under the lock that submit takes to
// register a task, so a task deployed meanwhile never loses its directory.
func (tm *TaskManager) sweepLocalState(active []string) {
	tm.mu.Lock()
	tm.forgetEndedLocked(active, time.Now())
	tm.mu.Unlock()
	entries, err := os.ReadDir(tm.cfg.StateDir)
	if err != nil {
		return // nothing there yet
	}
	tm.mu.Lock()
	defer tm.mu.Unlock()
	for _, e := range entries {
		job := e.Name()
		if !e.IsDir() || !tm.mu.jobsRun[job] || slices.Contains(active, job) || tm.runsTaskOfLocked(job) {
			continue
		}
		dir := filepath.Join(tm.cfg.StateDir, job)
		if err := os.RemoveAll(dir); err != nil {
			tm.log.Warn("cannot remove the local state of an ended job", "job", job, "dir", dir, "err", err)
			continue
		}
		delete(tm.mu.jobsRun, job)
		delete(tm.mu.subtasksSwept, job)
		tm.log.Info("removed the local state of an ended job", "job", job)
	}
}

// runsTaskOfLocked reports whether a task of job is deployed here and not
// yet ended. tm.mu must be held.
func (tm *TaskManager) runsTaskOfLocked(job string) bool {
	for k, rt := range tm.mu.tasks {
		if k.job == job && !terminal(rt.state) {
			return true
		}
	}
	return false
}

// usesStateDirLocked reports whether an attempt of subtask k deployed here
// may still use its local state directory: it has not ended, or it ended
// but waits for a stale attempt before it (runningTask.prev) that has not.
// tm.mu must be held.
func (tm *TaskManager) usesStateDirLocked(k taskKey) bool {
	rt, ok := tm.mu.tasks[k]
	if !ok {
		return false
	}
	if !terminal(rt.state) {
		return true
	}
	select {
	case <-rt.done:
		return false
	default:
		return true
	}
}

// sweepSubtaskState removes the local state directories of job's subtasks
// that this taskmanager no longer runs and whose local snapshots are all
// older than checkpoint id, so of no use to local recovery: a restore
// starts from the latest completed checkpoint and reuses only that
// checkpoint's local snapshot (backends.OpenManaged discards the others).
// These are the directories of subtasks that moved to another taskmanager
// in a failover, and of subtasks that finished.
//
// The taskmanager calls it with id
//
//   - a checkpoint of job that completed, when the notification reaches a
//     task here: every subtask that had not finished acknowledged it, so one
//     that is not running here took it elsewhere, or took it here and then
//     failed — then its snapshot of id is here and its directory stays;
//   - the checkpoint a new attempt of a task here restores: a subtask that
//     is about to be deployed here too restores the same one, and its
//     directory stays if it holds that checkpoint's snapshot.
//
// This mirrors Flink, which discards a subtask's task-local state once a
// newer checkpoint completed and its slot is gone. Each id is swept once
// per job; a lower one than already swept does nothing.
//
// The decision happens under the lock that submit takes to register a
// task, and a directory leaves its place (renamed) before the lock is
// released, so a task deployed meanwhile either keeps its directory or
// starts without it; the files are deleted after.
func (tm *TaskManager) sweepSubtaskState(job string, id int64) {
	jobDir := filepath.Join(tm.cfg.StateDir, job)
	var trash string
	var removed []string
	tm.mu.Lock()
	if id <= tm.mu.subtasksSwept[job] || !tm.mu.jobsRun[job] {
		tm.mu.Unlock()
		return
	}
	tm.mu.subtasksSwept[job] = id
	entries, _ := os.ReadDir(jobDir)
	for _, e := range entries {
		name := e.Name()
		vertex, subtask, ok := parseSubtaskDirName(name)
		if !ok || !e.IsDir() {
			continue
		}
		if tm.usesStateDirLocked(taskKey{job: job, vertex: vertex, subtask: subtask}) {
			continue
		}
		if newest, ok := backends.NewestLocalSnapshot(filepath.Join(jobDir, name)); ok && newest >= id {
			continue
		}
		if trash == "" {
			var err error
			if trash, err = os.MkdirTemp(jobDir, removingPrefix); err != nil {
				tm.log.Warn("cannot remove the local state of subtasks no longer running here", "job", job, "err", err)
				break
			}
		}
		if err := os.Rename(filepath.Join(jobDir, name), filepath.Join(trash, name)); err != nil {
			tm.log.Warn("cannot remove the local state of a subtask no longer running here", "job", job, "dir", filepath.Join(jobDir, name), "err", err)
			continue
		}
		removed = append(removed, name)
	}
	tm.mu.Unlock()
	if trash == "" {
		return
	}
	if err := os.RemoveAll(trash); err != nil {
		tm.log.Warn("cannot remove the local state of subtasks no longer running here", "job", job, "dir", trash, "err", err)
	}
	if len(removed) > 0 {
		tm.log.Info("removed the local state of subtasks no longer running here", "job", job, "checkpoint", id, "subtasks", removed)
	}
}

// clearRestoreFiles removes the restore directory of the task with local
// state directory dir: files fetched for a restore, of use only while an
// attempt opens its state. Left behind they would be when a restore fails
// or is cancelled before the operators open them, or by a process that
// was killed.
func (tm *TaskManager) clearRestoreFiles(dir string) {
	if dir == "" {
		return
	}
	if err := os.RemoveAll(backends.RestoreRoot(dir)); err != nil {
		tm.log.Warn("cannot remove restore files", "dir", backends.RestoreRoot(dir), "err", err)
	}
}
