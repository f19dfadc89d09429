package window

import (
	"cmp"
	"slices"
	"strings"

	"github.com/weirstream/weir/operators/internal/rowenc"
	"github.com/weirstream/weir/stream"
)

// This file holds all of a window operator's state: the keys it has seen and
// one accumulator slot per (key, pane). A pane is the slide-long interval
// [start, start+slide); a window is size/slide consecutive panes, and its
// result is the merge of its panes' accumulators (for tumbling windows pane
// and window coincide). Each record therefore updates exactly one slot, however
// many sliding windows it belongs to.
//
// Next milestone (keyed-state backends): store is what moves behind the
// statebackend interface. Its (key, pane) → accumulator slots (the per-key
// slot lists and the accs columns) become keyed aggregating state with the
// pane start as namespace, stored per key group (keyTable.group, from
// stream.KeyGroupForHash) so that ranges can be snapshotted and
// redistributed on rescale; the pane list (store.order, store.panes) becomes
// the event-time timers; keyTable becomes the backend's key serialisation. The per-batch column loops in accs.update
// stay, writing into slots the backend hands out.

// keyTable interns the distinct keys of live slots as dense key ids. Key
// values are kept by column, one stream.Column per key field, indexed by key
// id. Lookups go through the key hash (stream.HashKeys, the same hash that
// routes records to key groups) in an open-addressing table and compare the
// actual values, so hash collisions are harmless.
//
// A key whose last slot is freed is forgotten only if it is still unused one
// clean-up round later: with tumbling windows every key loses its only slot
// at each window end and usually comes straight back in the next window.
type keyTable struct {
	src    []int           // key columns of the input
	types  []stream.Type   // of the key columns
	cols   []stream.Column // key values by key id
	hash   []uint64
	group  []int32 // key group of each key
	refs   []int32 // live slots of each key
	free   []int32
	maxPar int

	// table is probed linearly from hash&mask. An entry holds the top 32
	// bits of the key's hash above key id+1, so that most mismatches are
	// rejected without touching the key columns; 0 is empty.
	table []uint64
	mask  uint64
	n     int // keys in table

	// Keys whose refs fell to zero (last in round zeroRound[k]) are listed
	// in idle until a sweep forgets them or finds them in use again.
	round     int32
	zeroRound []int32
	inIdle    []bool
	idle      []int32

	// head is each key's slot with the latest pane, or -1; the key's other
	// slots follow through store.next, latest pane first.
	head []int32

	// intKey is set when the key is one int64 or timestamp field.
	intKey bool
}

func newKeyTable(src []int, types []stream.Type, maxPar int) *keyTable {
	kt := &keyTable{src: src, types: types, cols: make([]stream.Column, len(src)), maxPar: maxPar}
	for j, t := range types {
		kt.cols[j].Type = t
	}
	kt.intKey = len(types) == 1 && (types[0] == stream.TypeInt64 || types[0] == stream.TypeTimestamp)
	kt.table = make([]uint64, 64)
	kt.mask = 63
	return kt
}

// live returns the number of keys held.
func (kt *keyTable) live() int { return kt.n }

// find returns the id of the key of row i of b, whose key hash is h, or -1.
func (kt *keyTable) find(h uint64, b *stream.Batch, i int) int32 {
	for p := h & kt.mask; ; p = (p + 1) & kt.mask {
		e := kt.table[p]
		if e == 0 {
			return -1
		}
		if e>>32 == h>>32 {
			if k := int32(uint32(e)) - 1; kt.hash[k] == h && kt.equal(k, b, i) {
				return k
			}
		}
	}
}

// findInt is find for an intKey table and a non-null key v.
func (kt *keyTable) findInt(h uint64, v int64) int32 {
	c := &kt.cols[0]
	for p := h & kt.mask; ; p = (p + 1) & kt.mask {
		e := kt.table[p]
		if e == 0 {
			return -1
		}
		if e>>32 == h>>32 {
			if k := int32(uint32(e)) - 1; c.Ints[k] == v && (c.Nulls == nil || !rowenc.IsNull(c, int(k))) {
				return k
			}
		}
	}
}

