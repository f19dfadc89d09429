// Package batchcodec is the wire encoding of a stream.Batch: what the network
// exchange puts in a frame and what spilled or persisted in-flight data will
// use. It is a small columnar format of Weir's own, designed so that encoding
// and decoding are passes over whole columns: no reflection, no per-row
// allocation. It is compact where that is cheap, because every byte of it
// is copied several times on its way through the network stack and, with
// TLS, encrypted and decrypted: integers are stored in the fewest whole
// bytes their column's range needs, and a string column that repeats its
// values is stored as a dictionary.
//
// Layout (all integers little-endian; uvarint is encoding/binary's):
//
//	version  byte (2)
//	rows     uvarint
//	columns  uvarint
//	flags    byte (bit 0: the batch carries event times)
//	per column:
//	  type   byte (the stream.Type value)
//	  nulls  byte (0: none; 1: a bitmap of ceil(rows/64) uint64 words follows)
//	  values int64, timestamp: packed integers (below)
//	         float64: rows × 8 bytes
//	         bool: ceil(rows/8) bytes, bit i of byte i/8 is row i
//	         string: form byte, then
//	                 0 (plain): a string block of rows strings
//	                 1 (dictionary): entries uvarint (1 ≤ entries ≤ rows),
//	                   a string block of the entries, then rows packed
//	                   integers, each row's entry number
//	                 2 (channel dictionary, version 3 only): base uvarint,
//	                   added uvarint, a string block of the added entries
//	                   when added > 0, then rows packed integers, each
//	                   row's entry number in the channel's dictionary
//	                   (chandict.go)
//	times    rows packed integers, when flag bit 0 is set
//
//	string block of k strings: uvarint total byte length, the bytes of all
//	         strings back to back, then k uvarint lengths
//	packed integers: width byte w (0 to 8); for w < 8 a base (8 bytes)
//	         and rows × w bytes, value i being base + the w-byte unsigned
//	         integer i (mod 2^64); for w = 8 rows × 8 bytes, the values
//
// Version 3 is version 2 with string form 2, whose batches only a channel
// Decoder reads. Version 1, which the decoder still reads, stored integers
// as rows × 8 bytes and strings as a plain string block without the form
// byte.
// Encodings need not be canonical: the decoder accepts any width and any
// dictionary that decode to valid values.
//
// batchcodec imports only the standard library and package stream.
package batchcodec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"sync"
	"unsafe"

	"github.com/weirstream/weir/stream"
)

// version is what Append writes and versionChannel what an Encoder does;
// Decode reads them and versionPlain.
const (
	version        = 2
	versionPlain   = 1
	versionChannel = 3
)

const flagTimes = 1

// The forms of a string column (versions 2 and 3).
const (
	formPlain   = 0
	formDict    = 1
	formChannel = 2
)

// maxRows bounds the row count a decoder accepts, so that a corrupt header
// cannot make it allocate without limit.
const maxRows = 1 << 26

// A batch's values of fixed size (8 bytes a number, 16 a string's header,
// 1 a boolean, 8 an event time) take rows × their size decoded, but a
// column whose rows are all equal takes about ten bytes encoded whatever
// the rows: without a bound a frame of a few dozen bytes could make the
// decoder allocate gigabytes. A decoder accepts a batch whose values of
// fixed size take at most decodedFloor plus decodedRatio bytes for each
// byte of its encoding: only a batch of millions of values nearly all
// equal takes more.
const decodedRatio = 256

// decodedFloor is a variable so that the fuzz targets can lower it.
var decodedFloor = 64 << 20

// ErrCorrupt marks input that is not a valid encoding.
var ErrCorrupt = errors.New("batchcodec: corrupt batch")

var littleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// Append appends the encoding of b to dst and returns the extended slice.
// b is only read. Append is safe for concurrent use.
func Append(dst []byte, b *stream.Batch) []byte {
	one := [1]*stream.Batch{b}
	return AppendBatches(dst, one[:])
}

