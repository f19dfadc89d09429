package stream

import (
	"math/bits"
	"unsafe"
)

// A StringDict is a fixed list of distinct string values, stored in one
// block of memory at equal distances, so that a value's position in the
// list follows from where it is stored: Code(s) is a subtraction and a
// shift. A source whose columns pick from a fixed list makes one with
// NewStringDict, fills its rows with Values, and sets Column.Dict; an
// exchange encoder then finds each row's value by its code.
type StringDict struct {
	// Values are the values, stored in the dictionary's block (or where
	// the caller had them, for a dictionary too sparse for one). They
	// must not be changed.
	Values []string

	block []byte   // values at i<<shift; nil when not kept
	shift uint     // log2 of the distance between values
	lens  []uint32 // len(Values[i])
}

// maxDictBlock bounds the block of a StringDict beyond the values' own
// bytes: a list with a few long values and many short ones would take more
// room at equal distances, and is kept without a block (Code finds
// nothing).
const maxDictBlock = 1 << 20

// NewStringDict returns a dictionary of values (copied). Values should be
// distinct: the code of a value is the position of its copy.
func NewStringDict(values []string) *StringDict {
	d := &StringDict{Values: make([]string, len(values)), lens: make([]uint32, len(values))}
	total, longest := 0, 1
	for i, v := range values {
		total += len(v)
		longest = max(longest, len(v))
		d.lens[i] = uint32(len(v))
	}
	d.shift = uint(bits.Len(uint(longest - 1)))
	size := len(values) << d.shift
	if len(values) == 0 || longest > 1<<30 || size > 2*total+maxDictBlock || len(values) > 1<<31-1 {
		copy(d.Values, values) // too sparse to keep at equal distances
		d.lens = nil
		return d
	}
	d.block = make([]byte, size)
	for i, v := range values {
		at := d.block[i<<d.shift:]
		copy(at, v)
		d.Values[i] = unsafe.String(&at[0], len(v))
	}
	return d
}

// Code returns the position of s in the dictionary if s is stored where
// the dictionary keeps a value, with its length (and so is that value),
// or -1. A string equal to a value but stored elsewhere is not found.
func (d *StringDict) Code(s string) int {
	var c [1]int32
	d.CodesOf([]string{s}, c[:])
	return int(c[0])
}

// Len returns the number of values.
func (d *StringDict) Len() int { return len(d.Values) }

// CodesOf sets codes[i] to Code(strs[i]) for every i; codes must be as long
// as strs.
func (d *StringDict) CodesOf(strs []string, codes []int32) {
	codes = codes[:len(strs)]
	if len(d.block) == 0 {
		for i := range codes {
			codes[i] = -1
		}
		return
	}
	base, size := uintptr(unsafe.Pointer(&d.block[0])), uintptr(len(d.block))
	mask, shift, lens := uintptr(1)<<d.shift-1, d.shift, d.lens
	for i, s := range strs {
		off := uintptr(unsafe.Pointer(unsafe.StringData(s))) - base
		codes[i] = -1
		if off < size && off&mask == 0 {
			if c := off >> shift; lens[c] == uint32(len(s)) {
				codes[i] = int32(c)
			}
		}
	}
}
