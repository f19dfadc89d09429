package statebackendtest

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/stream"
)

// The model test runs random operations against the backend and against a
// plain Go model of the same state, and compares every read. The backend
// side is a set of backends covering all key groups (the subtasks of one
// operator); at random points it is snapshotted and restored into a new set
// with a random number of subtasks, as a rescaled job would be.

type timerKey struct {
	key string
	ts  int64
}

type model struct {
	val    map[string]int64
	list   map[string][]string
	m      map[string]map[string]int64
	red    map[string]int64
	agg    map[string]avgAcc
	timers map[timerKey]bool
	wm     int64
	// ptimers are the processing-time timers; now is the highest
	// processing time passed to the backends (only to pick timestamps: the
	// backends keep no processing time).
	ptimers map[timerKey]bool
	now     int64
}

func newModel() *model {
	return &model{
		val:     make(map[string]int64),
		list:    make(map[string][]string),
		m:       make(map[string]map[string]int64),
		red:     make(map[string]int64),
		agg:     make(map[string]avgAcc),
		timers:  make(map[timerKey]bool),
		wm:      stream.MinWatermark,
		ptimers: make(map[timerKey]bool),
	}
}

// describe renders the model's state of key k as states.describe does.
func (m *model) describe(k string) string {
	d := ""
	if v, ok := m.val[k]; ok {
		d += fmt.Sprintf("val=%d ", v)
	}
	if l := m.list[k]; len(l) > 0 {
		d += fmt.Sprintf("list=%q ", l)
	}
	if mm := m.m[k]; len(mm) > 0 {
		d += fmt.Sprintf("map=%v ", sortedMap(mm))
	}
	if v, ok := m.red[k]; ok {
		d += fmt.Sprintf("red=%d ", v)
	}
	if a, ok := m.agg[k]; ok {
		d += fmt.Sprintf("agg=%g ", avgFunc{}.Result(a))
	}
	return d
}

func (m *model) dump() map[string]string {
	keys := make(map[string]bool)
	for k := range m.val {
		keys[k] = true
	}
	for k := range m.list {
		keys[k] = true
	}
	for k := range m.m {
		keys[k] = true
	}
	for k := range m.red {
		keys[k] = true
	}
	for k := range m.agg {
		keys[k] = true
	}
	out := make(map[string]string)
	for k := range keys {
		out[fmt.Sprintf("%d/%s", kgOf(k), k)] = m.describe(k)
	}
	return out
}

type part struct {
	b statebackend.Backend
	s *states
}

type harness struct {
	t          *testing.T
	newBackend NewBackend
	rng        *rand.Rand
	parts      []*part
	m          *model
	keys       []string
	ckpt       int64
	restores   int
}

func (h *harness) partFor(key string) *part {
	kg := kgOf(key)
	for _, p := range h.parts {
		if p.b.KeyGroups().Contains(kg) {
			return p
		}
	}
	h.t.Fatalf("no backend owns key group %d", kg)
	return nil
}

func (h *harness) open(n int, snap *stream.OperatorSnapshot) {
	h.parts = nil
	for i := range n {
		r := stream.KeyGroupRangeFor(maxPar, n, i)
		b := h.newBackend(r)
		h.t.Cleanup(func() { b.Close() })
		p := &part{b: b}
		// Tables asked for before or after Restore: both must work.
		early := h.rng.IntN(2) == 0
		if early {
			p.s = openStates(h.t, b)
		}
		if snap != nil {
			if err := b.Restore(&stream.RestoreContext{CheckpointID: h.ckpt, KeyGroups: r, State: snap}); err != nil {
				h.t.Fatalf("Restore into %v: %v", r, err)
			}
		}
		if !early {
			p.s = openStates(h.t, b)
		}
		h.parts = append(h.parts, p)
	}
}

