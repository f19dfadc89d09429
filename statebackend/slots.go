package statebackend

import (
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"math/bits"
)

// Slots is keyed state made for operators that update accumulators a column
// at a time (windows): one record of Words int64 words (a "slot") per key
// and namespace, where the namespace is an int64 the operator chooses (a
// window's pane start). A per-row loop resolves each row's slot id once
// (Slot); the aggregation loops then update Words(slot) column by column.
//
// Slots keeps its state in a map table of the backend named by the
// descriptor: user key the namespace, value the words. Snapshots, restore,
// key groups and rescaling are therefore the backend's, and the state has
// the canonical map-table form on every backend. In front of the table it
// keeps an index from (key group, key, namespace) to slot ids:
//
//   - On a backend that keeps the values it is given (the heap backend, see
//     ValueKeeper), a slot's words are the table's value itself, updated in
//     place, and the index covers every slot ever resolved until it is
//     deleted: no encoding, no table access after the first.
//   - On other backends (Pebble) the index holds only the slots resolved
//     since the last Flush, read from the table when first resolved; Flush
//     writes them back and empties it. The operator calls Flush at the end
//     of each batch, and the reads (Range) flush first, so the table is what
//     a snapshot sees and the memory Slots holds is one batch's worth.
//
// A Slots is not safe for concurrent use; it uses the backend's current key
// (SetCurrentKey) and changes it.
type Slots struct {
	b       Backend
	t       Table
	d       SlotDescriptor
	inPlace bool

	// Open-addressing index: table holds slot id+1 (0 is empty); entries
	// are found by slotHash.
	table []int32
	mask  uint64
	n     int

	ent   []slotEntry // by slot id
	words [][]int64   // by slot id
	free  []int32
	nsBuf [8]byte
}

type slotEntry struct {
	hash  uint64 // slotHash(key, ns)
	key   []byte // owned
	group int
	ns    int64
}

// SlotDescriptor describes a Slots table.
type SlotDescriptor struct {
	// Name names the backing map table; unique within the operator.
	Name string
	// Words is the number of int64 words of a slot (> 0).
	Words int
	// Init are the words of a new slot (len Words); nil means zeros.
	Init []int64
}

// ValueKeeper is implemented by a Backend whose tables keep the values given
// to Put and return them from Get, encoding them only in Snapshot (the heap
// backend). Slots then updates its words in place.
type ValueKeeper interface {
	KeepsValues() bool
}

// GetSlots returns the slot state described by d.
func GetSlots(b Backend, d SlotDescriptor) (*Slots, error) {
	if d.Words <= 0 || d.Words > 1<<12 {
		return nil, fmt.Errorf("statebackend: slot state %q: %d words per slot; want 1 to 4096", d.Name, d.Words)
	}
	if d.Init != nil && len(d.Init) != d.Words {
		return nil, fmt.Errorf("statebackend: slot state %q: %d initial words for slots of %d", d.Name, len(d.Init), d.Words)
	}
	if d.Init == nil {
		d.Init = make([]int64, d.Words)
	}
	t, err := b.Table(Descriptor{Name: d.Name, Kind: KindMap, Codec: wordsCodec{d.Words}, UserKeyCodec: NamespaceCodec})
	if err != nil {
		return nil, err
	}
	s := &Slots{b: b, t: t, d: d, table: make([]int32, 64), mask: 63}
	if k, ok := b.(ValueKeeper); ok && k.KeepsValues() {
		s.inPlace = true
	}
	return s, nil
}

// Descriptor returns the descriptor the slots were asked for with.
func (s *Slots) Descriptor() SlotDescriptor { return s.d }

