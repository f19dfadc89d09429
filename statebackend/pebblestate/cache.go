package pebblestate

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"math"
	"slices"
	"unsafe"

	"github.com/weirstream/weir/statebackend/internal/chunk"
)

// valueCache is the write-back cache of state values in front of the write
// batch and Pebble (see "Write-back value cache" in doc.go). It is keyed by
// the full state key (key group, table id, key, user key), so one byte budget
// serves every table of the backend.
//
// An entry holds the key's value as the table's codec encodes it and, once
// read or written through the table, the decoded value too; or it records
// that the key has no value (a negative entry, so that a first-seen key is
// looked up in Pebble once). The encoding is kept up to date on every Put,
// which keeps SizeBytes exact and reports encoding errors where they happen;
// reads of cached keys do no decoding and no Pebble lookup.
//
// Dirty entries (changed since they were last written to the batch) are
// written to the batch when they are evicted and by flush, which every
// operation that reads Pebble directly calls first: Keys, map Range and
// Clear, Snapshot, Checkpoint, Restore, MergeInto, validate and Close.
// Timers are not cached.
//
// Eviction is CLOCK (second chance): the hand walks the entry slots, clears
// the ref bit of touched entries and evicts the first live entry without one.
//
// # Memory
//
// The cache counts the memory it holds, not an estimate per entry: entries
// are 24-byte structs in pages of cachePageEntries (no allocation per
// entry), found through an open-addressing table of 8-byte slots (hash tag
// and entry index), and each entry's key and encoded value share one
// allocation of the size class the allocator rounds them to, its spare
// bytes room for the value to grow. A decoded value is kept only if it is
// not a fixed-width scalar (int64, float64, bool decode again faster than
// an interface slot pays for itself in keys cached), in a page of
// interfaces beside the entries' page, made when one of its entries first
// keeps one. used is the pages and table allocated, the list of dirty
// entries, each live entry's key-and-value allocation and, for a kept
// decoded value, as many bytes as its encoding (a byte slice its bytes;
// decoded values larger than their encoding are counted short). A running
// count's entry (a 16-byte state key) takes about 60 bytes with a table
// three quarters full, so the default 64 MiB hold 1 M keys;
// TestValueCacheAccountsItsMemory checks the count against the heap's
// growth. Pages and table are kept once allocated (until dropCache), as a
// Go map keeps its buckets: a cache refills the slots eviction frees.
type valueCache struct {
	budget int64 // bytes; entries are evicted once used exceeds it
	slack  int64 // until used is slack below budget
	used   int64

	pages [][]cacheEntry // cachePageEntries each; slot i is pages[i/cachePageEntries][i%cachePageEntries]
	// vals holds the decoded values of pages' entries, a page of them
	// made when one of its entries first keeps one (nil until then).
	vals  [][]any
	slots int32    // slots handed out, live or free
	live  int      // live entries
	free  int32    // first free slot (-1: none); free slots are chained through disk
	table []uint64 // hash index: 0 empty, else tag<<32 | slot+1
	hand  int32
	dirty []int32 // slots made dirty since the last flush (some may be clean or free again)
	// victims is settle's scratch: the dirty entries a sweep evicts,
	// counted in used by its capacity.
	victims []dirtyRef
	// last is the entry of the last call (tried before the table), in
	// slot lastSlot.
	last     *cacheEntry
	lastSlot int32
}

// cacheEntry is one slot of the cache.
type cacheEntry struct {
	// p is the entry's key-and-value allocation (the key, then the
	// encoded value): its first byte, the allocation size bytes long; or,
	// if size is 0, a *bigKV (an allocation or a key of 64 KiB or more).
	// Nil in a free slot.
	p unsafe.Pointer
	// cur is the encoded value's length, -1 if the key has no value.
	cur int32
	// disk is the length of the key's value in the batch and database
	// (-1: none), as of the last write-back; for a free slot, the next
	// free slot.
	disk  int32
	klen  uint16 // the key's length, if size > 0
	size  uint16
	flags uint8
}

// bigKV is the key-and-value allocation of an entry too large for
// cacheEntry's 16-bit fields.
type bigKV struct {
	kv   []byte // the whole allocation (len = cap)
	klen int
}

