// Package chunk owns the snapshot chunk format that Weir's keyed-state
// backends write from Snapshot and read in Restore: the heap backend
// (statebackend/heap) and the Pebble backend (statebackend/pebblestate)
// both use it, so that a full snapshot of either restores into the other.
// Each backend keeps its own iteration over its state; this package only
// knows the bytes.
//
// A chunk holds the state of exactly one key group, so that chunks can be
// handed to whichever subtask owns the key group after rescaling. The format
// (version 2), with uvarint lengths and counts:
//
//	magic    "WKG" and the version byte (1 or 2)
//	kg       uvarint: the key group
//	tables   uvarint count, then per table:
//	           name (length, bytes), kind (one byte, statebackend.Kind),
//	           key count, then per key: key (length, bytes) and
//	             value (length, codec bytes)             for non-map kinds
//	             user-key count, then per user key:      for KindMap
//	               user key (length, bytes), value (length, codec bytes)
//	timers   uvarint count, then per event-time timer: timestamp (zig-zag
//	         varint), key (length, bytes)
//	ptimers  version 2 only: uvarint count, then per processing-time timer:
//	         timestamp (zig-zag varint), key (length, bytes)
//	crc      CRC-32C (Castagnoli) of everything before it, 4 bytes little
//	         endian
//
// Version 1 is version 2 without the processing-time timers. A writer uses
// version 1 for a chunk without processing-time timers, so that such a
// chunk is byte for byte what builds that read only version 1 wrote, and
// they still read it; a chunk with processing-time timers is version 2.
//
// A writer calls, in this order: AppendHeader (given the number of
// processing-time timers, which picks the version); per table AppendTable
// and then per key AppendField (the key) followed by AppendField (the
// value) or by AppendCount and per user key two AppendFields; AppendCount
// (event-time timers); AppendTimer per timer; if there are processing-time
// timers, AppendCount and AppendTimer per processing-time timer;
// AppendChecksum. ParseAll parses and checks the chunks of a restore, with
// Parse for each. Parse decodes a chunk and checks the magic, the version,
// every length against the bytes left, the kinds, that every map key has
// user keys, that nothing follows the last timer section of its version,
// and the checksum, so a damaged chunk is an error, not a panic or wrong
// state.
//
// Every error about a chunk's bytes is a *FormatError: it says what is
// wrong, what the chunk holds there and what a reader expects, which state
// (table) the problem is in, and, from ParseAll, which checkpoint, key group
// and chunk. A chunk of a format version this build does not read is one
// wrapping ErrVersion. A later format version will be read next to versions
// 1 and 2 (readVersions), or rejected with that error: never misread.
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
	"slices"
	"strconv"
	"strings"

	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/stream"
)

// The format versions: version 2 adds processing-time timers to version 1.
const (
	Version1 = 1
	Version2 = 2
	// Version is the newest format version this package writes (see
	// AppendHeader for when it writes version 1).
	Version = Version2
)

// readVersions are the format versions Parse reads. A build that writes a
// new version keeps reading the old ones: it adds the new one here and
// decodes each in its own way.
var readVersions = [...]byte{Version1, Version2}

// ErrVersion is wrapped, together with statebackend.ErrCorrupt, by the
// *FormatError of a chunk whose format version this build does not read:
// the checkpoint was written by a newer Weir, or is damaged.
var ErrVersion = errors.New("statebackend: unknown state format version")

// maxKeyGroup bounds the key group a chunk may name.
const maxKeyGroup = 1 << 30

var (
	magic    = [3]byte{'W', 'K', 'G'}
	crcTable = crc32.MakeTable(crc32.Castagnoli)
)

// headerLen is the length of the magic and the version byte.
const headerLen = len(magic) + 1

