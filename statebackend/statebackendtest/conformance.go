package statebackendtest

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"testing"

	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/stream"
)

// RunConformance runs the whole suite against the backends newBackend makes.
// Every backend returned must be empty; the suite closes them.
func RunConformance(t *testing.T, newBackend NewBackend) {
	RunConformanceSized(t, newBackend, Sizes{})
}

// RunConformanceSized is RunConformance with the randomised model test
// sized by sz (zero fields: RunConformance's sizes).
func RunConformanceSized(t *testing.T, newBackend NewBackend, sz Sizes) {
	nb := func(t *testing.T, r stream.KeyGroupRange) statebackend.Backend {
		b := newBackend(r)
		t.Cleanup(func() { b.Close() })
		return b
	}
	tests := []struct {
		name string
		fn   func(t *testing.T, nb func(*testing.T, stream.KeyGroupRange) statebackend.Backend, newBackend NewBackend)
	}{
		{"CurrentKey", testCurrentKey},
		{"ValueState", testValueState},
		{"ValueCodecs", testValueCodecs},
		{"ListState", testListState},
		{"MapState", testMapState},
		{"ReducingState", testReducingState},
		{"AggregatingState", testAggregatingState},
		{"KeyIsolation", testKeyIsolation},
		{"KeyGroupIsolation", testKeyGroupIsolation},
		{"Keys", testKeys},
		{"KeysDeletingOthers", testKeysDeletingOthers},
		{"TimerOrder/event", inDomain(eventTime, testTimerOrder)},
		{"TimerOrder/processing", inDomain(processingTime, testTimerOrder)},
		{"TimerDedupAndDelete/event", inDomain(eventTime, testTimerDedupAndDelete)},
		{"TimerDedupAndDelete/processing", inDomain(processingTime, testTimerDedupAndDelete)},
		{"TimerCurrentKey/event", inDomain(eventTime, testTimerCurrentKey)},
		{"TimerCurrentKey/processing", inDomain(processingTime, testTimerCurrentKey)},
		{"TimerRegisterDuringFiring/event", inDomain(eventTime, testTimerRegisterDuringFiring)},
		{"TimerRegisterDuringFiring/processing", inDomain(processingTime, testTimerRegisterDuringFiring)},
		{"TimerFireError/event", inDomain(eventTime, testTimerFireError)},
		{"TimerFireError/processing", inDomain(processingTime, testTimerFireError)},
		{"Watermark", testWatermark},
		{"ProcTimerPast", testProcTimerPast},
		{"TimerDomains", testTimerDomains},
		{"SnapshotRestore", testSnapshotRestore},
		{"RestoreBeforeRegister", testRestoreBeforeRegister},
		{"RestoreSmallerRange", testRestoreSmallerRange},
		{"RestoreMergedRanges", testRestoreMergedRanges},
		{"SnapshotDoesNotAlias", testSnapshotDoesNotAlias},
		{"SnapshotEmpty", testSnapshotEmpty},
		{"RestoreCorrupt", testRestoreCorrupt},
		{"DescriptorConflict", testDescriptorConflict},
		{"RestoredDescriptorConflict", testRestoredDescriptorConflict},
		{"SizeBytes", testSizeBytes},
		{"Close", testClose},
		{"Model", func(t *testing.T, _ nbFunc, newBackend NewBackend) { testModel(t, newBackend, sz) }},
		{"Slots", testSlots},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, nb, newBackend) })
	}
}

type nbFunc = func(*testing.T, stream.KeyGroupRange) statebackend.Backend

func testCurrentKey(t *testing.T, nb nbFunc, _ NewBackend) {
	r := stream.KeyGroupRange{Start: 2, End: 5}
	b := nb(t, r)
	if got := b.KeyGroups(); got != r {
		t.Fatalf("KeyGroups() = %v, want %v", got, r)
	}
	b.SetCurrentKey([]byte("k"), 4)
	if k, kg := b.CurrentKey(); string(k) != "k" || kg != 4 {
		t.Fatalf("CurrentKey() = %q, %d; want k, 4", k, kg)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("SetCurrentKey with a key group outside the range did not panic")
			}
		}()
		b.SetCurrentKey([]byte("k"), 6)
	}()
}

func testValueState(t *testing.T, nb nbFunc, _ NewBackend) {
	b := nb(t, fullRange)
	s, err := statebackend.GetValueState(b, "v", statebackend.Int64Codec)
	if err != nil {
		t.Fatal(err)
	}
	setKey(b, "a")
	if v, ok := s.Value(); ok {
		t.Fatalf("Value() of a new key = %d, true", v)
	}
	steps := []struct {
		update *int64
		clear  bool
		want   int64
		ok     bool
	}{
		{update: ptr(int64(5)), want: 5, ok: true},
		{update: ptr(int64(-1 << 40)), want: -1 << 40, ok: true},
		{update: ptr(int64(0)), want: 0, ok: true},
		{clear: true},
		{clear: true},
		{update: ptr(int64(math.MaxInt64)), want: math.MaxInt64, ok: true},
	}
	for i, st := range steps {
		if st.update != nil {
			s.Update(*st.update)
		}
		if st.clear {
			s.Clear()
		}
		if v, ok := s.Value(); v != st.want || ok != st.ok {
			t.Fatalf("step %d: Value() = %d, %v; want %d, %v", i, v, ok, st.want, st.ok)
		}
	}
	// A second handle on the same name sees the same state.
	s2, err := statebackend.GetValueState(b, "v", statebackend.Int64Codec)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := s2.Value(); v != math.MaxInt64 {
		t.Fatalf("second handle: Value() = %d, want %d", v, int64(math.MaxInt64))
	}
}

func ptr[T any](v T) *T { return &v }

type event struct {
	ID   string
	N    int
	Tags []string
}

