package jobmanager

import (
	"cmp"
	"slices"
	"strings"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/coordinator"
	"github.com/weirstream/weir/jobmanager/scheduler"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/stream"
)

// manifestVersion is the weirpb.Manifest version this package writes.
const manifestVersion = 1

// buildManifest describes a fully acknowledged checkpoint: every operator
// of the graph (in vertex order) with its type, the state its type
// declared, its parallelism and the state handles its subtasks
// acknowledged, sorted by subtask then key. The acks' payloads are
// []*weirpb.StateHandle; handles of an operator the graph does not have are
// kept under their own uid.
func buildManifest(a scheduler.WriteManifestAction) *weirpb.Manifest {
	g := a.Graph
	m := &weirpb.Manifest{
		Version:        manifestVersion,
		JobId:          a.JobID,
		JobName:        g.Name,
		CheckpointId:   a.ID,
		TriggerTimeMs:  a.Triggered.UnixMilli(),
		CompleteTimeMs: a.Completed.UnixMilli(),
		Mode:           weirpb.CheckpointMode(a.Mode),
		MaxParallelism: int32(g.MaxParallelism),
	}
	byUID := make(map[string]*weirpb.OperatorState, len(g.Vertices))
	for _, v := range g.Vertices {
		op := &weirpb.OperatorState{OperatorUid: v.UID, Parallelism: int32(v.Parallelism), OperatorType: v.Type, States: stateInfos(v.States)}
		m.Operators = append(m.Operators, op)
		byUID[v.UID] = op
	}
	// The acks come in task order, so an operator's handles come in
	// subtask order, and mostly the same operator's one after another.
	var last *weirpb.OperatorState
	for _, ack := range a.Acks {
		hs, _ := ack.Payload.([]*weirpb.StateHandle)
		for _, h := range hs {
			op := last
			if uid := h.GetOperatorUid(); op == nil || op.OperatorUid != uid {
				if op = byUID[uid]; op == nil {
					op = &weirpb.OperatorState{OperatorUid: uid, Parallelism: h.GetParallelism()}
					m.Operators = append(m.Operators, op)
					byUID[uid] = op
				}
				last = op
			}
			if op.Handles == nil {
				op.Handles = make([]*weirpb.StateHandle, 0, max(op.Parallelism, 1))
			}
			op.Handles = append(op.Handles, h)
		}
	}
	for _, op := range m.Operators {
		if !slices.IsSortedFunc(op.Handles, compareHandles) {
			slices.SortFunc(op.Handles, compareHandles)
		}
	}
	markFinished(m, g, a.Finished)
	return m
}

// compareHandles orders the handles of an operator in a manifest: by
// subtask, then key.
func compareHandles(x, y *weirpb.StateHandle) int {
	if c := cmp.Compare(x.Subtask, y.Subtask); c != 0 {
		return c
	}
	return strings.Compare(x.Key, y.Key)
}

// stateInfos is how a manifest records the state an operator declared.
func stateInfos(ds []stream.StateDecl) []*weirpb.StateInfo {
	var out []*weirpb.StateInfo
	for _, d := range ds {
		out = append(out, &weirpb.StateInfo{Name: d.Name, Kind: string(d.Kind), Type: d.Type})
	}
	return out
}

// completed is a completed checkpoint, or a savepoint, as the scheduler
// sees it: m, whose keys are relative to storage (a savepoint's
// directory), or to the job's checkpoint storage when storage is empty.
type completed struct {
	m       *weirpb.Manifest
	storage string
}

func (c completed) CheckpointID() int64 { return c.m.GetCheckpointId() }

func (c completed) Finished(operatorUID string, subtask, parallelism int) bool {
	return finishedIn(c.m, operatorUID, subtask, parallelism)
}

var _ scheduler.RestoreSizer = completed{}

