package checkpoint

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/weirstream/weir/blobstore"
	"github.com/weirstream/weir/proto/weirpb"
)

// fuzzManifests are valid manifests of different shapes; the fuzzers start
// from their encodings (and the committed corpora in testdata/fuzz hold them
// together with truncated and corrupted copies).
func fuzzManifests() []*weirpb.Manifest {
	return []*weirpb.Manifest{
		{Version: ManifestVersion, JobId: "j", CheckpointId: 4},
		{
			Version: ManifestVersion, JobId: "job-1", JobName: "counts", CheckpointId: 41,
			TriggerTimeMs: 1_700_000_000_000, CompleteTimeMs: 1_700_000_001_500,
			Mode: weirpb.CheckpointMode_CHECKPOINT_MODE_EXACTLY_ONCE, MaxParallelism: 128,
			Operators: []*weirpb.OperatorState{
				{OperatorUid: "src-1", Parallelism: 2, FinishedSubtasks: []int32{1}},
				{OperatorUid: "count-2", Parallelism: 2, Handles: []*weirpb.StateHandle{
					{OperatorUid: "count-2", Subtask: 0, Parallelism: 2, Key: "job-1/chk-41/count-2/0-a1", Size: 100,
						Sha256: strings.Repeat("ab", 32), KeyGroupStart: 0, KeyGroupEnd: 63},
					{OperatorUid: "count-2", Subtask: 1, Parallelism: 2, Key: "job-1/chk-41/count-2/1-a1", Size: 2048,
						Sha256: strings.Repeat("cd", 32), KeyGroupStart: 64, KeyGroupEnd: 127, UnionOnly: true,
						Files: []*weirpb.StateFile{
							{Name: "000001.sst", Key: "job-1/shared/" + strings.Repeat("ef", 32), Size: 4096, Sha256: strings.Repeat("ef", 32), Shared: true},
							{Name: "MANIFEST-000002", Key: "job-1/chk-41/count-2/1-a1-MANIFEST", Size: 10, Sha256: strings.Repeat("01", 32)},
						}},
				}},
			},
		},
		// Extremes: the largest id, negative times, a handle whose key-group
		// range is empty and one of an operator the graph no longer has.
		{
			Version: ManifestVersion, JobId: "x", CheckpointId: 1<<63 - 1, TriggerTimeMs: -1, CompleteTimeMs: -2,
			Mode: weirpb.CheckpointMode(99), MaxParallelism: -1,
			Operators: []*weirpb.OperatorState{{OperatorUid: "gone", Parallelism: -3, Handles: []*weirpb.StateHandle{
				{Subtask: -1, KeyGroupStart: 5, KeyGroupEnd: 4, Size: -7, Sha256: "short"},
			}}},
		},
	}
}

// readManifestErrorOK reports whether err is one ReadManifest may return
// for an object that exists: every rejection of stored bytes must say that
// the object is corrupt or of another version, so that callers can tell a
// damaged checkpoint from an unreachable store.
func readManifestErrorOK(err error) bool {
	return errors.Is(err, ErrCorrupt) || errors.Is(err, ErrVersion)
}