// testValueCodecs round-trips every built-in codec through snapshot and
// restore.
func testValueCodecs(t *testing.T, nb nbFunc, newBackend NewBackend) {
	b := nb(t, fullRange)
	type handles struct {
		i statebackend.ValueState[int64]
		f statebackend.ValueState[float64]
		s statebackend.ValueState[string]
		y statebackend.ValueState[[]byte]
		o statebackend.ValueState[bool]
		j statebackend.ValueState[event]
	}
	open := func(b statebackend.Backend) handles {
		var h handles
		var err error
		h.i, err = statebackend.GetValueState(b, "i", statebackend.Int64Codec)
		must(t, err)
		h.f, err = statebackend.GetValueState(b, "f", statebackend.Float64Codec)
		must(t, err)
		h.s, err = statebackend.GetValueState(b, "s", statebackend.StringCodec)
		must(t, err)
		h.y, err = statebackend.GetValueState(b, "y", statebackend.BytesCodec)
		must(t, err)
		h.o, err = statebackend.GetValueState(b, "o", statebackend.BoolCodec)
		must(t, err)
		h.j, err = statebackend.GetValueState(b, "j", statebackend.JSONCodec[event]())
		must(t, err)
		return h
	}
	h := open(b)
	ev := event{ID: "x", N: 3, Tags: []string{"a", "b"}}
	setKey(b, "k")
	h.i.Update(-7)
	h.f.Update(math.Inf(-1))
	h.s.Update("héllo\x00")
	h.y.Update([]byte{0, 1, 2})
	h.o.Update(true)
	h.j.Update(ev)
	setKey(b, "empty-values")
	h.s.Update("")
	h.y.Update([]byte{})
	h.o.Update(false)

	b2 := restore(t, newBackend, fullRange, snapshot(t, b, 1), 1)
	h2 := open(b2)
	setKey(b2, "k")
	checkValue(t, h2.i, int64(-7))
	checkValue(t, h2.f, math.Inf(-1))
	checkValue(t, h2.s, "héllo\x00")
	checkValue(t, h2.y, []byte{0, 1, 2})
	checkValue(t, h2.o, true)
	checkValue(t, h2.j, ev)
	setKey(b2, "empty-values")
	checkValue(t, h2.s, "")
	checkValue(t, h2.o, false)
	if v, ok := h2.y.Value(); !ok || len(v) != 0 {
		t.Errorf("empty bytes: Value() = %q, %v; want empty, true", v, ok)
	}
	if _, ok := h2.i.Value(); ok {
		t.Errorf("int state of key empty-values exists after restore")
	}
}

