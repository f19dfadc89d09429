package statebackendtest

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/stream"
)

// ManualClock is a processing-time clock for statebackend.TTLConfig.Clock
// that moves only when told to. It is not safe for concurrent use.
type ManualClock struct{ now int64 }

// NewManualClock returns a clock that reads start (Unix ms).
func NewManualClock(start int64) *ManualClock { return &ManualClock{now: start} }

// Now returns the clock's time in Unix ms; pass c.Now as TTLConfig.Clock.
func (c *ManualClock) Now() int64 { return c.now }

// Advance moves the clock ms milliseconds forward (ms must not be negative).
func (c *ManualClock) Advance(ms int64) {
	if ms < 0 {
		panic("statebackendtest: ManualClock.Advance with a negative duration")
	}
	c.now += ms
}

// RunTTL runs the state TTL tests (statebackend.WithTTL) against the
// backends newBackend makes: expiry at the exact boundary for both update
// types, lazy removal on read, incremental cleanup keeping the state of an
// unbounded stream of keys bounded, descriptor conflicts between TTL and
// non-TTL state (also across a restore), and a randomised differential test
// against a model with a manual clock. Every backend returned must be empty;
// the tests close them. The tests do not rely on Descriptor.SnapshotFilter.
func RunTTL(t *testing.T, newBackend NewBackend) {
	RunTTLSized(t, newBackend, Sizes{})
}

// RunTTLSized is RunTTL with the incremental cleanup test and the
// randomised model test sized by sz (zero fields: RunTTL's sizes).
func RunTTLSized(t *testing.T, newBackend NewBackend, sz Sizes) {
	nb := func(t *testing.T, r stream.KeyGroupRange) statebackend.Backend {
		b := newBackend(r)
		t.Cleanup(func() { b.Close() })
		return b
	}
	tests := []struct {
		name string
		fn   func(t *testing.T, nb nbFunc, newBackend NewBackend)
	}{
		{"Expiry", testTTLExpiry},
		{"LazyCleanup", testTTLLazyCleanup},
		{"IncrementalCleanupBounds", func(t *testing.T, nb nbFunc, _ NewBackend) { testTTLIncrementalCleanup(t, nb, sz) }},
		{"Conflicts", testTTLConflicts},
		{"Model", func(t *testing.T, _ nbFunc, newBackend NewBackend) { testTTLModel(t, newBackend, sz) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, nb, newBackend) })
	}
}

// ttlMillis is the TTL of the scripted tests, modelTTL that of the model
// test (in ms).
const (
	ttlMillis = 100
	modelTTL  = 1000
)

// ttlStates is one TTL state of every kind on a backend, under the
// fixture's table names.
type ttlStates struct {
	b    statebackend.Backend
	val  statebackend.ValueState[int64]
	list statebackend.ListState[string]
	m    statebackend.MapState[string, int64]
	red  statebackend.ReducingState[int64]
	agg  statebackend.AggregatingState[int64, float64]
}

func openTTLStates(t testing.TB, b statebackend.Backend, cfg statebackend.TTLConfig) *ttlStates {
	t.Helper()
	s := &ttlStates{b: b}
	ttl := statebackend.WithTTL(cfg)
	var err error
	if s.val, err = statebackend.GetValueState(b, tVal, statebackend.Int64Codec, ttl); err != nil {
		t.Fatal(err)
	}
	if s.list, err = statebackend.GetListState(b, tList, statebackend.StringCodec, ttl); err != nil {
		t.Fatal(err)
	}
	if s.m, err = statebackend.GetMapState(b, tMap, statebackend.StringCodec, statebackend.Int64Codec, ttl); err != nil {
		t.Fatal(err)
	}
	if s.red, err = statebackend.GetReducingState(b, tRed, statebackend.Int64Codec, sum, ttl); err != nil {
		t.Fatal(err)
	}
	if s.agg, err = statebackend.GetAggregatingState(b, tAgg, statebackend.JSONCodec[avgAcc](), statebackend.AggregateFunction[int64, avgAcc, float64](avgFunc{}), ttl); err != nil {
		t.Fatal(err)
	}
	return s
}

