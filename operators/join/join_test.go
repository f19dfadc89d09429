package join_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/weirstream/weir/dataflow/dataflowtest"
	"github.com/weirstream/weir/operators/join"
	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/stream"
)

var (
	leftSchema = stream.MustSchema(
		stream.Field{Name: "k", Type: stream.TypeString},
		stream.Field{Name: "v", Type: stream.TypeInt64},
		stream.Field{Name: "ts", Type: stream.TypeTimestamp})
	rightSchema = stream.MustSchema(
		stream.Field{Name: "key", Type: stream.TypeString},
		stream.Field{Name: "v", Type: stream.TypeFloat64},
		stream.Field{Name: "ts", Type: stream.TypeTimestamp})
)

// backendNames are the state backends every state test runs on.
var backendNames = []string{stream.StateBackendHeap, stream.StateBackendPebble}

// maxPar is the max parallelism (number of key groups) of the tests.
const maxPar = 16

type rec struct {
	input int
	key   *string // nil = null key
	v     int64
	nullV bool
	ts    int64
}

// step is one thing to feed: a record batch or a watermark.
type step struct {
	recs []rec
	wm   int64
}

func genSteps(r *rand.Rand, n int) []step {
	var steps []step
	ts := int64(0)
	for range n {
		var recs []rec
		in := r.IntN(2)
		for range 1 + r.IntN(8) {
			ts += int64(r.IntN(40))
			var k *string
			if r.IntN(20) > 0 {
				s := fmt.Sprintf("key%d", r.IntN(12))
				k = &s
			}
			t := ts
			if r.IntN(8) == 0 { // out of order, sometimes late
				t = max(0, ts-r.Int64N(150))
			}
			recs = append(recs, rec{input: in, key: k, v: r.Int64N(1000), nullV: r.IntN(15) == 0, ts: t})
		}
		steps = append(steps, step{recs: recs})
		if r.IntN(3) == 0 {
			steps = append(steps, step{wm: ts - 1})
		}
	}
	return append(steps, step{wm: stream.MaxWatermark})
}

func batchOf(recs []rec) *stream.Batch {
	s := leftSchema
	if recs[0].input == 1 {
		s = rightSchema
	}
	b := stream.NewBatch(s, len(recs))
	for _, r := range recs {
		var k, v any
		if r.key != nil {
			k = *r.key
		}
		switch {
		case r.nullV:
		case r.input == 0:
			v = r.v
		default:
			v = float64(r.v)
		}
		b.AppendRow(k, v, r.ts)
		b.Times = append(b.Times, r.ts)
	}
	return b
}

type collector struct{ rows []string }

func (c *collector) Collect(b *stream.Batch) {
	if err := b.Validate(); err != nil {
		panic(err)
	}
	for i := range b.Len() {
		c.rows = append(c.rows, spaced(b.Row(i)...)+fmt.Sprintf("@%d", b.Times[i]))
	}
	b.Release()
}
func (c *collector) EmitWatermark(int64) {}

// subtask is one opened join subtask.
type subtask struct {
	h    *dataflowtest.Harness
	octx *stream.OperatorContext
}

// openSubtask opens op on backend as subtask sub of par (owning its share of
// maxPar key groups), restoring st, the state of checkpoint id, if not nil.
// The harness is closed at the end of the test.
func openSubtask(t *testing.T, op stream.Operator, backend string, sub, par int, id int64, st *stream.OperatorSnapshot) (*subtask, error) {
	t.Helper()
	octx := &stream.OperatorContext{OperatorUID: "j", Subtask: sub, Parallelism: par, MaxParallelism: maxPar,
		KeyGroups:    stream.KeyGroupRangeFor(maxPar, par, sub),
		InputSchemas: []*stream.Schema{leftSchema, rightSchema}, InputKeys: [][]string{{"k"}, {"key"}},
		StateBackend: backend, LocalStateDir: t.TempDir()}
	h, err := dataflowtest.Open(t.Context(), op, octx, id, st)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { h.Close(true) })
	return &subtask{h: h, octx: octx}, nil
}