// bigKVBytes is what a bigKV adds to its allocation.
const bigKVBytes = int64(unsafe.Sizeof(bigKV{}))

const (
	entLive    uint8 = 1 << iota // the slot holds an entry
	entDirty                     // changed since the last write-back
	entRef                       // touched since the hand last passed
	entDecoded                   // the slot's place in vals holds the decoded value
	entListed                    // the slot's index is in valueCache.dirty (kept while the slot is free)
	// entStub: the entry knows the length of the key's value in the
	// database (cur = disk ≥ 0) but not the value, which Peek read without
	// keeping: a Put or Delete need not read it again, a Get reads it.
	entStub
	// entVictim: chosen by the current eviction sweep, to be written
	// back and removed when it ends.
	entVictim
)

const (
	// A page of entries fills the 12 KiB size class of Go's allocator and
	// its page of decoded values the 8 KiB one, each with the 8-byte
	// header the allocator puts before objects of more than 512 bytes
	// that hold pointers. The lists of pages count their capacity in
	// slice headers.
	cachePageEntries = (12288 - 8) / int32(unsafe.Sizeof(cacheEntry{}))
	cachePageBytes   = 12288
	cacheValsBytes   = 8192
	sliceHeaderBytes = int64(unsafe.Sizeof([]byte{}))
	cacheSlotBytes   = 8
	cacheMinTable    = 64
)

// cacheSeed seeds the cache's hash; nothing hashed is persisted.
var cacheSeed = maphash.MakeSeed()

// key returns e's key (len = cap).
func (e *cacheEntry) key() []byte {
	if e.size > 0 {
		return unsafe.Slice((*byte)(e.p), e.klen)
	}
	b := (*bigKV)(e.p)
	return b.kv[:b.klen:b.klen]
}

// kv returns e's whole allocation (len = cap) and its key's length.
func (e *cacheEntry) kv() ([]byte, int) {
	if e.size > 0 {
		return unsafe.Slice((*byte)(e.p), e.size), int(e.klen)
	}
	b := (*bigKV)(e.p)
	return b.kv, b.klen
}

// enc returns e's encoded value (not of a stub, whose value is not held).
func (e *cacheEntry) enc() []byte {
	kv, klen := e.kv()
	return kv[klen : klen+max(int(e.cur), 0)]
}

// setKV makes kv (its capacity all of it) e's allocation, its first
// klen bytes the key.
func (e *cacheEntry) setKV(kv []byte, klen int) {
	kv = kv[:cap(kv)]
	if len(kv) <= math.MaxUint16 && len(kv) > 0 {
		e.p, e.size, e.klen = unsafe.Pointer(unsafe.SliceData(kv)), uint16(len(kv)), uint16(klen)
		return
	}
	e.p, e.size, e.klen = unsafe.Pointer(&bigKV{kv: kv, klen: klen}), 0, 0
}

// newKV returns an allocation for a key and an encoded value of n bytes
// together, its capacity the whole size class the allocator gives.
func newKV(n int) []byte { return slices.Grow([]byte(nil), n)[:0] }

// bytes is what the cache counts for e beyond its slot: its key-and-value
// allocation and its decoded value.
func (e *cacheEntry) bytes() int64 {
	var n int64
	if e.size > 0 {
		n = int64(e.size) // newKV's capacity: the size class
	} else {
		n = allocBytes(cap((*bigKV)(e.p).kv)) + bigKVBytes
	}
	if e.flags&entDecoded != 0 && e.cur >= 0 {
		n += allocBytes(max(int(e.cur), 1))
	}
	return n
}

// allocBytes approximates, from above, the size class the Go allocator
// gives n bytes (24 bytes, a class of its own, count as 32).
func allocBytes(n int) int64 {
	switch {
	case n == 0:
		return 0
	case n <= 16:
		return int64(n+7) &^ 7
	case n <= 256:
		return int64(n+15) &^ 15
	default:
		return int64(n+63) &^ 63
	}
}

func (c *valueCache) init(budget int64) {
	*c = valueCache{budget: budget, slack: min(budget/16, evictionBatchBytes), free: -1, lastSlot: -1}
}