func testModel(t *testing.T, newBackend NewBackend, sz Sizes) {
	seeds := []uint64{1, 2, 3, 4, 5, 6, 7, 8}
	steps := 2500
	if testing.Short() {
		seeds, steps = seeds[:2], 1000
	}
	seeds, steps = sz.model(seeds, steps)
	for _, seed := range seeds {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			h := &harness{
				t:          t,
				newBackend: newBackend,
				rng:        rand.New(rand.NewPCG(seed, seed*7919)),
				m:          newModel(),
				keys:       keysIn(fullRange, 24),
			}
			h.open(1+h.rng.IntN(3), nil)
			for step := range steps {
				h.step(step)
				if t.Failed() {
					t.Fatalf("seed %d: failed at step %d", seed, step)
				}
			}
			h.compareAll("end")
			h.checkNextProc(steps)
			var fired, pending []firedTimer
			for _, p := range h.parts {
				fired = append(fired, fireAllProc(t, p.b, math.MaxInt64)...)
			}
			for tk := range h.m.ptimers {
				pending = append(pending, firedTimer{tk.key, kgOf(tk.key), tk.ts})
			}
			checkTimers(t, "the pending processing-time timers", fired, sortFired(pending))
			t.Logf("seed %d: %d steps, %d restores, %d keys with state, %d event-time and %d processing-time timers pending",
				seed, steps, h.restores, len(h.m.dump()), len(h.m.timers), len(h.m.ptimers))
		})
	}
}

func (h *harness) step(step int) {
	t, rng, m := h.t, h.rng, h.m
	key := h.keys[rng.IntN(len(h.keys))]
	p := h.partFor(key)
	s := p.s
	setKey(p.b, key)
	uk := fmt.Sprintf("u%d", rng.IntN(5))
	switch op := rng.IntN(100); {
	case op < 8:
		v := rng.Int64N(1000) - 500
		s.val.Update(v)
		m.val[key] = v
	case op < 10:
		s.val.Clear()
		delete(m.val, key)
	case op < 14:
		v, ok := s.val.Value()
		mv, mok := m.val[key]
		if v != mv || ok != mok {
			t.Errorf("step %d key %s: Value() = %d, %v; model %d, %v", step, key, v, ok, mv, mok)
		}
	case op < 20:
		v := fmt.Sprint(rng.IntN(100))
		s.list.Add(v)
		m.list[key] = append(m.list[key], v)
	case op < 22:
		vs := []string{fmt.Sprint(rng.IntN(10)), fmt.Sprint(rng.IntN(10))}
		s.list.AddAll(vs)
		m.list[key] = append(m.list[key], vs...)
	case op < 24:
		vs := make([]string, rng.IntN(3))
		for i := range vs {
			vs[i] = fmt.Sprint(rng.IntN(10))
		}
		s.list.Update(vs)
		if len(vs) == 0 {
			delete(m.list, key)
		} else {
			m.list[key] = slices.Clone(vs)
		}
	case op < 25:
		s.list.Clear()
		delete(m.list, key)
	case op < 28:
		if got, want := s.list.Get(), m.list[key]; !slices.Equal(got, want) {
			t.Errorf("step %d key %s: list Get() = %q, model %q", step, key, got, want)
		}
	case op < 36:
		v := rng.Int64N(100)
		s.m.Put(uk, v)
		if m.m[key] == nil {
			m.m[key] = make(map[string]int64)
		}
		m.m[key][uk] = v
	case op < 39:
		s.m.Remove(uk)
		delete(m.m[key], uk)
		if len(m.m[key]) == 0 {
			delete(m.m, key)
		}
	case op < 42:
		v, ok := s.m.Get(uk)
		mv, mok := m.m[key][uk]
		if v != mv || ok != mok || s.m.Contains(uk) != mok {
			t.Errorf("step %d key %s: map Get(%s) = %d, %v; model %d, %v", step, key, uk, v, ok, mv, mok)
		}
	case op < 44:
		// Range, removing odd values on the way half of the time.
		remove := rng.IntN(2) == 0
		got := make(map[string]int64)
		s.m.Range(func(k string, v int64) bool {
			got[k] = v
			if remove && v%2 == 1 {
				s.m.Remove(k)
			}
			return true
		})
		if want := m.m[key]; !maps.Equal(got, want) && len(got)+len(want) > 0 {
			t.Errorf("step %d key %s: map Range = %v, model %v", step, key, got, want)
		}
		if remove {
			for k, v := range m.m[key] {
				if v%2 == 1 {
					delete(m.m[key], k)
				}
			}
			if len(m.m[key]) == 0 {
				delete(m.m, key)
			}
		}
		if s.m.IsEmpty() != (len(m.m[key]) == 0) {
			t.Errorf("step %d key %s: IsEmpty() = %v, model has %d entries", step, key, s.m.IsEmpty(), len(m.m[key]))
		}
	case op < 45:
		s.m.Clear()
		delete(m.m, key)
	case op < 50:
		v := rng.Int64N(50)
		s.red.Add(v)
		m.red[key] += v
	case op < 51:
		s.red.Clear()
		delete(m.red, key)
	case op < 55:
		v := rng.Int64N(50)
		s.agg.Add(v)
		m.agg[key] = avgFunc{}.Add(v, m.agg[key])
	case op < 56:
		s.agg.Clear()
		delete(m.agg, key)
	case op < 58:
		if got, want := s.describe(), m.describe(key); got != want {
			t.Errorf("step %d key %s: state %q, model %q", step, key, got, want)
		}
	case op < 70:
		ts := h.timerTS()
		p.b.Timers().RegisterEventTimeTimer(ts)
		m.timers[timerKey{key, ts}] = true
	case op < 74:
		ts := h.deleteTS(m.timers, key, h.timerTS())
		p.b.Timers().DeleteEventTimeTimer(ts)
		delete(m.timers, timerKey{key, ts})
	case op < 82:
		h.advance(step)
	case op < 84:
		h.compareAll(fmt.Sprintf("step %d", step))
	case op < 86:
		h.rescale(step)
	case op < 91:
		ts := m.now - 5 + rng.Int64N(60)
		p.b.Timers().RegisterProcessingTimeTimer(ts)
		m.ptimers[timerKey{key, ts}] = true
	case op < 93:
		ts := h.deleteTS(m.ptimers, key, m.now-5+rng.Int64N(60))
		p.b.Timers().DeleteProcessingTimeTimer(ts)
		delete(m.ptimers, timerKey{key, ts})
	case op < 97:
		h.advanceProc(step)
	case op < 98:
		h.checkNextProc(step)
	}
}

