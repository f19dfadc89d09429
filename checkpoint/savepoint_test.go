package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/weirstream/weir/blobstore"
	"github.com/weirstream/weir/blobstore/blobstoretest"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/stream"
)

// spFixture is a completed checkpoint 7 of job-1 in src, as the jobmanager
// hands it to WriteSavepoint: operator window-1 takes full snapshots (3
// subtasks); operator pebble-2 takes incremental ones (2 subtasks), whose
// files share one sstable that checkpoint 6 uploaded first.
type spFixture struct {
	src       *Storage
	m         *weirpb.Manifest // as ReadManifest returns it
	sharedKey string           // the sstable both pebble-2 handles name
}

func newSPFixture(t *testing.T) spFixture {
	t.Helper()
	ctx := t.Context()
	src := NewStorage(blobstore.NewMem())
	_, window := snapshotOperator(t, src, 7, "window-1", 3, 11)

	dir := t.TempDir()
	const sst = "shared sstable, uploaded by checkpoint 6"
	old := writeFiles(t, filepath.Join(dir, "c6"), map[string]string{"000001.sst": sst})
	if _, _, err := src.UploadFiles(ctx, "job-1", 6, "pebble-2", 0, 1, old); err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(12, 2))
	var pebble []*weirpb.StateHandle
	for sub, files := range []map[string]string{
		{"000001.sst": sst, "MANIFEST-000002": "manifest of subtask 0"},
		{"000001.sst": sst, "000003.sst": "subtask 1's own sstable", "MANIFEST-000004": "manifest of subtask 1"},
	} {
		kg := stream.KeyGroupRangeFor(maxP, 2, sub)
		data, err := EncodeSnapshot(randomSnapshot(r, kg, fmt.Sprintf("pebble-%d", sub)))
		if err != nil {
			t.Fatal(err)
		}
		h, err := src.UploadSnapshot(ctx, "job-1", 7, "pebble-2", sub, 2, 1, kg, data)
		if err != nil {
			t.Fatal(err)
		}
		sfs := writeFiles(t, filepath.Join(dir, fmt.Sprintf("c7-%d", sub)), files)
		if h.Files, _, err = src.UploadFiles(ctx, "job-1", 7, "pebble-2", sub, 1, sfs); err != nil {
			t.Fatal(err)
		}
		pebble = append(pebble, h)
	}
	m := &weirpb.Manifest{
		JobId: "job-1", JobName: "counts", CheckpointId: 7, TriggerTimeMs: 1_700_000_000_000, CompleteTimeMs: 1_700_000_000_250,
		Mode: weirpb.CheckpointMode_CHECKPOINT_MODE_EXACTLY_ONCE, MaxParallelism: maxP,
		Operators: []*weirpb.OperatorState{
			{OperatorUid: "window-1", Parallelism: 3, Handles: window},
			{OperatorUid: "pebble-2", Parallelism: 2, Handles: pebble},
		},
	}
	if _, _, err := src.WriteManifest(ctx, m); err != nil {
		t.Fatal(err)
	}
	read, err := src.ReadManifest(ctx, "job-1", 7)
	if err != nil {
		t.Fatal(err)
	}
	return spFixture{src: src, m: read, sharedKey: SharedKey("job-1", sha256Hex([]byte(sst)))}
}

// objects returns the distinct objects the manifest's handles name, by
// key, with their sizes.
func (f spFixture) objects() map[string]int64 {
	out := map[string]int64{}
	for _, op := range f.m.GetOperators() {
		for _, h := range op.GetHandles() {
			out[h.GetKey()] = h.GetSize()
			for _, sf := range h.GetFiles() {
				out[sf.GetKey()] = sf.GetSize()
			}
		}
	}
	return out
}

// allKeys returns every key the metadata's handles and files name.
func allKeys(m *weirpb.Manifest) []string {
	var keys []string
	for _, op := range m.GetOperators() {
		for _, h := range op.GetHandles() {
			keys = append(keys, h.GetKey())
			for _, f := range h.GetFiles() {
				keys = append(keys, f.GetKey())
			}
		}
	}
	return keys
}

