package jobmanager

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/weirstream/weir/blobstore"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/jobmanager/scheduler"
	"github.com/weirstream/weir/proto/weirpb"
)

func TestUnreferencedShared(t *testing.T) {
	ctx := context.Background()
	mem := blobstore.NewMem()
	st := checkpoint.NewStorage(mem)
	for _, sum := range []string{"a1", "b2", "c3"} {
		if err := mem.Put(ctx, checkpoint.SharedKey("job", sum), []byte(sum)); err != nil {
			t.Fatal(err)
		}
	}
	manifest := func(id int64, sums ...string) {
		h := &weirpb.StateHandle{OperatorUid: "op", Parallelism: 1, Key: "job/chk-1/op/0-a1"}
		for _, s := range sums {
			h.Files = append(h.Files, &weirpb.StateFile{Name: s + ".sst", Key: checkpoint.SharedKey("job", s), Shared: true})
		}
		h.Files = append(h.Files, &weirpb.StateFile{Name: "MANIFEST-1", Key: "job/chk-1/op/0-a1/files/MANIFEST-1"})
		if _, _, err := st.WriteManifest(ctx, &weirpb.Manifest{JobId: "job", CheckpointId: id,
			Operators: []*weirpb.OperatorState{{OperatorUid: "op", Handles: []*weirpb.StateHandle{h}}}}); err != nil {
			t.Fatal(err)
		}
	}
	manifest(1, "a1", "b2")
	manifest(2, "b2")
	names := func(objs []blobstore.ObjectInfo) []string {
		var out []string
		for _, o := range objs {
			out = append(out, o.Key)
		}
		return out
	}
	tests := []struct {
		name   string
		delete int64 // checkpoint deleted first (0: none)
		minAge time.Duration
		want   []string
	}{
		{"both retained", 0, 0, []string{"job/shared/c3"}},
		{"too young", 0, time.Hour, nil},
		{"first deleted", 1, 0, []string{"job/shared/a1", "job/shared/c3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.delete != 0 {
				if err := st.DeleteCheckpoint(ctx, "job", tt.delete); err != nil {
					t.Fatal(err)
				}
			}
			got, err := unreferencedShared(ctx, st, "job", nil, time.Now(), tt.minAge)
			if err != nil {
				t.Fatal(err)
			}
			if g := names(got); len(g) != len(tt.want) || (len(g) > 0 && (g[0] != tt.want[0] || g[len(g)-1] != tt.want[len(tt.want)-1])) {
				t.Fatalf("unreferenced %v, want %v", g, tt.want)
			}
		})
	}
}

