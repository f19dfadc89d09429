// Package chunk owns the snapshot chunk format that Weir's keyed-state
// backends write from Snapshot and read in Restore: the heap backend
// (statebackend/heap) and the Pebble backend (statebackend/pebblestate)
// both use it, so that a full snapshot of either restores into the other.
// Each backend keeps its own iteration over its state; this package only
// knows the bytes.
//
// A chunk holds the state of exactly one key group, so that chunks can be
// handed to whichever subtask owns the key group after rescaling. The format
// (version 1), with uvarint lengths and counts:
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
// A writer calls, in this order: AppendHeader; per table AppendTable and
// then per key AppendField (the key) followed by AppendField (the value) or
// by AppendCount and per user key two AppendFields; AppendCount (timers);
// AppendTimer per timer; AppendChecksum. ParseAll parses and checks the
// chunks of a restore, with Parse for each. Parse decodes a chunk and checks
// the magic, the version, every length against the bytes left, the kinds,
// that every map key has user keys, that nothing follows the timers, and
// the checksum, so a damaged chunk is an error, not a panic or wrong state.
//
// chunk imports the standard library, stream and statebackend. Nothing in
// it keeps state between calls; it is safe for concurrent use (a Reader is
// not).
package chunk

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/stream"
)

// Version is the format version this package writes and reads.
const Version = 1

// maxKeyGroup bounds the key group a chunk may name.
const maxKeyGroup = 1 << 30

var (
	magic    = [3]byte{'W', 'K', 'G'}
	crcTable = crc32.MakeTable(crc32.Castagnoli)
)

// headerLen is the length of the magic and the version byte.
const headerLen = len(magic) + 1

// AppendHeader appends the start of the chunk of key group kg that holds
// the given number of tables.
func AppendHeader(dst []byte, kg, tables int) []byte {
	dst = append(dst, magic[:]...)
	dst = append(dst, Version)
	dst = binary.AppendUvarint(dst, uint64(kg))
	return binary.AppendUvarint(dst, uint64(tables))
}

// AppendTable appends the start of a table: its name, its kind and the
// number of keys that follow.
func AppendTable[S string | []byte](dst []byte, name S, kind statebackend.Kind, keys int) []byte {
	dst = AppendField(dst, name)
	dst = append(dst, byte(kind))
	return binary.AppendUvarint(dst, uint64(keys))
}

// AppendField appends a length-prefixed field: a key, a user key or a
// value's codec bytes.
func AppendField[S string | []byte](dst []byte, s S) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// AppendCount appends a count: the user keys of a map key, or the timers.
func AppendCount(dst []byte, n int) []byte {
	return binary.AppendUvarint(dst, uint64(n))
}

// AppendTimer appends one timer: its timestamp and its key.
func AppendTimer[S string | []byte](dst []byte, ts int64, key S) []byte {
	dst = binary.AppendVarint(dst, ts)
	return AppendField(dst, key)
}

// AppendChecksum appends the checksum of the chunk dst, which must start
// with AppendHeader's bytes and be complete otherwise. It ends the chunk.
func AppendChecksum(dst []byte) []byte {
	return binary.LittleEndian.AppendUint32(dst, crc32.Checksum(dst, crcTable))
}

// Handler receives the contents of a chunk from Parse, in the order of the
// chunk. Every byte slice aliases the chunk given to Parse (with its
// capacity cut, so appending to it cannot overwrite what follows); a handler
// that keeps one past the life of the chunk must copy it or own the chunk.
// Parse may call a handler before it finds the chunk damaged; the caller
// then drops what the handler built.
type Handler interface {
	// KeyGroup is the key group the chunk holds; it comes first.
	KeyGroup(kg int)
	// Table starts a table with the given number of keys.
	Table(name string, kind statebackend.Kind, keys int)
	// Value is a key and its value in the current table, whose kind is not
	// statebackend.KindMap.
	Value(key, value []byte)
	// MapKey starts a key of the current table, of kind
	// statebackend.KindMap, that has userKeys (at least one) user keys,
	// which MapValue calls give.
	MapKey(key []byte, userKeys int)
	// MapValue is a user key and its value of the current map key.
	MapValue(userKey, value []byte)
	// Timer is a timer of the key group.
	Timer(ts int64, key []byte)
}

