package twophase_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/weirstream/weir/blobstore"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/stream"
	"github.com/weirstream/weir/stream/twophase"
)

// store is an external transactional system for the tests: transactions
// by name, open, prepared, committed or aborted, and the rows that
// committed ones made visible. Every sink instance of a test (the
// "processes" before and after a failure) talks to the same store.
type store struct {
	mu      sync.Mutex
	txns    map[string]*storeTxn
	visible []int64
	// failCommits makes the next n commits fail.
	failCommits int
	commits     int // successful Commit calls, repeats included
}

type txnState int

const (
	open txnState = iota
	prepared
	committed
	aborted
)

type storeTxn struct {
	id    twophase.TxnID
	state txnState
	rows  []int64
}

func newStore() *store { return &store{txns: make(map[string]*storeTxn)} }

func (s *store) count(st txnState) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, t := range s.txns {
		if t.state == st {
			n++
		}
	}
	return n
}

// system is one sink instance's connection to the store.
type system struct {
	st   *store
	octx *stream.OperatorContext
	// recovered records the Recovery it was given.
	recovered []twophase.Recovery
	closed    bool
}

func (s *system) Open(_ context.Context, octx *stream.OperatorContext) error {
	s.octx = octx
	return nil
}

func (s *system) Begin(_ context.Context, id twophase.TxnID) (twophase.Txn, error) {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	name := id.Name()
	if s.st.txns[name] != nil {
		return nil, fmt.Errorf("transaction %s exists already", name)
	}
	t := &storeTxn{id: id}
	s.st.txns[name] = t
	return &txn{st: s.st, t: t}, nil
}

func (s *system) Commit(_ context.Context, p twophase.Pending) error {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	if s.st.failCommits > 0 {
		s.st.failCommits--
		return errors.New("injected commit failure")
	}
	t := s.st.txns[string(p.Handle)]
	switch {
	case t == nil || t.state == aborted || t.state == open:
		return fmt.Errorf("%s: %w", p.Handle, twophase.ErrNotFound)
	case t.state == prepared:
		t.state = committed
		s.st.visible = append(s.st.visible, t.rows...)
	}
	s.st.commits++
	return nil
}

func (s *system) Recover(_ context.Context, r twophase.Recovery) error {
	s.recovered = append(s.recovered, r)
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	for name, t := range s.st.txns {
		if t.state != open && t.state != prepared || r.KeepNames[name] {
			continue
		}
		mine := false
		for _, job := range []string{s.octx.JobID, r.RestoreJobID} {
			if sub, _, _, _, ok := twophase.ParseName(name, job, s.octx.OperatorUID); ok && job != "" && r.Owns(sub) {
				mine = true
			}
		}
		if mine {
			if t.id.Attempt >= r.Attempt {
				return fmt.Errorf("transaction %s of the current attempt found at recovery", name)
			}
			t.state = aborted
		}
	}
	return nil
}

func (s *system) Close() error { s.closed = true; return nil }

type txn struct {
	st *store
	t  *storeTxn
}

func (x *txn) Write(_ context.Context, b *stream.Batch) error {
	x.st.mu.Lock()
	defer x.st.mu.Unlock()
	if x.t.state != open {
		return errors.New("write to a transaction that is not open")
	}
	x.t.rows = append(x.t.rows, b.Cols[0].Ints[:b.Len()]...)
	return nil
}

func (x *txn) PreCommit(context.Context) ([]byte, error) {
	x.st.mu.Lock()
	defer x.st.mu.Unlock()
	if x.t.state != open {
		return nil, errors.New("pre-commit of a transaction that is not open")
	}
	x.t.state = prepared
	return []byte(x.t.id.Name()), nil
}

func (x *txn) Abort(context.Context) error {
	x.st.mu.Lock()
	defer x.st.mu.Unlock()
	if x.t.state == open {
		x.t.state = aborted
	}
	return nil
}