// FormatError is a chunk that cannot be restored: damaged, not a chunk, of
// a format version this build does not read, filed under another key group
// than the one it holds, or holding a state with another kind than the
// rest of the restore. Inspect it with errors.As; errors.Is finds Err.
type FormatError struct {
	// Err classifies the problem: statebackend.ErrCorrupt (the bytes are
	// damaged or not a chunk), ErrVersion (an unknown format version; the
	// error also wraps statebackend.ErrCorrupt) or statebackend.ErrConflict
	// (a state of two kinds).
	Err error
	// CheckpointID, KeyGroup (the key group the chunk is filed under),
	// Chunk (1-based) of Chunks, and Size (its length in bytes) place the
	// chunk in a restore. ParseAll sets them; from Parse, Chunks is 0.
	CheckpointID int64
	KeyGroup     int
	Chunk        int
	Chunks       int
	Size         int
	// Table is the state (table) the problem is in; empty when it is in no
	// one state (the header, the checksum, the key group, the timers of
	// either domain).
	Table string
	// Tables are then the states the chunk holds, as far as they could be
	// read (nil if none could). Of a chunk whose checksum failed they are
	// read from the damaged bytes: a hint, which may be damaged too.
	Tables []string
	// What names the part of the chunk that is wrong, Found what the chunk
	// holds there and Expected what a reader expects, all for people.
	What, Found, Expected string
}

func (e *FormatError) Error() string {
	var b strings.Builder
	b.WriteString(e.Err.Error())
	sep := ": "
	if e.Chunks > 0 {
		fmt.Fprintf(&b, ": checkpoint %d, key group %d, chunk %d of %d (%d bytes)", e.CheckpointID, e.KeyGroup, e.Chunk, e.Chunks, e.Size)
		sep = ", "
	}
	switch {
	case e.Table != "":
		fmt.Fprintf(&b, "%sstate %q", sep, e.Table)
	case len(e.Tables) > 0:
		fmt.Fprintf(&b, "%sholding state %s", sep, quoteAll(e.Tables))
	}
	fmt.Fprintf(&b, ": %s: found %s, expected %s; ", e.What, e.Found, e.Expected)
	switch e.Err {
	case ErrVersion:
		b.WriteString("restore with the Weir version that wrote the checkpoint or a newer one")
	case statebackend.ErrConflict:
		b.WriteString("the state changed kind under the same name; restore into the job version that wrote the checkpoint, or give the new state another name")
	default:
		b.WriteString("the checkpoint data is damaged or was not written by a Weir state backend")
	}
	return b.String()
}

// Unwrap returns Err, and statebackend.ErrCorrupt with ErrVersion.
func (e *FormatError) Unwrap() []error {
	if e.Err == ErrVersion {
		return []error{ErrVersion, statebackend.ErrCorrupt}
	}
	return []error{e.Err}
}

func corrupt(what, found, expected string) *FormatError {
	return &FormatError{Err: statebackend.ErrCorrupt, What: what, Found: found, Expected: expected}
}

func quoteAll(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	return strings.Join(q, ", ")
}