func mustOpen(t *testing.T, op stream.Operator, backend string, sub, par int, id int64, st *stream.OperatorSnapshot) *subtask {
	t.Helper()
	s, err := openSubtask(t, op, backend, sub, par, id, st)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// countKeys returns the number of keys with state in table, over the
// subtask's key groups.
func (s *subtask) countKeys(t *testing.T, table string) int {
	t.Helper()
	b, err := statebackend.KeyedBackend(s.octx)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	r := b.KeyGroups()
	for kg := r.Start; kg <= r.End; kg++ {
		b.Keys(table, kg, func([]byte) bool { n++; return true })
	}
	return n
}

// subtaskOf routes a key to one of par subtasks as the runtime does.
func subtaskOf(key *string, par int) int {
	b := stream.NewBatch(leftSchema, 1)
	defer b.Release()
	var k any
	if key != nil {
		k = *key
	}
	b.AppendRow(k, int64(0), int64(0))
	h := make([]uint64, 1)
	stream.HashKeys(b, []int{0}, h)
	return stream.SubtaskForKeyGroup(maxPar, par, stream.KeyGroupForHash(h[0], maxPar))
}

// runOpts says how run runs a join.
type runOpts struct {
	backend string
	// cut is the step before which run snapshots and restores into par
	// fresh subtasks; -1: no cut.
	cut, par int
	// before, if set, is called before every step (to move a clock).
	before func(step int)
}

// run feeds steps to a fresh operator on one subtask; at step cut it
// snapshots, closes it and continues in par subtasks restored from the
// snapshot that get the records of their key groups, as after a restart
// (par 1) or a rescale from 1 to 2. It returns the output rows, sorted.
func run(t *testing.T, newOp func() stream.Operator, steps []step, o runOpts) []string {
	t.Helper()
	c := &collector{}
	subs := []*subtask{mustOpen(t, newOp(), o.backend, 0, 1, 0, nil)}
	for i, s := range steps {
		if o.before != nil {
			o.before(i)
		}
		if i == o.cut {
			st, err := subs[0].h.Snapshot(1)
			if err != nil {
				t.Fatal(err)
			}
			old := subs[0]
			subs = nil
			for sub := range o.par {
				subs = append(subs, mustOpen(t, newOp(), o.backend, sub, o.par, 1, st))
			}
			if err := old.h.Close(true); err != nil {
				t.Fatal(err)
			}
		}
		if s.recs == nil {
			for _, sub := range subs {
				if err := sub.h.Op.ProcessWatermark(s.wm, c); err != nil {
					t.Fatal(err)
				}
			}
			continue
		}
		parts := make([][]rec, len(subs))
		for _, r := range s.recs {
			sub := subtaskOf(r.key, len(subs))
			parts[sub] = append(parts[sub], r)
		}
		for sub, p := range parts {
			if len(p) > 0 {
				if err := subs[sub].h.Op.ProcessBatch(p[0].input, batchOf(p), c); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	slices.Sort(c.rows)
	return c.rows
}

// cuts are the runs every differential test makes of its steps: straight
// through, with a restart in the middle and with a rescale from 1 to 2
// subtasks in the middle.
func cuts(backend string, at int) []runOpts {
	return []runOpts{{backend: backend, cut: -1}, {backend: backend, cut: at, par: 1}, {backend: backend, cut: at, par: 2}}
}

func fmtV(r rec) any {
	switch {
	case r.nullV:
		return nil
	case r.input == 1:
		return float64(r.v)
	}
	return r.v
}

// spaced formats values separated by spaces.
func spaced(vals ...any) string {
	parts := make([]string, len(vals))
	for i, v := range vals {
		parts[i] = fmt.Sprint(v)
	}
	return strings.Join(parts, " ")
}

func fmtRow(l, r rec, extra ...int64) string {
	s := spaced(*l.key, fmtV(l), l.ts, *r.key, fmtV(r), r.ts)
	for _, x := range extra {
		s += fmt.Sprint(" ", x)
	}
	return s
}

// seedsFor runs fewer random cases on Pebble, which opens a database per
// subtask.
func seedsFor(backend string) int {
	if backend == stream.StateBackendPebble {
		return 6
	}
	return 30
}

func diff(got, want []string) string {
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return fmt.Sprintf("got %d rows, want %d; first difference at %d: got %q, want %q", len(got), len(want), i, got[i], want[i])
		}
	}
	return fmt.Sprintf("got %d rows, want %d", len(got), len(want))
}

func TestWindowJoinMatchesNestedLoops(t *testing.T) {
	const size = 100
	for _, backend := range backendNames {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			for seed := range seedsFor(backend) {
				r := rand.New(rand.NewPCG(uint64(seed), 1))
				steps := genSteps(r, 60)
				// Oracle: every pair of non-late records with equal keys in
				// one window.
				var all []rec
				wm := stream.MinWatermark
				for _, s := range steps {
					if s.recs == nil {
						wm = max(wm, s.wm)
						continue
					}
					for _, x := range s.recs {
						if w := x.ts - x.ts%size; w+size-1 > wm {
							all = append(all, x)
						}
					}
				}
				var want []string
				for _, l := range all {
					for _, rr := range all {
						if l.input == 0 && rr.input == 1 && l.key != nil && rr.key != nil && *l.key == *rr.key && l.ts/size == rr.ts/size {
							w := l.ts - l.ts%size
							want = append(want, fmtRow(l, rr, w, w+size)+fmt.Sprintf("@%d", w+size-1))
						}
					}
				}
				slices.Sort(want)
				if len(want) == 0 {
					t.Fatalf("seed %d: no pairs to check", seed)
				}
				newOp := func() stream.Operator {
					op, err := join.NewWindowJoin([]byte(`{"size": "100ms"}`))
					if err != nil {
						t.Fatal(err)
					}
					return op
				}
				for _, o := range cuts(backend, len(steps)/2) {
					if got := run(t, newOp, steps, o); !slices.Equal(got, want) {
						t.Fatalf("seed %d cut %d into %d: %s", seed, o.cut, o.par, diff(got, want))
					}
				}
			}
		})
	}
}

