// Package heap is Weir's default keyed-state backend: state lives on the Go
// heap, per key group and table, as typed values (any) found through a Go map
// from the key (and, for map state, the user key). Reads and writes neither
// serialise nor copy values; the codecs run only in Snapshot and when a
// restored table is first asked for. Value, list, reducing and aggregating
// tables keep their entries in a dense slice indexed by a map (see slab.go),
// map-state tables in nested maps.
//
// Snapshot is synchronous and costs O(state): it encodes every key group into
// a fresh chunk during the call (the synchronous phase of a checkpoint), so
// that the task may change its state as soon as it returns and the upload can
// run in the background on data that no longer aliases live state. A future
// improvement is copy-on-write maps so that the synchronous phase only freezes
// a version and the encoding moves to the asynchronous phase.
//
// The timers of each domain (event time, processing time) live in one
// min-heap ordered by (timestamp, key group, key), so that firing costs
// O(log n) per timer whatever the key-group range, plus one set per key
// group that removes duplicates, serves deletions (entries in the heap that
// are no longer in the set are skipped) and is what Snapshot writes.
//
// Snapshot honours statebackend.Descriptor.SnapshotFilter: TTL state's
// expired values, list elements and map entries are left out of the chunk
// (the live state keeps them until TTL cleanup removes them).
//
// Snapshot chunks are in the format of statebackend/internal/chunk (shared
// with the Pebble backend). heap imports the standard library, stream,
// statebackend and statebackend/internal/chunk.
package heap

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/statebackend/internal/chunk"
	"github.com/weirstream/weir/stream"
)

// entryOverhead approximates the bytes one entry costs beyond its key bytes
// and value: a map slot, a cell and the boxed value's header.
const entryOverhead = 64

// Backend is the heap state backend. Create it with New.
type Backend struct {
	kg     stream.KeyGroupRange
	key    []byte
	idx    int // current key group - kg.Start
	tables map[string]*table
	timers timerService
	closed bool

	// Statistics for SizeBytes.
	entries  int64 // values (map state: user keys) and keys of map state
	keyBytes int64
	avgValue int64 // encoded bytes per entry at the last snapshot
}

var _ statebackend.Backend = (*Backend)(nil)

// New returns an empty backend for the key groups kg.
func New(kg stream.KeyGroupRange) *Backend {
	b := &Backend{kg: kg, tables: make(map[string]*table)}
	b.timers = newTimerService(b, stream.MinWatermark)
	return b
}

// SetCurrentKey implements statebackend.Backend.
func (b *Backend) SetCurrentKey(key []byte, keyGroup int) {
	if !b.kg.Contains(keyGroup) {
		panic(fmt.Sprintf("heap state backend: key group %d is outside this subtask's range %v; the record was routed to the wrong subtask", keyGroup, b.kg))
	}
	b.key = key
	b.idx = keyGroup - b.kg.Start
}

// CurrentKey implements statebackend.Backend.
func (b *Backend) CurrentKey() ([]byte, int) { return b.key, b.idx + b.kg.Start }

// KeyGroups implements statebackend.Backend.
func (b *Backend) KeyGroups() stream.KeyGroupRange { return b.kg }

// Timers implements statebackend.Backend.
func (b *Backend) Timers() statebackend.TimerService { return &b.timers }

// Table implements statebackend.Backend.
func (b *Backend) Table(d statebackend.Descriptor) (statebackend.Table, error) {
	if b.closed {
		return nil, statebackend.ErrClosed
	}
	if err := d.Validate(); err != nil {
		return nil, err
	}
	t := b.tables[d.Name]
	if t == nil {
		t = b.newTable(d.Name, d.Kind)
		t.d = d
		t.registered = true
		b.tables[d.Name] = t
		return t, nil
	}
	if t.hosted != nil {
		return nil, fmt.Errorf("%w: state %q is slot state (statebackend.GetSlots) and is requested as a table", statebackend.ErrConflict, d.Name)
	}
	if t.registered {
		if err := t.d.Compatible(d); err != nil {
			return nil, err
		}
		return t, nil
	}
	// Restored, not yet asked for: decode the raw values.
	if t.kind != d.Kind {
		return nil, fmt.Errorf("%w: state %q was restored as %s state and is requested as %s state; use another name for the new state",
			statebackend.ErrConflict, d.Name, t.kind, d.Kind)
	}
	if err := t.decodeRaw(d); err != nil {
		return nil, err
	}
	t.d = d
	t.registered = true
	return t, nil
}

