package connectors

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/weirstream/weir/internal/statecodec"
	"github.com/weirstream/weir/stream"
	"github.com/weirstream/weir/stream/twophase"
)

// Tests of the transactional file sink in a directory that other jobs,
// operators or subtasks also write to, or once wrote to.

func TestTxnFileSinkDirClaimedByAnotherWriter(t *testing.T) {
	for _, tc := range []struct {
		name, job, uid string
	}{
		{"another job", "job2", testSink},
		{"another operator of the same job", testJob, "sink2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s := txnSink(t, dir, 0, 1)
			must(t, s.ProcessBatch(0, ids(0, 2), nil))
			must(t, s.Finish(nil))
			before := dirFiles(t, dir)

			_, err := openTxnSink(t, dir, tc.job, tc.uid, 0, 1, 1)
			if !errors.Is(err, ErrSinkDirClaimed) {
				t.Fatalf("open of a claimed directory = %v, want ErrSinkDirClaimed", err)
			}
			msg := err.Error()
			for _, want := range []string{dir, strconv.Quote(testJob), strconv.Quote(testSink), filepath.Join(dir, ClaimFile), "use another directory"} {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q does not name %s", msg, want)
				}
			}
			if got := dirFiles(t, dir); !reflect.DeepEqual(got, before) {
				t.Fatalf("the refused sink changed the directory to %v", got)
			}
			// The holder carries on unharmed.
			snapshot(t, s, 1)
			must(t, s.NotifyCheckpointComplete(1))
			checkDir(t, dir, map[string]string{finName(0, 0): lines(0, 2)})
		})
	}
}

func TestTxnFileSinkClaimIsRaceFree(t *testing.T) {
	// All subtasks of one operator open at once, then all restore as the
	// next attempt: every open is accepted and the claim names the job.
	const par = 8
	dir := t.TempDir()
	sinks := make([]*FileSink, par)
	errs := make([]error, par)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range par {
		wg.Go(func() {
			<-start
			sinks[i], errs[i] = openTxnSink(t, dir, testJob, testSink, i, par, 1)
		})
	}
	close(start)
	wg.Wait()
	states := make([]*stream.OperatorSnapshot, par)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("subtask %d: %v", i, err)
		}
		must(t, sinks[i].ProcessBatch(0, ids(10*i, 10*i+3), nil))
		states[i] = snapshot(t, sinks[i], 1) // then the attempt fails
	}
	data, err := os.ReadFile(filepath.Join(dir, ClaimFile))
	must(t, err)
	var c sinkClaim
	if err := json.Unmarshal(data, &c); err != nil || c != (sinkClaim{Version: 1, JobID: testJob, OperatorUID: testSink}) {
		t.Fatalf("claim file holds %q (%v)", data, err)
	}

	start = make(chan struct{})
	for i := range par {
		wg.Go(func() {
			<-start
			s, err := openTxnSink(t, dir, testJob, testSink, i, par, 2)
			if err == nil {
				err = restore(s, 1, states[i])
			}
			errs[i] = err
		})
	}
	close(start)
	wg.Wait()
	want := map[string]string{}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("restore of subtask %d: %v", i, err)
		}
		want[finName(i, 0)] = lines(10*i, 10*i+3)
	}
	checkDir(t, dir, want)

	// Two jobs racing for a fresh directory: exactly one wins.
	for round := range 20 {
		dir := t.TempDir()
		var open [2]error
		for j := range open {
			wg.Go(func() { _, open[j] = openTxnSink(t, dir, "job"+strconv.Itoa(j), testSink, 0, 1, 1) })
		}
		wg.Wait()
		if (open[0] == nil) == (open[1] == nil) || !errors.Is(errors.Join(open[:]...), ErrSinkDirClaimed) {
			t.Fatalf("round %d: two jobs opening one directory got %v and %v, want exactly one ErrSinkDirClaimed", round, open[0], open[1])
		}
	}
}

func TestTxnFileSinkUnreadableClaim(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, ClaimFile), "secret-value\n")
	_, err := openTxnSink(t, dir, testJob, testSink, 0, 1, 1)
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, ClaimFile)) || strings.Contains(err.Error(), "secret") {
		t.Fatalf("open with a corrupt claim = %v, want an error naming the file and not its content", err)
	}
}

// foreignFiles are files of other jobs, operators and subtasks, and of the
// name format before names carried the identity, with the same subtask and
// numbers as testJob's testSink subtask 0 uses; some names begin with its
// file name prefixes. The tests that write them run subtask 0 of 2, which
// does not own subtask 1's files: a subtask of 1 would delete them.
var foreignFiles = []string{
	InProgressName("job2", testSink, 0, 0),
	InProgressName(testJob, "sink2", 0, 0),
	InProgressName(testJob, testSink+"-0", 0, 0),
	InProgressName(testJob, testSink, 1, 0),
	".part-0-0.inprogress",
	CommittedName("job2", testSink, 0, 0),
	CommittedName(testJob, "sink2", 0, 0),
	CommittedName(testJob, testSink+"-0", 0, 9),
	"part-0-0",
	"part-0-1",
}

func writeForeignFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	want := map[string]string{}
	for i, name := range foreignFiles {
		body := fmt.Sprintf("%d\n", 1000+i)
		writeFile(t, filepath.Join(dir, name), "id\n"+body)
		want[name] = body
	}
	return want
}

func TestTxnFileSinkCleansOnlyItsOwnFiles(t *testing.T) {
	for _, restart := range []string{"fresh start", "restore"} {
		t.Run(restart, func(t *testing.T) {
			dir := t.TempDir()
			want := writeForeignFiles(t, dir)
			// Stale in-progress files of this sink, from two attempts.
			writeFile(t, filepath.Join(dir, ipName(0, 0)), "id\n8\n")
			writeFile(t, filepath.Join(dir, ipName(0, 1<<32)), "id\n9\n")
			s := txnSink(t, dir, 0, 2)
			if restart == "restore" {
				must(t, restore(s, 1, &stream.OperatorSnapshot{}))
			}
			must(t, s.ProcessBatch(0, ids(0, 3), nil))
			snapshot(t, s, 2)
			must(t, s.NotifyCheckpointComplete(2))
			want[finName(0, 0)] = lines(0, 3)
			checkDir(t, dir, want)
		})
	}
}

// ownRows returns the rows in testSink's committed files of subtask 0,
// sorted, duplicates included.
func ownRows(t *testing.T, dir string) []int {
	t.Helper()
	var rows []int
	for name, body := range dirFiles(t, dir) {
		if _, ok := parseNumbered(name, committedPrefix(sinkIdentity(testJob, testSink), 0), ""); !ok {
			continue
		}
		for _, f := range strings.Fields(body) {
			n, err := strconv.Atoi(f)
			must(t, err)
			rows = append(rows, n)
		}
	}
	slices.Sort(rows)
	return rows
}

func TestTxnFileSinkRestoreCommitsRecordedTransactionsOnce(t *testing.T) {
	// Two transactions are pending in checkpoint 2 (checkpoint 1 was
	// aborted); rows after it are lost in a crash. The directory also holds
	// committed files of other writers with the same seqs. Restoring
	// commits both transactions, restoring again (a failure during
	// recovery) commits nothing twice, and after the replay every row is
	// committed exactly once.
	dir := t.TempDir()
	want := writeForeignFiles(t, dir)
	s1 := txnSink(t, dir, 0, 2)
	must(t, s1.ProcessBatch(0, ids(0, 4), nil))
	snapshot(t, s1, 1)
	must(t, s1.NotifyCheckpointAborted(1))
	must(t, s1.ProcessBatch(0, ids(4, 7), nil))
	st := snapshot(t, s1, 2)
	if n := len(st.List[twophase.PendingState]); n != 2 {
		t.Fatalf("checkpoint 2 records %d pending transactions, want 2", n)
	}
	must(t, s1.ProcessBatch(0, ids(7, 9), nil))
	must(t, s1.Finish(nil))

	s2 := txnSinkAttempt(t, dir, 0, 2, 2)
	must(t, restore(s2, 2, st))
	want[finName(0, 0)], want[finName(0, 1)] = lines(0, 4), lines(4, 7)
	checkDir(t, dir, want)

	s3 := txnSinkAttempt(t, dir, 0, 2, 3)
	must(t, restore(s3, 2, st))
	checkDir(t, dir, want)
	must(t, s3.ProcessBatch(0, ids(7, 9), nil)) // the replay
	snapshot(t, s3, 3)
	must(t, s3.NotifyCheckpointComplete(3))
	must(t, s3.NotifyCheckpointComplete(3)) // a repeated notification
	must(t, s3.Close())
	want[finName(0, 2)] = lines(7, 9)
	checkDir(t, dir, want)

	got := ownRows(t, dir)
	wantRows := make([]int, 9)
	for i := range wantRows {
		wantRows[i] = i
	}
	if !slices.Equal(got, wantRows) {
		t.Fatalf("committed rows %v, want 0..8 each once", got)
	}
}