// AppendBatches appends the encoding of one batch holding the rows of bs, in
// order, without building it: the batches must share one schema, and carry
// event times all or none. They are only read. AppendBatches is safe for
// concurrent use.
func AppendBatches(dst []byte, bs []*stream.Batch) []byte {
	return appendBatches(dst, bs, nil, false)
}

// appendBatches is AppendBatches; with ch, string columns may use ch's
// channel dictionary, which may forget its entries if mayReset.
func appendBatches(dst []byte, bs []*stream.Batch, ch *Encoder, mayReset bool) []byte {
	n := 0
	for _, b := range bs {
		n += b.Len()
	}
	first := bs[0]
	if ch != nil {
		dst = append(dst, versionChannel)
		ch.begin()
	} else {
		dst = append(dst, version)
	}
	dst = binary.AppendUvarint(dst, uint64(n))
	dst = binary.AppendUvarint(dst, uint64(len(first.Cols)))
	hasTimes := n > 0 && len(first.Times) == first.Len()
	if hasTimes {
		dst = append(dst, flagTimes)
	} else {
		dst = append(dst, 0)
	}
	enc := encoderPool.Get().(*encoder)
	defer encoderPool.Put(enc)
	for j := range first.Cols {
		typ := first.Cols[j].Type
		dst = append(dst, byte(typ))
		dst = appendNulls(dst, bs, j, n)
		switch typ {
		case stream.TypeInt64, stream.TypeTimestamp:
			ints := enc.ints[:0]
			for _, b := range bs {
				ints = append(ints, b.Cols[j].Ints[:b.Len()])
			}
			dst = appendPacked(dst, ints, n)
			clear(ints)
			enc.ints = ints[:0]
		case stream.TypeFloat64:
			for _, b := range bs {
				dst = appendFloat64s(dst, b.Cols[j].Floats[:b.Len()])
			}
		case stream.TypeBool:
			dst = appendBools(dst, bs, j, n)
		case stream.TypeString:
			strs, hints := enc.strs[:0], enc.hints[:0]
			anyHint := false
			for _, b := range bs {
				c := &b.Cols[j]
				strs = append(strs, c.Strs[:b.Len()])
				hints = append(hints, c.Dict)
				anyHint = anyHint || c.Dict != nil
			}
			var named []*stream.StringDict // nil when no part names one
			if anyHint {
				named = hints
			}
			done := false
			if ch != nil {
				dst, done = ch.appendColumn(dst, j, strs, named, n, mayReset)
			}
			if !done {
				dst = enc.appendStringColumn(dst, strs, n)
			}
			clear(strs)
			clear(hints)
			enc.strs, enc.hints = strs[:0], hints[:0]
		}
	}
	if hasTimes {
		ints := enc.ints[:0]
		for _, b := range bs {
			ints = append(ints, b.Times[:b.Len()])
		}
		dst = appendPacked(dst, ints, n)
		clear(ints)
		enc.ints = ints[:0]
	}
	return dst
}

// appendNulls appends column j's null flag and, if a row of it is null in
// any of bs, the bitmap of its n rows.
func appendNulls(dst []byte, bs []*stream.Batch, j, n int) []byte {
	any := false
	for _, b := range bs {
		c := &b.Cols[j]
		if c.Nulls != nil && anySet(c.Nulls, (b.Len()+63)>>6) {
			any = true
			break
		}
	}
	if !any {
		return append(dst, 0)
	}
	dst = append(dst, 1)
	words := (n + 63) >> 6
	start := len(dst)
	dst = append(dst, make([]byte, 8*words)...)
	out := dst[start:]
	off := 0
	for _, b := range bs {
		c, m := &b.Cols[j], b.Len()
		if c.Nulls != nil {
			for i := 0; i < m; i++ {
				if w := i >> 6; w < len(c.Nulls) && c.Nulls[w]&(1<<(uint(i)&63)) != 0 {
					r := off + i
					out[8*(r>>6)+(r&63)>>3] |= 1 << (uint(r) & 7)
				}
			}
		}
		off += m
	}
	return dst
}

func anySet(words []uint64, n int) bool {
	for i := 0; i < n && i < len(words); i++ {
		if words[i] != 0 {
			return true
		}
	}
	return false
}

