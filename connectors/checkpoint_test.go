package connectors

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/weirstream/weir/internal/statecodec"
	"github.com/weirstream/weir/stream"
	"github.com/weirstream/weir/stream/twophase"
)

// snapshot calls SnapshotState for checkpoint id and returns the state.
func snapshot(t *testing.T, op stream.Checkpointed, id int64) *stream.OperatorSnapshot {
	t.Helper()
	c := &stream.SnapshotContext{CheckpointID: id, KeyGroups: stream.KeyGroupRange{Start: 0, End: -1}}
	if err := op.SnapshotState(c); err != nil {
		t.Fatalf("SnapshotState(%d): %v", id, err)
	}
	return &c.State
}

func restore(op stream.Checkpointed, id int64, st *stream.OperatorSnapshot) error {
	return op.RestoreState(&stream.RestoreContext{CheckpointID: id, State: st})
}

// pollN polls src n times (or until it ends) into c.
func pollN(t *testing.T, src stream.Source, c *collector, n int) {
	t.Helper()
	for range n {
		st, err := src.Poll(context.Background(), c)
		if err != nil {
			t.Fatal(err)
		}
		if st == stream.PollEnd {
			return
		}
	}
}

func TestDatagenCheckpointResumes(t *testing.T) {
	cfg := DatagenConfig{Rows: 1000, BatchSize: 64, Fields: []DatagenField{
		{Name: "seq", Kind: "sequence"}, {Name: "k", Kind: "key", Cardinality: 7},
	}}
	for _, par := range []int{1, 3} {
		t.Run(fmt.Sprintf("parallelism %d", par), func(t *testing.T) {
			var got [][]any
			for sub := range par {
				d1, _ := NewDatagen(cfg)
				d1.Open(t.Context(), octxFor(sub, par))
				var c collector
				pollN(t, d1, &c, 2+sub)
				st := snapshot(t, d1, 7)
				pollN(t, d1, &c, 1) // rows after the checkpoint, lost in the "crash"

				d2, _ := NewDatagen(cfg)
				d2.Open(t.Context(), octxFor(sub, par))
				if err := restore(d2, 7, st); err != nil {
					t.Fatal(err)
				}
				rows := c.rows()[:(2+sub)*64]
				rest, err := drain(t, d2, 100)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, append(rows, rest...)...)
			}
			// Independently: every seq below Rows exactly once, with its row.
			slices.SortFunc(got, func(a, b []any) int { return int(a[0].(int64) - b[0].(int64)) })
			if len(got) != 1000 {
				t.Fatalf("got %d rows, want 1000", len(got))
			}
			for i, r := range got {
				if !reflect.DeepEqual(r, GenerateRow(cfg, int64(i))) {
					t.Fatalf("row %d = %v, want %v", i, r, GenerateRow(cfg, int64(i)))
				}
			}
		})
	}
}

// datagenV1 is a datagen position item of format version 1, as checkpoints
// written before datagen could be rescaled hold.
func datagenV1(subtask, par, pos int64) []byte {
	return statecodec.AppendVarint(statecodec.AppendVarint(statecodec.AppendVarint([]byte{1}, subtask), par), pos)
}

// datagenV2 is a datagen split item of format version 2.
func datagenV2(start, stride, pos int64) []byte {
	return statecodec.AppendVarint(statecodec.AppendVarint(statecodec.AppendVarint([]byte{2}, start), stride), pos)
}

func datagenState(marker int64, items ...[]byte) *stream.OperatorSnapshot {
	st := &stream.OperatorSnapshot{List: map[string][][]byte{datagenStateName: items}}
	if marker > 0 {
		st.Union = map[string][][]byte{datagenMarkerState: {statecodec.AppendVarint([]byte{1}, marker)}}
	}
	return st
}