func (c *valueCache) at(i int32) *cacheEntry {
	return &c.pages[i/cachePageEntries][i%cachePageEntries]
}

// decoded returns the decoded value of the entry in slot i (entDecoded).
func (c *valueCache) decoded(i int32) any {
	return c.vals[i/cachePageEntries][i%cachePageEntries]
}

// keepsDecoded reports whether the cache keeps v, a decoded value: not a
// fixed-width scalar, which decodes again in less time than a Go
// interface (16 bytes a slot) costs in cached keys.
func keepsDecoded(v any) bool {
	switch v.(type) {
	case int64, float64, bool:
		return false
	}
	return true
}

func cacheHash(k []byte) uint32 { return uint32(maphash.Bytes(cacheSeed, k)) }

// find returns the entry of state key k, its table position and its
// slot, or nil.
func (c *valueCache) find(k []byte) (*cacheEntry, int, int32) {
	if len(c.table) == 0 {
		return nil, 0, 0
	}
	h := cacheHash(k)
	mask := len(c.table) - 1
	for p := int(h) & mask; ; p = (p + 1) & mask {
		s := c.table[p]
		if s == 0 {
			return nil, 0, 0
		}
		if uint32(s>>32) == h {
			i := int32(uint32(s)) - 1
			if e := c.at(i); bytes.Equal(e.key(), k) {
				return e, p, i
			}
		}
	}
}

// lookup returns the entry of state key k, or nil, and makes it the last.
func (c *valueCache) lookup(k []byte) *cacheEntry {
	if e := c.last; e != nil && bytes.Equal(e.key(), k) {
		return e
	}
	e, _, i := c.find(k)
	if e != nil {
		c.last, c.lastSlot = e, i
	}
	return e
}

// insert adds a new entry for k with encoded value enc (none if !found),
// makes it the last and returns it.
func (c *valueCache) insert(k, enc []byte, found bool) *cacheEntry {
	if (c.live+1)*4 > len(c.table)*3 {
		c.grow()
	}
	i := c.free
	if i >= 0 {
		c.free = c.at(i).disk
	} else {
		if int(c.slots) == len(c.pages)*int(cachePageEntries) {
			n := cap(c.pages) + cap(c.vals)
			c.pages = append(c.pages, make([]cacheEntry, cachePageEntries))
			c.vals = append(c.vals, nil)
			c.used += cachePageBytes + int64(cap(c.pages)+cap(c.vals)-n)*sliceHeaderBytes
		}
		i = c.slots
		c.slots++
	}
	e := c.at(i)
	// A first-seen key's value comes with the next Put: the size class
	// rounding leaves room for a short one (a count, a flag) as a rule.
	kv := append(append(newKV(len(k)+max(len(enc), 1)), k...), enc...)
	*e = cacheEntry{cur: -1, disk: -1, flags: e.flags&entListed | entLive | entRef}
	e.setKV(kv, len(k))
	if found {
		e.cur, e.disk = int32(len(enc)), int32(len(enc))
	}
	c.used += e.bytes()
	c.last, c.lastSlot = e, i
	c.live++
	h := cacheHash(k)
	mask := len(c.table) - 1
	p := int(h) & mask
	for c.table[p] != 0 {
		p = (p + 1) & mask
	}
	c.table[p] = uint64(h)<<32 | uint64(i+1)
	return e
}

// grow doubles the hash index (or makes its first).
func (c *valueCache) grow() {
	old := c.table
	c.table = make([]uint64, max(2*len(old), cacheMinTable))
	c.used += int64(len(c.table)-len(old)) * cacheSlotBytes
	mask := len(c.table) - 1
	for _, s := range old {
		if s == 0 {
			continue
		}
		p := int(uint32(s>>32)) & mask
		for c.table[p] != 0 {
			p = (p + 1) & mask
		}
		c.table[p] = s
	}
}

// unindex removes the table slot at position p, shifting back the slots
// of its probe run that may move (linear probing without tombstones).
func (c *valueCache) unindex(p int) {
	mask := len(c.table) - 1
	for q := (p + 1) & mask; c.table[q] != 0; q = (q + 1) & mask {
		home := int(uint32(c.table[q]>>32)) & mask
		// The slot at q may move to p if its home is not in (p, q].
		if (q-home)&mask >= (q-p)&mask {
			c.table[p] = c.table[q]
			p = q
		}
	}
	c.table[p] = 0
}

