package golden

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/weirstream/weir/stream"
)

// The inputs: events for the one-input operators, left and right for the
// joins (keyed by k, which is sometimes null in the joins).
var (
	events = stream.MustSchema(
		stream.Field{Name: "k", Type: stream.TypeString},
		stream.Field{Name: "seq", Type: stream.TypeInt64},
		stream.Field{Name: "v", Type: stream.TypeFloat64})
	left = stream.MustSchema(
		stream.Field{Name: "k", Type: stream.TypeString},
		stream.Field{Name: "a", Type: stream.TypeInt64})
	right = stream.MustSchema(
		stream.Field{Name: "k", Type: stream.TypeString},
		stream.Field{Name: "b", Type: stream.TypeFloat64})
)

// gen draws deterministic test input from a seed with splitmix64
// (stream.Mix64, which never changes), so that a fixture's input stays
// what it was when the fixture was written; math/rand does not promise
// that its streams stay the same.
type gen struct{ s uint64 }

// intn returns a number in [0, n).
func (g *gen) intn(n int) int64 {
	g.s += stream.Golden64
	return int64(stream.Mix64(g.s) % uint64(n))
}

// times advances the event time of a generated row: mostly ascending, one
// row in eight up to 150ms back (late, once the watermark has passed it).
func (g *gen) time(ts *int64) int64 {
	*ts += g.intn(30)
	if g.intn(8) == 0 {
		return max(0, *ts-g.intn(150))
	}
	return *ts
}

// genEvents returns n batches of events over ten keys, each key's seq
// counting 1, 2, 3, ..., v sometimes null, with ascending watermarks in
// between.
func genEvents(seed uint64, n int) []step {
	g := &gen{s: seed}
	seqs := map[string]int64{}
	ts, wm := int64(1000), stream.MinWatermark
	var steps []step
	for range n {
		s := step{}
		for range 1 + g.intn(6) {
			t := g.time(&ts)
			k := fmt.Sprintf("k%d", g.intn(10))
			seqs[k]++
			var v any = float64(g.intn(20))
			if g.intn(15) == 0 {
				v = nil
			}
			s.rows = append(s.rows, []any{k, seqs[k], v})
			s.times = append(s.times, t)
		}
		steps = append(steps, s)
		if g.intn(3) == 0 && ts-1 > wm {
			wm = ts - 1
			steps = append(steps, step{wm: wm})
		}
	}
	return steps
}

// genJoin returns n batches, each of one input, over eight keys (one row in
// twenty with a null key), with ascending watermarks in between.
func genJoin(seed uint64, n int) []step {
	g := &gen{s: seed}
	ts, wm := int64(1000), stream.MinWatermark
	var steps []step
	for range n {
		s := step{input: int(g.intn(2))}
		for range 1 + g.intn(5) {
			t := g.time(&ts)
			var k any = fmt.Sprintf("k%d", g.intn(8))
			if g.intn(20) == 0 {
				k = nil
			}
			if s.input == 0 {
				s.rows = append(s.rows, []any{k, g.intn(1000)})
			} else {
				s.rows = append(s.rows, []any{k, float64(g.intn(1000)) / 4})
			}
			s.times = append(s.times, t)
		}
		steps = append(steps, s)
		if g.intn(3) == 0 && ts-1 > wm {
			wm = ts - 1
			steps = append(steps, step{wm: wm})
		}
	}
	return steps
}

// The oracles compute an operator's output from its documentation, by
// brute force.

// runningCount: per row, its key and the key's count so far.
func runningCount(steps []step) []string {
	counts := map[any]int64{}
	var out []string
	for _, s := range steps {
		for i, r := range s.rows {
			counts[r[0]]++
			out = append(out, formatRow([]any{r[0], counts[r[0]]}, s.times[i], true))
		}
	}
	slices.Sort(out)
	return out
}

// passThrough: every row as it came (sequence_check, whose input is in
// sequence).
func passThrough(steps []step) []string {
	var out []string
	for _, s := range steps {
		for i, r := range s.rows {
			out = append(out, formatRow(r, s.times[i], true))
		}
	}
	slices.Sort(out)
	return out
}