func listKeys(t *testing.T, st blobstore.Store) []string {
	t.Helper()
	infos, err := st.List(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, info := range infos {
		keys = append(keys, info.Key)
	}
	return keys
}

// loadAll restores every subtask of every operator of m from st, at the
// snapshotted parallelism and at one other, and fetches every handle's
// files, returning what it got as text.
func loadAll(t *testing.T, st *Storage, m *weirpb.Manifest) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, op := range m.GetOperators() {
		for _, p := range []int{int(op.GetParallelism()), int(op.GetParallelism()) + 1} {
			for sub := range p {
				snap, err := st.LoadOperatorState(t.Context(), op.GetHandles(), stream.KeyGroupRangeFor(maxP, p, sub), sub, p)
				if err != nil {
					t.Fatal(err)
				}
				out[fmt.Sprintf("%s %d/%d", op.GetOperatorUid(), sub, p)] = fmt.Sprint(normalize(snap))
			}
		}
		for _, h := range op.GetHandles() {
			if len(h.GetFiles()) == 0 {
				continue
			}
			files, _, err := st.DownloadFiles(t.Context(), h.GetFiles(), t.TempDir(), DownloadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range files {
				data, err := os.ReadFile(f.Path)
				if err != nil {
					t.Fatal(err)
				}
				out[fmt.Sprintf("%s %d file %s", op.GetOperatorUid(), h.GetSubtask(), f.Name)] = string(data)
			}
		}
	}
	return out
}

// TestSavepointRoundTrip writes a savepoint and restores from it alone,
// after the checkpoint it was taken from is gone.
func TestSavepointRoundTrip(t *testing.T) {
	for name, newStorage := range stores(t) {
		t.Run(name, func(t *testing.T) { testSavepointRoundTrip(t, newStorage(t).Store()) })
	}
}

// TestSavepointS3 writes a savepoint to a real S3 server, restores from it
// and refuses to overwrite it.
func TestSavepointS3(t *testing.T) {
	endpoint, access, secret := blobstoretest.StartVersityGW(t)
	dst := blobstoretest.NewS3Store(t, endpoint, access, secret)
	testSavepointRoundTrip(t, dst)
	f := newSPFixture(t)
	if _, _, err := WriteSavepoint(t.Context(), f.src, f.m, dst, nil); !errors.Is(err, ErrSavepointExists) {
		t.Fatalf("second WriteSavepoint = %v, want ErrSavepointExists", err)
	}
	if _, err := DisposeSavepoint(t.Context(), dst); err != nil {
		t.Fatal(err)
	}
	if keys := listKeys(t, dst); len(keys) != 0 {
		t.Fatalf("after dispose the savepoint holds %q", keys)
	}
}

func testSavepointRoundTrip(t *testing.T, dst blobstore.Store) {
	ctx := t.Context()
	f := newSPFixture(t)
	want := loadAll(t, f.src, f.m)
	srcBytes := map[string][]byte{}
	for key := range f.objects() {
		data, err := f.src.Store().Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		srcBytes[key] = data
	}
	mBefore := proto.CloneOf(f.m)

	var calls [][2]int64
	meta, n, err := WriteSavepoint(ctx, f.src, f.m, dst, func(done, total int64) { calls = append(calls, [2]int64{done, total}) })
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(f.m, mBefore) {
		t.Fatal("WriteSavepoint modified its manifest")
	}

	// The metadata is the manifest with every key made relative
	// to the savepoint; it is stored as the last object, and is
	// what ReadSavepoint returns.
	wantMeta := proto.CloneOf(f.m)
	for _, op := range wantMeta.GetOperators() {
		for _, h := range op.GetHandles() {
			h.Key = strings.TrimPrefix(h.Key, "job-1/")
			for _, sf := range h.GetFiles() {
				sf.Key = strings.TrimPrefix(sf.Key, "job-1/")
			}
		}
	}
	if !proto.Equal(meta, wantMeta) {
		t.Fatalf("metadata = %v\nwant %v", meta, wantMeta)
	}
	read, err := ReadSavepoint(ctx, dst)
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(read, meta) {
		t.Fatalf("ReadSavepoint = %v\nwant %v", read, meta)
	}
	if !slices.Contains(allKeys(meta), strings.TrimPrefix(f.sharedKey, "job-1/")) {
		t.Fatalf("metadata does not name the shared file %s", f.sharedKey)
	}

	// The savepoint holds exactly the objects, byte for byte, and
	// the metadata; the bytes and progress count them.
	var total int64
	wantKeys := []string{SavepointMetadataKey}
	for key, size := range f.objects() {
		total += size
		wantKeys = append(wantKeys, strings.TrimPrefix(key, "job-1/"))
		got, err := dst.Get(ctx, strings.TrimPrefix(key, "job-1/"))
		if err != nil || !bytes.Equal(got, srcBytes[key]) {
			t.Fatalf("savepoint copy of %s = %q, %v; want %q", key, got, err, srcBytes[key])
		}
	}
	slices.Sort(wantKeys)
	if got := listKeys(t, dst); !slices.Equal(got, wantKeys) {
		t.Fatalf("savepoint objects = %q\nwant %q", got, wantKeys)
	}
	metaBytes, err := dst.Get(ctx, SavepointMetadataKey)
	if err != nil {
		t.Fatal(err)
	}
	if n != total+int64(len(metaBytes)) {
		t.Fatalf("WriteSavepoint wrote %d bytes, want %d (objects) + %d (metadata)", n, total, len(metaBytes))
	}
	if len(calls) != len(f.objects())+1 || calls[0] != [2]int64{0, total} || calls[len(calls)-1] != [2]int64{total, total} {
		t.Fatalf("progress calls = %v; want (0, %d) first, one per object, (%d, %d) last", calls, total, total, total)
	}
	for i := 1; i < len(calls); i++ {
		if calls[i][0] < calls[i-1][0] || calls[i][1] != total {
			t.Fatalf("progress calls = %v: not ascending to a fixed total", calls)
		}
	}

	// Delete the job's checkpoints; the savepoint alone restores
	// the same state and files.
	for _, key := range listKeys(t, f.src.Store()) {
		if err := f.src.Store().Delete(ctx, key); err != nil {
			t.Fatal(err)
		}
	}
	got := loadAll(t, NewStorage(dst), read)
	if !maps.Equal(got, want) {
		t.Fatalf("restored from the savepoint:\n%v\nwant\n%v", got, want)
	}
}

// countingStore counts the writes of each key.
type countingStore struct {
	blobstore.Store
	mu struct {
		sync.Mutex
		puts map[string]int
	}
}

func newCountingStore() *countingStore {
	c := &countingStore{Store: blobstore.NewMem()}
	c.mu.puts = map[string]int{}
	return c
}

func (c *countingStore) count(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mu.puts[key]++
}

func (c *countingStore) Put(ctx context.Context, key string, data []byte) error {
	c.count(key)
	return c.Store.Put(ctx, key, data)
}

func (c *countingStore) PutIfAbsent(ctx context.Context, key string, data []byte) (bool, error) {
	c.count(key)
	return c.Store.PutIfAbsent(ctx, key, data)
}

func (c *countingStore) puts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.mu.puts)
}

