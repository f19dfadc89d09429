package expression

import (
	"encoding/binary"
	"unsafe"
)

// Branch-free kernels over []bool. Go stores a bool as one byte holding 0 or
// 1, so a []bool can be viewed as bytes and combined eight at a time; the
// results are again 0 or 1, valid bools.

func boolBytes(b []bool) []byte {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(b))), len(b))
}

const ones = 0x0101010101010101

func orBools(x, y, out []bool) {
	a, b, o := boolBytes(x[:len(out)]), boolBytes(y[:len(out)]), boolBytes(out)
	le := binary.LittleEndian
	i := 0
	for ; i+8 <= len(o); i += 8 {
		le.PutUint64(o[i:], le.Uint64(a[i:])|le.Uint64(b[i:]))
	}
	for ; i < len(o); i++ {
		o[i] = a[i] | b[i]
	}
}

func andBools(x, y, out []bool) {
	a, b, o := boolBytes(x[:len(out)]), boolBytes(y[:len(out)]), boolBytes(out)
	le := binary.LittleEndian
	i := 0
	for ; i+8 <= len(o); i += 8 {
		le.PutUint64(o[i:], le.Uint64(a[i:])&le.Uint64(b[i:]))
	}
	for ; i < len(o); i++ {
		o[i] = a[i] & b[i]
	}
}

func notBools(x, out []bool) {
	a, o := boolBytes(x[:len(out)]), boolBytes(out)
	le := binary.LittleEndian
	i := 0
	for ; i+8 <= len(o); i += 8 {
		le.PutUint64(o[i:], le.Uint64(a[i:])^ones)
	}
	for ; i < len(o); i++ {
		o[i] = a[i] ^ 1
	}
}
