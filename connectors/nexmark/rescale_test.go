package nexmark_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/weirstream/weir/blobstore"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/connectors/nexmark"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/stream"
)

// Tests of restores with another parallelism. State goes from the old
// subtasks to the new ones through the real checkpoint storage, so the
// tests see exactly the distribution a restore makes.

// redistribute hands the state that the subtasks of one source snapshotted
// for checkpoint id (snaps[i] of old subtask i; nil for a subtask that had
// finished) to the q subtasks of the restoring job, as a restore does:
// uploaded to an in-memory checkpoint storage, the union state in objects
// of its own as the taskmanager uploads it, and loaded with
// checkpoint.LoadOperatorState. (package connectors' tests have the same
// helper.)
func redistribute(t *testing.T, id int64, snaps []*stream.OperatorSnapshot, q int) []*stream.OperatorSnapshot {
	t.Helper()
	const maxP = 128
	st := checkpoint.NewStorage(blobstore.NewMem())
	p := len(snaps)
	var handles []*weirpb.StateHandle
	for sub, snap := range snaps {
		if snap == nil {
			continue
		}
		kg := stream.KeyGroupRangeFor(maxP, p, sub)
		parts := []*stream.OperatorSnapshot{{List: snap.List}}
		if len(snap.Union) > 0 {
			parts = append(parts, &stream.OperatorSnapshot{Union: snap.Union})
		}
		for i, part := range parts {
			data, err := checkpoint.EncodeSnapshot(part)
			if err != nil {
				t.Fatal(err)
			}
			upload := st.UploadSnapshot
			if i > 0 {
				upload = st.UploadUnionSnapshot
			}
			h, err := upload(t.Context(), "job", id, "op", sub, p, 1, kg, data)
			if err != nil {
				t.Fatal(err)
			}
			handles = append(handles, h)
		}
	}
	out := make([]*stream.OperatorSnapshot, q)
	for sub := range out {
		snap, err := st.LoadOperatorState(t.Context(), handles, stream.KeyGroupRangeFor(maxP, q, sub), sub, q)
		if err != nil {
			t.Fatal(err)
		}
		out[sub] = snap
	}
	return out
}

func snapshotSource(t *testing.T, s *nexmark.Source, id int64) *stream.OperatorSnapshot {
	t.Helper()
	c := &stream.SnapshotContext{CheckpointID: id}
	if err := s.SnapshotState(c); err != nil {
		t.Fatal(err)
	}
	return &c.State
}

// timeField is the index of the dateTime field of kind k.
func timeField(k nexmark.Kind) int {
	switch k {
	case nexmark.KindPerson:
		return 6
	default:
		return 5
	}
}

func TestSourceRescaled(t *testing.T) {
	cfg := nexmark.Config{Events: 60_000, Seed: 4, EventsPerSecond: 1000, BatchSize: 50}
	for _, k := range []nexmark.Kind{nexmark.KindAuction, nexmark.KindBid} {
		want := drain(t, k, cfg, 0, 1)
		for _, pars := range [][]int{{2, 4, 1, 3}, {3, 2, 5, 1}} {
			t.Run(fmt.Sprintf("%v %v", k, pars), func(t *testing.T) {
				// In each stage every subtask polls a few times, the job
				// takes a checkpoint, polls a little more (lost in a crash)
				// and is restored with the next parallelism; the last
				// stage runs to the end.
				var got [][]any
				var restored []*stream.OperatorSnapshot
				for stage, par := range pars {
					id := int64(stage + 1)
					last := stage == len(pars)-1
					snaps := make([]*stream.OperatorSnapshot, par)
					for sub := range par {
						s := nexmark.NewSource(k, cfg)
						if err := s.Open(context.Background(), &stream.OperatorContext{Subtask: sub, Parallelism: par}); err != nil {
							t.Fatal(err)
						}
						if restored != nil {
							if err := s.RestoreState(&stream.RestoreContext{CheckpointID: id - 1, State: restored[sub]}); err != nil {
								t.Fatal(err)
							}
						}
						c := &rowCollector{}
						for polls := 0; last || polls < 3+sub; polls++ {
							st, err := s.Poll(context.Background(), c)
							if err != nil {
								t.Fatal(err)
							}
							if st == stream.PollEnd {
								break
							}
						}
						// A subtask merges its splits: its events come in
						// increasing event time.
						for i := 1; i < len(c.rows); i++ {
							if c.rows[i][timeField(k)].(int64) < c.rows[i-1][timeField(k)].(int64) {
								t.Fatalf("stage %d subtask %d: row %d goes back in event time", stage, sub, i)
							}
						}
						got = append(got, c.rows...)
						if !last {
							snaps[sub] = snapshotSource(t, s, id)
							_, _ = s.Poll(context.Background(), &rowCollector{}) // lost in the crash
						}
					}
					if !last {
						restored = redistribute(t, id, snaps, pars[stage+1])
					}
				}
				if !slices.Equal(sortedRows(got), sortedRows(want)) {
					t.Fatalf("got %d rows, want the %d rows of an unrescaled run, each once", len(got), len(want))
				}
			})
		}
	}
}