func TestSavepointCopiesSharedFileOnce(t *testing.T) {
	f := newSPFixture(t)
	refs := 0
	for _, k := range allKeys(f.m) {
		if k == f.sharedKey {
			refs++
		}
	}
	if refs != 2 {
		t.Fatalf("the fixture names the shared file %d times, want 2", refs)
	}
	dst := newCountingStore()
	if _, _, err := WriteSavepoint(t.Context(), f.src, f.m, dst, nil); err != nil {
		t.Fatal(err)
	}
	want := map[string]int{SavepointMetadataKey: 1}
	for key := range f.objects() {
		want[strings.TrimPrefix(key, "job-1/")] = 1
	}
	if got := dst.puts(); !maps.Equal(got, want) {
		t.Fatalf("writes per key = %v\nwant %v", got, want)
	}
}

func TestSavepointNeverOverwritten(t *testing.T) {
	ctx := t.Context()
	f := newSPFixture(t)
	dst := newCountingStore()

	// Objects an earlier, failed attempt left are overwritten.
	victim := strings.TrimPrefix(f.m.Operators[0].Handles[0].Key, "job-1/")
	if err := dst.Store.Put(ctx, victim, []byte("left by a failed attempt")); err != nil {
		t.Fatal(err)
	}
	meta, _, err := WriteSavepoint(ctx, f.src, f.m, dst, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewStorage(dst).LoadOperatorState(ctx, meta.Operators[0].Handles, stream.KeyGroupRangeFor(maxP, 1, 0), 0, 1); err != nil {
		t.Fatalf("restore after overwriting a leftover: %v", err)
	}

	// A complete savepoint is not: a second one is refused before it
	// writes anything.
	before := dst.puts()
	other := proto.CloneOf(f.m)
	other.JobName = "another"
	_, _, err = WriteSavepoint(ctx, f.src, other, dst, func(int64, int64) { t.Error("progress reported for a refused savepoint") })
	if !errors.Is(err, ErrSavepointExists) || !strings.Contains(err.Error(), "already holds a savepoint of checkpoint 7 of job job-1") {
		t.Fatalf("second WriteSavepoint = %v, want ErrSavepointExists naming the savepoint there", err)
	}
	if after := dst.puts(); !maps.Equal(after, before) {
		t.Fatalf("a refused WriteSavepoint wrote: %v, before %v", after, before)
	}
	if read, err := ReadSavepoint(ctx, dst); err != nil || read.GetJobName() != "counts" {
		t.Fatalf("ReadSavepoint after a refused overwrite = %v, %v", read, err)
	}
}

func TestSavepointCorruptSource(t *testing.T) {
	for _, tc := range []struct {
		name    string
		victim  func(f spFixture) string
		damage  func([]byte) []byte // nil deletes the object
		wantErr error
		want    string
	}{
		{"flipped snapshot", func(f spFixture) string { return f.m.Operators[0].Handles[1].Key },
			func(d []byte) []byte { d[len(d)/2] ^= 0x20; return d }, ErrCorrupt, "checksum mismatch"},
		{"truncated shared file", func(f spFixture) string { return f.sharedKey },
			func(d []byte) []byte { return d[:len(d)-1] }, ErrCorrupt, "size mismatch"},
		{"deleted private file", func(f spFixture) string { return f.m.Operators[1].Handles[1].Files[1].Key },
			nil, blobstore.ErrNotFound, "missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			f := newSPFixture(t)
			victim := tc.victim(f)
			if tc.damage == nil {
				if err := f.src.Store().Delete(ctx, victim); err != nil {
					t.Fatal(err)
				}
			} else {
				data, err := f.src.Store().Get(ctx, victim)
				if err != nil {
					t.Fatal(err)
				}
				if err := f.src.Store().Put(ctx, victim, tc.damage(data)); err != nil {
					t.Fatal(err)
				}
			}
			dst := blobstore.NewMem()
			_, _, err := WriteSavepoint(ctx, f.src, f.m, dst, nil)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want one wrapping %v", err, tc.wantErr)
			}
			for _, w := range []string{"savepoint of checkpoint 7 of job job-1", victim, tc.want} {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q does not say %q", err, w)
				}
			}
			if _, err := ReadSavepoint(ctx, dst); !errors.Is(err, blobstore.ErrNotFound) {
				t.Fatalf("a failed WriteSavepoint left metadata: ReadSavepoint = %v", err)
			}
		})
	}
}