// Parse checks chunk and hands its contents to h. It returns the key group
// the chunk holds; the caller checks that it is the expected one. The error
// says what is wrong and where, without naming the chunk: the caller adds
// the checkpoint and key group.
func Parse(chunk []byte, h Handler) (kg int, err error) {
	if len(chunk) < headerLen+4 {
		return 0, errors.New("too short for a chunk")
	}
	if [3]byte(chunk[:3]) != magic {
		return 0, fmt.Errorf("bad magic %q", chunk[:3])
	}
	if v := chunk[3]; v != Version {
		return 0, fmt.Errorf("format version %d, this build reads version %d; restore with the Weir version that wrote the checkpoint or a newer one", v, Version)
	}
	body := chunk[:len(chunk)-4]
	if want, got := binary.LittleEndian.Uint32(chunk[len(chunk)-4:]), crc32.Checksum(body, crcTable); want != got {
		return 0, fmt.Errorf("checksum mismatch (stored %08x, computed %08x)", want, got)
	}
	r := NewReader(body[headerLen:])
	kg = r.Count(maxKeyGroup)
	if r.err == nil {
		h.KeyGroup(kg)
	}
	nt := r.Count(r.Left())
	for range nt {
		if r.err != nil {
			break
		}
		name := string(r.Bytes())
		kind := statebackend.Kind(r.Byte())
		if r.err == nil && !kind.Valid() {
			r.Fail(fmt.Errorf("table %q: unknown kind %d", name, kind))
		}
		nk := r.Count(r.Left())
		if r.err != nil {
			break
		}
		h.Table(name, kind, nk)
		for range nk {
			k := r.Bytes()
			if kind != statebackend.KindMap {
				v := r.Bytes()
				if r.err != nil {
					break
				}
				h.Value(k, v)
				continue
			}
			nu := r.Count(r.Left())
			if nu == 0 && r.err == nil {
				r.Fail(fmt.Errorf("table %q: key %s without user keys", name, Printable(k)))
			}
			if r.err != nil {
				break
			}
			h.MapKey(k, nu)
			for range nu {
				uk := r.Bytes()
				v := r.Bytes()
				if r.err != nil {
					break
				}
				h.MapValue(uk, v)
			}
		}
	}
	ntm := r.Count(r.Left())
	for range ntm {
		ts := r.Varint()
		k := r.Bytes()
		if r.err != nil {
			break
		}
		h.Timer(ts, k)
	}
	if r.err == nil && r.Left() != 0 {
		r.Fail(fmt.Errorf("%d unexpected bytes after the timers", r.Left()))
	}
	if r.err != nil {
		return 0, r.err
	}
	return kg, nil
}

// Printable shows a key in an error message: quoted if it is short text,
// else as hex, and truncated to 64 bytes.
func Printable[S string | []byte](k S) string {
	const limit = 64
	text := true
	for i := 0; i < len(k); i++ {
		if k[i] < 0x20 || k[i] > 0x7e {
			text = false
			break
		}
	}
	suffix := ""
	if len(k) > limit {
		k, suffix = k[:limit], "…"
	}
	if text {
		return fmt.Sprintf("%q%s", k, suffix)
	}
	return fmt.Sprintf("0x%x%s", k, suffix)
}

// Reader decodes the fields chunks are made of: uvarints, zig-zag
// varints, bytes and length-prefixed fields, checking every length against
// the bytes left. After the first error every read returns a zero value and
// Err keeps that error. Positions in errors count from the start of the
// bytes given to NewReader. A Reader is not safe for concurrent use.
type Reader struct {
	buf []byte
	pos int
	err error
}

// NewReader returns a Reader of buf, which it does not modify.
func NewReader(buf []byte) *Reader { return &Reader{buf: buf[:len(buf):len(buf)]} }

// Err returns the first error.
func (r *Reader) Err() error { return r.err }

// Fail records err unless an error is recorded already.
func (r *Reader) Fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

// Left returns the number of bytes not read yet.
func (r *Reader) Left() int { return len(r.buf) - r.pos }

// Uvarint reads an unsigned varint.
func (r *Reader) Uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.buf[r.pos:])
	if n <= 0 {
		r.Fail(fmt.Errorf("bad varint at byte %d", r.pos))
		return 0
	}
	r.pos += n
	return v
}

// Varint reads a zig-zag varint.
func (r *Reader) Varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.buf[r.pos:])
	if n <= 0 {
		r.Fail(fmt.Errorf("bad varint at byte %d", r.pos))
		return 0
	}
	r.pos += n
	return v
}

// Count reads a count (an unsigned varint) of at most limit; for counted
// items of at least one byte each, Left is the limit. It keeps a damaged
// count from making the caller allocate a lot.
func (r *Reader) Count(limit int) int {
	v := r.Uvarint()
	if r.err == nil && v > uint64(limit) {
		r.Fail(fmt.Errorf("count %d at byte %d exceeds its limit %d", v, r.pos, limit))
		return 0
	}
	return int(v)
}

