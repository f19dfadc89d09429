package heap

import (
	"fmt"

	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/statebackend/internal/chunk"
	"github.com/weirstream/weir/stream"
)

// Snapshot chunks are in the format of package statebackend/internal/chunk,
// shared with the Pebble backend so that snapshots of either restore into
// the other. This file walks the heap's tables to write and apply them.

// Snapshot implements statebackend.Backend. It runs in the checkpoint's
// synchronous phase and takes time linear in the state: it encodes every
// non-empty key group into a new chunk, so nothing in c aliases live state.
func (b *Backend) Snapshot(c *stream.SnapshotContext) error {
	if b.closed {
		return statebackend.ErrClosed
	}
	if err := chunk.CheckSnapshot(c, b.kg); err != nil {
		return fmt.Errorf("heap state backend: %w", err)
	}
	tables := b.sortedTables()
	for _, t := range tables {
		if t.hosted != nil {
			t.hosted.BeginSnapshot()
			defer t.hosted.EndSnapshot()
		}
	}
	var valueBytes, values int64
	for i := range b.kg.Len() {
		data, nv, vb, err := b.encodeKeyGroup(tables, i)
		if err != nil {
			return err
		}
		if data != nil {
			c.WriteKeyGroup(b.kg.Start+i, data)
		}
		values += nv
		valueBytes += vb
	}
	if values > 0 {
		b.avgValue = valueBytes / values
	}
	return nil
}

// encodeKeyGroup returns the chunk of key group index i (nil if the key
// group is empty), and the number and encoded size of its values.
func (b *Backend) encodeKeyGroup(tables []*table, i int) (data []byte, values, valueBytes int64, err error) {
	views := make([]tableView, 0, len(tables))
	n := 0
	var hosted []*table // with slots in this key group
	for _, t := range tables {
		if t.hosted != nil {
			if ids := t.hosted.GroupSlots(b.kg.Start + i); len(ids) > 0 {
				hosted = append(hosted, t)
				n += len(ids)
			}
			continue
		}
		if v := t.snapshotView(i); v.len() > 0 {
			views = append(views, v)
			n += v.len()
		}
	}
	timers, ptimers := b.timers.event.sets[i], b.timers.proc.sets[i]
	if len(views) == 0 && len(hosted) == 0 && len(timers) == 0 && len(ptimers) == 0 {
		return nil, 0, 0, nil
	}
	// Size the chunk from the average key and value sizes, so that it is
	// rarely grown (and copied).
	perEntry := int64(4 + max(b.avgValue, 8))
	if b.entries > 0 {
		perEntry += b.keyBytes / b.entries
	}
	dst := make([]byte, 0, 64+int64(n)*perEntry+int64(len(timers)+len(ptimers))*24)
	dst = chunk.AppendHeader(dst, b.kg.Start+i, len(views)+len(hosted), len(ptimers))
	// appendValue appends a value (of a map table: with its user key).
	appendValue := func(t *table, key, userKey string, v any) error {
		if t.maps != nil {
			dst = chunk.AppendField(dst, userKey)
		}
		at := len(dst)
		var err error
		if dst, err = t.appendValue(dst, v); err != nil {
			return t.encodeError(i, key, err)
		}
		values++
		valueBytes += int64(len(dst) - at)
		return nil
	}
	for _, v := range views {
		t := v.t
		dst = chunk.AppendTable(dst, t.d.Name, t.kind, v.len())
		switch {
		case t.maps == nil:
			for j := range v.vals {
				sl := &v.vals[j]
				dst = chunk.AppendField(dst, sl.key)
				if err := appendValue(t, sl.key, "", sl.v); err != nil {
					return nil, 0, 0, err
				}
			}
		case v.filtered:
			uks := v.uks
			for _, r := range v.runs {
				dst = chunk.AppendField(dst, r.key)
				dst = chunk.AppendCount(dst, r.n)
				for _, u := range uks[:r.n] {
					if err := appendValue(t, r.key, u.key, u.v); err != nil {
						return nil, 0, 0, err
					}
				}
				uks = uks[r.n:]
			}
		default:
			for k, um := range v.maps {
				dst = chunk.AppendField(dst, k)
				dst = chunk.AppendCount(dst, len(um))
				for uk, c := range um {
					if err := appendValue(t, k, uk, c.v); err != nil {
						return nil, 0, 0, err
					}
				}
			}
		}
	}
	for _, t := range hosted {
		var nv, vb int64
		if dst, nv, vb, err = t.appendHosted(dst, b.kg.Start+i, t.hosted.GroupSlots(b.kg.Start+i)); err != nil {
			return nil, 0, 0, err
		}
		values += nv
		valueBytes += vb
	}
	dst = appendTimers(dst, timers)
	if len(ptimers) > 0 {
		dst = appendTimers(dst, ptimers)
	}
	return chunk.AppendChecksum(dst), values, valueBytes, nil
}

