package keyed

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/weirstream/weir/stream"
)

// keyState maps the keys of an input (the values of its key fields) to one
// int64 per key, and remembers each key's key group so that it can be
// snapshotted per key group.
//
// Checkpoint format: one chunk of keyed state per key group with keys
// (SnapshotContext.WriteKeyGroup); varint and uvarint as in encoding/binary:
//
//	byte    version = 1
//	uvarint key group
//	uvarint number of key fields, then one stream.Type byte per field
//	uvarint number of keys, then per key:
//	    uvarint length and the encoded key: per key field, byte 1 for null,
//	    else 0 and the value (int64 and timestamp: varint; float64: 8 bytes
//	    little-endian IEEE 754 bits; string: uvarint length and bytes; bool:
//	    one byte)
//	    varint value
//
// A keyState is not safe for concurrent use.
type keyState struct {
	in      *stream.Schema
	keyCols []int
	maxPar  int
	// intKey: the key is one int64 or timestamp field, whose non-null
	// values are looked up in ints; every other key in index, by encoding.
	intKey bool
	ints   map[int64]int32
	index  map[string]int32
	enc    []string // encoded key of each id
	group  []int32  // key group of each id
	vals   []int64  // the value of each id

	ids    []int32 // per-batch scratch
	hashes []uint64
	hashed bool
	buf    []byte
}

func newKeyState(in *stream.Schema, keyCols []int, maxPar int) *keyState {
	if maxPar <= 0 {
		maxPar = stream.DefaultMaxParallelism
	}
	s := &keyState{in: in, keyCols: keyCols, maxPar: maxPar, index: make(map[string]int32)}
	if len(keyCols) == 1 {
		t := in.Fields[keyCols[0]].Type
		s.intKey = t == stream.TypeInt64 || t == stream.TypeTimestamp
		s.ints = make(map[int64]int32)
	}
	return s
}

// lookup returns the id of every row's key, adding new keys with value 0.
// The slice is valid until the next call.
func (s *keyState) lookup(b *stream.Batch) []int32 {
	n := b.Len()
	if cap(s.ids) < n {
		s.ids = make([]int32, n)
		s.hashes = make([]uint64, n)
	}
	ids := s.ids[:n]
	s.hashed = false
	if s.intKey {
		if c := &b.Cols[s.keyCols[0]]; c.Nulls == nil {
			for i, v := range c.Ints[:n] {
				id, ok := s.ints[v]
				if !ok {
					id = s.add(b, i)
				}
				ids[i] = id
			}
			return ids
		}
	}
	for i := range ids {
		ids[i] = s.id(b, i)
	}
	return ids
}

// id returns the id of row i's key, adding it if new.
func (s *keyState) id(b *stream.Batch, i int) int32 {
	if s.intKey {
		if c := &b.Cols[s.keyCols[0]]; !isNull(c, i) {
			if id, ok := s.ints[c.Ints[i]]; ok {
				return id
			}
			return s.add(b, i)
		}
	}
	s.buf = s.encode(s.buf[:0], b, i)
	if id, ok := s.index[string(s.buf)]; ok {
		return id
	}
	return s.add(b, i)
}

// add adds row i's key, which is not in the table, with value 0.
func (s *keyState) add(b *stream.Batch, i int) int32 {
	if !s.hashed {
		if cap(s.hashes) < b.Len() {
			s.hashes = make([]uint64, b.Len())
		}
		padNulls(b)
		stream.HashKeys(b, s.keyCols, s.hashes[:b.Len()])
		s.hashed = true
	}
	id := int32(len(s.vals))
	enc := string(s.encode(nil, b, i))
	s.enc = append(s.enc, enc)
	s.group = append(s.group, int32(stream.KeyGroupForHash(s.hashes[i], s.maxPar)))
	s.vals = append(s.vals, 0)
	if c := &b.Cols[s.keyCols[0]]; s.intKey && !isNull(c, i) {
		s.ints[c.Ints[i]] = id
	} else {
		s.index[enc] = id
	}
	return id
}

