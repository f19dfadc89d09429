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
// changed, a state backend's incremental files (a retained Pebble
// checkpoint) for a job on another backend, state that cannot restore into
// the job's operator of its uid (compareStates: a state of another kind or
// type, an operator of another type with other state), or state that the
// job would drop, unless allowNonRestored: of an operator g does not have,
// or that g's operator of its uid no longer declares. Parallelism may
// change: keyed state moves by key-group ranges, operator list state is
// dealt out, union state goes to every subtask.
func checkRestore(m *weirpb.Manifest, g *stream.JobGraph, allowNonRestored bool) error {
	if int(m.GetMaxParallelism()) != g.MaxParallelism {
		return fmt.Errorf("the checkpoint has maxParallelism %d and the job %d: keyed state is split into maxParallelism key groups, which cannot change; set maxParallelism: %d",
			m.GetMaxParallelism(), g.MaxParallelism, m.GetMaxParallelism())
	}
	byUID := make(map[string]*stream.Vertex, len(g.Vertices))
	for _, v := range g.Vertices {
		byUID[v.UID] = v
	}
	var dropped, droppedStates, incompatible []string
	for _, op := range m.GetOperators() {
		if !hasState(op) {
			continue
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
		if int(op.GetParallelism()) != v.Parallelism && slices.ContainsFunc(op.GetHandles(), func(h *weirpb.StateHandle) bool { return h.GetChannelStateBytes() > 0 }) {
			return fmt.Errorf("the checkpoint is unaligned: operator %q holds records in flight at parallelism %d, which cannot be restored at parallelism %d; "+
				"restore it at parallelism %d, or take a savepoint (savepoints are always aligned) and rescale from that", v.UID, op.GetParallelism(), v.Parallelism, op.GetParallelism())
		}
		c := compareStates(op, v)
		if c.incompatible != "" {
			incompatible = append(incompatible, c.incompatible)
		}
		if len(c.dropped) > 0 {
			droppedStates = append(droppedStates, fmt.Sprintf("operator %q: %s", v.UID, strings.Join(c.dropped, ", ")))
		}
	}
	if len(incompatible) > 0 {
		return fmt.Errorf("the job cannot restore the checkpoint's state: %s; "+
			"a state keeps its name, kind and type, and an operator its type unless its state stays the same: keep them compatible, "+
			"or give the operator a new uid to start its state empty (and pass --allow-non-restored-state to drop the old uid's state)",
			strings.Join(incompatible, "; "))
	}
	if allowNonRestored || len(dropped)+len(droppedStates) == 0 {
		return nil
	}
	slices.Sort(dropped)
	if len(droppedStates) == 0 {
		return fmt.Errorf("the checkpoint has state for operators %q that the job does not have (matched by uid); "+
			"give them their old uids, or pass --allow-non-restored-state to drop their state", dropped)
	}
	var what []string
	if len(dropped) > 0 {
		what = append(what, fmt.Sprintf("state for operators %q that the job does not have (matched by uid)", dropped))
	}
	what = append(what, fmt.Sprintf("state that the job's operators no longer declare (%s)", strings.Join(droppedStates, "; ")))
	return fmt.Errorf("the checkpoint has %s; it would be dropped: keep the state (an operator's uid, type and config decide what state it has), "+
		"or pass --allow-non-restored-state to drop it", strings.Join(what, ", and "))
}

// hasState reports whether a restore gives op's subtasks anything: state
// handles, or subtasks that had finished.
func hasState(op *weirpb.OperatorState) bool {
	return len(op.GetHandles()) > 0 || len(op.GetFinishedSubtasks()) > 0
}

// Statuses of an operator's state in a restore plan
// (weirpb.StateRestorePlan).
const (
	stateRestored     = "restored"
	stateNew          = "new"
	stateDropped      = "dropped"
	stateIncompatible = "incompatible"
)

// statesPredate is why a checkpoint's states cannot be compared when its
// manifest was written before Weir recorded them.
const statesPredate = "state names unknown (checkpoint predates them)"

// stateCheck is how the state a checkpoint recorded for an operator uid
// compares with the state the job's operator of that uid declares.
type stateCheck struct {
	// states has a row per state of either side, the checkpoint's first.
	states []*weirpb.StateRestorePlan
	// unknown says why the states could not be compared ("": they were).
	unknown string
	// incompatible says why the state cannot restore into the job's
	// operator, which --allow-non-restored-state does not change ("": it
	// can).
	incompatible string
	// dropped lists the states only the checkpoint has, as name (kind).
	dropped []string
}

// compareStates compares op, an operator in a checkpoint's manifest, with
// v, the job's operator of its uid (nil when the job has none: every
// recorded state is then dropped). States match by name, keyed state and
// operator (list and union) state separately, as they restore: a state in
// both must have the same kind, and the same type when both sides name one;
// one only in the checkpoint is dropped, one only in the job is new and
// starts empty. An operator whose type changed must have exactly the same
// state. A manifest written before Weir recorded types (operator_type "")
// is not compared; neither is an operator whose type declares no state,
// unless its type changed, which is then incompatible: nothing shows that
// its state fits.
func compareStates(op *weirpb.OperatorState, v *stream.Vertex) stateCheck {
	var c stateCheck
	oldType := op.GetOperatorType()
	if oldType == "" {
		c.unknown = statesPredate
		return c
	}
	if len(op.GetStates()) == 0 && v == nil {
		c.unknown = "state names unknown (" + undeclared(oldType) + ")"
	}
	if v == nil {
		for _, s := range op.GetStates() {
			c.states = append(c.states, &weirpb.StateRestorePlan{Name: s.GetName(), Status: stateDropped, OldKind: s.GetKind(), OldType: s.GetType()})
		}
		return c
	}
	typeChanged := oldType != v.Type
	if len(op.GetStates()) == 0 || len(v.States) == 0 {
		var silent []string
		if len(op.GetStates()) == 0 {
			silent = append(silent, oldType)
		}
		if len(v.States) == 0 && (len(silent) == 0 || typeChanged) {
			silent = append(silent, v.Type)
		}
		c.unknown = "state names unknown (" + undeclared(silent...) + ")"
		if typeChanged {
			c.incompatible = fmt.Sprintf("operator %q is a %s in the checkpoint and a %s in the job, and %s, so nothing shows that its state fits",
				v.UID, oldType, v.Type, undeclared(silent...))
		}
		return c
	}
	type name struct {
		keyed bool
		name  string
	}
	declared := make(map[name]stream.StateDecl, len(v.States))
	for _, d := range v.States {
		declared[name{d.Kind.Keyed(), d.Name}] = d
	}
	seen := make(map[name]bool)
	var changed []string
	for _, s := range op.GetStates() {
		k := name{stream.StateKind(s.GetKind()).Keyed(), s.GetName()}
		seen[k] = true
		row := &weirpb.StateRestorePlan{Name: s.GetName(), Status: stateRestored, OldKind: s.GetKind(), OldType: s.GetType()}
		c.states = append(c.states, row)
		d, ok := declared[k]
		if !ok {
			row.Status = stateDropped
			c.dropped = append(c.dropped, fmt.Sprintf("%q (%s)", s.GetName(), s.GetKind()))
			continue
		}
		row.NewKind, row.NewType = string(d.Kind), d.Type
		if row.NewKind != row.OldKind || row.OldType != "" && row.NewType != "" && row.OldType != row.NewType {
			row.Status = stateIncompatible
			changed = append(changed, fmt.Sprintf("state %q is %s in the checkpoint and %s in the job",
				s.GetName(), describeState(row.OldKind, row.OldType), describeState(row.NewKind, row.NewType)))
		}
	}
	for _, d := range v.States {
		if !seen[name{d.Kind.Keyed(), d.Name}] {
			c.states = append(c.states, &weirpb.StateRestorePlan{Name: d.Name, Status: stateNew, NewKind: string(d.Kind), NewType: d.Type})
		}
	}
	same := !slices.ContainsFunc(c.states, func(r *weirpb.StateRestorePlan) bool { return r.Status != stateRestored })
	switch {
	case typeChanged && !same:
		c.incompatible = fmt.Sprintf("operator %q is a %s in the checkpoint and a %s in the job, and their state differs (checkpoint: %s; job: %s)",
			v.UID, oldType, v.Type, listStates(op.GetStates()), listStates(stateInfos(v.States)))
	case len(changed) > 0:
		c.incompatible = fmt.Sprintf("operator %q: %s", v.UID, strings.Join(changed, ", "))
	}
	return c
}

// undeclared says that the operator types declare no state.
func undeclared(types ...string) string {
	if len(types) == 1 {
		return fmt.Sprintf("operator type %s does not declare its state", types[0])
	}
	return fmt.Sprintf("operator types %s do not declare their state", strings.Join(types, " and "))
}

// describeState is how an error names a state's kind and type.
func describeState(kind, typ string) string {
	if typ == "" {
		return kind + " state"
	}
	return fmt.Sprintf("%s state (%s)", kind, typ)
}

// listStates names states as name (kind).
func listStates(ss []*weirpb.StateInfo) string {
	var out []string
	for _, s := range ss {
		out = append(out, fmt.Sprintf("%s (%s)", s.GetName(), s.GetKind()))
	}
	return strings.Join(out, ", ")
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
	return planRestore(from, manifestOf(cp), g, allowNonRestored), nil
}

// planRestore reports what starting g from m (which from names) would do,
// per operator uid: its status, parallelism, the bytes and objects its
// subtasks download, its type and its states (compareStates), and the
// refusal of checkRestore, if any.
func planRestore(from string, m *weirpb.Manifest, g *stream.JobGraph, allowNonRestored bool) *weirpb.PlanJobResponse {
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
		if !hasState(op) {
			continue
		}
		p := &weirpb.OperatorRestorePlan{Uid: op.GetOperatorUid(), Status: "restored", OldParallelism: op.GetParallelism(), OldType: op.GetOperatorType()}
		v := inJob[op.GetOperatorUid()]
		if v != nil {
			p.NewParallelism = int32(v.Parallelism)
			p.NewType = v.Type
		} else {
			p.Status = "dropped"
		}
		c := compareStates(op, v)
		p.States, p.StatesUnknown = c.states, c.unknown
		if c.incompatible != "" {
			p.Status = "incompatible"
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
			p := &weirpb.OperatorRestorePlan{Uid: v.UID, Status: "new", NewParallelism: int32(v.Parallelism), NewType: v.Type}
			for _, d := range v.States {
				p.States = append(p.States, &weirpb.StateRestorePlan{Name: d.Name, Status: stateNew, NewKind: string(d.Kind), NewType: d.Type})
			}
			resp.Operators = append(resp.Operators, p)
		}
	}
	return resp
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