var schema = func() *stream.Schema {
	s, err := stream.NewSchema(stream.Field{Name: "v", Type: stream.TypeInt64})
	if err != nil {
		panic(err)
	}
	return s
}()

func batchOf(rows ...int64) *stream.Batch {
	b := stream.NewBatch(schema, len(rows))
	b.Cols[0].Ints = append(b.Cols[0].Ints[:0], rows...)
	b.SetLen(len(rows))
	return b
}

// instance is one sink subtask of one attempt.
type instance struct {
	op  *twophase.Operator
	sys *system
}

func openInstance(t *testing.T, st *store, job string, subtask, par int, attempt int64, checkpointing bool) *instance {
	t.Helper()
	sys := &system{st: st}
	op := twophase.NewOperator(sys)
	octx := &stream.OperatorContext{JobID: job, OperatorUID: "sink", Subtask: subtask, Parallelism: par,
		MaxParallelism: 128, Attempt: attempt, Checkpointing: checkpointing, InputSchemas: []*stream.Schema{schema}}
	if err := op.Open(t.Context(), octx); err != nil {
		t.Fatal(err)
	}
	return &instance{op: op, sys: sys}
}

func (in *instance) write(t *testing.T, rows ...int64) {
	t.Helper()
	if err := in.op.ProcessBatch(0, batchOf(rows...), nil); err != nil {
		t.Fatal(err)
	}
}

func (in *instance) snapshot(t *testing.T, id int64) *stream.OperatorSnapshot {
	t.Helper()
	c := &stream.SnapshotContext{CheckpointID: id}
	if err := in.op.SnapshotState(c); err != nil {
		t.Fatal(err)
	}
	return &c.State
}

func sorted(v []int64) []int64 {
	v = slices.Clone(v)
	slices.Sort(v)
	return v
}

func TestCommitOnCompletionOnly(t *testing.T) {
	st := newStore()
	in := openInstance(t, st, "job1", 0, 1, 1, true)
	in.write(t, 1, 2)
	in.snapshot(t, 1)
	in.write(t, 3)
	if len(st.visible) != 0 {
		t.Fatalf("rows visible before the checkpoint completed: %v", st.visible)
	}
	if err := in.op.NotifyCheckpointAborted(1); err != nil {
		t.Fatal(err)
	}
	in.snapshot(t, 2)
	if err := in.op.NotifyCheckpointComplete(2); err != nil {
		t.Fatal(err)
	}
	if got := sorted(st.visible); !slices.Equal(got, []int64{1, 2, 3}) {
		t.Fatalf("visible after checkpoint 2 completed: %v, want [1 2 3]", got)
	}
	if n := len(in.op.Pending()); n != 0 {
		t.Fatalf("%d transactions still pending", n)
	}
	in.write(t, 4)
	if err := in.op.Close(); err != nil {
		t.Fatal(err)
	}
	if st.count(aborted) != 1 || !in.sys.closed {
		t.Fatalf("Close: %d aborted (want 1, the open transaction), system closed %v", st.count(aborted), in.sys.closed)
	}
}

func TestNoCheckpointingCommitsAtFinish(t *testing.T) {
	st := newStore()
	in := openInstance(t, st, "job1", 0, 1, 1, false)
	in.write(t, 5, 6)
	if len(st.visible) != 0 {
		t.Fatal("rows visible before Finish")
	}
	if err := in.op.Finish(nil); err != nil {
		t.Fatal(err)
	}
	if got := sorted(st.visible); !slices.Equal(got, []int64{5, 6}) {
		t.Fatalf("visible after Finish: %v", got)
	}
	if len(in.sys.recovered) != 1 || in.sys.recovered[0].Restored {
		t.Fatalf("a fresh start must recover once without restore, got %+v", in.sys.recovered)
	}
	_ = in.op.Close()
}