// encode appends the encoding of row i's key.
func (s *keyState) encode(buf []byte, b *stream.Batch, i int) []byte {
	for _, kc := range s.keyCols {
		c := &b.Cols[kc]
		if isNull(c, i) {
			buf = append(buf, 1)
			continue
		}
		buf = append(buf, 0)
		switch c.Type {
		case stream.TypeInt64, stream.TypeTimestamp:
			buf = binary.AppendVarint(buf, c.Ints[i])
		case stream.TypeFloat64:
			f := c.Floats[i]
			if f == 0 {
				f = 0 // -0 and +0 are one key, as in stream.HashKeys
			}
			buf = binary.LittleEndian.AppendUint64(buf, math.Float64bits(f))
		case stream.TypeString:
			buf = binary.AppendUvarint(buf, uint64(len(c.Strs[i])))
			buf = append(buf, c.Strs[i]...)
		case stream.TypeBool:
			if c.Bools[i] {
				buf = append(buf, 1)
			} else {
				buf = append(buf, 0)
			}
		}
	}
	return buf
}

// describe returns row i's key as "name=value, ..." for error messages.
func (s *keyState) describe(b *stream.Batch, i int) string {
	var sb strings.Builder
	for j, kc := range s.keyCols {
		if j > 0 {
			sb.WriteString(", ")
		}
		fmt.Fprintf(&sb, "%s=%v", s.in.Fields[kc].Name, b.Cols[kc].Value(i))
	}
	return sb.String()
}

const stateVersion = 1

// snapshot writes one chunk per key group with keys. It fails if a key is
// outside c.KeyGroups: records reached the wrong subtask.
func (s *keyState) snapshot(c *stream.SnapshotContext, name string) error {
	counts := make(map[int32]int)
	for _, g := range s.group {
		counts[g]++
	}
	chunks := make(map[int32][]byte, len(counts))
	for id, g := range s.group {
		buf, ok := chunks[g]
		if !ok {
			if !c.KeyGroups.Contains(int(g)) {
				return fmt.Errorf("%s: holds a key of key group %d, outside this subtask's range %v; records were routed to the wrong subtask (is the input keyed by the same fields?)", name, g, c.KeyGroups)
			}
			buf = append(make([]byte, 0, 16+counts[g]*(len(s.enc[id])+10)), stateVersion)
			buf = binary.AppendUvarint(buf, uint64(g))
			buf = binary.AppendUvarint(buf, uint64(len(s.keyCols)))
			for _, kc := range s.keyCols {
				buf = append(buf, byte(s.in.Fields[kc].Type))
			}
			buf = binary.AppendUvarint(buf, uint64(counts[g]))
		}
		buf = binary.AppendUvarint(buf, uint64(len(s.enc[id])))
		buf = append(buf, s.enc[id]...)
		chunks[g] = binary.AppendVarint(buf, s.vals[id])
	}
	for g, buf := range chunks {
		c.WriteKeyGroup(int(g), buf)
	}
	return nil
}

var errTruncated = errors.New("truncated")

// restore loads the chunks of the key groups in c.KeyGroups; others are
// ignored.
func (s *keyState) restore(c *stream.RestoreContext, name string) error {
	if c.State == nil {
		return nil
	}
	kb := stream.NewBatch(s.in, 1)
	defer kb.Release()
	for g, chunks := range c.State.Keyed {
		if !c.KeyGroups.Contains(g) {
			continue
		}
		for _, chunk := range chunks {
			if err := s.restoreChunk(chunk, g, kb); err != nil {
				return fmt.Errorf("%s: restoring checkpoint %d: key group %d: %w", name, c.CheckpointID, g, err)
			}
		}
	}
	return nil
}

