package connectors

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/blobstore"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/stream"
	"github.com/weirstream/weir/stream/twophase"
)

// Tests of restores with another parallelism. State goes from the old
// subtasks to the new ones through the real checkpoint storage, so the
// tests see exactly the distribution a restore makes.
//
// The tests assume that a rescaled restore restores every new subtask from
// its share: a runtime that started a subtask "finished" because the old
// subtask of the same index had finished would drop the splits handed to
// it.

const testMaxParallelism = 128

// redistribute hands the state that the subtasks of one operator
// snapshotted for checkpoint id (snaps[i] of old subtask i; nil for a
// subtask that had finished, whose state later checkpoints no longer hold)
// to the q subtasks of the restoring job, as a restore does: uploaded to an
// in-memory checkpoint storage, the union state in objects of its own as
// the taskmanager uploads it, and loaded with checkpoint.LoadOperatorState.
func redistribute(t *testing.T, id int64, snaps []*stream.OperatorSnapshot, q int) []*stream.OperatorSnapshot {
	t.Helper()
	st := checkpoint.NewStorage(blobstore.NewMem())
	p := len(snaps)
	var handles []*weirpb.StateHandle
	for sub, snap := range snaps {
		if snap == nil {
			continue
		}
		kg := stream.KeyGroupRangeFor(testMaxParallelism, p, sub)
		parts := []*stream.OperatorSnapshot{{Keyed: snap.Keyed, List: snap.List}}
		if len(snap.Union) > 0 {
			parts = append(parts, &stream.OperatorSnapshot{Union: snap.Union})
		}
		for i, part := range parts {
			data, err := checkpoint.EncodeSnapshot(part)
			must(t, err)
			upload := st.UploadSnapshot
			if i > 0 {
				upload = st.UploadUnionSnapshot
			}
			h, err := upload(t.Context(), "job", id, "op", sub, p, 1, kg, data)
			must(t, err)
			handles = append(handles, h)
		}
	}
	out := make([]*stream.OperatorSnapshot, q)
	for sub := range out {
		snap, err := st.LoadOperatorState(t.Context(), handles, stream.KeyGroupRangeFor(testMaxParallelism, q, sub), sub, q)
		must(t, err)
		out[sub] = snap
	}
	return out
}

// --- datagen ---

// rescaleDatagen runs cfg through a job whose parallelism follows pars: in
// each stage every subtask emits a few batches (more for some), the job
// takes a checkpoint, emits a little more (lost, as in a crash) and is
// restored from the checkpoint with the next parallelism; the last stage
// runs to the end. It returns every row that the job's output holds: the
// rows emitted before each checkpoint, and all rows of the last stage.
func rescaleDatagen(t *testing.T, cfg DatagenConfig, pars []int, state *stream.OperatorSnapshot) [][]any {
	t.Helper()
	var out [][]any
	var restored []*stream.OperatorSnapshot // nil: a fresh start
	if state != nil {
		restored = redistribute(t, 0, []*stream.OperatorSnapshot{state}, pars[0])
	}
	for stage, par := range pars {
		id := int64(stage + 1)
		last := stage == len(pars)-1
		snaps := make([]*stream.OperatorSnapshot, par)
		for sub := range par {
			d, err := NewDatagen(cfg)
			must(t, err)
			must(t, d.Open(t.Context(), octxFor(sub, par)))
			if restored != nil {
				must(t, restore(d, id-1, restored[sub]))
			}
			if last {
				rows, err := drain(t, d, 1_000_000)
				must(t, err)
				out = append(out, rows...)
				continue
			}
			var c collector
			ended := false
			for range 2 + (sub+stage)%3 {
				st, err := d.Poll(t.Context(), &c)
				must(t, err)
				ended = ended || st == stream.PollEnd
			}
			out = append(out, c.rows()...)
			if !ended {
				snaps[sub] = snapshot(t, d, id)
			} // else it has finished: later checkpoints lack its state
			var lost collector
			pollN(t, d, &lost, 2)
		}
		if !last {
			restored = redistribute(t, id, snaps, pars[stage+1])
		}
	}
	return out
}

