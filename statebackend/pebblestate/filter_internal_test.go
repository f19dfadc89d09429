package pebblestate

import (
	"encoding/binary"
	"fmt"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/statebackend/heap"
	"github.com/weirstream/weir/statebackend/statebackendtest"
	"github.com/weirstream/weir/stream"
)

// Tests of Descriptor.SnapshotFilter with TTL state: random writes of value,
// list and map state at random times under a manual clock, against a model
// that records when every value, element and entry was written.

const filterTTL = 100 // ms

var filterRange = stream.KeyGroupRange{Start: 0, End: 15}

type stamp struct {
	v  string
	at int64
}

// ttlFixture is TTL state of three kinds plus plain value state on one
// backend, and the model of what was written.
type ttlFixture struct {
	b   statebackend.Backend
	clk *statebackendtest.ManualClock
	v   statebackend.ValueState[string]
	l   statebackend.ListState[string]
	m   statebackend.MapState[string, string]
	p   statebackend.ValueState[string] // no TTL

	val  map[string]stamp
	list map[string][]stamp
	mp   map[string]map[string]stamp
	pl   map[string]string
}

func openTTLFixture(t *testing.T, b statebackend.Backend, clk *statebackendtest.ManualClock) *ttlFixture {
	t.Helper()
	// No incremental cleanup on access: only the filter removes state.
	ttl := statebackend.WithTTL(statebackend.TTLConfig{TTL: filterTTL * time.Millisecond, Clock: clk.Now})
	f := &ttlFixture{b: b, clk: clk, val: map[string]stamp{}, list: map[string][]stamp{}, mp: map[string]map[string]stamp{}, pl: map[string]string{}}
	var errs [4]error
	f.v, errs[0] = statebackend.GetValueState(b, "v", statebackend.StringCodec, ttl)
	f.l, errs[1] = statebackend.GetListState(b, "l", statebackend.StringCodec, ttl)
	f.m, errs[2] = statebackend.GetMapState(b, "m", statebackend.StringCodec, statebackend.StringCodec, ttl)
	f.p, errs[3] = statebackend.GetValueState(b, "p", statebackend.StringCodec)
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func filterKG(key string) int { return int(key[len(key)-1]) % filterRange.Len() }

// populate writes at random with the clock moving 0-2 ms per write. None
// of the writes reads state, so nothing expired is removed on the way.
func (f *ttlFixture) populate(rng *rand.Rand, keys, writes int) {
	for i := range writes {
		k := fmt.Sprint("key-", rng.IntN(keys))
		f.b.SetCurrentKey([]byte(k), filterKG(k))
		v, now := fmt.Sprint("w", i), f.clk.Now()
		switch rng.IntN(4) {
		case 0:
			f.v.Update(v)
			f.val[k] = stamp{v, now}
		case 1:
			f.l.Add(v)
			f.list[k] = append(f.list[k], stamp{v, now})
		case 2:
			uk := fmt.Sprint("u", rng.IntN(4))
			f.m.Put(uk, v)
			if f.mp[k] == nil {
				f.mp[k] = map[string]stamp{}
			}
			f.mp[k][uk] = stamp{v, now}
		case 3:
			f.p.Update(v)
			f.pl[k] = v
		}
		f.clk.Advance(rng.Int64N(3))
	}
}

func (f *ttlFixture) live(s stamp) bool { return s.at+filterTTL > f.clk.Now() }

func (s stamp) String() string { return fmt.Sprintf("%s@%d", s.v, s.at) }

// want renders the model's state, table → key → state, with only the live
// values, elements and entries if liveOnly.
func (f *ttlFixture) want(liveOnly bool) map[string]map[string]string {
	keep := func(s stamp) bool { return !liveOnly || f.live(s) }
	out := map[string]map[string]string{"v": {}, "l": {}, "m": {}, "p": {}}
	for k, s := range f.val {
		if keep(s) {
			out["v"][k] = s.String()
		}
	}
	for k, l := range f.list {
		var els []string
		for _, s := range l {
			if keep(s) {
				els = append(els, s.String())
			}
		}
		if len(els) > 0 {
			out["l"][k] = strings.Join(els, ",")
		}
	}
	for k, m := range f.mp {
		var es []string
		for uk, s := range m {
			if keep(s) {
				es = append(es, uk+"="+s.String())
			}
		}
		if len(es) > 0 {
			slices.Sort(es)
			out["m"][k] = strings.Join(es, ",")
		}
	}
	maps.Copy(out["p"], f.pl)
	return out
}

// rawState reads the fixture's tables of b (a backend that has not asked
// for them yet) with codecs that return the TTL encoding (0xf7, the time
// as 8 bytes big endian, the value) and renders it as want does.
func rawState(t *testing.T, b statebackend.Backend) map[string]map[string]string {
	t.Helper()
	v, err1 := statebackend.GetValueState(b, "v", statebackend.BytesCodec)
	l, err2 := statebackend.GetListState(b, "l", statebackend.BytesCodec)
	m, err3 := statebackend.GetMapState(b, "m", statebackend.StringCodec, statebackend.BytesCodec)
	p, err4 := statebackend.GetValueState(b, "p", statebackend.StringCodec)
	for _, err := range []error{err1, err2, err3, err4} {
		if err != nil {
			t.Fatal(err)
		}
	}
	decode := func(raw []byte) string {
		if len(raw) < 9 || raw[0] != 0xf7 {
			t.Fatalf("stored value %x is not in the TTL encoding", raw)
		}
		return stamp{string(raw[9:]), int64(binary.BigEndian.Uint64(raw[1:9]))}.String()
	}
	out := map[string]map[string]string{"v": {}, "l": {}, "m": {}, "p": {}}
	for kg := filterRange.Start; kg <= filterRange.End; kg++ {
		for _, table := range []string{"v", "l", "m", "p"} {
			b.Keys(table, kg, func(key []byte) bool {
				k := string(key)
				b.SetCurrentKey(key, kg)
				switch table {
				case "v":
					if x, ok := v.Value(); ok {
						out[table][k] = decode(x)
					}
				case "l":
					var els []string
					for _, x := range l.Get() {
						els = append(els, decode(x))
					}
					out[table][k] = strings.Join(els, ",")
				case "m":
					var es []string
					m.Range(func(uk string, x []byte) bool { es = append(es, uk+"="+decode(x)); return true })
					slices.Sort(es)
					out[table][k] = strings.Join(es, ",")
				case "p":
					out[table][k], _ = p.Value()
				}
				return true
			})
		}
	}
	return out
}

// diffStates describes how got differs from want.
func diffStates(got, want map[string]map[string]string) string {
	var sb strings.Builder
	for _, table := range slices.Sorted(maps.Keys(want)) {
		for _, k := range slices.Sorted(maps.Keys(want[table])) {
			if g, ok := got[table][k]; !ok || g != want[table][k] {
				fmt.Fprintf(&sb, "table %s, key %s: got %q (present %v), want %q\n", table, k, g, ok, want[table][k])
			}
		}
		for _, k := range slices.Sorted(maps.Keys(got[table])) {
			if _, ok := want[table][k]; !ok {
				fmt.Fprintf(&sb, "table %s, key %s: got %q, want none\n", table, k, got[table][k])
			}
		}
	}
	return sb.String()
}

// liveKeys returns the keys Backend.Keys gives per table.
func liveKeys(b statebackend.Backend) map[string]int {
	out := map[string]int{}
	for _, table := range []string{"v", "l", "m", "p"} {
		for kg := filterRange.Start; kg <= filterRange.End; kg++ {
			b.Keys(table, kg, func([]byte) bool { out[table]++; return true })
		}
	}
	return out
}

// TestSnapshotFilter checks that Snapshot leaves out what the tables'
// SnapshotFilter drops (expired values, list elements and map entries of
// TTL state), by restoring the snapshot into a Pebble and a heap backend
// and reading the stored values with raw codecs, and that it leaves the
// live state alone.
func TestSnapshotFilter(t *testing.T) {
	for _, cache := range []int64{0, 1, 4 << 10} {
		t.Run(fmt.Sprint("valuecache=", cache), func(t *testing.T) {
			clk := statebackendtest.NewManualClock(1_000_000)
			b, err := New(Options{Dir: filepath.Join(t.TempDir(), "db"), ValueCacheBytes: cache, DeleteOnClose: true}, filterRange)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			f := openTTLFixture(t, b, clk)
			f.populate(rand.New(rand.NewPCG(uint64(cache), 7)), 150, 1500)
			before := liveKeys(b)
			c := &stream.SnapshotContext{CheckpointID: 1, KeyGroups: filterRange}
			if err := b.Snapshot(c); err != nil {
				t.Fatal(err)
			}
			want := f.want(true)
			all := f.want(false)
			for table, keys := range want {
				if len(keys) == 0 || len(keys) == len(all[table]) && table != "p" {
					t.Fatalf("table %s: %d of %d keys live; the test wants some of each", table, len(keys), len(all[table]))
				}
			}
			for name, nb := range map[string]func() statebackend.Backend{
				"pebble": func() statebackend.Backend {
					r, err := New(Options{Dir: filepath.Join(t.TempDir(), "restored"), ValueCacheBytes: cache, DeleteOnClose: true}, filterRange)
					if err != nil {
						t.Fatal(err)
					}
					return r
				},
				"heap": func() statebackend.Backend { return heap.New(filterRange) },
			} {
				r := nb()
				if err := r.Restore(&stream.RestoreContext{CheckpointID: 1, KeyGroups: filterRange, State: &c.State}); err != nil {
					t.Fatal(err)
				}
				if d := diffStates(rawState(t, r), want); d != "" {
					t.Errorf("snapshot restored into %s differs from the model's live state:\n%s", name, d)
				}
				r.Close()
			}
			if got := liveKeys(b); !maps.Equal(got, before) {
				t.Errorf("keys per table after the snapshot: %v, before: %v; Snapshot changed the live state", got, before)
			}
		})
	}
}

// rawEntries returns b's stored entries of the named table (state key →
// value), read from Pebble.
func rawEntries(t *testing.T, b *Backend, name string) map[string]string {
	t.Helper()
	b.flush()
	tb := b.tables[name]
	out := map[string]string{}
	for kg := b.kg.Start; kg <= b.kg.End; kg++ {
		prefix := appendTablePrefix(nil, kg, tb.id)
		it, err := b.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
		if err != nil {
			t.Fatal(err)
		}
		for ok := it.First(); ok; ok = it.Next() {
			out[string(it.Key())] = string(it.Value())
		}
		if err := it.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestSnapshotFilesCleanup checks the clean-up before SnapshotFiles and
// Checkpoint: each changes at most Options.SnapshotCleanupEntries entries
// of a TTL table; after enough of them, the database holds exactly the
// model's live state (the entries of expired values and map entries are
// gone, lists hold their live elements), entries with nothing expired are
// byte for byte as before, state without TTL is untouched, and a backend
// opened from the last snapshot holds the same.
func TestSnapshotFilesCleanup(t *testing.T) {
	t.Parallel()
	const per = 16
	for _, cache := range []int64{0, 1} {
		t.Run(fmt.Sprint("valuecache=", cache), func(t *testing.T) {
			clk := statebackendtest.NewManualClock(1_000_000)
			root := t.TempDir()
			b, err := New(Options{Dir: filepath.Join(root, "db"), ValueCacheBytes: cache, SnapshotCleanupEntries: per, DeleteOnClose: true}, filterRange)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			f := openTTLFixture(t, b, clk)
			f.populate(rand.New(rand.NewPCG(uint64(cache), 11)), 120, 1500)
			want := f.want(true)
			tables := []string{"v", "l", "m"}
			before := map[string]map[string]string{}
			for _, name := range append(tables, "p") {
				before[name] = rawEntries(t, b, name)
			}
			wantCount := map[string]int{"v": len(want["v"]), "l": len(want["l"]), "p": len(want["p"])}
			for _, es := range want["m"] {
				wantCount["m"] += strings.Count(es, ",") + 1
			}
			most := 0
			for _, name := range tables {
				most = max(most, len(before[name]))
				if len(before[name]) <= per || len(before[name]) == wantCount[name] {
					t.Fatalf("table %s: %d entries, %d live; the test wants more than %d and some expired", name, len(before[name]), wantCount[name], per)
				}
			}

			prev := before
			var last string
			for i := range most/per + 2 {
				last = filepath.Join(root, fmt.Sprint("snap-", i))
				if i%3 == 2 {
					_, err = b.Checkpoint(last)
				} else {
					_, err = b.SnapshotFiles(last)
				}
				if err != nil {
					t.Fatal(err)
				}
				cur := map[string]map[string]string{}
				for _, name := range tables {
					cur[name] = rawEntries(t, b, name)
					changed := 0
					for k, v := range prev[name] {
						if w, ok := cur[name][k]; !ok || w != v {
							changed++
						}
					}
					if len(cur[name]) > len(prev[name]) || changed > per {
						t.Fatalf("snapshot %d: table %s: %d entries changed, %d → %d entries; want at most %d changed and none added",
							i, name, changed, len(prev[name]), len(cur[name]), per)
					}
				}
				if i == 0 && maps.EqualFunc(cur, prev, maps.Equal) {
					t.Fatal("the first snapshot cleaned up nothing")
				}
				prev = cur
			}
			for _, name := range append(tables, "p") {
				after := rawEntries(t, b, name)
				if len(after) != wantCount[name] {
					t.Errorf("table %s after the clean-up: %d entries, want %d", name, len(after), wantCount[name])
				}
				if name == "l" {
					continue // lists with expired elements are rewritten
				}
				for k, v := range after {
					if before[name][k] != v {
						t.Errorf("table %s, state key %x: value changed by the clean-up", name, k)
					}
				}
			}
			r, err := OpenFromCheckpoint(Options{Dir: filepath.Join(root, "restored"), DeleteOnClose: true}, last, filterRange)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			if d := diffStates(rawState(t, r), want); d != "" {
				t.Errorf("backend opened from the last snapshot differs from the model's live state:\n%s", d)
			}
			// The cursor starts over: a later expiry is cleaned up too.
			clk.Advance(10 * filterTTL)
			for i := range most/per + 2 {
				if _, err := b.SnapshotFiles(filepath.Join(root, fmt.Sprint("later-", i))); err != nil {
					t.Fatal(err)
				}
			}
			for _, name := range tables {
				if n := len(rawEntries(t, b, name)); n != 0 {
					t.Errorf("table %s: %d entries left after everything expired", name, n)
				}
			}
			if n := len(rawEntries(t, b, "p")); n != len(want["p"]) {
				t.Errorf("table p (no TTL): %d entries, want %d", n, len(want["p"]))
			}
		})
	}
}