// stored is a row kept by a join oracle.
type stored struct {
	row []any
	ts  int64
}

// streamJoin: each row with a key joins every earlier row of the other
// input with that key, at the later event time.
func streamJoin(steps []step) []string {
	rows := [2]map[any][]stored{{}, {}}
	var out []string
	for _, s := range steps {
		for i, r := range s.rows {
			if r[0] == nil {
				continue
			}
			for _, o := range rows[1-s.input][r[0]] {
				l, rr := r, o.row
				if s.input == 1 {
					l, rr = o.row, r
				}
				out = append(out, formatRow(slices.Concat(l, rr), max(s.times[i], o.ts), true))
			}
		}
		for i, r := range s.rows {
			if r[0] != nil {
				rows[s.input][r[0]] = append(rows[s.input][r[0]], stored{r, s.times[i]})
			}
		}
	}
	slices.Sort(out)
	return out
}

// windowJoin: rows with equal keys in the same tumbling window of size ms
// join, with the window's bounds, at its end-1; a row whose window ended
// by the watermark is dropped.
func windowJoin(size int64) func([]step) []string {
	return func(steps []step) []string {
		type kw struct {
			k     any
			start int64
		}
		rows := map[kw]*[2][][]any{}
		var order []kw
		wm := stream.MinWatermark
		for _, s := range steps {
			if s.rows == nil {
				wm = max(wm, s.wm)
				continue
			}
			for i, r := range s.rows {
				start := s.times[i] - s.times[i]%size
				if start+size-1 <= wm || r[0] == nil {
					continue
				}
				w := kw{r[0], start}
				if rows[w] == nil {
					rows[w] = &[2][][]any{}
					order = append(order, w)
				}
				rows[w][s.input] = append(rows[w][s.input], r)
			}
		}
		var out []string
		for _, w := range order {
			for _, l := range rows[w][0] {
				for _, r := range rows[w][1] {
					out = append(out, formatRow(slices.Concat(l, r, []any{w.start, w.start + size}), w.start+size-1, true))
				}
			}
		}
		slices.Sort(out)
		return out
	}
}

// topN: per key and window (size ms, starting every slide ms), the n rows
// with the largest v (earlier arrivals first among equal ones; with ties,
// and every row equal to the n-th), with the window's bounds and, with
// rank, their rank, at the window's end-1. A row none of whose windows is
// open is dropped; a null v never ranks.
func topN(size, slide int64, n int, ties, rank bool) func([]step) []string {
	return func(steps []step) []string {
		type kw struct {
			k   any
			end int64
		}
		type arrival struct {
			row []any
			seq int
		}
		groups := map[kw][]arrival{}
		wm := stream.MinWatermark
		seq := 0
		for _, s := range steps {
			if s.rows == nil {
				wm = max(wm, s.wm)
				continue
			}
			for i, r := range s.rows {
				seq++
				ts := s.times[i]
				last := ts - ts%slide // the start of the last window holding ts
				if last+size-1 <= wm || r[2] == nil {
					continue
				}
				for start := last; start > ts-size; start -= slide {
					if end := start + size; end-1 > wm {
						groups[kw{r[0], end}] = append(groups[kw{r[0], end}], arrival{r, seq})
					}
				}
			}
		}
		var out []string
		for g, rs := range groups {
			slices.SortFunc(rs, func(a, b arrival) int {
				if c := cmp.Compare(b.row[2].(float64), a.row[2].(float64)); c != 0 {
					return c
				}
				return cmp.Compare(a.seq, b.seq)
			})
			keep := min(n, len(rs))
			if ties {
				for keep < len(rs) && rs[keep].row[2] == rs[keep-1].row[2] {
					keep++
				}
			}
			rk := 0
			for i, a := range rs[:keep] {
				if i == 0 || a.row[2] != rs[i-1].row[2] {
					rk = i + 1
				}
				vals := slices.Concat(a.row, []any{g.end - size, g.end})
				if rank {
					vals = append(vals, int64(rk))
				}
				out = append(out, formatRow(vals, g.end-1, true))
			}
		}
		slices.Sort(out)
		return out
	}
}

