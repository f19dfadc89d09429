package jobmanager

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/weirstream/weir/blobstore"
	"github.com/weirstream/weir/blobstore/storeuri"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/jobmanager/scheduler"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/stream"
)

// Starting a job from another job's retained checkpoint (weir submit
// --from). The new job restores the checkpoint's state, matched to its
// operators by uid, and never adopts or deletes it: the checkpoint stays
// the other job's, so the same one can start several jobs. The new job's
// own checkpoints reference only its own files.

// restoreSource names a retained checkpoint of another job.
type restoreSource struct {
	JobID string
	ID    int64
}

// parseRestoreFrom reads JOB_ID@N, or the URI of a checkpoint's directory
// in the job's checkpoint storage (<storage>/<job>/chk-N).
func parseRestoreFrom(from, storage string) (restoreSource, error) {
	bad := func(why string) error {
		return fmt.Errorf("%w: --from %.200q: %s; name a retained checkpoint as JOB_ID@N or as <checkpoint storage>/<job id>/chk-N",
			scheduler.ErrInvalidArgument, from, why)
	}
	if job, n, ok := strings.Cut(from, "@"); ok && !strings.Contains(from, "://") {
		id, err := strconv.ParseInt(n, 10, 64)
		if err != nil || id <= 0 {
			return restoreSource{}, bad("the checkpoint number is not a positive integer")
		}
		if err := stream.ValidateJobID(job); err != nil {
			return restoreSource{}, bad(err.Error())
		}
		return restoreSource{JobID: job, ID: id}, nil
	}
	if !strings.Contains(from, "://") {
		return restoreSource{}, bad("it is neither JOB_ID@N nor a URI")
	}
	rest := strings.TrimSuffix(from, "/")
	chk := rest[strings.LastIndexByte(rest, '/')+1:]
	rest = rest[:strings.LastIndexByte(rest, '/')]
	job := rest[strings.LastIndexByte(rest, '/')+1:]
	root := strings.TrimSuffix(rest[:strings.LastIndexByte(rest, '/')+1], "/")
	n, ok := strings.CutPrefix(chk, "chk-")
	id, err := strconv.ParseInt(n, 10, 64)
	if !ok || err != nil || id <= 0 {
		return restoreSource{}, bad("its last path segment is not chk-N")
	}
	if err := stream.ValidateJobID(job); err != nil {
		return restoreSource{}, bad(err.Error())
	}
	if root != strings.TrimSuffix(storage, "/") {
		return restoreSource{}, bad(fmt.Sprintf("it is not in the job's checkpoint storage %s; submit the job with the storage the checkpoint is in", storage))
	}
	return restoreSource{JobID: job, ID: id}, nil
}

// loadRestore reads the checkpoint or savepoint a submission names and
// checks it against the planned graph g (checkRestore). It returns the
// checkpoint to restore.
func (jm *JobManager) loadRestore(ctx context.Context, id, from string, allowNonRestored bool, g *stream.JobGraph, opts scheduler.JobOptions) (scheduler.Checkpoint, error) {
	cp, err := jm.loadRestoreUnchecked(ctx, id, from, g, opts)
	if err != nil {
		return nil, err
	}
	if err := checkRestore(manifestOf(cp), g, allowNonRestored); err != nil {
		return nil, fmt.Errorf("%w: --from %s: %v", scheduler.ErrInvalidArgument, from, err)
	}
	return cp, nil
}

// checkRestore reports why g cannot start from m, or nil: maxParallelism
// changed, state of an operator g does not have (unless allowNonRestored),
// or a state backend's incremental files (a retained Pebble checkpoint) for
// a job on another backend. Parallelism may change: keyed state moves by
// key-group ranges, operator list state is dealt out, union state goes to
// every subtask.
func checkRestore(m *weirpb.Manifest, g *stream.JobGraph, allowNonRestored bool) error {
	if int(m.GetMaxParallelism()) != g.MaxParallelism {
		return fmt.Errorf("the checkpoint has maxParallelism %d and the job %d: keyed state is split into maxParallelism key groups, which cannot change; set maxParallelism: %d",
			m.GetMaxParallelism(), g.MaxParallelism, m.GetMaxParallelism())
	}
	byUID := make(map[string]*stream.Vertex, len(g.Vertices))
	for _, v := range g.Vertices {
		byUID[v.UID] = v
	}
	var dropped []string
	for _, op := range m.GetOperators() {
		if len(op.GetHandles()) == 0 && len(op.GetFinishedSubtasks()) == 0 {
			continue // no state
		}
		v := byUID[op.GetOperatorUid()]
		if v == nil {
			dropped = append(dropped, op.GetOperatorUid())
			continue
		}
		if g.State.Backend != stream.StateBackendPebble && slices.ContainsFunc(op.GetHandles(), func(h *weirpb.StateHandle) bool { return len(h.GetFiles()) > 0 }) {
			return fmt.Errorf("operator %q has incremental Pebble state in the checkpoint, which only the pebble backend restores; "+
				"set state: {backend: pebble}, or start from a savepoint, whose state restores into any backend", v.UID)
		}
	}
	if len(dropped) > 0 && !allowNonRestored {
		slices.Sort(dropped)
		return fmt.Errorf("the checkpoint has state for operators %q that the job does not have (matched by uid); "+
			"give them their old uids, or pass --allow-non-restored-state to drop their state", dropped)
	}
	return nil
}