// Byte reads one byte.
func (r *Reader) Byte() byte {
	if r.err != nil {
		return 0
	}
	if r.pos >= len(r.buf) {
		r.Fail(errors.New("truncated"))
		return 0
	}
	r.pos++
	return r.buf[r.pos-1]
}

// Bytes reads a length-prefixed field. The result aliases the Reader's
// bytes, with its capacity cut so that appending to it cannot overwrite
// what follows.
func (r *Reader) Bytes() []byte {
	n := r.Uvarint()
	if r.err != nil {
		return nil
	}
	if n > uint64(r.Left()) {
		r.Fail(fmt.Errorf("field of %d bytes at byte %d exceeds the %d bytes left", n, r.pos, r.Left()))
		return nil
	}
	s := r.buf[r.pos : r.pos+int(n) : r.pos+int(n)]
	r.pos += int(n)
	return s
}

// CheckSnapshot returns an error unless snapshot c covers every key group
// in owned, the key groups of the backend it is asked of. The caller adds
// its name to the error.
func CheckSnapshot(c *stream.SnapshotContext, owned stream.KeyGroupRange) error {
	if owned.Len() > 0 && (!c.KeyGroups.Contains(owned.Start) || !c.KeyGroups.Contains(owned.End)) {
		return fmt.Errorf("snapshot for key groups %v, but the backend holds %v; the checkpoint was started for another subtask", c.KeyGroups, owned)
	}
	return nil
}

// Owner describes the backend that restores chunks with ParseAll.
type Owner struct {
	// KeyGroups are the key groups the backend owns; chunks of other key
	// groups are skipped.
	KeyGroups stream.KeyGroupRange
	// Kind returns the kind of a table the backend holds already, and
	// false for a table it does not hold.
	Kind func(table string) (statebackend.Kind, bool)
	// KeepsBytes says that handlers keep the slices they are given after
	// ParseAll returns. Each chunk is then parsed from a private copy, so
	// that the backend's state does not alias the restore's bytes.
	KeepsBytes bool
}

// ParseAll parses every chunk of c of a key group that o owns, each into a
// new handler from newHandler, which it returns, and checks that each chunk holds the key
// group it is filed under and that every table has one kind across the
// chunks and the tables o holds. It changes nothing in the backend, so a
// backend can check a whole restore before it applies any of it; chunks
// come in no particular order.
//
// A damaged chunk is an error wrapping statebackend.ErrCorrupt, and a table
// of two kinds one wrapping statebackend.ErrConflict; both name the
// checkpoint, the key group and (for a damaged one) the chunk.
func ParseAll[H Handler](c *stream.RestoreContext, o Owner, newHandler func() H) ([]H, error) {
	if c.State == nil {
		return nil, nil
	}
	var parsed []H
	kinds := make(map[string]statebackend.Kind)
	for kg, chunks := range c.State.Keyed {
		if !o.KeyGroups.Contains(kg) {
			continue
		}
		for n, data := range chunks {
			inner := newHandler()
			h := &tableKinds{Handler: inner}
			in := data
			if o.KeepsBytes {
				in = bytes.Clone(data)
			}
			got, err := Parse(in, h)
			if err == nil && got != kg {
				err = fmt.Errorf("holds key group %d", got)
			}
			if err != nil {
				return nil, fmt.Errorf("%w: checkpoint %d, key group %d, chunk %d of %d (%d bytes): %v; the checkpoint data is damaged or was not written by a Weir state backend",
					statebackend.ErrCorrupt, c.CheckpointID, kg, n+1, len(chunks), len(data), err)
			}
			for _, t := range h.tables {
				want, ok := kinds[t.name]
				if !ok {
					want, ok = o.Kind(t.name)
				}
				if ok && want != t.kind {
					return nil, fmt.Errorf("%w: checkpoint %d, key group %d: state %q is %s state there and %s state elsewhere",
						statebackend.ErrConflict, c.CheckpointID, kg, t.name, t.kind, want)
				}
				kinds[t.name] = t.kind
			}
			parsed = append(parsed, inner)
		}
	}
	return parsed, nil
}

// tableKinds passes a chunk's contents on and notes its tables' kinds.
type tableKinds struct {
	Handler
	tables []tableKind
}

type tableKind struct {
	name string
	kind statebackend.Kind
}

func (t *tableKinds) Table(name string, kind statebackend.Kind, keys int) {
	t.tables = append(t.tables, tableKind{name, kind})
	t.Handler.Table(name, kind, keys)
}
