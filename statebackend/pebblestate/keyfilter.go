package pebblestate

import (
	"hash/maphash"
	"math/bits"
)

// keyFilter is an in-memory Bloom filter of the state keys (not timers,
// not metadata) the database may hold, so that a key the backend never
// wrote is known absent without a Pebble lookup (see "Key filter" in
// doc.go). Keyed streams meet new keys all the time, and Pebble answers
// such a lookup only after searching every memtable and consulting the
// bloom filter of every level.
//
// It is exact only for keys written through Backend.write, so it is on
// only for a backend that has seen every write of its database: one made
// by New (Restore and MergeInto write through Backend.write). A backend
// opened from a checkpoint, whose database holds keys it never saw, runs
// without it. Deleted keys stay in it: a false positive costs one lookup.
//
// The filter grows without rescanning the database: it is a list of
// parts, each sized for twice the keys of the one before, and a key is
// added to the newest part. A key may be present if any part says so.
// Once the parts would exceed the filter's byte budget it turns itself
// off for good (every key then may be present).
//
// Each part is a blocked Bloom filter: a key sets filterProbes bits in
// one 512-bit block (one cache line), so a lookup costs one cache miss
// per part. With filterBitsPerKey bits per key about 1 % of absent keys
// are reported present by each part.
type keyFilter struct {
	on     bool
	parts  []filterPart
	bytes  int64 // memory of the parts
	budget int64 // bytes the parts may take
}

type filterPart struct {
	blocks []filterBlock
	keys   int // keys added
	limit  int // keys it was sized for
}

type filterBlock [8]uint64

const (
	filterBitsPerKey = 10
	filterProbes     = 6
	// filterMinKeys is the fewest keys a first part is sized for.
	filterMinKeys = 1 << 12
)

// filterSeed seeds the filter's hash; the filter is never persisted.
var filterSeed = maphash.MakeSeed()

// init turns the filter on, its first part sized for firstKeys keys, its
// parts bounded by budget bytes (≤ 0: the filter stays off).
func (f *keyFilter) init(firstKeys int, budget int64) {
	*f = keyFilter{budget: budget}
	if budget <= 0 {
		return
	}
	f.on = true
	f.grow(max(firstKeys, filterMinKeys))
}

// grow adds a part sized for keys keys, or turns the filter off if it
// would exceed the budget.
func (f *keyFilter) grow(keys int) {
	n := (keys*filterBitsPerKey + 511) / 512
	size := int64(n) * 64
	if f.bytes+size > f.budget {
		*f = keyFilter{budget: f.budget}
		return
	}
	f.parts = append(f.parts, filterPart{blocks: make([]filterBlock, n), limit: keys})
	f.bytes += size
}

// filterHash returns the block selector and the probe bits of k.
func filterHash(k []byte) (sel, probes uint64) {
	h := maphash.Bytes(filterSeed, k)
	// A second, independent-enough word for the block: the splitmix64
	// finalizer of h.
	x := h ^ h>>30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x, h
}

// block returns the block of part p that sel selects.
func (p *filterPart) block(sel uint64) *filterBlock {
	hi, _ := bits.Mul64(sel, uint64(len(p.blocks)))
	return &p.blocks[hi]
}

// has reports whether the block may hold the key with these probe bits.
func (b *filterBlock) has(probes uint64) bool {
	for range filterProbes {
		bit := probes & 511
		if b[bit>>6]&(1<<(bit&63)) == 0 {
			return false
		}
		probes >>= 9
	}
	return true
}

// set sets the key's bits and reports whether any was unset.
func (b *filterBlock) set(probes uint64) bool {
	changed := false
	for range filterProbes {
		bit := probes & 511
		w, m := &b[bit>>6], uint64(1)<<(bit&63)
		changed = changed || *w&m == 0
		*w |= m
		probes >>= 9
	}
	return changed
}

// mayHave reports whether the database may hold state key k.
func (f *keyFilter) mayHave(k []byte) bool {
	if !f.on {
		return true
	}
	sel, probes := filterHash(k)
	for i := range f.parts {
		if f.parts[i].block(sel).has(probes) {
			return true
		}
	}
	return false
}

// add records that the database may now hold state key k.
func (f *keyFilter) add(k []byte) {
	if !f.on {
		return
	}
	sel, probes := filterHash(k)
	last := len(f.parts) - 1
	for i := range last {
		if f.parts[i].block(sel).has(probes) {
			return
		}
	}
	p := &f.parts[last]
	if !p.block(sel).set(probes) {
		return
	}
	if p.keys++; p.keys >= p.limit {
		f.grow(2 * p.limit)
	}
}

// off turns the filter off: from now on every key may be present.
func (f *keyFilter) off() { *f = keyFilter{budget: f.budget} }

// isStateKey reports whether k is a state key (not a timer or metadata
// key; see the key layout in doc.go).
func isStateKey(k []byte) bool {
	switch {
	case len(k) < 3:
		return false
	case k[0] == metaHi && k[1] == metaHi:
		return false
	case k[2] == timerMarker:
		return false
	case k[2] == procTimerMarker && len(k) > 3 && k[3] == 0x00:
		return false
	}
	return true
}