func TestStreamJoinMatchesNestedLoops(t *testing.T) {
	for _, backend := range backendNames {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			for seed := range seedsFor(backend) {
				r := rand.New(rand.NewPCG(uint64(seed), 2))
				steps := genSteps(r, 40)
				var all []rec
				for _, s := range steps {
					all = append(all, s.recs...)
				}
				var want []string
				for _, l := range all {
					for _, rr := range all {
						if l.input == 0 && rr.input == 1 && l.key != nil && rr.key != nil && *l.key == *rr.key {
							want = append(want, fmtRow(l, rr)+fmt.Sprintf("@%d", max(l.ts, rr.ts)))
						}
					}
				}
				slices.Sort(want)
				newOp := func() stream.Operator {
					op, err := join.NewStreamJoin([]byte(`{"rightPrefix": "r_"}`))
					if err != nil {
						t.Fatal(err)
					}
					return op
				}
				for _, o := range cuts(backend, len(steps)/3) {
					if got := run(t, newOp, steps, o); !slices.Equal(got, want) {
						t.Fatalf("seed %d cut %d into %d: %s", seed, o.cut, o.par, diff(got, want))
					}
				}
			}
		})
	}
}

// TestStreamJoinTTLMatchesNestedLoops: with a ttl, two rows join if and
// only if the later one arrives (in processing time) less than ttl after
// the earlier one, also across a restore.
func TestStreamJoinTTLMatchesNestedLoops(t *testing.T) {
	const ttl = 60
	for _, backend := range backendNames {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			for seed := range seedsFor(backend) {
				r := rand.New(rand.NewPCG(uint64(seed), 3))
				steps := genSteps(r, 60)
				// The processing time of each step: 0 to 20 ms after the
				// previous one.
				clockAt := make([]int64, len(steps))
				for i := 1; i < len(steps); i++ {
					clockAt[i] = clockAt[i-1] + r.Int64N(21)
				}
				type arrival struct {
					rec
					at int64
				}
				var all []arrival
				for i, s := range steps {
					for _, x := range s.recs {
						all = append(all, arrival{x, clockAt[i]})
					}
				}
				var want []string
				joined, expired := 0, 0
				for _, l := range all {
					for _, rr := range all {
						if l.input != 0 || rr.input != 1 || l.key == nil || rr.key == nil || *l.key != *rr.key {
							continue
						}
						if max(l.at, rr.at)-min(l.at, rr.at) >= ttl {
							expired++
							continue
						}
						joined++
						want = append(want, fmtRow(l.rec, rr.rec)+fmt.Sprintf("@%d", max(l.ts, rr.ts)))
					}
				}
				if joined == 0 || expired == 0 {
					t.Fatalf("seed %d: %d pairs join and %d are expired; the test needs both", seed, joined, expired)
				}
				slices.Sort(want)
				var now int64
				newOp := func() stream.Operator {
					op, err := join.NewStreamJoin([]byte(`{"ttl": "60ms"}`))
					if err != nil {
						t.Fatal(err)
					}
					join.SetClock(op, func() int64 { return now })
					return op
				}
				for _, o := range cuts(backend, len(steps)/2) {
					o.before = func(i int) { now = clockAt[i] }
					if got := run(t, newOp, steps, o); !slices.Equal(got, want) {
						t.Fatalf("seed %d cut %d into %d: %s", seed, o.cut, o.par, diff(got, want))
					}
				}
			}
		})
	}
}