// Slot returns the slot of key (in key group group) in namespace ns, creating it with the descriptor's initial words
// if it has none; created says which. The slot id stays valid until the
// slot is deleted or, on a backend without ValueKeeper, until Flush.
func (s *Slots) Slot(key []byte, group int, ns int64) (slot int32, created bool) {
	h := slotHash(key, ns)
	for p := h & s.mask; ; p = (p + 1) & s.mask {
		e := s.table[p]
		if e == 0 {
			break
		}
		if en := &s.ent[e-1]; en.hash == h && en.ns == ns && en.group == group && string(en.key) == string(key) {
			return e - 1, false
		}
	}
	s.b.SetCurrentKey(key, group)
	uk := s.nsKey(ns)
	var w []int64
	if v, ok := s.t.Get(uk); ok {
		w = v.([]int64)
		if !s.inPlace {
			w = append([]int64(nil), w...) // the table's value must not change
		}
	} else {
		w = append([]int64(nil), s.d.Init...)
		created = true
		if s.inPlace {
			s.t.Put(uk, w)
		}
	}
	return s.insert(h, key, group, ns, w), created
}

// Lookup returns the words of key's slot in ns, if it has one. On a backend
// with ValueKeeper the words may be updated in place; otherwise they must
// not be modified.
func (s *Slots) Lookup(key []byte, group int, ns int64) ([]int64, bool) {
	h := slotHash(key, ns)
	for p := h & s.mask; ; p = (p + 1) & s.mask {
		e := s.table[p]
		if e == 0 {
			break
		}
		if en := &s.ent[e-1]; en.hash == h && en.ns == ns && en.group == group && string(en.key) == string(key) {
			return s.words[e-1], true
		}
	}
	s.b.SetCurrentKey(key, group)
	v, ok := s.t.Get(s.nsKey(ns))
	if !ok {
		return nil, false
	}
	return v.([]int64), true
}

// Words returns the words of a slot Slot returned, to update in place.
func (s *Slots) Words(slot int32) []int64 { return s.words[slot] }

// Range calls fn with every namespace of key that has a slot and the slot's
// words, in no particular order, until fn returns false. fn must not modify
// the words, resolve slots or delete them; collect what to delete and
// delete after.
func (s *Slots) Range(key []byte, group int, fn func(ns int64, words []int64) bool) {
	if !s.inPlace {
		s.Flush()
	}
	s.b.SetCurrentKey(key, group)
	s.t.Range(func(uk []byte, v any) bool {
		return fn(decodeNS(uk), v.([]int64))
	})
}

// Delete removes key's slot in ns, if any.
func (s *Slots) Delete(key []byte, group int, ns int64) {
	h := slotHash(key, ns)
	for p := h & s.mask; ; p = (p + 1) & s.mask {
		e := s.table[p]
		if e == 0 {
			break
		}
		if en := &s.ent[e-1]; en.hash == h && en.ns == ns && en.group == group && string(en.key) == string(key) {
			s.remove(p)
			id := e - 1
			s.ent[id] = slotEntry{}
			s.words[id] = nil
			s.free = append(s.free, id)
			break
		}
	}
	s.b.SetCurrentKey(key, group)
	s.t.Delete(s.nsKey(ns))
}

// Flush writes the slots resolved since the last Flush to the table and
// forgets them, on a backend without ValueKeeper; slot ids are then invalid.
// On a backend with ValueKeeper it does nothing: the table holds the words.
func (s *Slots) Flush() {
	if s.inPlace || s.n == 0 {
		return
	}
	for id := range s.ent {
		en := &s.ent[id]
		if en.key == nil {
			continue
		}
		s.b.SetCurrentKey(en.key, en.group)
		s.t.Put(s.nsKey(en.ns), s.words[id]) // the table owns the words now
	}
	clear(s.table)
	clear(s.ent)
	clear(s.words)
	s.ent, s.words, s.free = s.ent[:0], s.words[:0], s.free[:0]
	s.n = 0
	if len(s.table) > 1<<16 {
		s.table = make([]int32, 64)
		s.mask = 63
	}
}

// Len returns the number of slots indexed (not of slots in the table).
func (s *Slots) Len() int { return s.n }