// entry returns the cache entry of state key k, loading the key's encoded
// value (or its absence) from the batch on a miss; with value false, an
// entry that knows only the value's length will do (Put, Delete). The
// caller must call b.settle once it has changed the entry.
func (b *Backend) entry(k []byte, value bool) *cacheEntry {
	c := &b.cache
	e := c.lookup(k)
	if e != nil {
		e.flags |= entRef
		if !value || e.flags&entStub == 0 {
			return e
		}
	}
	enc, found, err := b.get(k, b.rbuf[:0])
	b.rbuf = enc[:0]
	if err != nil {
		b.fail(fmt.Errorf("pebble state backend: key %s: read: %w", chunk.Printable(k), err))
		found = false
	}
	if e != nil { // a stub
		if found {
			c.setEnc(e, enc)
		} else {
			c.setAbsent(e)
		}
		e.disk = e.cur
		return e
	}
	return c.insert(k, enc, found)
}

// stub records that state key k's value, read by Peek and not kept, is n
// bytes long in the database (-1: none), unless k is cached already.
func (c *valueCache) stub(k []byte, n int) {
	if c.lookup(k) != nil {
		return
	}
	e := c.insert(k, nil, false)
	if n >= 0 {
		e.cur, e.disk = int32(n), int32(n)
		e.flags |= entStub
	}
}

// setEnc makes enc the encoded value of e, the last entry, dropping its
// decoded value.
func (c *valueCache) setEnc(e *cacheEntry, enc []byte) {
	c.used -= e.bytes()
	c.dropDecoded(e)
	kv, klen := e.kv()
	if need := klen + len(enc); need > len(kv) {
		e.setKV(append(newKV(need), kv[:klen]...), klen)
		kv, _ = e.kv()
	}
	copy(kv[klen:], enc)
	e.cur = int32(len(enc))
	e.flags &^= entStub
	c.used += e.bytes()
}

// setDecoded records v as the decoded value of e, the last entry, if the
// cache keeps such values.
func (c *valueCache) setDecoded(e *cacheEntry, v any) {
	if !keepsDecoded(v) {
		return
	}
	if e != c.last {
		panic("pebble state backend: value cache: decoded value of an entry that is not the last")
	}
	c.used -= e.bytes()
	p := c.lastSlot / cachePageEntries
	if c.vals[p] == nil {
		c.vals[p] = make([]any, cachePageEntries)
		c.used += cacheValsBytes
	}
	c.vals[p][c.lastSlot%cachePageEntries] = v
	e.flags |= entDecoded
	c.used += e.bytes()
}

// dropDecoded forgets the decoded value of e, the last entry (the caller
// accounts for it).
func (c *valueCache) dropDecoded(e *cacheEntry) {
	if e.flags&entDecoded == 0 {
		return
	}
	if e != c.last {
		panic("pebble state backend: value cache: decoded value of an entry that is not the last")
	}
	c.clearDecoded(e, c.lastSlot)
}

// clearDecoded forgets the decoded value of e, in slot i.
func (c *valueCache) clearDecoded(e *cacheEntry, i int32) {
	if e.flags&entDecoded != 0 {
		e.flags &^= entDecoded
		c.vals[i/cachePageEntries][i%cachePageEntries] = nil
	}
}

// setAbsent records that the key of e, the last entry, has no value.
func (c *valueCache) setAbsent(e *cacheEntry) {
	c.used -= e.bytes()
	c.dropDecoded(e)
	e.cur = -1
	e.flags &^= entStub
	c.used += e.bytes()
}

// markDirty records that e, the last entry, changed since it was last
// written back.
func (c *valueCache) markDirty(e *cacheEntry) {
	e.flags |= entDirty
	if e.flags&entListed == 0 {
		e.flags |= entListed
		n := cap(c.dirty)
		c.dirty = append(c.dirty, c.lastSlot)
		c.used += int64(cap(c.dirty)-n) * 4
	}
}

