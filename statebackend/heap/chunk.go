package heap

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/stream"
)

// A snapshot chunk holds the state of exactly one key group, so that chunks
// can be handed to whichever subtask owns the key group after rescaling. The
// format (version 1), with uvarint lengths and counts:
//
//	magic    "WKG" and the version byte 1
//	kg       uvarint: the key group
//	tables   uvarint count, then per table:
//	           name (length, bytes), kind (one byte, statebackend.Kind),
//	           key count, then per key: key (length, bytes) and
//	             value (length, codec bytes)             for non-map kinds
//	             user-key count, then per user key:      for KindMap
//	               user key (length, bytes), value (length, codec bytes)
//	timers   uvarint count, then per timer: timestamp (zig-zag varint),
//	         key (length, bytes)
//	crc      CRC-32C (Castagnoli) of everything before it, 4 bytes little
//	         endian
//
// Decoding checks the magic, the version, every length against the bytes
// left, the kinds, that nothing follows the timers, and the checksum, so a
// damaged chunk is an error, not a panic or wrong state.

const chunkVersion = 1

var chunkMagic = [3]byte{'W', 'K', 'G'}

var crcTable = crc32.MakeTable(crc32.Castagnoli)

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
		chunk, nv, vb, err := b.encodeKeyGroup(tables, i)
		if err != nil {
			return err
		}
		if chunk != nil {
			c.WriteKeyGroup(b.kg.Start+i, chunk)
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
func (b *Backend) encodeKeyGroup(tables []*table, i int) (chunk []byte, values, valueBytes int64, err error) {
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
	dst = append(dst, chunkMagic[:]...)
	dst = append(dst, chunkVersion)
	dst = binary.AppendUvarint(dst, uint64(b.kg.Start+i))
	dst = binary.AppendUvarint(dst, uint64(nt))
	for _, t := range tables {
		n := t.len(i)
		if n == 0 {
			continue
		}
		dst = appendString(dst, t.d.Name)
		dst = append(dst, byte(t.kind))
		dst = binary.AppendUvarint(dst, uint64(n))
		if t.maps != nil {
			for k, um := range t.maps[i] {
				dst = appendString(dst, k)
				dst = binary.AppendUvarint(dst, uint64(len(um)))
				for uk, c := range um {
					dst = appendString(dst, uk)
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
			dst = appendString(dst, sl.key)
			at := len(dst)
			if dst, err = t.appendValue(dst, sl.v); err != nil {
				return nil, 0, 0, t.encodeError(i, sl.key, err)
			}
			values++
			valueBytes += int64(len(dst) - at)
		}
	}
	dst = binary.AppendUvarint(dst, uint64(len(timers)))
	for id := range timers {
		dst = binary.AppendVarint(dst, id.ts)
		dst = appendString(dst, id.key)
	}
	dst = binary.LittleEndian.AppendUint32(dst, crc32.Checksum(dst, crcTable))
	return dst, values, valueBytes, nil
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
		t.kind, t.d.Name, t.b.kg.Start+i, printable(key), err)
}

// len returns the number of keys with state in key group index i.
func (t *table) len(i int) int {
	if t.maps != nil {
		return len(t.maps[i])
	}
	return t.vals[i].len()
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
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
		for n, chunk := range chunks {
			p, err := parseChunk(chunk)
			if err == nil && p.kg != kg {
				err = fmt.Errorf("holds key group %d", p.kg)
			}
			if err != nil {
				return fmt.Errorf("%w: checkpoint %d, key group %d, chunk %d of %d (%d bytes): %v; the checkpoint data is damaged or was not written by the heap state backend",
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
// they alias a private copy of chunk.
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
	r := reader{buf: append([]byte(nil), body[header:]...)}
	p := &parsedChunk{kg: int(r.count(1 << 30))}
	nt := r.count(len(r.buf))
	for range nt {
		if r.err != nil {
			break
		}
		pt := parsedTable{name: string(r.bytes())}
		kind := statebackend.Kind(r.byte())
		if r.err == nil && !kind.Valid() {
			r.fail(fmt.Errorf("table %q: unknown kind %d", pt.name, kind))
		}
		pt.kind = kind
		nk := r.count(len(r.buf) - r.pos)
		if kind == statebackend.KindMap {
			pt.maps = make(map[string]map[string]*cell, nk)
			for range nk {
				k := string(r.bytes())
				nu := r.count(len(r.buf) - r.pos)
				if r.err != nil {
					break
				}
				um := make(map[string]*cell, nu)
				for range nu {
					uk := string(r.bytes())
					v := r.bytes()
					if r.err != nil {
						break
					}
					um[uk] = &cell{v}
				}
				if len(um) == 0 && r.err == nil {
					r.fail(fmt.Errorf("table %q: key %s without user keys", pt.name, printable(k)))
				}
				pt.maps[k] = um
			}
		} else {
			pt.vals = make([]slot, 0, nk)
			for range nk {
				k := string(r.bytes())
				v := r.bytes()
				if r.err != nil {
					break
				}
				pt.vals = append(pt.vals, slot{k, v})
			}
		}
		p.tables = append(p.tables, pt)
	}
	ntm := r.count(len(r.buf) - r.pos)
	for range ntm {
		ts := r.varint()
		k := string(r.bytes())
		if r.err != nil {
			break
		}
		p.timers = append(p.timers, timerID{ts, k})
	}
	if r.err == nil && r.pos != len(r.buf) {
		r.fail(fmt.Errorf("%d unexpected bytes after the timers", len(r.buf)-r.pos))
	}
	if r.err != nil {
		return nil, r.err
	}
	return p, nil
}

// reader decodes a chunk body; after the first error every read returns
// zero values and err keeps that error.
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

// count reads a count that may not exceed limit (every counted item takes
// at least one byte, so limit is the bytes left), so that a damaged count
// cannot make the decoder allocate huge maps.
func (r *reader) count(limit int) int {
	v := r.uvarint()
	if r.err == nil && v > uint64(limit) {
		r.fail(fmt.Errorf("count %d at byte %d exceeds the %d bytes left", v, r.pos, limit))
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

// bytes reads a length-prefixed field; the result aliases buf (with its
// capacity cut, so appending to it cannot overwrite what follows).
func (r *reader) bytes() []byte {
	n := r.uvarint()
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.buf)-r.pos) {
		r.fail(fmt.Errorf("field of %d bytes at byte %d exceeds the %d bytes left", n, r.pos, len(r.buf)-r.pos))
		return nil
	}
	s := r.buf[r.pos : r.pos+int(n) : r.pos+int(n)]
	r.pos += int(n)
	return s
}
