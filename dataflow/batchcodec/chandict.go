package batchcodec

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"runtime/metrics"
	"strings"
	"unsafe"

	"github.com/weirstream/weir/stream"
)

// This file is the channel dictionary: the string dictionary that one
// channel's Encoder and Decoder keep across batches, so that a string
// column whose values recur from batch to batch sends each value once per
// channel instead of once per batch (the per-batch dictionary of form 1).
// A batch that adds values carries them as a delta, which the decoder
// applies before it reads the column's entry numbers. Like the delta
// dictionaries of Arrow's IPC streams, it needs the batches of a channel
// decoded in the order they were encoded, each once; the exchange keeps
// that order on every channel.
//
// A string column in form 2 starts with base, the number of entries the
// dictionary keeps (0 forgets them all), and the entries it adds after
// them. An encoder only ever writes as base the number of entries it has
// when the column starts, or 0; a decoder accepts any base up to the
// number it has, so that a copy of a dictionary taken after some batches
// were encoded (Encoder.Decoder) still decodes them.

// MaxDictBytes bounds the size of a channel dictionary, its values'
// bytes and entryCost for each: a Decoder refuses a batch that would take
// it beyond, and an Encoder never keeps more than its own limit, at most
// this.
const MaxDictBytes = 16 << 20

// entryCost is what an entry costs beyond its value's bytes in the size
// of a dictionary, about what the encoder keeps for it (a string header,
// a key and two hash slots), so that the size bounds the memory of a
// dictionary of short values too.
const entryCost = 64

// maxDictEntries bounds the entries of a channel dictionary, so that an
// entry number takes at most 2 bytes (and one plus it fits chanSlot.ref).
const maxDictEntries = 1<<16 - 1

// maxColdBatches bounds the batches a string column whose values do not
// recur stays out of the channel dictionary (appendColumn).
const maxColdBatches = 256

// An Encoder encodes the batches of one channel, in order, with a channel
// dictionary. It is not safe for concurrent use.
type Encoder struct {
	limit int // bytes of entries kept at most

	// entries are the dictionary's values by entry number, copies the
	// encoder owns; keys the data address each was added for, the key of
	// its slot; size the size of entries (their bytes and entryCost
	// each).
	entries []string
	keys    []uintptr
	size    int

	// slots is an open-addressing hash table from a string's data address
	// and length to its entry, at most half full. A slot's entry is only
	// trusted after its value was compared with the string's: once the
	// strings of a batch are garbage, their addresses can be reused for
	// other values. seen marks a slot compared in the current epoch (seq),
	// during which an address compared holds the same value: AppendBatches
	// calls that forgot no entries, with no garbage collection finished
	// between them (begin).
	slots []chanSlot
	seq   uint16

	// gcCycles returns the garbage collections finished so far (the
	// runtime's count; a test's stand-in); gc is its value at the epoch's
	// start.
	gcCycles func() uint64
	gc       uint64

	cols []chanColumn // by column number
	idx  []uint32

	// trans translates the codes of the dictionaries string columns
	// name (lookupCodes), for the last maxHintDicts seen; codes is
	// scratch space.
	trans []dictTranslation
	codes []int32
}

// chanColumn is what an Encoder knows of one string column: the values it
// added to the dictionary and those it found there since the dictionary
// was last emptied, and, for a column kept out (appendColumn), the batches
// still to skip and the length of the next skip.
type chanColumn struct {
	adds, hits    int
	cold, backoff int
}

// stayOut keeps the column out of the dictionary for its next batches,
// twice as many as the last time, up to maxColdBatches.
func (c *chanColumn) stayOut() {
	c.backoff = min(max(2*c.backoff, 1), maxColdBatches)
	c.cold = c.backoff
}

// chanSlot is 16 bytes, so that a table of a few thousand entries stays
// in the L2 cache.
type chanSlot struct {
	ptr  uintptr // as in slot: compared, never dereferenced
	n    uint32  // values of 4 GiB or more are not kept
	ref  uint16  // entry number + 1; 0: the slot is free
	seen uint16
}

// NewEncoder returns an Encoder whose channel dictionary keeps at most
// limitBytes (at most MaxDictBytes): the bytes of its values and 64 bytes
// an entry.
func NewEncoder(limitBytes int) *Encoder {
	return &Encoder{limit: min(max(limitBytes, 0), MaxDictBytes), gcCycles: gcCyclesDone}
}

// gcCyclesDone returns the garbage collections the runtime finished.
func gcCyclesDone() uint64 {
	s := [1]metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s[:])
	return s[0].Value.Uint64()
}

// AppendBatches is the package's AppendBatches with e's channel
// dictionary: the batches it returns must be decoded in order by one
// Decoder. mayReset allows it to forget its entries when it has no room for
// new ones; a caller that may still have to decode earlier batches with
// e.Decoder passes false.
func (e *Encoder) AppendBatches(dst []byte, bs []*stream.Batch, mayReset bool) []byte {
	return appendBatches(dst, bs, e, mayReset)
}