// appendPacked appends the n values of parts as packed integers: each
// value less their minimum, in the fewest whole bytes that hold the largest
// difference.
func appendPacked(dst []byte, parts [][]int64, n int) []byte {
	if n == 0 {
		return append(dst, 8)
	}
	var lo, hi int64
	set := false
	for _, v := range parts {
		if len(v) == 0 {
			continue
		}
		if !set {
			lo, hi, set = v[0], v[0], true
		}
		lo, hi = minMax(v, lo, hi)
	}
	base := uint64(lo)
	w := (bits.Len64(uint64(hi)-base) + 7) >> 3
	if w == 8 {
		dst = append(dst, 8)
		for _, v := range parts {
			dst = appendInt64s(dst, v)
		}
		return dst
	}
	dst = append(dst, byte(w))
	dst = binary.LittleEndian.AppendUint64(dst, base)
	if w == 0 {
		return dst
	}
	// pack may store 8 bytes at the last slot; the slice is cut back to
	// the slots at the end.
	start := len(dst)
	end := start + n*w
	dst = grow(dst, end+8)
	out := dst[start : end+8]
	for _, v := range parts {
		pack(out, v, w, base)
		out = out[len(v)*w:]
	}
	return dst[:end]
}

// minMax returns the least and the greatest of lo, hi and the values of v,
// with four pairs of accumulators so that the comparisons of neighbouring
// values do not wait on each other.
func minMax(v []int64, lo, hi int64) (int64, int64) {
	lo1, hi1, lo2, hi2, lo3, hi3 := lo, hi, lo, hi, lo, hi
	for len(v) >= 4 {
		a, b, c, d := v[0], v[1], v[2], v[3]
		lo, hi = min(lo, a), max(hi, a)
		lo1, hi1 = min(lo1, b), max(hi1, b)
		lo2, hi2 = min(lo2, c), max(hi2, c)
		lo3, hi3 = min(lo3, d), max(hi3, d)
		v = v[4:]
	}
	for _, x := range v {
		lo, hi = min(lo, x), max(hi, x)
	}
	return min(lo, lo1, lo2, lo3), max(hi, hi1, hi2, hi3)
}

// appendPackedIndexes is appendPacked for dictionary entry numbers, all
// below entries.
func appendPackedIndexes(dst []byte, idx []uint32, entries int) []byte {
	w := (bits.Len64(uint64(entries-1)) + 7) >> 3
	dst = append(dst, byte(w))
	dst = binary.LittleEndian.AppendUint64(dst, 0)
	if w == 0 {
		return dst
	}
	start := len(dst)
	end := start + len(idx)*w
	dst = grow(dst, end+8)
	pack(dst[start:end+8], idx, w, 0)
	return dst[:end]
}

// pack stores each value of v less base in w bytes (1 ≤ w < 8), little
// endian, back to back at the start of out, which has 8 bytes to spare:
// for widths other than 1, 2 and 4 each value is stored as 8 bytes that
// the next one overwrites.
func pack[T int64 | uint32](out []byte, v []T, w int, base uint64) {
	switch w {
	case 1:
		o := out[:len(v)]
		for i, x := range v {
			o[i] = byte(uint64(x) - base)
		}
	case 2:
		o := out[:2*len(v)]
		for _, x := range v {
			binary.LittleEndian.PutUint16(o, uint16(uint64(x)-base))
			o = o[2:]
		}
	case 4:
		o := out[:4*len(v)]
		for _, x := range v {
			binary.LittleEndian.PutUint32(o, uint32(uint64(x)-base))
			o = o[4:]
		}
	default:
		for i, x := range v {
			binary.LittleEndian.PutUint64(out[i*w:], uint64(x)-base)
		}
	}
}

// grow returns dst with length n (at least len(dst)), keeping its content.
func grow(dst []byte, n int) []byte {
	if n <= cap(dst) {
		return dst[:n]
	}
	out := make([]byte, n, max(n, 2*cap(dst)))
	copy(out, dst)
	return out
}

