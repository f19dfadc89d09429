package keyed

import (
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/weirstream/weir/operators/internal/rowenc"
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
	types   []stream.Type // of the key fields
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
	s.types = make([]stream.Type, len(keyCols))
	for j, kc := range keyCols {
		s.types[j] = in.Fields[kc].Type
	}
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
		if c := &b.Cols[s.keyCols[0]]; !rowenc.IsNull(c, i) {
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
		rowenc.PadBatchNulls(b)
		stream.HashKeys(b, s.keyCols, s.hashes[:b.Len()])
		s.hashed = true
	}
	id := int32(len(s.vals))
	enc := string(s.encode(nil, b, i))
	s.enc = append(s.enc, enc)
	s.group = append(s.group, int32(stream.KeyGroupForHash(s.hashes[i], s.maxPar)))
	s.vals = append(s.vals, 0)
	if c := &b.Cols[s.keyCols[0]]; s.intKey && !rowenc.IsNull(c, i) {
		s.ints[c.Ints[i]] = id
	} else {
		s.index[enc] = id
	}
	return id
}

// encode appends the encoding of row i's key: rowenc.AppendValue per key
// field.
func (s *keyState) encode(buf []byte, b *stream.Batch, i int) []byte {
	for _, kc := range s.keyCols {
		buf = rowenc.AppendValue(buf, &b.Cols[kc], i)
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
			buf = rowenc.AppendHeader(make([]byte, 0, 16+counts[g]*(len(s.enc[id])+10)), stateVersion, int(g), s.types)
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
	r := &rowenc.Reader{B: chunk}
	if v := r.Byte(); r.Err == nil && v != stateVersion {
		return fmt.Errorf("unknown state format version %d (this build reads version %d)", v, stateVersion)
	}
	if cg := int(r.Uvarint()); r.Err == nil && cg != g {
		return fmt.Errorf("the chunk says it holds key group %d", cg)
	}
	nk, same := r.SameTypes(s.types)
	if r.Err == nil && !same {
		return fmt.Errorf("the state was written for another key (%d fields); this operator's key is %s; restore it into the job that wrote it, or start without the checkpoint", nk, s.keyNames())
	}
	n := r.Count()
	for k := 0; k < n && r.Err == nil; k++ {
		key := r.Bytes()
		val := r.Varint()
		if r.Err != nil {
			break
		}
		kr := &rowenc.Reader{B: key}
		for _, kc := range s.keyCols {
			c := &kb.Cols[kc]
			c.Ints, c.Floats, c.Strs, c.Bools, c.Nulls = c.Ints[:0], c.Floats[:0], c.Strs[:0], c.Bools[:0], nil
			kr.Value(c, 0)
		}
		kb.SetLen(1)
		if kr.Err == nil && len(kr.B) > 0 {
			kr.Err = fmt.Errorf("%d unexpected bytes after a key", len(kr.B))
		}
		if kr.Err != nil {
			return fmt.Errorf("corrupt key: %v", kr.Err)
		}
		s.hashed = false
		id := s.id(kb, 0)
		if int(s.group[id]) != g {
			return fmt.Errorf("key (%s) belongs to key group %d; the key hash or max parallelism changed since the checkpoint", s.describe(kb, 0), s.group[id])
		}
		s.vals[id] = val
	}
	if err := r.Done(); err != nil {
		return fmt.Errorf("corrupt state: %v", err)
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