// checkDatagenRows fails unless rows are exactly the rows of cfg (seq is
// field 0, starting at 0), each once.
func checkDatagenRows(t *testing.T, cfg DatagenConfig, rows [][]any) {
	t.Helper()
	slices.SortFunc(rows, func(a, b []any) int { return cmp.Compare(a[0].(int64), b[0].(int64)) })
	var want [][]any
	GenerateRows(cfg, 0, cfg.Rows, func(_ int64, row []any) { want = append(want, row) })
	if len(rows) != len(want) {
		seen := map[int64]int{}
		for _, r := range rows {
			seen[r[0].(int64)]++
		}
		for seq := range cfg.Rows {
			if seen[seq] != 1 {
				t.Fatalf("got %d rows, want %d: seq %d emitted %d times", len(rows), len(want), seq, seen[seq])
			}
		}
		t.Fatalf("got %d rows, want %d", len(rows), len(want))
	}
	for i := range want {
		if !reflect.DeepEqual(rows[i], want[i]) {
			t.Fatalf("row %d = %v, want %v (each row exactly once, as an unrescaled run emits it)", i, rows[i], want[i])
		}
	}
}

func rescaleDatagenConfig() DatagenConfig {
	return DatagenConfig{Rows: 3000, BatchSize: 40, Seed: 5, Fields: []DatagenField{
		{Name: "seq", Kind: "sequence"},
		{Name: "k", Kind: "key", Cardinality: 13, Prefix: "k"},
		{Name: "v", Kind: "random", Type: "float64"},
		{Name: "s", Kind: "random", Type: "string", Length: 5},
	}}
}

func TestDatagenRescaled(t *testing.T) {
	cfg := rescaleDatagenConfig()
	for _, pars := range [][]int{
		{2, 4, 1, 3},
		{3, 2, 5, 1, 2},
		{1, 3},
		{4, 4, 2},
	} {
		t.Run(fmt.Sprint(pars), func(t *testing.T) {
			checkDatagenRows(t, cfg, rescaleDatagen(t, cfg, pars, nil))
		})
	}
	t.Run("unbounded", func(t *testing.T) {
		// 2 → 4 → 1 → 3: each stage's rows continue every split exactly
		// where the previous checkpoint left it.
		cfg := rescaleDatagenConfig()
		cfg.Rows = 0
		pos := map[int64]int64{0: 0, 1: 1} // split start → its next seq
		var restored []*stream.OperatorSnapshot
		for stage, par := range []int{2, 4, 1, 3} {
			snaps := make([]*stream.OperatorSnapshot, par)
			for sub := range par {
				d, _ := NewDatagen(cfg)
				must(t, d.Open(t.Context(), octxFor(sub, par)))
				if restored != nil {
					must(t, restore(d, int64(stage), restored[sub]))
				}
				var c collector
				for range 3 {
					st, err := d.Poll(t.Context(), &c)
					must(t, err)
					if st == stream.PollEnd {
						if len(d.splits) != 0 {
							t.Fatalf("stage %d subtask %d ended with splits", stage, sub)
						}
						break
					}
				}
				for _, r := range c.rows() {
					seq := r[0].(int64)
					if seq != pos[seq%2] {
						t.Fatalf("stage %d subtask %d emitted seq %d, want %d next in its split", stage, sub, seq, pos[seq%2])
					}
					pos[seq%2] += 2
				}
				snaps[sub] = snapshot(t, d, int64(stage+1))
			}
			if stage < 3 {
				restored = redistribute(t, int64(stage+1), snaps, []int{4, 1, 3}[stage])
			}
		}
	})
}

func TestDatagenRescaledAfterSubtaskZeroFinished(t *testing.T) {
	// Subtask 0 of 2 has finished, so the checkpoint holds subtask 1's
	// state only. Restored at 3, the subtask that gets split 1 carries on
	// and the others, which get nothing, end at once.
	cfg := rescaleDatagenConfig()
	d, _ := NewDatagen(cfg)
	must(t, d.Open(t.Context(), octxFor(1, 2)))
	var c collector
	pollN(t, d, &c, 3)
	restored := redistribute(t, 1, []*stream.OperatorSnapshot{nil, snapshot(t, d, 1)}, 3)
	rows := c.rows()
	for sub := range 3 {
		d, _ := NewDatagen(cfg)
		must(t, d.Open(t.Context(), octxFor(sub, 3)))
		must(t, restore(d, 1, restored[sub]))
		more, err := drain(t, d, 1000)
		must(t, err)
		if sub > 0 && len(more) > 0 {
			t.Fatalf("subtask %d, which received no split, emitted %d rows", sub, len(more))
		}
		rows = append(rows, more...)
	}
	var want [][]any
	GenerateRows(cfg, 0, cfg.Rows, func(seq int64, row []any) {
		if seq%2 == 1 {
			want = append(want, row)
		}
	})
	if !reflect.DeepEqual(rows, want) {
		t.Fatalf("got %d rows, want the %d rows of split 1 in order", len(rows), len(want))
	}
}

