package checkpoint

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/weirstream/weir/blobstore"
	"github.com/weirstream/weir/blobstore/blobstoretest"
	"github.com/weirstream/weir/blobstore/filestore"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/stream"
)

const maxP = 128

func fileStorage(t *testing.T) *Storage {
	fs, err := filestore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return NewStorage(fs)
}

// stores returns the storages the unit tests run on.
func stores(t *testing.T) map[string]func(t *testing.T) *Storage {
	return map[string]func(t *testing.T) *Storage{
		"file": fileStorage,
		"mem":  func(t *testing.T) *Storage { return NewStorage(blobstore.NewMem()) },
	}
}

// snapshotOperator uploads a random snapshot for every subtask of an
// operator with parallelism p and returns them with their handles.
func snapshotOperator(t *testing.T, st *Storage, id int64, uid string, p int, seed uint64) ([]*stream.OperatorSnapshot, []*weirpb.StateHandle) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, uint64(p)))
	var snaps []*stream.OperatorSnapshot
	var handles []*weirpb.StateHandle
	for sub := range p {
		kg := stream.KeyGroupRangeFor(maxP, p, sub)
		snap := randomSnapshot(r, kg, fmt.Sprintf("p%d-s%d", p, sub))
		data, err := EncodeSnapshot(snap)
		if err != nil {
			t.Fatal(err)
		}
		h, err := st.UploadSnapshot(t.Context(), "job-1", id, uid, sub, p, 1, kg, data)
		if err != nil {
			t.Fatal(err)
		}
		snaps = append(snaps, snap)
		handles = append(handles, h)
	}
	// The manifest's order is not the subtask order.
	slices.Reverse(handles)
	return snaps, handles
}

func TestUploadSnapshotHandle(t *testing.T) {
	st := fileStorage(t)
	data := []byte("not really a snapshot")
	h, err := st.UploadSnapshot(t.Context(), "job-9", 41, "op-3", 2, 4, 7, stream.KeyGroupRange{Start: 64, End: 95}, data)
	if err != nil {
		t.Fatal(err)
	}
	want := &weirpb.StateHandle{OperatorUid: "op-3", Subtask: 2, Parallelism: 4, Key: "job-9/chk-41/op-3/2-a7",
		Size: int64(len(data)), Sha256: sha256Hex(data), KeyGroupStart: 64, KeyGroupEnd: 95}
	if h.String() != want.String() {
		t.Fatalf("handle = %v\nwant %v", h, want)
	}
	got, err := st.Store().Get(t.Context(), h.Key)
	if err != nil || string(got) != string(data) {
		t.Fatalf("stored object = %q, %v", got, err)
	}
	for _, bad := range []struct{ job, uid string }{{"", "op"}, {"a/b", "op"}, {"job", "x/y"}, {"job", ".."}} {
		if _, err := st.UploadSnapshot(t.Context(), bad.job, 1, bad.uid, 0, 1, 0, stream.KeyGroupRange{}, data); err == nil {
			t.Errorf("UploadSnapshot(job %q, uid %q) succeeded", bad.job, bad.uid)
		}
	}
}

func TestLoadSameParallelism(t *testing.T) {
	for name, newStorage := range stores(t) {
		t.Run(name, func(t *testing.T) {
			st := newStorage(t)
			const p = 3
			snaps, handles := snapshotOperator(t, st, 5, "op", p, 1)
			var allUnion [][]byte
			for _, s := range snaps {
				allUnion = append(allUnion, s.Union["watermarks"]...)
			}
			for sub := range p {
				got, err := st.LoadOperatorState(t.Context(), handles, stream.KeyGroupRangeFor(maxP, p, sub), sub, p)
				if err != nil {
					t.Fatal(err)
				}
				want := normalize(snaps[sub])
				want.Union = map[string][][]byte{"watermarks": allUnion}
				if !equalSnapshots(got, want) {
					t.Fatalf("subtask %d:\n got %s\nwant %s", sub, describe(got), describe(want))
				}
			}
		})
	}
}

