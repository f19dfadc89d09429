package pebblestate

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/statebackend/internal/chunk"
	"github.com/weirstream/weir/stream"
)

// Snapshot chunks are in the format of package statebackend/internal/chunk,
// shared with the heap backend so that a full snapshot of either backend
// restores into the other; values are the codec bytes stored in Pebble as
// they are. This file walks a key group's key range to write chunks and
// writes parsed chunks back.

// Snapshot implements statebackend.Backend: it commits buffered writes and
// encodes every non-empty key group into a chunk by iterating its key range
// (timers first, then one table after the other). It takes time linear in
// the state; Checkpoint is the incremental alternative.
func (b *Backend) Snapshot(c *stream.SnapshotContext) error {
	if b.closed {
		return statebackend.ErrClosed
	}
	if b.kg.Len() > 0 && (!c.KeyGroups.Contains(b.kg.Start) || !c.KeyGroups.Contains(b.kg.End)) {
		return fmt.Errorf("pebble state backend: snapshot for key groups %v, but the backend holds %v; the checkpoint was started for another subtask", c.KeyGroups, b.kg)
	}
	if err := b.commit(); err != nil {
		return err
	}
	for kg := b.kg.Start; kg <= b.kg.End; kg++ {
		data, err := b.encodeKeyGroup(kg)
		if err != nil {
			return err
		}
		if data != nil {
			c.WriteKeyGroup(kg, data)
		}
	}
	return nil
}

// tableBody is one table's part of a chunk being encoded.
type tableBody struct {
	t    *table
	n    int // keys
	body []byte
}

func (b *Backend) encodeKeyGroup(kg int) ([]byte, error) {
	it, err := b.db.NewIter(&pebble.IterOptions{LowerBound: kgPrefix(kg), UpperBound: kgPrefix(kg + 1)})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var (
		timers  []byte
		nTimers int
		bodies  []tableBody
		curID   uint64
		// The map key being collected, its user-key count and entries.
		mapKey  []byte
		mapN    int
		mapBuf  []byte
		haveKey bool
	)
	flushMap := func() {
		if haveKey {
			tb := &bodies[len(bodies)-1]
			tb.body = chunk.AppendField(tb.body, mapKey)
			tb.body = chunk.AppendCount(tb.body, mapN)
			tb.body = append(tb.body, mapBuf...)
			tb.n++
		}
		haveKey, mapN, mapBuf = false, 0, mapBuf[:0]
	}
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		if _, ts, key, isTimer := parseTimerKey(k); isTimer {
			timers = chunk.AppendTimer(timers, ts, key)
			nTimers++
			continue
		}
		id, w := binary.Uvarint(k[2:])
		if id != curID {
			flushMap()
			t := b.byID[id]
			if w <= 0 || t == nil {
				return nil, fmt.Errorf("%w: pebble state backend: key group %d: key %x of no known table", statebackend.ErrCorrupt, kg, k)
			}
			curID = id
			bodies = append(bodies, tableBody{t: t})
		}
		key, uk, good := parseStateKey(k[2+w:])
		if !good {
			return nil, fmt.Errorf("%w: pebble state backend: key group %d: bad key %x", statebackend.ErrCorrupt, kg, k)
		}
		tb := &bodies[len(bodies)-1]
		if tb.t.kind == statebackend.KindMap {
			if !haveKey || !bytes.Equal(key, mapKey) {
				flushMap()
				mapKey, haveKey = append(mapKey[:0], key...), true
			}
			mapBuf = chunk.AppendField(mapBuf, uk)
			mapBuf = chunk.AppendField(mapBuf, it.Value())
			mapN++
			continue
		}
		tb.body = chunk.AppendField(tb.body, key)
		tb.body = chunk.AppendField(tb.body, it.Value())
		tb.n++
	}
	flushMap()
	if err := it.Error(); err != nil {
		return nil, fmt.Errorf("pebble state backend: snapshot of key group %d: %w", kg, err)
	}
	if len(bodies) == 0 && nTimers == 0 {
		return nil, nil
	}
	size := 16 + len(timers)
	for _, tb := range bodies {
		size += len(tb.t.name) + len(tb.body) + 16
	}
	dst := make([]byte, 0, size)
	dst = chunk.AppendHeader(dst, kg, len(bodies))
	for _, tb := range bodies {
		dst = chunk.AppendTable(dst, tb.t.name, tb.t.kind, tb.n)
		dst = append(dst, tb.body...)
	}
	dst = chunk.AppendCount(dst, nTimers)
	dst = append(dst, timers...)
	return chunk.AppendChecksum(dst), nil
}

