package checkpoint

import (
	"errors"
	"reflect"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/weirstream/weir/blobstore"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/stream"
)

// TestInlineSnapshots: with an inline threshold, snapshots up to it travel
// in their handles and write no object, larger ones are objects as before;
// both restore to what was snapshotted, through a manifest and through a
// savepoint; a damaged inline snapshot is refused as corrupt.
func TestInlineSnapshots(t *testing.T) {
	ctx := t.Context()
	store := blobstore.NewMem()
	st := NewStorage(store).WithInlineThreshold(DefaultInlineThreshold)
	snaps, handles := snapshotOperator(t, st, 3, "win", 4, 5)
	big := make([]byte, DefaultInlineThreshold+1)
	bigHandle, err := st.UploadSnapshot(ctx, "job-1", 3, "raw", 0, 1, 1, stream.KeyGroupRange{Start: 0, End: maxP - 1}, big)
	if err != nil {
		t.Fatal(err)
	}
	inline := 0
	for _, h := range handles {
		if IsInline(h) {
			inline++
			if h.GetSize() != int64(len(h.GetInlineData())) {
				t.Fatalf("inline handle of subtask %d: size %d, %d bytes", h.GetSubtask(), h.GetSize(), len(h.GetInlineData()))
			}
		}
	}
	if inline == 0 || IsInline(bigHandle) {
		t.Fatalf("%d of %d small snapshots inline, big one inline: %v", inline, len(handles), IsInline(bigHandle))
	}
	objs, err := store.List(ctx, "job-1/")
	if err != nil {
		t.Fatal(err)
	}
	if want := len(handles) - inline + 1; len(objs) != want {
		t.Fatalf("%d objects written, want %d (the snapshots over the threshold)", len(objs), want)
	}
	m := &weirpb.Manifest{JobId: "job-1", CheckpointId: 3, MaxParallelism: maxP,
		Mode:      weirpb.CheckpointMode_CHECKPOINT_MODE_EXACTLY_ONCE,
		Operators: []*weirpb.OperatorState{{OperatorUid: "win", Parallelism: 4, Handles: handles}, {OperatorUid: "raw", Parallelism: 1, Handles: []*weirpb.StateHandle{bigHandle}}}}
	if _, _, err := st.WriteManifest(ctx, m); err != nil {
		t.Fatal(err)
	}
	read, err := st.ReadManifest(ctx, "job-1", 3)
	if err != nil {
		t.Fatal(err)
	}
	check := func(what string, st *Storage, hs []*weirpb.StateHandle) {
		t.Helper()
		for sub := range 4 {
			kg := stream.KeyGroupRangeFor(maxP, 4, sub)
			got, err := st.LoadOperatorState(ctx, hs, kg, sub, 4)
			if err != nil {
				t.Fatalf("%s: subtask %d: %v", what, sub, err)
			}
			if !reflect.DeepEqual(got.Keyed, snaps[sub].Keyed) {
				t.Fatalf("%s: subtask %d restored other keyed state than it snapshotted", what, sub)
			}
		}
	}
	check("manifest", st, read.GetOperators()[0].GetHandles())

	dst := blobstore.NewMem()
	if _, _, err := WriteSavepoint(ctx, st, read, dst, nil); err != nil {
		t.Fatal(err)
	}
	sp, err := ReadSavepoint(ctx, dst)
	if err != nil {
		t.Fatal(err)
	}
	copied, err := dst.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if want := len(handles) - inline + 1 + 1; len(copied) != want { // the objects and _metadata
		t.Fatalf("the savepoint holds %d objects, want %d", len(copied), want)
	}
	check("savepoint", NewStorage(dst), sp.GetOperators()[0].GetHandles())

	var damaged *weirpb.StateHandle
	for _, h := range read.GetOperators()[0].GetHandles() {
		if IsInline(h) {
			damaged = proto.CloneOf(h)
			damaged.InlineData[len(damaged.InlineData)/2] ^= 1
			break
		}
	}
	sub := int(damaged.GetSubtask())
	if _, err := st.LoadOperatorState(ctx, []*weirpb.StateHandle{damaged}, stream.KeyGroupRangeFor(maxP, 4, sub), sub, 4); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a damaged inline snapshot restored with %v, want ErrCorrupt", err)
	}
}