// equal reports whether key k equals the key of row i of b.
func (kt *keyTable) equal(k int32, b *stream.Batch, i int) bool {
	for j, c := range kt.src {
		in, kc := &b.Cols[c], &kt.cols[j]
		inNull, kNull := rowenc.IsNull(in, i), rowenc.IsNull(kc, int(k))
		if inNull || kNull {
			if inNull != kNull {
				return false
			}
			continue
		}
		switch kc.Type {
		case stream.TypeInt64, stream.TypeTimestamp:
			if in.Ints[i] != kc.Ints[k] {
				return false
			}
		case stream.TypeFloat64:
			x, y := in.Floats[i], kc.Floats[k]
			if x != y && (x == x || y == y) { // NaN equals NaN as a key
				return false
			}
		case stream.TypeString:
			if in.Strs[i] != kc.Strs[k] {
				return false
			}
		case stream.TypeBool:
			if in.Bools[i] != kc.Bools[k] {
				return false
			}
		}
	}
	return true
}

// insert adds the key of row i of b (hash h) and returns its id.
func (kt *keyTable) insert(h uint64, b *stream.Batch, i int) int32 {
	var k int32
	if n := len(kt.free); n > 0 {
		k = kt.free[n-1]
		kt.free = kt.free[:n-1]
	} else {
		k = int32(len(kt.hash))
		kt.hash = append(kt.hash, 0)
		kt.group = append(kt.group, 0)
		kt.refs = append(kt.refs, 0)
		kt.zeroRound = append(kt.zeroRound, 0)
		kt.inIdle = append(kt.inIdle, false)
		kt.head = append(kt.head, 0)
	}
	for j, c := range kt.src {
		setValue(&kt.cols[j], int(k), &b.Cols[c], i)
	}
	kt.hash[k] = h
	kt.group[k] = int32(stream.KeyGroupForHash(h, kt.maxPar))
	kt.refs[k] = 0
	kt.head[k] = -1
	if 2*(kt.n+1) > len(kt.table) {
		kt.rehash(2 * len(kt.table))
	}
	kt.place(k)
	kt.n++
	return k
}

func (kt *keyTable) place(k int32) {
	h := kt.hash[k]
	p := h & kt.mask
	for kt.table[p] != 0 {
		p = (p + 1) & kt.mask
	}
	kt.table[p] = h>>32<<32 | uint64(k+1)
}

func (kt *keyTable) rehash(size int) {
	old := kt.table
	kt.table = make([]uint64, size)
	kt.mask = uint64(size - 1)
	for _, e := range old {
		if e != 0 {
			kt.place(int32(uint32(e)) - 1)
		}
	}
}

// remove takes key k out of the table, shifting later entries of its probe
// run back so that lookups need no tombstones.
func (kt *keyTable) remove(k int32) {
	mask := kt.mask
	p := kt.hash[k] & mask
	for uint32(kt.table[p]) != uint32(k+1) {
		p = (p + 1) & mask
	}
	kt.table[p] = 0
	for q := (p + 1) & mask; kt.table[q] != 0; q = (q + 1) & mask {
		home := kt.hash[uint32(kt.table[q])-1] & mask
		// Move the entry at q into the hole at p unless its home lies
		// cyclically in (p, q].
		if (q > p && (home <= p || home > q)) || (q < p && home <= p && home > q) {
			kt.table[p] = kt.table[q]
			kt.table[q] = 0
			p = q
		}
	}
	kt.n--
}

// acquire adds a slot reference to key k.
func (kt *keyTable) acquire(k int32) { kt.refs[k]++ }

// release drops one slot reference of key k; a key left without slots is
// forgotten by a later sweep if it stays that way.
func (kt *keyTable) release(k int32) {
	if kt.refs[k]--; kt.refs[k] == 0 {
		kt.zeroRound[k] = kt.round
		if !kt.inIdle[k] {
			kt.inIdle[k] = true
			kt.idle = append(kt.idle, k)
		}
	}
}