func TestLoadRescaled(t *testing.T) {
	for _, tc := range []struct{ from, to int }{{2, 3}, {3, 2}, {1, 4}, {4, 1}, {5, 5}} {
		t.Run(fmt.Sprintf("%d→%d", tc.from, tc.to), func(t *testing.T) {
			st := NewStorage(blobstore.NewMem())
			snaps, handles := snapshotOperator(t, st, 8, "op", tc.from, 2)

			// Independent expectation: every key group's chunks come from
			// the old subtask that owned it.
			wantKeyed := map[int][][]byte{}
			wantList := map[string]int{} // item -> count
			var wantUnion [][]byte
			for _, s := range snaps {
				for g, c := range s.Keyed {
					wantKeyed[g] = c
				}
				for name, items := range s.List {
					for _, it := range items {
						wantList[name+"="+string(it)]++
					}
				}
				wantUnion = append(wantUnion, s.Union["watermarks"]...)
			}

			gotList := map[string]int{}
			seenGroups := map[int]bool{}
			for sub := range tc.to {
				kg := stream.KeyGroupRangeFor(maxP, tc.to, sub)
				got, err := st.LoadOperatorState(t.Context(), handles, kg, sub, tc.to)
				if err != nil {
					t.Fatal(err)
				}
				for g, chunks := range got.Keyed {
					if !kg.Contains(g) {
						t.Fatalf("subtask %d got key group %d outside its range %v", sub, g, kg)
					}
					if !equalItems(chunks, wantKeyed[g]) {
						t.Fatalf("subtask %d key group %d: got %q, want %q", sub, g, chunks, wantKeyed[g])
					}
					seenGroups[g] = true
				}
				for name, items := range got.List {
					for _, it := range items {
						gotList[name+"="+string(it)]++
					}
				}
				if !equalItems(got.Union["watermarks"], wantUnion) {
					t.Fatalf("subtask %d union = %q, want %q", sub, got.Union["watermarks"], wantUnion)
				}
			}
			for g := range wantKeyed {
				if !seenGroups[g] {
					t.Errorf("key group %d restored by no subtask", g)
				}
			}
			if fmt.Sprint(gotList) != fmt.Sprint(wantList) {
				t.Fatalf("list items across subtasks = %v, want each of %v exactly once", gotList, wantList)
			}
		})
	}
}

func TestLoadListRoundRobin(t *testing.T) {
	// Subtask 0 had items a0..a2 and subtask 1 had b0; restored at
	// parallelism 3 the items, numbered in handle order, go round-robin.
	st := NewStorage(blobstore.NewMem())
	var handles []*weirpb.StateHandle
	for sub, items := range [][]string{{"a0", "a1", "a2"}, {"b0"}} {
		snap := &stream.OperatorSnapshot{}
		for _, it := range items {
			snap.List = map[string][][]byte{"s": append(snap.List["s"], []byte(it))}
		}
		data, _ := EncodeSnapshot(snap)
		h, err := st.UploadSnapshot(t.Context(), "j", 1, "op", sub, 2, 0, stream.KeyGroupRange{Start: 0, End: -1}, data)
		if err != nil {
			t.Fatal(err)
		}
		handles = append(handles, h)
	}
	want := [][]string{{"a0", "b0"}, {"a1"}, {"a2"}}
	for sub := range 3 {
		got, err := st.LoadOperatorState(t.Context(), handles, stream.KeyGroupRangeFor(maxP, 3, sub), sub, 3)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, it := range got.List["s"] {
			names = append(names, string(it))
		}
		if !slices.Equal(names, want[sub]) {
			t.Errorf("subtask %d list = %q, want %q", sub, names, want[sub])
		}
	}
}

// testCorruption checks that a modified, truncated or missing snapshot
// object makes LoadOperatorState fail with an error naming the object.
func testCorruption(t *testing.T, st *Storage) {
	cases := []struct {
		name    string
		damage  func(data []byte) []byte // nil deletes the object
		wantErr error
		want    []string // what the message names besides the object
	}{
		{"flipped byte", func(d []byte) []byte { d[len(d)/2] ^= 0x40; return d }, ErrCorrupt, []string{"checksum"}},
		{"truncated", func(d []byte) []byte { return d[:len(d)-5] }, ErrCorrupt, []string{"size"}},
		{"emptied", func(d []byte) []byte { return d[:0] }, ErrCorrupt, []string{"size"}},
		{"deleted", nil, blobstore.ErrNotFound, []string{"missing"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			_, handles := snapshotOperator(t, st, 41, "op-"+strings.ReplaceAll(tc.name, " ", "-"), 3, 3)
			victim := handles[1]
			if tc.damage == nil {
				if err := st.Store().Delete(ctx, victim.Key); err != nil {
					t.Fatal(err)
				}
			} else {
				data, err := st.Store().Get(ctx, victim.Key)
				if err != nil {
					t.Fatal(err)
				}
				if err := st.Store().Put(ctx, victim.Key, tc.damage(data)); err != nil {
					t.Fatal(err)
				}
			}
			// Every subtask's restore reads every handle, so every one fails.
			for sub := range 3 {
				_, err := st.LoadOperatorState(ctx, handles, stream.KeyGroupRangeFor(maxP, 3, sub), sub, 3)
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("subtask %d: err = %v, want one wrapping %v", sub, err, tc.wantErr)
				}
				msg := err.Error()
				for _, w := range append([]string{"checkpoint 41", victim.Key}, tc.want...) {
					if !strings.Contains(msg, w) {
						t.Fatalf("error %q does not say %q", msg, w)
					}
				}
			}
		})
	}
}

