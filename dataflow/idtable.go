package dataflow

// idTable maps the channel ids of one network stream to their channels.
// A stream's sender numbers its channels 0, 1, 2, ... in the order it opens
// them, and a job's channels open and close in waves, so the live ids
// mostly form a window that moves up. The table keeps that window as a
// slice indexed by id − base, which a lookup reads without hashing, and
// the ids outside it in a map: ids far beyond the window (so that a peer
// that numbers otherwise cannot make the slice grow beyond four slots a
// channel), and those left behind by a window that had become sparse (a
// long-lived channel among many that came and went). Not safe for
// concurrent use.
type idTable[T any] struct {
	base  uint32
	dense []*T // id base+i at i; nil: free
	live  int  // non-nil entries of dense
	far   map[uint32]*T
}

// idTableSparse is the window length up to which the table keeps any id
// in the window; beyond it, at least a quarter of the window is live (an
// id that would leave less goes to the map, and a delete that leaves less
// moves the lower half of the window to the map).
const idTableSparse = 1 << 12

// An id is in the window or in the map, never in both: a window that
// moves to cover an id of the map leaves a nil in its slot.

func (t *idTable[T]) get(id uint32) *T {
	if i := id - t.base; i < uint32(len(t.dense)) && t.dense[i] != nil {
		return t.dense[i]
	}
	return t.far[id]
}

// set maps id to v, which must not be nil.
func (t *idTable[T]) set(id uint32, v *T) {
	if _, ok := t.far[id]; ok {
		t.far[id] = v
		return
	}
	if t.live == 0 { // an empty window starts anew at id
		t.base, t.dense = id, t.dense[:0]
	}
	i := id - t.base
	switch {
	case i < uint32(len(t.dense)):
		if t.dense[i] == nil {
			t.live++
		}
		t.dense[i] = v
		return
	case uint64(i)+1 <= uint64(max(idTableSparse, 4*(t.live+1))):
		for uint32(len(t.dense)) < i {
			t.dense = append(t.dense, nil)
		}
		t.dense = append(t.dense, v)
		t.live++
		return
	}
	if t.far == nil {
		t.far = make(map[uint32]*T)
	}
	t.far[id] = v
}

func (t *idTable[T]) delete(id uint32) {
	i := id - t.base
	if i >= uint32(len(t.dense)) || t.dense[i] == nil {
		delete(t.far, id)
		return
	}
	t.dense[i] = nil
	t.live--
	// The window starts at its lowest live id.
	k := 0
	for k < len(t.dense) && t.dense[k] == nil {
		k++
	}
	if k > 0 {
		t.base += uint32(k)
		t.dense = t.dense[k:]
	}
	// A sparse window gives its lower half to the map, until it is dense
	// or short.
	for n := len(t.dense); n > idTableSparse && t.live < n/4; n = len(t.dense) {
		if t.far == nil {
			t.far = make(map[uint32]*T)
		}
		h := n / 2
		for j, v := range t.dense[:h] {
			if v != nil {
				t.far[t.base+uint32(j)] = v
				t.live--
			}
		}
		t.base += uint32(h)
		t.dense = append([]*T(nil), t.dense[h:]...)
	}
}

// each calls f for every id and its channel, in no particular order.
func (t *idTable[T]) each(f func(id uint32, v *T)) {
	for i, v := range t.dense {
		if v != nil {
			f(t.base+uint32(i), v)
		}
	}
	for id, v := range t.far {
		f(id, v)
	}
}
