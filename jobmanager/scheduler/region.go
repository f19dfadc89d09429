package scheduler

import (
	"slices"
	"time"

	"github.com/weirstream/weir/stream"
)

// pipelinedRegions partitions the executions (task × subtask) of a job
// into its pipelined failover regions: the connected components of the
// graph whose vertices are the executions and whose edges are the data
// channels between them. A forward edge between two tasks connects subtask
// i of the upstream task with subtask i of the downstream one; a hash,
// rebalance or broadcast edge connects every upstream subtask with every
// downstream subtask. Edges inside a chain are inside one execution.
//
// Regions come in the order of their first execution (tasks in the given
// order, then subtasks), and each lists its executions in that order. It is
// a pure function of the planned graph and its tasks (BuildTasks), computed
// once per job.
func pipelinedRegions(g *stream.JobGraph, tasks []*Task) [][]execKey {
	offset := make([]int, len(tasks))
	taskOf := make(map[int]int, len(g.Vertices))
	n := 0
	for i, t := range tasks {
		offset[i] = n
		n += t.Parallelism
		for _, v := range t.Chain {
			taskOf[v] = i
		}
	}
	parent := make([]int, n)
	for i := range parent {
		parent[i] = i
	}
	find := func(x int) int {
		for parent[x] != x {
			parent[x] = parent[parent[x]] // path halving
			x = parent[x]
		}
		return x
	}
	union := func(a, b int) {
		if ra, rb := find(a), find(b); ra != rb {
			parent[max(ra, rb)] = min(ra, rb)
		}
	}
	for _, e := range g.Edges {
		a, okA := taskOf[e.From]
		b, okB := taskOf[e.To]
		if !okA || !okB || a == b {
			continue // inside a chain
		}
		pa, pb := tasks[a].Parallelism, tasks[b].Parallelism
		if e.Partitioning == stream.Forward && pa == pb {
			for i := range pa {
				union(offset[a]+i, offset[b]+i)
			}
			continue
		}
		for i := range pa {
			union(offset[a], offset[a]+i)
		}
		for i := range pb {
			union(offset[a], offset[b]+i)
		}
	}
	index := make(map[int]int) // root → region
	var out [][]execKey
	for ti, t := range tasks {
		for s := range t.Parallelism {
			root := find(offset[ti] + s)
			r, ok := index[root]
			if !ok {
				r = len(out)
				index[root] = r
				out = append(out, nil)
			}
			out[r] = append(out[r], execKey{t.Head, s})
		}
	}
	return out
}

// region is one pipelined failover region of a job and its restart state.
// A region restart goes through two halves: down (its executions are
// cancelled, then the restart delay passes, then it may wait for slots)
// and redeployed (its executions were deployed again with a new attempt
// and are starting). It ends when every execution of the region runs (or
// finished) again.
type region struct {
	id    int          // 1-based, in the order of pipelinedRegions
	execs []*execution // in the job's execution order
	// slots are the shared slot indices its executions use (their subtask
	// numbers), ascending.
	slots []int

	restarting bool      // a restart is in progress
	redeployed bool      // its second half: executions deployed again
	due        time.Time // down: redeploy once stopped and now ≥ due
	cause      string    // the failure being recovered from
	// cancelDeadline bounds how long the region waits for its cancelled
	// executions to confirm.
	cancelDeadline time.Time
	// waitingSlots: due, but too few free slots; the region waits until
	// slotDeadline, then counts another failure. waitErr says why.
	waitingSlots bool
	slotDeadline time.Time
	waitErr      string
}

// down reports whether the region is in the first half of a restart: its
// executions are stopping or stopped and not yet deployed again.
func (r *region) down() bool { return r.restarting && !r.redeployed }

// clearRestart forgets the region's restart state.
func (r *region) clearRestart() {
	r.restarting, r.redeployed, r.waitingSlots = false, false, false
	r.due, r.cancelDeadline, r.slotDeadline = time.Time{}, time.Time{}, time.Time{}
	r.cause, r.waitErr = "", ""
}

// maxAttempt is the highest attempt among execs.
func maxAttempt(execs []*execution) int64 {
	var m int64
	for _, ex := range execs {
		m = max(m, ex.attempt)
	}
	return m
}

// buildRegions creates j's regions from pipelinedRegions and links every
// execution to its region.
func buildRegions(j *job) {
	for i, keys := range pipelinedRegions(j.graph, j.tasks) {
		r := &region{id: i + 1}
		seen := make(map[int]bool)
		for _, k := range keys {
			ex := j.exec(k.vertex, k.subtask)
			ex.region = r
			r.execs = append(r.execs, ex)
			if !seen[ex.subtask] {
				seen[ex.subtask] = true
				r.slots = append(r.slots, ex.subtask)
			}
		}
		slices.Sort(r.slots)
		j.regions = append(j.regions, r)
	}
}
