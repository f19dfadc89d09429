package pebblestate_test

import (
	"fmt"
	"maps"
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

// clModel is the expected state, kept independently of any backend: per
// key index, a value, map entries and timers.
type clModel struct {
	vals   map[int]int64
	maps   map[int]map[string]int64
	timers map[int]map[int64]bool
}

func newCLModel() *clModel {
	return &clModel{vals: map[int]int64{}, maps: map[int]map[string]int64{}, timers: map[int]map[int64]bool{}}
}

const clKeys = 300

type clStates struct {
	v statebackend.ValueState[int64]
	m statebackend.MapState[string, int64]
}

func clBind(t *testing.T, b statebackend.Backend) clStates {
	t.Helper()
	v, err := statebackend.GetValueState(b, "v", statebackend.Int64Codec)
	if err != nil {
		t.Fatal(err)
	}
	m, err := statebackend.GetMapState(b, "m", statebackend.StringCodec, statebackend.Int64Codec)
	if err != nil {
		t.Fatal(err)
	}
	return clStates{v, m}
}

// mutate applies n random operations to b and to the model.
func (md *clModel) mutate(t *testing.T, rng *rand.Rand, b statebackend.Backend, s clStates, n int) {
	for range n {
		i := rng.IntN(clKeys)
		k, kg := testKey(i)
		b.SetCurrentKey(k, kg)
		x := rng.Int64N(1 << 40)
		uk := fmt.Sprint("u", rng.IntN(4))
		switch op := rng.IntN(10); {
		case op < 4:
			s.v.Update(x)
			md.vals[i] = x
		case op < 5:
			s.v.Clear()
			delete(md.vals, i)
		case op < 7:
			s.m.Put(uk, x)
			if md.maps[i] == nil {
				md.maps[i] = map[string]int64{}
			}
			md.maps[i][uk] = x
		case op < 8:
			s.m.Remove(uk)
			delete(md.maps[i], uk)
		case op < 9:
			ts := 1000 + rng.Int64N(20)
			b.Timers().RegisterEventTimeTimer(ts)
			if md.timers[i] == nil {
				md.timers[i] = map[int64]bool{}
			}
			md.timers[i][ts] = true
		default:
			ts := 1000 + rng.Int64N(20)
			b.Timers().DeleteEventTimeTimer(ts)
			delete(md.timers[i], ts)
		}
	}
	if err := b.(*pebblestate.Backend).Err(); err != nil {
		t.Fatal(err)
	}
}

// check compares b (owning kg) with the model's keys in kg, and fires all
// timers, so b should not be used afterwards.
func (md *clModel) check(t *testing.T, what string, b statebackend.Backend, kg stream.KeyGroupRange) {
	t.Helper()
	s := clBind(t, b)
	var want, got []string
	for i := range clKeys {
		k, g := testKey(i)
		if !kg.Contains(g) {
			continue
		}
		b.SetCurrentKey(k, g)
		if v, ok := md.vals[i]; ok {
			want = append(want, fmt.Sprintf("%d v=%d", i, v))
		}
		if v, ok := s.v.Value(); ok {
			got = append(got, fmt.Sprintf("%d v=%d", i, v))
		}
		for _, uk := range slices.Sorted(maps.Keys(md.maps[i])) {
			want = append(want, fmt.Sprintf("%d m[%s]=%d", i, uk, md.maps[i][uk]))
		}
		var entries []string
		s.m.Range(func(uk string, v int64) bool {
			entries = append(entries, fmt.Sprintf("%d m[%s]=%d", i, uk, v))
			return true
		})
		slices.Sort(entries)
		got = append(got, entries...)
		for ts := range md.timers[i] {
			want = append(want, fmt.Sprintf("%s timer %d", k, ts))
		}
	}
	err := b.Timers().AdvanceWatermark(1<<40, func(key []byte, _ int, ts int64) error {
		got = append(got, fmt.Sprintf("%s timer %d", key, ts))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(want)
	slices.Sort(got)
	if w, g := strings.Join(want, "\n"), strings.Join(got, "\n"); w != g {
		t.Fatalf("%s: restored state differs from the model\nwant (%d):\n%s\ngot (%d):\n%s", what, len(want), w, len(got), g)
	}
	if len(want) == 0 {
		t.Fatalf("%s: the model has no state in %v; the test checks nothing", what, kg)
	}
}

func restore(t *testing.T, dir string, kg stream.KeyGroupRange) *pebblestate.Backend {
	t.Helper()
	b, err := pebblestate.OpenFromCheckpoint(pebblestate.NoSync(pebblestate.Options{Dir: t.TempDir() + "/db", ValueCacheBytes: 1 << 10}), dir, kg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func TestChangelogChains(t *testing.T) {
	t.Parallel()
	const rounds = 8
	half := stream.KeyGroupRange{Start: 40, End: 90}
	for _, tc := range []struct {
		factor           float64
		minMat, maxMat   int
		lastChainSegment int // segments in the last snapshot; -1: don't check
	}{
		{factor: 100, minMat: 1, maxMat: 1, lastChainSegment: rounds - 1},
		{factor: 0.5, minMat: 2, maxMat: rounds - 1, lastChainSegment: -1},
		{factor: -1, minMat: rounds, maxMat: rounds, lastChainSegment: 0},
	} {
		t.Run(fmt.Sprint("factor=", tc.factor), func(t *testing.T) {
			t.Parallel() // every factor has its own backends and directories
			root := t.TempDir()
			rng := rand.New(rand.NewPCG(7, uint64(tc.factor*10)))
			b, err := pebblestate.New(pebblestate.NoSync(pebblestate.Options{Dir: filepath.Join(root, "db"), ValueCacheBytes: 4 << 10, MaterializeFactor: tc.factor}), full)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			s := clBind(t, b)
			md := newCLModel()
			var segs int
			for r := 1; r <= rounds; r++ {
				md.mutate(t, rng, b, s, 400)
				dir := filepath.Join(root, fmt.Sprint("chk-", r))
				files, err := b.SnapshotFiles(dir)
				if err != nil {
					t.Fatal(err)
				}
				segs = 0
				for _, f := range files {
					if pebblestate.IsChangelogSegment(f.Name) {
						segs++
					}
				}
				md.check(t, fmt.Sprintf("round %d, all key groups", r), restore(t, dir, full), full)
				md.check(t, fmt.Sprintf("round %d, key groups %v", r, half), restore(t, dir, half), half)
			}
			st := b.SnapshotStats()
			if st.Materializations < tc.minMat || st.Materializations > tc.maxMat {
				t.Errorf("%d materializations in %d snapshots, want %d..%d", st.Materializations, rounds, tc.minMat, tc.maxMat)
			}
			if tc.lastChainSegment >= 0 && segs != tc.lastChainSegment {
				t.Errorf("last snapshot has %d changelog segments, want %d", segs, tc.lastChainSegment)
			}
			// The backend keeps working after snapshots: a restored
			// backend snapshots again (materializing first) and extends
			// its own chain.
			r := restore(t, filepath.Join(root, fmt.Sprint("chk-", rounds)), full)
			rs := clBind(t, r)
			for i := range 2 {
				md.mutate(t, rng, r, rs, 200)
				dir := filepath.Join(root, fmt.Sprint("re-", i))
				if _, err := r.SnapshotFiles(dir); err != nil {
					t.Fatal(err)
				}
				md.check(t, fmt.Sprintf("restored backend's snapshot %d", i), restore(t, dir, full), full)
			}
		})
	}
}

func TestChangelogMerge(t *testing.T) {
	root := t.TempDir()
	ranges := []stream.KeyGroupRange{{Start: 0, End: 63}, {Start: 64, End: fullMaxPar - 1}}
	md := newCLModel()
	rng := rand.New(rand.NewPCG(3, 4))
	var dirs []string
	for n, kg := range ranges {
		b, err := pebblestate.New(pebblestate.Options{Dir: filepath.Join(root, fmt.Sprint("db-", n)), MaterializeFactor: 100}, kg)
		if err != nil {
			t.Fatal(err)
		}
		s := clBind(t, b)
		for r := range 3 {
			for range 300 { // only keys of this range
				i := rng.IntN(clKeys)
				if k, g := testKey(i); kg.Contains(g) {
					b.SetCurrentKey(k, g)
					x := rng.Int64N(1000)
					s.v.Update(x)
					md.vals[i] = x
				}
			}
			dirs = append(dirs[:n], filepath.Join(root, fmt.Sprintf("s%d-chk-%d", n, r)))
			if _, err := b.SnapshotFiles(dirs[n]); err != nil {
				t.Fatal(err)
			}
		}
		if st := b.SnapshotStats(); st.ChainSegments != 2 {
			t.Fatalf("source %d: %d changelog segments, want 2", n, st.ChainSegments)
		}
		b.Close()
	}
	dst := restore(t, dirs[0], full)
	if err := pebblestate.MergeInto(dst, dirs[1:]); err != nil {
		t.Fatal(err)
	}
	md.check(t, "merged", dst, full)
}

func TestChangelogDamaged(t *testing.T) {
	root := t.TempDir()
	b, err := pebblestate.New(pebblestate.Options{Dir: filepath.Join(root, "db"), MaterializeFactor: 100}, full)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	s := clBind(t, b)
	md := newCLModel()
	rng := rand.New(rand.NewPCG(1, 1))
	var dir string
	for r := range 3 {
		md.mutate(t, rng, b, s, 100)
		dir = filepath.Join(root, fmt.Sprint("chk-", r))
		if _, err := b.SnapshotFiles(dir); err != nil {
			t.Fatal(err)
		}
	}
	seg := filepath.Join(dir, "changelog-00000002.wcl")
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, dir string)
		want   string
	}{
		{"flipped byte", func(t *testing.T, dir string) {
			p := filepath.Join(dir, "changelog-00000002.wcl")
			data, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			data[len(data)/2] ^= 1
			if err := os.WriteFile(p, data, 0o644); err != nil {
				t.Fatal(err)
			}
		}, "changelog-00000002.wcl: 2"},
		{"missing segment", func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, "changelog-00000001.wcl")); err != nil {
				t.Fatal(err)
			}
		}, "changelog segment changelog-00000001.wcl"},
		{"truncated segment", func(t *testing.T, dir string) {
			if err := os.Truncate(filepath.Join(dir, "changelog-00000002.wcl"), 10); err != nil {
				t.Fatal(err)
			}
		}, "changelog segment changelog-00000002.wcl has 10 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			copyDir := filepath.Join(t.TempDir(), "chk")
			if err := os.MkdirAll(copyDir, 0o755); err != nil {
				t.Fatal(err)
			}
			es, _ := os.ReadDir(dir)
			for _, e := range es {
				data, err := os.ReadFile(filepath.Join(dir, e.Name()))
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(copyDir, e.Name()), data, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			tc.damage(t, copyDir)
			_, err := pebblestate.OpenFromCheckpoint(pebblestate.Options{Dir: t.TempDir() + "/db"}, copyDir, full)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("open of a snapshot with a %s: %v, want an error containing %q", tc.name, err, tc.want)
			}
		})
	}
	if _, err := os.Stat(seg); err != nil {
		t.Fatal("the original snapshot was changed:", err)
	}
	md.check(t, "undamaged", restore(t, dir, full), full)
}
