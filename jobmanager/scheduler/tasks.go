package scheduler

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/weirstream/weir/stream"
)

// Task is one task of a job: a maximal chain of operators that runs as
// one unit per subtask. It is immutable once built and may be shared with
// the goroutines that deploy it.
type Task struct {
	// Head is the vertex id of the chain's first operator; it names the
	// task (ExecutionID.vertex_id).
	Head int
	// Chain holds the vertex ids of the chain, head first.
	Chain       []int
	Parallelism int
	// Name joins the operators' names: "window -> sink".
	Name string
}

// Last returns the vertex id of the chain's last operator, whose output
// edges are the task's outputs.
func (t *Task) Last() int { return t.Chain[len(t.Chain)-1] }

// SubtaskName names subtask i as "window -> sink (2/4)": the task's name,
// then the subtask's 1-based index over the task's parallelism.
func (t *Task) SubtaskName(i int) string {
	return fmt.Sprintf("%s (%d/%d)", t.Name, i+1, t.Parallelism)
}

// chainable reports whether the edge's downstream operator joins the
// upstream operator's task. It does when the edge is forward, both ends have
// the same parallelism, the upstream operator has this one output, and the
// downstream one this one input (so it is not a source either). The edge
// must also read the main output: a chain is a line, and only its last
// operator's outputs leave the task, so an operator whose side output is
// read (and so, counting that edge, has one output only if nothing reads
// its main output) always ends its chain.
func chainable(g *stream.JobGraph, e *stream.Edge, outDeg, inDeg []int) bool {
	return e.Partitioning == stream.Forward && e.SideOutput == "" &&
		g.Vertices[e.From].Parallelism == g.Vertices[e.To].Parallelism &&
		outDeg[e.From] == 1 && inDeg[e.To] == 1
}

// BuildTasks chains the operators of a planned graph into tasks of at most
// stream.MaxChainLength operators, returned in topological order of their
// heads.
func BuildTasks(g *stream.JobGraph) ([]*Task, error) {
	order, err := g.TopoOrder()
	if err != nil {
		return nil, err
	}
	n := len(g.Vertices)
	outDeg, inDeg := make([]int, n), make([]int, n)
	for _, e := range g.Edges {
		outDeg[e.From]++
		inDeg[e.To]++
	}
	next := make([]int, n)
	for i := range next {
		next[i] = -1
	}
	chained := make([]bool, n) // chained to its upstream operator
	for _, e := range g.Edges {
		if chainable(g, e, outDeg, inDeg) {
			next[e.From] = e.To
			chained[e.To] = true
		}
	}
	var tasks []*Task
	for _, id := range order {
		if chained[id] {
			continue
		}
		t := &Task{Head: id, Parallelism: g.Vertices[id].Parallelism}
		var names []string
		for v := id; v >= 0; v = next[v] {
			if len(t.Chain) == stream.MaxChainLength {
				// A long chain is cut: v heads the next task (it comes
				// later in the topological order), fed by a forward edge.
				// A task's names, loggers and metrics grow with its chain.
				chained[v] = false
				break
			}
			t.Chain = append(t.Chain, v)
			names = append(names, g.Vertices[v].Name)
		}
		t.Name = strings.Join(names, " -> ")
		if t.Parallelism < 1 {
			return nil, fmt.Errorf("operator %q has parallelism %d; the graph must be planned first", g.Vertices[id].UID, t.Parallelism)
		}
		tasks = append(tasks, t)
	}
	return tasks, nil
}

// slotsNeeded is the number of shared slots a job needs: subtask i of every
// task shares slot i.
func slotsNeeded(tasks []*Task) int {
	n := 0
	for _, t := range tasks {
		n = max(n, t.Parallelism)
	}
	return n
}

// slotOffer is one live taskmanager's free slots.
type slotOffer struct {
	TaskManager string
	Free        int
}

// slotShortageError says a job (or a region being redeployed) does not fit
// into the free slots.
type slotShortageError struct {
	Need, Free, TaskManagers int
	// What needs the slots; "" means "job".
	What string
}

func (e *slotShortageError) Error() string {
	return fmt.Sprintf("not enough free slots: %s needs %d, cluster has %d free across %d taskmanager(s); start more taskmanagers or lower parallelism",
		cmp.Or(e.What, "job"), e.Need, e.Free, e.TaskManagers)
}

// placeSlots picks a taskmanager for each of n shared slots, spreading
// them evenly: round-robin over the taskmanagers with free slots, most free
// first (ties by id, so placement is deterministic). owners[i] hosts slot i.
// offers lists every live taskmanager, including full ones.
func placeSlots(n int, offers []slotOffer) (owners []string, err error) {
	cands := make([]slotOffer, 0, len(offers))
	free := 0
	for _, o := range offers {
		if o.Free > 0 {
			cands = append(cands, o)
			free += o.Free
		}
	}
	if free < n {
		return nil, &slotShortageError{Need: n, Free: free, TaskManagers: len(offers)}
	}
	slices.SortFunc(cands, func(a, b slotOffer) int {
		if c := cmp.Compare(b.Free, a.Free); c != 0 {
			return c
		}
		return cmp.Compare(a.TaskManager, b.TaskManager)
	})
	owners = make([]string, 0, n)
	for len(owners) < n {
		for i := range cands {
			if cands[i].Free > 0 && len(owners) < n {
				owners = append(owners, cands[i].TaskManager)
				cands[i].Free--
			}
		}
	}
	return owners, nil
}
