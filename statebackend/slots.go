package statebackend

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"math/bits"
	"slices"
)

// Slots is keyed state made for operators that update accumulators a column
// at a time (windows): one record of Words int64 words (a "slot") per key
// and namespace, where the namespace is an int64 the operator chooses (a
// window's pane start). A per-row loop resolves each row's slot id once
// (Slot); the aggregation loops then update Words(slot) column by column.
//
// In checkpoints a Slots is a map table named by the descriptor: user key
// the namespace (NamespaceCodec), value the words (zig-zag varints), so
// snapshots, restore, key groups and rescaling are the backend's, and the
// state has the same form on every backend. In memory Slots keeps an index
// from (key group, key, namespace) to slot ids, and:
//
//   - on a backend that hosts slots (SlotHost: the heap backend) the index
//     is the state: the backend hands it the restored slots and writes the
//     index's slots into its snapshots, and a slot id stays valid until its
//     slot is deleted (InPlace). Nothing is encoded but in snapshots.
//   - on other backends (Pebble) the state is the backend's map table: the
//     index holds only the slots resolved since the last Flush, read from
//     the table when first resolved; Flush writes them back and empties it.
//     The operator calls Flush at the end of each batch, and Range flushes
//     first, so the table is what a snapshot sees and the memory Slots holds
//     is one batch's worth.
//
// A Slots is not safe for concurrent use; it uses the backend's current key
// (SetCurrentKey) and changes it.
type Slots struct {
	b      Backend
	t      Table // nil when hosted
	d      SlotDescriptor
	hosted bool

	// Open-addressing index by slotHash: an entry holds the hash's top 32
	// bits above slot id+1, so that most mismatches are rejected without
	// reading the slot; 0 is empty.
	table []uint64
	mask  uint64
	n     int

	ent []slotEntry // by slot id
	// The words of slot id are blocks[id/slotBlock], at (id%slotBlock)*Words.
	blocks [][]int64
	free   []int32
	nsBuf  [8]byte

	// Snapshot scratch of a hosted Slots: live slot ids by key group,
	// sorted by key and namespace.
	byGroup map[int][]int32
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

// SlotHost is implemented by a backend that keeps a Slots' state in the
// Slots itself (the heap backend). HostSlots makes src the state of map
// table d (the descriptor of a Slots' table): the backend calls load for
// every slot it restored or restores later for that table, and writes src's
// slots as the table's entries when it snapshots. Asking for the table
// otherwise, or hosting it twice, fails with ErrConflict.
type SlotHost interface {
	HostSlots(d Descriptor, src SlotSource, load func(key []byte, group int, ns int64, words []int64) error) error
}

// SlotSource is the view of a hosted Slots that its backend snapshots.
type SlotSource interface {
	// BeginSnapshot prepares GroupSlots; EndSnapshot frees what it took.
	BeginSnapshot()
	EndSnapshot()
	// GroupSlots returns the slot ids of key group g, ordered by key and
	// namespace (valid between BeginSnapshot and EndSnapshot).
	GroupSlots(g int) []int32
	// SlotKey returns a slot's key, key group and namespace; Words its
	// words.
	SlotKey(slot int32) (key []byte, group int, ns int64)
	Words(slot int32) []int64
	// Len returns the number of slots.
	Len() int
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
	td := Descriptor{Name: d.Name, Kind: KindMap, Codec: wordsCodec{d.Words}, UserKeyCodec: NamespaceCodec}
	s := &Slots{b: b, d: d, table: make([]uint64, 64), mask: 63}
	if h, ok := b.(SlotHost); ok {
		s.hosted = true
		if err := h.HostSlots(td, s, s.load); err != nil {
			return nil, err
		}
		return s, nil
	}
	t, err := b.Table(td)
	if err != nil {
		return nil, err
	}
	s.t = t
	return s, nil
}

// load adds a restored slot of a hosted Slots.
func (s *Slots) load(key []byte, group int, ns int64, words []int64) error {
	if len(words) != s.d.Words {
		return fmt.Errorf("%w: slot state %q: a restored slot has %d words, want %d", ErrCorrupt, s.d.Name, len(words), s.d.Words)
	}
	h := slotHash(key, ns)
	if id, ok := s.find(h, key, group, ns); ok {
		copy(s.Words(id), words) // the later chunk wins, as in a table
		return nil
	}
	s.insert(h, key, group, ns, words)
	return nil
}

// find looks (key, group, ns), of hash h, up in the index.
func (s *Slots) find(h uint64, key []byte, group int, ns int64) (int32, bool) {
	for p := h & s.mask; ; p = (p + 1) & s.mask {
		e := s.table[p]
		if e == 0 {
			return -1, false
		}
		if e>>32 != h>>32 {
			continue
		}
		id := int32(uint32(e)) - 1
		if en := &s.ent[id]; en.hash == h && en.ns == ns && en.group == group && string(en.key) == string(key) {
			return id, true
		}
	}
}

// Descriptor returns the descriptor the slots were asked for with.
func (s *Slots) Descriptor() SlotDescriptor { return s.d }

// Slot returns the slot of key (in key group group) in namespace ns,
// creating it with the descriptor's initial words if it has none; created
// says which. The slot id stays valid until the slot is deleted or, unless
// InPlace, until Flush.
func (s *Slots) Slot(key []byte, group int, ns int64) (slot int32, created bool) {
	h := slotHash(key, ns)
	if id, ok := s.find(h, key, group, ns); ok {
		return id, false
	}
	var w []int64
	if !s.hosted {
		s.b.SetCurrentKey(key, group)
		if v, ok := s.t.Get(s.nsKey(ns)); ok {
			w = v.([]int64) // insert copies it: the table's value must not change
		}
	}
	if w == nil {
		w = s.d.Init
		created = true
	}
	return s.insert(h, key, group, ns, w), created
}

// Lookup returns the words of key's slot in ns, if it has one. Unless
// InPlace they must not be modified.
func (s *Slots) Lookup(key []byte, group int, ns int64) ([]int64, bool) {
	if id, ok := s.find(slotHash(key, ns), key, group, ns); ok {
		return s.Words(id), true
	}
	if s.hosted {
		return nil, false
	}
	s.b.SetCurrentKey(key, group)
	v, ok := s.t.Get(s.nsKey(ns))
	if !ok {
		return nil, false
	}
	return v.([]int64), true
}

// Words returns the words of a slot Slot returned, to update in place.
func (s *Slots) Words(slot int32) []int64 {
	w := s.d.Words
	i := int(slot%slotBlock) * w
	return s.blocks[slot/slotBlock][i : i+w : i+w]
}

// slotBlock is the number of slots' words allocated at a time.
const slotBlock = 1024

// Range calls fn with every namespace of key that has a slot and the slot's
// words, in no particular order, until fn returns false. fn must not modify
// the words, resolve slots or delete them; collect what to delete and
// delete after. On a hosting backend it scans every slot: an operator that
// needs it often keeps its own index (see InPlace).
func (s *Slots) Range(key []byte, group int, fn func(ns int64, words []int64) bool) {
	if s.hosted {
		for id := range s.ent {
			if e := &s.ent[id]; e.key != nil && e.group == group && string(e.key) == string(key) {
				if !fn(e.ns, s.Words(int32(id))) {
					return
				}
			}
		}
		return
	}
	s.Flush()
	s.b.SetCurrentKey(key, group)
	s.t.Range(func(uk []byte, v any) bool {
		return fn(decodeNS(uk), v.([]int64))
	})
}

// Delete removes key's slot in ns, if any.
func (s *Slots) Delete(key []byte, group int, ns int64) {
	h := slotHash(key, ns)
	if id, ok := s.find(h, key, group, ns); ok {
		s.deleteID(id)
	}
	if !s.hosted {
		s.b.SetCurrentKey(key, group)
		s.t.Delete(s.nsKey(ns))
	}
}

// deleteID takes slot id out of the index.
func (s *Slots) deleteID(id int32) {
	h := s.ent[id].hash
	p := h & s.mask
	for uint32(s.table[p]) != uint32(id+1) {
		p = (p + 1) & s.mask
	}
	s.remove(p)
	s.ent[id] = slotEntry{}
	s.free = append(s.free, id)
}

// Flush writes the slots resolved since the last Flush to the table and
// forgets them, unless InPlace; slot ids are then invalid. InPlace it does
// nothing.
func (s *Slots) Flush() {
	if s.hosted || s.n == 0 {
		return
	}
	for id := range s.ent {
		en := &s.ent[id]
		if en.key == nil {
			continue
		}
		s.b.SetCurrentKey(en.key, en.group)
		s.t.Put(s.nsKey(en.ns), append([]int64(nil), s.Words(int32(id))...)) // the table keeps what it is given
	}
	clear(s.table)
	clear(s.ent)
	s.ent, s.free = s.ent[:0], s.free[:0]
	s.n = 0
	if len(s.table) > 1<<16 {
		s.table = make([]uint64, 64)
		s.mask = 63
	}
}

// Len returns the number of slots indexed (not of slots in the table).
func (s *Slots) Len() int { return s.n }

// InPlace reports whether the backend hosts the slots (SlotHost): slot
// ids then stay valid until their slot is deleted, and the index holds
// every slot, so that an operator may keep its own index of slot ids (by
// namespace, say).
func (s *Slots) InPlace() bool { return s.hosted }

// SlotKey returns the key (owned by the index: do not modify it), key group
// and namespace of a slot.
func (s *Slots) SlotKey(slot int32) (key []byte, group int, ns int64) {
	e := &s.ent[slot]
	return e.key, e.group, e.ns
}

// DeleteSlot removes a slot by id, as Delete does by key.
func (s *Slots) DeleteSlot(slot int32) {
	if s.hosted {
		s.deleteID(slot)
		return
	}
	e := s.ent[slot]
	s.Delete(e.key, e.group, e.ns)
}

// Each calls fn with the id of every slot in the index (InPlace: every
// slot), in no particular order.
func (s *Slots) Each(fn func(slot int32)) {
	for id := range s.ent {
		if s.ent[id].key != nil {
			fn(int32(id))
		}
	}
}

// BeginSnapshot implements SlotSource.
func (s *Slots) BeginSnapshot() {
	s.byGroup = make(map[int][]int32)
	for id := range s.ent {
		if e := &s.ent[id]; e.key != nil {
			s.byGroup[e.group] = append(s.byGroup[e.group], int32(id))
		}
	}
	for _, ids := range s.byGroup {
		slices.SortFunc(ids, func(a, b int32) int {
			ea, eb := &s.ent[a], &s.ent[b]
			if c := bytes.Compare(ea.key, eb.key); c != 0 {
				return c
			}
			return cmp.Compare(ea.ns, eb.ns)
		})
	}
}

// EndSnapshot implements SlotSource.
func (s *Slots) EndSnapshot() { s.byGroup = nil }

// GroupSlots implements SlotSource.
func (s *Slots) GroupSlots(g int) []int32 { return s.byGroup[g] }

func (s *Slots) insert(h uint64, key []byte, group int, ns int64, w []int64) int32 {
	var id int32
	if n := len(s.free); n > 0 {
		id = s.free[n-1]
		s.free = s.free[:n-1]
	} else {
		id = int32(len(s.ent))
		s.ent = append(s.ent, slotEntry{})
		if int(id/slotBlock) == len(s.blocks) {
			s.blocks = append(s.blocks, make([]int64, slotBlock*s.d.Words))
		}
	}
	s.ent[id] = slotEntry{hash: h, key: append(make([]byte, 0, len(key)), key...), group: group, ns: ns} // non-nil: nil marks a free id
	copy(s.Words(id), w)
	if 2*(s.n+1) > len(s.table) {
		s.rehash(2 * len(s.table))
	}
	s.place(id)
	s.n++
	return id
}

func (s *Slots) place(id int32) {
	h := s.ent[id].hash
	p := h & s.mask
	for s.table[p] != 0 {
		p = (p + 1) & s.mask
	}
	s.table[p] = h>>32<<32 | uint64(uint32(id+1))
}

func (s *Slots) rehash(size int) {
	old := s.table
	s.table = make([]uint64, size)
	s.mask = uint64(size - 1)
	for _, e := range old {
		if e != 0 {
			s.place(int32(uint32(e)) - 1)
		}
	}
}

// remove empties position p of the index, shifting later entries of its
// probe run back so that lookups need no tombstones.
func (s *Slots) remove(p uint64) {
	mask := s.mask
	s.table[p] = 0
	for q := (p + 1) & mask; s.table[q] != 0; q = (q + 1) & mask {
		home := s.ent[int32(uint32(s.table[q]))-1].hash & mask
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