// advanceProc advances processing time on every backend, sometimes to a
// time below the last one (which fires the timers registered below it
// since); fire re-registers timers now and then, some at or below the
// time, which must fire in the same call.
func (h *harness) advanceProc(step int) {
	t, m := h.t, h.m
	now := m.now + h.rng.Int64N(30) - 5
	m.now = max(m.now, now)
	for _, p := range h.parts {
		var last *firedTimer
		err := p.b.Timers().AdvanceProcessingTime(now, func(key []byte, kg int, ts int64) error {
			f := firedTimer{string(key), kg, ts}
			if ts > now || last != nil && compareFired(*last, f) > 0 {
				t.Errorf("step %d: processing-time timer %v fired at time %d after %v", step, f, now, last)
			}
			last = &f
			if kg != kgOf(f.Key) || !p.b.KeyGroups().Contains(kg) {
				t.Errorf("step %d: processing-time timer of %s fired with key group %d", step, f.Key, kg)
			}
			if !m.ptimers[timerKey{f.Key, ts}] {
				t.Errorf("step %d: processing-time timer %d of %s fired but was not registered (or fired before)", step, ts, f.Key)
			}
			delete(m.ptimers, timerKey{f.Key, ts})
			if got, want := p.s.describe(), m.describe(f.Key); got != want {
				t.Errorf("step %d: in processing-time timer %d of %s the state is %q, model %q", step, ts, f.Key, got, want)
			}
			if h.rng.IntN(4) == 0 {
				next := ts + h.rng.Int64N(8)
				p.b.Timers().RegisterProcessingTimeTimer(next)
				m.ptimers[timerKey{f.Key, next}] = true
			}
			return nil
		})
		if err != nil {
			t.Fatalf("step %d: AdvanceProcessingTime: %v", step, err)
		}
	}
	for tk := range m.ptimers {
		if tk.ts <= now {
			t.Errorf("step %d: processing-time timer %d of %s did not fire at time %d", step, tk.ts, tk.key, now)
		}
	}
}

