package window

import (
	"cmp"
	"encoding/binary"
	"slices"
	"strings"

	"github.com/weirstream/weir/operators/internal/rowenc"
	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/stream"
)

// paneIndex is how a window fires on a backend that keeps its values in
// memory (statebackend.Slots.InPlace, the heap backend): instead of a timer
// per key and window it lists the slots of each pane, so that firing a
// window walks the slots of its panes, merging by a dense key id, and
// dropping a pane frees its slots. It is derived from the state (LoadAll
// rebuilds it after a restore), never snapshotted.
type paneIndex struct {
	slots *statebackend.Slots
	panes map[int64][]int32 // slot ids by pane start
	order []int64           // pane starts, ascending

	// Keys of live slots as dense ids: ids by key group and key bytes,
	// and per id the key's values (cols, row = id) and live slot count.
	ids    map[string]int32
	names  []string // by id: the ids key, to forget it
	refs   []int32
	free   []int32
	idle   []int32 // keys whose slots all went at the last drop
	keyOf  []int32 // by slot id
	cols   []stream.Column
	intKey bool
	buf    []byte
	// removed says that remove took slots out that compact has not
	// dropped from panes yet.
	removed bool
}

func newPaneIndex(slots *statebackend.Slots, keyTypes []stream.Type) *paneIndex {
	x := &paneIndex{slots: slots, panes: make(map[int64][]int32), ids: make(map[string]int32), cols: make([]stream.Column, len(keyTypes))}
	for j, t := range keyTypes {
		x.cols[j].Type = t
	}
	x.intKey = len(keyTypes) == 1 && (keyTypes[0] == stream.TypeInt64 || keyTypes[0] == stream.TypeTimestamp)
	return x
}

// add indexes a new slot of pane p. key/group are the slot's key; src and
// row, if src is not nil, hold the key's values (the input batch and row),
// else they are decoded from key.
func (x *paneIndex) add(slot int32, key []byte, group int, p int64, src []stream.Column, srcCols []int, row int) {
	x.buf = binary.AppendUvarint(x.buf[:0], uint64(group))
	x.buf = append(x.buf, key...)
	k, ok := x.ids[string(x.buf)]
	if !ok {
		k = x.newKey(string(x.buf))
		if src != nil {
			for j, c := range srcCols {
				setValue(&x.cols[j], int(k), &src[c], row)
			}
		} else if len(x.cols) > 0 {
			tmp := make([]stream.Column, len(x.cols))
			for j := range tmp {
				tmp[j].Type = x.cols[j].Type
			}
			rowenc.DecodeRow(tmp, 0, key)
			for j := range tmp {
				rowenc.PadNulls(&tmp[j], 1)
				setValue(&x.cols[j], int(k), &tmp[j], 0)
			}
		}
	}
	x.refs[k]++
	for int(slot) >= len(x.keyOf) {
		x.keyOf = append(x.keyOf, -1)
	}
	x.keyOf[slot] = k
	ss, ok := x.panes[p]
	if !ok {
		i, _ := slices.BinarySearch(x.order, p)
		x.order = slices.Insert(x.order, i, p)
	}
	x.panes[p] = append(ss, slot)
}

func (x *paneIndex) newKey(name string) int32 {
	var k int32
	if n := len(x.free); n > 0 {
		k = x.free[n-1]
		x.free = x.free[:n-1]
		x.names[k] = name
	} else {
		k = int32(len(x.refs))
		x.refs = append(x.refs, 0)
		x.names = append(x.names, name)
	}
	x.ids[name] = k
	return k
}

// key returns key id k's key bytes (without its key group).
func (x *paneIndex) key(k int32) []byte {
	name := x.names[k]
	_, n := binary.Uvarint([]byte(name[:min(len(name), binary.MaxVarintLen64)]))
	return []byte(name[n:])
}

// remove takes the slots of a key that is being spilled out of the index;
// compact must be called before slot ids are used again.
func (x *paneIndex) remove(slots []int32) {
	for _, s := range slots {
		k := x.keyOf[s]
		x.keyOf[s] = -1
		if x.refs[k]--; x.refs[k] == 0 {
			x.idle = append(x.idle, k)
		}
	}
	x.removed = true
}

// compact drops the slots remove took out from the pane lists.
func (x *paneIndex) compact() {
	if !x.removed {
		return
	}
	x.removed = false
	n := 0
	for _, p := range x.order {
		ss := slices.DeleteFunc(x.panes[p], func(s int32) bool { return x.keyOf[s] < 0 })
		if len(ss) == 0 {
			delete(x.panes, p)
			continue
		}
		x.panes[p] = ss
		x.order[n] = p
		n++
	}
	x.order = x.order[:n]
}

// panesIn returns the starts of the panes with data in [from, to).
func (x *paneIndex) panesIn(from, to int64) []int64 {
	i, _ := slices.BinarySearch(x.order, from)
	j, _ := slices.BinarySearch(x.order, to)
	return x.order[i:j]
}

// dropThrough deletes every pane whose start is at most limit, with its
// slots. A key left without slots is forgotten only if it still has none
// when the next panes are dropped: with tumbling windows every key loses
// its only slot at each window end and usually comes straight back.
func (x *paneIndex) dropThrough(limit int64) {
	n := 0
	for _, p := range x.order {
		if p > limit {
			break
		}
		if n == 0 {
			x.forgetIdle()
		}
		for _, s := range x.panes[p] {
			k := x.keyOf[s]
			x.slots.DeleteSlot(s)
			if x.refs[k]--; x.refs[k] == 0 {
				x.idle = append(x.idle, k)
			}
		}
		delete(x.panes, p)
		n++
	}
	x.order = slices.Delete(x.order, 0, n)
}

// forgetIdle forgets the keys that lost their last slot at the previous
// drop and have none now.
func (x *paneIndex) forgetIdle() {
	for _, k := range x.idle {
		if x.refs[k] != 0 || x.names[k] == "" {
			continue // back in use, or listed twice
		}
		delete(x.ids, x.names[k])
		x.names[k] = ""
		for j := range x.cols {
			if c := &x.cols[j]; c.Type == stream.TypeString {
				c.Strs[k] = "" // do not pin the string
			}
		}
		x.free = append(x.free, k)
	}
	x.idle = x.idle[:0]
}

// sortKeys sorts key ids by key value.
func (x *paneIndex) sortKeys(ids []int32, pairs []intPair) []intPair {
	switch {
	case len(x.cols) == 0:
	case x.intKey && x.cols[0].Nulls == nil:
		// One non-null integer key: sort (value, id) pairs, much faster
		// than the general comparison.
		vals := x.cols[0].Ints
		pairs = pairs[:0]
		for _, k := range ids {
			pairs = append(pairs, intPair{vals[k], k})
		}
		slices.SortFunc(pairs, func(a, b intPair) int { return cmp.Compare(a.v, b.v) })
		for i, p := range pairs {
			ids[i] = p.k
		}
	default:
		slices.SortFunc(ids, func(a, b int32) int { return compareRows(x.cols, int(a), int(b)) })
	}
	return pairs
}

type intPair struct {
	v int64
	k int32
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

// appendValue appends row k of src to out, whose row count before the
// append is row.
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