// Len returns the entries e's dictionary holds and their size (their
// bytes and 64 an entry).
func (e *Encoder) Len() (entries, bytes int) { return len(e.entries), e.size }

// Decoder returns a Decoder holding e's dictionary as it is now. It decodes
// the batches e encoded since it last forgot its entries, in order.
func (e *Encoder) Decoder() *Decoder {
	return (&Decoder{entries: e.entries, size: e.size}).Clone()
}

// begin starts an AppendBatches call, and a new epoch if a garbage
// collection finished since the last one started.
//
// An epoch may span calls. The collector frees memory only in the sweep
// that follows a collection's mark phase, and the count of finished
// collections goes up while the world is stopped at the end of that phase,
// before any sweep. A string compared in this epoch was live when it was
// compared (its batch held it), so no collection finished before then
// frees it, and while the count stays as read at the epoch's start no
// later one has finished. So an address compared in this epoch still holds
// the same object, and a later batch's string at that address and length
// has the same bytes: strings are immutable, however a source made them.
// The count is read before the batches are encoded; their strings exist
// already.
func (e *Encoder) begin() {
	if c := e.gcCycles(); c != e.gc || e.seq == 0 {
		e.gc = c
		e.newEpoch()
	}
}

// newEpoch starts an epoch: no slot counts as compared.
func (e *Encoder) newEpoch() {
	e.seq++
	if e.seq == 0 { // wrapped: no slot may look compared
		for i := range e.slots {
			e.slots[i].seen = 0
		}
		e.seq = 1
	}
}

// appendColumn appends column j, n strings given in parts, in form 2 and
// reports true, or appends nothing and reports false when the column does
// not suit the dictionary now.
//
// A column adds its new values until the dictionary is full. Then, if the
// column found at least as many of its values as it added since the
// dictionary was last emptied (its values recur) and mayReset, the
// dictionary forgets every entry and the column starts it anew; otherwise
// the column stays out for its next 1, 2, 4, … maxColdBatches batches, and
// its entries stay until the next reset. A batch of which more than three
// quarters of the values are new also keeps the column out for a while:
// its values mostly do not recur (ids, free text, or equal values that a
// source stores apart, which the dictionary, keyed by data address like
// the per-batch one, does not find).
func (e *Encoder) appendColumn(dst []byte, j int, parts [][]string, hints []*stream.StringDict, n int, mayReset bool) ([]byte, bool) {
	if j >= len(e.cols) {
		e.cols = append(e.cols, make([]chanColumn, j+1-len(e.cols))...)
	}
	c := &e.cols[j]
	if n == 0 {
		return dst, false
	}
	if c.cold > 0 {
		c.cold--
		return dst, false
	}
	if cap(e.idx) < n {
		e.idx = make([]uint32, n)
	}
	idx := e.idx[:n]
	start := len(e.entries)
	hi, ok := e.lookupAll(parts, hints, idx)
	if !ok {
		e.rollback(start)
		if !mayReset || start == 0 || c.hits < c.adds {
			c.stayOut()
			return dst, false
		}
		e.reset()
		start = 0
		if hi, ok = e.lookupAll(parts, hints, idx); !ok {
			e.rollback(0)
			c.stayOut()
			return dst, false
		}
	}
	adds := len(e.entries) - start
	c.adds += adds
	c.hits += n - adds
	if 4*adds > 3*n {
		c.stayOut()
	} else {
		c.backoff = 0
	}
	dst = append(dst, formChannel)
	dst = binary.AppendUvarint(dst, uint64(start))
	dst = binary.AppendUvarint(dst, uint64(adds))
	if adds > 0 {
		one := [1][]string{e.entries[start:]}
		dst = appendStringBlock(dst, one[:])
	}
	// The entry numbers take the width the greatest of them needs, not
	// the dictionary's size: a column of a few values added early (a
	// country next to a thousand URLs) takes a byte a row.
	return appendPackedIndexes(dst, idx, int(hi)+1), true
}

// lookupAll is lookup, or lookupCodes for the parts with a dictionary
// (hints, by part; nil when no part has one).
func (e *Encoder) lookupAll(parts [][]string, hints []*stream.StringDict, idx []uint32) (hi uint32, ok bool) {
	if len(hints) == 0 {
		return e.lookup(parts, idx)
	}
	for k, v := range parts {
		var h uint32
		if hints[k] != nil {
			h, ok = e.lookupCodes(v, hints[k], idx)
		} else {
			h, ok = e.lookup(parts[k:k+1], idx)
		}
		if !ok {
			return 0, false
		}
		hi, idx = max(hi, h), idx[len(v):]
	}
	return hi, true
}

