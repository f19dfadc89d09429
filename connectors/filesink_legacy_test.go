package connectors

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/weirstream/weir/internal/statecodec"
	"github.com/weirstream/weir/stream"
	"github.com/weirstream/weir/stream/twophase"
)

// Tests of the transactional file sink's restore of state written before
// it was built on package twophase, and of what its Recover deletes.

// legacyRescalableState returns what the subtasks sinks (all of one
// parallelism) have pending as the state of a legacy checkpoint with
// "writers": per subtask, version 3 "pending" items and its "writers" item.
func legacyRescalableState(t *testing.T, sinks []*FileSink) []*stream.OperatorSnapshot {
	t.Helper()
	par := len(sinks)
	out := make([]*stream.OperatorSnapshot, par)
	for sub, s := range sinks {
		st := legacyState(t, s, 3, s.sys.ident)
		w := statecodec.AppendVarint(statecodec.AppendVarint([]byte{sinkWritersVersion}, int64(sub)), int64(par))
		w = statecodec.AppendString(w, s.sys.ident)
		w = statecodec.AppendVarint(w, 0) // the next in-progress number, which the sink no longer reads
		w = statecodec.AppendVarint(w, s.sys.nextSeq)
		pending := s.txn.Pending()
		w = statecodec.AppendUvarint(w, uint64(len(pending)))
		for _, p := range pending {
			h, err := decodeFileHandle(p.Handle)
			must(t, err)
			w = statecodec.AppendVarint(statecodec.AppendString(w, h.ident), h.id)
		}
		st.Union = map[string][][]byte{sinkWritersState: {w}}
		out[sub] = st
	}
	return out
}

func TestTxnFileSinkRestoresLegacyStateRescaled(t *testing.T) {
	// Three subtasks pre-commit checkpoint 1, which only subtasks 1 and 2
	// hear completed, then pre-commit checkpoint 2 (taken in the legacy
	// format) and write more before they die. Restored with parallelism 2
	// in either order, every pending file is committed once (old subtask
	// 2's by subtask 1, which receives it, and never deleted by subtask 0,
	// which owns index 2), every stale one is deleted, and after the
	// replay each row is committed exactly once, in new files numbered
	// after the old ones.
	for _, reverse := range []bool{false, true} {
		t.Run(fmt.Sprintf("reversed %v", reverse), func(t *testing.T) {
			dir := t.TempDir()
			foreign := foreignSinkFiles(t, dir)
			const oldPar, newPar = 3, 2
			r := &sinkRun{t: t, dir: dir}
			sinks := make([]*FileSink, oldPar)
			for sub := range sinks {
				sinks[sub] = txnSink(t, dir, sub, oldPar)
				r.feed(sinks[sub], 3+sub)
				snapshot(t, sinks[sub], 1)
				if sub != 0 {
					must(t, sinks[sub].NotifyCheckpointComplete(1))
				}
			}
			for sub, s := range sinks {
				r.feed(s, 2+sub)
				snapshot(t, s, 2)
			}
			state := legacyRescalableState(t, sinks)
			committed := r.committed()
			var lost []int
			for _, s := range sinks {
				lost = append(lost, seq(r.next, r.next+2)...)
				r.feed(s, 2)
				must(t, s.Finish(nil))
			}
			restored := redistribute(t, 2, state, newPar)
			order := []int{0, 1}
			if reverse {
				slices.Reverse(order)
			}
			news := make([]*FileSink, newPar)
			for _, sub := range order {
				news[sub] = txnSinkAttempt(t, dir, sub, newPar, 2)
				must(t, restore(news[sub], 2, restored[sub]))
			}
			r.checkNoInProgress()
			for i, row := range lost {
				must(t, news[i%newPar].ProcessBatch(0, ids(row, row+1), nil))
			}
			for _, s := range news {
				must(t, s.Finish(nil))
				snapshot(t, s, 3)
			}
			for _, s := range news {
				must(t, s.NotifyCheckpointComplete(3))
				must(t, s.Close())
			}
			after := r.committed()
			for name, body := range committed {
				if after[name] != body {
					t.Fatalf("committed file %s changed", name)
				}
			}
			pending := []string{finName(0, 0), finName(0, 1), finName(1, 1), finName(2, 1)}
			for _, name := range pending {
				if _, ok := after[name]; !ok {
					t.Fatalf("pending file %s was not committed", name)
				}
			}
			var got []int
			newFiles := 0
			for name, body := range after {
				for _, f := range strings.Fields(body) {
					n, err := strconv.Atoi(f)
					must(t, err)
					got = append(got, n)
				}
				// Checkpoint 1 used seq 0 and checkpoint 2 seq 1 of every
				// old subtask: the new files come after them.
				for sub := range newPar {
					if n, ok := parseNumbered(name, committedPrefix(sinkIdentity(testJob, testSink), sub), ""); ok && n > 1 {
						newFiles++
					}
				}
			}
			slices.Sort(got)
			if want := seq(0, r.next); !slices.Equal(got, want) {
				t.Fatalf("committed rows %v, want 0..%d each once", got, r.next-1)
			}
			if want := len(committed) + len(pending) + newPar; newFiles != newPar || len(after) != want {
				t.Fatalf("%d committed files, %d of the new subtasks numbered after the old ones; want %d and %d", len(after), newFiles, want, newPar)
			}
			r.checkNoInProgress()
			checkForeign(t, dir, foreign)
		})
	}
}

