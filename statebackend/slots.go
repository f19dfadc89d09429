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
// In checkpoints a Slots is a value table named by the descriptor: per key
// one value, the key's slots ordered by namespace (SlotList, encoded by
// SlotListCodec), so snapshots, restore, key groups and rescaling are the
// backend's, and the state has the same form on every backend. In memory
// Slots keeps an index from (key group, key, namespace) to slot ids, and:
//
//   - on a backend that hosts slots (SlotHost: the heap backend) the index
//     is the state: the backend hands it the restored slots and writes the
//     index's slots into its snapshots, and a slot id stays valid until its
//     slot is deleted (InPlace). Nothing is encoded but in snapshots.
//   - on other backends (Pebble) the state is the backend's value table:
//     the first use of a key after a Flush reads the key's value (one point
//     read) into the index, and Flush writes back every key used since and
//     empties the index. The operator calls Flush at the end of each batch,
//     so the table is what a snapshot sees and the memory Slots holds is
//     one batch's worth.
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

	// Snapshot scratch of a hosted Slots: live slot ids by key group,
	// sorted by key and namespace.
	byGroup map[int][]int32

	// Not hosted: the keys read since the last Flush, by key group and
	// key (gk is scratch for the lookup).
	loaded map[string]*loadedKey
	gk     []byte
}

// loadedKey is a key whose slots are in the index until the next Flush.
type loadedKey struct {
	key   []byte
	group int
	ids   []int32 // its slot ids (ids are not reused before Flush)
}

// SlotRecord is one slot of a key in the checkpoint form of Slots.
type SlotRecord struct {
	NS    int64
	Words []int64
}

type slotEntry struct {
	hash  uint64 // slotHash(key, ns)
	ns    int64
	group int32
	klen  int32 // key length; -1 marks a free id
	// The key: in inl if it is at most len(inl) bytes (most keys: no
	// allocation, and no pointer to follow when comparing), else in long.
	inl  [16]byte
	long []byte
}

// key returns e's key; it aliases e.
func (e *slotEntry) key() []byte {
	if e.klen <= int32(len(e.inl)) {
		return e.inl[:e.klen]
	}
	return e.long
}

// live reports whether e is a slot (not a free id).
func (e *slotEntry) live() bool { return e.klen >= 0 }

// is reports whether e is the slot of (key, group, ns) with hash h.
func (e *slotEntry) is(h uint64, key []byte, group int, ns int64) bool {
	if e.hash != h || e.ns != ns || int(e.group) != group || int(e.klen) != len(key) {
		return false
	}
	if len(key) <= len(e.inl) {
		return string(e.inl[:len(key)]) == string(key)
	}
	return string(e.long) == string(key)
}

// SlotDescriptor describes a Slots table.
type SlotDescriptor struct {
	// Name names the backing value table; unique within the operator.
	Name string
	// Words is the number of int64 words of a slot (> 0).
	Words int
	// Init are the words of a new slot (len Words); nil means zeros.
	Init []int64
}

// SlotHost is implemented by a backend that keeps a Slots' state in the
// Slots itself (the heap backend). HostSlots makes src the state of value
// table d (the descriptor of a Slots' table, whose values are []SlotRecord):
// the backend calls load for every slot it restored or restores later for
// that table, and writes src's slots, a value per key, when it snapshots. Asking for the table
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
	td := Descriptor{Name: d.Name, Kind: KindValue, Codec: SlotListCodec(d.Words)}
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
	s.loaded = make(map[string]*loadedKey)
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
		if s.ent[id].is(h, key, group, ns) {
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
	if s.hosted {
		return s.insert(h, key, group, ns, s.d.Init), true
	}
	lk, fresh := s.loadKey(key, group)
	if fresh {
		if id, ok := s.find(h, key, group, ns); ok {
			return id, false
		}
	}
	id := s.insert(h, key, group, ns, s.d.Init)
	lk.ids = append(lk.ids, id)
	return id, true
}