// lookupCodes is lookup for one part whose column names dictionary d
// (stream.Column.Dict): a row that holds one of d's values, as d stores it,
// takes the entry number found for that value before, without hashing.
// Other rows, and a value's first row, take lookup's way.
func (e *Encoder) lookupCodes(v []string, d *stream.StringDict, idx []uint32) (hi uint32, ok bool) {
	tr := e.translation(d)
	if tr == nil {
		return e.lookup([][]string{v}, idx)
	}
	if cap(e.codes) < len(v) {
		e.codes = make([]int32, len(v))
	}
	codes := e.codes[:len(v)]
	d.CodesOf(v, codes)
	for i, c := range codes {
		if c >= 0 {
			if t := tr[c]; t != 0 {
				idx[i], hi = uint32(t-1), max(hi, uint32(t-1))
				continue
			}
		}
		x, ok := e.lookupOne(v[i])
		if !ok {
			return 0, false
		}
		if c >= 0 {
			tr[c] = uint16(x + 1)
		}
		idx[i], hi = x, max(hi, x)
	}
	return hi, true
}

// lookupOne is lookup for one string.
func (e *Encoder) lookupOne(s string) (uint32, bool) {
	var x [1]uint32
	one := [1][]string{{s}}
	return e.lookup(one[:], x[:])
}

// maxHintDicts bounds the dictionaries an Encoder keeps translations for.
// Their memory, 2 bytes a value, is bounded too, to a quarter of the
// encoder's limit (translationBytes): a column whose dictionary is larger
// than that is encoded as without one.
const maxHintDicts = 8

// translationBytes is the memory translations of a dictionary of n values
// take.
func translationBytes(n int) int { return 2 * n }

// dictTranslation maps the codes of one dictionary to entry numbers, plus
// one (0: not known yet). Every number in it is below len(Encoder.entries):
// rollback and reset clear what they remove. Holding dict keeps its
// values' memory from being reused for other values.
type dictTranslation struct {
	dict    *stream.StringDict
	entries []uint16
}

// translation returns the translation of d's codes, making one in place of
// the oldest ones when there are maxHintDicts or their memory would exceed
// a quarter of the limit, or nil when d alone would.
func (e *Encoder) translation(d *stream.StringDict) []uint16 {
	for i := range e.trans {
		if e.trans[i].dict == d {
			return e.trans[i].entries
		}
	}
	budget := e.limit / 4
	if d.Len() > maxDictEntries || translationBytes(d.Len()) > budget {
		return nil
	}
	used := translationBytes(d.Len())
	for _, t := range e.trans {
		used += translationBytes(len(t.entries))
	}
	for len(e.trans) > 0 && (len(e.trans) >= maxHintDicts || used > budget) {
		used -= translationBytes(len(e.trans[0].entries))
		copy(e.trans, e.trans[1:])
		e.trans[len(e.trans)-1] = dictTranslation{}
		e.trans = e.trans[:len(e.trans)-1]
	}
	t := dictTranslation{dict: d, entries: make([]uint16, d.Len())}
	e.trans = append(e.trans, t)
	return t.entries
}

// forgetTranslations drops every translation to an entry number of at
// least start.
func (e *Encoder) forgetTranslations(start int) {
	for i := range e.trans {
		for c, t := range e.trans[i].entries {
			if int(t) > start {
				e.trans[i].entries[c] = 0
			}
		}
	}
}

// lookup sets idx to the entry numbers of the strings of parts, adding the
// strings it does not find, and returns the greatest entry number and
// whether the dictionary had room for them.
func (e *Encoder) lookup(parts [][]string, idx []uint32) (hi uint32, ok bool) {
	if len(e.slots) == 0 {
		e.slots = make([]chanSlot, 256)
	}
	slots, seq := e.slots, e.seq
	mask := len(slots) - 1
	shift := 64 - bits.Len(uint(mask))
	for _, v := range parts {
		for i, s := range v {
			p, l := uintptr(unsafe.Pointer(unsafe.StringData(s))), uint32(len(s))
			if int(l) != len(s) {
				return 0, false // 4 GiB or more
			}
			if l == 0 {
				p = 0
			}
			h := slotOf(p, int(l), shift)
			for {
				sl := &slots[h]
				if sl.ref != 0 && (sl.ptr != p || sl.n != l) {
					h = (h + 1) & mask
					continue
				}
				if sl.ref != 0 {
					x := uint32(sl.ref - 1)
					if sl.seen == seq {
						idx[i], hi = x, max(hi, x)
						break
					}
					if int(x) < len(e.entries) && e.entries[x] == s {
						sl.seen = seq
						idx[i], hi = x, max(hi, x)
						break
					}
					// The slot's entry is another value now: a new
					// entry takes the slot.
				}
				if len(e.entries) >= maxDictEntries || len(s) > e.limit-e.size-entryCost {
					return 0, false
				}
				x := uint32(len(e.entries))
				e.entries = append(e.entries, strings.Clone(s))
				e.keys = append(e.keys, p)
				e.size += len(s) + entryCost
				*sl = chanSlot{ptr: p, n: l, ref: uint16(x + 1), seen: seq}
				idx[i], hi = x, x
				if 2*len(e.entries) > len(slots) {
					e.grow()
					slots = e.slots
					mask = len(slots) - 1
					shift = 64 - bits.Len(uint(mask))
				}
				break
			}
		}
		idx = idx[len(v):]
	}
	return hi, true
}

