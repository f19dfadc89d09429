package taskmanager

import (
	"os"
	"path/filepath"
	"slices"
)

// sweepLocalState removes the local state directories (under
// Config.StateDir, one per job) of jobs that are not in active — the
// jobmanager's list of jobs that have not ended — and of which this
// taskmanager runs no task. Only jobs this process ran tasks of are
// considered, so that a state directory shared by mistake with another
// taskmanager (of another cluster) loses nothing. A task removes its own working files when it
// ends but keeps its latest local snapshots for local recovery, should it
// be restarted here; once the job has ended they are of no use.
//
// It also ends the late-record series kept for such jobs
// (forgetLateLocked).
//
// The decision and the removal happen under the lock that submit takes to
// register a task, so a task deployed meanwhile never loses its directory.
func (tm *TaskManager) sweepLocalState(active []string) {
	tm.mu.Lock()
	tm.forgetLateLocked(active)
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