// versionList names the versions this build reads, e.g. "1" or "1 or 2".
func versionList() string {
	s := make([]string, len(readVersions))
	for i, v := range readVersions {
		s[i] = strconv.Itoa(int(v))
	}
	if len(s) == 1 {
		return s[0]
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}

// AppendHeader appends the start of the chunk of key group kg that holds
// the given numbers of tables and processing-time timers. A chunk without
// processing-time timers is written in version 1, one with some in version
// 2; the writer then appends them after the event-time timers.
func AppendHeader(dst []byte, kg, tables, processingTimers int) []byte {
	dst = append(dst, magic[:]...)
	dst = append(dst, versionFor(processingTimers))
	dst = binary.AppendUvarint(dst, uint64(kg))
	return binary.AppendUvarint(dst, uint64(tables))
}

// versionFor returns the version of a chunk with n processing-time timers.
func versionFor(n int) byte {
	if n > 0 {
		return Version2
	}
	return Version1
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

// AppendCount appends a count: the user keys of a map key, or the timers of
// one domain.
func AppendCount(dst []byte, n int) []byte {
	return binary.AppendUvarint(dst, uint64(n))
}

// AppendTimer appends one timer of either domain: its timestamp and its
// key.
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
	// Timer is an event-time timer of the key group.
	Timer(ts int64, key []byte)
	// ProcessingTimer is a processing-time timer of the key group; only
	// version 2 chunks have them, after the event-time timers.
	ProcessingTimer(ts int64, key []byte)
}

// Parse checks chunk and hands its contents to h. It returns the key group
// the chunk holds; the caller checks that it is the expected one. An error
// is a *FormatError without the chunk's place in a restore, which the
// caller adds (ParseAll does).
func Parse(chunk []byte, h Handler) (kg int, err error) {
	if len(chunk) < headerLen+4 {
		return 0, corrupt("length", fmt.Sprintf("%d bytes", len(chunk)), fmt.Sprintf("at least %d bytes", headerLen+4))
	}
	if [3]byte(chunk[:3]) != magic {
		return 0, corrupt("magic", strconv.Quote(string(chunk[:3])), strconv.Quote(string(magic[:])))
	}
	v := chunk[3]
	if !slices.Contains(readVersions[:], v) {
		return 0, &FormatError{Err: ErrVersion, What: "format version", Found: strconv.Itoa(int(v)),
			Expected: versionList() + " (the versions this build reads)"}
	}
	body := chunk[:len(chunk)-4]
	if want, got := binary.LittleEndian.Uint32(chunk[len(chunk)-4:]), crc32.Checksum(body, crcTable); want != got {
		e := corrupt("checksum mismatch", fmt.Sprintf("%08x (computed)", got), fmt.Sprintf("%08x (stored)", want))
		// Name the states the chunk holds if its structure still parses:
		// the damage may be in a value.
		var names tableNames
		if _, err := parseBody(body, v, &names); err == nil {
			e.Tables = names.names
		}
		return 0, e
	}
	return parseBody(body, v, h)
}

// parseBody parses what follows the header of a chunk of version v without
// its checksum.
func parseBody(body []byte, v byte, h Handler) (kg int, err error) {
	r := &Reader{buf: body[:len(body):len(body)], pos: headerLen}
	kg = r.count("key group", maxKeyGroup)
	if r.err == nil {
		h.KeyGroup(kg)
	}
	table := "" // the table being read, for errors
	nt := r.count("table count", r.Left())
	for range nt {
		if r.err != nil {
			break
		}
		table = ""
		name := string(r.Bytes())
		kind := statebackend.Kind(r.Byte())
		if r.err != nil {
			break
		}
		table = name
		if !kind.Valid() {
			r.Fail(corrupt("kind", strconv.Itoa(int(kind)), "1 to 5 (value, list, map, reducing, aggregating)"))
		}
		nk := r.count("key count", r.Left())
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
			nu := r.count("user-key count", r.Left())
			if nu == 0 && r.err == nil {
				r.Fail(corrupt("user keys of key "+Printable(k), "0", "at least 1"))
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
	if r.err == nil {
		table = ""
	}
	r.timers("timer count", h.Timer)
	last := "timers"
	if v >= Version2 {
		r.timers("processing-time timer count", h.ProcessingTimer)
		last = "processing-time timers"
	}
	if r.err == nil && r.Left() != 0 {
		r.Fail(corrupt("bytes after the "+last, strconv.Itoa(r.Left()), "0"))
	}
	if r.err != nil {
		var fe *FormatError
		if errors.As(r.err, &fe) {
			fe.Table = table
		}
		return 0, r.err
	}
	return kg, nil
}

// timers reads a timer section (a count, named what in errors, and that
// many timers) and hands each timer to each.
func (r *Reader) timers(what string, each func(ts int64, key []byte)) {
	n := r.count(what, r.Left())
	for range n {
		ts := r.Varint()
		k := r.Bytes()
		if r.err != nil {
			return
		}
		each(ts, k)
	}
}

// tableNames is a Handler that keeps only the names of the tables.
type tableNames struct{ names []string }

var _ Handler = (*tableNames)(nil)

func (t *tableNames) KeyGroup(int) {}
func (t *tableNames) Table(name string, _ statebackend.Kind, _ int) {
	t.names = append(t.names, name)
}
func (t *tableNames) Value(_, _ []byte)             {}
func (t *tableNames) MapKey([]byte, int)            {}
func (t *tableNames) MapValue(_, _ []byte)          {}
func (t *tableNames) Timer(int64, []byte)           {}
func (t *tableNames) ProcessingTimer(int64, []byte) {}

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
// Err keeps that error, a *FormatError wrapping statebackend.ErrCorrupt for
// a failed read. Positions in errors count from the start of the bytes
// given to NewReader. A Reader is not safe for concurrent use.
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
		r.badVarint(n)
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
		r.badVarint(n)
		return 0
	}
	r.pos += n
	return v
}

// badVarint fails for the varint at r.pos, which encoding/binary decoded
// with result n (0: the data ends inside it; negative: it overflows).
func (r *Reader) badVarint(n int) {
	found := "one that overflows 64 bits"
	if n == 0 {
		found = fmt.Sprintf("the end of the data after %d bytes of it", r.Left())
	}
	r.Fail(corrupt(fmt.Sprintf("varint at byte %d", r.pos), found, "a complete varint"))
}

// Count reads a count (an unsigned varint) of at most limit; for counted
// items of at least one byte each, Left is the limit. It keeps a damaged
// count from making the caller allocate a lot.
func (r *Reader) Count(limit int) int { return r.count("count", limit) }

// count is Count with what it counts named in errors.
func (r *Reader) count(what string, limit int) int {
	at := r.pos
	v := r.Uvarint()
	if r.err == nil && v > uint64(limit) {
		r.Fail(corrupt(fmt.Sprintf("%s at byte %d", what, at), strconv.FormatUint(v, 10), fmt.Sprintf("at most %d", limit)))
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
		r.Fail(corrupt(fmt.Sprintf("byte %d", r.pos), "the end of the data", "one more byte"))
		return 0
	}
	r.pos++
	return r.buf[r.pos-1]
}

// Bytes reads a length-prefixed field. The result aliases the Reader's
// bytes, with its capacity cut so that appending to it cannot overwrite
// what follows.
func (r *Reader) Bytes() []byte {
	at := r.pos
	n := r.Uvarint()
	if r.err != nil {
		return nil
	}
	if n > uint64(r.Left()) {
		r.Fail(corrupt(fmt.Sprintf("length of the field at byte %d", at), fmt.Sprintf("%d bytes", n), fmt.Sprintf("at most the %d bytes left", r.Left())))
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
// new handler from newHandler, which it returns, and checks that each chunk
// holds the key group it is filed under and that every table has one kind
// across the chunks and the tables o holds. It changes nothing in the
// backend, so a backend can check a whole restore before it applies any of
// it. It parses the key groups in ascending order, so that of several bad
// chunks it always reports the same one.
//
// Its error is a *FormatError that places the chunk: one wrapping
// statebackend.ErrCorrupt for a damaged chunk or one filed under another
// key group (and ErrVersion for an unknown format version), one wrapping
// statebackend.ErrConflict for a table of two kinds.
func ParseAll[H Handler](c *stream.RestoreContext, o Owner, newHandler func() H) ([]H, error) {
	if c.State == nil {
		return nil, nil
	}
	kgs := make([]int, 0, len(c.State.Keyed))
	for kg := range c.State.Keyed {
		if o.KeyGroups.Contains(kg) {
			kgs = append(kgs, kg)
		}
	}
	slices.Sort(kgs)
	var parsed []H
	type seen struct {
		kind statebackend.Kind
		kg   int // -1: the backend holds the table
	}
	kinds := make(map[string]seen)
	for _, kg := range kgs {
		chunks := c.State.Keyed[kg]
		for n, data := range chunks {
			place := func(e *FormatError) *FormatError {
				e.CheckpointID, e.KeyGroup, e.Chunk, e.Chunks, e.Size = c.CheckpointID, kg, n+1, len(chunks), len(data)
				return e
			}
			inner := newHandler()
			h := &tableKinds{Handler: inner}
			in := data
			if o.KeepsBytes {
				in = bytes.Clone(data)
			}
			got, err := Parse(in, h)
			if err != nil {
				var fe *FormatError
				if !errors.As(err, &fe) {
					fe = corrupt("chunk", err.Error(), "a chunk")
				}
				return nil, place(fe)
			}
			if got != kg {
				found := strconv.Itoa(got)
				if !o.KeyGroups.Contains(got) {
					found += fmt.Sprintf(" (outside this backend's key groups %v)", o.KeyGroups)
				}
				e := corrupt("chunk holds key group", found, fmt.Sprintf("%d (the key group it is filed under)", kg))
				for _, t := range h.tables {
					e.Tables = append(e.Tables, t.name)
				}
				return nil, place(e)
			}
			for _, t := range h.tables {
				want, ok := kinds[t.name]
				if !ok {
					if k, held := o.Kind(t.name); held {
						want, ok = seen{k, -1}, true
					}
				}
				if ok && want.kind != t.kind {
					where := "as the backend holds it"
					if want.kg >= 0 {
						where = fmt.Sprintf("its kind in key group %d", want.kg)
					}
					e := &FormatError{Err: statebackend.ErrConflict, Table: t.name, What: "kind",
						Found: t.kind.String() + " state", Expected: fmt.Sprintf("%s state (%s)", want.kind, where)}
					return nil, place(e)
				}
				if !ok {
					kinds[t.name] = seen{t.kind, kg}
				}
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