// windowAgg is the output of a tumbling (slide = size) or sliding window
// over events keyed by k with aggregates count(*), sum(v) and max(v): a
// row counts in every window holding it whose end-1 the watermark had not
// passed when it arrived (allowedLateness 0), unless its pane's last window
// had (then it is dropped).
func windowAgg(size, slide int64) func([]step) []string {
	return func(steps []step) []string {
		type kw struct {
			k   any
			end int64
		}
		type acc struct {
			n        int64
			sum, top float64
			has      bool
		}
		accs := map[kw]*acc{}
		wm := stream.MinWatermark
		for _, s := range steps {
			if s.rows == nil {
				wm = max(wm, s.wm)
				continue
			}
			for i, r := range s.rows {
				ts := s.times[i]
				last := ts - ts%slide // the start of the last window holding ts
				if last+size-1 <= wm {
					continue
				}
				for start := last; start > ts-size; start -= slide {
					end := start + size
					if end-1 <= wm {
						continue
					}
					a := accs[kw{r[0], end}]
					if a == nil {
						a = &acc{}
						accs[kw{r[0], end}] = a
					}
					a.n++
					if v, ok := r[2].(float64); ok {
						a.sum += v
						if !a.has || v > a.top {
							a.top = v
						}
						a.has = true
					}
				}
			}
		}
		var out []string
		for g, a := range accs {
			var top any
			if a.has {
				top = a.top
			}
			out = append(out, formatRow([]any{g.k, g.end - size, g.end, a.n, a.sum, top}, g.end-1, true))
		}
		slices.Sort(out)
		return out
	}
}

// sessionAgg is the output of a session window with gap gap ms over events
// keyed by k with aggregates count(*), sum(v) and max(v), and no allowed
// lateness. A row at t opens the window [t, t+gap); it joins every held
// session of its key that the window overlaps or touches ([a, b) and
// [c, d) meet when a <= d and c <= b), and they become one session
// covering them all. A session is held until the watermark reaches its
// end-1, when it is emitted with its bounds at end-1. A row that meets no
// held session is dropped when the watermark has reached t+gap-1; a row
// behind the watermark that meets a held session joins it.
func sessionAgg(gap int64) func([]step) []string {
	return func(steps []step) []string {
		type session struct {
			start, end int64
			n          int64
			sum, top   float64
			has        bool
		}
		held := map[any][]*session{}
		var out []string
		emit := func(k any, s *session) {
			var top any
			if s.has {
				top = s.top
			}
			out = append(out, formatRow([]any{k, s.start, s.end, s.n, s.sum, top}, s.end-1, true))
		}
		wm := stream.MinWatermark
		for _, s := range steps {
			if s.rows == nil {
				wm = max(wm, s.wm)
				for k, ss := range held {
					var keep []*session
					for _, x := range ss {
						if x.end-1 <= wm {
							emit(k, x)
						} else {
							keep = append(keep, x)
						}
					}
					held[k] = keep
				}
				continue
			}
			for i, r := range s.rows {
				t := s.times[i]
				m := &session{start: t, end: t + gap, n: 1}
				var rest []*session
				met := false
				for _, x := range held[r[0]] {
					if x.start <= m.end && m.start <= x.end {
						met = true
						m.start, m.end = min(m.start, x.start), max(m.end, x.end)
						m.n += x.n
						m.sum += x.sum
						if x.has && (!m.has || x.top > m.top) {
							m.top, m.has = x.top, true
						}
					} else {
						rest = append(rest, x)
					}
				}
				if !met && wm != stream.MinWatermark && t+gap-1 <= wm {
					continue
				}
				if v, ok := r[2].(float64); ok {
					m.sum += v
					if !m.has || v > m.top {
						m.top, m.has = v, true
					}
				}
				held[r[0]] = append(rest, m)
			}
		}
		for k, ss := range held {
			for _, x := range ss {
				emit(k, x)
			}
		}
		slices.Sort(out)
		return out
	}
}