// loadSavepoint reads the savepoint at loc; it returns nil, nil when loc
// holds no savepoint (it may name a retained checkpoint).
func (jm *JobManager) loadSavepoint(ctx context.Context, loc string) (scheduler.Checkpoint, error) {
	loc = strings.TrimSuffix(loc, "/")
	if err := checkStorageURI("--from", loc, jm); err != nil {
		return nil, err
	}
	m, err := readSavepoint(ctx, loc)
	if errors.Is(err, blobstore.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: --from %s: %v", scheduler.ErrInvalidArgument, loc, err)
	}
	return completed{m: m, storage: loc}, nil
}

// readSavepoint reads the metadata of the savepoint at loc.
func readSavepoint(ctx context.Context, loc string) (*weirpb.Manifest, error) {
	dst, err := storeuri.Open(ctx, loc)
	if err != nil {
		return nil, err
	}
	return checkpoint.ReadSavepoint(ctx, dst)
}

// planJob checks a submission that restores a checkpoint or savepoint as
// submit would, without starting anything, and reports per operator what
// the restore would do. A submission submit would refuse gives a report
// with the refusal, not an error; an error means no report could be made
// (a bad graph, an unreadable checkpoint).
func (jm *JobManager) planJob(ctx context.Context, pg *weirpb.JobGraph, from string, allowNonRestored bool) (*weirpb.PlanJobResponse, error) {
	if from == "" {
		return nil, fmt.Errorf("%w: plan: name the checkpoint or savepoint to restore (--from)", scheduler.ErrInvalidArgument)
	}
	id := "plan-" + randomID()
	opts, g, err := jm.prepare(ctx, id, pg, 0)
	defer func() {
		jm.storages.Lock()
		delete(jm.storages.m, id)
		jm.storages.Unlock()
	}()
	if err != nil {
		return nil, err
	}
	// Read it allowing everything, then report what submit would refuse.
	cp, err := jm.loadRestoreUnchecked(ctx, id, from, g, opts)
	if err != nil {
		return nil, err
	}
	m := manifestOf(cp)
	resp := &weirpb.PlanJobResponse{From: from, CheckpointId: m.GetCheckpointId(), SourceJobId: m.GetJobId(), MaxParallelism: m.GetMaxParallelism()}
	if err := checkRestore(m, g, allowNonRestored); err != nil {
		resp.Refusal = err.Error()
	}
	inJob := make(map[string]*stream.Vertex, len(g.Vertices))
	for _, v := range g.Vertices {
		inJob[v.UID] = v
	}
	seen := make(map[string]bool)
	for _, op := range m.GetOperators() {
		if len(op.GetHandles()) == 0 && len(op.GetFinishedSubtasks()) == 0 {
			continue
		}
		p := &weirpb.OperatorRestorePlan{Uid: op.GetOperatorUid(), Status: "restored", OldParallelism: op.GetParallelism()}
		if v := inJob[op.GetOperatorUid()]; v != nil {
			p.NewParallelism = int32(v.Parallelism)
		} else {
			p.Status = "dropped"
		}
		for _, h := range op.GetHandles() {
			p.StateBytes += h.GetSize()
			p.Objects++
			for _, f := range h.GetFiles() {
				p.StateBytes += f.GetSize()
				p.Objects++
				p.Incremental = true
			}
		}
		seen[p.Uid] = true
		resp.Operators = append(resp.Operators, p)
	}
	for _, v := range g.Vertices {
		if !seen[v.UID] {
			resp.Operators = append(resp.Operators, &weirpb.OperatorRestorePlan{Uid: v.UID, Status: "new", NewParallelism: int32(v.Parallelism)})
		}
	}
	return resp, nil
}

// loadRestoreUnchecked reads the savepoint, or the retained checkpoint,
// that from names, for the job planned as g (its checkpoint storage under
// id).
func (jm *JobManager) loadRestoreUnchecked(ctx context.Context, id, from string, g *stream.JobGraph, opts scheduler.JobOptions) (scheduler.Checkpoint, error) {
	if !opts.Checkpoint.Enabled() {
		return nil, fmt.Errorf("%w: --from: job %q does not take checkpoints, so it cannot start from one; enable checkpointing in its spec", scheduler.ErrInvalidArgument, g.Name)
	}
	if strings.Contains(from, "://") {
		if cp, err := jm.loadSavepoint(ctx, from); cp != nil || err != nil {
			return cp, err
		}
	}
	src, err := parseRestoreFrom(from, opts.Storage)
	if err != nil {
		return nil, err
	}
	st := jm.storage(id)
	if st == nil {
		return nil, fmt.Errorf("%w: --from: job %q has no checkpoint storage", scheduler.ErrInvalidArgument, g.Name)
	}
	m, err := st.ReadManifest(ctx, src.JobID, src.ID)
	if err != nil {
		return nil, fmt.Errorf("%w: --from %s@%d: %v; check the job id and checkpoint number (weir checkpoints list JOB_ID shows the retained ones)",
			scheduler.ErrInvalidArgument, src.JobID, src.ID, err)
	}
	return completed{m: m}, nil
}