// TestStreamJoinTTLExpiry: a row older than ttl does not join; one younger
// does, also after a restore.
func TestStreamJoinTTLExpiry(t *testing.T) {
	row := func(input int, v int64) []rec {
		k := "a"
		return []rec{{input: input, key: &k, v: v, ts: v}}
	}
	for _, backend := range backendNames {
		t.Run(backend, func(t *testing.T) {
			var now int64
			newOp := func() stream.Operator {
				op, err := join.NewStreamJoin([]byte(`{"ttl": "100ms"}`))
				if err != nil {
					t.Fatal(err)
				}
				join.SetClock(op, func() int64 { return now })
				return op
			}
			s := mustOpen(t, newOp(), backend, 0, 1, 0, nil)
			feed := func(now0 int64, recs []rec, want ...string) {
				t.Helper()
				now = now0
				var c collector
				if err := s.h.Op.ProcessBatch(recs[0].input, batchOf(recs), &c); err != nil {
					t.Fatal(err)
				}
				slices.Sort(c.rows)
				if !slices.Equal(c.rows, want) {
					t.Fatalf("at %d ms: output %q, want %q", now, c.rows, want)
				}
			}
			feed(0, row(0, 1))
			feed(99, row(1, 2), "a 1 1 a 2 2@2") // 99 ms old: joins
			feed(100, row(1, 3))                 // 100 ms old: expired
			st, err := s.h.Snapshot(1)
			if err != nil {
				t.Fatal(err)
			}
			s = mustOpen(t, newOp(), backend, 0, 1, 1, st)
			feed(150, row(0, 4), "a 4 4 a 2 2@4", "a 4 4 a 3 3@4")
			feed(198, row(0, 5), "a 5 5 a 2 2@5", "a 5 5 a 3 3@5")
			feed(199, row(0, 6), "a 6 6 a 3 3@6") // row 2 stored at 99 expired
			feed(200, row(0, 7))                  // row 3 stored at 100 expired
			// The read at 200 removed the expired rows.
			if n := s.countKeys(t, join.RightTable); n != 0 {
				t.Fatalf("right rows of %d keys stored after they expired", n)
			}
			if n := s.countKeys(t, join.LeftTable); n != 1 {
				t.Fatalf("left rows of %d keys stored, want 1", n)
			}
		})
	}
}

