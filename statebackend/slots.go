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
//     slot is deleted. Nothing is encoded but in snapshots.
//   - on other backends (Pebble) the state is the backend's value table,
//     and the index is a write-back cache of it (Spills): the first use of
//     a key reads the key's value (one point read) and the key stays
//     resident, all its slots in the index, until Evict spills it (writes
//     it back and forgets it) to keep the index within its memory budget
//     (SlotMemory). Flush writes back the resident keys changed since the
//     last Flush; the operator calls it before a snapshot, so the table is
//     what a snapshot sees. Keys that are not resident are read and
//     written whole with ReadKey and WriteKey.
//
// A Slots is not safe for concurrent use; it uses the backend's current key
// (SetCurrentKey) and changes it.
type Slots struct {
	b      Backend
	t      Table       // nil when hosted
	sized  SizedWriter // t, if it is one
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

	// Not hosted: the resident keys by key group and key (gk is scratch
	// for the lookup), the clock ring over them that Evict turns, the
	// keys changed since the last Flush, and each slot's key.
	loaded map[string]*loadedKey
	gk     []byte
	ring   []*loadedKey
	hand   int
	dirty  []*loadedKey
	// emptied lists the resident keys whose last slot was deleted since
	// Evict or Flush last dropped them (dropEmpty).
	emptied []*loadedKey
	owner   []*loadedKey // by slot id
	bytes   int64        // estimated memory of the resident keys
	budget  int64
	onLoad  func(slot int32)
	// stored filters the keys the table may hold, so that a key seen for
	// the first time is not looked up in the table (storedFilter).
	stored storedFilter
}

// loadedKey is a resident key of a Slots that Spills.
type loadedKey struct {
	name   string // key group and key: its key in Slots.loaded
	key    []byte
	group  int
	ids    []int32 // its slot ids
	pos    int     // in Slots.ring
	dirty  bool    // changed since it was last written back
	stored bool    // the table may hold a value of it
	ref    bool    // used since Evict's hand last passed it
	gone   bool    // spilled
	// disk is the length of the key's value in the table (-1: none),
	// for a table that is a SizedWriter.
	disk int
}

// Peeker is implemented by a Table that can read the current key's value
// without keeping it in a cache of its own (Pebble's value cache): a
// caller that keeps what it reads (the resident keys of a Slots) then does
// not hold it twice. Peek returns what Get would.
type Peeker interface {
	Peek(userKey []byte) (any, bool)
}

// SizedWriter is implemented by a Table that, to write a key, needs the
// length of the key's stored value (Pebble, to keep SizeBytes exact) and
// reads it unless the caller gives it. A caller that is the only writer of
// the keys it writes so, and remembers each one's stored length (a Slots,
// for its resident keys), spares those reads:
//
//   - PeekLen is Peek that also returns the encoded length of the stored
//     value, -1 if there is none.
//   - PutLen and DeleteLen are Put and Delete of the current key, given
//     old, the key's stored length as the last PeekLen or PutLen of the
//     key returned (-1 after DeleteLen, or for a key never written). PutLen
//     returns the new stored length.
//
// The length must be one the table returned: a wrong one makes SizeBytes
// wrong, and a delete of a key said to have no value may be lost.
type SizedWriter interface {
	PeekLen(userKey []byte) (v any, ok bool, n int)
	PutLen(userKey []byte, v any, old int) int
	DeleteLen(userKey []byte, old int)
}

// Estimated bytes of memory a resident key and a resident slot take
// beyond the key's bytes and the slot's words, in a Slots and in the
// index an operator keeps of the slots (a window's pane index): the
// entries, the hash index at half load, map slots and slice headers.
const (
	residentKeyBytes  = 224
	residentSlotBytes = 112
)

// DefaultSlotMemory is the memory budget of a Slots that Spills on a
// backend that is not a SlotMemory.
const DefaultSlotMemory = 16 << 20