func TestDatagenRestoreErrors(t *testing.T) {
	cfg := DatagenConfig{Rows: 100, Fields: []DatagenField{{Name: "seq", Kind: "sequence"}}}
	tests := []struct {
		name     string
		sub, par int
		st       *stream.OperatorSnapshot
		kind     error
		names    string // what else the message names
	}{
		{"old format rescaled", 0, 4, datagenState(0, datagenV1(0, 2, 0)), errRescale, "restore it with parallelism 2"},
		{"old format other subtask", 0, 2, datagenState(0, datagenV1(1, 2, 0)), errMisrouted, "subtask 1"},
		{"old format two items", 0, 2, datagenState(0, datagenV1(0, 2, 0), datagenV1(1, 2, 0)), errMisrouted, "2 positions"},
		{"split twice", 0, 3, datagenState(2, datagenV2(1, 2, 0), datagenV2(1, 2, 3)), errMisrouted, "split 1 twice"},
		{"corrupt", 0, 1, datagenState(0, []byte{1, 0}), statecodec.ErrTruncated, "checkpoint 1"},
		{"bad version", 0, 1, datagenState(0, []byte{9, 0, 2, 0}), statecodec.ErrVersion, "version 9"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, _ := NewDatagen(cfg)
			d.Open(t.Context(), octxFor(tc.sub, tc.par))
			err := restore(d, 1, tc.st)
			if !errors.Is(err, tc.kind) || !strings.Contains(err.Error(), tc.names) {
				t.Fatalf("RestoreState = %v, want %v naming %q", err, tc.kind, tc.names)
			}
		})
	}
	// Damaged state: the error says why.
	for _, tc := range []struct {
		name  string
		st    *stream.OperatorSnapshot
		names string
	}{
		{"splits without marker", datagenState(0, datagenV2(0, 2, 0)), "damaged"},
		{"stride not the split count", datagenState(2, datagenV2(0, 3, 0)), "stride 3"},
		{"start beyond stride", datagenState(2, datagenV2(2, 2, 0)), "split 2 of 2"},
		{"position beyond rows", datagenState(2, datagenV2(0, 2, 51)), "different datagen config"},
		{"marker zero", &stream.OperatorSnapshot{Union: map[string][][]byte{datagenMarkerState: {{1, 0}}}}, "not positive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, _ := NewDatagen(cfg)
			d.Open(t.Context(), octxFor(0, 2))
			if err := restore(d, 1, tc.st); err == nil || !strings.Contains(err.Error(), tc.names) {
				t.Fatalf("RestoreState = %v, want an error naming %q", err, tc.names)
			}
		})
	}
}

func TestFileSourceCheckpointResumesMidFile(t *testing.T) {
	dir := t.TempDir()
	var all []string
	for f := range 3 {
		var b strings.Builder
		for i := range 50 + 20*f {
			line := fmt.Sprintf("f%d-line%d-%s", f, i, strings.Repeat("x", i%7))
			b.WriteString(line + "\n")
			all = append(all, line)
		}
		writeFile(t, filepath.Join(dir, fmt.Sprintf("in%d.txt", f)), b.String())
	}
	cfg := FileSourceConfig{Path: dir, BatchSize: 16}
	for _, par := range []int{1, 2} {
		for _, shuffle := range []bool{false, true} {
			t.Run(fmt.Sprintf("parallelism %d shuffled %v", par, shuffle), func(t *testing.T) {
				var got []string
				snaps := make([]*stream.OperatorSnapshot, par)
				for sub := range par {
					s := openFileSource(t, cfg, sub, par, nil)
					var c collector
					pollN(t, s, &c, 3+sub) // stops mid-file
					for _, r := range c.rows() {
						got = append(got, r[0].(string))
					}
					snaps[sub] = snapshot(t, s, 3)
					pollN(t, s, &c, 2) // read after the checkpoint: replayed
				}
				// Restore: each subtask gets its own list items, or (shuffled)
				// the items are dealt out round-robin in reverse order.
				var items [][]byte
				for _, st := range snaps {
					items = append(items, st.List[fileSplitsState]...)
				}
				if shuffle {
					slices.Reverse(items)
				}
				union := snaps[0].Union
				for sub := range par {
					st := &stream.OperatorSnapshot{Union: union, List: map[string][][]byte{}}
					if shuffle {
						for i := sub; i < len(items); i += par {
							st.List[fileSplitsState] = append(st.List[fileSplitsState], items[i])
						}
					} else {
						st.List = snaps[sub].List
					}
					s := openFileSource(t, cfg, sub, par, nil)
					if err := restore(s, 3, st); err != nil {
						t.Fatal(err)
					}
					rows, err := drain(t, s, 100)
					if err != nil {
						t.Fatal(err)
					}
					for _, r := range rows {
						got = append(got, r[0].(string))
					}
				}
				slices.Sort(got)
				want := slices.Sorted(slices.Values(all))
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("got %d lines, want %d (each line exactly once)", len(got), len(want))
				}
			})
		}
	}
}

