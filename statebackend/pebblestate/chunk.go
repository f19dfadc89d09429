package pebblestate

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/cockroachdb/pebble/v2"

	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/stream"
)

// Snapshot chunks use the heap backend's format, version 1 (documented in
// statebackend/heap/chunk.go), so that a full snapshot of either backend
// restores into the other:
//
//	"WKG" 1 | uvarint kg | uvarint #tables | per table: name, kind byte,
//	uvarint #keys, per key: key and value (non-map kinds), or key,
//	uvarint #user keys and per user key: user key and value (KindMap) |
//	uvarint #timers, per timer: zig-zag varint ts and key | CRC-32C (LE)
//
// where name, key, user key and value are uvarint-length-prefixed bytes and
// values are the codec bytes stored in Pebble as they are. The encoder and
// decoder are duplicated here (they are unexported in package heap); the
// differential test checks that the two backends read each other's chunks.

const chunkVersion = 1

var (
	chunkMagic = [3]byte{'W', 'K', 'G'}
	crcTable   = crc32.MakeTable(crc32.Castagnoli)
)

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
		chunk, err := b.encodeKeyGroup(kg)
		if err != nil {
			return err
		}
		if chunk != nil {
			c.WriteKeyGroup(kg, chunk)
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
			tb.body = appendBytes(tb.body, mapKey)
			tb.body = binary.AppendUvarint(tb.body, uint64(mapN))
			tb.body = append(tb.body, mapBuf...)
			tb.n++
		}
		haveKey, mapN, mapBuf = false, 0, mapBuf[:0]
	}
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		if _, ts, key, isTimer := parseTimerKey(k); isTimer {
			timers = binary.AppendVarint(timers, ts)
			timers = appendBytes(timers, key)
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
			mapBuf = appendBytes(mapBuf, uk)
			mapBuf = appendBytes(mapBuf, it.Value())
			mapN++
			continue
		}
		tb.body = appendBytes(tb.body, key)
		tb.body = appendBytes(tb.body, it.Value())
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
	dst = append(dst, chunkMagic[:]...)
	dst = append(dst, chunkVersion)
	dst = binary.AppendUvarint(dst, uint64(kg))
	dst = binary.AppendUvarint(dst, uint64(len(bodies)))
	for _, tb := range bodies {
		dst = appendBytes(dst, []byte(tb.t.name))
		dst = append(dst, byte(tb.t.kind))
		dst = binary.AppendUvarint(dst, uint64(tb.n))
		dst = append(dst, tb.body...)
	}
	dst = binary.AppendUvarint(dst, uint64(nTimers))
	dst = append(dst, timers...)
	return binary.LittleEndian.AppendUint32(dst, crc32.Checksum(dst, crcTable)), nil
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
		for n, chunk := range chunks {
			p, err := parseChunk(chunk)
			if err == nil && p.kg != kg {
				err = fmt.Errorf("holds key group %d", p.kg)
			}
			if err != nil {
				return fmt.Errorf("%w: checkpoint %d, key group %d, chunk %d of %d (%d bytes): %v; the checkpoint data is damaged or was not written by a Weir state backend",
					statebackend.ErrCorrupt, c.CheckpointID, kg, n+1, len(chunks), len(chunk), err)
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
				d.Kind, d.Name, kg, printable(e.key), what, codec.ID(), err)
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

// parseChunk decodes and checks a chunk. The result aliases chunk, which
// it does not modify.
func parseChunk(chunk []byte) (*parsedChunk, error) {
	const header = len(chunkMagic) + 1
	if len(chunk) < header+4 {
		return nil, errors.New("too short for a chunk")
	}
	if [3]byte(chunk[:3]) != chunkMagic {
		return nil, fmt.Errorf("bad magic %q", chunk[:3])
	}
	if v := chunk[3]; v != chunkVersion {
		return nil, fmt.Errorf("format version %d, this build reads version %d; restore with the Weir version that wrote the checkpoint or a newer one", v, chunkVersion)
	}
	body := chunk[:len(chunk)-4]
	if want, got := binary.LittleEndian.Uint32(chunk[len(chunk)-4:]), crc32.Checksum(body, crcTable); want != got {
		return nil, fmt.Errorf("checksum mismatch (stored %08x, computed %08x)", want, got)
	}
	r := reader{buf: body[header:len(body):len(body)]}
	kg := r.count(MaxKeyGroup)
	p := &parsedChunk{kg: kg}
	nt := r.count(r.left())
	for range nt {
		if r.err != nil {
			break
		}
		pt := parsedTable{name: string(r.bytes())}
		pt.kind = statebackend.Kind(r.byte())
		if r.err == nil && !pt.kind.Valid() {
			r.fail(fmt.Errorf("table %q: unknown kind %d", pt.name, pt.kind))
		}
		nk := r.count(r.left())
		for range nk {
			if r.err != nil {
				break
			}
			k := r.bytes()
			if pt.kind != statebackend.KindMap {
				v := r.bytes()
				pt.entries = append(pt.entries, parsedEntry{key: k, v: v})
				continue
			}
			nu := r.count(r.left())
			if nu == 0 && r.err == nil {
				r.fail(fmt.Errorf("table %q: key %s without user keys", pt.name, printable(k)))
			}
			for range nu {
				uk := r.bytes()
				v := r.bytes()
				if r.err != nil {
					break
				}
				pt.entries = append(pt.entries, parsedEntry{key: k, uk: uk, v: v})
			}
		}
		p.tables = append(p.tables, pt)
	}
	ntm := r.count(r.left())
	for range ntm {
		ts := r.varint()
		k := r.bytes()
		if r.err != nil {
			break
		}
		p.timers = append(p.timers, parsedTimer{ts, k})
	}
	if r.err == nil && r.left() != 0 {
		r.fail(fmt.Errorf("%d unexpected bytes after the timers", r.left()))
	}
	if r.err != nil {
		return nil, r.err
	}
	return p, nil
}

// reader decodes length-prefixed fields; after the first error every read
// returns zero values and err keeps that error.
type reader struct {
	buf []byte
	pos int
	err error
}

func (r *reader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

func (r *reader) left() int { return len(r.buf) - r.pos }

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.buf[r.pos:])
	if n <= 0 {
		r.fail(fmt.Errorf("bad varint at byte %d", r.pos))
		return 0
	}
	r.pos += n
	return v
}