func (b *Backend) newTable(name string, kind statebackend.Kind) *table {
	t := &table{b: b, kind: kind, d: statebackend.Descriptor{Name: name, Kind: kind}}
	if kind == statebackend.KindMap {
		t.maps = make([]map[string]map[string]*cell, b.kg.Len())
	} else {
		t.vals = make([]slab, b.kg.Len())
	}
	return t
}

// Keys implements statebackend.Backend.
func (b *Backend) Keys(name string, keyGroup int, fn func(key []byte) bool) {
	t := b.tables[name]
	if t == nil || !b.kg.Contains(keyGroup) {
		return
	}
	i := keyGroup - b.kg.Start
	if t.hosted != nil {
		t.hostedKeys(keyGroup, fn)
		return
	}
	if t.maps != nil {
		for k := range t.maps[i] {
			if b.closed || !fn([]byte(k)) {
				return
			}
		}
		return
	}
	// Deleting moves the last slot into the hole, so iterate over a copy
	// of the keys (string headers, not bytes): fn may delete any key (TTL
	// cleanup deletes other keys), and a key deleted before its turn is
	// skipped.
	g := &t.vals[i]
	keys := make([]string, g.len())
	for j := range g.slots {
		keys[j] = g.slots[j].key
	}
	for _, k := range keys {
		if b.closed {
			return
		}
		if _, ok := g.index[k]; !ok {
			continue
		}
		if !fn([]byte(k)) {
			return
		}
	}
}

// SizeBytes implements statebackend.Backend: key bytes plus a fixed overhead
// per entry, plus the average encoded value size seen at the last snapshot.
func (b *Backend) SizeBytes() int64 {
	n := b.keyBytes + b.entries*(entryOverhead+b.avgValue) + b.timers.sizeBytes()
	for _, t := range b.tables {
		if t.hosted != nil {
			n += int64(t.hosted.Len()) * (entryOverhead + b.avgValue)
		}
	}
	return n
}

// Close implements statebackend.Backend.
func (b *Backend) Close() error {
	b.closed = true
	for _, t := range b.tables {
		t.vals, t.maps = nil, nil
	}
	b.tables = nil
	b.timers = timerService{b: b, wm: b.timers.wm} // the queues are empty, their sets nil
	b.entries, b.keyBytes = 0, 0
	return nil
}

// sortedTables returns the tables by name, for deterministic snapshots.
func (b *Backend) sortedTables() []*table {
	ts := make([]*table, 0, len(b.tables))
	for _, t := range b.tables {
		ts = append(ts, t)
	}
	slices.SortFunc(ts, func(x, y *table) int { return cmp.Compare(x.d.Name, y.d.Name) })
	return ts
}

// cell holds one value of a map-state table. The maps point to cells so that
// updating an existing user key is a lookup (which does not allocate for a
// string([]byte) key) and a store, not a map assignment (which would allocate
// a copy of the key).
type cell struct{ v any }

// table is one state table. Before it is registered (restored but not asked
// for yet) its cells hold the encoded values as []byte.
type table struct {
	b          *Backend
	d          statebackend.Descriptor
	kind       statebackend.Kind
	registered bool
	// hosted, if set, holds the table's state instead of vals and maps
	// (see HostSlots); load adds restored slots to it.
	hosted statebackend.SlotSource
	load   func(key []byte, group int, ns int64, words []int64) error
	vals   []slab                        // per key group; nil for KindMap
	maps   []map[string]map[string]*cell // per key group; KindMap only
	ukBuf  []byte
}

var _ statebackend.Table = (*table)(nil)

func (t *table) Descriptor() statebackend.Descriptor { return t.d }

func (t *table) Get(userKey []byte) (any, bool) {
	b := t.b
	if b.closed {
		return nil, false
	}
	if t.maps != nil {
		c, ok := t.maps[b.idx][string(b.key)][string(userKey)]
		if !ok {
			return nil, false
		}
		return c.v, true
	}
	return t.vals[b.idx].get(b.key)
}