func TestDatagenRestoresVersion1State(t *testing.T) {
	// A checkpoint of a build before splits: one version 1 item per
	// subtask, no union item. It restores at its own parallelism, and the
	// checkpoints taken after that can be rescaled.
	cfg := rescaleDatagenConfig()
	var out [][]any
	snaps := make([]*stream.OperatorSnapshot, 2)
	for sub := range 2 {
		d, _ := NewDatagen(cfg)
		must(t, d.Open(t.Context(), octxFor(sub, 2)))
		var c collector
		pollN(t, d, &c, 3+sub)
		out = append(out, c.rows()...)
		snaps[sub] = datagenState(0, datagenV1(int64(sub), 2, d.Position()))
	}
	restored := redistribute(t, 1, snaps, 2)
	for sub := range 2 {
		d, _ := NewDatagen(cfg)
		must(t, d.Open(t.Context(), octxFor(sub, 2)))
		must(t, restore(d, 1, restored[sub]))
		var c collector
		pollN(t, d, &c, 2)
		out = append(out, c.rows()...)
		snaps[sub] = snapshot(t, d, 2)
	}
	restored = redistribute(t, 2, snaps, 3)
	for sub := range 3 {
		d, _ := NewDatagen(cfg)
		must(t, d.Open(t.Context(), octxFor(sub, 3)))
		must(t, restore(d, 2, restored[sub]))
		rows, err := drain(t, d, 1_000_000)
		must(t, err)
		out = append(out, rows...)
	}
	checkDatagenRows(t, cfg, out)

	// Rescaling the old format itself is refused: a new subtask that
	// received no item could not tell that it restores.
	for _, q := range []int{1, 3} {
		restored := redistribute(t, 1, []*stream.OperatorSnapshot{
			datagenState(0, datagenV1(0, 2, 5)), datagenState(0, datagenV1(1, 2, 5))}, q)
		d, _ := NewDatagen(cfg)
		must(t, d.Open(t.Context(), octxFor(0, q)))
		if err := restore(d, 1, restored[0]); err == nil || !strings.Contains(err.Error(), "restore it with parallelism 2") {
			t.Fatalf("restore of version 1 state at parallelism %d = %v, want errRescale naming parallelism 2", q, err)
		}
	}
}

func TestDatagenRescaledRateShare(t *testing.T) {
	// Each split gets 1/splits of the rate: a subtask of a job started with
	// parallelism 2 gets half, and the subtask that owns both splits after
	// a restore at 1 gets all of it until one split ends.
	cfg := DatagenConfig{Rows: 100, RatePerSecond: 1000, BatchSize: 10, Fields: []DatagenField{{Name: "seq", Kind: "sequence"}}}
	snaps := make([]*stream.OperatorSnapshot, 2)
	for sub := range 2 {
		d, _ := NewDatagen(cfg)
		must(t, d.Open(t.Context(), octxFor(sub, 2)))
		if d.rate != 500 {
			t.Fatalf("subtask %d of 2: rate %v, want 500", sub, d.rate)
		}
		d.SetPosition(int64(49 - 39*sub)) // split 1 ends first
		snaps[sub] = snapshot(t, d, 1)
	}
	d, _ := NewDatagen(cfg)
	clk := &fakeClock{t: time.Unix(1000, 0)}
	d.now = clk.now
	must(t, d.Open(t.Context(), octxFor(0, 1)))
	must(t, restore(d, 1, redistribute(t, 1, snaps, 1)[0]))
	if d.rate != 1000 {
		t.Fatalf("one subtask with both splits: rate %v, want 1000", d.rate)
	}
	var c collector
	for d.splits[1].next < d.splits[1].end {
		clk.t = clk.t.Add(time.Second)
		pollN(t, d, &c, 1)
	}
	if d.rate != 500 {
		t.Fatalf("after split 1 ended: rate %v, want 500", d.rate)
	}
}

// --- file source ---