func checkValue[T any](t *testing.T, s statebackend.ValueState[T], want T) {
	t.Helper()
	got, ok := s.Value()
	if !ok || !reflect.DeepEqual(got, want) {
		t.Errorf("Value() = %v, %v; want %v, true", got, ok, want)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func testListState(t *testing.T, nb nbFunc, _ NewBackend) {
	b := nb(t, fullRange)
	l, err := statebackend.GetListState(b, "l", statebackend.StringCodec)
	must(t, err)
	setKey(b, "a")
	check := func(step string, want []string) {
		t.Helper()
		got := l.Get()
		if len(want) == 0 {
			if got != nil {
				t.Fatalf("%s: Get() = %q, want nil", step, got)
			}
			return
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%s: Get() = %q, want %q", step, got, want)
		}
	}
	check("new key", nil)
	l.Add("x")
	check("Add", []string{"x"})
	l.AddAll([]string{"y", "z"})
	check("AddAll", []string{"x", "y", "z"})
	l.AddAll(nil)
	check("AddAll(nil)", []string{"x", "y", "z"})

	// The slice Get returns is a view that later changes do not affect,
	// and appending to it does not change the state (nor does the state
	// write into the caller's appended elements). Enough elements are added
	// one by one that a slice would have spare capacity.
	for _, v := range []string{"4", "5", "6", "7", "8", "9"} {
		l.Add(v)
	}
	all := []string{"x", "y", "z", "4", "5", "6", "7", "8", "9"}
	view := l.Get()
	mine := append(view, "mine")
	l.Add("w")
	if !slices.Equal(view, all) {
		t.Fatalf("a slice from Get changed to %q after Add", view)
	}
	if mine[len(mine)-1] != "mine" {
		t.Fatalf("Add wrote into the caller's slice: %q", mine)
	}
	check("append to Get's result, then Add", append(slices.Clone(all), "w"))

	in := []string{"p", "q"}
	l.Update(in)
	in[0] = "changed"
	check("Update copies its argument", []string{"p", "q"})
	l.Update(nil)
	check("Update(nil) clears", nil)
	l.Add("r")
	l.Clear()
	check("Clear", nil)
	l.Add("")
	check("empty element", []string{""})
	var keys []string
	b.Keys("l", kgOf("a"), func(k []byte) bool { keys = append(keys, string(k)); return true })
	if !slices.Equal(keys, []string{"a"}) {
		t.Fatalf("Keys = %q, want [a]", keys)
	}
	l.Update([]string{})
	b.Keys("l", kgOf("a"), func(k []byte) bool { t.Errorf("Keys after Update(empty) returned %q", k); return true })
}

func testMapState(t *testing.T, nb nbFunc, _ NewBackend) {
	b := nb(t, fullRange)
	m, err := statebackend.GetMapState(b, "m", statebackend.StringCodec, statebackend.Int64Codec)
	must(t, err)
	setKey(b, "a")
	want := map[string]int64{}
	check := func(step string) {
		t.Helper()
		got := map[string]int64{}
		m.Range(func(k string, v int64) bool { got[k] = v; return true })
		if !maps.Equal(got, want) {
			t.Fatalf("%s: Range gives %v, want %v", step, got, want)
		}
		if m.IsEmpty() != (len(want) == 0) {
			t.Fatalf("%s: IsEmpty() = %v with %d entries", step, m.IsEmpty(), len(want))
		}
		for _, k := range []string{"", "x", "y", "z", "missing"} {
			v, ok := m.Get(k)
			wv, wok := want[k]
			if v != wv || ok != wok || m.Contains(k) != wok {
				t.Fatalf("%s: Get(%q) = %d, %v, Contains %v; want %d, %v", step, k, v, ok, m.Contains(k), wv, wok)
			}
		}
	}
	check("new key")
	m.Put("x", 1)
	m.Put("y", 2)
	m.Put("", 3)
	want = map[string]int64{"x": 1, "y": 2, "": 3}
	check("Put")
	m.Put("x", 10)
	want["x"] = 10
	check("overwrite")
	m.Remove("y")
	m.Remove("missing")
	delete(want, "y")
	check("Remove")

	// Early stop.
	n := 0
	m.Range(func(string, int64) bool { n++; return false })
	if n != 1 {
		t.Fatalf("Range after returning false went on: %d calls", n)
	}
	// Removing during Range.
	m.Put("z", 4)
	want["z"] = 4
	m.Range(func(k string, v int64) bool {
		if v%2 == 0 {
			m.Remove(k)
			delete(want, k)
		}
		return true
	})
	check("Remove during Range")
	// Overwriting the entry fn is given, during Range.
	m.Range(func(k string, v int64) bool {
		m.Put(k, v+100)
		want[k] = v + 100
		return true
	})
	check("Put of the given entry during Range")
	m.Clear()
	want = map[string]int64{}
	check("Clear")
	b.Keys("m", kgOf("a"), func(k []byte) bool { t.Errorf("Keys after Clear returned %q", k); return true })
	m.Put("x", 1)
	m.Remove("x")
	b.Keys("m", kgOf("a"), func(k []byte) bool { t.Errorf("Keys after removing the last entry returned %q", k); return true })

	// Non-string user keys.
	mi, err := statebackend.GetMapState(b, "mi", statebackend.Int64Codec, statebackend.StringCodec)
	must(t, err)
	for i := int64(-3); i <= 3; i++ {
		mi.Put(i*1000, fmt.Sprint(i))
	}
	got := map[int64]string{}
	mi.Range(func(k int64, v string) bool { got[k] = v; return true })
	if len(got) != 7 || got[-3000] != "-3" || got[3000] != "3" {
		t.Fatalf("int64-keyed map: %v", got)
	}
}

func testReducingState(t *testing.T, nb nbFunc, _ NewBackend) {
	b := nb(t, fullRange)
	maxOf := func(a, b int64) int64 { return max(a, b) }
	r, err := statebackend.GetReducingState(b, "r", statebackend.Int64Codec, maxOf)
	must(t, err)
	setKey(b, "a")
	if _, ok := r.Get(); ok {
		t.Fatal("Get() of a new key reports a value")
	}
	var want int64 = math.MinInt64
	for _, v := range []int64{3, -1, 7, 7, 2} {
		r.Add(v)
		want = max(want, v)
		if got, ok := r.Get(); !ok || got != want {
			t.Fatalf("after Add(%d): Get() = %d, %v; want %d", v, got, ok, want)
		}
	}
	r.Clear()
	if _, ok := r.Get(); ok {
		t.Fatal("Get() after Clear reports a value")
	}
	r.Add(-5)
	if got, _ := r.Get(); got != -5 {
		t.Fatalf("first Add after Clear: Get() = %d, want -5 (reduce must not see the cleared value)", got)
	}
	if _, err := statebackend.GetReducingState(b, "r2", statebackend.Int64Codec, nil); err == nil {
		t.Error("GetReducingState with a nil function succeeded")
	}
}

func testAggregatingState(t *testing.T, nb nbFunc, _ NewBackend) {
	b := nb(t, fullRange)
	a, err := statebackend.GetAggregatingState(b, "a", statebackend.JSONCodec[avgAcc](), statebackend.AggregateFunction[int64, avgAcc, float64](avgFunc{}))
	must(t, err)
	setKey(b, "k")
	if _, ok := a.Get(); ok {
		t.Fatal("Get() of a new key reports a value")
	}
	var sum, n int64
	for _, v := range []int64{4, 8, 1, -3} {
		a.Add(v)
		sum += v
		n++
		if got, ok := a.Get(); !ok || got != float64(sum)/float64(n) {
			t.Fatalf("after Add(%d): Get() = %g, %v; want %g", v, got, ok, float64(sum)/float64(n))
		}
	}
	a.Clear()
	if _, ok := a.Get(); ok {
		t.Fatal("Get() after Clear reports a value")
	}
	a.Add(10)
	if got, _ := a.Get(); got != 10 {
		t.Fatalf("after Clear and Add(10): Get() = %g, want 10", got)
	}
}

// populate writes deterministic state of every kind, and timers, for keys.
// Key i gets: val i*10; list of i%3 elements; map of i%4 entries; reducing
// sum i+(i+1); average of {i, 2i} for even i; event-time timers at 100+i
// and, for odd i, 1000+i; processing-time timers at 200+i and, for i%3 ==
// 0, 100+i (the time of its event-time timer: another timer).
func populate(s *states, keys []string) {
	for i, k := range keys {
		setKey(s.b, k)
		s.val.Update(int64(i * 10))
		for j := range i % 3 {
			s.list.Add(fmt.Sprintf("%s-%d", k, j))
		}
		for j := range i % 4 {
			s.m.Put(fmt.Sprintf("u%d", j), int64(i*100+j))
		}
		s.red.Add(int64(i))
		s.red.Add(int64(i + 1))
		if i%2 == 0 {
			s.agg.Add(int64(i))
			s.agg.Add(int64(2 * i))
		}
		s.b.Timers().RegisterEventTimeTimer(int64(100 + i))
		if i%2 == 1 {
			s.b.Timers().RegisterEventTimeTimer(int64(1000 + i))
		}
		s.b.Timers().RegisterProcessingTimeTimer(int64(200 + i))
		if i%3 == 0 {
			s.b.Timers().RegisterProcessingTimeTimer(int64(100 + i))
		}
	}
}

// expectPopulated is the independent computation of dump after populate.
func expectPopulated(keys []string) map[string]string {
	out := make(map[string]string)
	for i, k := range keys {
		d := fmt.Sprintf("val=%d ", i*10)
		if n := i % 3; n > 0 {
			var l []string
			for j := range n {
				l = append(l, fmt.Sprintf("%s-%d", k, j))
			}
			d += fmt.Sprintf("list=%q ", l)
		}
		if n := i % 4; n > 0 {
			m := make(map[string]int64)
			for j := range n {
				m[fmt.Sprintf("u%d", j)] = int64(i*100 + j)
			}
			d += fmt.Sprintf("map=%v ", sortedMap(m))
		}
		d += fmt.Sprintf("red=%d ", 2*i+1)
		if i%2 == 0 {
			d += fmt.Sprintf("agg=%g ", float64(3*i)/2)
		}
		out[fmt.Sprintf("%d/%s", kgOf(k), k)] = d
	}
	return out
}

func expectTimers(keys []string) []firedTimer {
	var out []firedTimer
	for i, k := range keys {
		out = append(out, firedTimer{k, kgOf(k), int64(100 + i)})
		if i%2 == 1 {
			out = append(out, firedTimer{k, kgOf(k), int64(1000 + i)})
		}
	}
	return sortFired(out)
}

// expectProcTimers is the independent computation of the processing-time
// timers after populate.
func expectProcTimers(keys []string) []firedTimer {
	var out []firedTimer
	for i, k := range keys {
		out = append(out, firedTimer{k, kgOf(k), int64(200 + i)})
		if i%3 == 0 {
			out = append(out, firedTimer{k, kgOf(k), int64(100 + i)})
		}
	}
	return sortFired(out)
}

// inRange keeps the timers of key groups in r.
func inRange(timers []firedTimer, r stream.KeyGroupRange) []firedTimer {
	var out []firedTimer
	for _, f := range timers {
		if r.Contains(f.KG) {
			out = append(out, f)
		}
	}
	return out
}

// checkNextProcessingTime checks b's NextProcessingTime against the
// earliest of want (none if want is empty).
func checkNextProcessingTime(t *testing.T, what string, b statebackend.Backend, want []firedTimer) {
	t.Helper()
	ts, ok := b.Timers().NextProcessingTime()
	switch {
	case len(want) == 0 && ok:
		t.Errorf("%s: NextProcessingTime() = %d, true; want none", what, ts)
	case len(want) > 0 && (!ok || ts != slices.MinFunc(want, compareFired).TS):
		t.Errorf("%s: NextProcessingTime() = %d, %v; want %d, true", what, ts, ok, slices.MinFunc(want, compareFired).TS)
	}
}

func checkDump(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	for k, w := range want {
		if g, ok := got[k]; !ok {
			t.Errorf("%s: key %s missing (want %s)", what, k, w)
		} else if g != w {
			t.Errorf("%s: key %s = %s, want %s", what, k, g, w)
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: unexpected key %s = %s", what, k, g)
		}
	}
}

func checkTimers(t *testing.T, what string, got, want []firedTimer) {
	t.Helper()
	got = sortFired(got)
	if !slices.Equal(got, want) {
		t.Errorf("%s: fired %d timers %v\nwant %d: %v", what, len(got), got, len(want), want)
	}
}

func testKeyIsolation(t *testing.T, nb nbFunc, _ NewBackend) {
	b := nb(t, fullRange)
	s := openStates(t, b)
	keys := keysIn(fullRange, 40)
	populate(s, keys)
	checkDump(t, "after populate", s.dump(t), expectPopulated(keys))
	// Clearing one key leaves the others.
	setKey(b, keys[3])
	s.val.Clear()
	s.list.Clear()
	s.m.Clear()
	s.red.Clear()
	s.agg.Clear()
	want := expectPopulated(keys)
	delete(want, fmt.Sprintf("%d/%s", kgOf(keys[3]), keys[3]))
	checkDump(t, "after clearing one key", s.dump(t), want)
}

// testKeyGroupIsolation uses the same key bytes in two key groups: they are
// different keys.
func testKeyGroupIsolation(t *testing.T, nb nbFunc, _ NewBackend) {
	b := nb(t, fullRange)
	s := openStates(t, b)
	for kg := range maxPar {
		b.SetCurrentKey([]byte("same"), kg)
		s.val.Update(int64(kg))
		s.m.Put("u", int64(kg))
		s.list.Add(fmt.Sprint(kg))
		b.Timers().RegisterEventTimeTimer(int64(kg))
	}
	for kg := range maxPar {
		b.SetCurrentKey([]byte("same"), kg)
		if v, _ := s.val.Value(); v != int64(kg) {
			t.Errorf("key group %d: value %d", kg, v)
		}
		if v, _ := s.m.Get("u"); v != int64(kg) {
			t.Errorf("key group %d: map value %d", kg, v)
		}
		if l := s.list.Get(); !slices.Equal(l, []string{fmt.Sprint(kg)}) {
			t.Errorf("key group %d: list %q", kg, l)
		}
		n := 0
		b.Keys(tVal, kg, func(k []byte) bool { n++; return true })
		if n != 1 {
			t.Errorf("key group %d: %d keys", kg, n)
		}
	}
	fired := fireAll(t, b, 100)
	if len(fired) != maxPar {
		t.Fatalf("fired %d timers, want %d", len(fired), maxPar)
	}
	for _, f := range fired {
		if f.TS != int64(f.KG) {
			t.Errorf("timer %d fired for key group %d", f.TS, f.KG)
		}
	}
}

func testKeys(t *testing.T, nb nbFunc, _ NewBackend) {
	r := stream.KeyGroupRange{Start: 1, End: 6}
	b := nb(t, r)
	s := openStates(t, b)
	keys := keysIn(r, 30)
	for i, k := range keys {
		setKey(b, k)
		if i%2 == 0 {
			s.val.Update(1)
		} else {
			s.m.Put("x", 1)
		}
	}
	for kg := r.Start; kg <= r.End; kg++ {
		var want, got []string
		for i, k := range keys {
			if kgOf(k) == kg && i%2 == 0 {
				want = append(want, k)
			}
		}
		b.Keys(tVal, kg, func(k []byte) bool { got = append(got, string(k)); return true })
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("Keys(val, %d) = %q, want %q", kg, got, want)
		}
	}
	// Early stop, unknown tables and key groups outside the range.
	n := 0
	for kg := r.Start; kg <= r.End; kg++ {
		b.Keys(tMap, kg, func([]byte) bool { n++; return false })
	}
	if n == 0 || n > r.Len() {
		t.Errorf("Keys with early stop: %d calls over %d key groups", n, r.Len())
	}
	b.Keys("nope", r.Start, func(k []byte) bool { t.Errorf("unknown table yields %q", k); return true })
	b.Keys(tVal, 0, func(k []byte) bool { t.Errorf("key group outside the range yields %q", k); return true })
	// fn may clear the state of the key it is given: every key is still
	// visited once.
	for kg := r.Start; kg <= r.End; kg++ {
		var want []string
		for i, k := range keys {
			if kgOf(k) == kg && i%2 == 1 {
				want = append(want, k)
			}
		}
		var got []string
		b.Keys(tMap, kg, func(k []byte) bool {
			got = append(got, string(k))
			b.SetCurrentKey(k, kg)
			s.m.Clear()
			return true
		})
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("Keys(map, %d) clearing as it goes visited %q, want %q", kg, got, want)
		}
		b.Keys(tMap, kg, func(k []byte) bool { t.Errorf("key %q left after clearing", k); return true })
	}
	// Likewise for a value table, in a second pass over the same keys.
	for kg := r.Start; kg <= r.End; kg++ {
		n := 0
		b.Keys(tVal, kg, func(k []byte) bool {
			n++
			if n%2 == 0 {
				b.SetCurrentKey(k, kg)
				s.val.Clear()
			}
			return true
		})
		m := 0
		b.Keys(tVal, kg, func([]byte) bool { m++; return true })
		if m != n-n/2 {
			t.Errorf("Keys(val, %d): visited %d, cleared %d, %d left", kg, n, n/2, m)
		}
	}
	// The key slice belongs to fn: keep it and use it as the current key.
	var kept [][]byte
	b.Keys(tVal, kgOf(keys[0]), func(k []byte) bool { kept = append(kept, k); return true })
	for _, k := range kept {
		b.SetCurrentKey(k, kgOf(keys[0]))
		if v, ok := s.val.Value(); !ok || v != 1 {
			t.Errorf("key %q kept from Keys: Value() = %d, %v", k, v, ok)
		}
	}
}

