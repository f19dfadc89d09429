// Package statebackendtest is the conformance suite that every keyed-state
// backend (statebackend.Backend) must pass: the semantics of every state
// kind, key and key-group isolation, event-time and processing-time timers
// (each domain apart from the other), snapshot and restore including
// rescaling, descriptor conflicts, and a randomised differential test
// against a plain Go model. A backend's tests call RunConformance, and RunTTL for
// state time-to-live (statebackend.WithTTL), which drives TTL state with a
// ManualClock.
//
// It imports the standard library, testing, stream and statebackend.
package statebackendtest

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/stream"
)

// NewBackend creates an empty backend for a key-group range.
type NewBackend func(kg stream.KeyGroupRange) statebackend.Backend

// Sizes scales the long tests of RunConformanceSized and RunTTLSized, so
// that a backend whose operations are slow can run them shorter by default
// and at full size on demand. A zero field keeps the size RunConformance
// and RunTTL use (shorter with -short). Every check runs at any size.
type Sizes struct {
	// ModelSeeds are the seeds of the randomised model tests (default 1–8
	// for RunConformance, 1–4 per TTL update type for RunTTL).
	ModelSeeds []uint64
	// ModelSteps is the number of random operations per seed (default
	// 2500 for RunConformance, 3000 for RunTTL).
	ModelSteps int
	// CleanupTTLs is how many TTLs' worth of new keys, one a millisecond,
	// the incremental cleanup test writes (default 20): at least a few,
	// so that the bound on live keys is well below the keys written.
	CleanupTTLs int
}

// model returns the seeds and steps of a model test whose defaults are
// seeds and steps.
func (sz Sizes) model(seeds []uint64, steps int) ([]uint64, int) {
	if len(sz.ModelSeeds) > 0 {
		seeds = sz.ModelSeeds
	}
	if sz.ModelSteps > 0 {
		steps = sz.ModelSteps
	}
	return seeds, steps
}

// maxPar is the number of key groups the suite uses.
const maxPar = 8

var fullRange = stream.KeyGroupRange{Start: 0, End: maxPar - 1}

// kgOf is the key group of a test key.
func kgOf(key string) int {
	h := fnv.New64a()
	h.Write([]byte(key))
	return stream.KeyGroupForHash(h.Sum64(), maxPar)
}

// keysIn returns n keys whose key groups are in r.
func keysIn(r stream.KeyGroupRange, n int) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		k := fmt.Sprintf("key-%d", i)
		if r.Contains(kgOf(k)) {
			out = append(out, k)
		}
	}
	return out
}

// setKey makes key current on b.
func setKey(b statebackend.Backend, key string) {
	b.SetCurrentKey([]byte(key), kgOf(key))
}

// avgAcc is the accumulator of the average aggregate, encoded as JSON.
type avgAcc struct {
	Sum   int64
	Count int64
}

type avgFunc struct{}

func (avgFunc) CreateAccumulator() avgAcc { return avgAcc{} }
func (avgFunc) Add(v int64, a avgAcc) avgAcc {
	a.Sum += v
	a.Count++
	return a
}
func (avgFunc) Result(a avgAcc) float64 { return float64(a.Sum) / float64(a.Count) }
func (avgFunc) Merge(a, b avgAcc) avgAcc {
	return avgAcc{Sum: a.Sum + b.Sum, Count: a.Count + b.Count}
}

func sum(a, b int64) int64 { return a + b }

// Table names of the fixture.
const (
	tVal  = "val"
	tList = "list"
	tMap  = "map"
	tRed  = "red"
	tAgg  = "agg"
)

var tableNames = []string{tVal, tList, tMap, tRed, tAgg}

// states is one of every state kind on a backend.
type states struct {
	b    statebackend.Backend
	val  statebackend.ValueState[int64]
	list statebackend.ListState[string]
	m    statebackend.MapState[string, int64]
	red  statebackend.ReducingState[int64]
	agg  statebackend.AggregatingState[int64, float64]
}

func openStates(t testing.TB, b statebackend.Backend) *states {
	t.Helper()
	s := &states{b: b}
	var err error
	if s.val, err = statebackend.GetValueState(b, tVal, statebackend.Int64Codec); err != nil {
		t.Fatal(err)
	}
	if s.list, err = statebackend.GetListState(b, tList, statebackend.StringCodec); err != nil {
		t.Fatal(err)
	}
	if s.m, err = statebackend.GetMapState(b, tMap, statebackend.StringCodec, statebackend.Int64Codec); err != nil {
		t.Fatal(err)
	}
	if s.red, err = statebackend.GetReducingState(b, tRed, statebackend.Int64Codec, sum); err != nil {
		t.Fatal(err)
	}
	if s.agg, err = statebackend.GetAggregatingState(b, tAgg, statebackend.JSONCodec[avgAcc](), statebackend.AggregateFunction[int64, avgAcc, float64](avgFunc{})); err != nil {
		t.Fatal(err)
	}
	return s
}