// appendTimers appends a chunk's timer section: the count and the timers.
func appendTimers(dst []byte, timers map[timerID]struct{}) []byte {
	dst = chunk.AppendCount(dst, len(timers))
	for id := range timers {
		dst = chunk.AppendTimer(dst, id.ts, id.key)
	}
	return dst
}

// tableView is what a snapshot writes of one table in one key group: the
// live entries, or, for a table whose descriptor has a SnapshotFilter,
// what the filter keeps of them. The filter is called once per value, so
// that the counts written ahead of the entries match the entries.
type tableView struct {
	t        *table
	vals     []slot                      // non-map tables
	maps     map[string]map[string]*cell // KindMap without a filter
	filtered bool                        // KindMap with a filter: runs and uks
	runs     []keyRun                    // keys, each with its n user keys in uks
	uks      []slot                      // user keys and values, key by key
}

type keyRun struct {
	key string
	n   int
}

func (v tableView) len() int {
	switch {
	case v.t.maps == nil:
		return len(v.vals)
	case v.filtered:
		return len(v.runs)
	}
	return len(v.maps)
}

// snapshotView returns the view of key group index i. Without a filter it
// is the live state; with one, a copy of what the filter keeps.
func (t *table) snapshotView(i int) tableView {
	f := t.d.SnapshotFilter
	if f == nil || !t.registered {
		if t.maps != nil {
			return tableView{t: t, maps: t.maps[i]}
		}
		return tableView{t: t, vals: t.vals[i].slots}
	}
	v := tableView{t: t}
	if t.maps == nil {
		live := t.vals[i].slots
		if len(live) > 0 {
			v.vals = make([]slot, 0, len(live))
		}
		for j := range live {
			if kept, ok := f(live[j].v); ok {
				v.vals = append(v.vals, slot{live[j].key, kept})
			}
		}
		return v
	}
	v.filtered = true
	for k, um := range t.maps[i] {
		n := 0
		for uk, c := range um {
			if kept, ok := f(c.v); ok {
				v.uks = append(v.uks, slot{uk, kept})
				n++
			}
		}
		if n > 0 {
			v.runs = append(v.runs, keyRun{k, n})
		}
	}
	return v
}

// appendValue appends c's value with a length prefix: encoded with the
// table's codec, or as is if the table has not been asked for since a
// restore.
func (t *table) appendValue(dst []byte, v any) ([]byte, error) {
	at := len(dst)
	dst = append(dst, 0)
	if !t.registered {
		dst = append(dst, v.([]byte)...)
	} else {
		var err error
		dst, err = t.d.Codec.AppendValue(dst, v)
		if err != nil {
			return dst, err
		}
	}
	return statebackend.FixLengthPrefix(dst, at), nil
}

func (t *table) encodeError(i int, key string, err error) error {
	return fmt.Errorf("heap state backend: snapshot of %s state %q, key group %d, key %s: %w",
		t.kind, t.d.Name, t.b.kg.Start+i, chunk.Printable(key), err)
}

// Restore implements statebackend.Backend. It decodes and checks every chunk
// of the backend's key groups before it changes anything.
func (b *Backend) Restore(c *stream.RestoreContext) error {
	if b.closed {
		return statebackend.ErrClosed
	}
	if c.State == nil {
		return nil
	}
	parsed, err := chunk.ParseAll(c, chunk.Owner{KeyGroups: b.kg, Kind: b.tableKind, KeepsBytes: true}, newParsedChunk)
	if err != nil {
		return err
	}
	// Tables asked for before Restore get decoded values now.
	for _, p := range parsed {
		for _, pt := range p.tables {
			t := b.tables[pt.name]
			if t == nil || !t.registered || t.hosted != nil {
				continue
			}
			raw := &table{b: b, kind: pt.kind, vals: make([]slab, b.kg.Len())}
			if pt.kind == statebackend.KindMap {
				raw.vals, raw.maps = nil, make([]map[string]map[string]*cell, b.kg.Len())
				raw.maps[p.kg-b.kg.Start] = pt.maps
			} else {
				raw.vals[p.kg-b.kg.Start].slots = pt.vals
			}
			if err := raw.decodeRaw(t.d); err != nil {
				return fmt.Errorf("%w: checkpoint %d: %w", statebackend.ErrCorrupt, c.CheckpointID, err)
			}
		}
	}
	// Hosted tables get their slots (decoded) now too.
	for _, p := range parsed {
		for _, pt := range p.tables {
			t := b.tables[pt.name]
			if t == nil || t.hosted == nil {
				continue
			}
			if pt.kind != statebackend.KindValue {
				return fmt.Errorf("%w: checkpoint %d: state %q was written as %s state and is slot state (value) here", statebackend.ErrConflict, c.CheckpointID, pt.name, pt.kind)
			}
			if err := t.loadGroup(p.kg, pt.vals); err != nil {
				return err
			}
		}
	}
	for _, p := range parsed {
		b.apply(p)
	}
	b.timers.rebuild()
	return nil
}