// testKeysDeletingOthers deletes, from fn, state of keys Keys has not given
// yet (as TTL cleanup may): no key is given twice, and every key that keeps
// its state is given.
func testKeysDeletingOthers(t *testing.T, nb nbFunc, _ NewBackend) {
	b := nb(t, fullRange)
	s := openStates(t, b)
	keys := keysIn(fullRange, 400)
	for _, table := range []string{tVal, tMap} {
		for _, k := range keys {
			setKey(b, k)
			s.val.Update(1)
			s.m.Put("u", 1)
		}
		for kg := range maxPar {
			var mine []string
			for _, k := range keys {
				if kgOf(k) == kg {
					mine = append(mine, k)
				}
			}
			given := make(map[string]int)
			deleted := make(map[string]bool)
			b.Keys(table, kg, func(k []byte) bool {
				given[string(k)]++
				// Delete the state of two keys not given yet.
				n := 0
				for _, o := range mine {
					if n < 2 && given[o] == 0 && !deleted[o] && o != string(k) {
						setKey(b, o)
						s.val.Clear()
						s.m.Clear()
						deleted[o] = true
						n++
					}
				}
				return true
			})
			for _, k := range mine {
				if given[k] > 1 {
					t.Errorf("Keys(%s, %d) gave %s %d times", table, kg, k, given[k])
				}
				if !deleted[k] && given[k] == 0 {
					t.Errorf("Keys(%s, %d) did not give %s, whose state was not deleted", table, kg, k)
				}
			}
		}
	}
}