func TestFileSourceRestoreWithoutStateReadsItsFiles(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a"), "1\n2\n")
	s := openFileSource(t, FileSourceConfig{Path: dir}, 0, 1, nil)
	if err := restore(s, 1, &stream.OperatorSnapshot{}); err != nil {
		t.Fatal(err)
	}
	rows, _ := drain(t, s, 10)
	if len(rows) != 2 {
		t.Fatalf("rows %v", rows)
	}
}

// --- two-phase-commit file sink ---

var idSchema = stream.MustSchema(stream.Field{Name: "id", Type: stream.TypeInt64})

func ids(from, to int) *stream.Batch {
	b := stream.NewBatch(idSchema, to-from)
	for i := from; i < to; i++ {
		b.AppendRow(int64(i))
	}
	return b
}

// The job and operator of the transactional sinks in tests.
const (
	testJob  = "job1"
	testSink = "sink"
)

// ipName and finName are the in-progress and committed names of testJob's
// testSink.
func ipName(subtask int, txn int64) string  { return InProgressName(testJob, testSink, subtask, txn) }
func finName(subtask int, seq int64) string { return CommittedName(testJob, testSink, subtask, seq) }

// txnSink opens a checkpointing csv file sink of testJob's testSink in dir;
// a test that "crashes" it simply stops using it (Cleanup closes it after
// the test).
func txnSink(t *testing.T, dir string, subtask, par int) *FileSink {
	t.Helper()
	return txnSinkAttempt(t, dir, subtask, par, 1)
}

// dirFiles returns name → data rows (header checked and dropped) of every
// file in dir, hidden ones included, except the claim file.
func dirFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range entries {
		if e.Name() == ClaimFile {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		body, ok := strings.CutPrefix(string(data), "id\n")
		if !ok {
			t.Fatalf("%s does not start with the csv header: %q", e.Name(), data)
		}
		out[e.Name()] = body
	}
	return out
}