// A manifest-less checkpoint directory (aborted, or its deletion cut
// short) holds no references and does not keep shared files.
func TestUnreferencedSharedSkipsIncompleteCheckpoints(t *testing.T) {
	ctx := context.Background()
	mem := blobstore.NewMem()
	st := checkpoint.NewStorage(mem)
	for _, key := range []string{checkpoint.SharedKey("job", "a1"), "job/chk-3/op/0-a1"} {
		if err := mem.Put(ctx, key, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	objs, err := unreferencedShared(ctx, st, "job", nil, time.Now(), 0)
	if err != nil || len(objs) != 1 || objs[0].Key != checkpoint.SharedKey("job", "a1") {
		t.Fatalf("unreferencedShared = %v, %v; want the one shared file", objs, err)
	}
}

// The sweep of an ended job deletes its retained checkpoints, the files of
// checkpoints it no longer knows about, every shared file and last the
// completed pointer; other jobs' objects stay.
func TestSweepOnce(t *testing.T) {
	ctx := context.Background()
	mem := blobstore.NewMem()
	st := checkpoint.NewStorage(mem)
	if _, _, err := st.WriteManifest(ctx, &weirpb.Manifest{JobId: "job", CheckpointId: 4,
		Operators: []*weirpb.OperatorState{{OperatorUid: "op", Handles: []*weirpb.StateHandle{{OperatorUid: "op", Parallelism: 1,
			Key: "job/chk-4/op/0-a1", Files: []*weirpb.StateFile{{Name: "1.sst", Key: checkpoint.SharedKey("job", "a1"), Shared: true}}}}}}}); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"job/chk-4/op/0-a1", checkpoint.SharedKey("job", "a1"), checkpoint.SharedKey("job", "b2"),
		"job/chk-2/op/0-a1", "job/chk-3/_manifest", "job/_completed", "other/chk-1/op/0-a1"} {
		if err := mem.Put(ctx, key, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	if err := sweepOnce(ctx, "job", []int64{4}, st, func(context.Context, string) error { return nil }); err != nil {
		t.Fatal(err)
	}
	objs, err := mem.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, o := range objs {
		left = append(left, o.Key)
	}
	if want := []string{"other/chk-1/op/0-a1"}; !slices.Equal(left, want) {
		t.Fatalf("left %v, want %v", left, want)
	}
}

// A shared file that an acknowledgement of a checkpoint in progress names
// is kept like one a manifest names; the others are deleted at once,
// whatever their age, and remembered as deleted.
func TestSharedGarbageKeepsFilesOfCheckpointsInProgress(t *testing.T) {
	ctx := context.Background()
	mem := blobstore.NewMem()
	st := checkpoint.NewStorage(mem)
	for _, sum := range []string{"a1", "b2", "c3"} {
		if err := mem.Put(ctx, checkpoint.SharedKey("job", sum), []byte(sum)); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := st.WriteManifest(ctx, &weirpb.Manifest{JobId: "job", CheckpointId: 1, Operators: []*weirpb.OperatorState{{OperatorUid: "op",
		Handles: []*weirpb.StateHandle{sharedHandle("a1")}}}}); err != nil {
		t.Fatal(err)
	}
	triggered := time.Now()
	tidy := &tidyState{tombs: map[string]time.Time{
		"job/shared/old": triggered.Add(-time.Minute), // before every checkpoint in progress
		"job/shared/new": triggered.Add(time.Hour),
	}}
	v := scheduler.StorageView{Enabled: true, Retained: []int64{1}, Pending: []int64{2}, NextID: 3,
		PendingAcks: []any{[]*weirpb.StateHandle{sharedHandle("b2")}}, OldestTrigger: triggered}
	ok := func(context.Context, string) error { return nil }
	// First seen while checkpoint 2 is in progress: c3 may be one of its
	// uploads, not yet acknowledged.
	gone, err := sharedGarbageOf(ctx, "job", st, tidy, v, time.Now(), time.Now, 0, false, ok)
	if err != nil || len(gone) != 0 {
		t.Fatalf("first pass: sharedGarbage = %v, %v; want nothing", gone, err)
	}
	// Checkpoint 3 is in progress, triggered after that pass; d4 is new.
	if err := mem.Put(ctx, checkpoint.SharedKey("job", "d4"), []byte("d4")); err != nil {
		t.Fatal(err)
	}
	v.Pending, v.NextID, v.OldestTrigger = []int64{3}, 4, time.Now()
	gone, err = sharedGarbageOf(ctx, "job", st, tidy, v, time.Now(), time.Now, 0, false, ok)
	if err != nil || len(gone) != 1 || gone[0].Key != "job/shared/c3" {
		t.Fatalf("second pass: sharedGarbage = %v, %v; want only job/shared/c3", gone, err)
	}
	left, _ := mem.List(ctx, checkpoint.SharedPrefix("job"))
	if len(left) != 3 {
		t.Fatalf("left %v, want a1, b2 and d4", left)
	}
	if _, ok := tidy.tombs["job/shared/c3"]; !ok {
		t.Errorf("the deletion of c3 is not remembered: %v", tidy.tombs)
	}
	if _, ok := tidy.tombs["job/shared/old"]; ok {
		t.Errorf("a tombstone older than every checkpoint in progress is kept: %v", tidy.tombs)
	}
	if _, ok := tidy.tombs["job/shared/new"]; !ok {
		t.Errorf("a tombstone a checkpoint in progress may need was dropped: %v", tidy.tombs)
	}
}

// A manifest naming a shared file deleted while its checkpoint was in
// progress is refused, unless the file was uploaded again.
func TestCheckSharedFiles(t *testing.T) {
	ctx := context.Background()
	mem := blobstore.NewMem()
	st := checkpoint.NewStorage(mem)
	jm := &JobManager{}
	jm.tidyOf("job").tombs["job/shared/c3"] = time.Now()
	m := &weirpb.Manifest{JobId: "job", CheckpointId: 2, Operators: []*weirpb.OperatorState{{OperatorUid: "op",
		Handles: []*weirpb.StateHandle{sharedHandle("a1"), sharedHandle("c3")}}}}
	if err := jm.checkSharedFiles(ctx, "job", st, m); err == nil {
		t.Fatal("a manifest naming a deleted shared file was accepted")
	}
	if err := mem.Put(ctx, "job/shared/c3", []byte("c3")); err != nil {
		t.Fatal(err)
	}
	if err := jm.checkSharedFiles(ctx, "job", st, m); err != nil {
		t.Fatalf("a manifest naming a shared file uploaded again: %v", err)
	}
	if len(jm.tidyOf("job").tombs) != 0 {
		t.Errorf("the tombstone of a file uploaded again is kept")
	}
}

func TestStaleCheckpoints(t *testing.T) {
	v := scheduler.StorageView{Retained: []int64{3, 5}, Pending: []int64{7}, NextID: 8}
	if got := staleCheckpoints([]int64{1, 2, 3, 5, 6, 7, 9}, v); !slices.Equal(got, []int64{1, 2, 6}) {
		t.Fatalf("stale %v, want [1 2 6]", got)
	}
}

func sharedHandle(sums ...string) *weirpb.StateHandle {
	h := &weirpb.StateHandle{OperatorUid: "op", Parallelism: 1, Key: "job/chk-1/op/0-a1"}
	for _, s := range sums {
		h.Files = append(h.Files, &weirpb.StateFile{Name: s + ".sst", Key: checkpoint.SharedKey("job", s), Shared: true})
	}
	return h
}