// dump renders all state of the fixture's tables that b holds, found through
// Keys: "kg/key" → a description of every state of the key. It is the
// observable state that snapshot and restore must preserve.
func (s *states) dump(t testing.TB) map[string]string {
	t.Helper()
	out := make(map[string]string)
	r := s.b.KeyGroups()
	for kg := r.Start; kg <= r.End; kg++ {
		keys := make(map[string]bool)
		for _, name := range tableNames {
			s.b.Keys(name, kg, func(k []byte) bool {
				keys[string(k)] = true
				return true
			})
		}
		for k := range keys {
			if got := kgOf(k); got != kg {
				t.Errorf("Keys(_, %d) returned key %q of key group %d", kg, k, got)
			}
			s.b.SetCurrentKey([]byte(k), kg)
			out[fmt.Sprintf("%d/%s", kg, k)] = s.describe()
		}
	}
	return out
}

// describe renders every state of the current key.
func (s *states) describe() string {
	var sb strings.Builder
	if v, ok := s.val.Value(); ok {
		fmt.Fprintf(&sb, "val=%d ", v)
	}
	if l := s.list.Get(); len(l) > 0 {
		fmt.Fprintf(&sb, "list=%q ", l)
	}
	if !s.m.IsEmpty() {
		m := make(map[string]int64)
		s.m.Range(func(k string, v int64) bool { m[k] = v; return true })
		fmt.Fprintf(&sb, "map=%v ", sortedMap(m))
	}
	if v, ok := s.red.Get(); ok {
		fmt.Fprintf(&sb, "red=%d ", v)
	}
	if v, ok := s.agg.Get(); ok {
		fmt.Fprintf(&sb, "agg=%g ", v)
	}
	return sb.String()
}

func sortedMap(m map[string]int64) string {
	var sb strings.Builder
	for _, k := range slices.Sorted(maps.Keys(m)) {
		fmt.Fprintf(&sb, "%s:%d,", k, m[k])
	}
	return sb.String()
}

// firedTimer is a timer as fire saw it.
type firedTimer struct {
	Key string
	KG  int
	TS  int64
}

// timerDomain is event time or processing time, as the timer tests that
// run in both see it.
type timerDomain struct {
	name        string // "event" or "processing"
	advanceName string // the TimerService method advance calls, for messages
	register    func(statebackend.TimerService, int64)
	delete      func(statebackend.TimerService, int64)
	advance     func(ts statebackend.TimerService, to int64, fire func(key []byte, kg int, ts int64) error) error
	// order is the order in which advance must fire timers: event time
	// promises timestamp order only.
	order func(a, b firedTimer) int
	// hasNext is whether NextProcessingTime reports the earliest timer.
	hasNext bool
}

var (
	eventTime = timerDomain{
		name:        "event",
		advanceName: "AdvanceWatermark",
		register:    statebackend.TimerService.RegisterEventTimeTimer,
		delete:      statebackend.TimerService.DeleteEventTimeTimer,
		advance:     statebackend.TimerService.AdvanceWatermark,
		order:       func(a, b firedTimer) int { return cmp.Compare(a.TS, b.TS) },
	}
	processingTime = timerDomain{
		name:        "processing",
		advanceName: "AdvanceProcessingTime",
		register:    statebackend.TimerService.RegisterProcessingTimeTimer,
		delete:      statebackend.TimerService.DeleteProcessingTimeTimer,
		advance:     statebackend.TimerService.AdvanceProcessingTime,
		order:       compareFired,
		hasNext:     true,
	}
)

// timer is what messages call a timer of d.
func (d timerDomain) timer() string { return d.name + "-time timer" }

// other is the other domain.
func (d timerDomain) other() timerDomain {
	if d.name == eventTime.name {
		return processingTime
	}
	return eventTime
}