// evictionBatchBytes bounds the bytes of entries one eviction sweep
// evicts below the budget (a sixteenth of the budget if less).
const evictionBatchBytes = 1 << 20

// memtableNodeBytes is about what Pebble counts for a write in a
// memtable beyond its key and value: a skiplist node of full height.
const memtableNodeBytes = 200

// settle evicts entries, if the cache is over its budget, until it is
// slack below it, and commits their write-backs: reads do not see the
// batch, so a sweep's writes are committed before the next read, and a
// sweep writes many, so that a commit is not paid per eviction. A sweep
// stops early, once back within the budget, when its writes would take a
// quarter of a memtable: Pebble applies a batch of half a memtable or more
// as a memtable of its own, which reads then search apart from the others
// until it is flushed.
func (b *Backend) settle() {
	c := &b.cache
	if c.used <= c.budget {
		return
	}
	// Clean victims go at once; dirty ones are written back after the
	// sweep, in key order (see flush), and go then.
	var written, limit int64 = 0, b.opts.MemTableBytes / 4
	var deferred int64 // bytes of the dirty victims not yet removed
	victims := c.victims[:0]
	for c.used-deferred > c.budget-c.slack && c.live > len(victims) {
		if written >= limit && c.used-deferred <= c.budget {
			break
		}
		i := c.hand
		if c.hand++; c.hand == c.slots {
			c.hand = 0
		}
		switch e := c.at(i); {
		case e.flags&entLive == 0, e.flags&entVictim != 0:
		case e.flags&entRef != 0:
			e.flags &^= entRef
		case e.flags&entDirty != 0:
			written += int64(len(e.key())+max(int(e.cur), 0)) + memtableNodeBytes
			deferred += e.bytes()
			e.flags |= entVictim
			victims = append(victims, c.ref(i))
		default:
			c.remove(e, i)
		}
	}
	sortRefs(c, victims)
	for _, r := range victims {
		e := c.at(r.slot)
		b.writeBack(e)
		c.remove(e, r.slot)
	}
	if n := cap(victims) - cap(c.victims); n > 0 {
		c.used += int64(n) * int64(unsafe.Sizeof(dirtyRef{}))
	}
	c.victims = victims[:0]
	c.compactDirty()
	b.commit()
}

// remove takes e, in slot i, out of the cache without writing it back.
func (c *valueCache) remove(e *cacheEntry, i int32) {
	_, p, _ := c.find(e.key())
	c.unindex(p)
	c.used -= e.bytes()
	c.clearDecoded(e, i)
	*e = cacheEntry{disk: c.free, flags: e.flags & entListed}
	c.free = i
	c.live--
	if c.last == e {
		c.last = nil
	}
}

// compactDirty drops from c.dirty the slots that are free or clean again,
// once they outnumber the live ones: without checkpoints (so without
// flushes), a load of many keys through a small cache would otherwise keep
// a slot per key evicted.
func (c *valueCache) compactDirty() {
	if len(c.dirty) <= 2*c.live+64 {
		return
	}
	live := c.dirty[:0]
	for _, i := range c.dirty {
		if e := c.at(i); e.flags&(entLive|entDirty) == entLive|entDirty {
			live = append(live, i)
		} else {
			e.flags &^= entListed
		}
	}
	c.dirty = live
}

// writeBack writes a dirty entry's value (or its deletion) to the batch.
// The caller commits before the next read.
func (b *Backend) writeBack(e *cacheEntry) {
	if e.flags&entDirty == 0 {
		return
	}
	e.flags &^= entDirty
	var err error
	switch {
	case e.cur >= 0:
		err = b.write(clSet, e.key(), e.enc())
	case e.disk >= 0:
		err = b.write(clDelete, e.key(), nil)
	}
	if err != nil {
		b.fail(fmt.Errorf("pebble state backend: key %s: write: %w", chunk.Printable(e.key()), err))
		return
	}
	e.disk = e.cur
	b.probe.ok = false
}

