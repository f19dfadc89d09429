package pebblestate_test

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/statebackend/heap"
	"github.com/weirstream/weir/statebackend/pebblestate"
	"github.com/weirstream/weir/stream"
)

// The differential test runs one random operation sequence against a heap
// backend and a Pebble backend and requires every observation (reads, map
// ranges, key scans, fired timers of both domains in order, the next
// processing-time timer) to be identical. At random
// points both are snapshotted and restored: each from its own snapshot,
// crosswise (a heap snapshot into Pebble and a Pebble snapshot into heap),
// or, for Pebble, through Checkpoint and OpenFromCheckpoint.

const diffMaxPar = 16

var diffRange = stream.KeyGroupRange{Start: 0, End: diffMaxPar - 1}

func diffKG(key string) int {
	h := fnv.New64a()
	h.Write([]byte(key))
	return stream.KeyGroupForHash(h.Sum64(), diffMaxPar)
}

type avg struct{ Sum, N int64 }

type avgFn struct{}

func (avgFn) CreateAccumulator() avg { return avg{} }
func (avgFn) Add(v int64, a avg) avg { return avg{a.Sum + v, a.N + 1} }
func (avgFn) Result(a avg) float64   { return float64(a.Sum) / float64(a.N) }
func (avgFn) Merge(a, b avg) avg     { return avg{a.Sum + b.Sum, a.N + b.N} }
func sumInt(a, b int64) int64        { return a + b }

// side is one backend with one handle of every state kind.
type side struct {
	name string
	b    statebackend.Backend
	val  statebackend.ValueState[int64]
	byt  statebackend.ValueState[[]byte]
	list statebackend.ListState[string]
	m    statebackend.MapState[string, int64]
	red  statebackend.ReducingState[int64]
	agg  statebackend.AggregatingState[int64, float64]
}

var diffTables = []string{"val", "byt", "list", "map", "red", "agg"}