// TestRestoreCommitsAndAbortsLeftovers: the instance pre-commits at
// checkpoint 1 (whose completion it never hears of), goes on to
// pre-commit at checkpoint 2 (never completed) and opens a third
// transaction, then dies. Restored from checkpoint 1, the new attempt
// commits checkpoint 1's transaction and aborts the other two.
func TestRestoreCommitsAndAbortsLeftovers(t *testing.T) {
	st := newStore()
	old := openInstance(t, st, "job1", 0, 1, 1, true)
	old.write(t, 1, 2)
	snap1 := old.snapshot(t, 1)
	old.write(t, 3)
	old.snapshot(t, 2)
	old.write(t, 4)
	// The process dies: no Close.

	for range 2 { // restoring twice (a failure during the restore) is the same
		in := openInstance(t, st, "job1", 0, 1, 2, true)
		if err := in.op.RestoreState(&stream.RestoreContext{CheckpointID: 1, JobID: "job1", State: snap1}); err != nil {
			t.Fatal(err)
		}
		if got := sorted(st.visible); !slices.Equal(got, []int64{1, 2}) {
			t.Fatalf("visible after restore: %v, want [1 2]", got)
		}
		if n := st.count(aborted); n != 2 {
			t.Fatalf("%d transactions aborted, want 2 (the one prepared at checkpoint 2 and the open one)", n)
		}
		r := in.sys.recovered
		if len(r) != 1 || !r[0].Restored || r[0].CheckpointID != 1 || len(r[0].Committed) != 1 || !slices.Equal(r[0].Subtasks, []int{0}) {
			t.Fatalf("recovery: %+v", r)
		}
	}
	if st.commits != 2 {
		t.Fatalf("%d successful commits, want 2 (one repeat)", st.commits)
	}
}

func TestCommitFailureFailsAndRestoreCommits(t *testing.T) {
	st := newStore()
	in := openInstance(t, st, "job1", 0, 1, 1, true)
	in.write(t, 7)
	snap := in.snapshot(t, 1)
	st.failCommits = 1
	if err := in.op.NotifyCheckpointComplete(1); err == nil || !strings.Contains(err.Error(), "commit transaction") {
		t.Fatalf("a failed commit must fail the task, got %v", err)
	}
	next := openInstance(t, st, "job1", 0, 1, 2, true)
	if err := next.op.RestoreState(&stream.RestoreContext{CheckpointID: 1, JobID: "job1", State: snap}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(st.visible, []int64{7}) {
		t.Fatalf("visible: %v, want [7]", st.visible)
	}
}

func TestLostTransactionFailsRestore(t *testing.T) {
	st := newStore()
	in := openInstance(t, st, "job1", 0, 1, 1, true)
	in.write(t, 7)
	snap := in.snapshot(t, 1)
	for _, x := range st.txns {
		x.state = aborted // the external system lost it
	}
	next := openInstance(t, st, "job1", 0, 1, 2, true)
	err := next.op.RestoreState(&stream.RestoreContext{CheckpointID: 1, JobID: "job1", State: snap})
	if !errors.Is(err, twophase.ErrNotFound) {
		t.Fatalf("restore of a lost transaction: %v, want ErrNotFound", err)
	}
}

func TestCorruptStateNamed(t *testing.T) {
	st := newStore()
	in := openInstance(t, st, "job1", 0, 1, 1, true)
	for _, tc := range []struct {
		state *stream.OperatorSnapshot
		want  string
	}{
		{&stream.OperatorSnapshot{List: map[string][][]byte{twophase.PendingState: {{9}}}, Union: map[string][][]byte{twophase.WritersState: {{1, 0, 2, 0}}}}, "unknown version 9"},
		{&stream.OperatorSnapshot{List: map[string][][]byte{twophase.PendingState: {{1, 3}}}, Union: map[string][][]byte{twophase.WritersState: {{1, 0, 2, 0}}}}, "truncated"},
		{&stream.OperatorSnapshot{List: map[string][][]byte{twophase.PendingState: {}}, Union: map[string][][]byte{twophase.WritersState: {{1, 4, 2, 0}}}}, "subtask 2 of parallelism 1"},
		{&stream.OperatorSnapshot{List: map[string][][]byte{twophase.PendingState: {{1}}}}, "no twophase-writers state"},
	} {
		err := in.op.RestoreState(&stream.RestoreContext{CheckpointID: 3, State: tc.state})
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "checkpoint 3") {
			t.Errorf("got %v, want an error naming checkpoint 3 and %q", err, tc.want)
		}
	}
}