func TestSavepointRefusesBadManifest(t *testing.T) {
	f := newSPFixture(t)
	for _, tc := range []struct {
		name   string
		change func(m *weirpb.Manifest)
		want   string
	}{
		{"other job's object", func(m *weirpb.Manifest) { m.Operators[0].Handles[0].Key = "job-2/chk-7/window-1/0-a1" }, `"job-2/chk-7/window-1/0-a1" is not under the job's directory job-1/`},
		{"job id only as prefix", func(m *weirpb.Manifest) { m.Operators[0].Handles[0].Key = "job-10/chk-7/x" }, "not under the job's directory"},
		{"outside storage", func(m *weirpb.Manifest) { m.Operators[1].Handles[0].Files[0].Key = "/etc/passwd" }, "not under the job's directory"},
		{"escaping the job", func(m *weirpb.Manifest) { m.Operators[1].Handles[0].Files[0].Key = "job-1/chk-7/../../job-2/shared/x" }, `"chk-7/../../job-2/shared/x"`},
		{"metadata key", func(m *weirpb.Manifest) { m.Operators[0].Handles[2].Key = "job-1/_metadata" }, "names the savepoint's metadata"},
		{"object named twice differently", func(m *weirpb.Manifest) { m.Operators[0].Handles[1].Key = m.Operators[0].Handles[0].Key }, "twice with different sizes or checksums"},
		{"no job", func(m *weirpb.Manifest) { m.JobId = "" }, "job id"},
		{"future version", func(m *weirpb.Manifest) { m.Version = 2 }, "version 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := proto.CloneOf(f.m)
			tc.change(m)
			dst := blobstore.NewMem()
			_, _, err := WriteSavepoint(t.Context(), f.src, m, dst, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one saying %q", err, tc.want)
			}
			if keys := listKeys(t, dst); len(keys) != 0 {
				t.Fatalf("a refused WriteSavepoint wrote %q", keys)
			}
		})
	}
}

