package expression

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/weirstream/weir/stream"
)

// coalesceNode is l ?? r: l where it is not null, else r.
type coalesceNode struct {
	l, r     node
	t        stream.Type
	mask     []bool
	out      stream.Column
	outNulls []uint64
}

func (k *coalesceNode) typ() stream.Type { return k.t }
func (k *coalesceNode) kids() []node     { return []node{k.l, k.r} }
func (k *coalesceNode) mayFail() bool    { return anyFails(k.l, k.r) }

func (k *coalesceNode) eval(b *stream.Batch, act []bool) (*stream.Column, error) {
	lc, err := k.l.eval(b, act)
	if err != nil {
		return nil, err
	}
	if lc.Nulls == nil && lc.Type == k.t {
		return lc, nil
	}
	n := b.Len()
	ract := act
	if k.r.mayFail() {
		ln := lc.Nulls
		ract = narrow(&k.mask, act, n, func(i int) bool { return isNullAt(ln, i) })
	}
	rc, err := k.r.eval(b, ract)
	if err != nil {
		return nil, err
	}
	o := &k.out
	o.Type = k.t
	o.Nulls = nil
	ln, rn := lc.Nulls, rc.Nulls
	bm := zeroed(k.outNulls, words(n))
	k.outNulls = bm
	has := false
	for i := range n {
		if isNullAt(ln, i) && isNullAt(rn, i) {
			bm[i>>6] |= 1 << (uint(i) & 63)
			has = true
		}
	}
	if has {
		o.Nulls = bm
	}
	// l's nulls used as the choice: take r where l is null.
	switch k.t {
	case stream.TypeFloat64:
		o.Floats = grow(o.Floats, n)
		pickNull(ln, lc.Floats[:n], rc.Floats[:n], o.Floats)
	case stream.TypeString:
		o.Strs = grow(o.Strs, n)
		pickNull(ln, lc.Strs[:n], rc.Strs[:n], o.Strs)
	case stream.TypeBool:
		o.Bools = grow(o.Bools, n)
		pickNull(ln, lc.Bools[:n], rc.Bools[:n], o.Bools)
	default:
		o.Ints = grow(o.Ints, n)
		pickNull(ln, lc.Ints[:n], rc.Ints[:n], o.Ints)
	}
	return o, nil
}

func pickNull[T any](lnulls []uint64, a, b, out []T) {
	for i := range out {
		if isNullAt(lnulls, i) {
			out[i] = b[i]
		} else {
			out[i] = a[i]
		}
	}
}

// coerce converts k to type t for a ternary or ?? branch: the nil literal
// becomes a typed null, an int becomes a float.
func coerce(k node, t stream.Type) node {
	kt := k.typ()
	switch {
	case kt == t:
		return k
	case kt == stream.TypeInvalid:
		return &constNode{t: t, null: true}
	case t == stream.TypeFloat64:
		return &funcNode{fn: "float", x: k, t: stream.TypeFloat64, what: "float()"}
	}
	return k // int64 and timestamp share a representation
}

// funcNode is one of the natively supported builtins of one argument.
type funcNode struct {
	fn   string
	x    node
	t    stream.Type
	what string
	out  stream.Column
}

func (k *funcNode) typ() stream.Type { return k.t }
func (k *funcNode) kids() []node     { return []node{k.x} }
func (k *funcNode) mayFail() bool {
	return k.x.mayFail() || ((k.fn == "int" || k.fn == "float") && k.x.typ() == stream.TypeString)
}

func (k *funcNode) eval(b *stream.Batch, act []bool) (*stream.Column, error) {
	xc, err := k.x.eval(b, act)
	if err != nil {
		return nil, err
	}
	n := b.Len()
	o := &k.out
	o.Type, o.Nulls = k.t, xc.Nulls
	xf := xc.Type == stream.TypeFloat64
	switch k.fn {
	case "abs":
		if xf {
			o.Floats = grow(o.Floats, n)
			for i, v := range xc.Floats[:n] {
				if v < 0 {
					v = -v
				}
				o.Floats[i] = v
			}
		} else {
			o.Ints = grow(o.Ints, n)
			for i, v := range xc.Ints[:n] {
				if v < 0 {
					v = -v
				}
				o.Ints[i] = v
			}
		}
	case "lower", "upper":
		f := strings.ToLower
		if k.fn == "upper" {
			f = strings.ToUpper
		}
		o.Strs = grow(o.Strs, n)
		for i, v := range xc.Strs[:n] {
			o.Strs[i] = f(v)
		}
	case "len":
		o.Ints = grow(o.Ints, n)
		for i, v := range xc.Strs[:n] {
			o.Ints[i] = int64(utf8.RuneCountInString(v))
		}
	case "int":
		switch xc.Type {
		case stream.TypeFloat64:
			o.Ints = grow(o.Ints, n)
			for i, v := range xc.Floats[:n] {
				o.Ints[i] = int64(v)
			}
		case stream.TypeString:
			o.Ints = grow(o.Ints, n)
			for i, v := range xc.Strs[:n] {
				x, err := strconv.Atoi(v)
				if err != nil && live(act, xc.Nulls, i) {
					return nil, fmt.Errorf("row %d: %s: cannot convert the string (%d bytes) to int: not an integer", i, k.what, len(v))
				}
				o.Ints[i] = int64(x)
			}
		default:
			o.Ints = xc.Ints[:n]
		}
	case "float":
		switch xc.Type {
		case stream.TypeFloat64:
			o.Floats = xc.Floats[:n]
		case stream.TypeString:
			o.Floats = grow(o.Floats, n)
			for i, v := range xc.Strs[:n] {
				x, err := strconv.ParseFloat(v, 64)
				if err != nil && live(act, xc.Nulls, i) {
					return nil, fmt.Errorf("row %d: %s: cannot convert the string (%d bytes) to float: not a number", i, k.what, len(v))
				}
				o.Floats[i] = x
			}
		default:
			o.Floats = grow(o.Floats, n)
			for i, v := range xc.Ints[:n] {
				o.Floats[i] = float64(v)
			}
		}
	case "round", "floor", "ceil":
		o.Floats = grow(o.Floats, n)
		if !xf {
			for i, v := range xc.Ints[:n] {
				o.Floats[i] = float64(v)
			}
			break
		}
		f := math.Round
		switch k.fn {
		case "floor":
			f = math.Floor
		case "ceil":
			f = math.Ceil
		}
		for i, v := range xc.Floats[:n] {
			o.Floats[i] = f(v)
		}
	case "string":
		o.Strs = grow(o.Strs, n)
		switch xc.Type {
		case stream.TypeString:
			copy(o.Strs, xc.Strs[:n])
		case stream.TypeFloat64:
			for i, v := range xc.Floats[:n] {
				o.Strs[i] = strconv.FormatFloat(v, 'g', -1, 64)
			}
		case stream.TypeBool:
			for i, v := range xc.Bools[:n] {
				o.Strs[i] = strconv.FormatBool(v)
			}
		default:
			for i, v := range xc.Ints[:n] {
				o.Strs[i] = strconv.FormatInt(v, 10)
			}
		}
	}
	return o, nil
}