// The timer tests below run once per timer domain (see timerDomain); the
// checks of one domain alone are in testWatermark, testProcTimerPast and
// testTimerDomains.

// inDomain runs a timer test in domain d.
func inDomain(d timerDomain, fn func(*testing.T, timerDomain, nbFunc)) func(*testing.T, nbFunc, NewBackend) {
	return func(t *testing.T, nb nbFunc, _ NewBackend) { fn(t, d, nb) }
}

func testTimerOrder(t *testing.T, d timerDomain, nb nbFunc) {
	b := nb(t, fullRange)
	ts := b.Timers()
	d.checkNext(t, "empty backend", b, nil)
	keys := keysIn(fullRange, 20)
	var want []firedTimer
	for i, k := range keys {
		setKey(b, k)
		// Timestamps in a scrambled order, several per key, many shared.
		for j := range 3 {
			at := int64((i*7+j*13)%50) + int64(j)*50
			d.register(ts, at)
			want = append(want, firedTimer{k, kgOf(k), at})
		}
	}
	want = sortFired(want)
	d.checkNext(t, "registered", b, want)
	n := 0
	for n < len(want) && want[n].TS <= 60 {
		n++
	}
	// d.fire checks the order; checkTimers compares what fired.
	checkTimers(t, "up to 60", d.fire(t, b, 60), want[:n])
	if again := d.fire(t, b, 60); len(again) != 0 {
		t.Errorf("timers fired twice: %v", again)
	}
	d.checkNext(t, "after 60", b, want[n:])
	checkTimers(t, "up to the maximum", d.fire(t, b, math.MaxInt64), want[n:])
	d.checkNext(t, "all fired", b, nil)
}

func testTimerDedupAndDelete(t *testing.T, d timerDomain, nb nbFunc) {
	b := nb(t, fullRange)
	ts := b.Timers()
	setKey(b, "a")
	d.register(ts, 10)
	d.register(ts, 10)
	d.register(ts, 20)
	d.register(ts, 30)
	d.delete(ts, 20)
	d.delete(ts, 25) // none
	d.register(ts, 30)
	d.delete(ts, 40)
	setKey(b, "b")
	d.register(ts, 5)
	d.checkNext(t, "after registering b's timer at 5", b, []firedTimer{{"b", kgOf("b"), 5}})
	d.delete(ts, 5) // the earliest goes: the next one is a's at 10
	d.checkNext(t, "after deleting it", b, []firedTimer{{"a", kgOf("a"), 10}})
	d.register(ts, 10)
	d.delete(ts, 30) // a's timer is not b's
	// Delete then register again: one timer.
	d.register(ts, 50)
	d.delete(ts, 50)
	d.register(ts, 50)
	// Many registrations and deletions (exercises any compaction).
	for i := range 1000 {
		d.register(ts, int64(1000+i))
		d.delete(ts, int64(1000+i))
	}
	want := sortFired([]firedTimer{
		{"a", kgOf("a"), 10}, {"a", kgOf("a"), 30},
		{"b", kgOf("b"), 10}, {"b", kgOf("b"), 50},
	})
	d.checkNext(t, "after deletions", b, want)
	setKey(b, "a")
	d.delete(ts, 10)
	d.checkNext(t, "after deleting a's timer at 10", b, []firedTimer{{"b", kgOf("b"), 10}})
	d.register(ts, 10)
	d.checkNext(t, "after registering it again", b, want)
	checkTimers(t, "dedup and delete", d.fire(t, b, math.MaxInt64), want)
}

func testTimerCurrentKey(t *testing.T, d timerDomain, nb nbFunc) {
	b := nb(t, fullRange)
	s := openStates(t, b)
	keys := keysIn(fullRange, 10)
	for i, k := range keys {
		setKey(b, k)
		s.val.Update(int64(i))
		d.register(b.Timers(), int64(i))
	}
	b.SetCurrentKey([]byte("outer"), 3)
	n := 0
	err := d.advance(b.Timers(), 100, func(key []byte, kg int, ts int64) error {
		// State reads go to the timer's key; state writes too.
		if v, ok := s.val.Value(); !ok || v != ts {
			t.Errorf("%s %d of %q: value state reads %d, %v", d.timer(), ts, key, v, ok)
		}
		s.val.Update(ts * 100)
		n++
		return nil
	})
	must(t, err)
	if n != len(keys) {
		t.Fatalf("fired %d %ss, want %d", n, d.timer(), len(keys))
	}
	if k, kg := b.CurrentKey(); string(k) != "outer" || kg != 3 {
		t.Errorf("current key after %s = %q, %d; want outer, 3", d.advanceName, k, kg)
	}
	for i, k := range keys {
		setKey(b, k)
		if v, _ := s.val.Value(); v != int64(i*100) {
			t.Errorf("key %s: value written while firing = %d, want %d", k, v, i*100)
		}
	}
}

func testTimerRegisterDuringFiring(t *testing.T, d timerDomain, nb nbFunc) {
	b := nb(t, fullRange)
	ts := b.Timers()
	other := d.other()
	a := func(at int64) []firedTimer { return []firedTimer{{"a", kgOf("a"), at}} }
	setKey(b, "a")
	d.register(ts, 10)
	var fired []int64
	err := d.advance(ts, 20, func(key []byte, kg int, at int64) error {
		fired = append(fired, at)
		if len(fired) > 10 {
			return errors.New("a timer keeps firing")
		}
		switch {
		case at == 10 && len(fired) == 1:
			d.register(ts, 15)     // at or below the time advanced to: fires now
			d.register(ts, 20)     // at it: fires now
			d.register(ts, 25)     // above: waits
			d.register(ts, 10)     // the one firing: registered anew
			other.register(ts, 12) // the other domain: does not fire here
		case at == 15:
			b.SetCurrentKey([]byte("other"), kgOf("other"))
			d.register(ts, 18)
		}
		return nil
	})
	must(t, err)
	if !slices.Equal(fired, []int64{10, 10, 15, 18, 20}) {
		t.Fatalf("fired %v, want [10 10 15 18 20]", fired)
	}
	d.checkNext(t, "after firing", b, a(25))
	other.checkNext(t, "after firing, the "+other.timer()+" registered meanwhile", b, a(12))
	checkTimers(t, "later", d.fire(t, b, 100), a(25))
	checkTimers(t, other.timer()+" registered while firing", other.fire(t, b, 100), a(12))
}

