package heap

import (
	"bytes"
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
	if b.kg.Len() > 0 && (!c.KeyGroups.Contains(b.kg.Start) || !c.KeyGroups.Contains(b.kg.End)) {
		return fmt.Errorf("heap state backend: snapshot for key groups %v, but the backend holds %v; the checkpoint was started for another subtask", c.KeyGroups, b.kg)
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
	var parsed []*parsedChunk
	kinds := make(map[string]statebackend.Kind)
	for kg, chunks := range c.State.Keyed {
		if !b.kg.Contains(kg) {
			continue
		}
		for n, data := range chunks {
			p, err := parseChunk(data)
			if err == nil && p.kg != kg {
				err = fmt.Errorf("holds key group %d", p.kg)
			}
			if err != nil {
				return fmt.Errorf("%w: checkpoint %d, key group %d, chunk %d of %d (%d bytes): %v; the checkpoint data is damaged or was not written by the heap state backend",
					statebackend.ErrCorrupt, c.CheckpointID, kg, n+1, len(chunks), len(data), err)
			}
			for _, pt := range p.tables {
				want, ok := kinds[pt.name]
				if !ok {
					if t := b.tables[pt.name]; t != nil {
						want, ok = t.kind, true
					}
				}
				if ok && want != pt.kind {
					return fmt.Errorf("%w: checkpoint %d, key group %d: state %q is %s state there and %s state elsewhere",
						statebackend.ErrConflict, c.CheckpointID, kg, pt.name, pt.kind, want)
				}
				kinds[pt.name] = pt.kind
			}
			parsed = append(parsed, p)
		}
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

type parsedChunk struct {
	kg     int
	tables []parsedTable
	timers []timerID
}

// parseChunk decodes a chunk. Values stay encoded ([]byte in the cells);
// they alias a private copy of data.
func parseChunk(data []byte) (*parsedChunk, error) {
	var h chunkParser
	kg, err := chunk.Parse(bytes.Clone(data), &h)
	if err != nil {
		return nil, err
	}
	h.p.kg = kg
	return &h.p, nil
}

// chunkParser builds a parsedChunk from what chunk.Parse hands it.
type chunkParser struct {
	p  parsedChunk
	um map[string]*cell // the user keys of the current map key
}

var _ chunk.Handler = (*chunkParser)(nil)

func (h *chunkParser) Table(name string, kind statebackend.Kind, keys int) {
	pt := parsedTable{name: name, kind: kind}
	if kind == statebackend.KindMap {
		pt.maps = make(map[string]map[string]*cell, keys)
	} else {
		pt.vals = make([]slot, 0, keys)
	}
	h.p.tables = append(h.p.tables, pt)
}

func (h *chunkParser) Value(key, value []byte) {
	pt := &h.p.tables[len(h.p.tables)-1]
	pt.vals = append(pt.vals, slot{string(key), value})
}

func (h *chunkParser) MapKey(key []byte, userKeys int) {
	h.um = make(map[string]*cell, userKeys)
	h.p.tables[len(h.p.tables)-1].maps[string(key)] = h.um
}

func (h *chunkParser) MapValue(userKey, value []byte) {
	h.um[string(userKey)] = &cell{value}
}

func (h *chunkParser) Timer(ts int64, key []byte) {
	h.p.timers = append(h.p.timers, timerID{ts, string(key)})
}