func appendInt64s(dst []byte, v []int64) []byte {
	if len(v) == 0 {
		return dst
	}
	if littleEndian {
		return append(dst, unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), len(v)*8)...)
	}
	for _, x := range v {
		dst = binary.LittleEndian.AppendUint64(dst, uint64(x))
	}
	return dst
}

func appendFloat64s(dst []byte, v []float64) []byte {
	if len(v) == 0 {
		return dst
	}
	if littleEndian {
		return append(dst, unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), len(v)*8)...)
	}
	for _, x := range v {
		dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(x))
	}
	return dst
}

// appendBools appends the n values of bool column j of bs.
func appendBools(dst []byte, bs []*stream.Batch, j, n int) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, (n+7)>>3)...)
	out := dst[start:]
	off := 0
	for _, b := range bs {
		for i, x := range b.Cols[j].Bools[:b.Len()] {
			if x {
				r := off + i
				out[r>>3] |= 1 << (uint(r) & 7)
			}
		}
		off += b.Len()
	}
	return dst
}

// appendStringBlock appends the strings of parts as one string block.
func appendStringBlock(dst []byte, parts [][]string) []byte {
	total := 0
	for _, v := range parts {
		for _, s := range v {
			total += len(s)
		}
	}
	dst = binary.AppendUvarint(dst, uint64(total))
	for _, v := range parts {
		for _, s := range v {
			dst = append(dst, s...)
		}
	}
	for _, v := range parts {
		for _, s := range v {
			dst = binary.AppendUvarint(dst, uint64(len(s)))
		}
	}
	return dst
}

// encoder is the scratch space of the dictionary encoding of string
// columns, reused across Append calls.
type encoder struct {
	// slots is an open-addressing hash table of the column's distinct
	// strings, keyed by their data pointer and length: strings that share
	// their bytes (a source's value pool, a decoded dictionary) are found
	// equal without reading them. Equal strings stored apart become
	// separate entries, which costs space, not correctness. A slot is in
	// use when its gen is the encoder's.
	slots   []slot
	gen     uint32
	entries []string
	idx     []uint32
	// ints, strs and hints hold the parts of a column (AppendBatches).
	hints []*stream.StringDict
	ints  [][]int64
	strs  [][]string
}

type slot struct {
	// ptr is the string's data address; as a uintptr it keeps nothing
	// alive, and it is only compared while the batch holds the string.
	ptr   uintptr
	n     int
	entry uint32
	gen   uint32
}

var encoderPool = sync.Pool{New: func() any { return new(encoder) }}

// appendStringColumn appends the n values of a string column, given in
// parts: as a dictionary when that is smaller than the plain form by a
// margin worth the lookups on decoding, else plain.
func (e *encoder) appendStringColumn(dst []byte, parts [][]string, n int) []byte {
	if n >= 4 && e.dictionary(parts, n) {
		dst = append(dst, formDict)
		dst = binary.AppendUvarint(dst, uint64(len(e.entries)))
		one := [1][]string{e.entries}
		dst = appendStringBlock(dst, one[:])
		dst = appendPackedIndexes(dst, e.idx, len(e.entries))
		clear(e.entries) // the strings are the caller's
		return dst
	}
	clear(e.entries)
	dst = append(dst, formPlain)
	return appendStringBlock(dst, parts)
}