func TestNames(t *testing.T) {
	id := twophase.TxnID{JobID: "job-1", OperatorUID: "out.sink", Subtask: 3, Attempt: 65537, Checkpoint: 12, Seq: 4}
	name := id.Name()
	if !strings.HasPrefix(name, twophase.SubtaskPrefix("job-1", "out.sink", 3)) || strings.HasPrefix(name, twophase.SubtaskPrefix("job-1", "out.sink", 31)) {
		t.Fatalf("name %s and subtask prefixes disagree", name)
	}
	sub, att, ckp, seq, ok := twophase.ParseName(name, "job-1", "out.sink")
	if !ok || sub != 3 || att != 65537 || ckp != 12 || seq != 4 {
		t.Fatalf("ParseName(%s) = %d %d %d %d %v", name, sub, att, ckp, seq, ok)
	}
	if _, _, _, _, ok := twophase.ParseName(name, "job-2", "out.sink"); ok {
		t.Fatal("ParseName accepted another job's name")
	}
	long := twophase.TxnID{JobID: strings.Repeat("j", 300), OperatorUID: "a b'c", Subtask: 1 << 20, Attempt: 1 << 62, Checkpoint: 1 << 62, Seq: 1 << 62}
	n := long.Name()
	if len(n) > 111 || strings.ContainsAny(n, " '\"") {
		t.Fatalf("name %q: longer than 111 bytes or unsafe characters", n)
	}
	if twophase.Token("a.b") == "a.b" || twophase.Token("") == "" {
		t.Fatal("Token kept a dot or an empty string")
	}
}

// redistribute hands snapshots of p subtasks to q subtasks through the
// checkpoint storage, as a restore does.
func redistribute(t *testing.T, id int64, snaps []*stream.OperatorSnapshot, q int) []*stream.OperatorSnapshot {
	t.Helper()
	st := checkpoint.NewStorage(blobstore.NewMem())
	p := len(snaps)
	var handles []*weirpb.StateHandle
	for sub, snap := range snaps {
		kg := stream.KeyGroupRangeFor(128, p, sub)
		parts := []*stream.OperatorSnapshot{{List: snap.List}, {Union: snap.Union}}
		for i, part := range parts {
			data, err := checkpoint.EncodeSnapshot(part)
			if err != nil {
				t.Fatal(err)
			}
			upload := st.UploadSnapshot
			if i > 0 {
				upload = st.UploadUnionSnapshot
			}
			h, err := upload(t.Context(), "job", id, "sink", sub, p, 1, kg, data)
			if err != nil {
				t.Fatal(err)
			}
			handles = append(handles, h)
		}
	}
	out := make([]*stream.OperatorSnapshot, q)
	for sub := range out {
		snap, err := st.LoadOperatorState(t.Context(), handles, stream.KeyGroupRangeFor(128, q, sub), sub, q)
		if err != nil {
			t.Fatal(err)
		}
		out[sub] = snap
	}
	return out
}

// TestRandomFailures runs random sequences of writes, checkpoints
// (completed, aborted, notified to some subtasks only), failures and
// restores at random parallelism, replaying the input from the restored
// checkpoint's position as a source does. Whatever happens, the rows the
// store shows at the end are the input, each exactly once.
func TestRandomFailures(t *testing.T) {
	for seed := range uint64(60) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { randomRun(t, seed) })
	}
}

