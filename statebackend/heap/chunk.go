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
	nt, n := 0, 0
	for _, t := range tables {
		if l := t.len(i); l > 0 {
			nt++
			n += l
		}
	}
	timers := b.timers.sets[i]
	if nt == 0 && len(timers) == 0 {
		return nil, 0, 0, nil
	}
	// Size the chunk from the average key and value sizes, so that it is
	// rarely grown (and copied).
	perEntry := int64(4 + max(b.avgValue, 8))
	if b.entries > 0 {
		perEntry += b.keyBytes / b.entries
	}
	dst := make([]byte, 0, 64+int64(n)*perEntry+int64(len(timers))*24)
	dst = chunk.AppendHeader(dst, b.kg.Start+i, nt)
	for _, t := range tables {
		n := t.len(i)
		if n == 0 {
			continue
		}
		dst = chunk.AppendTable(dst, t.d.Name, t.kind, n)
		if t.maps != nil {
			for k, um := range t.maps[i] {
				dst = chunk.AppendField(dst, k)
				dst = chunk.AppendCount(dst, len(um))
				for uk, c := range um {
					dst = chunk.AppendField(dst, uk)
					at := len(dst)
					if dst, err = t.appendValue(dst, c.v); err != nil {
						return nil, 0, 0, t.encodeError(i, k, err)
					}
					values++
					valueBytes += int64(len(dst) - at)
				}
			}
			continue
		}
		for j := range t.vals[i].slots {
			sl := &t.vals[i].slots[j]
			dst = chunk.AppendField(dst, sl.key)
			at := len(dst)
			if dst, err = t.appendValue(dst, sl.v); err != nil {
				return nil, 0, 0, t.encodeError(i, sl.key, err)
			}
			values++
			valueBytes += int64(len(dst) - at)
		}
	}
	dst = chunk.AppendCount(dst, len(timers))
	for id := range timers {
		dst = chunk.AppendTimer(dst, id.ts, id.key)
	}
	return chunk.AppendChecksum(dst), values, valueBytes, nil
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

// len returns the number of keys with state in key group index i.
func (t *table) len(i int) int {
	if t.maps != nil {
		return len(t.maps[i])
	}
	return t.vals[i].len()
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
			if t == nil || !t.registered {
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
				return fmt.Errorf("%w: checkpoint %d: %v", statebackend.ErrCorrupt, c.CheckpointID, err)
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
		b.timers.add(i, id)
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
	kg     int
	tables []parsedTable
	timers []timerID
	um     map[string]*cell // while parsing: the current map key's user keys
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