// dictionary fills e.entries and e.idx with the dictionary of the n values
// of parts and reports whether its encoding saves at least an eighth of the
// plain one. It gives up early once more than three quarters of the values
// are distinct.
func (e *encoder) dictionary(parts [][]string, n int) bool {
	// A table of at least twice as many slots as values, of which a prefix
	// of a power-of-two size is used.
	bitsN := bits.Len(uint(2*n - 1))
	size := 1 << bitsN
	if len(e.slots) < size {
		e.slots = make([]slot, size)
		e.gen = 0
	}
	e.gen++
	if e.gen == 0 { // wrapped: forget every slot
		clear(e.slots)
		e.gen = 1
	}
	slots := e.slots[:size]
	gen, mask, shift := e.gen, size-1, 64-bitsN
	e.entries = e.entries[:0]
	if cap(e.idx) < n {
		e.idx = make([]uint32, n)
	}
	e.idx = e.idx[:n]
	idx := e.idx
	limit := n * 3 / 4
	plain, dict := 0, 0
	for _, v := range parts {
		for i, s := range v {
			p, n := uintptr(unsafe.Pointer(unsafe.StringData(s))), len(s)
			if n == 0 {
				p = 0
			}
			plain += n
			h := slotOf(p, n, shift)
			for {
				sl := &slots[h]
				if sl.gen != gen {
					if len(e.entries) == limit {
						return false
					}
					*sl = slot{ptr: p, n: n, entry: uint32(len(e.entries)), gen: gen}
					idx[i] = sl.entry
					e.entries = append(e.entries, s)
					dict += n
					break
				}
				if sl.ptr == p && sl.n == n {
					idx[i] = sl.entry
					break
				}
				h = (h + 1) & mask
			}
		}
		idx = idx[len(v):]
	}
	// The lengths cost about a byte a string either way; the entry numbers
	// cost their width per row.
	w := (bits.Len64(uint64(len(e.entries)-1)) + 7) >> 3
	plainSize := plain + n
	dictSize := dict + len(e.entries) + n*w + 10
	return dictSize <= plainSize-plainSize/8
}

// slotOf is the home slot, in a table of 2^(64-shift) slots, of a string
// with data address p and length n: the hash tables of both dictionaries
// find strings by where they are stored.
func slotOf(p uintptr, n int, shift int) int {
	return int((uint64(p) ^ uint64(n)<<56) * 0x9e3779b97f4a7c15 >> shift)
}

// Decode decodes data, which must hold exactly one encoded batch, into a new
// batch (from the stream batch pool) of schema. The column types must match
// the schema's. The caller owns the returned batch; it does not alias data.
// Decoding allocates per column (at most one string block and one null bitmap
// each), never per row.
func Decode(data []byte, schema *stream.Schema) (*stream.Batch, error) {
	return decode(data, schema, nil)
}

// decode is Decode; with ch, a string column may refer to ch's channel
// dictionary (form 2), which it updates.
func decode(data []byte, schema *stream.Schema, ch *Decoder) (*stream.Batch, error) {
	d := decoder{buf: data, ch: ch}
	v := d.byte()
	if d.err != nil {
		return nil, d.err
	}
	if v != version && v != versionPlain && v != versionChannel {
		return nil, fmt.Errorf("%w: version %d, this build reads versions %d to %d; upgrade the older taskmanager", ErrCorrupt, v, versionPlain, versionChannel)
	}
	d.packed = v != versionPlain
	d.channel = v == versionChannel
	rows64 := d.uvarint()
	cols64 := d.uvarint()
	flags := d.byte()
	if d.err != nil {
		return nil, d.err
	}
	if rows64 > maxRows {
		return nil, fmt.Errorf("%w: %d rows exceeds the limit of %d", ErrCorrupt, rows64, maxRows)
	}
	if cols64 != uint64(len(schema.Fields)) {
		return nil, fmt.Errorf("%w: %d columns, schema %s has %d", ErrCorrupt, cols64, schema, len(schema.Fields))
	}
	if flags&^flagTimes != 0 {
		return nil, fmt.Errorf("%w: unknown flags %#x", ErrCorrupt, flags)
	}
	n := int(rows64)
	if size, limit := fixedSize(schema, n, flags&flagTimes != 0), decodedFloor+decodedRatio*len(data); size > limit {
		return nil, fmt.Errorf("%w: %d rows of %d columns take %d bytes decoded, more than the %d bytes allowed a batch of %d bytes encoded", ErrCorrupt, n, len(schema.Fields), size, limit, len(data))
	}
	b := stream.NewBatch(schema, 0)
	words := (n + 63) >> 6
	for i := range b.Cols {
		c := &b.Cols[i]
		if t := stream.Type(d.byte()); t != schema.Fields[i].Type {
			if d.err == nil {
				d.err = fmt.Errorf("%w: column %q has type %v, schema says %v", ErrCorrupt, schema.Fields[i].Name, t, schema.Fields[i].Type)
			}
			break
		}
		switch d.byte() {
		case 0:
		case 1:
			raw := d.take(words * 8)
			if d.err != nil {
				break
			}
			c.Nulls = make([]uint64, words)
			for w := range c.Nulls {
				c.Nulls[w] = binary.LittleEndian.Uint64(raw[w*8:])
			}
		default:
			if d.err == nil {
				d.err = fmt.Errorf("%w: column %q: bad null marker", ErrCorrupt, schema.Fields[i].Name)
			}
		}
		if d.err != nil {
			break
		}
		switch c.Type {
		case stream.TypeInt64, stream.TypeTimestamp:
			c.Ints = d.ints(c.Ints, n)
		case stream.TypeFloat64:
			c.Floats = d.float64s(c.Floats, n)
		case stream.TypeBool:
			c.Bools = d.bools(c.Bools, n)
		case stream.TypeString:
			c.Strs = d.stringColumn(c.Strs, n)
		}
		if d.err != nil {
			break
		}
	}
	if d.err == nil && flags&flagTimes != 0 {
		b.Times = d.ints(b.Times, n)
	}
	if d.err == nil && len(d.buf) != 0 {
		d.err = fmt.Errorf("%w: %d trailing bytes", ErrCorrupt, len(d.buf))
	}
	if d.err != nil {
		b.Release()
		return nil, d.err
	}
	b.SetLen(n)
	return b, nil
}