// loadKey reads key's slots from the table into the index, unless it did
// since the last Flush; fresh says whether it did now.
func (s *Slots) loadKey(key []byte, group int) (lk *loadedKey, fresh bool) {
	s.gk = binary.AppendUvarint(s.gk[:0], uint64(group))
	s.gk = append(s.gk, key...)
	if lk := s.loaded[string(s.gk)]; lk != nil {
		return lk, false
	}
	lk = &loadedKey{key: append(make([]byte, 0, len(key)), key...), group: group}
	s.loaded[string(s.gk)] = lk
	s.b.SetCurrentKey(key, group)
	if v, ok := s.t.Get(nil); ok {
		for _, r := range v.([]SlotRecord) {
			lk.ids = append(lk.ids, s.insert(slotHash(key, r.NS), key, group, r.NS, r.Words))
		}
	}
	return lk, true
}

// Lookup returns the words of key's slot in ns, if it has one. Unless
// InPlace they are valid until the next Flush.
func (s *Slots) Lookup(key []byte, group int, ns int64) ([]int64, bool) {
	h := slotHash(key, ns)
	if id, ok := s.find(h, key, group, ns); ok {
		return s.Words(id), true
	}
	if s.hosted {
		return nil, false
	}
	if _, fresh := s.loadKey(key, group); fresh {
		if id, ok := s.find(h, key, group, ns); ok {
			return s.Words(id), true
		}
	}
	return nil, false
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
// words, in no particular order, until fn returns false. fn must not
// resolve or delete slots; collect what to delete and delete after. On a
// hosting backend it scans every slot: an operator that needs it often
// keeps its own index (see InPlace).
func (s *Slots) Range(key []byte, group int, fn func(ns int64, words []int64) bool) {
	if s.hosted {
		for id := range s.ent {
			if e := &s.ent[id]; e.live() && int(e.group) == group && string(e.key()) == string(key) {
				if !fn(e.ns, s.Words(int32(id))) {
					return
				}
			}
		}
		return
	}
	lk, _ := s.loadKey(key, group)
	for _, id := range lk.ids {
		if e := &s.ent[id]; e.live() {
			if !fn(e.ns, s.Words(id)) {
				return
			}
		}
	}
}

// Delete removes key's slot in ns, if any.
func (s *Slots) Delete(key []byte, group int, ns int64) {
	h := slotHash(key, ns)
	if !s.hosted {
		s.loadKey(key, group)
	}
	if id, ok := s.find(h, key, group, ns); ok {
		s.deleteID(id)
	}
}

// deleteID takes slot id out of the index. Ids are reused only when
// hosted: a loadedKey's ids stay its own until Flush.
func (s *Slots) deleteID(id int32) {
	h := s.ent[id].hash
	p := h & s.mask
	for uint32(s.table[p]) != uint32(id+1) {
		p = (p + 1) & s.mask
	}
	s.remove(p)
	s.ent[id] = slotEntry{klen: -1}
	if s.hosted {
		s.free = append(s.free, id)
	}
}

// Flush writes every key used since the last Flush back to the table and
// empties the index, unless InPlace; slot ids are then invalid. InPlace it
// does nothing.
func (s *Slots) Flush() {
	if s.hosted || len(s.loaded) == 0 {
		return
	}
	for _, lk := range s.loaded {
		var recs []SlotRecord
		for _, id := range lk.ids {
			if e := &s.ent[id]; e.live() {
				recs = append(recs, SlotRecord{e.ns, append([]int64(nil), s.Words(id)...)})
			}
		}
		s.b.SetCurrentKey(lk.key, lk.group)
		if len(recs) == 0 {
			s.t.Delete(nil)
			continue
		}
		slices.SortFunc(recs, func(a, b SlotRecord) int { return cmp.Compare(a.NS, b.NS) })
		s.t.Put(nil, recs) // the table keeps what it is given
	}
	clear(s.loaded)
	clear(s.table)
	clear(s.ent)
	s.ent, s.free = s.ent[:0], s.free[:0]
	s.n = 0
	if len(s.table) > 1<<16 {
		s.table = make([]uint64, 64)
		s.mask = 63
	}
	if len(s.blocks) > 64 {
		s.blocks = s.blocks[:64]
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
	return e.key(), int(e.group), e.ns
}

// DeleteSlot removes a slot by id, as Delete does by key.
func (s *Slots) DeleteSlot(slot int32) {
	if s.hosted {
		s.deleteID(slot)
		return
	}
	e := s.ent[slot]
	s.Delete(e.key(), int(e.group), e.ns)
}

// Each calls fn with the id of every slot in the index (InPlace: every
// slot), in no particular order.
func (s *Slots) Each(fn func(slot int32)) {
	for id := range s.ent {
		if s.ent[id].live() {
			fn(int32(id))
		}
	}
}

// BeginSnapshot implements SlotSource.
func (s *Slots) BeginSnapshot() {
	s.byGroup = make(map[int][]int32)
	for id := range s.ent {
		if e := &s.ent[id]; e.live() {
			s.byGroup[int(e.group)] = append(s.byGroup[int(e.group)], int32(id))
		}
	}
	for _, ids := range s.byGroup {
		slices.SortFunc(ids, func(a, b int32) int {
			ea, eb := &s.ent[a], &s.ent[b]
			if c := bytes.Compare(ea.key(), eb.key()); c != 0 {
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
	e := &s.ent[id]
	*e = slotEntry{hash: h, group: int32(group), ns: ns, klen: int32(len(key))}
	if len(key) <= len(e.inl) {
		copy(e.inl[:], key)
	} else {
		e.long = append([]byte(nil), key...)
	}
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

// slotSeed seeds the index hash; the index is never persisted.
var slotSeed = maphash.MakeSeed()

// slotHash is the index hash of (key, ns).
func slotHash(key []byte, ns int64) uint64 {
	hi, lo := bits.Mul64(maphash.Bytes(slotSeed, key)^uint64(ns), 0x9E3779B97F4A7C15)
	return hi ^ lo
}

// SlotListCodec returns the codec of a Slots' values: a key's slots, for
// slots of words words: uvarint count, then per slot its namespace and its
// words, zig-zag varints, in ascending namespace order.
func SlotListCodec(words int) ValueCodec { return slotListCodec{words} }

type slotListCodec struct{ n int }

func (c slotListCodec) ID() string { return fmt.Sprintf("slots/%d", c.n) }

func (c slotListCodec) AppendValue(dst []byte, v any) ([]byte, error) {
	recs, ok := v.([]SlotRecord)
	if !ok {
		return dst, fmt.Errorf("statebackend: slot list: got %T, want []SlotRecord", v)
	}
	dst = binary.AppendUvarint(dst, uint64(len(recs)))
	for _, r := range recs {
		if len(r.Words) != c.n {
			return dst, fmt.Errorf("statebackend: slot list: a slot of %d words, want %d", len(r.Words), c.n)
		}
		dst = binary.AppendVarint(dst, r.NS)
		for _, x := range r.Words {
			dst = binary.AppendVarint(dst, x)
		}
	}
	return dst, nil
}

func (c slotListCodec) DecodeValue(src []byte) (any, error) {
	n, k := binary.Uvarint(src)
	if k <= 0 || n > uint64(len(src)) {
		return nil, fmt.Errorf("statebackend: slot list: bad count")
	}
	src = src[k:]
	recs := make([]SlotRecord, n)
	words := make([]int64, int(n)*c.n)
	for i := range recs {
		ns, k := binary.Varint(src)
		if k <= 0 {
			return nil, fmt.Errorf("statebackend: slot list: slot %d of %d does not decode", i, n)
		}
		src = src[k:]
		w := words[i*c.n : (i+1)*c.n : (i+1)*c.n]
		for j := range w {
			x, k := binary.Varint(src)
			if k <= 0 {
				return nil, fmt.Errorf("statebackend: slot list: slot %d of %d does not decode", i, n)
			}
			w[j] = x
			src = src[k:]
		}
		recs[i] = SlotRecord{ns, w}
	}
	if len(src) != 0 {
		return nil, fmt.Errorf("statebackend: slot list: %d bytes after %d slots", len(src), n)
	}
	return recs, nil
}