// grow doubles the hash table and fills it from the entries; of the
// entries added for one key, the last one wins.
func (e *Encoder) grow() {
	e.slots = make([]chanSlot, 2*len(e.slots))
	e.fill()
}

// fill fills the (clear) hash table from the entries. Slots filled this way
// are not compared yet.
func (e *Encoder) fill() {
	mask := len(e.slots) - 1
	shift := 64 - bits.Len(uint(mask))
	for x, p := range e.keys {
		l := uint32(len(e.entries[x]))
		h := slotOf(p, int(l), shift)
		for {
			sl := &e.slots[h]
			if sl.ref == 0 || sl.ptr == p && sl.n == l {
				*sl = chanSlot{ptr: p, n: l, ref: uint16(x + 1)}
				break
			}
			h = (h + 1) & mask
		}
	}
}

// rollback forgets the entries from start on, which no batch carries, and
// starts a new epoch: their numbers go to other values.
func (e *Encoder) rollback(start int) {
	if start == len(e.entries) {
		return
	}
	for _, s := range e.entries[start:] {
		e.size -= len(s) + entryCost
	}
	clear(e.entries[start:])
	e.entries = e.entries[:start]
	e.keys = e.keys[:start]
	e.forgetTranslations(start)
	clear(e.slots)
	e.fill()
	e.newEpoch()
}

// reset forgets every entry.
func (e *Encoder) reset() {
	clear(e.entries)
	e.entries, e.keys, e.size = e.entries[:0], e.keys[:0], 0
	e.forgetTranslations(0)
	clear(e.slots)
	for i := range e.cols {
		e.cols[i].adds, e.cols[i].hits = 0, 0
	}
	e.newEpoch()
}

// UsesChannelDictionary reports whether data, an encoded batch, is of the
// version whose string columns may refer to a channel dictionary: one an
// Encoder wrote.
func UsesChannelDictionary(data []byte) bool {
	return len(data) > 0 && data[0] == versionChannel
}

// A Decoder decodes the batches one Encoder encoded, in order, keeping the
// same channel dictionary. It is not safe for concurrent use. After an
// error its dictionary is undefined: the channel is broken.
type Decoder struct {
	entries []string
	size    int // as Encoder.size
}

// Decode is the package's Decode for a batch of the Decoder's channel.
func (d *Decoder) Decode(data []byte, schema *stream.Schema) (*stream.Batch, error) {
	return decode(data, schema, d)
}

// Clone returns a Decoder holding d's dictionary as it is now, which
// decodes what d would decode next without changing d.
func (d *Decoder) Clone() *Decoder {
	return &Decoder{entries: append([]string(nil), d.entries...), size: d.size}
}

// channelColumn reads the n values of a string column in form 2.
func (d *decoder) channelColumn(dst []string, n int) []string {
	ch := d.ch
	base64, added64 := d.uvarint(), d.uvarint()
	if d.err != nil {
		return dst[:0]
	}
	if base64 > uint64(len(ch.entries)) || added64 > maxDictEntries-base64 {
		d.err = fmt.Errorf("%w: channel dictionary of %d entries keeps %d and adds %d (at most %d)",
			ErrCorrupt, len(ch.entries), base64, added64, maxDictEntries)
		return dst[:0]
	}
	base, added := int(base64), int(added64)
	if base < len(ch.entries) {
		clear(ch.entries[base:])
		ch.entries = ch.entries[:base]
		ch.size = 0
		for _, s := range ch.entries {
			ch.size += len(s) + entryCost
		}
	}
	if added > 0 {
		sp := scratchPool.Get().(*[]string)
		defer func() { clear(*sp); scratchPool.Put(sp) }()
		*sp = d.strings(*sp, added)
		if d.err != nil {
			return dst[:0]
		}
		size := ch.size
		for _, s := range *sp {
			size += len(s) + entryCost
		}
		if size > MaxDictBytes {
			d.err = fmt.Errorf("%w: channel dictionary of %d bytes exceeds the limit of %d", ErrCorrupt, size, MaxDictBytes)
			return dst[:0]
		}
		ch.entries, ch.size = append(ch.entries, *sp...), size
	}
	return d.lookup(dst, n, ch.entries)
}