// Restore implements statebackend.Backend. It decodes and checks every chunk
// of the backend's key groups (and, for tables already asked for, every
// value with their codecs) before it writes anything.
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
				return fmt.Errorf("%w: checkpoint %d, key group %d, chunk %d of %d (%d bytes): %v; the checkpoint data is damaged or was not written by a Weir state backend",
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
				if t := b.tables[pt.name]; t != nil && t.registered {
					if err := checkDecodes(t.d, kg, pt); err != nil {
						return fmt.Errorf("%w: checkpoint %d: %v", statebackend.ErrCorrupt, c.CheckpointID, err)
					}
				}
			}
			parsed = append(parsed, p)
		}
	}
	empty := make([]bool, b.kg.Len())
	for i := range empty {
		empty[i] = b.sizes[i] == 0 && len(c.State.Keyed[b.kg.Start+i]) == 1
	}
	for _, p := range parsed {
		b.applyChunk(p, empty[p.kg-b.kg.Start])
	}
	return b.commit()
}

// applyChunk writes a checked chunk. fresh says that the key group was empty
// and this is its only chunk, so no key can exist yet.
func (b *Backend) applyChunk(p *parsedChunk, fresh bool) {
	b.probe.ok = false
	old := func(k []byte) int {
		if fresh {
			return -1
		}
		return b.oldLen(k)
	}
	for _, pt := range p.tables {
		t := b.tables[pt.name]
		if t == nil {
			t = b.addTable(pt.name, pt.kind)
			b.saveTable(t)
		} else if !t.registered && t.codecID != "" {
			t.codecID, t.ukCodecID = "", "" // written with unknown codecs now
			b.saveTable(t)
		}
		for _, e := range pt.entries {
			k := appendStateKey(b.kbuf[:0], p.kg, t.id, e.key)
			k = append(k, e.uk...)
			b.kbuf = k
			b.set(k, e.v, old(k))
		}
	}
	i := p.kg - b.kg.Start
	for _, tm := range p.timers {
		k := appendTimerKey(b.kbuf[:0], p.kg, tm.ts, tm.key)
		b.kbuf = k
		b.set(k, nil, old(k))
		b.timers.lower(i, tm.ts, k)
	}
}

// checkDecodes checks that a chunk's values decode with d's codecs.
func checkDecodes(d statebackend.Descriptor, kg int, pt parsedTable) error {
	for _, e := range pt.entries {
		what, codec := "value", d.Codec
		var err error
		if d.Kind == statebackend.KindMap {
			if _, err = d.UserKeyCodec.DecodeValue(e.uk); err != nil {
				what, codec = "user key", d.UserKeyCodec
			}
		}
		if err == nil {
			_, err = d.Codec.DecodeValue(e.v)
		}
		if err != nil {
			return fmt.Errorf("pebble state backend: restored %s state %q, key group %d, key %s: %s does not decode with codec %s: %w",
				d.Kind, d.Name, kg, chunk.Printable(e.key), what, codec.ID(), err)
		}
	}
	return nil
}

type parsedEntry struct{ key, uk, v []byte }

type parsedTable struct {
	name    string
	kind    statebackend.Kind
	entries []parsedEntry
}

type parsedTimer struct {
	ts  int64
	key []byte
}

type parsedChunk struct {
	kg     int
	tables []parsedTable
	timers []parsedTimer
}

// parseChunk decodes and checks a chunk. The result aliases data, which it
// does not modify.
func parseChunk(data []byte) (*parsedChunk, error) {
	var h chunkParser
	kg, err := chunk.Parse(data, &h)
	if err != nil {
		return nil, err
	}
	h.p.kg = kg
	return &h.p, nil
}

// chunkParser builds a parsedChunk from what chunk.Parse hands it.
type chunkParser struct {
	p   parsedChunk
	key []byte // the current map key
}

var _ chunk.Handler = (*chunkParser)(nil)

func (h *chunkParser) Table(name string, kind statebackend.Kind, _ int) {
	h.p.tables = append(h.p.tables, parsedTable{name: name, kind: kind})
}

func (h *chunkParser) Value(key, value []byte) {
	pt := &h.p.tables[len(h.p.tables)-1]
	pt.entries = append(pt.entries, parsedEntry{key: key, v: value})
}

func (h *chunkParser) MapKey(key []byte, _ int) { h.key = key }

func (h *chunkParser) MapValue(userKey, value []byte) {
	pt := &h.p.tables[len(h.p.tables)-1]
	pt.entries = append(pt.entries, parsedEntry{key: h.key, uk: userKey, v: value})
}

func (h *chunkParser) Timer(ts int64, key []byte) {
	h.p.timers = append(h.p.timers, parsedTimer{ts, key})
}