// RestoreBytes is what the taskmanager running subtask of task t restores
// from c: checkpoint.RestoreSize of the handles buildDeployment gives it,
// nothing when it had finished (it restores no state).
func (c completed) RestoreBytes(g *stream.JobGraph, t *scheduler.Task, subtask int) int64 {
	if finishedIn(c.m, g.Vertices[t.Head].UID, subtask, t.Parallelism) {
		return 0
	}
	return checkpoint.RestoreSize(restoreHandles(c.m, g, t, subtask), stream.KeyGroupRangeFor(g.MaxParallelism, t.Parallelism, subtask))
}

// manifestOf is the manifest of a checkpoint the scheduler hands back, or
// nil for none.
func manifestOf(cp scheduler.Checkpoint) *weirpb.Manifest {
	if c, ok := cp.(completed); ok {
		return c.m
	}
	return nil
}

// checkpointIDOf is cp's id, or 0 for none.
func checkpointIDOf(cp scheduler.Checkpoint) int64 {
	if cp == nil {
		return 0
	}
	return cp.CheckpointID()
}

// restoreHandles picks from a completed checkpoint the state handles that
// subtask of task t must load, operator by operator along its chain. When
// an operator's parallelism is what it was at the checkpoint, that is the
// handles the same subtask wrote (its key groups are the same). When the
// parallelism changed, it is every handle of the operator: the
// taskmanager's loader keeps the key groups the subtask owns now and
// redistributes list state. Union state (handles marked union_only) goes to
// every subtask.
func restoreHandles(m *weirpb.Manifest, g *stream.JobGraph, t *scheduler.Task, subtask int) []*weirpb.StateHandle {
	var out []*weirpb.StateHandle
	for _, id := range t.Chain {
		v := g.Vertices[id]
		for _, op := range m.GetOperators() {
			if op.GetOperatorUid() != v.UID {
				continue
			}
			same := int(op.GetParallelism()) == v.Parallelism
			for _, h := range op.GetHandles() {
				if !same || int(h.GetSubtask()) == subtask || h.GetUnionOnly() {
					out = append(out, h)
				}
			}
		}
	}
	return out
}

// markFinished records in m the tasks that had finished: their head
// operator lists the subtask as finished (sorted, each once). It costs
// O(operators + tasks log tasks), whatever the number of finished tasks.
func markFinished(m *weirpb.Manifest, g *stream.JobGraph, tasks []coordinator.TaskID) {
	if len(tasks) == 0 {
		return
	}
	byUID := make(map[string][]int32)
	for _, t := range tasks {
		uid := g.Vertices[t.Vertex].UID
		byUID[uid] = append(byUID[uid], int32(t.Subtask))
	}
	for _, op := range m.GetOperators() {
		add := byUID[op.GetOperatorUid()]
		if len(add) == 0 {
			continue
		}
		op.FinishedSubtasks = append(op.FinishedSubtasks, add...)
		slices.Sort(op.FinishedSubtasks)
		op.FinishedSubtasks = slices.Compact(op.FinishedSubtasks)
	}
}

// finishedIn reports whether m records subtask of the operator uid as
// finished (a nil manifest records nothing).
//
// With another parallelism than the checkpoint's, a new subtask may
// receive state (splits, pending transactions) of any old subtask, so it
// counts as finished only when every old subtask of the operator had.
func finishedIn(m *weirpb.Manifest, uid string, subtask, parallelism int) bool {
	for _, op := range m.GetOperators() {
		if op.GetOperatorUid() != uid {
			continue
		}
		fs := op.GetFinishedSubtasks()
		has := func(i int32) bool { return slices.Contains(fs, i) }
		if slices.IsSorted(fs) { // as markFinished writes them
			has = func(i int32) bool { _, ok := slices.BinarySearch(fs, i); return ok }
		}
		if int(op.GetParallelism()) != parallelism {
			for i := range int32(op.GetParallelism()) {
				if !has(i) {
					return false
				}
			}
			return op.GetParallelism() > 0
		}
		return has(int32(subtask))
	}
	return false
}