// describe reads every state of the current key (reads restart TTLs with
// UpdateOnReadAndWrite) and renders it as ttlModel.describe does.
func (s *ttlStates) describe() string {
	var sb strings.Builder
	if v, ok := s.val.Value(); ok {
		fmt.Fprintf(&sb, "val=%d ", v)
	}
	if l := s.list.Get(); len(l) > 0 {
		fmt.Fprintf(&sb, "list=%q ", l)
	}
	m := make(map[string]int64)
	s.m.Range(func(k string, v int64) bool { m[k] = v; return true })
	if len(m) > 0 {
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

// keysOf returns the keys Backend.Keys gives for table in all of b's key
// groups.
func keysOf(b statebackend.Backend, table string) map[string]bool {
	out := make(map[string]bool)
	r := b.KeyGroups()
	for kg := r.Start; kg <= r.End; kg++ {
		b.Keys(table, kg, func(k []byte) bool { out[string(k)] = true; return true })
	}
	return out
}

// ttlKind drives one kind of TTL state through the scripted tests: write
// writes (and restarts the TTL), read reports whether the value is visible.
type ttlKind struct {
	name  string
	table string
	write func(s *ttlStates)
	read  func(s *ttlStates) bool
}

var ttlKinds = []ttlKind{
	{"value", tVal, func(s *ttlStates) { s.val.Update(1) }, func(s *ttlStates) bool { _, ok := s.val.Value(); return ok }},
	{"list", tList, func(s *ttlStates) { s.list.Update([]string{"a", "b"}) }, func(s *ttlStates) bool { return len(s.list.Get()) == 2 }},
	{"map", tMap, func(s *ttlStates) { s.m.Put("u", 1) }, func(s *ttlStates) bool { _, ok := s.m.Get("u"); return ok }},
	{"map-contains", tMap, func(s *ttlStates) { s.m.Put("u", 1) }, func(s *ttlStates) bool { return s.m.Contains("u") }},
	{"map-range", tMap, func(s *ttlStates) { s.m.Put("u", 1) }, func(s *ttlStates) bool {
		n := 0
		s.m.Range(func(string, int64) bool { n++; return true })
		return n == 1
	}},
	{"reducing", tRed, func(s *ttlStates) { s.red.Add(1) }, func(s *ttlStates) bool { _, ok := s.red.Get(); return ok }},
	{"aggregating", tAgg, func(s *ttlStates) { s.agg.Add(1) }, func(s *ttlStates) bool { _, ok := s.agg.Get(); return ok }},
}

var ttlUpdates = []statebackend.TTLUpdate{statebackend.UpdateOnCreateAndWrite, statebackend.UpdateOnReadAndWrite}

// testTTLExpiry checks the boundary (a value written at t is visible up to
// t+TTL-1 and gone at t+TTL), that writes restart the TTL, and that reads
// restart it only with UpdateOnReadAndWrite; also across a snapshot and
// restore, which keeps the timestamps.
func testTTLExpiry(t *testing.T, nb nbFunc, newBackend NewBackend) {
	for _, upd := range ttlUpdates {
		for _, k := range ttlKinds {
			t.Run(fmt.Sprintf("%s/%s", upd, k.name), func(t *testing.T) {
				clk := NewManualClock(1_000_000)
				cfg := statebackend.TTLConfig{TTL: ttlMillis * time.Millisecond, Update: upd, Clock: clk.Now}
				b := nb(t, fullRange)
				s := openTTLStates(t, b, cfg)
				setKey(b, "k")
				check := func(step string, want bool) {
					t.Helper()
					if got := k.read(s); got != want {
						t.Fatalf("%s (clock +%dms): visible = %v, want %v", step, clk.Now()-1_000_000, got, want)
					}
				}
				k.write(s)
				clk.Advance(ttlMillis - 1)
				check("read just before the TTL", true)
				if upd == statebackend.UpdateOnReadAndWrite {
					// The read restarted the TTL.
					clk.Advance(ttlMillis - 1)
					check("read restarted the TTL", true)
					clk.Advance(ttlMillis)
					check("TTL after the last read", false)
				} else {
					clk.Advance(1)
					check("read at the TTL", false)
				}
				// Writes restart the TTL, in both modes.
				k.write(s)
				clk.Advance(ttlMillis / 2)
				k.write(s)
				clk.Advance(ttlMillis/2 + 1)
				if upd == statebackend.UpdateOnCreateAndWrite {
					check("second write restarted the TTL", true)
					clk.Advance(ttlMillis/2 - 1)
					check("TTL after the second write", false)
				}
				// Timestamps survive a snapshot and restore.
				k.write(s)
				clk.Advance(ttlMillis / 2)
				b2 := restore(t, newBackend, fullRange, snapshot(t, b, 1), 1)
				s = openTTLStates(t, b2, cfg)
				setKey(b2, "k")
				check("restored", true)
				clk.Advance(ttlMillis / 2)
				// Only a read restarted the TTL at the restore.
				check("restored, TTL after the write", upd == statebackend.UpdateOnReadAndWrite)
				clk.Advance(ttlMillis)
				check("restored, TTL after the last access", false)
			})
		}
	}
}

// testTTLLazyCleanup checks that reading expired state removes it (without
// incremental cleanup, which is off), and per-element expiry of lists and
// maps.
func testTTLLazyCleanup(t *testing.T, nb nbFunc, _ NewBackend) {
	clk := NewManualClock(5000)
	cfg := statebackend.TTLConfig{TTL: ttlMillis * time.Millisecond, Clock: clk.Now}
	b := nb(t, fullRange)
	s := openTTLStates(t, b, cfg)
	for _, k := range []string{"a", "b"} {
		setKey(b, k)
		for _, kind := range ttlKinds {
			kind.write(s)
		}
	}
	clk.Advance(ttlMillis)
	for _, k := range ttlKinds {
		if !keysOf(b, k.table)["a"] {
			t.Fatalf("%s: key a was removed before it was read, with incremental cleanup off", k.name)
		}
	}
	setKey(b, "a")
	for _, k := range ttlKinds {
		if k.read(s) {
			t.Errorf("%s: expired value returned", k.name)
		}
		if keysOf(b, k.table)["a"] {
			t.Errorf("%s: reading the expired value did not remove key a", k.name)
		}
		if !keysOf(b, k.table)["b"] {
			t.Errorf("%s: key b, not read, was removed", k.name)
		}
	}

	// Per element: the list keeps the elements added later.
	setKey(b, "c")
	s.list.Add("old")
	s.m.Put("old", 1)
	clk.Advance(ttlMillis / 2)
	s.list.AddAll([]string{"new1", "new2"})
	s.m.Put("new", 2)
	clk.Advance(ttlMillis / 2)
	if got := s.list.Get(); !slices.Equal(got, []string{"new1", "new2"}) {
		t.Errorf("list after the first element expired: %q, want [new1 new2]", got)
	}
	if _, ok := s.m.Get("old"); ok || s.m.Contains("old") {
		t.Error("map: expired entry returned")
	}
	if v, ok := s.m.Get("new"); !ok || v != 2 {
		t.Errorf("map: live entry: %d, %v", v, ok)
	}
	if s.m.IsEmpty() {
		t.Error("map: IsEmpty with a live entry")
	}
	clk.Advance(ttlMillis / 2)
	if got := s.list.Get(); got != nil {
		t.Errorf("list after every element expired: %q, want nil", got)
	}
	if !s.m.IsEmpty() {
		t.Error("map: not IsEmpty when every entry expired")
	}
	for _, table := range []string{tList, tMap} {
		if keysOf(b, table)["c"] {
			t.Errorf("%s: key c left after its expired state was read", table)
		}
	}
}

// testTTLIncrementalCleanup writes one new key per millisecond, each once
// and never again, and checks that incremental cleanup keeps the number of
// keys with state bounded. With one new key per access, TTL/1ms live keys
// and N = CleanupPerAccess keys (or key groups) checked per access, a sweep
// over all K keys and G key groups takes S ≤ (K+G)/N accesses, and a key is
// removed at most 2S accesses after it expired (the rest of the sweep it
// expired in, and the next). So K ≤ TTL + 2(K+G)/N, that is
// K ≤ (TTL + 2G/N)·N/(N−2). Without cleanup every key stays.
func testTTLIncrementalCleanup(t *testing.T, nb nbFunc, sz Sizes) {
	steps := 20 * ttlMillis
	if sz.CleanupTTLs > 0 {
		steps = sz.CleanupTTLs * ttlMillis
	}
	for _, per := range []int{0, 3, statebackend.DefaultCleanupPerAccess, 16} {
		for _, k := range ttlKinds {
			if strings.HasPrefix(k.name, "map-") {
				continue
			}
			t.Run(fmt.Sprintf("per=%d/%s", per, k.name), func(t *testing.T) {
				clk := NewManualClock(0)
				cfg := statebackend.TTLConfig{TTL: ttlMillis * time.Millisecond, Clock: clk.Now, CleanupPerAccess: per}
				b := nb(t, fullRange)
				s := openTTLStates(t, b, cfg)
				g := float64(b.KeyGroups().Len())
				n := float64(per)
				bound := int((ttlMillis+2*g/n)*n/(n-2)) + 1
				most := 0
				for i := range steps {
					clk.Advance(1)
					setKey(b, fmt.Sprint("new-", i))
					k.write(s)
					if i%25 != 0 && i != steps-1 {
						continue
					}
					live := len(keysOf(b, k.table))
					most = max(most, live)
					if per > 0 && live > bound {
						t.Fatalf("after %d keys: %d keys have state, bound %d (TTL %d keys, %d per access)", i+1, live, bound, ttlMillis, per)
					}
				}
				if per == 0 {
					if most != steps {
						t.Fatalf("without incremental cleanup %d of %d keys have state; want all", most, steps)
					}
					return
				}
				t.Logf("%d keys written, at most %d with state (bound %d)", steps, most, bound)
			})
		}
	}
}

// testTTLConflicts checks that TTL and non-TTL state of one name conflict,
// in one backend and across a restore.
func testTTLConflicts(t *testing.T, nb nbFunc, newBackend NewBackend) {
	clk := NewManualClock(1000)
	cfg := statebackend.TTLConfig{TTL: time.Hour, Clock: clk.Now}
	ttl := statebackend.WithTTL(cfg)
	b := nb(t, fullRange)
	v, err := statebackend.GetValueState(b, "x", statebackend.Int64Codec, ttl)
	must(t, err)
	l, err := statebackend.GetListState(b, "l", statebackend.Int64Codec, ttl)
	must(t, err)
	setKey(b, "k")
	v.Update(7)
	l.Add(7)
	wantConflict := func(what string, err error, name string) {
		t.Helper()
		if !errors.Is(err, statebackend.ErrConflict) {
			t.Errorf("%s: error %v, want statebackend.ErrConflict", what, err)
		} else if !strings.Contains(err.Error(), fmt.Sprintf("%q", name)) {
			t.Errorf("%s: error %q does not name state %q", what, err, name)
		}
	}
	_, err = statebackend.GetValueState(b, "x", statebackend.Int64Codec)
	wantConflict("TTL value state asked for without TTL", err, "x")
	_, err = statebackend.GetListState(b, "l", statebackend.Int64Codec)
	wantConflict("TTL list state asked for without TTL", err, "l")
	plain, err := statebackend.GetValueState(b, "p", statebackend.StringCodec)
	must(t, err)
	plain.Update("a plain string value")
	_, err = statebackend.GetValueState(b, "p", statebackend.StringCodec, ttl)
	wantConflict("plain value state asked for with TTL", err, "p")
	// Another TTL is the same state: the configuration is the handle's.
	other := cfg
	other.TTL = time.Minute
	_, err = statebackend.GetValueState(b, "x", statebackend.Int64Codec, statebackend.WithTTL(other))
	must(t, err)
	if _, err := statebackend.GetValueState(b, "bad", statebackend.Int64Codec, statebackend.WithTTL(statebackend.TTLConfig{})); err == nil {
		t.Error("a TTL of 0 was accepted")
	}

	snap := snapshot(t, b, 1)
	b2 := restore(t, newBackend, fullRange, snap, 1)
	// Plain state restored as TTL state: the TTL codec rejects it.
	_, err = statebackend.GetValueState(b2, "p", statebackend.StringCodec, ttl)
	wantConflict("restored plain value state asked for with TTL", err, "p")
	// TTL state restored as plain state: the int64 codec rejects it (a
	// string or bytes codec would not: see WithTTL).
	if _, err := statebackend.GetValueState(b2, "x", statebackend.Int64Codec); err == nil || !strings.Contains(err.Error(), `"x"`) {
		t.Errorf("restored TTL value state asked for without TTL: error %v, want one naming state \"x\"", err)
	}
	if _, err := statebackend.GetListState(b2, "l", statebackend.Int64Codec); err == nil || !strings.Contains(err.Error(), `"l"`) {
		t.Errorf("restored TTL list state asked for without TTL: error %v, want one naming state \"l\"", err)
	}
	// The right descriptors still work after the failed attempts.
	v2, err := statebackend.GetValueState(b2, "x", statebackend.Int64Codec, ttl)
	must(t, err)
	l2, err := statebackend.GetListState(b2, "l", statebackend.Int64Codec, ttl)
	must(t, err)
	p2, err := statebackend.GetValueState(b2, "p", statebackend.StringCodec)
	must(t, err)
	setKey(b2, "k")
	if got, _ := v2.Value(); got != 7 {
		t.Errorf("restored TTL value: %d, want 7", got)
	}
	if got := l2.Get(); !slices.Equal(got, []int64{7}) {
		t.Errorf("restored TTL list: %v, want [7]", got)
	}
	if got, _ := p2.Value(); got != "a plain string value" {
		t.Errorf("restored plain value: %q", got)
	}
	// A TTL table asked for before Restore, with plain state in the
	// snapshot: Restore fails.
	b3 := nb(t, fullRange)
	_, err = statebackend.GetValueState(b3, "p", statebackend.StringCodec, ttl)
	must(t, err)
	if err := b3.Restore(&stream.RestoreContext{CheckpointID: 1, KeyGroups: fullRange, State: snap}); err == nil {
		t.Error("Restore of plain state into a TTL table asked for before succeeded")
	}
}

// The differential test: random operations on TTL state of every kind, with
// a manual clock that moves in random steps, against a model that stores
// the same timestamps; every read is compared, and at random points the
// whole state, and a snapshot restored into 1–3 backends (rescaling).

// stamped is a model value with its last-access time.
type stamped[T any] struct {
	v  T
	ts int64
}

type ttlModel struct {
	ttl    int64
	onRead bool
	clk    *ManualClock
	val    map[string]stamped[int64]
	list   map[string][]stamped[string]
	m      map[string]map[string]stamped[int64]
	red    map[string]stamped[int64]
	agg    map[string]stamped[avgAcc]
	// expiredReads counts reads that found a value that had expired.
	expiredReads int
}

func (m *ttlModel) live(ts int64) bool { return ts+m.ttl > m.clk.Now() }

// readStamped reads k of store as a TTL handle does.
func readStamped[T any](m *ttlModel, store map[string]stamped[T], k string) (T, bool) {
	e, ok := store[k]
	if ok && !m.live(e.ts) {
		m.expiredReads++
	}
	if !ok || !m.live(e.ts) {
		delete(store, k)
		var zero T
		return zero, false
	}
	if m.onRead {
		e.ts = m.clk.Now()
		store[k] = e
	}
	return e.v, true
}

// writeStamped writes v under k of *store, making the map if needed.
func writeStamped[T any](m *ttlModel, store *map[string]stamped[T], k string, v T) {
	if *store == nil {
		*store = make(map[string]stamped[T])
	}
	(*store)[k] = stamped[T]{v, m.clk.Now()}
}

func (m *ttlModel) listGet(k string) []string {
	var out []string
	var kept []stamped[string]
	for _, e := range m.list[k] {
		if !m.live(e.ts) {
			continue
		}
		if m.onRead {
			e.ts = m.clk.Now()
		}
		kept = append(kept, e)
		out = append(out, e.v)
	}
	if len(kept) == 0 {
		delete(m.list, k)
	} else {
		m.list[k] = kept
	}
	return out
}

func (m *ttlModel) listAdd(k string, vs ...string) {
	for _, v := range vs {
		m.list[k] = append(m.list[k], stamped[string]{v, m.clk.Now()})
	}
}

// mapRange returns the live entries of k's map (restamping them if reads
// count).
func (m *ttlModel) mapRange(k string) map[string]int64 {
	out := make(map[string]int64)
	for uk := range m.m[k] {
		if v, ok := readStamped(m, m.m[k], uk); ok {
			out[uk] = v
		}
	}
	if len(m.m[k]) == 0 {
		delete(m.m, k)
	}
	return out
}

// describe reads every state of k as ttlStates.describe does.
func (m *ttlModel) describe(k string) string {
	var sb strings.Builder
	if v, ok := readStamped(m, m.val, k); ok {
		fmt.Fprintf(&sb, "val=%d ", v)
	}
	if l := m.listGet(k); len(l) > 0 {
		fmt.Fprintf(&sb, "list=%q ", l)
	}
	if mm := m.mapRange(k); len(mm) > 0 {
		fmt.Fprintf(&sb, "map=%v ", sortedMap(mm))
	}
	if v, ok := readStamped(m, m.red, k); ok {
		fmt.Fprintf(&sb, "red=%d ", v)
	}
	if a, ok := readStamped(m, m.agg, k); ok {
		fmt.Fprintf(&sb, "agg=%g ", avgFunc{}.Result(a))
	}
	return sb.String()
}

// hasLive reports whether k has live state in table (without reading it).
func (m *ttlModel) hasLive(table, k string) bool {
	switch table {
	case tVal:
		e, ok := m.val[k]
		return ok && m.live(e.ts)
	case tList:
		return slices.ContainsFunc(m.list[k], func(e stamped[string]) bool { return m.live(e.ts) })
	case tMap:
		for _, e := range m.m[k] {
			if m.live(e.ts) {
				return true
			}
		}
		return false
	case tRed:
		e, ok := m.red[k]
		return ok && m.live(e.ts)
	case tAgg:
		e, ok := m.agg[k]
		return ok && m.live(e.ts)
	}
	panic("unknown table " + table)
}

type ttlPart struct {
	b statebackend.Backend
	s *ttlStates
}

type ttlHarness struct {
	t          *testing.T
	newBackend NewBackend
	rng        *rand.Rand
	cfg        statebackend.TTLConfig
	clk        *ManualClock
	parts      []*ttlPart
	m          *ttlModel
	keys       []string
	ckpt       int64
	restores   int
	reads      int // reads compared
	expired    int // reads the model says found nothing
}

func testTTLModel(t *testing.T, newBackend NewBackend, sz Sizes) {
	seeds := []uint64{1, 2, 3, 4}
	steps := 3000
	if testing.Short() {
		seeds, steps = seeds[:2], 1000
	}
	seeds, steps = sz.model(seeds, steps)
	for _, upd := range ttlUpdates {
		for _, seed := range seeds {
			t.Run(fmt.Sprintf("%s/seed=%d", upd, seed), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, seed*104729))
				clk := NewManualClock(1_700_000_000_000)
				per := []int{0, 1, statebackend.DefaultCleanupPerAccess}[rng.IntN(3)]
				h := &ttlHarness{
					t:          t,
					newBackend: newBackend,
					rng:        rng,
					clk:        clk,
					cfg:        statebackend.TTLConfig{TTL: modelTTL * time.Millisecond, Update: upd, Clock: clk.Now, CleanupPerAccess: per},
					m: &ttlModel{
						ttl: modelTTL, onRead: upd == statebackend.UpdateOnReadAndWrite, clk: clk,
						val: map[string]stamped[int64]{}, list: map[string][]stamped[string]{},
						m: map[string]map[string]stamped[int64]{}, red: map[string]stamped[int64]{},
						agg: map[string]stamped[avgAcc]{},
					},
					keys: keysIn(fullRange, 32),
				}
				h.open(1+rng.IntN(3), nil)
				for step := range steps {
					h.step(step)
					if t.Failed() {
						t.Fatalf("seed %d, cleanup %d per access: failed at step %d", seed, per, step)
					}
				}
				h.compareAll("end")
				t.Logf("%d steps, cleanup %d per access: %d reads compared (%d found nothing), %d values found expired, %d restores",
					steps, per, h.reads, h.expired, h.m.expiredReads, h.restores)
				if h.expired == h.reads || h.m.expiredReads == 0 {
					t.Errorf("the test did not exercise both live and expired reads")
				}
			})
		}
	}
}