func TestSavepointObjectBound(t *testing.T) {
	f := newSPFixture(t)
	dst := blobstore.NewMem()
	meta, _, err := WriteSavepoint(t.Context(), f.src, f.m, dst, nil)
	if err != nil {
		t.Fatal(err)
	}
	n := len(f.objects())
	saved := maxSavepointObjects
	t.Cleanup(func() { maxSavepointObjects = saved })
	maxSavepointObjects = n - 1

	_, _, err = WriteSavepoint(t.Context(), f.src, f.m, blobstore.NewMem(), nil)
	if want := fmt.Sprintf("more than %d objects", n-1); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("WriteSavepoint of %d objects with a bound of %d = %v, want an error saying %q", n, n-1, err, want)
	}
	if _, err := ReadSavepoint(t.Context(), dst); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("ReadSavepoint of %d objects with a bound of %d = %v, want ErrCorrupt", n, n-1, err)
	}
	maxSavepointObjects = n // the shared file counts once
	if _, _, err := WriteSavepoint(t.Context(), f.src, f.m, blobstore.NewMem(), nil); err != nil {
		t.Fatalf("WriteSavepoint of %d objects with a bound of %d: %v", n, n, err)
	}
	if read, err := ReadSavepoint(t.Context(), dst); err != nil || !proto.Equal(read, meta) {
		t.Fatalf("ReadSavepoint of %d objects with a bound of %d = %v, %v; want %v", n, n, read, err, meta)
	}
}

