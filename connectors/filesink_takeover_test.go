package connectors

import (
	"errors"
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

// Tests of a transactional file sink of a job submitted from another job's
// checkpoint (weir submit --from), which carries on that job's output in
// the same directory.

const (
	jobA = testJob // the job whose checkpoint is restored
	jobB = "job3"  // the job submitted from it
	jobC = "job4"  // a third job
)

// restoreFrom calls RestoreState for checkpoint id taken by job.
func restoreFrom(op stream.Checkpointed, id int64, job string, st *stream.OperatorSnapshot) error {
	return op.RestoreState(&stream.RestoreContext{CheckpointID: id, JobID: job, State: st})
}

// sinkFrom opens subtask of testSink of job, which restores a checkpoint of
// restoreJob ("" for a fresh start), or fails the test.
func sinkFrom(t *testing.T, dir, job, restoreJob string, subtask, par int, attempt int64) *FileSink {
	t.Helper()
	s, err := openTxnSinkFrom(t, dir, job, testSink, restoreJob, subtask, par, attempt)
	must(t, err)
	return s
}

// claimOf returns the claim in dir.
func claimOf(t *testing.T, dir string) sinkClaim {
	t.Helper()
	c, err := readClaim(filepath.Join(dir, ClaimFile))
	must(t, err)
	return c
}

// committedRows returns the rows in the committed files of subtask of
// testSink of each of jobs, sorted, duplicates included.
func committedRows(t *testing.T, dir string, subtask int, jobs ...string) []int {
	t.Helper()
	var rows []int
	for name, body := range dirFiles(t, dir) {
		if !slices.ContainsFunc(jobs, func(job string) bool {
			_, ok := parseNumbered(name, committedPrefix(sinkIdentity(job, testSink), subtask), "")
			return ok
		}) {
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

func seq(from, to int) []int {
	var out []int
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}

func TestTxnFileSinkTakesOverFromAnotherJob(t *testing.T) {
	// Job A commits checkpoint 1, then pre-commits two transactions
	// (checkpoint 2 is aborted, checkpoint 3 is retained) and writes more
	// rows before it dies. Job B, submitted from A's checkpoint 3, takes
	// over the directory: it commits A's two transactions under A's names,
	// deletes A's later in-progress file, replays those rows and carries
	// on under its own names. Files of other jobs, operators and subtasks
	// stay as they are.
	for _, aCommitted := range []bool{false, true} {
		name := "A died before committing checkpoint 3"
		if aCommitted {
			name = "A committed checkpoint 3, then died"
		}
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			want := writeForeignFiles(t, dir)
			a := txnSink(t, dir, 0, 2) // subtask 1 is another's (foreignFiles)
			must(t, a.ProcessBatch(0, ids(0, 4), nil))
			snapshot(t, a, 1)
			must(t, a.NotifyCheckpointComplete(1))
			must(t, a.ProcessBatch(0, ids(4, 7), nil))
			snapshot(t, a, 2)
			must(t, a.NotifyCheckpointAborted(2))
			must(t, a.ProcessBatch(0, ids(7, 9), nil))
			st := snapshot(t, a, 3)
			if n := len(st.List[twophase.PendingState]); n != 2 {
				t.Fatalf("checkpoint 3 records %d pending transactions, want 2", n)
			}
			if aCommitted {
				must(t, a.NotifyCheckpointComplete(3))
			}
			must(t, a.ProcessBatch(0, ids(9, 12), nil)) // after checkpoint 3: B replays them
			must(t, a.Finish(nil))

			b := sinkFrom(t, dir, jobB, jobA, 0, 2, 1)
			if c := claimOf(t, dir); c.JobID != jobB || c.OperatorUID != testSink {
				t.Fatalf("after the takeover the claim names job %q, operator %q; want %q, %q", c.JobID, c.OperatorUID, jobB, testSink)
			}
			must(t, restoreFrom(b, 3, jobA, st))
			want[CommittedName(jobA, testSink, 0, 0)] = lines(0, 4)
			want[CommittedName(jobA, testSink, 0, 1)] = lines(4, 7)
			want[CommittedName(jobA, testSink, 0, 2)] = lines(7, 9)
			checkDir(t, dir, want)

			must(t, b.ProcessBatch(0, ids(9, 12), nil)) // the replay
			snapshot(t, b, 4)
			must(t, b.ProcessBatch(0, ids(12, 15), nil))
			snapshot(t, b, 5)
			for _, p := range b.txn.Pending() {
				h, err := decodeFileHandle(p.Handle)
				must(t, err)
				if h.ident != sinkIdentity(jobB, testSink) || p.ID.JobID != jobB {
					t.Fatalf("job B records its own transaction %s under identity %q, want %q", p.ID, h.ident, sinkIdentity(jobB, testSink))
				}
			}
			must(t, b.NotifyCheckpointComplete(5))
			must(t, b.ProcessBatch(0, ids(15, 17), nil))
			must(t, b.Finish(nil))
			snapshot(t, b, 6) // the final checkpoint
			must(t, b.NotifyCheckpointComplete(6))
			must(t, b.Close())

			// B numbers its files on from A's, under its own name.
			want[CommittedName(jobB, testSink, 0, 3)] = lines(9, 12)
			want[CommittedName(jobB, testSink, 0, 4)] = lines(12, 15)
			want[CommittedName(jobB, testSink, 0, 5)] = lines(15, 17)
			checkDir(t, dir, want)
			if got := committedRows(t, dir, 0, jobA, jobB); !slices.Equal(got, seq(0, 17)) {
				t.Fatalf("committed rows %v, want 0..16 each once", got)
			}
		})
	}
}

// legacyState returns the transactions that s has pending as the state of
// a checkpoint written before the sink was built on package twophase:
// "pending" items of format version (2 or 3), with identity ident in
// version 3, and no "writers" (as before the sink could be rescaled).
func legacyState(t *testing.T, s *FileSink, version byte, ident string) *stream.OperatorSnapshot {
	t.Helper()
	out := &stream.OperatorSnapshot{List: map[string][][]byte{}}
	for _, p := range s.txn.Pending() {
		h, err := decodeFileHandle(p.Handle)
		must(t, err)
		b := statecodec.AppendVarint(statecodec.AppendVarint(statecodec.AppendVarint([]byte{version}, int64(h.subtask)), int64(s.sys.par)), p.Checkpoint)
		if version == 3 {
			b = statecodec.AppendString(b, ident)
		}
		b = statecodec.AppendUvarint(statecodec.AppendVarint(statecodec.AppendVarint(statecodec.AppendVarint(b, h.id), h.seq), h.size), uint64(h.crc))
		out.List[sinkPendingState] = append(out.List[sinkPendingState], b)
	}
	if len(out.List[sinkPendingState]) == 0 {
		t.Fatal("legacyState: no pending transactions")
	}
	return out
}

func TestTxnFileSinkRestoresVersion2State(t *testing.T) {
	// Version 2 pending items carry no identity: the files are those of the
	// job that took the checkpoint (RestoreContext.JobID, empty for the
	// sink's own job).
	for _, tc := range []struct {
		name, job, restoreJob string
	}{
		{"own checkpoint, job id not given", jobA, ""},
		{"own checkpoint", jobA, jobA},
		{"another job's checkpoint", jobB, jobA},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			a := txnSink(t, dir, 0, 1)
			must(t, a.ProcessBatch(0, ids(0, 4), nil))
			snapshot(t, a, 1)
			must(t, a.ProcessBatch(0, ids(4, 6), nil))
			snapshot(t, a, 2)
			st := legacyState(t, a, 2, "")
			must(t, a.ProcessBatch(0, ids(6, 8), nil))
			must(t, a.Finish(nil))

			s := sinkFrom(t, dir, tc.job, tc.restoreJob, 0, 1, 2)
			must(t, restoreFrom(s, 2, tc.restoreJob, st))
			must(t, s.ProcessBatch(0, ids(6, 8), nil))
			snapshot(t, s, 3)
			must(t, s.NotifyCheckpointComplete(3))
			checkDir(t, dir, map[string]string{
				CommittedName(jobA, testSink, 0, 0):   lines(0, 4),
				CommittedName(jobA, testSink, 0, 1):   lines(4, 6),
				CommittedName(tc.job, testSink, 0, 2): lines(6, 8),
			})
		})
	}
}