func TestFileSourceRescaled(t *testing.T) {
	// Files of different lengths; file 0, read by subtask 0, is short, so
	// that subtask 0 finishes early and later checkpoints lack its state.
	dir := t.TempDir()
	var all []string
	for f, n := range []int{3, 90, 4, 130, 5, 60, 2} {
		var b strings.Builder
		for i := range n {
			line := fmt.Sprintf("f%d-%d", f, i)
			b.WriteString(line + "\n")
			all = append(all, line)
		}
		writeFile(t, filepath.Join(dir, fmt.Sprintf("in%d.txt", f)), b.String())
	}
	cfg := FileSourceConfig{Path: dir, BatchSize: 8}
	for _, pars := range [][]int{{2, 4, 1, 3}, {3, 5, 2}, {1, 2, 1}} {
		t.Run(fmt.Sprint(pars), func(t *testing.T) {
			var got []string
			var restored []*stream.OperatorSnapshot
			for stage, par := range pars {
				id := int64(stage + 1)
				last := stage == len(pars)-1
				snaps := make([]*stream.OperatorSnapshot, par)
				for sub := range par {
					s := openFileSource(t, cfg, sub, par, nil)
					if restored != nil {
						must(t, restore(s, id-1, restored[sub]))
					}
					var rows [][]any
					if last {
						var err error
						rows, err = drain(t, s, 1000)
						must(t, err)
					} else {
						var c collector
						ended := false
						for range 3 + sub {
							st, err := s.Poll(t.Context(), &c)
							must(t, err)
							ended = ended || st == stream.PollEnd
						}
						rows = c.rows()
						if !ended {
							snaps[sub] = snapshot(t, s, id)
						}
						pollN(t, s, &collector{}, 2) // lost in the crash
					}
					for _, r := range rows {
						got = append(got, r[0].(string))
					}
				}
				if !last {
					restored = redistribute(t, id, snaps, pars[stage+1])
				}
			}
			slices.Sort(got)
			want := slices.Sorted(slices.Values(all))
			if !slices.Equal(got, want) {
				t.Fatalf("got %d lines, want %d, each exactly once", len(got), len(want))
			}
		})
	}
}

// --- file sink ---

// sinkRun drives the subtasks of testSink of testJob through rescaled
// restores, tracking which rows the job's output must hold.
type sinkRun struct {
	t    *testing.T
	dir  string
	next int     // the next new row; every row below it must be committed in the end
	lost [][]int // rows written after the last checkpoint, by old subtask: replayed
	id   int64   // the last checkpoint id
	att  int64   // the deployment attempt
}

// feed writes n new rows to s.
func (r *sinkRun) feed(s *FileSink, n int) {
	must(r.t, s.ProcessBatch(0, ids(r.next, r.next+n), nil))
	r.next += n
}

// stage runs par subtasks, restored from restored (nil: a fresh start) in
// the given order of subtasks. Each replays its share of the lost rows and
// writes new ones; checkpoint 1 of the stage completes, checkpoint 2 is
// aborted, checkpoint 3 is taken but never completes, and the rows written
// after it are lost in a crash. It returns the state of checkpoint 3.
func (r *sinkRun) stage(par int, restored []*stream.OperatorSnapshot, order []int) []*stream.OperatorSnapshot {
	t := r.t
	r.att++
	sinks := make([]*FileSink, par)
	for _, sub := range order {
		sinks[sub] = txnSinkAttempt(t, r.dir, sub, par, r.att)
		if restored != nil {
			must(t, restore(sinks[sub], r.id, restored[sub]))
		}
	}
	if restored != nil {
		r.checkNoInProgress()
	}
	// The replay: rows lost in the crash come again, to any subtask.
	for i, rows := range r.lost {
		for _, row := range rows {
			must(t, sinks[(i+row)%par].ProcessBatch(0, ids(row, row+1), nil))
		}
	}
	r.lost = make([][]int, par)
	for sub, s := range sinks {
		r.feed(s, 3+sub)
	}
	base := r.id
	for _, s := range sinks {
		snapshot(t, s, base+1)
	}
	for _, s := range sinks {
		must(t, s.NotifyCheckpointComplete(base+1))
	}
	for sub, s := range sinks {
		if sub%2 == 0 {
			r.feed(s, 2)
		}
	}
	for _, s := range sinks {
		snapshot(t, s, base+2)
		must(t, s.NotifyCheckpointAborted(base+2))
	}
	for sub, s := range sinks {
		if sub != 1 {
			r.feed(s, 4)
		}
	}
	snaps := make([]*stream.OperatorSnapshot, par)
	for sub, s := range sinks {
		snaps[sub] = snapshot(t, s, base+3)
	}
	for sub, s := range sinks {
		rows := seq(r.next, r.next+2)
		must(t, s.ProcessBatch(0, ids(r.next, r.next+2), nil))
		must(t, s.Finish(nil)) // the lost rows reach the disk
		r.lost[sub] = rows
		r.next += 2
	}
	r.id = base + 3
	return snaps
}

// checkNoInProgress fails if the directory holds an in-progress file of
// testSink: after a restore every pending one is committed and every stale
// one deleted.
func (r *sinkRun) checkNoInProgress() {
	r.t.Helper()
	for name := range dirFiles(r.t, r.dir) {
		if testSinkFile(name, inProgressPrefix, inProgressSuffix) {
			r.t.Fatalf("after the restore %s is left", name)
		}
	}
}