func (s *Slots) insert(h uint64, key []byte, group int, ns int64, w []int64) int32 {
	var id int32
	if n := len(s.free); n > 0 {
		id = s.free[n-1]
		s.free = s.free[:n-1]
	} else {
		id = int32(len(s.ent))
		s.ent = append(s.ent, slotEntry{})
		s.words = append(s.words, nil)
	}
	s.ent[id] = slotEntry{hash: h, key: append(make([]byte, 0, len(key)), key...), group: group, ns: ns} // non-nil: nil marks a free id
	s.words[id] = w
	if 2*(s.n+1) > len(s.table) {
		s.rehash(2 * len(s.table))
	}
	s.place(id)
	s.n++
	return id
}

func (s *Slots) place(id int32) {
	p := s.ent[id].hash & s.mask
	for s.table[p] != 0 {
		p = (p + 1) & s.mask
	}
	s.table[p] = id + 1
}

func (s *Slots) rehash(size int) {
	old := s.table
	s.table = make([]int32, size)
	s.mask = uint64(size - 1)
	for _, e := range old {
		if e != 0 {
			s.place(e - 1)
		}
	}
}

// remove empties position p of the index, shifting later entries of its
// probe run back so that lookups need no tombstones.
func (s *Slots) remove(p uint64) {
	mask := s.mask
	s.table[p] = 0
	for q := (p + 1) & mask; s.table[q] != 0; q = (q + 1) & mask {
		home := s.ent[s.table[q]-1].hash & mask
		if (q > p && (home <= p || home > q)) || (q < p && home <= p && home > q) {
			s.table[p] = s.table[q]
			s.table[q] = 0
			p = q
		}
	}
	s.n--
}

func (s *Slots) nsKey(ns int64) []byte {
	binary.BigEndian.PutUint64(s.nsBuf[:], uint64(ns)^1<<63)
	return s.nsBuf[:]
}

func decodeNS(b []byte) int64 { return int64(binary.BigEndian.Uint64(b) ^ 1<<63) }

// slotSeed seeds the index hash; the index is never persisted.
var slotSeed = maphash.MakeSeed()

// slotHash is the index hash of (key, ns).
func slotHash(key []byte, ns int64) uint64 {
	hi, lo := bits.Mul64(maphash.Bytes(slotSeed, key)^uint64(ns), 0x9E3779B97F4A7C15)
	return hi ^ lo
}

// NamespaceCodec is the user-key codec of Slots' map tables: an int64 as 8
// bytes big endian with the sign bit flipped, so that byte order is numeric
// order.
var NamespaceCodec ValueCodec = namespaceCodec{}

type namespaceCodec struct{}

func (namespaceCodec) ID() string { return "namespace-int64" }

func (namespaceCodec) AppendValue(dst []byte, v any) ([]byte, error) {
	ns, ok := v.(int64)
	if !ok {
		return dst, fmt.Errorf("statebackend: namespace codec: got %T, want int64", v)
	}
	return binary.BigEndian.AppendUint64(dst, uint64(ns)^1<<63), nil
}

func (namespaceCodec) DecodeValue(src []byte) (any, error) {
	if len(src) != 8 {
		return nil, fmt.Errorf("statebackend: namespace of %d bytes, want 8", len(src))
	}
	return decodeNS(src), nil
}

// wordsCodec encodes a slot's words as zig-zag varints, exactly n of them.
type wordsCodec struct{ n int }

func (c wordsCodec) ID() string { return fmt.Sprintf("slot-words/%d", c.n) }

func (c wordsCodec) AppendValue(dst []byte, v any) ([]byte, error) {
	w, ok := v.([]int64)
	if !ok || len(w) != c.n {
		return dst, fmt.Errorf("statebackend: slot words: got %T of another length, want %d int64 words", v, c.n)
	}
	for _, x := range w {
		dst = binary.AppendVarint(dst, x)
	}
	return dst, nil
}

func (c wordsCodec) DecodeValue(src []byte) (any, error) {
	w := make([]int64, c.n)
	for i := range w {
		x, k := binary.Varint(src)
		if k <= 0 {
			return nil, fmt.Errorf("statebackend: slot words: %d of %d words decode", i, c.n)
		}
		w[i] = x
		src = src[k:]
	}
	if len(src) != 0 {
		return nil, fmt.Errorf("statebackend: slot words: %d bytes after %d words", len(src), c.n)
	}
	return w, nil
}