func TestReadSavepointRejects(t *testing.T) {
	valid := func() *weirpb.Manifest {
		return &weirpb.Manifest{Version: ManifestVersion, JobId: "job-1", CheckpointId: 7, Operators: []*weirpb.OperatorState{{
			OperatorUid: "op", Parallelism: 1, Handles: []*weirpb.StateHandle{{
				OperatorUid: "op", Parallelism: 1, Key: "chk-7/op/0-a1", Size: 1, Sha256: strings.Repeat("ab", 32),
				Files: []*weirpb.StateFile{{Name: "000001.sst", Key: "shared/" + strings.Repeat("cd", 32), Size: 1, Sha256: strings.Repeat("cd", 32), Shared: true}},
			}},
		}}}
	}
	encode := func(change func(m *weirpb.Manifest)) []byte {
		m := valid()
		change(m)
		data, err := marshal.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	handle := func(m *weirpb.Manifest) *weirpb.StateHandle { return m.Operators[0].Handles[0] }
	for _, tc := range []struct {
		name    string
		data    []byte // nil: no metadata
		wantErr error  // nil: accepted
		want    string
	}{
		{"valid", encode(func(*weirpb.Manifest) {}), nil, ""},
		{"missing", nil, blobstore.ErrNotFound, "does not name a savepoint"},
		{"not protobuf", []byte{0xff, 0xff, 0xff}, ErrCorrupt, "cannot decode"},
		{"no version", encode(func(m *weirpb.Manifest) { m.Version = 0 }), ErrCorrupt, "no version"},
		{"future version", encode(func(m *weirpb.Manifest) { m.Version = 2 }), ErrVersion, "version 2"},
		{"parent segment", encode(func(m *weirpb.Manifest) { handle(m).Key = "../job-2/chk-1/op/0-a0" }), ErrCorrupt, `"../job-2/chk-1/op/0-a0"`},
		{"inner parent segment", encode(func(m *weirpb.Manifest) { handle(m).Key = "chk-7/../../../etc/passwd" }), ErrCorrupt, `"chk-7/../../../etc/passwd"`},
		{"absolute key", encode(func(m *weirpb.Manifest) { handle(m).Key = "/etc/passwd" }), ErrCorrupt, `"/etc/passwd"`},
		{"absolute file key", encode(func(m *weirpb.Manifest) { handle(m).Files[0].Key = "/var/lib/x" }), ErrCorrupt, `"/var/lib/x"`},
		{"parent file key", encode(func(m *weirpb.Manifest) { handle(m).Files[0].Key = "shared/../../x" }), ErrCorrupt, `"shared/../../x"`},
		{"backslash", encode(func(m *weirpb.Manifest) { handle(m).Key = `..\..\x` }), ErrCorrupt, `"..\\..\\x"`},
		{"empty key", encode(func(m *weirpb.Manifest) { handle(m).Key = "" }), ErrCorrupt, "empty key"},
		{"metadata key", encode(func(m *weirpb.Manifest) { handle(m).Key = SavepointMetadataKey }), ErrCorrupt, "names the savepoint's metadata"},
		{"file name with a path", encode(func(m *weirpb.Manifest) { handle(m).Files[0].Name = "../000001.sst" }), ErrCorrupt, "snapshot file name"},
		{"no job id", encode(func(m *weirpb.Manifest) { m.JobId = "" }), ErrCorrupt, "job id"},
		{"negative checkpoint", encode(func(m *weirpb.Manifest) { m.CheckpointId = -1 }), ErrCorrupt, "negative checkpoint id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := blobstore.NewMem()
			if tc.data != nil {
				if err := dst.Put(t.Context(), SavepointMetadataKey, tc.data); err != nil {
					t.Fatal(err)
				}
			}
			m, err := ReadSavepoint(t.Context(), dst)
			if tc.wantErr == nil {
				if err != nil || !proto.Equal(m, valid()) {
					t.Fatalf("ReadSavepoint = %v, %v; want %v", m, err, valid())
				}
				return
			}
			if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), SavepointMetadataKey) {
				t.Fatalf("ReadSavepoint = %v; want an error wrapping %v naming %s and saying %q", err, tc.wantErr, SavepointMetadataKey, tc.want)
			}
			// Nor is such a savepoint disposed of.
			if _, err := DisposeSavepoint(t.Context(), dst); !errors.Is(err, tc.wantErr) {
				t.Fatalf("DisposeSavepoint = %v, want an error wrapping %v", err, tc.wantErr)
			}
			if tc.data != nil {
				if _, err := dst.Get(t.Context(), SavepointMetadataKey); err != nil {
					t.Fatalf("DisposeSavepoint of rejected metadata deleted it: %v", err)
				}
			}
		})
	}
}