// fixedSize returns the bytes that n rows of schema's values of fixed
// size take decoded, with their event times if times.
func fixedSize(schema *stream.Schema, n int, times bool) int {
	perRow := 0
	for _, f := range schema.Fields {
		switch f.Type {
		case stream.TypeBool:
			perRow++
		case stream.TypeString:
			perRow += 16
		default:
			perRow += 8
		}
	}
	if times {
		perRow += 8
	}
	return n * perRow
}

type decoder struct {
	buf []byte
	err error
	// packed: version 2 or 3 (packed integers, string forms).
	packed bool
	// channel: version 3 (string form 2 allowed); ch, the channel
	// dictionary it refers to (nil: none, and form 2 is an error).
	channel bool
	ch      *Decoder
}

func (d *decoder) fail() {
	if d.err == nil {
		d.err = fmt.Errorf("%w: truncated", ErrCorrupt)
	}
	d.buf = nil
}

func (d *decoder) byte() byte {
	if len(d.buf) == 0 {
		d.fail()
		return 0
	}
	v := d.buf[0]
	d.buf = d.buf[1:]
	return v
}

func (d *decoder) uvarint() uint64 {
	v, k := binary.Uvarint(d.buf)
	if k <= 0 {
		d.fail()
		return 0
	}
	d.buf = d.buf[k:]
	return v
}

func (d *decoder) take(k int) []byte {
	if k < 0 || k > len(d.buf) {
		d.fail()
		return nil
	}
	v := d.buf[:k]
	d.buf = d.buf[k:]
	return v
}

// ints reads n integers: packed ones, or in version 1 n × 8 bytes.
func (d *decoder) ints(dst []int64, n int) []int64 {
	if !d.packed {
		return d.int64s(dst, n)
	}
	w := int(d.byte())
	if d.err != nil {
		return dst[:0]
	}
	if w == 8 {
		return d.int64s(dst, n)
	}
	if w > 8 {
		d.err = fmt.Errorf("%w: integer width %d", ErrCorrupt, w)
		return dst[:0]
	}
	base := d.take(8)
	if d.err != nil {
		return dst[:0]
	}
	lo := binary.LittleEndian.Uint64(base)
	// The values' bytes, and whatever follows them, which whole-word
	// loads may read and mask off.
	rest := d.buf
	if d.take(n * w); d.err != nil {
		return dst[:0]
	}
	dst = resize(dst, n)
	unpack(dst, rest, w, lo)
	return dst
}

