package checkpoint_test

import (
	"context"
	"fmt"

	"github.com/weirstream/weir/blobstore"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/stream"
)

// A task snapshots its state, uploads it and acknowledges the handle; the
// jobmanager writes the manifest; after a failure the task restores.
func Example() {
	ctx := context.Background()
	st := checkpoint.NewStorage(blobstore.NewMem()) // or checkpoint.OpenStorage(ctx, "s3://bucket/prefix")

	kg := stream.KeyGroupRangeFor(128, 1, 0)
	sc := &stream.SnapshotContext{CheckpointID: 1, KeyGroups: kg}
	sc.WriteKeyGroup(7, []byte("count(a)=3"))
	sc.AddListState("offsets", []byte("split-0@1024"))
	data, err := checkpoint.EncodeSnapshot(&sc.State)
	if err != nil {
		panic(err)
	}
	h, err := st.UploadSnapshot(ctx, "job-1", 1, "counter", 0, 1, 0, kg, data)
	if err != nil {
		panic(err)
	}
	m := &weirpb.Manifest{JobId: "job-1", CheckpointId: 1, MaxParallelism: 128,
		Operators: []*weirpb.OperatorState{{OperatorUid: "counter", Parallelism: 1, Handles: []*weirpb.StateHandle{h}}}}
	key, sha, err := st.WriteManifest(ctx, m)
	if err != nil {
		panic(err)
	}
	if err := st.WritePointer(ctx, "job-1", &weirpb.CompletedPointer{CheckpointId: 1, ManifestKey: key, ManifestSha256: sha}); err != nil {
		panic(err)
	}

	latest, err := st.ReadLatestManifest(ctx, "job-1")
	if err != nil {
		panic(err)
	}
	restored, err := st.LoadOperatorState(ctx, latest.Operators[0].Handles, kg, 0, 1)
	if err != nil {
		panic(err)
	}
	fmt.Println(h.Key)
	fmt.Printf("%s %s\n", restored.Keyed[7][0], restored.List["offsets"][0])
	// Output:
	// job-1/chk-1/counter/0-a0
	// count(a)=3 split-0@1024
}