// checkForeign fails unless the files in foreign are as they were.
func checkForeign(t *testing.T, dir string, foreign map[string]string) {
	t.Helper()
	got := dirFiles(t, dir)
	for name, body := range foreign {
		if got[name] != body {
			t.Fatalf("foreign file %s was touched", name)
		}
	}
}

func TestTxnFileSinkRecoverDeletesOwnedIndexes(t *testing.T) {
	// An attempt at parallelism 4 left in-progress files and failed before
	// its first checkpoint; the job starts again with parallelism 2 (or
	// restores a checkpoint taken at 2). Subtask k deletes the stale files
	// of every index j with j mod 2 = k, also j ≥ 2, and nothing else.
	for _, restart := range []string{"fresh start", "restore"} {
		t.Run(restart, func(t *testing.T) {
			dir := t.TempDir()
			foreign := foreignSinkFiles(t, dir)
			var st *stream.OperatorSnapshot
			if restart == "restore" {
				s := txnSink(t, dir, 0, 2)
				must(t, s.ProcessBatch(0, ids(0, 2), nil))
				st = snapshot(t, s, 1)
			}
			for j := range 4 {
				writeFile(t, filepath.Join(dir, ipName(j, 1<<32+int64(j))), "id\n9\n")
			}
			s := txnSinkAttempt(t, dir, 0, 2, 3)
			if st != nil {
				must(t, restore(s, 1, st))
			} else {
				must(t, s.Finish(nil)) // a fresh start recovers before anything else
			}
			want := map[string]string{ipName(1, 1<<32+1): "9\n", ipName(3, 1<<32+3): "9\n"}
			if st != nil {
				want[finName(0, 0)] = lines(0, 2)
			}
			for name, body := range foreign {
				want[name] = body
			}
			checkDir(t, dir, want)
		})
	}
}

func TestFileHandleAndTxnNumbers(t *testing.T) {
	for _, tc := range []struct{ attempt, seq, n int64 }{
		{1, 1, 0}, {0, 1, 0}, {1, 2, 1}, {2, 1, 1 << 32}, {3, 1<<32 - 1, 2<<32 | (1<<32 - 2)},
	} {
		n, ok := txnNumber(tc.attempt, tc.seq)
		if !ok || n != tc.n {
			t.Fatalf("txnNumber(%d, %d) = %d, %v; want %d", tc.attempt, tc.seq, n, ok, tc.n)
		}
		if a, s := txnOf(n); s != tc.seq || a != max(tc.attempt, 1) {
			t.Fatalf("txnOf(%d) = %d, %d; want %d, %d", n, a, s, max(tc.attempt, 1), tc.seq)
		}
	}
	for _, bad := range [][2]int64{{1, 0}, {1, 1<<32 + 1}, {1<<31 + 1, 1}} {
		if _, ok := txnNumber(bad[0], bad[1]); ok {
			t.Fatalf("txnNumber(%d, %d) accepted", bad[0], bad[1])
		}
	}
	// A transaction name and its in-progress file translate into each
	// other, for every job and operator identity.
	id := twophase.TxnID{JobID: "job-7", OperatorUID: "out.sink", Subtask: 5, Attempt: 65538, Checkpoint: 9, Seq: 3}
	n, _ := txnNumber(id.Attempt, id.Seq)
	sub, gotN, ok := parseInProgress(InProgressName(id.JobID, id.OperatorUID, id.Subtask, n), sinkIdentity(id.JobID, id.OperatorUID))
	if !ok || sub != 5 || gotN != n {
		t.Fatalf("parseInProgress: %d %d %v", sub, gotN, ok)
	}
	if _, _, ok := parseInProgress(InProgressName(id.JobID, id.OperatorUID+"-5", 1, n), sinkIdentity(id.JobID, id.OperatorUID)); ok {
		t.Fatal("parseInProgress took another operator's file for its own")
	}

	h := fileHandle{ident: sinkIdentity("job", "sink"), subtask: 3, id: 1 << 33, seq: 7, size: 1234, crc: 0xdeadbeef}
	got, err := decodeFileHandle(h.encode())
	if err != nil || got != h {
		t.Fatalf("handle round trip: %+v, %v", got, err)
	}
	for _, bad := range []fileHandle{
		{ident: "../x", subtask: 1},
		{ident: "a/b-c"},
		{ident: "a-b", subtask: -1},
		{ident: "a-b", size: -2},
	} {
		if _, err := decodeFileHandle(bad.encode()); err == nil {
			t.Fatalf("handle %+v accepted", bad)
		}
	}
	if _, err := decodeFileHandle(append(h.encode(), 0)); err == nil {
		t.Fatal("handle with a trailing byte accepted")
	}
	if _, err := decodeFileHandle(make([]byte, maxFileHandle+1)); err == nil {
		t.Fatal("oversized handle accepted")
	}
}