// TestStreamJoinTTLBoundsState: on an unbounded stream of new keys, a ttl
// keeps the number of keys with state bounded (incremental cleanup), while
// without one every key stays.
func TestStreamJoinTTLBoundsState(t *testing.T) {
	const (
		perKeys = 10 // rows per batch, each of a new key
		ttl     = 50 // ms; the clock moves 1 ms per batch
	)
	for _, backend := range backendNames {
		batches := 4000
		if backend == stream.StateBackendPebble {
			batches = 1000 // TTL cleanup on Pebble is slow under -race
		}
		for _, config := range []string{`{"ttl": "50ms"}`, `{}`} {
			t.Run(backend+" "+config, func(t *testing.T) {
				var now int64
				op, err := join.NewStreamJoin([]byte(config))
				if err != nil {
					t.Fatal(err)
				}
				join.SetClock(op, func() int64 { return now })
				s := mustOpen(t, op, backend, 0, 1, 0, nil)
				maxKeys := 0
				for i := range batches {
					now = int64(i)
					var recs []rec
					for j := range perKeys {
						k := fmt.Sprintf("k%d.%d", i, j)
						recs = append(recs, rec{input: i % 2, key: &k, v: int64(j)})
					}
					if err := s.h.Op.ProcessBatch(i%2, batchOf(recs), &collector{}); err != nil {
						t.Fatal(err)
					}
					if i%100 == 99 {
						n := s.countKeys(t, join.LeftTable) + s.countKeys(t, join.RightTable) + s.countKeys(t, join.RowsTable)
						maxKeys = max(maxKeys, n)
					}
				}
				if config == `{}` {
					if maxKeys != batches*perKeys {
						t.Fatalf("without ttl: %d keys with state, want all %d", maxKeys, batches*perKeys)
					}
					return
				}
				// Live: ttl batches of perKeys keys; cleanup lags behind by
				// about as many again.
				if bound := 3 * ttl * perKeys; maxKeys > bound {
					t.Fatalf("with ttl: up to %d keys with state, want at most %d", maxKeys, bound)
				}
				t.Logf("at most %d keys with state", maxKeys)
			})
		}
	}
}

// TestWindowJoinBoundsState: window_join's state of a key goes when its
// windows fire, so that on an unbounded stream of new keys it holds only the
// keys of open windows, and nothing after the final watermark.
func TestWindowJoinBoundsState(t *testing.T) {
	for _, backend := range backendNames {
		t.Run(backend, func(t *testing.T) {
			op, err := join.NewWindowJoin([]byte(`{"size": "100ms"}`))
			if err != nil {
				t.Fatal(err)
			}
			s := mustOpen(t, op, backend, 0, 1, 0, nil)
			c := &collector{}
			maxKeys := 0
			steps := 2000
			if backend == stream.StateBackendPebble {
				steps = 500
			}
			for i := range steps {
				ts := int64(i * 10) // 10 batches per window
				var recs []rec
				for j := range 5 {
					k := fmt.Sprintf("k%d", i*5+j)
					recs = append(recs, rec{input: i % 2, key: &k, v: int64(j), ts: ts})
				}
				if err := s.h.Op.ProcessBatch(i%2, batchOf(recs), c); err != nil {
					t.Fatal(err)
				}
				if err := s.h.Op.ProcessWatermark(ts-1, c); err != nil {
					t.Fatal(err)
				}
				if i%7 == 0 {
					maxKeys = max(maxKeys, s.countKeys(t, join.RowsTable))
				}
			}
			if maxKeys == 0 || maxKeys > 50 {
				t.Fatalf("up to %d keys with state; want at most the 50 of one window", maxKeys)
			}
			if err := s.h.Op.ProcessWatermark(stream.MaxWatermark, c); err != nil {
				t.Fatal(err)
			}
			if n := s.countKeys(t, join.RowsTable); n != 0 {
				t.Fatalf("%d keys with state after the final watermark", n)
			}
			if len(c.rows) != 0 {
				t.Fatalf("joined %d rows of distinct keys", len(c.rows))
			}
		})
	}
}