func TestTxnFileSinkCommitNeedsItsOwnFile(t *testing.T) {
	// A file under a pending transaction's committed name that the sink did
	// not write never counts as that transaction's commit, and is never
	// replaced. The errors name files, not their rows.
	for _, tc := range []struct {
		name     string
		inFlight bool   // the in-progress file is still there
		body     string // what else is under the committed name
	}{
		{"in-progress file gone, other size", false, "id\n555\n"},
		{"in-progress file gone, same size", false, "id\n5\n5\n5\n5\n"},
		{"in-progress file present", true, "id\n555\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s1 := txnSink(t, dir, 0, 1)
			must(t, s1.ProcessBatch(0, ids(0, 4), nil))
			st := snapshot(t, s1, 1)
			if !tc.inFlight {
				must(t, os.Remove(filepath.Join(dir, ipName(0, 0))))
			}
			writeFile(t, filepath.Join(dir, finName(0, 0)), tc.body)

			s2 := txnSinkAttempt(t, dir, 0, 1, 2)
			err := restore(s2, 1, st)
			if !errors.Is(err, fs.ErrExist) || !strings.Contains(err.Error(), finName(0, 0)) {
				t.Fatalf("restore = %v, want fs.ErrExist naming %s", err, finName(0, 0))
			}
			// The temporary directory's random name may hold "555" too.
			if msg := strings.ReplaceAll(err.Error(), dir, "<dir>"); strings.Contains(msg, "555") || strings.Contains(msg, "5\n5") {
				t.Fatalf("error %q echoes the file's rows", err)
			}
			data, rerr := os.ReadFile(filepath.Join(dir, finName(0, 0)))
			if rerr != nil || string(data) != tc.body {
				t.Fatalf("the other file now holds %q (%v)", data, rerr)
			}
		})
	}
}

func TestTxnFileSinkRestoresVersion1State(t *testing.T) {
	// Version 1 state names the files in the format without the job and
	// operator: they are committed under those names, and new files follow
	// in the current format, numbered after them.
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, ".part-0-0.inprogress"), "id\n0\n1\n")
	writeFile(t, filepath.Join(dir, "part-0-1"), "id\n2\n") // committed before a failure
	item := func(fields ...any) []byte {
		b := []byte{1}
		for _, f := range fields {
			switch f := f.(type) {
			case int:
				b = statecodec.AppendVarint(b, int64(f))
			case string:
				b = statecodec.AppendString(b, f)
			}
		}
		return b
	}
	st := &stream.OperatorSnapshot{List: map[string][][]byte{
		sinkPendingState: {
			item(0, 1, 1, ".part-0-0.inprogress", "part-0-0"),
			item(0, 1, 2, ".part-0-1.inprogress", "part-0-1"),
		},
		sinkCountersState: {item(0, 1, 2, 2)},
	}}
	s := txnSinkAttempt(t, dir, 0, 1, 2)
	must(t, restore(s, 2, st))
	must(t, s.ProcessBatch(0, ids(3, 4), nil))
	snapshot(t, s, 3)
	must(t, s.NotifyCheckpointComplete(3))
	checkDir(t, dir, map[string]string{"part-0-0": "0\n1\n", "part-0-1": "2\n", finName(0, 2): "3\n"})

	// A format version from the future is refused.
	st.List[sinkPendingState][0][0] = sinkPendingVersion + 1
	if err := restore(txnSinkAttempt(t, dir, 0, 1, 3), 2, st); !errors.Is(err, statecodec.ErrVersion) {
		t.Fatalf("restore of version %d state = %v, want statecodec.ErrVersion", sinkPendingVersion+1, err)
	}
}

func TestSinkFileNamesAreSafeAndDistinct(t *testing.T) {
	idents := [][2]string{
		{"3f2a9c0d1e2b4a5c", "counts-out"},
		{"a-b", "c"}, {"a", "b-c"}, // the same text, split differently
		{"a", "b"}, {"a", "b-0"},
		{"job", "../../etc/passwd"}, {"job", "a/b"}, {"job", "a\x00b"}, {"job", "über"},
		{"job", "x~y"}, {"job", ""}, {"", "op"}, {"job", "."}, {"job", ".."},
		{strings.Repeat("j", 300), "op"}, {"job", strings.Repeat("o", 300)},
		{"job", strings.Repeat("o", maxNameToken)}, {"job", strings.Repeat("o", maxNameToken+1)},
	}
	dir := t.TempDir()
	seen := map[string][2]string{}
	for _, id := range idents {
		for _, name := range []string{InProgressName(id[0], id[1], 3, 7), CommittedName(id[0], id[1], 3, 7)} {
			if prev, dup := seen[name]; dup {
				t.Fatalf("%q and %q both name a file %q", prev, id, name)
			}
			seen[name] = id
			if len(name) > 200 || strings.ContainsAny(name, "/\\\x00") {
				t.Fatalf("identity %q makes the unsafe name %q", id, name)
			}
			writeFile(t, filepath.Join(dir, name), "")
		}
	}
	if got := CommittedName("3f2a9c0d1e2b4a5c", "counts-out", 3, 7); got != "part-3f2a9c0d1e2b4a5c-counts-out-3-7" {
		t.Fatalf("ordinary ids make the name %q, want them readable", got)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != len(seen) {
		t.Fatalf("the directory holds %d files, want %d", len(entries), len(seen))
	}
}