func TestTxnFileSinkRestoresRecordedIdentity(t *testing.T) {
	// A version 3 item names the files by the identity it records, whoever
	// took the checkpoint: job B's own checkpoint may hold a transaction
	// of job A, whose checkpoint B started from.
	dir := t.TempDir()
	a := txnSink(t, dir, 0, 1)
	must(t, a.ProcessBatch(0, ids(0, 4), nil))
	st := snapshot(t, a, 1)
	claim := filepath.Join(dir, ClaimFile)
	must(t, os.Remove(claim)) // B holds the directory now
	b := sinkFrom(t, dir, jobB, jobB, 0, 1, 2)
	must(t, restoreFrom(b, 1, jobB, st))
	checkDir(t, dir, map[string]string{CommittedName(jobA, testSink, 0, 0): lines(0, 4)})

	// An identity that is not one the sink makes is corrupt state, and the
	// error does not quote it.
	for _, ident := range []string{"", "job1", "../../etc-x", "a/b-c", "job\x00-sink", strings.Repeat("j", 2*maxNameToken) + "-x"} {
		bad := legacyState(t, a, 3, ident)
		s := sinkFrom(t, dir, jobB, jobB, 0, 1, 3)
		err := restoreFrom(s, 1, jobB, bad)
		if err == nil || !strings.Contains(err.Error(), "corrupt") {
			t.Fatalf("restore of identity %q = %v, want a corrupt-state error", ident, err)
		}
		if ident != "" && strings.Contains(strings.ReplaceAll(err.Error(), dir, "<dir>"), ident) {
			t.Fatalf("error %q quotes the identity", err)
		}
	}
}