type completedCheckpoint struct {
	id    int64
	pos   int64
	snaps []*stream.OperatorSnapshot
}

func randomRun(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 42))
	const rows = 400
	st := newStore()
	job := "job-r"
	attempt := int64(1)
	par := 1 + rng.IntN(3)
	start := func(restore *completedCheckpoint) []*instance {
		ins := make([]*instance, par)
		var snaps []*stream.OperatorSnapshot
		if restore != nil {
			snaps = redistribute(t, restore.id, restore.snaps, par)
		}
		for i := range ins {
			ins[i] = openInstance(t, st, job, i, par, attempt, true)
			if restore != nil {
				if err := ins[i].op.RestoreState(&stream.RestoreContext{CheckpointID: restore.id, JobID: job, State: snaps[i]}); err != nil {
					t.Fatal(err)
				}
			}
		}
		return ins
	}
	ins := start(nil)
	var pos, nextID int64
	var last *completedCheckpoint
	for step := 0; pos < rows || step < 5; step++ {
		switch r := rng.IntN(10); {
		case r < 5 && pos < rows: // write a few rows
			n := min(int64(1+rng.IntN(20)), rows-pos)
			for v := pos; v < pos+n; v++ {
				ins[int(v)%par].write(t, v)
			}
			pos += n
		case r < 8: // a checkpoint
			nextID++
			cp := &completedCheckpoint{id: nextID, pos: pos}
			for _, in := range ins {
				cp.snaps = append(cp.snaps, in.snapshot(t, nextID))
			}
			if rng.IntN(5) == 0 { // the coordinator aborts it
				for _, in := range ins {
					if err := in.op.NotifyCheckpointAborted(nextID); err != nil {
						t.Fatal(err)
					}
				}
				continue
			}
			last = cp
			for _, in := range ins { // notifications may be lost
				if rng.IntN(4) != 0 {
					if err := in.op.NotifyCheckpointComplete(nextID); err != nil {
						t.Fatal(err)
					}
				}
			}
		default: // a failure: restore the last completed checkpoint
			attempt++
			if last != nil { // a fresh restart keeps its parallelism
				par = 1 + rng.IntN(4)
			}
			ins = start(last)
			pos = 0
			if last != nil {
				pos = last.pos
			}
		}
	}
	// End of input: the final checkpoint completes.
	nextID++
	for _, in := range ins {
		if err := in.op.Finish(nil); err != nil {
			t.Fatal(err)
		}
		in.snapshot(t, nextID)
	}
	for _, in := range ins {
		if err := in.op.NotifyCheckpointComplete(nextID); err != nil {
			t.Fatal(err)
		}
		if err := in.op.Close(); err != nil {
			t.Fatal(err)
		}
	}
	seen := make(map[int64]int)
	for _, v := range st.visible {
		seen[v]++
	}
	lost, dup := 0, 0
	for v := range int64(rows) {
		switch n := seen[v]; {
		case n == 0:
			lost++
		case n > 1:
			dup += n - 1
		}
	}
	if lost != 0 || dup != 0 || len(seen) != rows {
		t.Fatalf("seed %d: lost=%d duplicated=%d distinct=%d of %d", seed, lost, dup, len(seen), rows)
	}
	if n := st.count(open) + st.count(prepared); n != 0 {
		t.Fatalf("seed %d: %d transactions left open or prepared", seed, n)
	}
}

// legacySystem keeps a counter as state of its own and restores pending
// transactions from an older state format ("old-pending": handle names).
type legacySystem struct {
	system
	counter  int64
	restored []int64
}

func (s *legacySystem) SnapshotSystem(c *stream.SnapshotContext) error {
	c.AddListState("counter", []byte(fmt.Sprint(s.counter)))
	return nil
}

func (s *legacySystem) RestoreSystem(c *stream.RestoreContext) error {
	for _, item := range c.State.List["counter"] {
		var v int64
		if _, err := fmt.Sscan(string(item), &v); err != nil {
			return err
		}
		s.restored = append(s.restored, v)
	}
	return nil
}

