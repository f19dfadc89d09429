package pebblestate

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/stream"
)

// replayBatches is the reference replay of a changelog chain: every owned
// record written to db through batches, one after the other, in chain
// order, as the backend once wrote them; the metadata is kept whole (trim
// removes the sizes of key groups not owned).
func replayBatches(t *testing.T, db *pebble.DB, segs []segment, kg stream.KeyGroupRange) {
	t.Helper()
	for _, s := range segs {
		data, err := readSegment(s, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		recs, err := segmentRecords(s.path, data)
		if err != nil {
			t.Fatal(err)
		}
		batch := db.NewBatch()
		for off := 0; off < len(recs); {
			kind, k, v, next, bad := parseRecord(recs, off)
			if bad != "" {
				t.Fatalf("%s: offset %d: %s", s.path, off, bad)
			}
			off = next
			if !bytes.HasPrefix(k, metaPrefix) && !kg.Contains(int(k[0])<<8|int(k[1])) {
				continue
			}
			if kind == clSet {
				err = batch.Set(k, v, nil)
			} else {
				err = batch.Delete(k, nil)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		if err := batch.Commit(pebble.NoSync); err != nil {
			t.Fatal(err)
		}
		batch.Close()
	}
}

// dumpDB renders every key and value of db, metadata included.
func dumpDB(t *testing.T, db *pebble.DB) (string, int) {
	t.Helper()
	it, err := db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	var sb strings.Builder
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		fmt.Fprintf(&sb, "%x=%x\n", it.Key(), it.Value())
		n++
	}
	if err := it.Error(); err != nil {
		t.Fatal(err)
	}
	return sb.String(), n
}

// TestReplayMatchesBatchReplay restores a changelog chain whose segments
// overwrite and delete the same keys again and again (values, map entries,
// whole maps, timers) through OpenFromCheckpoint — sorted, deduplicated and
// ingested — and through the reference replay (replayBatches, then trim),
// and requires both databases to hold exactly the same keys and values:
// for every key-group range (all, a middle range, one key group, none of
// the chain's state) and for replay memories that keep the chain in one
// partition or a few in memory, or spill it in partitions of a few records.
func TestReplayMatchesBatchReplay(t *testing.T) {
	t.Parallel()
	const (
		maxPar   = 32
		keys     = 60 // few keys, so that segments overwrite each other's
		segments = 6
	)
	root := t.TempDir()
	src, err := New(Options{Dir: filepath.Join(root, "src"), ValueCacheBytes: 2 << 10, MaterializeFactor: 1000}, stream.KeyGroupRange{Start: 0, End: maxPar - 1})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	v, err := statebackend.GetValueState(src, "v", statebackend.Int64Codec)
	if err != nil {
		t.Fatal(err)
	}
	m, err := statebackend.GetMapState(src, "m", statebackend.StringCodec, statebackend.Int64Codec)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(11, 12))
	// Short keys, whose sort keys fit in the 16 bytes sorting compares
	// first, and long keys sharing more than those.
	key := func(i int) ([]byte, int) {
		if i%2 == 0 {
			return []byte(fmt.Sprintf("k%03d", i)), i * 5 % maxPar
		}
		return []byte(fmt.Sprintf("a-key-with-a-long-common-prefix-%03d", i)), i * 5 % maxPar
	}
	var dir string
	for r := range segments + 1 {
		if r == 3 {
			// A table first registered in the middle of the chain.
			if _, err := statebackend.GetValueState(src, "late", statebackend.StringCodec); err != nil {
				t.Fatal(err)
			}
		}
		for range 400 {
			k, kg := key(rng.IntN(keys))
			src.SetCurrentKey(k, kg)
			x := rng.Int64N(1000)
			switch op := rng.IntN(12); {
			case op < 4:
				v.Update(x)
			case op < 6:
				v.Clear()
			case op < 8:
				m.Put(fmt.Sprint("u", x%5), x)
			case op < 9:
				m.Remove(fmt.Sprint("u", x%5))
			case op < 10:
				m.Clear()
			case op < 11:
				src.Timers().RegisterEventTimeTimer(x % 7)
			default:
				src.Timers().DeleteEventTimeTimer(x % 7)
			}
		}
		dir = filepath.Join(root, fmt.Sprint("chk-", r))
		if _, err := src.SnapshotFiles(dir); err != nil {
			t.Fatal(err)
		}
	}
	segs, err := readChain(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(segs) != segments {
		t.Fatalf("the chain has %d segments, want %d", len(segs), segments)
	}
	// The chain must write most keys more than once, and delete some it
	// set before.
	var chainBytes int64
	for _, s := range segs {
		chainBytes += s.size
	}
	records, kinds := 0, map[string]byte{}
	overwritten, deletedAfterSet := 0, 0
	for _, s := range segs {
		data, err := readSegment(s, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		recs, _ := segmentRecords(s.path, data)
		for off := 0; off < len(recs); records++ {
			kind, k, _, next, _ := parseRecord(recs, off)
			off = next
			if prev, ok := kinds[string(k)]; ok {
				overwritten++
				if prev == clSet && kind == clDelete {
					deletedAfterSet++
				}
			}
			kinds[string(k)] = kind
		}
	}
	if overwritten < records/2 || deletedAfterSet < 10 {
		t.Fatalf("chain of %d records: %d rewrite a key written before, %d delete a key set before; want more", records, overwritten, deletedAfterSet)
	}
	n := 0
	for _, tc := range []struct {
		name string
		kg   stream.KeyGroupRange
	}{
		{"all", stream.KeyGroupRange{Start: 0, End: maxPar - 1}},
		{"middle", stream.KeyGroupRange{Start: 9, End: 20}},
		{"one", stream.KeyGroupRange{Start: 5, End: 5}},
		{"none of the chain's", stream.KeyGroupRange{Start: 100, End: 120}},
	} {
		// The default memory: one partition in memory; the chain's size:
		// a few partitions in memory; 300 bytes: spilled partitions of a
		// few records each.
		// Streamed: the segments are not in the snapshot directory but
		// fetched (Options.FetchSegment).
		for _, c := range []struct {
			mem    int64
			stream bool
		}{{0, false}, {chainBytes, false}, {300, false}, {0, true}, {300, true}} {
			mem := c.mem
			t.Run(fmt.Sprintf("%s/memory=%d/streamed=%v", tc.name, mem, c.stream), func(t *testing.T) {
				n++
				refDir := filepath.Join(root, fmt.Sprint("ref-", n))
				if err := cloneDir(dir, refDir); err != nil {
					t.Fatal(err)
				}
				ref, err := openDB(Options{Dir: refDir}.withDefaults(), false)
				if err != nil {
					t.Fatal(err)
				}
				defer ref.Close()
				replayBatches(t, ref, segs, tc.kg)
				if err := trim(ref, tc.kg); err != nil {
					t.Fatal(err)
				}
				want, wantN := dumpDB(t, ref)

				opts, from := Options{Dir: filepath.Join(root, fmt.Sprint("new-", n)), ReplayMemoryBytes: mem, DeleteOnClose: true}, dir
				var fetched atomic.Int64
				if c.stream {
					from = withoutSegments(t, dir, filepath.Join(root, fmt.Sprint("streamed-", n)))
					opts.FetchSegment = func(path string, w io.Writer) (int64, error) {
						fetched.Add(1)
						return fetchFile(filepath.Join(dir, filepath.Base(path)), w)
					}
				}
				b, err := OpenFromCheckpoint(opts, from, tc.kg)
				if c.stream && fetched.Load() != int64(len(segs)) {
					t.Fatalf("%d segments fetched, want %d", fetched.Load(), len(segs))
				}
				if err != nil {
					t.Fatal(err)
				}
				defer b.Close()
				got, gotN := dumpDB(t, b.db)
				if got != want {
					t.Fatalf("restored database differs from the batch replay\nwant (%d keys):\n%s\ngot (%d keys):\n%s", wantN, want, gotN, got)
				}
				if _, err := os.Stat(filepath.Join(b.opts.Dir, replayDirName)); !os.IsNotExist(err) {
					t.Errorf("replay directory left behind: %v", err)
				}
				state := wantN - strings.Count(want, "ffff")
				if tc.kg.End < maxPar && state == 0 {
					t.Fatalf("no state in %v; the test compares only metadata", tc.kg)
				}
				t.Logf("%d keys, %d of them state", wantN, state)
			})
		}
	}
}

// withoutSegments copies the snapshot directory dir to the new directory
// to, leaving out its changelog segments, and returns to.
func withoutSegments(t *testing.T, dir, to string) string {
	t.Helper()
	if err := os.MkdirAll(to, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Type().IsRegular() && !IsChangelogSegment(e.Name()) {
			if err := copyFile(filepath.Join(dir, e.Name()), filepath.Join(to, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}
	return to
}

// fetchFile is a FetchSegment reading the file path, in writes of at most
// 1000 bytes (as a download arrives).
func fetchFile(path string, w io.Writer) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return io.CopyBuffer(w, struct{ io.Reader }{f}, make([]byte, 1000))
}

// TestReplaySortOrder checks the replay's sort against a plain stable sort
// by key, on keys made to tie in the prefix it compares first: keys that
// are prefixes of others, zero bytes where the prefix pads, keys longer
// and shorter than the 16 bytes of prefix, and repeats (chain order must
// be kept among the records of one key).
func TestReplaySortOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	alphabet := []byte{0, 1, 0xff}
	var data []byte
	var keys [][]byte
	for range 5000 {
		k := make([]byte, 2+rng.IntN(24))
		for i := range k {
			k[i] = alphabet[rng.IntN(len(alphabet))]
		}
		if rng.IntN(4) == 0 && len(keys) > 0 {
			k = bytes.Clone(keys[rng.IntN(len(keys))]) // a repeat
		}
		keys = append(keys, k)
		data = append(data, clSet)
		data = binary.AppendUvarint(data, uint64(len(k)))
		data = append(data, k...)
		data = binary.AppendUvarint(data, 0)
	}
	type rec struct {
		k   []byte
		off int
	}
	var want []rec
	var entries []sortEntry
	for off := 0; off < len(data); {
		_, k, _, next, bad := parseRecord(data, off)
		if bad != "" {
			t.Fatal(bad)
		}
		want = append(want, rec{k, off})
		entries = append(entries, newSortEntry(k, off))
		off = next
	}
	slices.SortStableFunc(want, func(a, b rec) int { return bytes.Compare(a.k, b.k) })
	got, _ := radixSort(entries, nil, sortKeys(data))
	for i, e := range got {
		if e.off != want[i].off {
			t.Fatalf("position %d: record at offset %d (key %x), want offset %d (key %x)", i, e.off, sortKeys(data).key(e), want[i].off, want[i].k)
		}
	}
}

// TestReplayStreamedSegmentFailures restores a snapshot whose changelog
// segments are fetched (Options.FetchSegment) by fetches that fail, or
// deliver more or fewer bytes than the chain lists: each restore fails
// with an error naming the segment (ErrCorrupt for a wrong size, the
// fetch's own error otherwise), and stops the other fetches.
func TestReplayStreamedSegmentFailures(t *testing.T) {
	root := t.TempDir()
	src, err := New(Options{Dir: filepath.Join(root, "src"), MaterializeFactor: 1000}, stream.KeyGroupRange{Start: 0, End: stream.DefaultMaxParallelism - 1})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	v, err := statebackend.GetValueState(src, "v", statebackend.Int64Codec)
	if err != nil {
		t.Fatal(err)
	}
	var dir string
	for r := range 6 {
		for i := range 50 {
			src.SetCurrentKey([]byte(fmt.Sprint("k", i)), i%stream.DefaultMaxParallelism)
			v.Update(int64(r*100 + i))
		}
		dir = filepath.Join(root, fmt.Sprint("chk-", r))
		if _, err := src.SnapshotFiles(dir); err != nil {
			t.Fatal(err)
		}
	}
	segs, err := readChain(dir, nil)
	if err != nil || len(segs) < 4 {
		t.Fatalf("chain of %d segments (%v), want at least 4", len(segs), err)
	}
	bad := segs[2].name
	errFetch := errors.New("storage unreachable")
	for i, tc := range []struct {
		name    string
		fetch   func(data []byte, w io.Writer) (int64, error)
		corrupt bool
	}{
		{"fetch fails", func([]byte, io.Writer) (int64, error) { return 0, errFetch }, false},
		{"one byte more", func(data []byte, w io.Writer) (int64, error) {
			n, err := w.Write(append(slices.Clone(data), 0))
			return int64(n), err
		}, true},
		{"one byte less", func(data []byte, w io.Writer) (int64, error) {
			n, err := w.Write(data[:len(data)-1])
			return int64(n), err
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			from := withoutSegments(t, dir, filepath.Join(root, fmt.Sprint("streamed-", i)))
			var stopped atomic.Int64
			fetch := func(path string, w io.Writer) (int64, error) {
				data, err := os.ReadFile(filepath.Join(dir, filepath.Base(path)))
				if err != nil {
					return 0, err
				}
				if filepath.Base(path) == bad {
					return tc.fetch(data, w)
				}
				// The others arrive a record's worth at a time, until the
				// replay stops them.
				var n int64
				for len(data) > 0 {
					m, err := w.Write(data[:min(len(data), 16)])
					n += int64(m)
					if err != nil {
						if errors.Is(err, errReplayStopped) {
							stopped.Add(1)
						}
						return n, err
					}
					data = data[m:]
				}
				return n, nil
			}
			_, err := OpenFromCheckpoint(Options{Dir: filepath.Join(root, fmt.Sprint("new-", i)), DeleteOnClose: true, FetchSegment: fetch}, from, stream.KeyGroupRange{Start: 0, End: stream.DefaultMaxParallelism - 1})
			switch {
			case err == nil:
				t.Fatal("the restore succeeded")
			case !strings.Contains(err.Error(), bad):
				t.Fatalf("error %q does not name segment %s", err, bad)
			case tc.corrupt != errors.Is(err, statebackend.ErrCorrupt), !tc.corrupt && !errors.Is(err, errFetch):
				t.Fatalf("error %q: want corrupt=%v", err, tc.corrupt)
			}
			t.Logf("%v (%d other fetches stopped)", err, stopped.Load())
		})
	}
}