// fire advances d's time to to and returns the timers fired, after checking
// that each fired with its key current, at or below to and in d's order.
func (d timerDomain) fire(t testing.TB, b statebackend.Backend, to int64) []firedTimer {
	t.Helper()
	var fired []firedTimer
	err := d.advance(b.Timers(), to, func(key []byte, kg int, ts int64) error {
		ck, ckg := b.CurrentKey()
		if string(ck) != string(key) || ckg != kg {
			t.Errorf("%s %d of key %q (group %d) fired with current key %q (group %d)", d.timer(), ts, key, kg, ck, ckg)
		}
		if ts > to {
			t.Errorf("%s %d fired at %s(%d)", d.timer(), ts, d.advanceName, to)
		}
		f := firedTimer{string(key), kg, ts}
		if n := len(fired); n > 0 && d.order(fired[n-1], f) > 0 {
			t.Errorf("%s %v fired after %v, out of order", d.timer(), f, fired[n-1])
		}
		fired = append(fired, f)
		return nil
	})
	if err != nil {
		t.Fatalf("%s(%d): %v", d.advanceName, to, err)
	}
	return fired
}

// checkNext checks NextProcessingTime against the earliest of want in the
// processing-time domain; in event time it checks nothing.
func (d timerDomain) checkNext(t *testing.T, what string, b statebackend.Backend, want []firedTimer) {
	t.Helper()
	if d.hasNext {
		checkNextProcessingTime(t, what, b, want)
	}
}

// fireAll advances the watermark to wm and returns the timers fired, as
// timerDomain.fire does.
func fireAll(t testing.TB, b statebackend.Backend, wm int64) []firedTimer {
	t.Helper()
	return eventTime.fire(t, b, wm)
}

// fireAllProc advances processing time to now and returns the
// processing-time timers fired, as timerDomain.fire does.
func fireAllProc(t testing.TB, b statebackend.Backend, now int64) []firedTimer {
	t.Helper()
	return processingTime.fire(t, b, now)
}

// compareFired orders timers by (timestamp, key group, key): the order in
// which AdvanceProcessingTime fires them.
func compareFired(a, b firedTimer) int {
	return cmp.Or(cmp.Compare(a.TS, b.TS), cmp.Compare(a.KG, b.KG), strings.Compare(a.Key, b.Key))
}

// sortFired orders timers by (ts, key) so that sets can be compared.
func sortFired(f []firedTimer) []firedTimer {
	f = slices.Clone(f)
	slices.SortFunc(f, func(a, b firedTimer) int {
		if a.TS != b.TS {
			if a.TS < b.TS {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Key, b.Key)
	})
	return f
}

// snapshot takes a snapshot of b.
func snapshot(t testing.TB, b statebackend.Backend, id int64) *stream.OperatorSnapshot {
	t.Helper()
	c := &stream.SnapshotContext{CheckpointID: id, KeyGroups: b.KeyGroups()}
	if err := b.Snapshot(c); err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	for kg := range c.State.Keyed {
		if !b.KeyGroups().Contains(kg) {
			t.Fatalf("Snapshot wrote key group %d outside %v", kg, b.KeyGroups())
		}
	}
	return &c.State
}

// restore creates a backend for r and restores snap into it.
func restore(t testing.TB, newBackend NewBackend, r stream.KeyGroupRange, snap *stream.OperatorSnapshot, id int64) statebackend.Backend {
	t.Helper()
	b := newBackend(r)
	t.Cleanup(func() { b.Close() })
	if err := b.Restore(&stream.RestoreContext{CheckpointID: id, KeyGroups: r, State: snap}); err != nil {
		t.Fatalf("Restore into %v: %v", r, err)
	}
	return b
}

// mergeSnapshots merges the keyed chunks of several snapshots, as the
// checkpoint storage layer does when subtasks' ranges change.
func mergeSnapshots(snaps ...*stream.OperatorSnapshot) *stream.OperatorSnapshot {
	out := &stream.OperatorSnapshot{Keyed: make(map[int][][]byte)}
	for _, s := range snaps {
		for kg, chunks := range s.Keyed {
			out.Keyed[kg] = append(out.Keyed[kg], chunks...)
		}
	}
	return out
}

// filterSnapshot keeps the key groups in r, as the checkpoint storage layer
// does when it loads one subtask's state.
func filterSnapshot(s *stream.OperatorSnapshot, r stream.KeyGroupRange) *stream.OperatorSnapshot {
	out := &stream.OperatorSnapshot{Keyed: make(map[int][][]byte)}
	for kg, chunks := range s.Keyed {
		if r.Contains(kg) {
			out.Keyed[kg] = chunks
		}
	}
	return out
}