// committed returns the committed files of testSink.
func (r *sinkRun) committed() map[string]string {
	out := map[string]string{}
	for name, body := range dirFiles(r.t, r.dir) {
		if testSinkFile(name, committedPrefix, "") {
			out[name] = body
		}
	}
	return out
}

// testSinkFile reports whether name is prefix(identity, subtask)+n+suffix
// for testSink of testJob and any subtask below 16.
func testSinkFile(name string, prefix func(string, int) string, suffix string) bool {
	for sub := range 16 {
		if _, ok := parseNumbered(name, prefix(sinkIdentity(testJob, testSink), sub), suffix); ok {
			return true
		}
	}
	return false
}

// foreignSinkFiles are files of other jobs and operators, and of the name
// format before names carried the identity, with subtask numbers that the
// rescaled sinks use.
func foreignSinkFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	want := map[string]string{}
	var names []string
	for sub := range 4 {
		names = append(names,
			InProgressName("job2", testSink, sub, 0),
			InProgressName(testJob, "sink2", sub, 1),
			InProgressName(testJob, testSink+"-0", sub, 0),
			CommittedName("job2", testSink, sub, 0),
			".part-"+strconv.Itoa(sub)+"-0.inprogress")
	}
	for i, name := range names {
		body := fmt.Sprintf("%d\n", 1000+i)
		writeFile(t, filepath.Join(dir, name), "id\n"+body)
		want[name] = body
	}
	return want
}

func TestTxnFileSinkRescaled(t *testing.T) {
	for _, tc := range []struct {
		pars    []int
		reverse bool // restore the subtasks from the last to the first
	}{
		{[]int{2, 3, 1}, false},
		{[]int{2, 3, 1}, true},
		{[]int{3, 2, 1, 3}, false},
		{[]int{4, 2, 3}, true},
		{[]int{2, 2}, false},
	} {
		t.Run(fmt.Sprintf("%v reversed %v", tc.pars, tc.reverse), func(t *testing.T) {
			dir := t.TempDir()
			foreign := foreignSinkFiles(t, dir)
			r := &sinkRun{t: t, dir: dir}
			var restored []*stream.OperatorSnapshot
			for i, par := range tc.pars {
				order := make([]int, par)
				for sub := range order {
					order[sub] = sub
				}
				if tc.reverse {
					slices.Reverse(order)
				}
				before := r.committed()
				snaps := r.stage(par, restored, order)
				// Committed files are never replaced.
				after := r.committed()
				for name, body := range before {
					if after[name] != body {
						t.Fatalf("stage %d: committed file %s changed", i, name)
					}
				}
				var pending int
				for _, s := range snaps {
					pending += len(s.List[twophase.PendingState])
				}
				if pending == 0 {
					t.Fatalf("stage %d: no pending transactions in the checkpoint", i)
				}
				q := 1
				if i+1 < len(tc.pars) {
					q = tc.pars[i+1]
				}
				restored = redistribute(t, r.id, snaps, q)
			}
			// The final stage at parallelism 1: restore, replay, and a final
			// checkpoint that completes.
			s := txnSinkAttempt(t, dir, 0, 1, r.att+1)
			before := r.committed()
			must(t, restore(s, r.id, restored[0]))
			r.checkNoInProgress()
			for _, rows := range r.lost {
				for _, row := range rows {
					must(t, s.ProcessBatch(0, ids(row, row+1), nil))
				}
			}
			must(t, s.Finish(nil))
			snapshot(t, s, r.id+1)
			must(t, s.NotifyCheckpointComplete(r.id+1))
			must(t, s.Close())
			after := r.committed()
			for name, body := range before {
				if after[name] != body {
					t.Fatalf("final stage: committed file %s changed", name)
				}
			}

			var got []int
			for _, body := range after {
				for _, f := range strings.Fields(body) {
					n, err := strconv.Atoi(f)
					must(t, err)
					got = append(got, n)
				}
			}
			slices.Sort(got)
			if want := seq(0, r.next); !slices.Equal(got, want) {
				t.Fatalf("committed rows %v, want 0..%d each once", got, r.next-1)
			}
			r.checkNoInProgress()
			for name, body := range foreign {
				data, err := os.ReadFile(filepath.Join(dir, name))
				if err != nil || string(data) != "id\n"+body {
					t.Fatalf("foreign file %s was touched (%v)", name, err)
				}
			}
		})
	}
}