// sweep ends a clean-up round: keys that have had no slots since an earlier
// round (or at all, if all is set) are forgotten.
func (kt *keyTable) sweep(all bool) {
	keep := kt.idle[:0]
	for _, k := range kt.idle {
		switch {
		case kt.refs[k] > 0: // in use again
			kt.inIdle[k] = false
		case kt.zeroRound[k] < kt.round || all:
			kt.inIdle[k] = false
			kt.forget(k)
		default:
			keep = append(keep, k)
		}
	}
	kt.idle = keep
	kt.round++
}

func (kt *keyTable) forget(k int32) {
	kt.remove(k)
	for j := range kt.cols {
		if c := &kt.cols[j]; c.Type == stream.TypeString {
			c.Strs[k] = "" // do not pin the string
		}
	}
	kt.free = append(kt.free, k)
}

// compare orders keys a and b by their values, field by field; null sorts
// first.
func (kt *keyTable) compare(a, b int32) int {
	for j := range kt.cols {
		c := &kt.cols[j]
		an, bn := rowenc.IsNull(c, int(a)), rowenc.IsNull(c, int(b))
		switch {
		case an && bn:
			continue
		case an:
			return -1
		case bn:
			return 1
		}
		var r int
		switch c.Type {
		case stream.TypeInt64, stream.TypeTimestamp:
			r = cmp.Compare(c.Ints[a], c.Ints[b])
		case stream.TypeFloat64:
			r = cmp.Compare(c.Floats[a], c.Floats[b])
		case stream.TypeString:
			r = strings.Compare(c.Strs[a], c.Strs[b])
		case stream.TypeBool:
			r = cmp.Compare(b2i(c.Bools[a]), b2i(c.Bools[b]))
		}
		if r != 0 {
			return r
		}
	}
	return 0
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// setValue stores row i of src at index k of dst, appending when k is dst's
// length. Strings are cloned: the input batch may share their memory.
func setValue(dst *stream.Column, k int, src *stream.Column, i int) {
	null := rowenc.IsNull(src, i)
	switch dst.Type {
	case stream.TypeInt64, stream.TypeTimestamp:
		if k == len(dst.Ints) {
			dst.Ints = append(dst.Ints, 0)
		}
		dst.Ints[k] = src.Ints[i]
	case stream.TypeFloat64:
		if k == len(dst.Floats) {
			dst.Floats = append(dst.Floats, 0)
		}
		dst.Floats[k] = src.Floats[i]
	case stream.TypeString:
		if k == len(dst.Strs) {
			dst.Strs = append(dst.Strs, "")
		}
		dst.Strs[k] = strings.Clone(src.Strs[i])
	case stream.TypeBool:
		if k == len(dst.Bools) {
			dst.Bools = append(dst.Bools, false)
		}
		dst.Bools[k] = src.Bools[i]
	}
	switch {
	case null:
		dst.SetNull(k, k+1)
	case dst.Nulls != nil && k>>6 < len(dst.Nulls):
		dst.Nulls[k>>6] &^= 1 << (uint(k) & 63)
	}
}

// appendValue appends key k's value in src to out, whose row count before
// the append is row.
func appendValue(out *stream.Column, row int, src *stream.Column, k int32) {
	switch src.Type {
	case stream.TypeInt64, stream.TypeTimestamp:
		out.Ints = append(out.Ints, src.Ints[k])
	case stream.TypeFloat64:
		out.Floats = append(out.Floats, src.Floats[k])
	case stream.TypeString:
		out.Strs = append(out.Strs, src.Strs[k])
	case stream.TypeBool:
		out.Bools = append(out.Bools, src.Bools[k])
	}
	if rowenc.IsNull(src, int(k)) {
		out.SetNull(row, row+1)
	}
}

// pane lists the slots of one pane start.
type pane struct {
	start int64
	slots []int32
}

// store is the operator's state: keys, and one accumulator slot per
// (key, pane) with data. A key's slots form a doubly linked list ordered by
// pane, latest first (keyTable.head, next, prev), so that the usual lookups
// (the latest pane, a recent one) take a step or two and freeing a slot is
// O(1).
type store struct {
	keys      *keyTable
	acc       *accs
	owner     []int32 // key id of each slot
	slotPane  []int64 // pane start of each slot
	next      []int32 // the owner's slot with the next earlier pane, or -1
	prev      []int32 // the owner's slot with the next later pane, or -1
	freeSlots []int32
	panes     map[int64]*pane
	order     []int64 // starts of the panes, ascending
	spare     []*pane
}

func newStore(keys *keyTable, aggs []aggSpec) *store {
	return &store{keys: keys, acc: newAccs(aggs), panes: make(map[int64]*pane)}
}

// liveSlots returns the number of (key, pane) accumulators held.
func (st *store) liveSlots() int { return st.acc.size() - len(st.freeSlots) }

// slot returns the slot of key k in the pane starting at p, creating it.
func (st *store) slot(k int32, p int64) int32 {
	s := st.keys.head[k]
	if s >= 0 && st.slotPane[s] == p {
		return s
	}
	before := int32(-1) // the slot after which a new one goes
	for s >= 0 && st.slotPane[s] > p {
		before, s = s, st.next[s]
	}
	if s >= 0 && st.slotPane[s] == p {
		return s
	}
	return st.newSlot(k, p, before, s)
}

// newSlot creates the slot of key k in pane p, linked between slots
// before (a later pane, or -1 for the head) and after (an earlier one).
func (st *store) newSlot(k int32, p int64, before, after int32) int32 {
	var s int32
	if n := len(st.freeSlots); n > 0 {
		s = st.freeSlots[n-1]
		st.freeSlots = st.freeSlots[:n-1]
	} else {
		s = int32(st.acc.size())
		st.acc.grow(int(s) + 1)
		st.owner = append(st.owner, 0)
		st.slotPane = append(st.slotPane, 0)
		st.next = append(st.next, 0)
		st.prev = append(st.prev, 0)
	}
	st.acc.reset(s)
	st.owner[s], st.slotPane[s] = k, p
	st.prev[s], st.next[s] = before, after
	if before >= 0 {
		st.next[before] = s
	} else {
		st.keys.head[k] = s
	}
	if after >= 0 {
		st.prev[after] = s
	}
	st.keys.acquire(k)
	pn := st.panes[p]
	if pn == nil {
		if n := len(st.spare); n > 0 {
			pn = st.spare[n-1]
			st.spare = st.spare[:n-1]
		} else {
			pn = new(pane)
		}
		pn.start = p
		st.panes[p] = pn
		i, _ := slices.BinarySearch(st.order, p)
		st.order = slices.Insert(st.order, i, p)
	}
	pn.slots = append(pn.slots, s)
	return s
}

// lookup returns the slot of key k in the pane starting at p, if any.
func (st *store) lookup(k int32, p int64) (int32, bool) {
	s := st.keys.head[k]
	for s >= 0 && st.slotPane[s] > p {
		s = st.next[s]
	}
	return s, s >= 0 && st.slotPane[s] == p
}

// panesIn returns the starts of the panes with data in [from, to).
func (st *store) panesIn(from, to int64) []int64 {
	i, _ := slices.BinarySearch(st.order, from)
	j, _ := slices.BinarySearch(st.order, to)
	return st.order[i:j]
}

// dropThrough frees every pane whose start is at most limit, with its slots.
// Keys left without slots are forgotten a round later, or at once if all.
func (st *store) dropThrough(limit int64, all bool) {
	n := 0
	for _, p := range st.order {
		if p > limit {
			break
		}
		pn := st.panes[p]
		for _, s := range pn.slots {
			k := st.owner[s]
			if b := st.prev[s]; b >= 0 {
				st.next[b] = st.next[s]
			} else {
				st.keys.head[k] = st.next[s]
			}
			if a := st.next[s]; a >= 0 {
				st.prev[a] = st.prev[s]
			}
			st.keys.release(k)
			st.freeSlots = append(st.freeSlots, s)
		}
		pn.slots = pn.slots[:0]
		delete(st.panes, p)
		st.spare = append(st.spare, pn)
		n++
	}
	st.order = slices.Delete(st.order, 0, n)
	if n > 0 || all {
		st.keys.sweep(all)
	}
}