// TestWindowJoinLate: rows of windows that fired are dropped and counted,
// also after a restore (the watermark is operator state).
func TestWindowJoinLate(t *testing.T) {
	for _, backend := range backendNames {
		t.Run(backend, func(t *testing.T) {
			newOp := func() *join.WindowJoin {
				op, err := join.NewWindowJoin([]byte(`{"size": "100ms"}`))
				if err != nil {
					t.Fatal(err)
				}
				return op
			}
			k := "a"
			one := func(input int, ts int64) *stream.Batch {
				return batchOf([]rec{{input: input, key: &k, v: ts, ts: ts}})
			}
			op := newOp()
			s := mustOpen(t, op, backend, 0, 1, 0, nil)
			c := &collector{}
			for _, in := range []struct{ input, ts int64 }{{0, 10}, {1, 20}, {0, 150}} {
				if err := s.h.Op.ProcessBatch(int(in.input), one(int(in.input), in.ts), c); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.h.Op.ProcessWatermark(120, c); err != nil {
				t.Fatal(err)
			}
			if want := []string{"a 10 10 a 20 20 0 100@99"}; !slices.Equal(c.rows, want) {
				t.Fatalf("fired %q, want %q", c.rows, want)
			}
			st, err := s.h.Snapshot(1)
			if err != nil {
				t.Fatal(err)
			}
			op2 := newOp()
			s2 := mustOpen(t, op2, backend, 0, 1, 1, st)
			c2 := &collector{}
			if err := s2.h.Op.ProcessBatch(1, one(1, 50), c2); err != nil { // late
				t.Fatal(err)
			}
			if err := s2.h.Op.ProcessBatch(1, one(1, 160), c2); err != nil {
				t.Fatal(err)
			}
			if err := s2.h.Op.ProcessWatermark(stream.MaxWatermark, c2); err != nil {
				t.Fatal(err)
			}
			if want := []string{"a 150 150 a 160 160 100 200@199"}; !slices.Equal(c2.rows, want) {
				t.Fatalf("after restore fired %q, want %q", c2.rows, want)
			}
			if op2.LateRecordsDropped() != 1 {
				t.Fatalf("LateRecordsDropped = %d, want 1", op2.LateRecordsDropped())
			}
		})
	}
}

func TestRestoreErrors(t *testing.T) {
	newStream := func(config string) stream.Operator {
		op, err := join.NewStreamJoin([]byte(config))
		if err != nil {
			t.Fatal(err)
		}
		return op
	}
	k := "a"
	for _, backend := range backendNames {
		t.Run(backend, func(t *testing.T) {
			a := mustOpen(t, newStream(`{}`), backend, 0, 1, 0, nil)
			if err := a.h.Op.ProcessBatch(0, batchOf([]rec{{input: 0, key: &k, v: 1}}), &collector{}); err != nil {
				t.Fatal(err)
			}
			st, err := a.h.Snapshot(1)
			if err != nil {
				t.Fatal(err)
			}
			// Keyed by other types, or with other row types.
			otherRows := stream.MustSchema(
				stream.Field{Name: "k", Type: stream.TypeString},
				stream.Field{Name: "v", Type: stream.TypeString},
				stream.Field{Name: "ts", Type: stream.TypeTimestamp})
			for _, tc := range []struct {
				name string
				in   []*stream.Schema
				keys [][]string
			}{
				{"key types", []*stream.Schema{leftSchema, rightSchema}, [][]string{{"ts"}, {"ts"}}},
				{"row types", []*stream.Schema{otherRows, rightSchema}, [][]string{{"k"}, {"key"}}},
			} {
				octx := &stream.OperatorContext{OperatorUID: "j", Subtask: 0, Parallelism: 1, MaxParallelism: maxPar,
					KeyGroups: stream.KeyGroupRangeFor(maxPar, 1, 0), InputSchemas: tc.in, InputKeys: tc.keys,
					StateBackend: backend, LocalStateDir: t.TempDir()}
				h, err := dataflowtest.Open(t.Context(), newStream(`{}`), octx, 1, st)
				if err == nil {
					h.Close(true)
					t.Fatalf("restore with other %s succeeded", tc.name)
				}
				t.Logf("restore with other %s: %v", tc.name, err)
			}
			// With ttl switched on, and from there off again.
			_, err = openSubtask(t, newStream(`{"ttl": "1m"}`), backend, 0, 1, 1, st)
			if err == nil || !strings.Contains(err.Error(), "another ttl setting") {
				t.Fatalf("restore with ttl switched on = %v", err)
			}
			b := mustOpen(t, newStream(`{"ttl": "1m"}`), backend, 0, 1, 0, nil)
			if err := b.h.Op.ProcessBatch(0, batchOf([]rec{{input: 0, key: &k, v: 1}}), &collector{}); err != nil {
				t.Fatal(err)
			}
			if st, err = b.h.Snapshot(2); err != nil {
				t.Fatal(err)
			}
			_, err = openSubtask(t, newStream(`{}`), backend, 0, 1, 2, st)
			if err == nil || !strings.Contains(err.Error(), "another ttl setting") {
				t.Fatalf("restore with ttl switched off = %v", err)
			}
		})
	}
}

// TestMisrouted: rows of key groups the subtask does not own are an error,
// not a panic.
func TestMisrouted(t *testing.T) {
	k := "a"
	for _, op := range []func() (stream.Operator, error){
		func() (stream.Operator, error) { return join.NewStreamJoin(nil) },
		func() (stream.Operator, error) { return join.NewWindowJoin([]byte(`{"size": "1s"}`)) },
	} {
		o, err := op()
		if err != nil {
			t.Fatal(err)
		}
		s := mustOpen(t, o, stream.StateBackendHeap, 0, maxPar, 0, nil)
		var perr error
		for i := range 20 {
			key := fmt.Sprint(k, i)
			if perr = s.h.Op.ProcessBatch(0, batchOf([]rec{{input: 0, key: &key}}), &collector{}); perr != nil {
				break
			}
		}
		if perr == nil || !strings.Contains(perr.Error(), "routed to the wrong subtask") {
			t.Fatalf("%T with foreign keys = %v", o, perr)
		}
	}
}

func TestPlan(t *testing.T) {
	reg := stream.NewRegistry()
	join.Register(reg)
	tests := []struct {
		name, typ, config string
		keys              [2][]string
		wantErr           string
		wantOut           string
	}{
		{"window", join.TypeWindowJoin, `{"size": "10s"}`, [2][]string{{"k"}, {"key"}}, "",
			"(k string, v int64, ts timestamp, key string, right_v float64, right_ts timestamp, window_start timestamp, window_end timestamp)"},
		{"stream prefix", join.TypeStreamJoin, `{"rightPrefix": "b_"}`, [2][]string{{"k"}, {"key"}}, "",
			"(k string, v int64, ts timestamp, key string, b_v float64, b_ts timestamp)"},
		{"stream ttl", join.TypeStreamJoin, `{"ttl": "10m"}`, [2][]string{{"k"}, {"key"}}, "",
			"(k string, v int64, ts timestamp, key string, right_v float64, right_ts timestamp)"},
		{"no size", join.TypeWindowJoin, `{}`, [2][]string{{"k"}, {"key"}}, "size is required", ""},
		{"unkeyed", join.TypeStreamJoin, `{}`, [2][]string{{"k"}, nil}, "input 1 is not keyed", ""},
		{"type mismatch", join.TypeStreamJoin, `{}`, [2][]string{{"v"}, {"key"}}, "same type", ""},
		{"stream size", join.TypeStreamJoin, `{"size": "1s"}`, [2][]string{{"k"}, {"key"}}, "options of window_join", ""},
		{"window ttl", join.TypeWindowJoin, `{"size": "1s", "ttl": "1m"}`, [2][]string{{"k"}, {"key"}}, "ttl is an option of stream_join", ""},
		{"ttl not a duration", join.TypeStreamJoin, `{"ttl": "10"}`, [2][]string{{"k"}, {"key"}}, `ttl "10" is not a duration`, ""},
		{"ttl zero", join.TypeStreamJoin, `{"ttl": "0s"}`, [2][]string{{"k"}, {"key"}}, "at least 1ms", ""},
		{"ttl sub-ms", join.TypeStreamJoin, `{"ttl": "1500us"}`, [2][]string{{"k"}, {"key"}}, "whole number of milliseconds", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			typ, _ := reg.Lookup(tc.typ, false)
			out, err := typ.Plan(&stream.PlanContext{Config: []byte(tc.config), Inputs: []stream.PlanInput{
				{Schema: leftSchema, KeyFields: tc.keys[0]}, {Schema: rightSchema, KeyFields: tc.keys[1]}}})
			if tc.wantErr != "" {
				if err == nil || !errors.Is(err, stream.ErrConfig) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want a config error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if out.String() != tc.wantOut {
				t.Fatalf("output %s, want %s", out, tc.wantOut)
			}
		})
	}
}