// FuzzReadManifest stores arbitrary bytes as a checkpoint's manifest and
// reads them back through the decoder that restores and inspection use.
// Properties:
//   - it never panics, and every rejection wraps ErrCorrupt or ErrVersion;
//   - what it accepts is version ManifestVersion and names the job and
//     checkpoint it was read for, and a manifest read for another
//     checkpoint is rejected as corrupt;
//   - what it accepts can be formatted for people and written back, and
//     writing is deterministic and round-trips: the stored bytes decode to
//     an equal manifest and re-encode to the same bytes;
//   - read through the completed pointer, the written manifest is accepted
//     and any truncation or changed byte of it is rejected by the checksum.
func FuzzReadManifest(f *testing.F) {
	for _, m := range fuzzManifests() {
		data, err := marshal.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
		f.Add(data[:len(data)/2])
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ctx := t.Context()
		st := NewStorage(blobstore.NewMem())
		// Read the bytes for the job and checkpoint they claim to be, when
		// that identity can be a key, so that the fuzzer reaches the checks
		// behind the identity check; otherwise for a fixed one.
		jobID, id := "j", int64(4)
		var claim weirpb.Manifest
		if proto.Unmarshal(data, &claim) == nil && validSegment("job id", claim.GetJobId()) == nil {
			jobID, id = claim.GetJobId(), claim.GetCheckpointId()
		}
		if err := st.Store().Put(ctx, ManifestKey(jobID, id), data); err != nil {
			return // The identity makes a key longer than the store allows.
		}
		m, err := st.ReadManifest(ctx, jobID, id)
		if err != nil {
			if !readManifestErrorOK(err) {
				t.Fatalf("ReadManifest(%q, %d): error %v wraps neither ErrCorrupt nor ErrVersion", jobID, id, err)
			}
			return
		}
		if m.GetVersion() != ManifestVersion || m.GetJobId() != jobID || m.GetCheckpointId() != id {
			t.Fatalf("ReadManifest(%q, %d) accepted version %d of checkpoint %d of job %q", jobID, id, m.GetVersion(), m.GetCheckpointId(), m.GetJobId())
		}

		// The same bytes under another checkpoint's key were copied or
		// renamed.
		other := id + 1
		if other < 0 {
			other = id - 1
		}
		if err := st.Store().Put(ctx, ManifestKey(jobID, other), data); err == nil {
			if _, err := st.ReadManifest(ctx, jobID, other); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("manifest of checkpoint %d read as checkpoint %d: err = %v, want ErrCorrupt", id, other, err)
			}
		}

		out := FormatManifest(m)
		if !strings.Contains(out, "checkpoint:      "+strconv.FormatInt(id, 10)+"\n") {
			t.Fatalf("FormatManifest does not show checkpoint %d:\n%s", id, out)
		}
		ReferencedSharedFiles(m, map[string]bool{})

		if id < 0 {
			// WriteManifest refuses negative ids. ReadManifest accepts a
			// manifest that claims one, but no caller asks for one: the
			// jobmanager reads ids it handed out or that CheckpointOf found
			// in a listing, and neither is ever negative.
			if _, _, err := st.WriteManifest(ctx, m); err == nil {
				t.Fatalf("WriteManifest wrote checkpoint %d", id)
			}
			return
		}
		key, sha := roundTrip(ctx, t, st, m)
		checkPointerChecksum(ctx, t, st, m, key, sha)
	})
}

// roundTrip writes m, reads it back and checks that the two are equal and
// that writing what was read stores the same bytes.
func roundTrip(ctx context.Context, t *testing.T, st *Storage, m *weirpb.Manifest) (key, sha string) {
	t.Helper()
	jobID, id := m.GetJobId(), m.GetCheckpointId()
	key, sha, err := st.WriteManifest(ctx, m)
	if err != nil {
		t.Fatalf("WriteManifest of an accepted manifest: %v", err)
	}
	if key != ManifestKey(jobID, id) {
		t.Fatalf("WriteManifest wrote %s, want %s", key, ManifestKey(jobID, id))
	}
	stored, err := st.Store().Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if got := sha256Hex(stored); got != sha {
		t.Fatalf("WriteManifest returned sha256 %s of bytes whose sha256 is %s", sha, got)
	}
	again, err := st.ReadManifest(ctx, jobID, id)
	if err != nil {
		t.Fatalf("ReadManifest of a written manifest: %v", err)
	}
	if !proto.Equal(m, again) {
		t.Fatalf("round trip changed the manifest:\n%v\n%v", m, again)
	}
	if _, sha2, err := st.WriteManifest(ctx, again); err != nil || sha2 != sha {
		t.Fatalf("writing the manifest again: sha256 %s, err %v; want the same bytes (%s)", sha2, err, sha)
	}
	return key, sha
}