// checkNextProc compares every backend's NextProcessingTime with the
// model's earliest processing-time timer of its key groups.
func (h *harness) checkNextProc(step int) {
	for _, p := range h.parts {
		var want []firedTimer
		for tk := range h.m.ptimers {
			if p.b.KeyGroups().Contains(kgOf(tk.key)) {
				want = append(want, firedTimer{tk.key, kgOf(tk.key), tk.ts})
			}
		}
		checkNextProcessingTime(h.t, fmt.Sprintf("step %d: %v", step, p.b.KeyGroups()), p.b, want)
	}
}

// deleteTS picks the timestamp of a timer to delete: ts, or half of the
// time one of key's timers in timers if it has any, so that deletions hit
// timers that exist too.
func (h *harness) deleteTS(timers map[timerKey]bool, key string, ts int64) int64 {
	if h.rng.IntN(2) == 0 {
		for tk := range timers {
			if tk.key == key {
				return tk.ts
			}
		}
	}
	return ts
}

// timerTS picks a timestamp near the watermark: some at or below it.
func (h *harness) timerTS() int64 {
	base := h.m.wm
	if base == stream.MinWatermark {
		base = 0
	}
	return base - 5 + h.rng.Int64N(60)
}

// advance raises the watermark of every backend; fire re-registers timers
// now and then (some at or below the watermark, which must fire in the
// same call) and checks the key's state is current.
func (h *harness) advance(step int) {
	t, m := h.t, h.m
	base := m.wm
	if base == stream.MinWatermark {
		base = 0
	}
	wm := base + h.rng.Int64N(30) - 5 // sometimes lower: a no-op
	m.wm = max(m.wm, wm)
	for _, p := range h.parts {
		last := int64(stream.MinWatermark)
		err := p.b.Timers().AdvanceWatermark(wm, func(key []byte, kg int, ts int64) error {
			k := string(key)
			if ts > m.wm || ts < last {
				t.Errorf("step %d: timer %d of %s fired at watermark %d after timer %d", step, ts, k, m.wm, last)
			}
			last = ts
			if kg != kgOf(k) || !p.b.KeyGroups().Contains(kg) {
				t.Errorf("step %d: timer of %s fired with key group %d", step, k, kg)
			}
			if !m.timers[timerKey{k, ts}] {
				t.Errorf("step %d: timer %d of %s fired but was not registered (or fired before)", step, ts, k)
			}
			delete(m.timers, timerKey{k, ts})
			if got, want := p.s.describe(), m.describe(k); got != want {
				t.Errorf("step %d: in timer %d of %s the state is %q, model %q", step, ts, k, got, want)
			}
			if h.rng.IntN(4) == 0 {
				next := ts + h.rng.Int64N(8)
				p.b.Timers().RegisterEventTimeTimer(next)
				m.timers[timerKey{k, next}] = true
			}
			return nil
		})
		if err != nil {
			t.Fatalf("step %d: AdvanceWatermark: %v", step, err)
		}
		if got := p.b.Timers().CurrentWatermark(); got != m.wm {
			t.Errorf("step %d: watermark %d, model %d", step, got, m.wm)
		}
	}
	for tk := range m.timers {
		if tk.ts <= m.wm {
			t.Errorf("step %d: timer %d of %s did not fire at watermark %d", step, tk.ts, tk.key, m.wm)
		}
	}
}

func (h *harness) compareAll(when string) {
	got := make(map[string]string)
	for _, p := range h.parts {
		for k, v := range p.s.dump(h.t) {
			got[k] = v
		}
	}
	checkDump(h.t, when, got, h.m.dump())
}

// rescale snapshots every backend, restores the merged snapshot into a new
// set of 1–3 backends, and checks the state. The watermark starts again.
func (h *harness) rescale(step int) {
	h.ckpt++
	var snaps []*stream.OperatorSnapshot
	for _, p := range h.parts {
		snaps = append(snaps, snapshot(h.t, p.b, h.ckpt))
	}
	// Half of the time, change the state after the snapshot and before
	// closing the old backends: the restored state must not see it.
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
	h.m.wm = stream.MinWatermark
	h.restores++
	h.compareAll(fmt.Sprintf("step %d: after restoring into %d backends", step, len(h.parts)))
}