// unpack sets dst[i] to base plus the w-byte (w < 8) little-endian
// unsigned integer at src[i*w:]; src holds at least len(dst)*w bytes.
func unpack[T int64 | uint32](dst []T, src []byte, w int, base uint64) {
	if w == 0 {
		for i := range dst {
			dst[i] = T(base)
		}
		return
	}
	switch {
	case w == 1 && len(src) >= len(dst):
		s := src[:len(dst)]
		for i := range dst {
			dst[i] = T(base + uint64(s[i]))
		}
		return
	case w == 2 && len(src) >= 2*len(dst):
		s := src[:2*len(dst)]
		for i := range dst {
			dst[i] = T(base + uint64(binary.LittleEndian.Uint16(s)))
			s = s[2:]
		}
		return
	case w == 4 && len(src) >= 4*len(dst):
		s := src[:4*len(dst)]
		for i := range dst {
			dst[i] = T(base + uint64(binary.LittleEndian.Uint32(s)))
			s = s[4:]
		}
		return
	}
	mask := uint64(1)<<(8*uint(w)) - 1
	i := 0
	for ; i < len(dst) && i*w+8 <= len(src); i++ {
		dst[i] = T(base + binary.LittleEndian.Uint64(src[i*w:])&mask)
	}
	for ; i < len(dst); i++ {
		var v uint64
		for k := w - 1; k >= 0; k-- {
			v = v<<8 | uint64(src[i*w+k])
		}
		dst[i] = T(base + v)
	}
}

func (d *decoder) int64s(dst []int64, n int) []int64 {
	raw := d.take(n * 8)
	if d.err != nil {
		return dst[:0]
	}
	dst = resize(dst, n)
	if littleEndian && n > 0 {
		copy(unsafe.Slice((*byte)(unsafe.Pointer(&dst[0])), n*8), raw)
		return dst
	}
	for i := range dst {
		dst[i] = int64(binary.LittleEndian.Uint64(raw[i*8:]))
	}
	return dst
}

func (d *decoder) float64s(dst []float64, n int) []float64 {
	raw := d.take(n * 8)
	if d.err != nil {
		return dst[:0]
	}
	dst = resize(dst, n)
	if littleEndian && n > 0 {
		copy(unsafe.Slice((*byte)(unsafe.Pointer(&dst[0])), n*8), raw)
		return dst
	}
	for i := range dst {
		dst[i] = math.Float64frombits(binary.LittleEndian.Uint64(raw[i*8:]))
	}
	return dst
}

func (d *decoder) bools(dst []bool, n int) []bool {
	raw := d.take((n + 7) >> 3)
	if d.err != nil {
		return dst[:0]
	}
	dst = resize(dst, n)
	for i := range dst {
		dst[i] = raw[i>>3]&(1<<(uint(i)&7)) != 0
	}
	return dst
}

// scratch holds a dictionary's entries while Decode expands it.
var scratchPool = sync.Pool{New: func() any { return new([]string) }}

// stringColumn reads the n values of a string column.
func (d *decoder) stringColumn(dst []string, n int) []string {
	if !d.packed {
		return d.strings(dst, n)
	}
	switch d.byte() {
	case formPlain:
		return d.strings(dst, n)
	case formDict:
	case formChannel:
		if d.channel && d.ch != nil {
			return d.channelColumn(dst, n)
		}
		if d.err == nil {
			d.err = fmt.Errorf("%w: a string column refers to a channel dictionary, which only its channel's decoder holds", ErrCorrupt)
		}
		return dst[:0]
	default:
		if d.err == nil {
			d.err = fmt.Errorf("%w: unknown string column form", ErrCorrupt)
		}
		return dst[:0]
	}
	k64 := d.uvarint()
	if d.err != nil {
		return dst[:0]
	}
	if k64 == 0 || k64 > uint64(n) {
		d.err = fmt.Errorf("%w: dictionary of %d entries for %d rows", ErrCorrupt, k64, n)
		return dst[:0]
	}
	k := int(k64)
	sp := scratchPool.Get().(*[]string)
	defer func() { clear(*sp); scratchPool.Put(sp) }()
	entries := d.strings(*sp, k)
	*sp = entries
	if d.err != nil {
		return dst[:0]
	}
	return d.lookup(dst, n, entries)
}

