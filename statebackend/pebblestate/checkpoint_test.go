package pebblestate_test

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/statebackend/pebblestate"
	"github.com/weirstream/weir/stream"
)

const fullMaxPar = 128

var full = stream.KeyGroupRange{Start: 0, End: fullMaxPar - 1}

// testKey returns key i and its key group (spread over all key groups).
func testKey(i int) ([]byte, int) {
	return []byte(fmt.Sprintf("key-%06d", i)), (i * 7) % fullMaxPar
}

// populateFull writes, for n keys: a value i, a map entry, an event-time
// timer at 1000+i and, for even i, a processing-time timer at 2000+i.
func populateFull(t *testing.T, b statebackend.Backend, n int) {
	t.Helper()
	v, err := statebackend.GetValueState(b, "v", statebackend.Int64Codec)
	if err != nil {
		t.Fatal(err)
	}
	m, err := statebackend.GetMapState(b, "m", statebackend.StringCodec, statebackend.Int64Codec)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		k, kg := testKey(i)
		b.SetCurrentKey(k, kg)
		v.Update(int64(i))
		m.Put(fmt.Sprint("u", i%3), int64(-i))
		b.Timers().RegisterEventTimeTimer(int64(1000 + i))
		if i%2 == 0 {
			b.Timers().RegisterProcessingTimeTimer(int64(2000 + i))
		}
	}
}