func TestTxnFileSinkTakeoverOnlyFromTheRestoredJob(t *testing.T) {
	dir := t.TempDir()
	a := txnSink(t, dir, 0, 1)
	must(t, a.ProcessBatch(0, ids(0, 3), nil))
	st := snapshot(t, a, 1)
	must(t, a.Finish(nil))

	// Restoring A's checkpoint does not give another operator A's claim.
	if _, err := openTxnSinkFrom(t, dir, jobB, "sink2", jobA, 0, 1, 1); !errors.Is(err, ErrSinkDirClaimed) {
		t.Fatalf("another operator restoring job A's checkpoint: open = %v, want ErrSinkDirClaimed", err)
	}
	b := sinkFrom(t, dir, jobB, jobA, 0, 1, 1)
	must(t, restoreFrom(b, 1, jobA, st))
	before := dirFiles(t, dir)

	for _, tc := range []struct {
		name, job, uid, restoreJob string
	}{
		{"another job restoring the same checkpoint", jobC, testSink, jobA},
		{"another job starting fresh", jobC, testSink, ""},
		{"the old job restarting from its own checkpoint", jobA, testSink, jobA},
		{"the old job starting fresh", jobA, testSink, ""},
		{"another operator of the new job", jobB, "sink2", jobA},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := openTxnSinkFrom(t, dir, tc.job, tc.uid, tc.restoreJob, 0, 1, 1)
			if !errors.Is(err, ErrSinkDirClaimed) {
				t.Fatalf("open = %v, want ErrSinkDirClaimed", err)
			}
			wants := []string{dir, strconv.Quote(jobB), strconv.Quote(tc.job), filepath.Join(dir, ClaimFile)}
			if tc.restoreJob != "" && tc.restoreJob != tc.job {
				wants = append(wants, "restores a checkpoint of job "+strconv.Quote(tc.restoreJob))
			}
			for _, want := range wants {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not name %s", err, want)
				}
			}
			if got := dirFiles(t, dir); !reflect.DeepEqual(got, before) {
				t.Fatalf("the refused sink changed the directory to %v", got)
			}
			if c := claimOf(t, dir); c.JobID != jobB || c.OperatorUID != testSink {
				t.Fatalf("the claim names job %q, operator %q; want %q, %q", c.JobID, c.OperatorUID, jobB, testSink)
			}
		})
	}

	// A later attempt of B, restoring A's checkpoint again or B's own, is
	// accepted.
	b2 := sinkFrom(t, dir, jobB, jobA, 0, 1, 2)
	must(t, restoreFrom(b2, 1, jobA, st))
	must(t, b2.ProcessBatch(0, ids(3, 5), nil))
	stB := snapshot(t, b2, 2)
	b3 := sinkFrom(t, dir, jobB, jobB, 0, 1, 3)
	must(t, restoreFrom(b3, 2, jobB, stB))
	checkDir(t, dir, map[string]string{
		CommittedName(jobA, testSink, 0, 0): lines(0, 3),
		CommittedName(jobB, testSink, 0, 1): lines(3, 5),
	})
}

func TestTxnFileSinkTakeoverIsRaceFree(t *testing.T) {
	// All subtasks of job B open at once, taking over job A's claim, and
	// restore A's checkpoint: every one succeeds, the claim names B, and
	// each commits exactly its own transaction of A and deletes exactly
	// its own stale file of A.
	const par = 8
	for round := range 10 {
		dir := t.TempDir()
		states := make([]*stream.OperatorSnapshot, par)
		want := map[string]string{}
		for i := range par {
			a := txnSink(t, dir, i, par)
			must(t, a.ProcessBatch(0, ids(10*i, 10*i+3), nil))
			states[i] = snapshot(t, a, 1)
			must(t, a.ProcessBatch(0, ids(10*i+3, 10*i+5), nil))
			must(t, a.Finish(nil))
			want[CommittedName(jobA, testSink, i, 0)] = lines(10*i, 10*i+3)
		}
		errs := make([]error, par)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range par {
			wg.Go(func() {
				<-start
				s, err := openTxnSinkFrom(t, dir, jobB, testSink, jobA, i, par, 1)
				if err == nil {
					err = restoreFrom(s, 1, jobA, states[i])
				}
				errs[i] = err
			})
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d: subtask %d: %v", round, i, err)
			}
		}
		if c := claimOf(t, dir); c.JobID != jobB || c.OperatorUID != testSink {
			t.Fatalf("round %d: the claim names job %q, operator %q; want %q, %q", round, c.JobID, c.OperatorUID, jobB, testSink)
		}
		checkDir(t, dir, want)
	}
}