// apply merges a checked chunk into the backend.
func (b *Backend) apply(p *parsedChunk) {
	i := p.kg - b.kg.Start
	for _, pt := range p.tables {
		t := b.tables[pt.name]
		if t != nil && t.hosted != nil {
			continue // loaded by Restore
		}
		if t == nil {
			t = b.newTable(pt.name, pt.kind)
			b.tables[pt.name] = t
		}
		if pt.kind == statebackend.KindMap {
			g := t.maps[i]
			if g == nil {
				g = make(map[string]map[string]*cell, len(pt.maps))
				t.maps[i] = g
			}
			for k, um := range pt.maps {
				dst, ok := g[k]
				if !ok {
					dst = make(map[string]*cell, len(um))
					g[k] = dst
					b.entries++
					b.keyBytes += int64(len(k))
				}
				for uk, c := range um {
					if _, ok := dst[uk]; !ok {
						b.entries++
						b.keyBytes += int64(len(uk))
					}
					dst[uk] = c
				}
			}
			continue
		}
		g := &t.vals[i]
		if g.index == nil {
			g.index = make(map[string]int32, len(pt.vals))
			g.slots = make([]slot, 0, len(pt.vals))
		}
		for _, sl := range pt.vals {
			if g.set(sl.key, sl.v) {
				b.entries++
				b.keyBytes += int64(len(sl.key))
			}
		}
	}
	for _, id := range p.timers {
		b.timers.event.add(i, id)
	}
	for _, id := range p.ptimers {
		b.timers.proc.add(i, id)
	}
}

type parsedTable struct {
	name string
	kind statebackend.Kind
	vals []slot                      // raw []byte values; keys may repeat
	maps map[string]map[string]*cell // KindMap
}

// parsedChunk is a chunk decoded by chunk.Parse, which it receives as a
// chunk.Handler. Values stay encoded ([]byte in the cells).
type parsedChunk struct {
	kg      int
	tables  []parsedTable
	timers  []timerID        // event time
	ptimers []timerID        // processing time
	um      map[string]*cell // while parsing: the current map key's user keys
}

var _ chunk.Handler = (*parsedChunk)(nil)

func newParsedChunk() *parsedChunk { return &parsedChunk{} }

// tableKind returns the kind of table name, if the backend holds it.
func (b *Backend) tableKind(name string) (statebackend.Kind, bool) {
	if t := b.tables[name]; t != nil {
		return t.kind, true
	}
	return 0, false
}

func (p *parsedChunk) KeyGroup(kg int) { p.kg = kg }

func (p *parsedChunk) Table(name string, kind statebackend.Kind, keys int) {
	pt := parsedTable{name: name, kind: kind}
	if kind == statebackend.KindMap {
		pt.maps = make(map[string]map[string]*cell, keys)
	} else {
		pt.vals = make([]slot, 0, keys)
	}
	p.tables = append(p.tables, pt)
}

func (p *parsedChunk) Value(key, value []byte) {
	pt := &p.tables[len(p.tables)-1]
	pt.vals = append(pt.vals, slot{string(key), value})
}

func (p *parsedChunk) MapKey(key []byte, userKeys int) {
	p.um = make(map[string]*cell, userKeys)
	p.tables[len(p.tables)-1].maps[string(key)] = p.um
}

func (p *parsedChunk) MapValue(userKey, value []byte) {
	p.um[string(userKey)] = &cell{value}
}

func (p *parsedChunk) Timer(ts int64, key []byte) {
	p.timers = append(p.timers, timerID{ts, string(key)})
}

func (p *parsedChunk) ProcessingTimer(ts int64, key []byte) {
	p.ptimers = append(p.ptimers, timerID{ts, string(key)})
}