// stateOf renders what b holds (keys via Keys, values, map, timers of both
// domains, processing-time ones marked "p:") and checks each value against
// the one populateFull wrote.
func stateOf(t *testing.T, b statebackend.Backend) (keys []string, timers []string) {
	t.Helper()
	v, err := statebackend.GetValueState(b, "v", statebackend.Int64Codec)
	if err != nil {
		t.Fatal(err)
	}
	m, err := statebackend.GetMapState(b, "m", statebackend.StringCodec, statebackend.Int64Codec)
	if err != nil {
		t.Fatal(err)
	}
	r := b.KeyGroups()
	for kg := r.Start; kg <= r.End; kg++ {
		b.Keys("v", kg, func(k []byte) bool {
			var i int
			fmt.Sscanf(string(k), "key-%d", &i)
			b.SetCurrentKey(k, kg)
			got, _ := v.Value()
			mv, _ := m.Get(fmt.Sprint("u", i%3))
			if _, wantKG := testKey(i); got != int64(i) || mv != int64(-i) || wantKG != kg {
				t.Errorf("key %s in key group %d: value %d, map %d", k, kg, got, mv)
			}
			keys = append(keys, string(k))
			return true
		})
	}
	err = b.Timers().AdvanceWatermark(1<<40, func(key []byte, kg int, ts int64) error {
		timers = append(timers, fmt.Sprintf("%s@%d", key, ts))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = b.Timers().AdvanceProcessingTime(1<<40, func(key []byte, kg int, ts int64) error {
		timers = append(timers, fmt.Sprintf("p:%s@%d", key, ts))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	slices.Sort(timers)
	return keys, timers
}

// expectState is the independent computation of stateOf after
// populateFull(n) of the key groups in written, restricted to r.
func expectState(n int, r, written stream.KeyGroupRange) (keys, timers []string) {
	for i := range n {
		k, kg := testKey(i)
		if r.Contains(kg) {
			keys = append(keys, string(k))
			timers = append(timers, fmt.Sprintf("%s@%d", k, 1000+i))
			if i%2 == 0 && written.Contains(kg) {
				timers = append(timers, fmt.Sprintf("p:%s@%d", k, 2000+i))
			}
		}
	}
	slices.Sort(keys)
	slices.Sort(timers)
	return keys, timers
}

// checkState checks b's state against expectState: populateFull(n), with
// processing-time timers in the key groups of ptimers only.
func checkState(t *testing.T, what string, b statebackend.Backend, n int, r, ptimers stream.KeyGroupRange) {
	t.Helper()
	gotK, gotT := stateOf(t, b)
	wantK, wantT := expectState(n, r, ptimers)
	if !slices.Equal(gotK, wantK) {
		t.Errorf("%s: %d keys, want %d (first got %q)", what, len(gotK), len(wantK), gotK[:min(3, len(gotK))])
	}
	if !slices.Equal(gotT, wantT) {
		t.Errorf("%s: %d timers, want %d", what, len(gotT), len(wantT))
	}
}

func open(t *testing.T, dir string, kg stream.KeyGroupRange, from string) *pebblestate.Backend {
	t.Helper()
	opts := pebblestate.Options{Dir: dir, CacheBytes: 1 << 20, DeleteOnClose: true}
	var b *pebblestate.Backend
	var err error
	if from == "" {
		b, err = pebblestate.New(opts, kg)
	} else {
		b, err = pebblestate.OpenFromCheckpoint(opts, from, kg)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func checkpoint(t *testing.T, b *pebblestate.Backend, dir string) []pebblestate.SSTFile {
	t.Helper()
	files, err := b.Checkpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := pebblestate.VerifyCheckpoint(dir, files); err != nil {
		t.Fatal(err)
	}
	return files
}

// TestOpenFromCheckpointKeepsOwnedKeyGroups checkpoints a backend of all key
// groups, opens the checkpoint for a smaller range, checks it holds exactly
// that range, and proves the rest is gone by checkpointing the trimmed
// backend and opening that for the full range.
func TestOpenFromCheckpointKeepsOwnedKeyGroups(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	const n = 3000
	src := open(t, filepath.Join(root, "src"), full, "")
	populateFull(t, src, n)
	chk1 := filepath.Join(root, "chk1")
	checkpoint(t, src, chk1)
	srcSize := src.SizeBytes()

	part := stream.KeyGroupRange{Start: 32, End: 63}
	b := open(t, filepath.Join(root, "work1"), part, chk1)
	if got := b.SizeBytes(); got <= 0 || got >= srcSize/2 {
		t.Errorf("SizeBytes of a quarter of the key groups = %d, of all %d", got, srcSize)
	}
	chk2 := filepath.Join(root, "chk2")
	checkpoint(t, b, chk2) // before stateOf fires the timers
	checkState(t, "opened for "+part.String(), b, n, part, full)

	// The source checkpoint directory is untouched and opens again.
	again := open(t, filepath.Join(root, "work2"), full, chk1)
	checkState(t, "source checkpoint reopened", again, n, full, full)

	wide := open(t, filepath.Join(root, "work3"), full, chk2)
	checkState(t, "trimmed checkpoint opened for all key groups", wide, n, part, full)
}

// TestMergeInto scales in: two checkpoints of disjoint ranges (with table
// ids assigned in different orders) combine into one backend. Only the
// right one holds processing-time timers, so that merging moves them into
// a database that had none, and a checkpoint of it must open with them.
func TestMergeInto(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	const n = 2000
	left := stream.KeyGroupRange{Start: 0, End: 63}
	right := stream.KeyGroupRange{Start: 64, End: 127}
	a := open(t, filepath.Join(root, "a"), left, "")
	b := open(t, filepath.Join(root, "b"), right, "")
	// b registers an extra table first, so its ids differ from a's.
	if _, err := statebackend.GetListState(b, "extra", statebackend.StringCodec); err != nil {
		t.Fatal(err)
	}
	for _, be := range []*pebblestate.Backend{a, b} {
		v, _ := statebackend.GetValueState(be, "v", statebackend.Int64Codec)
		m, _ := statebackend.GetMapState(be, "m", statebackend.StringCodec, statebackend.Int64Codec)
		for i := range n {
			k, kg := testKey(i)
			if be.KeyGroups().Contains(kg) {
				be.SetCurrentKey(k, kg)
				v.Update(int64(i))
				m.Put(fmt.Sprint("u", i%3), int64(-i))
				be.Timers().RegisterEventTimeTimer(int64(1000 + i))
				if be == b && i%2 == 0 {
					be.Timers().RegisterProcessingTimeTimer(int64(2000 + i))
				}
			}
		}
	}
	checkpoint(t, a, filepath.Join(root, "chk-a"))
	checkpoint(t, b, filepath.Join(root, "chk-b"))

	dst := open(t, filepath.Join(root, "dst"), full, filepath.Join(root, "chk-a"))
	if err := pebblestate.MergeInto(dst, []string{filepath.Join(root, "chk-b")}); err != nil {
		t.Fatal(err)
	}
	checkpoint(t, dst, filepath.Join(root, "chk-dst")) // before checkState fires the timers
	checkState(t, "merged", dst, n, full, right)
	reopened := open(t, filepath.Join(root, "reopened"), full, filepath.Join(root, "chk-dst"))
	checkState(t, "checkpoint of the merged backend", reopened, n, full, right)
	// Scale in to a range that cuts both: only its key groups arrive.
	mid := stream.KeyGroupRange{Start: 40, End: 90}
	dst2 := open(t, filepath.Join(root, "dst2"), mid, filepath.Join(root, "chk-b"))
	if err := pebblestate.MergeInto(dst2, []string{filepath.Join(root, "chk-a")}); err != nil {
		t.Fatal(err)
	}
	checkState(t, "merged into "+mid.String(), dst2, n, mid, right)
}

func TestVerifyCheckpointDetectsDamage(t *testing.T) {
	root := t.TempDir()
	b := open(t, filepath.Join(root, "db"), full, "")
	populateFull(t, b, 500)
	dir := filepath.Join(root, "chk")
	files := checkpoint(t, b, dir)
	var sst string
	for _, f := range files {
		if f.Shared {
			sst = f.Name
		}
	}
	if sst == "" {
		t.Fatalf("checkpoint has no shared files: %+v", files)
	}
	// Damage a copy, not the hard link the live database shares.
	p := filepath.Join(dir, sst)
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 1
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	err = pebblestate.VerifyCheckpoint(dir, files)
	if err == nil || !strings.Contains(err.Error(), sst) {
		t.Fatalf("VerifyCheckpoint of a damaged file: %v", err)
	}
	if err := pebblestate.VerifyCheckpoint(dir, files[1:]); err == nil {
		t.Fatal("VerifyCheckpoint accepted an unlisted file")
	}
}

// TestBiggerThanMemory writes 16 MiB of incompressible values through a
// 1 MiB block cache and 1 MiB memtables and reads every value back.
func TestBiggerThanMemory(t *testing.T) {
	t.Parallel()
	const (
		n       = 4 << 10
		valSize = 4 << 10
	)
	b, err := pebblestate.New(pebblestate.NoSync(pebblestate.Options{
		Dir: filepath.Join(t.TempDir(), "db"), CacheBytes: 1 << 20, MemTableBytes: 1 << 20, DeleteOnClose: true,
	}), full)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	s, err := statebackend.GetValueState(b, "blob", statebackend.BytesCodec)
	if err != nil {
		t.Fatal(err)
	}
	value := func(i int) []byte {
		r := rand.New(rand.NewPCG(uint64(i), 7))
		v := make([]byte, valSize)
		for j := 0; j < valSize; j += 8 {
			binary.LittleEndian.PutUint64(v[j:], r.Uint64())
		}
		return v
	}
	for i := range n {
		k, kg := testKey(i)
		b.SetCurrentKey(k, kg)
		s.Update(value(i))
	}
	if got := b.SizeBytes(); got < n*valSize {
		t.Errorf("SizeBytes = %d, want ≥ %d", got, n*valSize)
	}
	// The data is on disk: the checkpoint's sstables hold it all.
	files := checkpoint(t, b, filepath.Join(t.TempDir(), "chk"))
	var onDisk int64
	for _, f := range files {
		if f.Shared {
			onDisk += f.Size
		}
	}
	if onDisk < n*valSize {
		t.Errorf("sstables hold %d bytes, want ≥ %d", onDisk, n*valSize)
	}
	// Read back in another order than written.
	for j := range n {
		i := (j * 7919) % n
		k, kg := testKey(i)
		b.SetCurrentKey(k, kg)
		got, ok := s.Value()
		if !ok || string(got) != string(value(i)) {
			t.Fatalf("key %d: value wrong (ok=%v, %d bytes)", i, ok, len(got))
		}
	}
	count := 0
	for kg := full.Start; kg <= full.End; kg++ {
		b.Keys("blob", kg, func([]byte) bool { count++; return true })
	}
	if count != n {
		t.Errorf("Keys found %d keys, want %d", count, n)
	}
}