func TestCorruptionDetected(t *testing.T) {
	for name, newStorage := range stores(t) {
		t.Run(name, func(t *testing.T) { testCorruption(t, newStorage(t)) })
	}
}

// TestCorruptionWithValidChecksum covers an object whose handle was
// computed over bytes that are not a valid snapshot.
func TestCorruptSnapshotWithMatchingChecksum(t *testing.T) {
	st := NewStorage(blobstore.NewMem())
	h, err := st.UploadSnapshot(t.Context(), "j", 3, "op", 0, 1, 0, stream.KeyGroupRange{Start: 0, End: 127}, []byte("garbage that is long enough to parse"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = st.LoadOperatorState(t.Context(), []*weirpb.StateHandle{h}, stream.KeyGroupRange{Start: 0, End: 127}, 0, 1)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "checkpoint 3") || !strings.Contains(err.Error(), "j/chk-3/op/0-a0") {
		t.Fatalf("err = %v, want ErrCorrupt naming the object", err)
	}
}

func testManifests(t *testing.T, st *Storage) {
	ctx := t.Context()
	_, handles := snapshotOperator(t, st, 7, "window-1", 2, 4)
	m := &weirpb.Manifest{
		JobId: "job-1", JobName: "counts", CheckpointId: 7, TriggerTimeMs: 1_700_000_000_000, CompleteTimeMs: 1_700_000_000_250,
		Mode: weirpb.CheckpointMode_CHECKPOINT_MODE_EXACTLY_ONCE, MaxParallelism: maxP,
		Operators: []*weirpb.OperatorState{{OperatorUid: "window-1", Parallelism: 2, Handles: handles}},
	}
	key, sha, err := st.WriteManifest(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	if key != "job-1/chk-7/_manifest" || len(sha) != 64 {
		t.Fatalf("WriteManifest = %q, %q", key, sha)
	}
	if m.Version != 0 {
		t.Fatal("WriteManifest modified its argument")
	}
	got, err := st.ReadManifest(ctx, "job-1", 7)
	if err != nil {
		t.Fatal(err)
	}
	want := cloneManifest(m)
	want.Version = ManifestVersion
	if got.String() != want.String() {
		t.Fatalf("ReadManifest = %v\nwant %v", got, want)
	}

	if err := st.WritePointer(ctx, "job-1", &weirpb.CompletedPointer{CheckpointId: 7, ManifestKey: key, ManifestSha256: sha}); err != nil {
		t.Fatal(err)
	}
	p, err := st.ReadPointer(ctx, "job-1")
	if err != nil || p.GetCheckpointId() != 7 || p.GetManifestSha256() != sha || p.GetVersion() != 1 {
		t.Fatalf("ReadPointer = %v, %v", p, err)
	}
	latest, err := st.ReadLatestManifest(ctx, "job-1")
	if err != nil || latest.GetCheckpointId() != 7 {
		t.Fatalf("ReadLatestManifest = %v, %v", latest, err)
	}
	if _, err := st.ReadPointer(ctx, "job-2"); !errors.Is(err, blobstore.ErrNotFound) {
		t.Fatalf("ReadPointer(no checkpoints) = %v, want ErrNotFound", err)
	}
	if _, err := st.ReadManifest(ctx, "job-1", 8); !errors.Is(err, blobstore.ErrNotFound) || !strings.Contains(err.Error(), "job-1/chk-8/_manifest") {
		t.Fatalf("ReadManifest(missing) = %v, want ErrNotFound naming the object", err)
	}

	// A second checkpoint, then list and delete.
	snapshotOperator(t, st, 10, "window-1", 2, 5)
	m10 := cloneManifest(m)
	m10.CheckpointId = 10
	if _, _, err := st.WriteManifest(ctx, m10); err != nil {
		t.Fatal(err)
	}
	ids, err := st.ListCheckpointIDs(ctx, "job-1")
	if err != nil || !slices.Equal(ids, []int64{7, 10}) {
		t.Fatalf("ListCheckpointIDs = %v, %v; want [7 10]", ids, err)
	}
	if err := st.DeleteCheckpoint(ctx, "job-1", 7); err != nil {
		t.Fatal(err)
	}
	left, err := st.Store().List(ctx, "job-1/")
	if err != nil {
		t.Fatal(err)
	}
	for _, info := range left {
		if strings.HasPrefix(info.Key, "job-1/chk-7/") {
			t.Fatalf("object %s left after DeleteCheckpoint(7)", info.Key)
		}
	}
	if len(left) != 4 { // chk-10: 2 snapshots + manifest, and _completed
		t.Fatalf("after deleting chk-7 the job has %d objects, want 4: %+v", len(left), left)
	}
	ids, err = st.ListCheckpointIDs(ctx, "job-1")
	if err != nil || !slices.Equal(ids, []int64{10}) {
		t.Fatalf("ListCheckpointIDs after delete = %v, %v; want [10]", ids, err)
	}
	if err := st.DeleteCheckpoint(ctx, "job-1", 7); err != nil {
		t.Fatalf("deleting again: %v", err)
	}
	// The pointer now names a deleted checkpoint.
	if _, err := st.ReadLatestManifest(ctx, "job-1"); !errors.Is(err, blobstore.ErrNotFound) {
		t.Fatalf("ReadLatestManifest after deleting its checkpoint = %v, want ErrNotFound", err)
	}
}

func TestManifests(t *testing.T) {
	for name, newStorage := range stores(t) {
		t.Run(name, func(t *testing.T) { testManifests(t, newStorage(t)) })
	}
}

// TestS3 runs the storage tests against s3store on a real S3 server.
func TestS3(t *testing.T) {
	endpoint, access, secret := blobstoretest.StartVersityGW(t)
	newStorage := func(t *testing.T) *Storage {
		return NewStorage(blobstoretest.NewS3Store(t, endpoint, access, secret))
	}
	t.Run("Corruption", func(t *testing.T) { testCorruption(t, newStorage(t)) })
	t.Run("Manifests", func(t *testing.T) { testManifests(t, newStorage(t)) })
	t.Run("RoundTrip", func(t *testing.T) {
		st := newStorage(t)
		snaps, handles := snapshotOperator(t, st, 1, "op", 2, 6)
		for sub := range 2 {
			got, err := st.LoadOperatorState(t.Context(), handles, stream.KeyGroupRangeFor(maxP, 2, sub), sub, 2)
			if err != nil {
				t.Fatal(err)
			}
			want := normalize(snaps[sub])
			want.Union = map[string][][]byte{"watermarks": append(slices.Clone(snaps[0].Union["watermarks"]), snaps[1].Union["watermarks"]...)}
			if !equalSnapshots(got, want) {
				t.Fatalf("subtask %d:\n got %s\nwant %s", sub, describe(got), describe(want))
			}
		}
	})
}

func TestCheckpointOf(t *testing.T) {
	for _, tt := range []struct {
		key string
		id  int64
		ok  bool
	}{
		{"job/chk-7/_manifest", 7, true},
		{"job/chk-0/op/1-a2", 0, true},
		{"job/chk-12/x", 12, true},
		{"job/chk-07/x", 0, false}, // not how ids are written
		{"job/chk-7", 0, false},    // no object under it
		{"job/chk--1/x", 0, false}, // negative
		{"job/chk-x/y", 0, false},  // not a number
		{"job/_completed", 0, false},
		{"job/shared/abc", 0, false},
		{"other/chk-7/_manifest", 0, false},
		{"jobx/chk-7/_manifest", 0, false},
	} {
		id, ok := CheckpointOf("job", tt.key)
		if id != tt.id || ok != tt.ok {
			t.Errorf("CheckpointOf(job, %q) = %d, %v; want %d, %v", tt.key, id, ok, tt.id, tt.ok)
		}
	}
}
