package rowenc

import (
	"encoding/binary"
	"math"
	"unsafe"

	"github.com/weirstream/weir/stream"
)

// Keys encodes the keys of a batch's rows for a keyed-state backend
// (statebackend.Backend.SetCurrentKey): a row's key is the AppendValue
// encoding of its key fields, in order, and its key group comes from the key
// hash that routed the row (stream.HashKeys, stream.KeyGroupForHash). The
// zero value is not usable: set Cols and MaxParallelism.
//
// A Keys is reused batch after batch; it is not safe for concurrent use.
type Keys struct {
	Cols           []int // key columns of the input
	MaxParallelism int

	hashes []uint64
	groups []int
	buf    []byte // encoded keys of the current batch
	ends   []int  // end offset of each row's key in buf
}

// Encode encodes the keys of every row of b (it pads b's null bitmaps, see
// PadBatchNulls). The keys stay valid until the next Encode.
func (k *Keys) Encode(b *stream.Batch) {
	n := b.Len()
	if cap(k.hashes) < n {
		k.hashes = make([]uint64, n)
		k.groups = make([]int, n)
		k.ends = make([]int, n)
	}
	k.hashes, k.groups, k.ends = k.hashes[:n], k.groups[:n], k.ends[:n]
	PadBatchNulls(b)
	stream.HashKeys(b, k.Cols, k.hashes)
	maxPar := k.MaxParallelism
	if maxPar <= 0 {
		maxPar = stream.DefaultMaxParallelism
	}
	buf := k.buf[:0]
	for i := range n {
		for _, kc := range k.Cols {
			buf = AppendValue(buf, &b.Cols[kc], i)
		}
		k.ends[i] = len(buf)
		k.groups[i] = stream.KeyGroupForHash(k.hashes[i], maxPar)
	}
	k.buf = buf
}

// Key returns row i's encoded key and key group. The key aliases an internal
// buffer: it must not be modified, and it is safe to hand to SetCurrentKey
// until the next Encode (the buffer is not written meanwhile).
func (k *Keys) Key(i int) ([]byte, int) {
	start := 0
	if i > 0 {
		start = k.ends[i-1]
	}
	return k.buf[start:k.ends[i]:k.ends[i]], k.groups[i]
}

// Group returns row i's key group.
func (k *Keys) Group(i int) int { return k.groups[i] }

// Hash returns row i's key hash.
func (k *Keys) Hash(i int) uint64 { return k.hashes[i] }

// Gather appends to dst, for each index in idx, that row of src (same type).
// Strings are shared, not copied.
func Gather(dst, src *stream.Column, idx []int32) {
	n := dst.Len()
	switch dst.Type {
	case stream.TypeInt64, stream.TypeTimestamp:
		s := src.Ints
		for _, i := range idx {
			dst.Ints = append(dst.Ints, s[i])
		}
	case stream.TypeFloat64:
		s := src.Floats
		for _, i := range idx {
			dst.Floats = append(dst.Floats, s[i])
		}
	case stream.TypeString:
		s := src.Strs
		for _, i := range idx {
			dst.Strs = append(dst.Strs, s[i])
		}
	case stream.TypeBool:
		s := src.Bools
		for _, i := range idx {
			dst.Bools = append(dst.Bools, s[i])
		}
	}
	if src.Nulls != nil {
		for k, i := range idx {
			if IsNull(src, int(i)) {
				dst.SetNull(n+k, n+len(idx))
			}
		}
	}
}

// DecodeRow appends row, the AppendExactValue encodings of one value per
// column of cols (already checked: it is trusted), to cols as row n.
// Strings share the row's bytes.
func DecodeRow(cols []stream.Column, n int, row []byte) {
	p := row
	for j := range cols {
		c := &cols[j]
		null := p[0] == 1
		p = p[1:]
		switch c.Type {
		case stream.TypeInt64, stream.TypeTimestamp:
			var v int64
			if !null {
				var w int
				v, w = binary.Varint(p)
				p = p[w:]
			}
			c.Ints = append(c.Ints, v)
		case stream.TypeFloat64:
			var v float64
			if !null {
				v = math.Float64frombits(binary.LittleEndian.Uint64(p))
				p = p[8:]
			}
			c.Floats = append(c.Floats, v)
		case stream.TypeString:
			var v string
			if !null {
				l, w := binary.Uvarint(p)
				if l > 0 {
					v = unsafe.String(&p[w], int(l))
				}
				p = p[w+int(l):]
			}
			c.Strs = append(c.Strs, v)
		case stream.TypeBool:
			var v bool
			if !null {
				v = p[0] == 1
				p = p[1:]
			}
			c.Bools = append(c.Bools, v)
		}
		if null {
			c.SetNull(n, n+1)
		}
	}
}
