package pebblestate

import (
	"bytes"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/statebackend/internal/chunk"
)

// table is one state table: a name in the registry with a numeric id that
// prefixes its keys in every key group. Until it is registered (asked for
// with Backend.Table) it has no codecs, only the IDs of the codecs it was
// written with, if known.
type table struct {
	b          *Backend
	name       string
	id         uint64
	kind       statebackend.Kind
	d          statebackend.Descriptor
	registered bool
	// Codec IDs as persisted in the registry; empty when unknown (state
	// restored from snapshot chunks, which do not carry them).
	codecID, ukCodecID string
	// sweep is the state key where the next clean-up of a table with a
	// SnapshotFilter starts (nil: at the first key group); see filter.go.
	sweep []byte
}

var (
	_ statebackend.Table        = (*table)(nil)
	_ statebackend.Peeker       = (*table)(nil)
	_ statebackend.SizedWriter  = (*table)(nil)
	_ statebackend.EncodedTable = (*table)(nil)
)

func (t *table) Descriptor() statebackend.Descriptor { return t.d }

// key returns the current key's key in t (with userKey for map state), in
// the backend's key buffer.
func (t *table) key(userKey []byte) []byte {
	b := t.b
	b.kbuf = appendStateKey(b.kbuf[:0], b.keyGroup, t.id, b.key)
	if t.kind == statebackend.KindMap {
		b.kbuf = append(b.kbuf, userKey...)
	}
	return b.kbuf
}

func (t *table) Get(userKey []byte) (any, bool) {
	b := t.b
	if b.closed {
		return nil, false
	}
	e := b.entry(t.key(userKey), true)
	if e.cur < 0 {
		b.settle()
		return nil, false
	}
	if e.flags&entDecoded != 0 {
		v := b.cache.decoded(b.cache.lastSlot)
		b.settle()
		return v, true
	}
	v, err := t.d.Codec.DecodeValue(e.enc())
	if err != nil {
		// Values are written by this codec, and restored ones checked
		// when the table was asked for: the codec is broken.
		panic(fmt.Sprintf("pebble state backend: %s state %q, key %s: stored value does not decode with codec %s: %v",
			t.kind, t.name, chunk.Printable(b.key), t.d.Codec.ID(), err))
	}
	b.cache.setDecoded(e, v)
	b.settle()
	return v, true
}

// Peek implements statebackend.Peeker: a key the value cache holds is
// read as Get reads it; another is read from the batch or Pebble and
// decoded without its value entering the cache, which keeps only the
// value's length (a stub entry), so that a Put or Delete that follows
// does not read it again.
func (t *table) Peek(userKey []byte) (any, bool) {
	v, ok, _ := t.PeekLen(userKey)
	return v, ok
}

// PeekLen implements statebackend.SizedWriter.
func (t *table) PeekLen(userKey []byte) (any, bool, int) {
	b := t.b
	if b.closed {
		return nil, false, -1
	}
	k := t.key(userKey)
	if e := b.cache.lookup(k); e != nil && e.flags&entStub == 0 {
		n := int(e.cur)
		v, ok := t.Get(userKey)
		return v, ok, n
	}
	enc, found, err := b.get(k, nil)
	if err != nil {
		b.fail(fmt.Errorf("pebble state backend: key %s: read: %w", chunk.Printable(k), err))
		return nil, false, -1
	}
	// The cache remembers the value's length, so that writing the key
	// back (Put, Delete) does not read it again.
	n := -1
	if found {
		n = len(enc)
	}
	b.cache.stub(k, n)
	b.settle()
	if !found {
		return nil, false, -1
	}
	v, err := t.d.Codec.DecodeValue(enc)
	if err != nil {
		panic(fmt.Sprintf("pebble state backend: %s state %q, key %s: stored value does not decode with codec %s: %v",
			t.kind, t.name, chunk.Printable(b.key), t.d.Codec.ID(), err))
	}
	return v, true, n
}

// PutLen implements statebackend.SizedWriter: if the value cache does not
// hold the key, it records old as the key's stored length (a stub entry,
// as Peek leaves), so that Put does not read the key.
func (t *table) PutLen(userKey []byte, v any, old int) int {
	b := t.b
	if b.closed {
		return old
	}
	b.cache.stub(t.key(userKey), old)
	t.Put(userKey, v)
	if b.err != nil {
		return old
	}
	return len(b.vbuf) // Put's encoding
}

// DeleteLen implements statebackend.SizedWriter, as PutLen.
func (t *table) DeleteLen(userKey []byte, old int) {
	b := t.b
	if b.closed {
		return
	}
	b.cache.stub(t.key(userKey), old)
	t.Delete(userKey)
}

// Put encodes v (so that an encoding error is reported here and SizeBytes
// stays exact) and keeps both forms in the value cache; Pebble sees the
// value when the entry is written back.
func (t *table) Put(userKey []byte, v any) {
	b := t.b
	if b.closed {
		return
	}
	var err error
	b.vbuf, err = t.d.Codec.AppendValue(b.vbuf[:0], v)
	if err != nil {
		b.fail(fmt.Errorf("pebble state backend: %s state %q, key %s: value does not encode with codec %s: %w",
			t.kind, t.name, chunk.Printable(b.key), t.d.Codec.ID(), err))
		return
	}
	e := t.putEnc(t.key(userKey), b.vbuf)
	b.cache.setDecoded(e, v)
	b.settle()
}

// putEnc makes enc the cached value of state key k and returns its entry;
// the caller settles.
func (t *table) putEnc(k, enc []byte) *cacheEntry {
	b := t.b
	e := b.entry(k, false)
	if !cachedValue(e, enc) {
		b.account(k, int(e.cur), len(enc))
		b.cache.setEnc(e, enc)
		b.cache.markDirty(e)
	}
	return e
}