// lookup reads n dictionary entry numbers, packed integers of base 0 and
// at most 4 bytes, and returns dst holding the entries they name.
func (d *decoder) lookup(dst []string, n int, entries []string) []string {
	w := int(d.byte())
	base := d.take(8)
	if d.err != nil {
		return dst[:0]
	}
	if w > 4 || binary.LittleEndian.Uint64(base) != 0 {
		d.err = fmt.Errorf("%w: dictionary entry numbers of width %d and base %d", ErrCorrupt, w, binary.LittleEndian.Uint64(base))
		return dst[:0]
	}
	rest := d.buf
	if d.take(n * w); d.err != nil {
		return dst[:0]
	}
	k := len(entries)
	switch w {
	case 1:
		// Entry numbers of one or two bytes are checked in one pass and
		// looked up in a second, without unpacking them first.
		s := rest[:n]
		if n > 0 && int(maxOf(s)) >= k {
			return d.badEntry(dst, s, n, 1, k)
		}
		dst = resize(dst, n)
		for i, x := range s {
			dst[i] = entries[x]
		}
		return dst
	case 2:
		// rest as n pairs of bytes (take checked their length), so that
		// the loops need no bounds checks.
		s := unsafe.Slice((*[2]byte)(unsafe.Pointer(unsafe.SliceData(rest))), n)
		hi := 0
		for _, b := range s {
			hi = max(hi, int(b[0])|int(b[1])<<8)
		}
		if n > 0 && hi >= k {
			return d.badEntry(dst, rest, n, 2, k)
		}
		dst = resize(dst, n)
		for i, b := range s {
			dst[i] = entries[int(b[0])|int(b[1])<<8]
		}
		return dst
	}
	ip := idxPool.Get().(*[]uint32)
	defer idxPool.Put(ip)
	idx := resize(*ip, n)
	*ip = idx
	unpack(idx, rest, w, 0)
	dst = resize(dst, n)
	for i, x := range idx {
		if x >= uint32(k) {
			clear(dst)
			d.err = fmt.Errorf("%w: row %d names dictionary entry %d of %d", ErrCorrupt, i, x, k)
			return dst[:0]
		}
		dst[i] = entries[x]
	}
	return dst
}

// maxOf returns the greatest byte of s (0 for none).
func maxOf(s []byte) byte {
	var m byte
	for _, b := range s {
		m = max(m, b)
	}
	return m
}

// badEntry fails d for the first entry number of the n packed in s, w
// bytes each (1 or 2), that is not below k, and returns dst empty.
func (d *decoder) badEntry(dst []string, s []byte, n, w, k int) []string {
	for i := range n {
		x := int(s[i*w])
		if w == 2 {
			x |= int(s[i*w+1]) << 8
		}
		if x >= k {
			d.err = fmt.Errorf("%w: row %d names dictionary entry %d of %d", ErrCorrupt, i, x, k)
			break
		}
	}
	return dst[:0]
}

var idxPool = sync.Pool{New: func() any { return new([]uint32) }}

// strings reads a string block of n strings.
func (d *decoder) strings(dst []string, n int) []string {
	total := d.uvarint()
	if d.err != nil {
		return dst[:0]
	}
	if total > uint64(len(d.buf)) {
		d.fail()
		return dst[:0]
	}
	// Every length takes at least one byte.
	if uint64(n) > uint64(len(d.buf))-total {
		d.fail()
		return dst[:0]
	}
	block := string(d.take(int(total))) // the column's one allocation
	dst = resize(dst, n)
	off := 0
	for i := range dst {
		l, k := binary.Uvarint(d.buf)
		if k <= 0 || l > uint64(len(block)-off) {
			clear(dst)
			d.fail()
			return dst[:0]
		}
		d.buf = d.buf[k:]
		dst[i] = block[off : off+int(l)]
		off += int(l)
	}
	if off != len(block) {
		clear(dst)
		if d.err == nil {
			d.err = fmt.Errorf("%w: string lengths sum to %d, block holds %d bytes", ErrCorrupt, off, len(block))
		}
		return dst[:0]
	}
	return dst
}

func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}