func lines(from, to int) string {
	var b strings.Builder
	for i := from; i < to; i++ {
		b.WriteString(strconv.Itoa(i) + "\n")
	}
	return b.String()
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func checkDir(t *testing.T, dir string, want map[string]string) {
	t.Helper()
	if got := dirFiles(t, dir); !reflect.DeepEqual(got, want) {
		t.Fatalf("directory holds\n%v\nwant\n%v", got, want)
	}
}

func TestTxnFileSinkCommitsOnCheckpointComplete(t *testing.T) {
	dir := t.TempDir()
	s := txnSink(t, dir, 0, 1)
	must(t, s.ProcessBatch(0, ids(0, 3), nil))
	must(t, s.ProcessBatch(0, ids(3, 5), nil))
	if entries, _ := os.ReadDir(dir); len(entries) != 2 || entries[0].Name() != ipName(0, 0) || entries[1].Name() != ClaimFile {
		t.Fatalf("before the checkpoint the directory holds %v, want only the claim and the hidden in-progress file", entries)
	}
	snapshot(t, s, 1)
	checkDir(t, dir, map[string]string{ipName(0, 0): lines(0, 5)})
	must(t, s.ProcessBatch(0, ids(5, 6), nil))
	must(t, s.NotifyCheckpointComplete(1))
	must(t, s.Finish(nil))
	checkDir(t, dir, map[string]string{finName(0, 0): lines(0, 5), ipName(0, 1): lines(5, 6)})
	// An empty checkpoint interval makes no file.
	snapshot(t, s, 2)
	must(t, s.NotifyCheckpointComplete(2))
	snapshot(t, s, 3)
	must(t, s.NotifyCheckpointComplete(3))
	must(t, s.Close())
	checkDir(t, dir, map[string]string{finName(0, 0): lines(0, 5), finName(0, 1): lines(5, 6)})
}

func TestTxnFileSinkCrashBeforeNotify(t *testing.T) {
	// snapshot 1, no notification, crash, restore from 1: the pending file
	// is committed, the later in-progress file deleted, the replay written
	// once.
	dir := t.TempDir()
	s1 := txnSink(t, dir, 0, 1)
	must(t, s1.ProcessBatch(0, ids(0, 4), nil))
	st := snapshot(t, s1, 1)
	must(t, s1.ProcessBatch(0, ids(4, 9), nil))
	must(t, s1.Finish(nil)) // the rows after the checkpoint reach the disk
	checkDir(t, dir, map[string]string{ipName(0, 0): lines(0, 4), ipName(0, 1): lines(4, 9)})

	s2 := txnSinkAttempt(t, dir, 0, 1, 2)
	must(t, restore(s2, 1, st))
	checkDir(t, dir, map[string]string{finName(0, 0): lines(0, 4)})
	must(t, s2.ProcessBatch(0, ids(4, 9), nil)) // the replay
	must(t, s2.Finish(nil))
	// The next transaction writes a file of its own attempt.
	checkDir(t, dir, map[string]string{finName(0, 0): lines(0, 4), ipName(0, 1<<32): lines(4, 9)})
	snapshot(t, s2, 2)
	must(t, s2.NotifyCheckpointComplete(2))
	checkDir(t, dir, map[string]string{finName(0, 0): lines(0, 4), finName(0, 1): lines(4, 9)})
}

func TestTxnFileSinkCrashAfterNotifyIsIdempotent(t *testing.T) {
	// snapshot 1, notify 1, write more, crash, restore from 1.
	dir := t.TempDir()
	s1 := txnSink(t, dir, 0, 1)
	must(t, s1.ProcessBatch(0, ids(0, 4), nil))
	st := snapshot(t, s1, 1)
	must(t, s1.NotifyCheckpointComplete(1))
	must(t, s1.ProcessBatch(0, ids(4, 6), nil))
	must(t, s1.Finish(nil))
	checkDir(t, dir, map[string]string{finName(0, 0): lines(0, 4), ipName(0, 1): lines(4, 6)})

	s2 := txnSink(t, dir, 0, 1)
	must(t, restore(s2, 1, st))
	checkDir(t, dir, map[string]string{finName(0, 0): lines(0, 4)})
	// Restoring the same checkpoint twice (a failure during recovery) is
	// idempotent too.
	s3 := txnSink(t, dir, 0, 1)
	must(t, restore(s3, 1, st))
	checkDir(t, dir, map[string]string{finName(0, 0): lines(0, 4)})
	must(t, s3.ProcessBatch(0, ids(4, 6), nil))
	snapshot(t, s3, 2)
	must(t, s3.NotifyCheckpointComplete(2))
	checkDir(t, dir, map[string]string{finName(0, 0): lines(0, 4), finName(0, 1): lines(4, 6)})
}

func TestTxnFileSinkAbortThenComplete(t *testing.T) {
	dir := t.TempDir()
	s := txnSink(t, dir, 0, 1)
	must(t, s.ProcessBatch(0, ids(0, 2), nil))
	snapshot(t, s, 1)
	must(t, s.NotifyCheckpointAborted(1))
	checkDir(t, dir, map[string]string{ipName(0, 0): lines(0, 2)})
	must(t, s.ProcessBatch(0, ids(2, 3), nil))
	st := snapshot(t, s, 2)
	if n := len(st.List[twophase.PendingState]); n != 2 {
		t.Fatalf("checkpoint 2 records %d pending transactions, want 2 (the aborted one too)", n)
	}
	must(t, s.ProcessBatch(0, ids(3, 4), nil))
	must(t, s.NotifyCheckpointComplete(2))
	must(t, s.Finish(nil))
	checkDir(t, dir, map[string]string{finName(0, 0): lines(0, 2), finName(0, 1): lines(2, 3), ipName(0, 2): lines(3, 4)})

	// A crash restoring checkpoint 2 before its notification commits both.
	dir2 := t.TempDir()
	a := txnSink(t, dir2, 0, 1)
	must(t, a.ProcessBatch(0, ids(0, 2), nil))
	snapshot(t, a, 1)
	must(t, a.NotifyCheckpointAborted(1))
	must(t, a.ProcessBatch(0, ids(2, 3), nil))
	st = snapshot(t, a, 2)
	b := txnSink(t, dir2, 0, 1)
	must(t, restore(b, 2, st))
	checkDir(t, dir2, map[string]string{finName(0, 0): lines(0, 2), finName(0, 1): lines(2, 3)})
}

func TestTxnFileSinkSubtasksShareDirectory(t *testing.T) {
	// Subtasks 1 and 10 share a directory (and a name prefix); restoring
	// one never touches the other's files.
	dir := t.TempDir()
	s1 := txnSink(t, dir, 1, 11)
	s10 := txnSink(t, dir, 10, 11)
	must(t, s1.ProcessBatch(0, ids(0, 2), nil))
	must(t, s10.ProcessBatch(0, ids(100, 102), nil))
	st1 := snapshot(t, s1, 1)
	snapshot(t, s10, 1)
	must(t, s1.ProcessBatch(0, ids(2, 3), nil))
	must(t, s1.Finish(nil))
	must(t, s10.ProcessBatch(0, ids(102, 103), nil))
	must(t, s10.Finish(nil))

	r1 := txnSink(t, dir, 1, 11)
	must(t, restore(r1, 1, st1))
	checkDir(t, dir, map[string]string{
		finName(1, 0): lines(0, 2),
		ipName(10, 0): lines(100, 102),
		ipName(10, 1): lines(102, 103),
	})
	// Legacy state without "writers" (written before the sink could be
	// rescaled): restoring subtask 1's state into subtask 10, or at another
	// parallelism, is refused.
	old := legacyState(t, s1, 3, sinkIdentity(testJob, testSink))
	r10 := txnSink(t, dir, 10, 11)
	if err := restore(r10, 1, old); !errors.Is(err, errRescale) {
		t.Fatalf("restore of another subtask's state = %v, want errRescale", err)
	}
	// The fix names the parallelism the checkpoint was taken with.
	r2 := txnSink(t, dir, 1, 2)
	if err := restore(r2, 1, old); !errors.Is(err, errRescale) || !strings.Contains(err.Error(), "parallelism 11") {
		t.Fatalf("restore at another parallelism = %v, want errRescale naming parallelism 11", err)
	}
}

func TestTxnFileSinkFreshStart(t *testing.T) {
	// A job started without a checkpoint (e.g. restarted before its first
	// checkpoint completed) deletes its stale in-progress files and never
	// overwrites committed ones.
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, finName(0, 0)), "id\n7\n")
	writeFile(t, filepath.Join(dir, ipName(0, 0)), "id\n8\n")
	writeFile(t, filepath.Join(dir, ipName(0, 3)), "id\n9\n")
	writeFile(t, filepath.Join(dir, ipName(1, 0)), "id\n10\n")
	s := txnSink(t, dir, 0, 2)
	must(t, s.ProcessBatch(0, ids(0, 1), nil))
	snapshot(t, s, 1)
	must(t, s.NotifyCheckpointComplete(1))
	checkDir(t, dir, map[string]string{finName(0, 0): "7\n", finName(0, 1): "0\n", ipName(1, 0): "10\n"})
}

