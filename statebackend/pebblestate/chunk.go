package pebblestate

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"

	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/statebackend/internal/chunk"
	"github.com/weirstream/weir/stream"
)

// Snapshot chunks are in the format of package statebackend/internal/chunk,
// shared with the heap backend so that a full snapshot of either backend
// restores into the other; values are the codec bytes stored in Pebble as
// they are, or as a table's SnapshotFilter changes them (filter.go). This
// file walks a key group's key range to write chunks and writes parsed
// chunks back.

// Snapshot implements statebackend.Backend: it commits buffered writes and
// encodes every non-empty key group into a chunk by iterating its key range
// (timers and tables in key order), leaving out what the
// SnapshotFilter of a table drops. It takes time linear in the state;
// Checkpoint is the incremental alternative.
func (b *Backend) Snapshot(c *stream.SnapshotContext) error {
	if b.closed {
		return statebackend.ErrClosed
	}
	if err := chunk.CheckSnapshot(c, b.kg); err != nil {
		return fmt.Errorf("pebble state backend: %w", err)
	}
	b.flush()
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
		timers  [2][]byte // event time, processing time
		nTimers [2]int
		bodies  []tableBody
		curID   uint64
		// The map key being collected, its user-key count and entries.
		mapKey  []byte
		mapN    int
		mapBuf  []byte
		haveKey bool
		fbuf    []byte // a value changed by a SnapshotFilter
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
		if d, _, ts, key, isTimer := parseTimerKey(k); isTimer {
			j := 0
			if d.proc {
				j = 1
			}
			timers[j] = chunk.AppendTimer(timers[j], ts, key)
			nTimers[j]++
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
			return nil, fmt.Errorf("%w: pebble state backend: key group %d: a key of %d bytes does not parse as a state key", statebackend.ErrCorrupt, kg, len(k))
		}
		tb := &bodies[len(bodies)-1]
		v, keep, err := tb.t.snapshotValue(key, it.Value(), &fbuf)
		if err != nil {
			return nil, err
		}
		if !keep {
			continue
		}
		if tb.t.kind == statebackend.KindMap {
			if !haveKey || !bytes.Equal(key, mapKey) {
				flushMap()
				mapKey, haveKey = append(mapKey[:0], key...), true
			}
			mapBuf = chunk.AppendField(mapBuf, uk)
			mapBuf = chunk.AppendField(mapBuf, v)
			mapN++
			continue
		}
		tb.body = chunk.AppendField(tb.body, key)
		tb.body = chunk.AppendField(tb.body, v)
		tb.n++
	}
	flushMap()
	if err := it.Error(); err != nil {
		return nil, fmt.Errorf("pebble state backend: snapshot of key group %d: %w", kg, err)
	}
	// Tables whose every value a SnapshotFilter dropped.
	bodies = slices.DeleteFunc(bodies, func(tb tableBody) bool { return tb.n == 0 })
	if len(bodies) == 0 && nTimers[0] == 0 && nTimers[1] == 0 {
		return nil, nil
	}
	size := 24 + len(timers[0]) + len(timers[1])
	for _, tb := range bodies {
		size += len(tb.t.name) + len(tb.body) + 16
	}
	dst := make([]byte, 0, size)
	dst = chunk.AppendHeader(dst, kg, len(bodies), nTimers[1])
	for _, tb := range bodies {
		dst = chunk.AppendTable(dst, tb.t.name, tb.t.kind, tb.n)
		dst = append(dst, tb.body...)
	}
	dst = chunk.AppendCount(dst, nTimers[0])
	dst = append(dst, timers[0]...)
	if nTimers[1] > 0 {
		dst = chunk.AppendCount(dst, nTimers[1])
		dst = append(dst, timers[1]...)
	}
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
	parsed, err := chunk.ParseAll(c, chunk.Owner{KeyGroups: b.kg, Kind: b.tableKind}, newParsedChunk)
	if err != nil {
		return err
	}
	for _, p := range parsed {
		for _, pt := range p.tables {
			if t := b.tables[pt.name]; t != nil && t.registered {
				if err := checkDecodes(t.d, p.kg, pt); err != nil {
					return fmt.Errorf("%w: checkpoint %d: %v", statebackend.ErrCorrupt, c.CheckpointID, err)
				}
			}
		}
	}
	empty := make([]bool, b.kg.Len())
	for i := range empty {
		empty[i] = b.sizes[i] == 0 && len(c.State.Keyed[b.kg.Start+i]) == 1
	}
	b.dropCache()
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
	b.applyTimers(&b.timers.event, p.kg, p.timers, old)
	if len(p.ptimers) > 0 {
		b.holdProcTimers()
		b.applyTimers(&b.timers.proc, p.kg, p.ptimers, old)
	}
}

// applyTimers writes restored timers of key group kg into q's domain; old
// returns the value length of a key (-1: none).
func (b *Backend) applyTimers(q *timerQueue, kg int, timers []parsedTimer, old func([]byte) int) {
	for _, tm := range timers {
		k := q.dom.appendKey(b.kbuf[:0], kg, tm.ts, tm.key)
		b.kbuf = k
		b.set(k, nil, old(k))
		q.lower(kg-b.kg.Start, tm.ts, k)
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

// parsedChunk is a chunk decoded by chunk.Parse, which it receives as a
// chunk.Handler. It aliases the chunk.
type parsedChunk struct {
	kg      int
	tables  []parsedTable
	timers  []parsedTimer // event time
	ptimers []parsedTimer // processing time
	key     []byte        // while parsing: the current map key
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

func (p *parsedChunk) Table(name string, kind statebackend.Kind, _ int) {
	p.tables = append(p.tables, parsedTable{name: name, kind: kind})
}

func (p *parsedChunk) Value(key, value []byte) {
	pt := &p.tables[len(p.tables)-1]
	pt.entries = append(pt.entries, parsedEntry{key: key, v: value})
}

func (p *parsedChunk) MapKey(key []byte, _ int) { p.key = key }

func (p *parsedChunk) MapValue(userKey, value []byte) {
	pt := &p.tables[len(p.tables)-1]
	pt.entries = append(pt.entries, parsedEntry{key: p.key, uk: userKey, v: value})
}

func (p *parsedChunk) Timer(ts int64, key []byte) {
	p.timers = append(p.timers, parsedTimer{ts, key})
}

func (p *parsedChunk) ProcessingTimer(ts int64, key []byte) {
	p.ptimers = append(p.ptimers, parsedTimer{ts, key})
}
