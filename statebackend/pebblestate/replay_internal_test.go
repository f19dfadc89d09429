package pebblestate

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
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
		data, err := readSegment(s, nil)
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
	segs, err := readChain(dir)
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
		data, err := readSegment(s, nil)
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
		for _, mem := range []int64{0, chainBytes, 300} {
			t.Run(fmt.Sprintf("%s/memory=%d", tc.name, mem), func(t *testing.T) {
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

				b, err := OpenFromCheckpoint(Options{Dir: filepath.Join(root, fmt.Sprint("new-", n)), ReplayMemoryBytes: mem, DeleteOnClose: true}, dir, tc.kg)
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