func (r *reader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.buf[r.pos:])
	if n <= 0 {
		r.fail(fmt.Errorf("bad varint at byte %d", r.pos))
		return 0
	}
	r.pos += n
	return v
}

// count reads a count of at most limit (each counted item takes at least a
// byte), so that a damaged count cannot make the decoder allocate a lot.
func (r *reader) count(limit int) int {
	v := r.uvarint()
	if r.err == nil && v > uint64(limit) {
		r.fail(fmt.Errorf("count %d at byte %d exceeds %d", v, r.pos, limit))
		return 0
	}
	return int(v)
}

func (r *reader) byte() byte {
	if r.err != nil {
		return 0
	}
	if r.pos >= len(r.buf) {
		r.fail(errors.New("truncated"))
		return 0
	}
	r.pos++
	return r.buf[r.pos-1]
}

// bytes reads a length-prefixed field; the result aliases buf, with its
// capacity cut.
func (r *reader) bytes() []byte {
	n := r.uvarint()
	if r.err != nil {
		return nil
	}
	if n > uint64(r.left()) {
		r.fail(fmt.Errorf("field of %d bytes at byte %d exceeds the %d bytes left", n, r.pos, r.left()))
		return nil
	}
	s := r.buf[r.pos : r.pos+int(n) : r.pos+int(n)]
	r.pos += int(n)
	return s
}