func (h *ttlHarness) partFor(key string) *ttlPart {
	kg := kgOf(key)
	for _, p := range h.parts {
		if p.b.KeyGroups().Contains(kg) {
			return p
		}
	}
	h.t.Fatalf("no backend owns key group %d", kg)
	return nil
}

func (h *ttlHarness) open(n int, snap *stream.OperatorSnapshot) {
	h.parts = nil
	for i := range n {
		r := stream.KeyGroupRangeFor(maxPar, n, i)
		b := h.newBackend(r)
		h.t.Cleanup(func() { b.Close() })
		p := &ttlPart{b: b}
		early := h.rng.IntN(2) == 0
		if early {
			p.s = openTTLStates(h.t, b, h.cfg)
		}
		if snap != nil {
			if err := b.Restore(&stream.RestoreContext{CheckpointID: h.ckpt, KeyGroups: r, State: snap}); err != nil {
				h.t.Fatalf("Restore into %v: %v", r, err)
			}
		}
		if !early {
			p.s = openTTLStates(h.t, b, h.cfg)
		}
		h.parts = append(h.parts, p)
	}
}

// read records a compared read and whether the model found something.
func (h *ttlHarness) read(found bool) {
	h.reads++
	if !found {
		h.expired++
	}
}

func (h *ttlHarness) step(step int) {
	t, rng, m := h.t, h.rng, h.m
	key := h.keys[rng.IntN(len(h.keys))]
	p := h.partFor(key)
	s := p.s
	setKey(p.b, key)
	uk := fmt.Sprintf("u%d", rng.IntN(5))
	switch op := rng.IntN(100); {
	case op < 6:
		v := rng.Int64N(1000)
		s.val.Update(v)
		writeStamped(m, &m.val, key, v)
	case op < 7:
		s.val.Clear()
		delete(m.val, key)
	case op < 12:
		v, ok := s.val.Value()
		mv, mok := readStamped(m, m.val, key)
		h.read(mok)
		if v != mv || ok != mok {
			t.Errorf("step %d key %s: Value() = %d, %v; model %d, %v", step, key, v, ok, mv, mok)
		}
	case op < 17:
		v := fmt.Sprint(rng.IntN(100))
		s.list.Add(v)
		m.listAdd(key, v)
	case op < 19:
		vs := []string{fmt.Sprint(rng.IntN(10)), fmt.Sprint(rng.IntN(10))}
		s.list.AddAll(vs)
		m.listAdd(key, vs...)
	case op < 20:
		vs := make([]string, rng.IntN(3))
		for i := range vs {
			vs[i] = fmt.Sprint(rng.IntN(10))
		}
		s.list.Update(vs)
		delete(m.list, key)
		m.listAdd(key, vs...)
	case op < 21:
		s.list.Clear()
		delete(m.list, key)
	case op < 26:
		got, want := s.list.Get(), m.listGet(key)
		h.read(len(want) > 0)
		if !slices.Equal(got, want) {
			t.Errorf("step %d key %s: list Get() = %q, model %q", step, key, got, want)
		}
	case op < 33:
		v := rng.Int64N(100)
		s.m.Put(uk, v)
		if m.m[key] == nil {
			m.m[key] = make(map[string]stamped[int64])
		}
		m.m[key][uk] = stamped[int64]{v, h.clk.Now()}
	case op < 35:
		s.m.Remove(uk)
		delete(m.m[key], uk)
	case op < 40:
		v, ok := s.m.Get(uk)
		c := s.m.Contains(uk)
		mv, mok := readStamped(m, m.m[key], uk)
		h.read(mok)
		if v != mv || ok != mok || c != mok {
			t.Errorf("step %d key %s: map Get(%s) = %d, %v, Contains %v; model %d, %v", step, key, uk, v, ok, c, mv, mok)
		}
	case op < 43:
		// Range, removing odd values half of the time.
		remove := rng.IntN(2) == 0
		got := make(map[string]int64)
		s.m.Range(func(k string, v int64) bool {
			got[k] = v
			if remove && v%2 == 1 {
				s.m.Remove(k)
			}
			return true
		})
		want := m.mapRange(key)
		h.read(len(want) > 0)
		if !maps.Equal(got, want) {
			t.Errorf("step %d key %s: map Range = %v, model %v", step, key, got, want)
		}
		if remove {
			for k, v := range want {
				if v%2 == 1 {
					delete(m.m[key], k)
				}
			}
		}
	case op < 45:
		empty := true
		for _, e := range m.m[key] {
			if m.live(e.ts) {
				empty = false
			}
		}
		h.read(!empty)
		if got := s.m.IsEmpty(); got != empty {
			t.Errorf("step %d key %s: map IsEmpty() = %v, model %v", step, key, got, empty)
		}
	case op < 46:
		s.m.Clear()
		delete(m.m, key)
	case op < 51:
		v := rng.Int64N(50)
		s.red.Add(v)
		if cur, ok := m.red[key]; ok && m.live(cur.ts) {
			v += cur.v
		}
		writeStamped(m, &m.red, key, v)
	case op < 52:
		s.red.Clear()
		delete(m.red, key)
	case op < 56:
		v, ok := s.red.Get()
		mv, mok := readStamped(m, m.red, key)
		h.read(mok)
		if v != mv || ok != mok {
			t.Errorf("step %d key %s: reducing Get() = %d, %v; model %d, %v", step, key, v, ok, mv, mok)
		}
	case op < 61:
		v := rng.Int64N(50)
		s.agg.Add(v)
		var acc avgAcc
		if cur, ok := m.agg[key]; ok && m.live(cur.ts) {
			acc = cur.v
		}
		writeStamped(m, &m.agg, key, avgFunc{}.Add(v, acc))
	case op < 62:
		s.agg.Clear()
		delete(m.agg, key)
	case op < 66:
		v, ok := s.agg.Get()
		a, mok := readStamped(m, m.agg, key)
		h.read(mok)
		var mv float64
		if mok {
			mv = avgFunc{}.Result(a)
		}
		if v != mv || ok != mok {
			t.Errorf("step %d key %s: aggregating Get() = %g, %v; model %g, %v", step, key, v, ok, mv, mok)
		}
	case op < 68:
		if got, want := s.describe(), m.describe(key); got != want {
			t.Errorf("step %d key %s: state %q, model %q", step, key, got, want)
		}
	case op < 80:
		// Mostly small steps; now and then past the TTL.
		if rng.IntN(40) == 0 {
			h.clk.Advance(modelTTL + rng.Int64N(modelTTL))
		} else {
			h.clk.Advance(rng.Int64N(modelTTL / 50))
		}
	case op < 82:
		h.compareAll(fmt.Sprintf("step %d", step))
	case op < 84:
		h.rescale(step)
	}
}

