package pebblestate

import (
	"bytes"
	"fmt"

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
// Eviction is CLOCK (second chance): ring holds every entry, a touched entry
// gets its ref bit set, and the hand clears ref bits until it finds an entry
// without one.
type valueCache struct {
	budget int64 // bytes; entries are evicted once used exceeds it
	slack  int64 // until used is slack below budget
	used   int64
	m      map[string]*cacheEntry
	ring   []*cacheEntry
	hand   int
	dirty  []*cacheEntry // entries made dirty since the last flush (some may be clean or gone again)
	last   *cacheEntry   // the entry of the last call, tried before the map
}

// cacheEntryOverhead approximates the bytes an entry costs beyond its key
// and encoded value: the entry struct, its map slot and ring slot.
const cacheEntryOverhead = 128

type cacheEntry struct {
	key string
	// enc is the encoded value; cur its length, -1 if the key has no value.
	enc []byte
	cur int
	// v is the decoded value, valid if decoded (and cur ≥ 0).
	v       any
	decoded bool
	// disk is the length of the key's value in the batch and database
	// (-1: none), as of the last write-back.
	disk  int
	dirty bool
	ref   bool
	gone  bool // evicted or dropped: no longer in m and ring
	idx   int  // position in ring
	size  int64
}

func (c *valueCache) init(budget int64) {
	*c = valueCache{budget: budget, slack: min(budget/16, evictionBatchBytes), m: make(map[string]*cacheEntry)}
}

// entry returns the cache entry of state key k, loading the key's encoded
// value (or its absence) from the batch on a miss. The caller must call
// b.settle once it has changed the entry.
func (b *Backend) entry(k []byte) *cacheEntry {
	c := &b.cache
	if e := c.last; e != nil && e.key == string(k) {
		e.ref = true
		return e
	}
	if e := c.m[string(k)]; e != nil {
		e.ref = true
		c.last = e
		return e
	}
	e := &cacheEntry{key: string(k), cur: -1, disk: -1, ref: true}
	enc, found, err := b.get(k, nil)
	switch {
	case err != nil:
		b.fail(fmt.Errorf("pebble state backend: key %s: read: %w", chunk.Printable(k), err))
	case found:
		e.enc = enc
		e.cur, e.disk = len(enc), len(enc)
	}
	e.idx = len(c.ring)
	c.ring = append(c.ring, e)
	c.m[e.key] = e
	e.size = entrySize(e)
	c.used += e.size
	c.last = e
	return e
}

func entrySize(e *cacheEntry) int64 {
	return int64(len(e.key)+cap(e.enc)) + cacheEntryOverhead
}

// markDirty records that e changed since it was last written back.
func (c *valueCache) markDirty(e *cacheEntry) {
	if !e.dirty {
		e.dirty = true
		c.dirty = append(c.dirty, e)
	}
}

// evictionBatchBytes bounds the bytes of entries one eviction sweep
// evicts below the budget (a sixteenth of the budget if less).
const evictionBatchBytes = 1 << 20

// settle recomputes e's size after a change and, if the cache is over its
// budget, evicts entries until it is slack below it and commits their
// write-backs: reads do not see the batch, so a sweep's writes are
// committed before the next read, and a sweep writes many, so that a
// commit is not paid per eviction.
func (b *Backend) settle(e *cacheEntry) {
	c := &b.cache
	if !e.gone {
		n := entrySize(e)
		c.used += n - e.size
		e.size = n
	}
	if c.used <= c.budget {
		return
	}
	for c.used > c.budget-c.slack && len(c.ring) > 0 {
		v := c.ring[c.hand]
		if v.ref {
			v.ref = false
			c.hand++
			if c.hand == len(c.ring) {
				c.hand = 0
			}
			continue
		}
		b.writeBack(v)
		c.remove(v)
	}
	c.compactDirty()
	b.commit()
}

// remove takes e out of the cache without writing it back.
func (c *valueCache) remove(e *cacheEntry) {
	delete(c.m, e.key)
	last := len(c.ring) - 1
	c.ring[e.idx] = c.ring[last]
	c.ring[e.idx].idx = e.idx
	c.ring[last] = nil
	c.ring = c.ring[:last]
	if c.hand >= len(c.ring) {
		c.hand = 0
	}
	c.used -= e.size
	e.gone = true
	// c.dirty may still point at e until the next flush or compaction:
	// it must not keep the value alive.
	e.enc, e.v, e.decoded = nil, nil, false
	if c.last == e {
		c.last = nil
	}
}

// compactDirty drops from c.dirty the entries that are gone or clean again,
// once they outnumber the live ones: without checkpoints (so without
// flushes), a load of many keys through a small cache would otherwise keep
// an entry per key evicted.
func (c *valueCache) compactDirty() {
	if len(c.dirty) <= 2*len(c.ring)+64 {
		return
	}
	live := c.dirty[:0]
	for _, e := range c.dirty {
		if !e.gone && e.dirty {
			live = append(live, e)
		}
	}
	clear(c.dirty[len(live):])
	c.dirty = live
}

// writeBack writes a dirty entry's value (or its deletion) to the batch.
// The caller commits before the next read.
func (b *Backend) writeBack(e *cacheEntry) {
	if !e.dirty {
		return
	}
	e.dirty = false
	b.wbuf = append(b.wbuf[:0], e.key...)
	var err error
	switch {
	case e.cur >= 0:
		err = b.write(clSet, b.wbuf, e.enc)
	case e.disk >= 0:
		err = b.write(clDelete, b.wbuf, nil)
	}
	if err != nil {
		b.fail(fmt.Errorf("pebble state backend: key %s: write: %w", chunk.Printable(b.wbuf), err))
		return
	}
	e.disk = e.cur
	b.probe.ok = false
}

// flush writes every dirty entry to the batch and commits it. The entries
// stay cached, clean. Afterwards the database holds all state.
func (b *Backend) flush() {
	c := &b.cache
	for i, e := range c.dirty {
		if !e.gone {
			b.writeBack(e)
		}
		c.dirty[i] = nil
	}
	c.dirty = c.dirty[:0]
	b.commit()
}

// dropCache flushes and then empties the cache: before writes that bypass
// it (Restore, MergeInto).
func (b *Backend) dropCache() {
	b.flush()
	c := &b.cache
	for _, e := range c.ring {
		e.gone = true
	}
	clear(c.m)
	clear(c.ring)
	c.ring, c.hand, c.used, c.last = c.ring[:0], 0, 0, nil
}

// dropKey removes the entry of state key k, if cached, without writing it
// back: the caller deletes k in the batch itself.
func (b *Backend) dropKey(k []byte) {
	if e := b.cache.m[string(k)]; e != nil {
		b.cache.remove(e)
	}
}

// cachedValue reports whether e holds the same encoded value as enc.
func cachedValue(e *cacheEntry, enc []byte) bool {
	return e.cur == len(enc) && bytes.Equal(e.enc, enc)
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