func testTimerFireError(t *testing.T, d timerDomain, nb nbFunc) {
	b := nb(t, fullRange)
	setKey(b, "a")
	for ts := int64(1); ts <= 5; ts++ {
		d.register(b.Timers(), ts)
	}
	boom := errors.New("boom")
	var fired []int64
	err := d.advance(b.Timers(), 10, func(_ []byte, _ int, ts int64) error {
		fired = append(fired, ts)
		if ts == 3 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) {
		t.Fatalf("%s returned %v, want the error of fire", d.advanceName, err)
	}
	if !slices.Equal(fired, []int64{1, 2, 3}) {
		t.Fatalf("fired %v before the error, want [1 2 3]", fired)
	}
	rest := []firedTimer{{"a", kgOf("a"), 4}, {"a", kgOf("a"), 5}}
	d.checkNext(t, "after the error", b, rest)
	checkTimers(t, "after the error", d.fire(t, b, 10), rest)
}

func testWatermark(t *testing.T, nb nbFunc, _ NewBackend) {
	b := nb(t, fullRange)
	ts := b.Timers()
	if wm := ts.CurrentWatermark(); wm != stream.MinWatermark {
		t.Fatalf("initial watermark %d, want stream.MinWatermark", wm)
	}
	fireAll(t, b, 50)
	fireAll(t, b, 20) // does not go back
	if wm := ts.CurrentWatermark(); wm != 50 {
		t.Fatalf("watermark %d after 50 then 20, want 50", wm)
	}
	// A timer at or below the watermark fires at the next advance.
	setKey(b, "a")
	ts.RegisterEventTimeTimer(30)
	fired := fireAll(t, b, 40)
	checkTimers(t, "late timer", fired, []firedTimer{{"a", kgOf("a"), 30}})
}

func testSnapshotRestore(t *testing.T, nb nbFunc, newBackend NewBackend) {
	b := nb(t, fullRange)
	s := openStates(t, b)
	keys := keysIn(fullRange, 60)
	populate(s, keys)
	before := s.dump(t)
	checkDump(t, "before snapshot", before, expectPopulated(keys))
	snap := snapshot(t, b, 7)
	if len(snap.Keyed) == 0 {
		t.Fatal("snapshot has no keyed chunks")
	}

	b2 := restore(t, newBackend, fullRange, snap, 7)
	s2 := openStates(t, b2)
	checkDump(t, "restored", s2.dump(t), before)
	if wm := b2.Timers().CurrentWatermark(); wm != stream.MinWatermark {
		t.Errorf("restored watermark %d, want stream.MinWatermark", wm)
	}
	// A snapshot of the restored backend restores the same state again.
	b3 := restore(t, newBackend, fullRange, snapshot(t, b2, 8), 8)
	s3 := openStates(t, b3)
	checkDump(t, "restored twice", s3.dump(t), before)
	// Timers of both domains came along, each in its own.
	for _, bk := range []struct {
		what string
		b    statebackend.Backend
	}{{"original", b}, {"restored", b2}, {"restored twice", b3}} {
		checkNextProcessingTime(t, bk.what, bk.b, expectProcTimers(keys))
		checkTimers(t, bk.what, fireAll(t, bk.b, math.MaxInt64), expectTimers(keys))
		checkTimers(t, bk.what+": processing-time timers", fireAllProc(t, bk.b, math.MaxInt64), expectProcTimers(keys))
		checkNextProcessingTime(t, bk.what+" after firing", bk.b, nil)
	}
	// The restored state is live: it can be changed.
	setKey(b2, keys[0])
	s2.val.Update(-1)
	s2.list.Add("more")
	s2.m.Put("new", 5)
	if v, _ := s2.val.Value(); v != -1 {
		t.Errorf("restored value state does not take updates: %d", v)
	}
	if l := s2.list.Get(); len(l) == 0 || l[len(l)-1] != "more" {
		t.Errorf("restored list state after Add: %q", l)
	}
}

// testRestoreBeforeRegister restores first and asks for the tables
// afterwards (the usual order in an operator), including a table that is
// never asked for: its state must survive the next snapshot untouched.
func testRestoreBeforeRegister(t *testing.T, nb nbFunc, newBackend NewBackend) {
	b := nb(t, fullRange)
	s := openStates(t, b)
	other, err := statebackend.GetValueState(b, "never-asked-for", statebackend.StringCodec)
	must(t, err)
	keys := keysIn(fullRange, 20)
	populate(s, keys)
	for _, k := range keys {
		setKey(b, k)
		other.Update("o-" + k)
	}
	b2 := restore(t, newBackend, fullRange, snapshot(t, b, 1), 1)
	// Keys work on tables not asked for yet.
	n := 0
	for kg := range maxPar {
		b2.Keys("never-asked-for", kg, func([]byte) bool { n++; return true })
	}
	if n != len(keys) {
		t.Errorf("Keys of a restored table not asked for: %d keys, want %d", n, len(keys))
	}
	b3 := restore(t, newBackend, fullRange, snapshot(t, b2, 2), 2)
	s3 := openStates(t, b3)
	checkDump(t, "restored via a backend that never asked for the tables", s3.dump(t), expectPopulated(keys))
	other3, err := statebackend.GetValueState(b3, "never-asked-for", statebackend.StringCodec)
	must(t, err)
	for _, k := range keys {
		setKey(b3, k)
		if v, _ := other3.Value(); v != "o-"+k {
			t.Errorf("key %s: %q, want %q", k, v, "o-"+k)
		}
	}
	// And tables asked for before Restore get the restored state too.
	b4 := nb(t, fullRange)
	s4 := openStates(t, b4)
	must(t, b4.Restore(&stream.RestoreContext{CheckpointID: 1, KeyGroups: fullRange, State: snapshot(t, b, 3)}))
	checkDump(t, "tables asked for before Restore", s4.dump(t), expectPopulated(keys))
}

func testRestoreSmallerRange(t *testing.T, nb nbFunc, newBackend NewBackend) {
	b := nb(t, fullRange)
	s := openStates(t, b)
	keys := keysIn(fullRange, 80)
	populate(s, keys)
	snap := snapshot(t, b, 1)
	for _, r := range []stream.KeyGroupRange{{Start: 2, End: 5}, {Start: 0, End: 0}, {Start: 7, End: 7}} {
		t.Run(r.String(), func(t *testing.T) {
			// The whole snapshot is offered: the backend keeps only its
			// key groups.
			b2 := restore(t, newBackend, r, snap, 1)
			s2 := openStates(t, b2)
			want := make(map[string]string)
			var wantTimers []firedTimer
			all := expectPopulated(keys)
			for _, ft := range expectTimers(keys) {
				if r.Contains(ft.KG) {
					wantTimers = append(wantTimers, ft)
				}
			}
			for _, k := range keys {
				if r.Contains(kgOf(k)) {
					id := fmt.Sprintf("%d/%s", kgOf(k), k)
					want[id] = all[id]
				}
			}
			if len(want) == 0 {
				t.Fatal("test keys do not cover the range")
			}
			checkDump(t, "restored into "+r.String(), s2.dump(t), want)
			checkTimers(t, "timers", fireAll(t, b2, math.MaxInt64), wantTimers)
			wantProc := inRange(expectProcTimers(keys), r)
			checkNextProcessingTime(t, "restored into "+r.String(), b2, wantProc)
			checkTimers(t, "processing-time timers", fireAllProc(t, b2, math.MaxInt64), wantProc)
			// Its own snapshot holds only its key groups.
			for kg := range snapshot(t, b2, 2).Keyed {
				if !r.Contains(kg) {
					t.Errorf("snapshot of %v has key group %d", r, kg)
				}
			}
		})
	}
}

func testRestoreMergedRanges(t *testing.T, nb nbFunc, newBackend NewBackend) {
	left := stream.KeyGroupRangeFor(maxPar, 2, 0)
	right := stream.KeyGroupRangeFor(maxPar, 2, 1)
	bl, br := nb(t, left), nb(t, right)
	sl, sr := openStates(t, bl), openStates(t, br)
	keys := keysIn(fullRange, 80)
	var lk, rk []string
	for _, k := range keys {
		if left.Contains(kgOf(k)) {
			lk = append(lk, k)
		} else {
			rk = append(rk, k)
		}
	}
	populate(sl, lk)
	populate(sr, rk)
	merged := mergeSnapshots(snapshot(t, bl, 1), snapshot(t, br, 1))

	// Scale in: 2 → 1.
	b := restore(t, newBackend, fullRange, merged, 1)
	s := openStates(t, b)
	want := expectPopulated(lk)
	maps.Copy(want, expectPopulated(rk))
	checkDump(t, "merged", s.dump(t), want)
	wantTimers := sortFired(append(expectTimers(lk), expectTimers(rk)...))
	wantProc := sortFired(append(expectProcTimers(lk), expectProcTimers(rk)...))
	checkTimers(t, "merged timers", fireAll(t, b, math.MaxInt64), wantTimers)
	checkNextProcessingTime(t, "merged", b, wantProc)
	checkTimers(t, "merged processing-time timers", fireAllProc(t, b, math.MaxInt64), wantProc)

	// Scale out: 2 → 3, with each subtask given only its key groups.
	got := make(map[string]string)
	var gotTimers, gotProc []firedTimer
	for i := range 3 {
		r := stream.KeyGroupRangeFor(maxPar, 3, i)
		b := restore(t, newBackend, r, filterSnapshot(merged, r), 1)
		maps.Copy(got, openStates(t, b).dump(t))
		gotTimers = append(gotTimers, fireAll(t, b, math.MaxInt64)...)
		checkNextProcessingTime(t, "rescaled to 3: "+r.String(), b, inRange(wantProc, r))
		gotProc = append(gotProc, fireAllProc(t, b, math.MaxInt64)...)
	}
	checkDump(t, "rescaled to 3", got, want)
	checkTimers(t, "rescaled timers", gotTimers, wantTimers)
	checkTimers(t, "rescaled processing-time timers", gotProc, wantProc)
}

func testSnapshotDoesNotAlias(t *testing.T, nb nbFunc, newBackend NewBackend) {
	b := nb(t, fullRange)
	s := openStates(t, b)
	bs, err := statebackend.GetValueState(b, "bytes", statebackend.BytesCodec)
	must(t, err)
	keys := keysIn(fullRange, 30)
	populate(s, keys)
	buf := []byte("original")
	setKey(b, keys[0])
	bs.Update(buf)
	snap := snapshot(t, b, 1)
	// Keep a copy of the chunks: they must not change either.
	chunks := make(map[int][][]byte)
	for kg, cs := range snap.Keyed {
		for _, c := range cs {
			chunks[kg] = append(chunks[kg], bytes.Clone(c))
		}
	}

	// Change everything.
	for i, k := range keys {
		setKey(b, k)
		s.val.Update(-1)
		s.list.Add("after")
		s.m.Put("u0", -1)
		s.m.Put("after", 1)
		s.red.Add(1000)
		s.agg.Add(1000)
		b.Timers().DeleteEventTimeTimer(int64(100 + i))
		b.Timers().RegisterEventTimeTimer(5000)
		b.Timers().DeleteProcessingTimeTimer(int64(200 + i))
		b.Timers().RegisterProcessingTimeTimer(6000)
	}
	setKey(b, keys[0])
	bs.Update([]byte("replaced"))
	copy(buf, "mutated!")
	setKey(b, "brand-new")
	s.val.Update(1)
	fireAll(t, b, 150)
	fireAllProc(t, b, 150)

	for kg, cs := range snap.Keyed {
		for i, c := range cs {
			if !bytes.Equal(c, chunks[kg][i]) {
				t.Fatalf("chunk %d of key group %d changed after Snapshot returned", i, kg)
			}
		}
	}
	b2 := restore(t, newBackend, fullRange, snap, 1)
	s2 := openStates(t, b2)
	checkDump(t, "restored from the earlier snapshot", s2.dump(t), expectPopulated(keys))
	checkTimers(t, "timers", fireAll(t, b2, math.MaxInt64), expectTimers(keys))
	checkTimers(t, "processing-time timers", fireAllProc(t, b2, math.MaxInt64), expectProcTimers(keys))
	bs2, err := statebackend.GetValueState(b2, "bytes", statebackend.BytesCodec)
	must(t, err)
	setKey(b2, keys[0])
	if v, _ := bs2.Value(); string(v) != "original" {
		// BytesCodec state holds the slice it was given, so the mutation of
		// buf may show in the live state, but not in the snapshot.
		t.Errorf("bytes value restored as %q, want original", v)
	}
}

func testSnapshotEmpty(t *testing.T, nb nbFunc, newBackend NewBackend) {
	b := nb(t, fullRange)
	openStates(t, b)
	snap := snapshot(t, b, 1)
	b2 := restore(t, newBackend, fullRange, snap, 1)
	if d := openStates(t, b2).dump(t); len(d) != 0 {
		t.Errorf("restored empty snapshot has state %v", d)
	}
	// Restoring nothing at all is fine too.
	b3 := nb(t, fullRange)
	must(t, b3.Restore(&stream.RestoreContext{KeyGroups: fullRange, State: &stream.OperatorSnapshot{}}))
	// State that was cleared is not in the snapshot.
	s := openStates(t, b)
	setKey(b, "a")
	s.val.Update(1)
	s.m.Put("x", 1)
	s.val.Clear()
	s.m.Remove("x")
	b4 := restore(t, newBackend, fullRange, snapshot(t, b, 2), 2)
	if d := openStates(t, b4).dump(t); len(d) != 0 {
		t.Errorf("restored snapshot of cleared state has %v", d)
	}
}

func testRestoreCorrupt(t *testing.T, nb nbFunc, newBackend NewBackend) {
	b := nb(t, fullRange)
	s := openStates(t, b)
	keys := keysIn(fullRange, 10)
	populate(s, keys)
	snap := snapshot(t, b, 1)
	kg := kgOf(keys[0])
	good := snap.Keyed[kg][0]
	variants := map[string][]byte{
		"empty":         {},
		"garbage":       []byte("this is not a state chunk at all"),
		"truncated":     good[:len(good)/2],
		"last byte cut": good[:len(good)-1],
		"extra byte":    append(bytes.Clone(good), 0),
	}
	for i := 0; i < len(good); i += max(1, len(good)/16) {
		bad := bytes.Clone(good)
		bad[i] ^= 0x40
		variants[fmt.Sprintf("byte %d flipped", i)] = bad
	}
	for name, chunk := range variants {
		t.Run(name, func(t *testing.T) {
			other := snapshot(t, b, 1)
			other.Keyed[kg] = [][]byte{chunk}
			b2 := nb(t, fullRange)
			err := b2.Restore(&stream.RestoreContext{CheckpointID: 1, KeyGroups: fullRange, State: other})
			if err == nil {
				t.Fatal("Restore accepted a corrupt chunk")
			}
			if !errors.Is(err, statebackend.ErrCorrupt) {
				t.Errorf("error %v does not wrap statebackend.ErrCorrupt", err)
			}
		})
	}
	// A chunk filed under the wrong key group is corrupt too.
	other := &stream.OperatorSnapshot{Keyed: map[int][][]byte{(kg + 1) % maxPar: {good}}}
	if err := nb(t, fullRange).Restore(&stream.RestoreContext{KeyGroups: fullRange, State: other}); err == nil {
		t.Error("Restore accepted a chunk filed under another key group")
	}
}

func testDescriptorConflict(t *testing.T, nb nbFunc, _ NewBackend) {
	b := nb(t, fullRange)
	_, err := statebackend.GetValueState(b, "x", statebackend.Int64Codec)
	must(t, err)
	conflicts := map[string]func() error{
		"value with another codec": func() error {
			_, err := statebackend.GetValueState(b, "x", statebackend.StringCodec)
			return err
		},
		"list": func() error {
			_, err := statebackend.GetListState(b, "x", statebackend.Int64Codec)
			return err
		},
		"map": func() error {
			_, err := statebackend.GetMapState(b, "x", statebackend.Int64Codec, statebackend.Int64Codec)
			return err
		},
		"reducing": func() error {
			_, err := statebackend.GetReducingState(b, "x", statebackend.Int64Codec, sum)
			return err
		},
		"json value": func() error {
			_, err := statebackend.GetValueState(b, "x", statebackend.JSONCodec[int64]())
			return err
		},
	}
	for name, f := range conflicts {
		if err := f(); !errors.Is(err, statebackend.ErrConflict) {
			t.Errorf("%s under the name of an int64 value state: error %v, want statebackend.ErrConflict", name, err)
		}
	}
	_, err = statebackend.GetMapState(b, "m", statebackend.StringCodec, statebackend.Int64Codec)
	must(t, err)
	if _, err := statebackend.GetMapState(b, "m", statebackend.Int64Codec, statebackend.Int64Codec); !errors.Is(err, statebackend.ErrConflict) {
		t.Errorf("map state with another user-key codec: error %v, want statebackend.ErrConflict", err)
	}
	if _, err := statebackend.GetValueState(b, "x", statebackend.Int64Codec); err != nil {
		t.Errorf("asking again with the same descriptor: %v", err)
	}
	invalid := []statebackend.Descriptor{
		{Kind: statebackend.KindValue, Codec: statebackend.Untyped(statebackend.Int64Codec)},
		{Name: "n", Kind: 0, Codec: statebackend.Untyped(statebackend.Int64Codec)},
		{Name: "n", Kind: statebackend.KindValue},
		{Name: "n", Kind: statebackend.KindMap, Codec: statebackend.Untyped(statebackend.Int64Codec)},
	}
	for _, d := range invalid {
		if _, err := b.Table(d); err == nil {
			t.Errorf("Table(%+v) accepted an invalid descriptor", d)
		}
	}
}

func testRestoredDescriptorConflict(t *testing.T, nb nbFunc, newBackend NewBackend) {
	b := nb(t, fullRange)
	v, err := statebackend.GetValueState(b, "x", statebackend.StringCodec)
	must(t, err)
	setKey(b, "k")
	v.Update("not a varint \xff\xff\xff\xff\xff\xff\xff\xff\xff\xff")
	snap := snapshot(t, b, 1)

	b2 := restore(t, newBackend, fullRange, snap, 1)
	if _, err := statebackend.GetListState(b2, "x", statebackend.StringCodec); !errors.Is(err, statebackend.ErrConflict) {
		t.Errorf("restored value state asked for as list state: error %v, want statebackend.ErrConflict", err)
	}
	// The state does not decode with another codec: an error, not garbage.
	if _, err := statebackend.GetValueState(b2, "x", statebackend.Int64Codec); err == nil {
		t.Error("restored string state decoded with the int64 codec without an error")
	}
	// The right descriptor still works after the failed attempts.
	v2, err := statebackend.GetValueState(b2, "x", statebackend.StringCodec)
	must(t, err)
	setKey(b2, "k")
	if got, _ := v2.Value(); got != "not a varint \xff\xff\xff\xff\xff\xff\xff\xff\xff\xff" {
		t.Errorf("Value() = %q", got)
	}
	// Tables asked for before Restore with another kind make Restore fail.
	b3 := nb(t, fullRange)
	_, err = statebackend.GetMapState(b3, "x", statebackend.StringCodec, statebackend.StringCodec)
	must(t, err)
	if err := b3.Restore(&stream.RestoreContext{KeyGroups: fullRange, State: snap}); err == nil {
		t.Error("Restore into a table of another kind succeeded")
	}
}

func testSizeBytes(t *testing.T, nb nbFunc, _ NewBackend) {
	b := nb(t, fullRange)
	s := openStates(t, b)
	empty := b.SizeBytes()
	keys := keysIn(fullRange, 1000)
	var keyBytes int64
	for _, k := range keys {
		setKey(b, k)
		s.val.Update(1)
		keyBytes += int64(len(k))
	}
	full := b.SizeBytes()
	if full < empty+keyBytes {
		t.Errorf("SizeBytes with %d keys (%d key bytes) = %d, empty %d", len(keys), keyBytes, full, empty)
	}
	for _, k := range keys {
		setKey(b, k)
		s.val.Clear()
	}
	if cleared := b.SizeBytes(); cleared >= full {
		t.Errorf("SizeBytes after clearing everything = %d, before %d", cleared, full)
	}
}

func testClose(t *testing.T, _ nbFunc, newBackend NewBackend) {
	b := newBackend(fullRange)
	s := openStates(t, b)
	setKey(b, "a")
	s.val.Update(1)
	must(t, b.Close())
	if _, err := statebackend.GetValueState(b, "v2", statebackend.Int64Codec); !errors.Is(err, statebackend.ErrClosed) {
		t.Errorf("Table after Close: error %v, want statebackend.ErrClosed", err)
	}
	if err := b.Snapshot(&stream.SnapshotContext{KeyGroups: fullRange}); !errors.Is(err, statebackend.ErrClosed) {
		t.Errorf("Snapshot after Close: error %v, want statebackend.ErrClosed", err)
	}
	// Using an old handle does not crash.
	s.val.Update(2)
	s.val.Value()
}