func (s *legacySystem) RestoreLegacy(c *stream.RestoreContext) (twophase.Legacy, bool, error) {
	items := c.State.List["old-pending"]
	if len(items) == 0 {
		return twophase.Legacy{}, false, nil
	}
	var l twophase.Legacy
	for _, h := range items {
		s.st.mu.Lock()
		id := s.st.txns[string(h)].id
		s.st.mu.Unlock()
		l.Pending = append(l.Pending, twophase.Pending{ID: id, Checkpoint: c.CheckpointID, Handle: h})
	}
	l.OldParallelism = 1
	return l, true, nil
}

func TestSystemStateAndLegacyState(t *testing.T) {
	st := newStore()
	sys := &legacySystem{system: system{st: st}, counter: 41}
	op := twophase.NewOperator(sys)
	octx := &stream.OperatorContext{JobID: "job1", OperatorUID: "sink", Parallelism: 1, Attempt: 1, Checkpointing: true}
	if err := op.Open(t.Context(), octx); err != nil {
		t.Fatal(err)
	}
	if err := op.ProcessBatch(0, batchOf(1, 2), nil); err != nil {
		t.Fatal(err)
	}
	c := &stream.SnapshotContext{CheckpointID: 1}
	if err := op.SnapshotState(c); err != nil {
		t.Fatal(err)
	}
	if got := c.State.List["counter"]; len(got) != 1 || string(got[0]) != "41" {
		t.Fatalf("SnapshotSystem wrote %q", got)
	}
	// An old-format checkpoint: the pending handle in the System's own state.
	var name []byte
	for n := range st.txns {
		name = []byte(n)
	}
	old := &stream.OperatorSnapshot{List: map[string][][]byte{"old-pending": {name}, "counter": {[]byte("41")}}}
	sys2 := &legacySystem{system: system{st: st}}
	op2 := twophase.NewOperator(sys2)
	octx2 := *octx
	octx2.Attempt = 2
	if err := op2.Open(t.Context(), &octx2); err != nil {
		t.Fatal(err)
	}
	if err := op2.RestoreState(&stream.RestoreContext{CheckpointID: 1, JobID: "job1", State: old}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(sys2.restored, []int64{41}) || !slices.Equal(sorted(st.visible), []int64{1, 2}) {
		t.Fatalf("restored counter %v, visible %v; want [41] and [1 2]", sys2.restored, st.visible)
	}
	if r := sys2.recovered; len(r) != 1 || !r[0].KeepNames[string(name)] || r[0].OldParallelism != 1 {
		t.Fatalf("recovery after a legacy restore: %+v", r)
	}
}

// TestCheckpointIDsMustGrow: a job restored from checkpoint 7 of another
// job whose own ids started again at 1 would name two transactions alike
// (the sink's next checkpoint stays 8); the operator refuses such a
// snapshot instead.
func TestCheckpointIDsMustGrow(t *testing.T) {
	st := newStore()
	old := openInstance(t, st, "job1", 0, 1, 1, true)
	old.write(t, 1)
	snap := old.snapshot(t, 7)
	in := openInstance(t, st, "job2", 0, 1, 1, true)
	if err := in.op.RestoreState(&stream.RestoreContext{CheckpointID: 7, JobID: "job1", State: snap}); err != nil {
		t.Fatal(err)
	}
	in.write(t, 2)
	err := in.op.SnapshotState(&stream.SnapshotContext{CheckpointID: 1})
	if err == nil || !strings.Contains(err.Error(), "checkpoint ids must grow") {
		t.Fatalf("snapshot 1 after restoring 7: %v, want an error saying ids must grow", err)
	}
	if err := in.op.SnapshotState(&stream.SnapshotContext{CheckpointID: 8}); err != nil {
		t.Fatalf("snapshot 8 after restoring 7: %v", err)
	}
}