func sortedRows(rows [][]any) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = fmt.Sprint(r...)
	}
	slices.Sort(out)
	return out
}

func TestSourceRestoresVersion1State(t *testing.T) {
	// A checkpoint of a build before splits holds one version 1 item per
	// subtask and no union item: it restores at its own parallelism only.
	cfg := nexmark.Config{Events: 50_000, Seed: 2, BatchSize: 128}
	full := drain(t, nexmark.KindAuction, cfg, 1, 2)
	s := nexmark.NewSource(nexmark.KindAuction, cfg)
	if err := s.Open(context.Background(), &stream.OperatorContext{Subtask: 1, Parallelism: 2}); err != nil {
		t.Fatal(err)
	}
	c := &rowCollector{}
	for range 5 {
		if _, err := s.Poll(context.Background(), c); err != nil {
			t.Fatal(err)
		}
	}
	item := []byte{1}
	for _, v := range []int64{1, 2, s.Position()} {
		item = binary.AppendVarint(item, v)
	}
	old := &stream.OperatorSnapshot{List: map[string][][]byte{"positions": {item}}}

	r := nexmark.NewSource(nexmark.KindAuction, cfg)
	if err := r.Open(context.Background(), &stream.OperatorContext{Subtask: 1, Parallelism: 2}); err != nil {
		t.Fatal(err)
	}
	if err := r.RestoreState(&stream.RestoreContext{CheckpointID: 1, State: old}); err != nil {
		t.Fatal(err)
	}
	for {
		st, err := r.Poll(context.Background(), c)
		if err != nil {
			t.Fatal(err)
		}
		if st == stream.PollEnd {
			break
		}
	}
	if !slices.Equal(sortedRows(c.rows), sortedRows(full)) {
		t.Fatalf("restored run emitted %d rows, uninterrupted %d, or they differ", len(c.rows), len(full))
	}
	for _, q := range []int{1, 3} {
		o := nexmark.NewSource(nexmark.KindAuction, cfg)
		_ = o.Open(context.Background(), &stream.OperatorContext{Subtask: 0, Parallelism: q})
		err := o.RestoreState(&stream.RestoreContext{CheckpointID: 1, State: old})
		if err == nil || !strings.Contains(err.Error(), "nexmark_auction subtask 0") || !strings.Contains(err.Error(), "restore it with parallelism 2") {
			t.Fatalf("restore of version 1 state at parallelism %d = %v, want an error naming the source and parallelism 2", q, err)
		}
	}
}

func TestSourceWithoutSplitsEnds(t *testing.T) {
	// Restored at 4 from 2 splits, subtasks 2 and 3 get none: bounded or
	// not, they end at once instead of starting afresh.
	for _, events := range []int64{0, 10_000} {
		cfg := nexmark.Config{Events: events, Seed: 1}
		snaps := make([]*stream.OperatorSnapshot, 2)
		for sub := range 2 {
			s := nexmark.NewSource(nexmark.KindBid, cfg)
			_ = s.Open(context.Background(), &stream.OperatorContext{Subtask: sub, Parallelism: 2})
			snaps[sub] = snapshotSource(t, s, 1)
		}
		restored := redistribute(t, 1, snaps, 4)
		for sub := range 4 {
			s := nexmark.NewSource(nexmark.KindBid, cfg)
			_ = s.Open(context.Background(), &stream.OperatorContext{Subtask: sub, Parallelism: 4})
			if err := s.RestoreState(&stream.RestoreContext{CheckpointID: 1, State: restored[sub]}); err != nil {
				t.Fatal(err)
			}
			st, err := s.Poll(context.Background(), &rowCollector{})
			if err != nil {
				t.Fatal(err)
			}
			if want := sub >= 2; (st == stream.PollEnd) != want {
				t.Fatalf("events %d: subtask %d of 4: first Poll = %v, want end %v", events, sub, st, want)
			}
		}
	}
}