func TestTxnFileSinkCommitOfLostFileFails(t *testing.T) {
	dir := t.TempDir()
	s := txnSink(t, dir, 0, 1)
	must(t, s.ProcessBatch(0, ids(0, 1), nil))
	snapshot(t, s, 1)
	must(t, os.Remove(filepath.Join(dir, ipName(0, 0))))
	err := s.NotifyCheckpointComplete(1)
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), ipName(0, 0)) || !strings.Contains(err.Error(), finName(0, 0)+" ") {
		t.Fatalf("commit of a deleted file = %v, want fs.ErrNotExist naming both files", err)
	}
}

func TestFileSinkWithoutCheckpointingUnchanged(t *testing.T) {
	dir := t.TempDir()
	got := runFileSink(t, FileSinkConfig{Path: dir, Format: "csv"}, 2)
	if !strings.HasPrefix(got, "id,name,score,ok,at\n") {
		t.Fatalf("part file %q", got)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != "part-2" {
		t.Fatalf("directory holds %v, want only part-2", entries)
	}
}

func TestTxnFileSinkStaleAttemptCannotTouchCurrentFiles(t *testing.T) {
	// Attempt 1 is paused (a stopped taskmanager) while attempt 2 restores
	// from checkpoint 1 and carries on; then attempt 1 resumes and writes.
	// The two never share an in-progress file, and attempt 1's rows never
	// become visible.
	dir := t.TempDir()
	s1 := txnSink(t, dir, 0, 1)
	must(t, s1.ProcessBatch(0, ids(0, 4), nil))
	st := snapshot(t, s1, 1)

	s2 := txnSinkAttempt(t, dir, 0, 1, 2)
	must(t, restore(s2, 1, st))
	must(t, s2.ProcessBatch(0, ids(4, 6), nil))
	must(t, s1.ProcessBatch(0, ids(100, 103), nil)) // the zombie resumes
	snapshot(t, s1, 2)                              // its pre-commit is never acknowledged or notified
	must(t, s1.Close())
	must(t, s2.Finish(nil))
	checkDir(t, dir, map[string]string{finName(0, 0): lines(0, 4), ipName(0, 1): lines(100, 103), ipName(0, 1<<32): lines(4, 6)})
	snapshot(t, s2, 2)
	must(t, s2.NotifyCheckpointComplete(2))
	must(t, s2.Close())
	var visible []string
	for name, body := range dirFiles(t, dir) {
		if !strings.HasPrefix(name, ".") {
			visible = append(visible, strings.Fields(body)...)
		}
	}
	slices.SortFunc(visible, func(a, b string) int { x, _ := strconv.Atoi(a); y, _ := strconv.Atoi(b); return x - y })
	if got := strings.Join(visible, "\n") + "\n"; got != lines(0, 6) {
		t.Fatalf("visible rows %q, want exactly 0..5 once", got)
	}
}

func txnSinkAttempt(t *testing.T, dir string, subtask, par int, attempt int64) *FileSink {
	t.Helper()
	s, err := openTxnSink(t, dir, testJob, testSink, subtask, par, attempt)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// openTxnSink opens a checkpointing csv file sink of operator uid of job in
// dir. It may be called from any goroutine.
func openTxnSink(t *testing.T, dir, job, uid string, subtask, par int, attempt int64) (*FileSink, error) {
	return openTxnSinkFrom(t, dir, job, uid, "", subtask, par, attempt)
}

// openTxnSinkFrom is openTxnSink for a subtask that restores a checkpoint
// of job restoreJob (OperatorContext.RestoreJobID; "" for a fresh start).
func openTxnSinkFrom(t *testing.T, dir, job, uid, restoreJob string, subtask, par int, attempt int64) (*FileSink, error) {
	s, err := NewFileSink(FileSinkConfig{Path: dir, Format: "csv"})
	if err != nil {
		return nil, err
	}
	octx := &stream.OperatorContext{JobID: job, OperatorUID: uid, Subtask: subtask, Parallelism: par, Attempt: attempt,
		RestoreJobID: restoreJob, InputSchemas: []*stream.Schema{idSchema}, Checkpointing: true, CheckpointMode: stream.ExactlyOnce}
	if err := s.Open(t.Context(), octx); err != nil {
		return nil, err
	}
	t.Cleanup(func() { s.Close() })
	return s, nil
}
