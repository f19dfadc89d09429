package scheduler

import (
	"slices"
	"strings"
	"time"
)

// MaxExceptions is how many failures a job's exception history keeps; the
// oldest go first. Each keeps at most MaxConcurrent of the failures that
// were reported while it was being handled.
const (
	MaxExceptions = 32
	MaxConcurrent = 8
)

// Exception scopes: what a failure made the job do.
const (
	// ScopeRegion: the failed regions restart while the rest runs on.
	ScopeRegion = "region"
	// ScopeGlobal: the whole job restarts.
	ScopeGlobal = "global"
	// ScopeJobFailed: the job ended FAILED (the restart strategy gave up,
	// or the failure cannot be restarted from).
	ScopeJobFailed = "job_failed"
)

// ExceptionView is one failure of a job.
type ExceptionView struct {
	Time  time.Time
	Cause string // the error text, as the task reported it
	// Task, Vertex, Subtask, Attempt and TaskManager name the execution
	// that failed; Task is "" for a failure of the job as a whole (too
	// many checkpoint failures, say).
	Task            string
	Vertex, Subtask int
	Attempt         int64
	TaskManager     string
	Scope           string
	// Regions are the restarted regions (1-based) of a ScopeRegion
	// failure.
	Regions []int
	// Concurrent are failures of other executions reported while this
	// one was being handled (often consequences of it, or its real
	// cause when they were reported later than they happened), at most
	// MaxConcurrent; ConcurrentDropped counts those beyond.
	Concurrent        []ConcurrentFailure
	ConcurrentDropped int
}

// ConcurrentFailure is a failure of an execution that joined another
// failure's handling.
type ConcurrentFailure struct {
	Time            time.Time
	Task            string
	Vertex, Subtask int
	Attempt         int64
	TaskManager     string
	Cause           string
}

// recordConcurrent adds the failure of ex, reported while j or its region
// was already failing over, to j's latest exception.
func (c *Scheduler) recordConcurrent(j *job, ex *execution, now time.Time) {
	if len(j.exceptions) == 0 {
		return
	}
	e := &j.exceptions[len(j.exceptions)-1]
	if e.Vertex == ex.spec.Head && e.Subtask == ex.subtask && e.Attempt == ex.attempt && e.Task != "" {
		return // the failure itself
	}
	if len(e.Concurrent) >= MaxConcurrent {
		e.ConcurrentDropped++
		return
	}
	f := ConcurrentFailure{Time: now, Task: ex.spec.SubtaskName(ex.subtask), Vertex: ex.spec.Head, Subtask: ex.subtask,
		Attempt: ex.attempt, Cause: ex.err}
	if ex.tm != nil {
		f.TaskManager = ex.tm.id
	}
	e.Concurrent = append(e.Concurrent, f)
}

// recordException adds a failure to j's exception history. The execution
// is the failed one whose failure the cause describes, if any.
func (c *Scheduler) recordException(j *job, cause, scope string, regions []*region, now time.Time) {
	e := ExceptionView{Time: now, Cause: cause, Scope: scope}
	for _, ex := range j.execs {
		if ex.state == TaskFailed && ex.err != "" && strings.HasPrefix(cause, failureCause(ex)) {
			e.Task, e.Vertex, e.Subtask, e.Attempt = ex.spec.SubtaskName(ex.subtask), ex.spec.Head, ex.subtask, ex.attempt
			if ex.tm != nil {
				e.TaskManager = ex.tm.id
			}
			break
		}
	}
	if scope == ScopeRegion {
		for _, r := range regions {
			e.Regions = append(e.Regions, r.id)
		}
	}
	if len(j.exceptions) >= MaxExceptions {
		j.exceptions = slices.Delete(j.exceptions, 0, len(j.exceptions)-MaxExceptions+1)
	}
	j.exceptions = append(j.exceptions, e)
}

// Exceptions returns job jobID's exception history, newest first (at
// most MaxExceptions).
func (c *Scheduler) Exceptions(jobID string) ([]ExceptionView, error) {
	j := c.jobs[jobID]
	if j == nil {
		return nil, notFound(jobID)
	}
	out := make([]ExceptionView, len(j.exceptions))
	for i, e := range j.exceptions {
		e.Regions = slices.Clone(e.Regions)
		e.Concurrent = slices.Clone(e.Concurrent)
		out[len(out)-1-i] = e
	}
	return out, nil
}