// GetEncoded implements statebackend.EncodedTable.
func (t *table) GetEncoded() ([]byte, bool) {
	b := t.b
	if b.closed {
		return nil, false
	}
	e := b.entry(t.key(nil), true)
	if e.cur < 0 {
		b.settle()
		return nil, false
	}
	// An entry settle evicts keeps its allocation until the collector
	// finds it unreferenced: enc stays valid.
	enc := e.enc()
	b.settle()
	return enc, true
}

// PutEncoded implements statebackend.EncodedTable.
func (t *table) PutEncoded(enc []byte) {
	b := t.b
	if b.closed {
		return
	}
	t.putEnc(t.key(nil), enc)
	b.settle()
}

func (t *table) Delete(userKey []byte) {
	b := t.b
	if b.closed {
		return
	}
	k := t.key(userKey)
	e := b.entry(k, false)
	if e.cur >= 0 {
		b.account(k, int(e.cur), -1)
		b.cache.setAbsent(e)
		b.cache.markDirty(e)
	}
	b.settle()
}

// Range reads the current key's entries a page at a time, so that no
// iterator is open while fn runs (fn may delete the entry it is given).
func (t *table) Range(fn func(userKey []byte, v any) bool) {
	b := t.b
	if b.closed {
		return
	}
	if t.kind != statebackend.KindMap {
		if v, ok := t.Get(nil); ok {
			fn(nil, v)
		}
		return
	}
	prefix := bytes.Clone(t.key(nil))
	lower, upper := prefix, prefixEnd(prefix)
	const page = 128
	type entry struct{ uk, v []byte }
	entries := make([]entry, 0, page)
	var arena []byte
	var lens []int // user key and value lengths, in pairs
	for {
		entries, arena, lens = entries[:0], arena[:0], lens[:0]
		b.flush()
		it, err := b.newIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
		if err != nil {
			b.fail(err)
			return
		}
		for ok := it.First(); ok && len(lens) < 2*page; ok = it.Next() {
			uk := it.Key()[len(prefix):]
			arena = append(append(arena, uk...), it.Value()...)
			lens = append(lens, len(uk), len(it.Value()))
		}
		if err := it.Close(); err != nil {
			b.fail(err)
			return
		}
		off := 0
		for i := 0; i < len(lens); i += 2 {
			nu, nv := lens[i], lens[i+1]
			entries = append(entries, entry{
				uk: arena[off : off+nu : off+nu],
				v:  arena[off+nu : off+nu+nv : off+nu+nv],
			})
			off += nu + nv
		}
		for _, e := range entries {
			v, err := t.d.Codec.DecodeValue(e.v)
			if err != nil {
				panic(fmt.Sprintf("pebble state backend: map state %q, key %s: stored value does not decode with codec %s: %v",
					t.name, chunk.Printable(b.key), t.d.Codec.ID(), err))
			}
			if !fn(e.uk, v) || b.closed {
				return
			}
		}
		if len(entries) < page {
			return
		}
		last := entries[len(entries)-1].uk
		lower = append(append(bytes.Clone(prefix), last...), 0)
	}
}

func (t *table) Clear() {
	b := t.b
	if b.closed {
		return
	}
	if t.kind != statebackend.KindMap {
		t.Delete(nil)
		return
	}
	b.clearPrefix(bytes.Clone(t.key(nil)))
}

// clearPrefix deletes every key starting with prefix, a page at a time,
// and drops the keys from the value cache.
func (b *Backend) clearPrefix(prefix []byte) {
	upper := prefixEnd(prefix)
	type entry struct {
		k []byte
		n int
	}
	const page = 256
	for {
		var entries []entry
		b.flush()
		it, err := b.newIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: upper})
		if err != nil {
			b.fail(err)
			return
		}
		for ok := it.First(); ok && len(entries) < page; ok = it.Next() {
			entries = append(entries, entry{bytes.Clone(it.Key()), len(it.Value())})
		}
		if err := it.Close(); err != nil {
			b.fail(err)
			return
		}
		for _, e := range entries {
			b.dropKey(e.k)
			b.del(e.k, e.n)
		}
		if len(entries) < page {
			return
		}
	}
}

// validate checks that every value (and user key) of the restored table t
// decodes with d's codecs. It changes nothing.
func (t *table) validate(d statebackend.Descriptor) error {
	b := t.b
	b.flush()
	if err := b.commit(); err != nil {
		return err
	}
	for kg := b.kg.Start; kg <= b.kg.End; kg++ {
		prefix := appendTablePrefix(nil, kg, t.id)
		it, err := b.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
		if err != nil {
			return err
		}
		for ok := it.First(); ok; ok = it.Next() {
			key, uk, good := parseStateKey(it.Key()[len(prefix):])
			what, codec := "value", d.Codec
			if good && t.kind == statebackend.KindMap {
				if _, err = d.UserKeyCodec.DecodeValue(uk); err != nil {
					what, codec = "user key", d.UserKeyCodec
				}
			}
			if good && err == nil {
				_, err = d.Codec.DecodeValue(it.Value())
			}
			if !good {
				err = fmt.Errorf("bad key encoding")
			}
			if err != nil {
				where := fmt.Sprintf("key %s", chunk.Printable(key))
				if t.kind == statebackend.KindMap {
					where += fmt.Sprintf(", user key %s", chunk.Printable(uk))
				}
				it.Close()
				return fmt.Errorf("pebble state backend: restored %s state %q, key group %d, %s: %s does not decode with codec %s: %w; the state was written with another codec or type",
					t.kind, t.name, kg, where, what, codec.ID(), err)
			}
		}
		if err := it.Close(); err != nil {
			return err
		}
	}
	return nil
}