func (s *keyState) restoreChunk(chunk []byte, g int, kb *stream.Batch) error {
	r := &reader{b: chunk}
	if v := r.byte(); r.err == nil && v != stateVersion {
		return fmt.Errorf("unknown state format version %d (this build reads version %d)", v, stateVersion)
	}
	if cg := int(r.uvarint()); r.err == nil && cg != g {
		return fmt.Errorf("the chunk says it holds key group %d", cg)
	}
	nk := int(r.uvarint())
	same := nk == len(s.keyCols)
	for j := 0; j < nk && r.err == nil; j++ {
		t := stream.Type(r.byte())
		same = same && t == s.in.Fields[s.keyCols[j]].Type
	}
	if r.err == nil && !same {
		return fmt.Errorf("the state was written for another key (%d fields); this operator's key is %s; restore it into the job that wrote it, or start without the checkpoint", nk, s.keyNames())
	}
	n := r.uvarint()
	if r.err == nil && n > uint64(len(r.b)) {
		r.err = errTruncated
	}
	for k := uint64(0); k < n && r.err == nil; k++ {
		key := r.bytes()
		val := r.varint()
		if r.err != nil {
			break
		}
		kr := &reader{b: key}
		for _, kc := range s.keyCols {
			c := &kb.Cols[kc]
			c.Ints, c.Floats, c.Strs, c.Bools, c.Nulls = c.Ints[:0], c.Floats[:0], c.Strs[:0], c.Bools[:0], nil
			kr.keyValue(c)
		}
		kb.SetLen(1)
		if kr.err == nil && len(kr.b) > 0 {
			kr.err = fmt.Errorf("%d unexpected bytes after a key", len(kr.b))
		}
		if kr.err != nil {
			return fmt.Errorf("corrupt key: %v", kr.err)
		}
		s.hashed = false
		id := s.id(kb, 0)
		if int(s.group[id]) != g {
			return fmt.Errorf("key (%s) belongs to key group %d; the key hash or max parallelism changed since the checkpoint", s.describe(kb, 0), s.group[id])
		}
		s.vals[id] = val
	}
	if r.err == nil && len(r.b) > 0 {
		r.err = fmt.Errorf("%d unexpected trailing bytes", len(r.b))
	}
	if r.err != nil {
		return fmt.Errorf("corrupt state: %v", r.err)
	}
	return nil
}

func (s *keyState) keyNames() string {
	names := make([]string, len(s.keyCols))
	for j, kc := range s.keyCols {
		names[j] = s.in.Fields[kc].Name + " " + s.in.Fields[kc].Type.String()
	}
	return "(" + strings.Join(names, ", ") + ")"
}

// reader decodes state, remembering the first error.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail() {
	if r.err == nil {
		r.err = errTruncated
	}
}

func (r *reader) byte() byte {
	if r.err != nil || len(r.b) == 0 {
		r.fail()
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) bytes() []byte {
	n := r.uvarint()
	if r.err != nil || n > uint64(len(r.b)) {
		r.fail()
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

// keyValue appends one encoded key field value to c (row 0).
func (r *reader) keyValue(c *stream.Column) {
	null := r.byte() == 1
	switch c.Type {
	case stream.TypeInt64, stream.TypeTimestamp:
		var v int64
		if !null {
			v = r.varint()
		}
		c.Ints = append(c.Ints, v)
	case stream.TypeFloat64:
		var v float64
		if !null {
			if len(r.b) < 8 {
				r.fail()
			} else {
				v = math.Float64frombits(binary.LittleEndian.Uint64(r.b))
				r.b = r.b[8:]
			}
		}
		c.Floats = append(c.Floats, v)
	case stream.TypeString:
		var v string
		if !null {
			v = string(r.bytes())
		}
		c.Strs = append(c.Strs, v)
	case stream.TypeBool:
		var v bool
		if !null {
			v = r.byte() == 1
		}
		c.Bools = append(c.Bools, v)
	}
	if null {
		c.SetNull(0, 1)
	}
}

// isNull is Column.IsNull tolerating a short null bitmap.
func isNull(c *stream.Column, i int) bool {
	return c.Nulls != nil && i>>6 < len(c.Nulls) && c.Nulls[i>>6]&(1<<(uint(i)&63)) != 0
}

// padNulls extends every short null bitmap of b to cover all its rows, as
// stream.HashKeys expects.
func padNulls(b *stream.Batch) {
	words := (b.Len() + 63) >> 6
	for j := range b.Cols {
		c := &b.Cols[j]
		for c.Nulls != nil && len(c.Nulls) < words {
			c.Nulls = append(c.Nulls, 0)
		}
	}
}
