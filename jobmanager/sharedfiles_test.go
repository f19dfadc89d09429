package jobmanager

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/weirstream/weir/blobstore"
	"github.com/weirstream/weir/checkpoint"
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
			got, err := unreferencedShared(ctx, st, "job", time.Now(), tt.minAge)
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
	objs, err := unreferencedShared(ctx, st, "job", time.Now(), 0)
	if err != nil || len(objs) != 1 || objs[0].Key != checkpoint.SharedKey("job", "a1") {
		t.Fatalf("unreferencedShared = %v, %v; want the one shared file", objs, err)
	}
}

// The sweep of an ended job deletes its retained checkpoints, the files of
// checkpoints it no longer knows about, and every shared file; the
// completed pointer and other jobs' objects stay.
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
	if want := []string{"job/_completed", "other/chk-1/op/0-a1"}; !slices.Equal(left, want) {
		t.Fatalf("left %v, want %v", left, want)
	}
}
