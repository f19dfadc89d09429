package expression

import (
	"math/bits"

	"github.com/weirstream/weir/stream"
)

// Column helpers shared by the kernels.
//
// Invariant inside this package: the Nulls bitmap of every column a kernel
// returns is nil or covers at least the batch's rows (fieldNode pads short
// bitmaps of input columns), so kernels index it without bounds worries.

func words(n int) int { return (n + 63) >> 6 }

// grow returns s with length n, reusing its capacity when it can. The
// contents are unspecified.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n, n+n/4)
	}
	return s[:n]
}

// zeroed returns s with length n, all zero.
func zeroed(s []uint64, n int) []uint64 {
	s = grow(s, n)
	clear(s)
	return s
}

func isNullAt(nulls []uint64, i int) bool {
	return nulls != nil && nulls[i>>6]&(1<<(uint(i)&63)) != 0
}

// live reports whether row i's value is needed: the row is active and the
// value is not null. Kernels only report errors for live rows.
func live(act []bool, nulls []uint64, i int) bool {
	return (act == nil || act[i]) && !isNullAt(nulls, i)
}

// orNulls returns the union of two null bitmaps for n rows, in buf when both
// are set (buf is updated to keep its capacity).
func orNulls(buf *[]uint64, n int, a, b []uint64) []uint64 {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	w := words(n)
	out := grow(*buf, w)
	*buf = out
	a, b = a[:w], b[:w]
	for i := range out {
		out[i] = a[i] | b[i]
	}
	return out
}

// copyColumn overwrites dst with the first n values of src, reusing dst's
// capacity, zeroing the value slots of null rows as stream.Column requires.
func copyColumn(dst, src *stream.Column, n int) {
	dst.Type = src.Type
	if dst.Type != stream.TypeString && len(dst.Strs) > 0 {
		clear(dst.Strs)
	}
	dst.Ints, dst.Floats, dst.Strs, dst.Bools = dst.Ints[:0], dst.Floats[:0], dst.Strs[:0], dst.Bools[:0]
	switch src.Type {
	case stream.TypeInt64, stream.TypeTimestamp:
		dst.Ints = append(dst.Ints, src.Ints[:n]...)
	case stream.TypeFloat64:
		dst.Floats = append(dst.Floats, src.Floats[:n]...)
	case stream.TypeString:
		dst.Strs = append(dst.Strs, src.Strs[:n]...)
	case stream.TypeBool:
		dst.Bools = append(dst.Bools, src.Bools[:n]...)
	}
	dst.Dict = src.Dict
	if src.Nulls == nil || n == 0 {
		dst.Nulls = nil
		return
	}
	w := words(n)
	nulls := append(dst.Nulls[:0], src.Nulls[:w]...)
	if r := uint(n) & 63; r != 0 {
		nulls[w-1] &= 1<<r - 1
	}
	has := false
	for wi, word := range nulls {
		if word == 0 {
			continue
		}
		has = true
		for word != 0 {
			i := wi<<6 + bits.TrailingZeros64(word)
			word &= word - 1
			switch dst.Type {
			case stream.TypeInt64, stream.TypeTimestamp:
				dst.Ints[i] = 0
			case stream.TypeFloat64:
				dst.Floats[i] = 0
			case stream.TypeString:
				dst.Strs[i] = ""
			case stream.TypeBool:
				dst.Bools[i] = false
			}
		}
	}
	if !has {
		dst.Nulls = nil
		return
	}
	dst.Nulls = nulls
}

// selectTrue appends to sel[:0] the rows of the bool column c that are true
// and not null.
func selectTrue(c *stream.Column, n int, sel []int) []int {
	if cap(sel) < n {
		sel = make([]int, n)
	} else {
		sel = sel[:n]
	}
	vals := c.Bools[:n]
	k := 0
	if c.Nulls == nil {
		// Branch-free: always write, advance by the value (0 or 1).
		for i, v := range boolBytes(vals) {
			sel[k] = i
			k += int(v)
		}
		return sel[:k]
	}
	nulls := c.Nulls
	for i, v := range vals {
		sel[k] = i
		if v && nulls[i>>6]&(1<<(uint(i)&63)) == 0 {
			k++
		}
	}
	return sel[:k]
}