// checkPointerChecksum points the job's completed pointer at m (stored at
// key with hex SHA-256 sha) and checks that ReadLatestManifest returns m,
// and that it rejects every truncation and a changed byte at a few places.
func checkPointerChecksum(ctx context.Context, t *testing.T, st *Storage, m *weirpb.Manifest, key, sha string) {
	t.Helper()
	jobID, id := m.GetJobId(), m.GetCheckpointId()
	if err := st.WritePointer(ctx, jobID, &weirpb.CompletedPointer{CheckpointId: id, ManifestKey: key, ManifestSha256: sha}); err != nil {
		t.Fatal(err)
	}
	latest, err := st.ReadLatestManifest(ctx, jobID)
	if err != nil {
		t.Fatalf("ReadLatestManifest: %v", err)
	}
	if !proto.Equal(m, latest) {
		t.Fatalf("ReadLatestManifest returned another manifest:\n%v\n%v", m, latest)
	}
	good, err := st.Store().Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var bad [][]byte
	for _, n := range []int{0, len(good) / 2, len(good) - 1} {
		bad = append(bad, good[:n])
		flipped := append([]byte(nil), good...)
		flipped[n] ^= 0x01
		bad = append(bad, flipped)
	}
	for _, b := range bad {
		if err := st.Store().Put(ctx, key, b); err != nil {
			t.Fatal(err)
		}
		if _, err := st.ReadLatestManifest(ctx, jobID); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("ReadLatestManifest of a damaged manifest (%q, was %q): err = %v, want ErrCorrupt", b, good, err)
		}
	}
	if err := st.Store().Put(ctx, key, good); err != nil {
		t.Fatal(err)
	}
}

// FuzzReadLatestManifest stores arbitrary bytes as a job's completed
// pointer and as the manifest it names, and reads the latest manifest.
// Properties:
//   - it never panics, and every rejection wraps ErrCorrupt or ErrVersion
//     (or blobstore.ErrNotFound when the pointer names a checkpoint whose
//     manifest is not at the key the pointer's id gives);
//   - what it accepts comes from a pointer of version ManifestVersion whose
//     key, when set, is the manifest's key, and whose checksum, when set,
//     matches the stored manifest bytes;
//   - the accepted manifest names the pointer's job and checkpoint.
func FuzzReadLatestManifest(f *testing.F) {
	for _, m := range fuzzManifests() {
		data, err := marshal.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		p := &weirpb.CompletedPointer{Version: ManifestVersion, CheckpointId: m.GetCheckpointId(),
			ManifestKey: ManifestKey(m.GetJobId(), m.GetCheckpointId()), ManifestSha256: sha256Hex(data)}
		pdata, err := marshal.Marshal(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(pdata, data)
		f.Add(pdata, data[:len(data)-1])
		f.Add(pdata[:len(pdata)-1], data)
	}
	f.Fuzz(func(t *testing.T, pointer, manifest []byte) {
		ctx := t.Context()
		st := NewStorage(blobstore.NewMem())
		// The job is the one the manifest claims, when it can be a key, so
		// that the seeds reach the checksum check.
		jobID := "j"
		var claim weirpb.Manifest
		if proto.Unmarshal(manifest, &claim) == nil && validSegment("job id", claim.GetJobId()) == nil {
			jobID = claim.GetJobId()
		}
		var p weirpb.CompletedPointer
		id := int64(1)
		if proto.Unmarshal(pointer, &p) == nil {
			id = p.GetCheckpointId()
		}
		if st.Store().Put(ctx, PointerKey(jobID), pointer) != nil || st.Store().Put(ctx, ManifestKey(jobID, id), manifest) != nil {
			return // The job id makes a key longer than the store allows.
		}
		m, err := st.ReadLatestManifest(ctx, jobID)
		if err != nil {
			if !readManifestErrorOK(err) && !errors.Is(err, blobstore.ErrNotFound) {
				t.Fatalf("ReadLatestManifest(%q): error %v wraps neither ErrCorrupt, ErrVersion nor ErrNotFound", jobID, err)
			}
			return
		}
		if err := proto.Unmarshal(pointer, &p); err != nil || p.GetVersion() != ManifestVersion {
			t.Fatalf("ReadLatestManifest accepted pointer %q (version %d, decode error %v)", pointer, p.GetVersion(), err)
		}
		if k := p.GetManifestKey(); k != "" && k != ManifestKey(jobID, p.GetCheckpointId()) {
			t.Fatalf("ReadLatestManifest followed pointer key %q for checkpoint %d", k, p.GetCheckpointId())
		}
		if s := p.GetManifestSha256(); s != "" && s != sha256Hex(manifest) {
			t.Fatalf("ReadLatestManifest accepted a manifest whose sha256 %s is not the pointer's %s", sha256Hex(manifest), s)
		}
		if m.GetJobId() != jobID || m.GetCheckpointId() != p.GetCheckpointId() || m.GetVersion() != ManifestVersion {
			t.Fatalf("ReadLatestManifest for job %q and pointer %v accepted %v", jobID, &p, m)
		}
	})
}