func openSide(t testing.TB, name string, b statebackend.Backend) *side {
	s := &side{name: name, b: b}
	var errs [6]error
	s.val, errs[0] = statebackend.GetValueState(b, "val", statebackend.Int64Codec)
	s.byt, errs[1] = statebackend.GetValueState(b, "byt", statebackend.BytesCodec)
	s.list, errs[2] = statebackend.GetListState(b, "list", statebackend.StringCodec)
	s.m, errs[3] = statebackend.GetMapState(b, "map", statebackend.StringCodec, statebackend.Int64Codec)
	s.red, errs[4] = statebackend.GetReducingState(b, "red", statebackend.Int64Codec, sumInt)
	s.agg, errs[5] = statebackend.GetAggregatingState(b, "agg", statebackend.JSONCodec[avg](), statebackend.AggregateFunction[int64, avg, float64](avgFn{}))
	for _, err := range errs {
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	return s
}

// describe renders every state of the current key.
func (s *side) describe() string {
	var sb strings.Builder
	if v, ok := s.val.Value(); ok {
		fmt.Fprintf(&sb, "val=%d ", v)
	}
	if v, ok := s.byt.Value(); ok {
		fmt.Fprintf(&sb, "byt=%x ", v)
	}
	if l := s.list.Get(); l != nil {
		fmt.Fprintf(&sb, "list=%q ", l)
	}
	fmt.Fprintf(&sb, "map=%s ", s.mapString())
	if v, ok := s.red.Get(); ok {
		fmt.Fprintf(&sb, "red=%d ", v)
	}
	if v, ok := s.agg.Get(); ok {
		fmt.Fprintf(&sb, "agg=%g ", v)
	}
	return sb.String()
}

func (s *side) mapString() string {
	var kv []string
	s.m.Range(func(k string, v int64) bool { kv = append(kv, fmt.Sprintf("%s:%d", k, v)); return true })
	slices.Sort(kv)
	return strings.Join(kv, ",")
}

// dump renders all state, found through Keys, sorted.
func (s *side) dump() string {
	var lines []string
	for kg := diffRange.Start; kg <= diffRange.End; kg++ {
		keys := map[string]bool{}
		for _, tn := range diffTables {
			s.b.Keys(tn, kg, func(k []byte) bool { keys[string(k)] = true; return true })
		}
		for k := range keys {
			s.b.SetCurrentKey([]byte(k), kg)
			lines = append(lines, fmt.Sprintf("%d/%s: %s", kg, k, s.describe()))
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

type diffHarness struct {
	t      *testing.T
	rng    *rand.Rand
	sides  [2]*side // heap, pebble
	newPeb func(kg stream.KeyGroupRange) *pebblestate.Backend
	cache  int64 // value cache bytes of the Pebble side
	timers int64 // timer cache bytes of the Pebble side
	root   string
	ckpt   int
	factor float64 // MaterializeFactor of backends restored from changelog snapshots
	keys   []string
	wm     int64
	now    int64 // the highest processing time passed
}

// apply runs op on both sides and compares what they observe.
func (h *diffHarness) apply(step int, what string, op func(s *side) string) {
	h.t.Helper()
	a, b := op(h.sides[0]), op(h.sides[1])
	if a != b {
		h.t.Fatalf("step %d %s: heap and pebble differ\nheap:   %s\npebble: %s", step, what, a, b)
	}
}

func TestDifferentialHeapPebble(t *testing.T) {
	t.Parallel()
	// Seeds 2, 4 and 6 between them run every value cache size, timer
	// cache size and materialize factor (see below); WEIR_LONG_TESTS=1 runs
	// all six seeds, each twice as long.
	seeds := []uint64{2, 4, 6}
	steps := 1500
	switch {
	case longTests():
		seeds, steps = []uint64{1, 2, 3, 4, 5, 6}, 3000
	case testing.Short():
		steps = 1000
	}
	for _, seed := range seeds {
		// Each seed runs with one of the value cache sizes in turn,
		cache := testCacheSizes[int(seed)%len(testCacheSizes)]
		// one of the timer cache sizes (default, one timer per key group,
		// about four),
		timers := []int64{0, 1, 16 * 4 * 60}[int(seed/2)%3]
		t.Run(fmt.Sprintf("seed=%d/valuecache=%d/timercache=%d/factor=%v", seed, cache, timers, []float64{0.5, 100, -1}[int(seed)%3]), func(t *testing.T) {
			t.Parallel() // every seed has its own backends and directories
			// and one of the materialize factors: often, rarely, always.
			factor := []float64{0.5, 100, -1}[int(seed)%3]
			h := &diffHarness{t: t, rng: rand.New(rand.NewPCG(seed, 99)), cache: cache, timers: timers, root: t.TempDir(), factor: factor,
				newPeb: newFactoryOpts(t, pebblestate.Options{ValueCacheBytes: cache, TimerCacheBytes: timers})}
			for i := range 40 {
				h.keys = append(h.keys, fmt.Sprint("k", i))
			}
			h.sides[0] = openSide(t, "heap", heap.New(diffRange))
			h.sides[1] = openSide(t, "pebble", h.newPeb(diffRange))
			t.Cleanup(func() { h.sides[0].b.Close(); h.sides[1].b.Close() })
			restores := 0
			for step := range steps {
				if h.step(step) {
					restores++
				}
			}
			h.apply(steps, "final dump", func(s *side) string { return s.dump() })
			h.apply(steps, "final timers", func(s *side) string { return h.fire(s, 1<<40) })
			h.apply(steps, "final processing-time timers", func(s *side) string { return h.fireProc(s, 1<<40) })
			t.Logf("seed %d: %d steps, %d restores", seed, steps, restores)
		})
	}
}

// fire advances the watermark and renders the timers fired, in order. Some
// timers register another one (decided by the timer, not the rng, so that
// both sides do the same) and every fired key's state is rendered.
func (h *diffHarness) fire(s *side, wm int64) string {
	var sb strings.Builder
	err := s.b.Timers().AdvanceWatermark(wm, func(key []byte, kg int, ts int64) error {
		fmt.Fprintf(&sb, "%s@%d/%d[%s] ", key, ts, kg, s.describe())
		if ts%3 == 0 {
			s.b.Timers().RegisterEventTimeTimer(ts + 1 + ts%7)
		}
		if ts%5 == 0 {
			s.val.Update(ts)
		}
		return nil
	})
	if err != nil {
		h.t.Fatalf("%s: AdvanceWatermark: %v", s.name, err)
	}
	fmt.Fprintf(&sb, "wm=%d", s.b.Timers().CurrentWatermark())
	return sb.String()
}

// fireProc advances processing time to now and renders the
// processing-time timers fired, as fire does for event time.
func (h *diffHarness) fireProc(s *side, now int64) string {
	var sb strings.Builder
	next, ok := s.b.Timers().NextProcessingTime()
	fmt.Fprintf(&sb, "next=%d,%v ", next, ok)
	err := s.b.Timers().AdvanceProcessingTime(now, func(key []byte, kg int, ts int64) error {
		fmt.Fprintf(&sb, "%s@%d/%d[%s] ", key, ts, kg, s.describe())
		if ts%3 == 1 { // the new timers are not ≡ 1 (mod 3): the chain ends
			s.b.Timers().RegisterProcessingTimeTimer(ts + 1)
			s.b.Timers().RegisterProcessingTimeTimer(ts - 2) // in the past: fires in this call
		}
		if ts%4 == 0 {
			s.b.Timers().RegisterEventTimeTimer(ts)
			s.val.Update(-ts)
		}
		return nil
	})
	if err != nil {
		h.t.Fatalf("%s: AdvanceProcessingTime: %v", s.name, err)
	}
	return sb.String()
}

func (h *diffHarness) step(step int) (restored bool) {
	rng := h.rng
	key := h.keys[rng.IntN(len(h.keys))]
	kg := diffKG(key)
	for _, s := range h.sides {
		s.b.SetCurrentKey([]byte(key), kg)
	}
	uk := fmt.Sprint("u", rng.IntN(6))
	v := rng.Int64N(1000) - 300
	switch op := rng.IntN(100); {
	case op < 8:
		h.apply(step, "val.Update", func(s *side) string { s.val.Update(v); return "" })
	case op < 10:
		h.apply(step, "val.Clear", func(s *side) string { s.val.Clear(); return "" })
	case op < 13:
		b := make([]byte, rng.IntN(5))
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		h.apply(step, "byt.Update", func(s *side) string { s.byt.Update(b); return "" })
	case op < 20:
		e := fmt.Sprint(v)
		h.apply(step, "list.Add", func(s *side) string { s.list.Add(e); return "" })
	case op < 22:
		vs := []string{fmt.Sprint(v), "", fmt.Sprint(-v)}[:rng.IntN(4)]
		h.apply(step, "list.AddAll", func(s *side) string { s.list.AddAll(vs); return "" })
	case op < 24:
		vs := []string{fmt.Sprint(v)}[:rng.IntN(2)]
		h.apply(step, "list.Update", func(s *side) string { s.list.Update(vs); return "" })
	case op < 25:
		h.apply(step, "list.Clear", func(s *side) string { s.list.Clear(); return "" })
	case op < 34:
		h.apply(step, "map.Put", func(s *side) string { s.m.Put(uk, v); return "" })
	case op < 37:
		h.apply(step, "map.Remove", func(s *side) string { s.m.Remove(uk); return "" })
	case op < 39:
		h.apply(step, "map.Get", func(s *side) string {
			x, ok := s.m.Get(uk)
			return fmt.Sprint(x, ok, s.m.Contains(uk), s.m.IsEmpty())
		})
	case op < 41:
		// Range removing odd values.
		h.apply(step, "map.Range+Remove", func(s *side) string {
			var seen []string
			s.m.Range(func(k string, x int64) bool {
				seen = append(seen, k)
				if x%2 != 0 {
					s.m.Remove(k)
				}
				return true
			})
			slices.Sort(seen)
			return strings.Join(seen, ",") + " → " + s.mapString()
		})
	case op < 42:
		h.apply(step, "map.Clear", func(s *side) string { s.m.Clear(); return "" })
	case op < 47:
		h.apply(step, "red.Add", func(s *side) string { s.red.Add(v); return "" })
	case op < 48:
		h.apply(step, "red.Clear", func(s *side) string { s.red.Clear(); return "" })
	case op < 52:
		h.apply(step, "agg.Add", func(s *side) string { s.agg.Add(v); return "" })
	case op < 53:
		h.apply(step, "agg.Clear", func(s *side) string { s.agg.Clear(); return "" })
	case op < 57:
		// A changelog snapshot the test does not restore: it extends the
		// chain (or materializes) that a later restore (mode 2) replays.
		h.ckpt++
		dir := filepath.Join(h.root, fmt.Sprint("snap-", h.ckpt))
		if _, err := h.sides[1].b.(*pebblestate.Backend).SnapshotFiles(dir); err != nil {
			h.t.Fatalf("step %d: SnapshotFiles: %v", step, err)
		}
	case op < 60:
		h.apply(step, "describe", func(s *side) string { return s.describe() })
	case op < 70:
		ts := h.wm - 5 + rng.Int64N(50)
		h.apply(step, "register", func(s *side) string { s.b.Timers().RegisterEventTimeTimer(ts); return "" })
	case op < 74:
		ts := h.wm - 5 + rng.Int64N(50)
		h.apply(step, "delete timer", func(s *side) string { s.b.Timers().DeleteEventTimeTimer(ts); return "" })
	case op < 82:
		wm := h.wm + rng.Int64N(25) - 4
		h.wm = max(h.wm, wm)
		h.apply(step, fmt.Sprint("advance to ", wm), func(s *side) string { return h.fire(s, wm) })
	case op < 84:
		h.apply(step, "dump", func(s *side) string { return s.dump() })
	case op < 86:
		h.restore(step)
		return true
	case op < 90:
		ts := h.now - 5 + rng.Int64N(50)
		h.apply(step, "register processing-time timer", func(s *side) string { s.b.Timers().RegisterProcessingTimeTimer(ts); return "" })
	case op < 92:
		ts := h.now - 5 + rng.Int64N(50)
		h.apply(step, "delete processing-time timer", func(s *side) string { s.b.Timers().DeleteProcessingTimeTimer(ts); return "" })
	case op < 96:
		now := h.now + rng.Int64N(25) - 4
		h.now = max(h.now, now)
		h.apply(step, fmt.Sprint("processing time ", now), func(s *side) string { return h.fireProc(s, now) })
	case op < 97:
		h.apply(step, "next processing time", func(s *side) string {
			ts, ok := s.b.Timers().NextProcessingTime()
			return fmt.Sprint(ts, ok)
		})
	}
	return false
}

// restore replaces both sides by restored copies.
func (h *diffHarness) restore(step int) {
	t := h.t
	h.ckpt++
	snaps := [2]*stream.OperatorSnapshot{}
	for i, s := range h.sides {
		c := &stream.SnapshotContext{CheckpointID: int64(h.ckpt), KeyGroups: diffRange}
		if err := s.b.Snapshot(c); err != nil {
			t.Fatalf("step %d: %s: Snapshot: %v", step, s.name, err)
		}
		snaps[i] = &c.State
	}
	mode := h.rng.IntN(3)
	var peb statebackend.Backend
	switch mode {
	case 0, 1: // own (0) or the other side's (1) snapshot
		src := snaps[1]
		if mode == 1 {
			src = snaps[0]
		}
		p := h.newPeb(diffRange)
		if err := p.Restore(&stream.RestoreContext{CheckpointID: int64(h.ckpt), KeyGroups: diffRange, State: src}); err != nil {
			t.Fatalf("step %d: pebble Restore (mode %d): %v", step, mode, err)
		}
		peb = p
	case 2: // changelog snapshot (materialized checkpoint + chain) and local recovery
		dir := filepath.Join(h.root, fmt.Sprint("chk-", h.ckpt))
		if _, err := h.sides[1].b.(*pebblestate.Backend).SnapshotFiles(dir); err != nil {
			t.Fatalf("step %d: SnapshotFiles: %v", step, err)
		}
		p, err := pebblestate.OpenFromCheckpoint(pebblestate.NoSync(pebblestate.Options{Dir: dir + "-work", ValueCacheBytes: h.cache, TimerCacheBytes: h.timers, DeleteOnClose: true, MaterializeFactor: h.factor}), dir, diffRange)
		if err != nil {
			t.Fatalf("step %d: OpenFromCheckpoint: %v", step, err)
		}
		peb = p
	}
	hsrc := snaps[0]
	if mode == 1 {
		hsrc = snaps[1]
	}
	hp := heap.New(diffRange)
	if err := hp.Restore(&stream.RestoreContext{CheckpointID: int64(h.ckpt), KeyGroups: diffRange, State: hsrc}); err != nil {
		t.Fatalf("step %d: heap Restore (mode %d): %v", step, mode, err)
	}
	for _, s := range h.sides {
		s.b.Close()
	}
	h.sides[0] = openSide(t, "heap", hp)
	h.sides[1] = openSide(t, "pebble", peb)
	h.apply(step, fmt.Sprintf("dump after restore (mode %d)", mode), func(s *side) string { return s.dump() })
}