// compareAll reads all state of every key on both sides, and checks that
// Keys gives every key with live state.
func (h *ttlHarness) compareAll(when string) {
	for _, table := range tableNames {
		have := make(map[string]bool)
		for _, p := range h.parts {
			maps.Copy(have, keysOf(p.b, table))
		}
		for _, k := range h.keys {
			if h.m.hasLive(table, k) && !have[k] {
				h.t.Errorf("%s: Keys(%s) does not give key %s, which has live state", when, table, k)
			}
		}
		for k := range have {
			if !slices.Contains(h.keys, k) {
				h.t.Errorf("%s: Keys(%s) gives unknown key %q", when, table, k)
			}
		}
	}
	for _, k := range h.keys {
		p := h.partFor(k)
		setKey(p.b, k)
		if got, want := p.s.describe(), h.m.describe(k); got != want {
			h.t.Errorf("%s: key %s: state %q, model %q", when, k, got, want)
		}
	}
}

// rescale snapshots every backend and restores into 1–3 new ones, at the
// same clock; changes made after the snapshot must not come back.
func (h *ttlHarness) rescale(step int) {
	h.ckpt++
	var snaps []*stream.OperatorSnapshot
	for _, p := range h.parts {
		snaps = append(snaps, snapshot(h.t, p.b, h.ckpt))
	}
	if h.rng.IntN(2) == 0 {
		for _, k := range h.keys {
			p := h.partFor(k)
			setKey(p.b, k)
			p.s.val.Update(-12345)
			p.s.list.Add("after-snapshot")
			p.s.m.Put("u0", -1)
		}
	}
	for _, p := range h.parts {
		p.b.Close()
	}
	h.open(1+h.rng.IntN(3), mergeSnapshots(snaps...))
	h.restores++
	h.compareAll(fmt.Sprintf("step %d: after restoring into %d backends", step, len(h.parts)))
}