// SlotMemory is implemented by a backend that does not host slots but
// holds a memory budget for their resident keys (Pebble): ReserveSlotMemory
// returns the bytes a new Slots may keep resident, taken from the
// backend's own caches.
type SlotMemory interface {
	ReserveSlotMemory() int64
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
	s.sized, _ = t.(SizedWriter)
	s.loaded = make(map[string]*loadedKey)
	s.budget = DefaultSlotMemory
	if m, ok := b.(SlotMemory); ok {
		s.budget = m.ReserveSlotMemory()
	}
	s.rebuildStored()
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
// says which. The caller may change the slot's words until it calls
// another method that changes the index; the slot id stays valid until
// the slot is deleted or its key spilled (Evict).
func (s *Slots) Slot(key []byte, group int, ns int64) (slot int32, created bool) {
	h := slotHash(key, ns)
	if id, ok := s.find(h, key, group, ns); ok {
		if !s.hosted {
			s.touch(s.owner[id])
		}
		return id, false
	}
	if s.hosted {
		return s.insert(h, key, group, ns, s.d.Init), true
	}
	lk, fresh := s.loadKey(key, group)
	s.touch(lk)
	if fresh {
		if id, ok := s.find(h, key, group, ns); ok {
			return id, false
		}
	}
	return s.add(lk, h, ns, s.d.Init), true
}

// touch records that lk is used and (probably) changed.
func (s *Slots) touch(lk *loadedKey) {
	lk.ref = true
	if !lk.dirty {
		lk.dirty = true
		s.dirty = append(s.dirty, lk)
	}
}

// add inserts a slot of resident key lk.
func (s *Slots) add(lk *loadedKey, h uint64, ns int64, words []int64) int32 {
	id := s.insert(h, lk.key, lk.group, ns, words)
	for int(id) >= len(s.owner) {
		s.owner = append(s.owner, nil)
	}
	s.owner[id] = lk
	lk.ids = append(lk.ids, id)
	s.bytes += residentSlotBytes + 8*int64(s.d.Words)
	return id
}

// loadKey makes key resident, reading its slots from the table into the
// index, unless it is resident; fresh says whether it read them now.
func (s *Slots) loadKey(key []byte, group int) (lk *loadedKey, fresh bool) {
	s.gk = binary.AppendUvarint(s.gk[:0], uint64(group))
	s.gk = append(s.gk, key...)
	if lk := s.loaded[string(s.gk)]; lk != nil {
		return lk, false
	}
	lk = &loadedKey{name: string(s.gk), key: append(make([]byte, 0, len(key)), key...), group: group, pos: len(s.ring), ref: true, disk: -1}
	s.loaded[lk.name] = lk
	s.ring = append(s.ring, lk)
	s.bytes += residentKeyBytes + 2*int64(len(s.gk))
	if !s.stored.mayHave(lk.name) {
		return lk, true // never written: nothing to read
	}
	s.b.SetCurrentKey(key, group)
	var v any
	var ok bool
	switch t := s.t.(type) {
	case SizedWriter:
		v, ok, lk.disk = t.PeekLen(nil)
	case Peeker:
		v, ok = t.Peek(nil)
	default:
		v, ok = s.t.Get(nil)
	}
	if ok {
		lk.stored = true
		for _, r := range v.([]SlotRecord) {
			s.add(lk, slotHash(key, r.NS), r.NS, r.Words)
		}
		if s.onLoad != nil {
			for _, id := range lk.ids {
				s.onLoad(id)
			}
		}
	}
	return lk, true
}

// Spills reports whether the backend keeps the slots (Pebble) and the
// index holds only the resident keys, which Evict spills back to it.
func (s *Slots) Spills() bool { return !s.hosted }

// SetLoadHook makes fn called with each slot read from the table when its
// key becomes resident (an operator that keeps its own index of slot ids
// adds them there). fn must not change the index.
func (s *Slots) SetLoadHook(fn func(slot int32)) { s.onLoad = fn }

// Resident reports whether key's slots are in the index (always, when the
// slots do not spill).
func (s *Slots) Resident(key []byte, group int) bool {
	if s.hosted {
		return true
	}
	s.gk = binary.AppendUvarint(s.gk[:0], uint64(group))
	s.gk = append(s.gk, key...)
	return s.loaded[string(s.gk)] != nil
}

// ReadKey returns the slots of a key that is not resident, as the table
// holds them, ordered by namespace. They are the table's: do not modify
// them.
func (s *Slots) ReadKey(key []byte, group int) []SlotRecord {
	s.b.SetCurrentKey(key, group)
	if v, ok := s.t.Get(nil); ok {
		return v.([]SlotRecord)
	}
	return nil
}

// WriteKey replaces the slots of a key that is not resident with recs,
// which must be ordered by namespace and which the table keeps; no slots
// deletes the key.
func (s *Slots) WriteKey(key []byte, group int, recs []SlotRecord) {
	s.b.SetCurrentKey(key, group)
	if len(recs) == 0 {
		s.t.Delete(nil)
		return
	}
	s.t.Put(nil, recs)
	s.addStored(key, group)
}

// Evict spills the resident keys whose slots were all deleted (see
// dropEmpty; fn is not called for them), then resident keys, the least
// recently used first (by a clock), while the resident keys take more than
// their budget, down to seven eighths of it: it writes each back to the table, calls fn (if not nil)
// with its key and its slot ids, still valid, and takes its slots out of
// the index. It returns how many keys it spilled. Slot ids held across
// Evict must be looked up again.
func (s *Slots) Evict(fn func(key []byte, group int, slots []int32)) int {
	if s.hosted {
		return 0
	}
	s.dropEmpty()
	if s.bytes <= s.budget {
		return 0
	}
	target := s.budget - s.budget/8
	n := 0
	for s.bytes > target && len(s.ring) > 0 {
		if s.hand >= len(s.ring) {
			s.hand = 0
		}
		lk := s.ring[s.hand]
		if lk.ref {
			lk.ref = false
			s.hand++
			continue
		}
		s.spill(lk, fn)
		n++
	}
	return n
}

// spill writes lk back and makes it not resident.
func (s *Slots) spill(lk *loadedKey, fn func(key []byte, group int, slots []int32)) {
	if lk.dirty {
		s.writeBack(lk)
	}
	if fn != nil && len(lk.ids) > 0 {
		fn(lk.key, lk.group, lk.ids)
	}
	for _, id := range lk.ids {
		s.unindex(id)
		s.owner[id] = nil
	}
	s.bytes -= int64(len(lk.ids)) * (residentSlotBytes + 8*int64(s.d.Words))
	s.bytes -= residentKeyBytes + 2*int64(len(lk.name))
	delete(s.loaded, lk.name)
	last := s.ring[len(s.ring)-1]
	s.ring[lk.pos], last.pos = last, lk.pos
	s.ring[len(s.ring)-1] = nil
	s.ring = s.ring[:len(s.ring)-1]
	lk.gone, lk.ids = true, nil
}

// writeBack writes resident key lk's slots to the table.
func (s *Slots) writeBack(lk *loadedKey) {
	lk.dirty = false
	s.b.SetCurrentKey(lk.key, lk.group)
	sw := s.sized
	if len(lk.ids) == 0 {
		if lk.stored {
			if sw != nil {
				sw.DeleteLen(nil, lk.disk)
			} else {
				s.t.Delete(nil)
			}
			lk.stored, lk.disk = false, -1
		}
		return
	}
	recs := make([]SlotRecord, len(lk.ids))
	words := make([]int64, len(lk.ids)*s.d.Words)
	for i, id := range lk.ids {
		w := words[i*s.d.Words : (i+1)*s.d.Words : (i+1)*s.d.Words]
		copy(w, s.Words(id))
		recs[i] = SlotRecord{s.ent[id].ns, w}
	}
	slices.SortFunc(recs, func(a, b SlotRecord) int { return cmp.Compare(a.NS, b.NS) })
	if sw != nil {
		lk.disk = sw.PutLen(nil, recs, lk.disk) // the table keeps what it is given
	} else {
		s.t.Put(nil, recs)
	}
	lk.stored = true
	s.addStored(lk.key, lk.group)
}

// storedFilter is a Bloom filter of the keys (key group and key) a Slots'
// table may hold: every key in it when the filter was built, and every key
// written since. Keys deleted since stay in it (a false positive costs one
// lookup), so the filter is built again from a scan of the table once as
// many keys were added as it was sized for.
type storedFilter struct {
	bits  []uint64
	mask  uint64
	added int // keys added since it was built
	limit int // keys it was sized for
}

// storedFilterMinKeys is the smallest number of keys a filter is sized for.
const storedFilterMinKeys = 1 << 14

// mayHave reports whether the table may hold name (a key group and key).
func (f *storedFilter) mayHave(name string) bool {
	if f.bits == nil {
		return true
	}
	h1, h2 := storedHashes(maphash.String(slotSeed, name))
	for i := range uint64(storedProbes) {
		b := (h1 + i*h2) & f.mask
		if f.bits[b>>6]&(1<<(b&63)) == 0 {
			return false
		}
	}
	return true
}

// add adds name and counts it unless all its bits were set already (a key
// written again, as every resident key is at every Flush, or a false
// positive), so that rewrites do not bring the rebuild nearer.
func (f *storedFilter) add(name string) { f.addHash(maphash.String(slotSeed, name)) }

// addHash is add of the name whose hash (maphash with slotSeed) is h.
func (f *storedFilter) addHash(h uint64) {
	h1, h2 := storedHashes(h)
	changed := false
	for i := range uint64(storedProbes) {
		b := (h1 + i*h2) & f.mask
		w, m := &f.bits[b>>6], uint64(1)<<(b&63)
		changed = changed || *w&m == 0
		*w |= m
	}
	if changed {
		f.added++
	}
}

// storedProbes is the number of bits a key sets; with storedBitsPerKey
// bits per key the false positive rate is about 2 %.
const (
	storedProbes     = 4
	storedBitsPerKey = 8
)

// storedHashes derives the probe sequence of a name from its hash.
func storedHashes(h uint64) (h1, h2 uint64) {
	return h, h>>32 | h<<32 | 1
}

// addStored records that the table now holds key, rebuilding the filter
// once it has taken as many keys as it was sized for.
func (s *Slots) addStored(key []byte, group int) {
	if s.stored.bits == nil {
		return
	}
	s.gk = binary.AppendUvarint(s.gk[:0], uint64(group))
	s.gk = append(s.gk, key...)
	s.stored.add(string(s.gk))
	if s.stored.added > s.stored.limit {
		s.rebuildStored()
	}
}

// rebuildStored builds the filter from a scan of the table's keys, sized
// for twice as many keys as it holds now. The scan keeps only each key's
// hash.
func (s *Slots) rebuildStored() {
	var hashes []uint64
	add := func(key []byte, g int) bool {
		s.gk = binary.AppendUvarint(s.gk[:0], uint64(g))
		s.gk = append(s.gk, key...)
		hashes = append(hashes, maphash.Bytes(slotSeed, s.gk))
		return true
	}
	if ks, ok := s.b.(KeyScanner); ok {
		ks.ScanKeys(s.d.Name, add)
	} else {
		kg := s.b.KeyGroups()
		for g := kg.Start; g <= kg.End; g++ {
			s.b.Keys(s.d.Name, g, func(key []byte) bool { return add(key, g) })
		}
	}
	limit := max(2*len(hashes), storedFilterMinKeys)
	size := uint64(1) << bits.Len64(uint64(limit*storedBitsPerKey-1))
	s.stored = storedFilter{bits: make([]uint64, size/64), mask: size - 1, limit: limit}
	for _, h := range hashes {
		s.stored.addHash(h)
	}
	s.stored.added = 0
}

// Lookup returns the words of key's slot in ns, if it has one, making the
// key resident. They are valid as a slot id is (see Slot); the caller may
// read them only.
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
// keeps its own index.
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

// deleteID deletes slot id.
func (s *Slots) deleteID(id int32) {
	if !s.hosted {
		lk := s.owner[id]
		i := slices.Index(lk.ids, id)
		lk.ids = slices.Delete(lk.ids, i, i+1)
		s.owner[id] = nil
		s.touch(lk)
		s.bytes -= residentSlotBytes + 8*int64(s.d.Words)
		if len(lk.ids) == 0 {
			s.emptied = append(s.emptied, lk)
		}
	}
	s.unindex(id)
}

// dropEmpty spills the resident keys whose slots were all deleted (their
// windows fired and purged) and that got none since: they would hold their
// share of the budget for nothing until the clock came round, and a keyed
// stream leaves such keys behind all the time (q5: of 600,000 auctions some
// 100,000 have panes at any moment). A key that gets a slot again is read
// back, which the table answers from its cache of the deletion.
func (s *Slots) dropEmpty() {
	for _, lk := range s.emptied {
		if !lk.gone && len(lk.ids) == 0 {
			s.spill(lk, nil)
		}
	}
	clear(s.emptied)
	s.emptied = s.emptied[:0]
}

// unindex takes slot id out of the index and frees the id.
func (s *Slots) unindex(id int32) {
	h := s.ent[id].hash
	p := h & s.mask
	for uint32(s.table[p]) != uint32(id+1) {
		p = (p + 1) & s.mask
	}
	s.remove(p)
	s.ent[id] = slotEntry{klen: -1}
	s.free = append(s.free, id)
}

// Flush writes the resident keys changed since the last Flush back to the
// table (when the slots spill; else it does nothing). They stay resident,
// but for those whose slots were all deleted (see dropEmpty).
func (s *Slots) Flush() {
	s.dropEmpty()
	for _, lk := range s.dirty {
		if lk.dirty && !lk.gone {
			s.writeBack(lk)
		}
	}
	clear(s.dirty)
	s.dirty = s.dirty[:0]
}

// Len returns the number of slots indexed (not of slots in the table).
func (s *Slots) Len() int { return s.n }

// SlotKey returns the key (owned by the index: do not modify it), key group
// and namespace of a slot.
func (s *Slots) SlotKey(slot int32) (key []byte, group int, ns int64) {
	e := &s.ent[slot]
	return e.key(), int(e.group), e.ns
}

// DeleteSlot removes a slot by id, as Delete does by key.
func (s *Slots) DeleteSlot(slot int32) { s.deleteID(slot) }

// Each calls fn with the id of every slot in the index (when hosted: every
// slot; else those of the resident keys), in no particular order.
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