func TestDisposeSavepoint(t *testing.T) {
	ctx := t.Context()
	f := newSPFixture(t)
	write := func(t *testing.T) blobstore.Store {
		t.Helper()
		dst := fileStorage(t).Store()
		if _, _, err := WriteSavepoint(ctx, f.src, f.m, dst, nil); err != nil {
			t.Fatal(err)
		}
		return dst
	}
	n := len(f.objects()) + 1

	t.Run("complete", func(t *testing.T) {
		dst := write(t)
		// Objects the metadata does not name stay.
		if err := dst.Put(ctx, "README", []byte("my savepoints")); err != nil {
			t.Fatal(err)
		}
		deleted, err := DisposeSavepoint(ctx, dst)
		if err != nil || deleted != n {
			t.Fatalf("DisposeSavepoint = %d, %v; want %d, nil", deleted, err, n)
		}
		if keys := listKeys(t, dst); !slices.Equal(keys, []string{"README"}) {
			t.Fatalf("after dispose the directory holds %q, want only README", keys)
		}
		// Again: nothing there.
		_, err = DisposeSavepoint(ctx, dst)
		if !errors.Is(err, blobstore.ErrNotFound) || !strings.Contains(err.Error(), "already disposed") {
			t.Fatalf("second DisposeSavepoint = %v, want ErrNotFound saying it may be already disposed of", err)
		}
		// The source checkpoint is untouched.
		if _, err := f.src.ReadManifest(ctx, "job-1", 7); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("interrupted", func(t *testing.T) {
		dst := write(t)
		// An earlier dispose deleted some objects, then stopped.
		for _, key := range allKeys(f.m)[:3] {
			if err := dst.Delete(ctx, strings.TrimPrefix(key, "job-1/")); err != nil {
				t.Fatal(err)
			}
		}
		if deleted, err := DisposeSavepoint(ctx, dst); err != nil || deleted != n {
			t.Fatalf("DisposeSavepoint = %d, %v; want %d, nil", deleted, err, n)
		}
		if keys := listKeys(t, dst); len(keys) != 0 {
			t.Fatalf("after dispose the directory holds %q", keys)
		}
	})

	t.Run("no metadata", func(t *testing.T) {
		dst := write(t)
		if err := dst.Delete(ctx, SavepointMetadataKey); err != nil {
			t.Fatal(err)
		}
		before := listKeys(t, dst)
		_, err := DisposeSavepoint(ctx, dst)
		if !errors.Is(err, blobstore.ErrNotFound) || !strings.Contains(err.Error(), fmt.Sprintf("no _metadata, but %d objects", n-1)) ||
			!strings.Contains(err.Error(), "nothing was deleted") {
			t.Fatalf("DisposeSavepoint = %v, want ErrNotFound saying objects are there and nothing was deleted", err)
		}
		if after := listKeys(t, dst); !slices.Equal(after, before) {
			t.Fatalf("DisposeSavepoint without metadata deleted objects: %q, before %q", after, before)
		}
	})

	t.Run("not a savepoint", func(t *testing.T) {
		// The checkpoint storage itself is no savepoint.
		before := listKeys(t, f.src.Store())
		if _, err := DisposeSavepoint(ctx, f.src.Store()); !errors.Is(err, blobstore.ErrNotFound) {
			t.Fatalf("DisposeSavepoint of checkpoint storage = %v, want ErrNotFound", err)
		}
		if after := listKeys(t, f.src.Store()); !slices.Equal(after, before) {
			t.Fatalf("DisposeSavepoint of checkpoint storage deleted objects")
		}
	})
}

// FuzzReadSavepoint stores arbitrary bytes as a savepoint's metadata and
// reads them back. Properties:
//   - it never panics, and every rejection wraps ErrCorrupt or ErrVersion;
//   - what it accepts is version ManifestVersion and names only keys that
//     a store accepts as relative keys, other than the metadata's;
//   - disposing of an accepted savepoint deletes exactly the objects its
//     metadata names and the metadata, and nothing else.
func FuzzReadSavepoint(f *testing.F) {
	for _, m := range fuzzManifests() {
		data, err := marshal.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
		f.Add(data[:len(data)/2])
		if meta, _, _, err := savepointOf(m); err == nil {
			data, err := marshal.Marshal(meta)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data)
		}
	}
	escape := fuzzManifests()[1]
	escape.Operators[1].Handles[1].Files[0].Key = "../../etc/passwd"
	data, err := marshal.Marshal(escape)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	f.Fuzz(func(t *testing.T, data []byte) {
		ctx := t.Context()
		dst := blobstore.NewMem()
		if err := dst.Put(ctx, SavepointMetadataKey, data); err != nil {
			t.Fatal(err)
		}
		m, err := ReadSavepoint(ctx, dst)
		if err != nil {
			if !readManifestErrorOK(err) {
				t.Fatalf("ReadSavepoint: error %v wraps neither ErrCorrupt nor ErrVersion", err)
			}
			return
		}
		if m.GetVersion() != ManifestVersion {
			t.Fatalf("ReadSavepoint accepted version %d", m.GetVersion())
		}
		named := map[string]bool{}
		for _, key := range allKeys(m) {
			if blobstore.ValidateKey(key) != nil || key == SavepointMetadataKey {
				t.Fatalf("ReadSavepoint accepted key %q", key)
			}
			named[key] = true
		}
		for key := range named {
			if err := dst.Put(ctx, key, []byte("x")); err != nil {
				t.Fatal(err)
			}
		}
		const other = "unnamed/object"
		if !named[other] {
			if err := dst.Put(ctx, other, []byte("y")); err != nil {
				t.Fatal(err)
			}
		}
		deleted, err := DisposeSavepoint(ctx, dst)
		if err != nil || deleted != len(named)+1 {
			t.Fatalf("DisposeSavepoint = %d, %v; want %d, nil", deleted, err, len(named)+1)
		}
		left := listKeys(t, dst)
		if want := []string{other}; named[other] && len(left) != 0 || !named[other] && !slices.Equal(left, want) {
			t.Fatalf("after dispose the store holds %q", left)
		}
	})
}

// A savepoint is written from a completed checkpoint, a job restores from
// it alone, and the user disposes of it.
func ExampleWriteSavepoint() {
	ctx := context.Background()
	st := NewStorage(blobstore.NewMem()) // the cluster's checkpoint storage

	kg := stream.KeyGroupRangeFor(128, 1, 0)
	data, err := EncodeSnapshot(&stream.OperatorSnapshot{Keyed: map[int][][]byte{7: {[]byte("count(a)=3")}}})
	if err != nil {
		panic(err)
	}
	h, err := st.UploadSnapshot(ctx, "job-1", 1, "counter", 0, 1, 0, kg, data)
	if err != nil {
		panic(err)
	}
	if _, _, err := st.WriteManifest(ctx, &weirpb.Manifest{JobId: "job-1", CheckpointId: 1, MaxParallelism: 128,
		Operators: []*weirpb.OperatorState{{OperatorUid: "counter", Parallelism: 1, Handles: []*weirpb.StateHandle{h}}}}); err != nil {
		panic(err)
	}
	m, err := st.ReadManifest(ctx, "job-1", 1)
	if err != nil {
		panic(err)
	}

	dir := blobstore.NewMem() // or storeuri.Open(ctx, "s3://bucket/savepoints/sp-1")
	if _, _, err := WriteSavepoint(ctx, st, m, dir, nil); err != nil {
		panic(err)
	}

	sp, err := ReadSavepoint(ctx, dir)
	if err != nil {
		panic(err)
	}
	restored, err := NewStorage(dir).LoadOperatorState(ctx, sp.Operators[0].Handles, kg, 0, 1)
	if err != nil {
		panic(err)
	}
	fmt.Println(sp.JobId, sp.CheckpointId, sp.Operators[0].Handles[0].Key)
	fmt.Printf("%s\n", restored.Keyed[7][0])

	n, err := DisposeSavepoint(ctx, dir)
	fmt.Println("deleted", n, err)
	// Output:
	// job-1 1 chk-1/counter/0-a0
	// count(a)=3
	// deleted 2 <nil>
}