// flush writes every dirty entry to the batch and commits it. The entries
// stay cached, clean. Afterwards the database holds all state.
//
// Many entries are written in key order: Pebble sorts a batch of half a
// memtable or more (a checkpoint's write-back of a window's resident keys)
// before it applies it as a memtable of its own, and inserts a smaller one
// into the memtable's skiplist, and both cost far less for sorted keys
// than the sort below, which compares prefixes held in the array it
// sorts rather than keys decoded from the batch.
func (b *Backend) flush() {
	c := &b.cache
	if len(c.dirty) < flushSortMin {
		for _, i := range c.dirty {
			e := c.at(i)
			e.flags &^= entListed
			if e.flags&entLive != 0 {
				b.writeBack(e)
			}
		}
	} else {
		// The batch's earlier writes (timers, metadata) go first, so
		// that the one carrying the flush is in key order throughout.
		b.commit()
		for _, r := range c.sortedDirty() {
			b.writeBack(c.at(r.slot))
		}
	}
	c.dirty = c.dirty[:0]
	b.commit()
}

// flushSortMin is the fewest dirty entries flush writes in key order.
const flushSortMin = 256

// dirtyRef is a dirty entry in flush's sort: the first 16 bytes of its
// key (zero-padded, big endian) and its slot.
type dirtyRef struct {
	hi, lo uint64
	slot   int32
}

// sortedDirty clears the listed flag of every slot in c.dirty and returns
// the live dirty ones in key order. The slice is not kept: it exists
// while flush runs, outside the cache's budget.
func (c *valueCache) sortedDirty() []dirtyRef {
	refs := make([]dirtyRef, 0, len(c.dirty))
	for _, i := range c.dirty {
		e := c.at(i)
		e.flags &^= entListed
		if e.flags&(entLive|entDirty) == entLive|entDirty {
			refs = append(refs, c.ref(i))
		}
	}
	sortRefs(c, refs)
	return refs
}

// ref returns the sort reference of the entry in slot i.
func (c *valueCache) ref(i int32) dirtyRef {
	var p [16]byte
	copy(p[:], c.at(i).key())
	return dirtyRef{binary.BigEndian.Uint64(p[:8]), binary.BigEndian.Uint64(p[8:]), i}
}

// sortRefs sorts refs by their entries' keys.
func sortRefs(c *valueCache, refs []dirtyRef) {
	slices.SortFunc(refs, func(x, y dirtyRef) int {
		if x.hi != y.hi {
			return cmp.Compare(x.hi, y.hi)
		}
		if x.lo != y.lo {
			return cmp.Compare(x.lo, y.lo)
		}
		// Equal prefixes (a zero-padded prefix sorts as the key does):
		// the whole keys decide.
		return bytes.Compare(c.at(x.slot).key(), c.at(y.slot).key())
	})
}

// dropCache flushes and then empties the cache: before writes that bypass
// it (Restore, MergeInto).
func (b *Backend) dropCache() {
	b.flush()
	c := &b.cache
	c.init(c.budget)
}

// dropKey removes the entry of state key k, if cached, without writing it
// back: the caller deletes k in the batch itself.
func (b *Backend) dropKey(k []byte) {
	if e, _, i := b.cache.find(k); e != nil {
		b.cache.remove(e, i)
	}
}

// cachedValue reports whether e holds the same encoded value as enc.
func cachedValue(e *cacheEntry, enc []byte) bool {
	return e.flags&entStub == 0 && int(e.cur) == len(enc) && bytes.Equal(e.enc(), enc)
}

// ReserveSlotMemory implements statebackend.SlotMemory: a Slots table
// gets seven eighths of what is left of the value cache's budget for its
// resident keys, and the value cache keeps the rest. The resident keys of
// a window are its working set; the value cache then holds keys they
// spilled and, until it evicts them, copies of what Flush wrote back, which
// the Slots holds already. (With three quarters, q5 on Pebble spilled
// some 20,000-35,000 keys around its peak of 142,000 resident keys and ran
// 10-15 % slower.)
func (b *Backend) ReserveSlotMemory() int64 {
	c := &b.cache
	n := c.budget - c.budget/8
	c.budget -= n
	c.slack = min(c.budget/16, evictionBatchBytes)
	return max(n, 1)
}

// cacheTypicalEntryBytes is about what an entry of a small key and value
// takes (slot, table share, key-and-value allocation): it
// sizes the key filter's first part for the keys a full cache holds.
const cacheTypicalEntryBytes = 64
