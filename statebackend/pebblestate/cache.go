package pebblestate

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"hash/maphash"
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
// are structs in pages of cachePageEntries (no pointer, no allocation per
// entry), found through an open-addressing table of 8-byte slots (hash tag
// and entry index), and each entry's key and encoded value share one
// allocation. used is the pages and table allocated, the list of dirty
// entries, each live entry's key-and-value allocation and, for a decoded
// value, as many bytes as its encoding (a boxed int64 takes 8, a byte
// slice its bytes; decoded values larger than their encoding are counted
// short). TestValueCacheAccountsItsMemory checks that used stays within
// 15 % above the heap's growth for a running count's entries. Pages and
// table are kept once allocated (until dropCache), as a Go map keeps its
// buckets: a cache refills the slots eviction frees.
type valueCache struct {
	budget int64 // bytes; entries are evicted once used exceeds it
	slack  int64 // until used is slack below budget
	used   int64

	pages [][]cacheEntry // cachePageEntries each; slot i is pages[i/cachePageEntries][i%cachePageEntries]
	slots int32          // slots handed out, live or free
	live  int            // live entries
	free  int32          // first free slot (-1: none); free slots are chained through disk
	table []uint64       // hash index: 0 empty, else tag<<32 | slot+1
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
	kv   []byte // the key, then the encoded value (kv[klen : klen+cur])
	v    any    // the decoded value, valid if flags&entDecoded (and cur ≥ 0)
	klen int32
	// cur is the encoded value's length, -1 if the key has no value.
	cur int32
	// disk is the length of the key's value in the batch and database
	// (-1: none), as of the last write-back; for a free slot, the next
	// free slot.
	disk  int32
	flags uint8
}

const (
	entLive    uint8 = 1 << iota // the slot holds an entry
	entDirty                     // changed since the last write-back
	entRef                       // touched since the hand last passed
	entDecoded                   // v holds the decoded value
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
	// A page is as many entries as fit in 8 KiB, a size class of Go's
	// allocator; it counts with its header in pages.
	cachePageEntries = 8192 / int32(unsafe.Sizeof(cacheEntry{}))
	cachePageBytes   = 8192 + int64(unsafe.Sizeof([]cacheEntry{}))
	cacheSlotBytes   = 8
	cacheMinTable    = 64
)

// cacheSeed seeds the cache's hash; nothing hashed is persisted.
var cacheSeed = maphash.MakeSeed()

func (e *cacheEntry) key() []byte { return e.kv[:e.klen:e.klen] }
func (e *cacheEntry) enc() []byte { return e.kv[e.klen : e.klen+max(e.cur, 0)] }

// bytes is what the cache counts for e beyond its slot: its key-and-value
// allocation and its decoded value.
func (e *cacheEntry) bytes() int64 {
	n := allocBytes(cap(e.kv))
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
			c.pages = append(c.pages, make([]cacheEntry, cachePageEntries))
			c.used += cachePageBytes
		}
		i = c.slots
		c.slots++
	}
	e := c.at(i)
	// Room for 8 bytes of value: a first-seen key's count, sum or flag
	// fits without a second allocation.
	kv := make([]byte, len(k), len(k)+max(len(enc), 8))
	copy(kv, k)
	*e = cacheEntry{kv: kv, klen: int32(len(k)), cur: -1, disk: -1, flags: e.flags&entListed | entLive | entRef}
	if found {
		e.kv = append(e.kv, enc...)
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

// setEnc makes enc e's encoded value, dropping its decoded value.
func (c *valueCache) setEnc(e *cacheEntry, enc []byte) {
	c.used -= e.bytes()
	if need := int(e.klen) + len(enc); need > cap(e.kv) {
		kv := make([]byte, need)
		copy(kv, e.key())
		e.kv = kv
	}
	e.kv = append(e.kv[:e.klen], enc...)
	e.cur = int32(len(enc))
	e.v = nil
	e.flags &^= entDecoded | entStub
	c.used += e.bytes()
}

// setDecoded records v as e's decoded value.
func (c *valueCache) setDecoded(e *cacheEntry, v any) {
	c.used -= e.bytes()
	e.v = v
	e.flags |= entDecoded
	c.used += e.bytes()
}

// setAbsent records that e's key has no value.
func (c *valueCache) setAbsent(e *cacheEntry) {
	c.used -= e.bytes()
	e.kv = e.kv[:e.klen]
	e.cur = -1
	e.v = nil
	e.flags &^= entDecoded | entStub
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
			written += int64(len(e.kv)) + memtableNodeBytes
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
// gets three quarters of what is left of the value cache's budget for its
// resident keys, and the value cache keeps the rest. The resident keys of
// a window are its working set; the value cache then mostly holds keys
// they spilled.
func (b *Backend) ReserveSlotMemory() int64 {
	c := &b.cache
	n := c.budget - c.budget/4
	c.budget -= n
	c.slack = min(c.budget/16, evictionBatchBytes)
	return max(n, 1)
}

// cacheTypicalEntryBytes is about what an entry of a small key and value
// takes (slot, table share, key-and-value allocation, boxed value): it
// sizes the key filter's first part for the keys a full cache holds.
const cacheTypicalEntryBytes = 100