func (t *table) Put(userKey []byte, v any) {
	b := t.b
	if b.closed {
		return
	}
	if t.maps != nil {
		g := t.maps[b.idx]
		if g == nil {
			g = make(map[string]map[string]*cell)
			t.maps[b.idx] = g
		}
		um, ok := g[string(b.key)]
		if !ok {
			um = make(map[string]*cell)
			g[string(b.key)] = um
			b.entries++
			b.keyBytes += int64(len(b.key))
		}
		if c, ok := um[string(userKey)]; ok {
			c.v = v
			return
		}
		um[string(userKey)] = &cell{v}
		b.entries++
		b.keyBytes += int64(len(userKey))
		return
	}
	if t.vals[b.idx].put(b.key, v) {
		b.entries++
		b.keyBytes += int64(len(b.key))
	}
}

func (t *table) Delete(userKey []byte) {
	b := t.b
	if b.closed {
		return
	}
	if t.maps != nil {
		g := t.maps[b.idx]
		um, ok := g[string(b.key)]
		if !ok {
			return
		}
		if _, ok := um[string(userKey)]; !ok {
			return
		}
		delete(um, string(userKey))
		b.entries--
		b.keyBytes -= int64(len(userKey))
		if len(um) == 0 {
			delete(g, string(b.key))
			b.entries--
			b.keyBytes -= int64(len(b.key))
		}
		return
	}
	if t.vals[b.idx].del(b.key) {
		b.entries--
		b.keyBytes -= int64(len(b.key))
	}
}

func (t *table) Range(fn func(userKey []byte, v any) bool) {
	b := t.b
	if b.closed {
		return
	}
	if t.maps == nil {
		if v, ok := t.vals[b.idx].get(b.key); ok {
			fn(nil, v)
		}
		return
	}
	// Deleting the last entry (in fn) drops the key from the outer map;
	// iterating um goes on safely.
	um := t.maps[b.idx][string(b.key)]
	for uk, c := range um {
		t.ukBuf = append(t.ukBuf[:0], uk...)
		if !fn(t.ukBuf, c.v) {
			break
		}
	}
}

func (t *table) Clear() {
	b := t.b
	if b.closed {
		return
	}
	if t.maps == nil {
		t.Delete(nil)
		return
	}
	g := t.maps[b.idx]
	um, ok := g[string(b.key)]
	if !ok {
		return
	}
	for uk := range um {
		b.keyBytes -= int64(len(uk))
	}
	b.entries -= int64(len(um)) + 1
	b.keyBytes -= int64(len(b.key))
	delete(g, string(b.key))
}

// decodeRaw replaces the encoded values of a restored table with values
// decoded by d's codecs. It changes nothing if any value fails to decode.
func (t *table) decodeRaw(d statebackend.Descriptor) error {
	type pending struct {
		c    *cell // map tables
		slot *slot // other tables
		v    any
	}
	var todo []pending
	fail := func(i int, key, uk string, what string, err error) error {
		where := fmt.Sprintf("key %s", chunk.Printable(key))
		if t.maps != nil {
			where += fmt.Sprintf(", user key %s", chunk.Printable(uk))
		}
		return fmt.Errorf("heap state backend: restored %s state %q, key group %d, %s: %s does not decode with codec %s: %w; the state was written with another codec or type, or with TTL switched on or off since",
			t.kind, d.Name, t.b.kg.Start+i, where, what, codecName(d, what), err)
	}
	for i := range t.vals {
		for j := range t.vals[i].slots {
			sl := &t.vals[i].slots[j]
			v, err := d.Codec.DecodeValue(sl.v.([]byte))
			if err != nil {
				return fail(i, sl.key, "", "value", err)
			}
			todo = append(todo, pending{v: v, slot: sl})
		}
	}
	for i, g := range t.maps {
		for k, um := range g {
			for uk, c := range um {
				if _, err := d.UserKeyCodec.DecodeValue([]byte(uk)); err != nil {
					return fail(i, k, uk, "user key", err)
				}
				v, err := d.Codec.DecodeValue(c.v.([]byte))
				if err != nil {
					return fail(i, k, uk, "value", err)
				}
				todo = append(todo, pending{c: c, v: v})
			}
		}
	}
	for _, p := range todo {
		if p.slot != nil {
			p.slot.v = p.v
		} else {
			p.c.v = p.v
		}
	}
	return nil
}

func codecName(d statebackend.Descriptor, what string) string {
	if what == "user key" {
		return d.UserKeyCodec.ID()
	}
	return d.Codec.ID()
}
