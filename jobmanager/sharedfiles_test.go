package jobmanager

import (
	"context"
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
