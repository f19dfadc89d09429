package expression

import (
	"cmp"
	"fmt"
	"math"
	"math/bits"
	"regexp"
	"strings"

	"github.com/weirstream/weir/stream"
)

// node is one kernel of a compiled expression.
type node interface {
	// eval returns the node's values for every row of b: one of b's columns
	// or scratch owned by the node, valid until the next eval. act, when not
	// nil, marks the rows whose value is needed; other rows may hold
	// anything, and the node must not fail because of them.
	eval(b *stream.Batch, act []bool) (*stream.Column, error)
	typ() stream.Type
	kids() []node
	// mayFail reports whether eval can fail for some row, so that a parent
	// that evaluates it only for some rows must narrow act.
	mayFail() bool
}

func anyFails(ks ...node) bool {
	for _, k := range ks {
		if k.mayFail() {
			return true
		}
	}
	return false
}

// narrow returns a mask of the rows that are active in act and for which
// keep(i) holds, in buf.
func narrow(buf *[]bool, act []bool, n int, keep func(i int) bool) []bool {
	m := grow(*buf, n)
	*buf = m
	for i := range m {
		m[i] = (act == nil || act[i]) && keep(i)
	}
	return m
}

// ---- leaves ----

type fieldNode struct {
	idx  int
	t    stream.Type
	view stream.Column
	pad  []uint64
}

func (k *fieldNode) typ() stream.Type { return k.t }
func (k *fieldNode) kids() []node     { return nil }
func (k *fieldNode) mayFail() bool    { return false }

func (k *fieldNode) eval(b *stream.Batch, _ []bool) (*stream.Column, error) {
	c := &b.Cols[k.idx]
	if c.Nulls == nil || len(c.Nulls) >= words(b.Len()) {
		return c, nil
	}
	// A bitmap shorter than the batch leaves the tail rows not null.
	k.pad = append(k.pad[:0], c.Nulls...)
	for len(k.pad) < words(b.Len()) {
		k.pad = append(k.pad, 0)
	}
	k.view = *c
	k.view.Nulls = k.pad
	return &k.view, nil
}

// constNode is a literal (or a folded constant): a column of one repeated
// value, filled once up to the largest batch seen. t is TypeInvalid for the
// untyped nil literal.
type constNode struct {
	t    stream.Type
	null bool
	i    int64
	f    float64
	s    string
	b    bool
	col  stream.Column
	view stream.Column
}

func (k *constNode) typ() stream.Type { return k.t }
func (k *constNode) kids() []node     { return nil }
func (k *constNode) mayFail() bool    { return false }

func (k *constNode) eval(b *stream.Batch, _ []bool) (*stream.Column, error) {
	n := b.Len()
	c := &k.col
	c.Type = k.t
	v := &k.view
	*v = stream.Column{Type: k.t}
	switch k.t {
	case stream.TypeInt64, stream.TypeTimestamp:
		for len(c.Ints) < n {
			c.Ints = append(c.Ints, k.i)
		}
		v.Ints = c.Ints[:n]
	case stream.TypeFloat64:
		for len(c.Floats) < n {
			c.Floats = append(c.Floats, k.f)
		}
		v.Floats = c.Floats[:n]
	case stream.TypeString:
		for len(c.Strs) < n {
			c.Strs = append(c.Strs, k.s)
		}
		v.Strs = c.Strs[:n]
	case stream.TypeBool:
		for len(c.Bools) < n {
			c.Bools = append(c.Bools, k.b)
		}
		v.Bools = c.Bools[:n]
	}
	if k.null {
		for len(c.Nulls) < words(n) {
			c.Nulls = append(c.Nulls, ^uint64(0))
		}
		v.Nulls = c.Nulls[:words(n)]
	}
	return v, nil
}

func constFromColumn(c *stream.Column, t stream.Type) *constNode {
	k := &constNode{t: t}
	if c.IsNull(0) {
		k.null = true
		return k
	}
	switch t {
	case stream.TypeInt64, stream.TypeTimestamp:
		k.i = c.Ints[0]
	case stream.TypeFloat64:
		k.f = c.Floats[0]
	case stream.TypeString:
		k.s = c.Strs[0]
	case stream.TypeBool:
		k.b = c.Bools[0]
	}
	return k
}

// ---- arithmetic ----

type arithOp uint8

const (
	opAdd arithOp = iota
	opSub
	opMul
	opDiv
	opMod
	opPow
)

var arithOps = map[string]arithOp{"+": opAdd, "-": opSub, "*": opMul, "/": opDiv, "%": opMod, "**": opPow, "^": opPow}

type arithNode struct {
	op      arithOp
	l, r    node
	t       stream.Type
	what    string
	div     divisor // set for % by a non-zero constant
	out     stream.Column
	nullBuf []uint64
}

func (k *arithNode) typ() stream.Type { return k.t }
func (k *arithNode) kids() []node     { return []node{k.l, k.r} }
func (k *arithNode) mayFail() bool {
	if anyFails(k.l, k.r) {
		return true
	}
	intDiv := k.op == opMod || (k.op == opDiv && k.l.typ() != stream.TypeFloat64 && k.r.typ() != stream.TypeFloat64)
	return intDiv && k.div.d == 0
}

func (k *arithNode) eval(b *stream.Batch, act []bool) (*stream.Column, error) {
	lc, err := k.l.eval(b, act)
	if err != nil {
		return nil, err
	}
	rc, err := k.r.eval(b, act)
	if err != nil {
		return nil, err
	}
	n := b.Len()
	o := &k.out
	o.Type = k.t
	o.Nulls = orNulls(&k.nullBuf, n, lc.Nulls, rc.Nulls)
	lf, rf := lc.Type == stream.TypeFloat64, rc.Type == stream.TypeFloat64
	if k.t != stream.TypeFloat64 {
		o.Ints = grow(o.Ints, n)
		x, y := lc.Ints[:n], rc.Ints[:n]
		switch {
		case k.op == opMod && k.div.d != 0:
			modConst(x, k.div, o.Ints)
		case k.op == opMod:
			if i := modInts(x, y, o.Ints, act, o.Nulls); i >= 0 {
				return nil, fmt.Errorf("row %d: %s: %w", i, k.what, ErrDivideByZero)
			}
		default:
			arithInts(k.op, x, y, o.Ints)
		}
		return o, nil
	}
	o.Floats = grow(o.Floats, n)
	switch {
	case lf && rf:
		arithFloats(k.op, lc.Floats[:n], rc.Floats[:n], o.Floats)
	case lf:
		arithFloats(k.op, lc.Floats[:n], rc.Ints[:n], o.Floats)
	case rf:
		arithFloats(k.op, lc.Ints[:n], rc.Floats[:n], o.Floats)
	default:
		y := rc.Ints[:n]
		if k.op == opDiv {
			for i, d := range y {
				if d == 0 && live(act, o.Nulls, i) {
					return nil, fmt.Errorf("row %d: %s: %w", i, k.what, ErrDivideByZero)
				}
			}
		}
		arithFloats(k.op, lc.Ints[:n], y, o.Floats)
	}
	return o, nil
}

func arithInts(op arithOp, x, y, out []int64) {
	x, y = x[:len(out)], y[:len(out)]
	switch op {
	case opAdd:
		for i := range out {
			out[i] = x[i] + y[i]
		}
	case opSub:
		for i := range out {
			out[i] = x[i] - y[i]
		}
	case opMul:
		for i := range out {
			out[i] = x[i] * y[i]
		}
	}
}

// modInts computes x % y, returning the first live row with a zero divisor
// or -1.
func modInts(x, y, out []int64, act []bool, nulls []uint64) int {
	x, y = x[:len(out)], y[:len(out)]
	for i := range out {
		d := y[i]
		if d == 0 {
			if live(act, nulls, i) {
				return i
			}
			out[i] = 0
			continue
		}
		out[i] = x[i] % d
	}
	return -1
}

type number interface{ ~int64 | ~float64 }

func arithFloats[A, B number](op arithOp, x []A, y []B, out []float64) {
	x, y = x[:len(out)], y[:len(out)]
	switch op {
	case opAdd:
		for i := range out {
			out[i] = float64(x[i]) + float64(y[i])
		}
	case opSub:
		for i := range out {
			out[i] = float64(x[i]) - float64(y[i])
		}
	case opMul:
		for i := range out {
			out[i] = float64(x[i]) * float64(y[i])
		}
	case opDiv:
		for i := range out {
			out[i] = float64(x[i]) / float64(y[i])
		}
	case opPow:
		for i := range out {
			out[i] = math.Pow(float64(x[i]), float64(y[i]))
		}
	}
}

// divisor computes unsigned division by a constant with a multiply and
// shifts (Granlund and Montgomery, "Division by invariant integers using
// multiplication", figure 4.1), which is several times faster than the
// hardware divide.
type divisor struct {
	d        uint64 // |divisor|; 0 when unset
	m        uint64
	sh1, sh2 uint
}

func newDivisor(c int64) divisor {
	d := uint64(c)
	if c < 0 {
		d = uint64(-c) // MinInt64 stays 1<<63, which is right as unsigned
	}
	l := uint(bits.Len64(d - 1)) // ceil(log2(d))
	if l == 0 {
		return divisor{d: d, m: 1}
	}
	// m = floor(2^64 * (2^l - d) / d) + 1; 2^l - d < d, so Div64 cannot
	// overflow. For l == 64, 1<<l is 0 and the subtraction wraps correctly.
	q, _ := bits.Div64((uint64(1)<<l)-d, 0, d)
	return divisor{d: d, m: q + 1, sh1: 1, sh2: l - 1}
}

func (v divisor) quo(n uint64) uint64 {
	t, _ := bits.Mul64(v.m, n)
	return (t + (n-t)>>v.sh1) >> v.sh2
}

// modConst computes x % d (Go's truncated remainder: the sign follows x).
func modConst(x []int64, v divisor, out []int64) {
	x = x[:len(out)]
	for i, a := range x {
		s := a >> 63
		u := uint64((a ^ s) - s)
		r := int64(u - v.quo(u)*v.d)
		out[i] = (r ^ s) - s
	}
}

type negNode struct {
	x   node
	t   stream.Type
	out stream.Column
}

func (k *negNode) typ() stream.Type { return k.t }
func (k *negNode) kids() []node     { return []node{k.x} }
func (k *negNode) mayFail() bool    { return k.x.mayFail() }

func (k *negNode) eval(b *stream.Batch, act []bool) (*stream.Column, error) {
	xc, err := k.x.eval(b, act)
	if err != nil {
		return nil, err
	}
	n := b.Len()
	o := &k.out
	o.Type, o.Nulls = k.t, xc.Nulls
	if k.t == stream.TypeFloat64 {
		o.Floats = grow(o.Floats, n)
		for i, v := range xc.Floats[:n] {
			o.Floats[i] = -v
		}
	} else {
		o.Ints = grow(o.Ints, n)
		for i, v := range xc.Ints[:n] {
			o.Ints[i] = -v
		}
	}
	return o, nil
}

// ---- comparison and logic ----

type cmpOp uint8

const (
	cmpEq cmpOp = iota
	cmpNe
	cmpLt
	cmpLe
	cmpGt
	cmpGe
)

var cmpOps = map[string]cmpOp{"==": cmpEq, "!=": cmpNe, "<": cmpLt, "<=": cmpLe, ">": cmpGt, ">=": cmpGe}

type cmpNode struct {
	op      cmpOp
	l, r    node
	out     stream.Column
	nullBuf []uint64
}

func (k *cmpNode) typ() stream.Type { return stream.TypeBool }
func (k *cmpNode) kids() []node     { return []node{k.l, k.r} }
func (k *cmpNode) mayFail() bool    { return anyFails(k.l, k.r) }

func (k *cmpNode) eval(b *stream.Batch, act []bool) (*stream.Column, error) {
	lc, err := k.l.eval(b, act)
	if err != nil {
		return nil, err
	}
	rc, err := k.r.eval(b, act)
	if err != nil {
		return nil, err
	}
	n := b.Len()
	o := &k.out
	o.Type = stream.TypeBool
	o.Nulls = orNulls(&k.nullBuf, n, lc.Nulls, rc.Nulls)
	o.Bools = grow(o.Bools, n)
	out := o.Bools
	lt, rt := lc.Type, rc.Type
	switch {
	case lt == stream.TypeString:
		compare(k.op, lc.Strs[:n], rc.Strs[:n], out)
	case lt == stream.TypeBool:
		x, y := lc.Bools[:n], rc.Bools[:n]
		ne := k.op == cmpNe
		for i := range out {
			out[i] = (x[i] != y[i]) == ne
		}
	case lt == stream.TypeFloat64 && rt == stream.TypeFloat64:
		compare(k.op, lc.Floats[:n], rc.Floats[:n], out)
	case lt == stream.TypeFloat64:
		compareMixed(k.op, lc.Floats[:n], rc.Ints[:n], out)
	case rt == stream.TypeFloat64:
		compareMixed(k.op, lc.Ints[:n], rc.Floats[:n], out)
	default:
		compare(k.op, lc.Ints[:n], rc.Ints[:n], out)
	}
	return o, nil
}

func compare[T cmp.Ordered](op cmpOp, x, y []T, out []bool) {
	x, y = x[:len(out)], y[:len(out)]
	switch op {
	case cmpEq:
		for i := range out {
			out[i] = x[i] == y[i]
		}
	case cmpNe:
		for i := range out {
			out[i] = x[i] != y[i]
		}
	case cmpLt:
		for i := range out {
			out[i] = x[i] < y[i]
		}
	case cmpLe:
		for i := range out {
			out[i] = x[i] <= y[i]
		}
	case cmpGt:
		for i := range out {
			out[i] = x[i] > y[i]
		}
	case cmpGe:
		for i := range out {
			out[i] = x[i] >= y[i]
		}
	}
}

// compareMixed compares an int and a float operand as float64, as expr-lang
// does.
func compareMixed[A, B number](op cmpOp, x []A, y []B, out []bool) {
	x, y = x[:len(out)], y[:len(out)]
	switch op {
	case cmpEq:
		for i := range out {
			out[i] = float64(x[i]) == float64(y[i])
		}
	case cmpNe:
		for i := range out {
			out[i] = float64(x[i]) != float64(y[i])
		}
	case cmpLt:
		for i := range out {
			out[i] = float64(x[i]) < float64(y[i])
		}
	case cmpLe:
		for i := range out {
			out[i] = float64(x[i]) <= float64(y[i])
		}
	case cmpGt:
		for i := range out {
			out[i] = float64(x[i]) > float64(y[i])
		}
	case cmpGe:
		for i := range out {
			out[i] = float64(x[i]) >= float64(y[i])
		}
	}
}

// logicNode is && or ||, with three-valued logic and short circuit: the
// right operand is needed only where the left one does not decide.
type logicNode struct {
	or      bool
	l, r    node
	mask    []bool
	out     stream.Column
	nullBuf []uint64
}

func (k *logicNode) typ() stream.Type { return stream.TypeBool }
func (k *logicNode) kids() []node     { return []node{k.l, k.r} }
func (k *logicNode) mayFail() bool    { return anyFails(k.l, k.r) }

func (k *logicNode) eval(b *stream.Batch, act []bool) (*stream.Column, error) {
	lc, err := k.l.eval(b, act)
	if err != nil {
		return nil, err
	}
	n := b.Len()
	ract := act
	if k.r.mayFail() {
		lv, ln := lc.Bools[:n], lc.Nulls
		ract = narrow(&k.mask, act, n, func(i int) bool { return isNullAt(ln, i) || lv[i] != k.or })
	}
	rc, err := k.r.eval(b, ract)
	if err != nil {
		return nil, err
	}
	o := &k.out
	o.Type = stream.TypeBool
	o.Bools = grow(o.Bools, n)
	out := o.Bools
	x, y := lc.Bools[:n], rc.Bools[:n]
	if lc.Nulls == nil && rc.Nulls == nil {
		o.Nulls = nil
		if k.or {
			orBools(x, y, out)
		} else {
			andBools(x, y, out)
		}
		return o, nil
	}
	nulls := zeroed(k.nullBuf, words(n))
	k.nullBuf = nulls
	ln, rn := lc.Nulls, rc.Nulls
	has := false
	for i := range out {
		lnull, rnull := isNullAt(ln, i), isNullAt(rn, i)
		// decided: an operand that is known and equal to k.or (true for ||,
		// false for &&) decides the result.
		if (!lnull && x[i] == k.or) || (!rnull && y[i] == k.or) {
			out[i] = k.or
			continue
		}
		if lnull || rnull {
			out[i] = false
			nulls[i>>6] |= 1 << (uint(i) & 63)
			has = true
			continue
		}
		out[i] = !k.or
	}
	if has {
		o.Nulls = nulls
	} else {
		o.Nulls = nil
	}
	return o, nil
}

type notNode struct {
	x   node
	out stream.Column
}

func (k *notNode) typ() stream.Type { return stream.TypeBool }
func (k *notNode) kids() []node     { return []node{k.x} }
func (k *notNode) mayFail() bool    { return k.x.mayFail() }

func (k *notNode) eval(b *stream.Batch, act []bool) (*stream.Column, error) {
	xc, err := k.x.eval(b, act)
	if err != nil {
		return nil, err
	}
	n := b.Len()
	o := &k.out
	o.Type, o.Nulls = stream.TypeBool, xc.Nulls
	o.Bools = grow(o.Bools, n)
	notBools(xc.Bools[:n], o.Bools)
	return o, nil
}

// isNullNode is x == nil (or x != nil when not is set); never null.
type isNullNode struct {
	x   node
	not bool
	out stream.Column
}

func (k *isNullNode) typ() stream.Type { return stream.TypeBool }
func (k *isNullNode) kids() []node     { return []node{k.x} }
func (k *isNullNode) mayFail() bool    { return k.x.mayFail() }

func (k *isNullNode) eval(b *stream.Batch, act []bool) (*stream.Column, error) {
	xc, err := k.x.eval(b, act)
	if err != nil {
		return nil, err
	}
	n := b.Len()
	o := &k.out
	o.Type, o.Nulls = stream.TypeBool, nil
	o.Bools = grow(o.Bools, n)
	for i := range o.Bools {
		o.Bools[i] = isNullAt(xc.Nulls, i) != k.not
	}
	return o, nil
}

// ---- strings ----

// concatNode is a + b on strings. All of a batch's results share one
// allocation.
type concatNode struct {
	l, r    node
	buf     []byte
	out     stream.Column
	nullBuf []uint64
}

func (k *concatNode) typ() stream.Type { return stream.TypeString }
func (k *concatNode) kids() []node     { return []node{k.l, k.r} }
func (k *concatNode) mayFail() bool    { return anyFails(k.l, k.r) }

func (k *concatNode) eval(b *stream.Batch, act []bool) (*stream.Column, error) {
	lc, err := k.l.eval(b, act)
	if err != nil {
		return nil, err
	}
	rc, err := k.r.eval(b, act)
	if err != nil {
		return nil, err
	}
	n := b.Len()
	o := &k.out
	o.Type = stream.TypeString
	o.Nulls = orNulls(&k.nullBuf, n, lc.Nulls, rc.Nulls)
	x, y := lc.Strs[:n], rc.Strs[:n]
	buf := k.buf[:0]
	for i := range x {
		buf = append(buf, x[i]...)
		buf = append(buf, y[i]...)
	}
	k.buf = buf
	all := string(buf)
	o.Strs = grow(o.Strs, n)
	off := 0
	for i := range x {
		l := len(x[i]) + len(y[i])
		o.Strs[i] = all[off : off+l]
		off += l
	}
	return o, nil
}

// strPredNode is contains, startsWith or endsWith.
type strPredNode struct {
	op      string
	l, r    node
	out     stream.Column
	nullBuf []uint64
}

func (k *strPredNode) typ() stream.Type { return stream.TypeBool }
func (k *strPredNode) kids() []node     { return []node{k.l, k.r} }
func (k *strPredNode) mayFail() bool    { return anyFails(k.l, k.r) }

func (k *strPredNode) eval(b *stream.Batch, act []bool) (*stream.Column, error) {
	lc, err := k.l.eval(b, act)
	if err != nil {
		return nil, err
	}
	rc, err := k.r.eval(b, act)
	if err != nil {
		return nil, err
	}
	n := b.Len()
	o := &k.out
	o.Type = stream.TypeBool
	o.Nulls = orNulls(&k.nullBuf, n, lc.Nulls, rc.Nulls)
	o.Bools = grow(o.Bools, n)
	out := o.Bools
	x, y := lc.Strs[:n], rc.Strs[:n]
	switch k.op {
	case "contains":
		for i := range out {
			out[i] = strings.Contains(x[i], y[i])
		}
	case "startsWith":
		for i := range out {
			out[i] = strings.HasPrefix(x[i], y[i])
		}
	case "endsWith":
		for i := range out {
			out[i] = strings.HasSuffix(x[i], y[i])
		}
	}
	return o, nil
}

// matchNode is x matches "constant pattern".
type matchNode struct {
	x   node
	re  *regexp.Regexp
	out stream.Column
}

func (k *matchNode) typ() stream.Type { return stream.TypeBool }
func (k *matchNode) kids() []node     { return []node{k.x} }
func (k *matchNode) mayFail() bool    { return k.x.mayFail() }

func (k *matchNode) eval(b *stream.Batch, act []bool) (*stream.Column, error) {
	xc, err := k.x.eval(b, act)
	if err != nil {
		return nil, err
	}
	n := b.Len()
	o := &k.out
	o.Type, o.Nulls = stream.TypeBool, xc.Nulls
	o.Bools = grow(o.Bools, n)
	for i, s := range xc.Strs[:n] {
		o.Bools[i] = live(act, xc.Nulls, i) && k.re.MatchString(s)
	}
	return o, nil
}

// inNode is x in [constants].
type inNode struct {
	x      node
	consts []*constNode
	ints   []int64
	floats []float64
	strs   []string
	intSet map[int64]struct{}
	strSet map[string]struct{}
	hasT   bool
	hasF   bool
	out    stream.Column
}

// linearMax is the set size up to which a linear scan beats a map lookup.
const linearMax = 8

func (k *inNode) add(c *constNode) { k.consts = append(k.consts, c) }

func (k *inNode) finish() {
	xt := k.x.typ()
	for _, c := range k.consts {
		if c.null {
			continue
		}
		switch {
		case xt == stream.TypeString && c.t == stream.TypeString:
			k.strs = append(k.strs, c.s)
		case xt == stream.TypeBool && c.t == stream.TypeBool:
			k.hasT = k.hasT || c.b
			k.hasF = k.hasF || !c.b
		case xt == stream.TypeFloat64 && c.t == stream.TypeFloat64:
			k.floats = append(k.floats, c.f)
		case xt == stream.TypeFloat64 && isNum(c.t):
			k.floats = append(k.floats, float64(c.i))
		case isNum(xt) && c.t == stream.TypeFloat64:
			// An int equals a float only if the float is integral.
			if c.f == math.Trunc(c.f) && c.f >= math.MinInt64 && c.f < math.MaxInt64 {
				k.ints = append(k.ints, int64(c.f))
			}
		case isNum(xt) && isNum(c.t):
			k.ints = append(k.ints, c.i)
		}
	}
	if len(k.ints) > linearMax {
		k.intSet = make(map[int64]struct{}, len(k.ints))
		for _, v := range k.ints {
			k.intSet[v] = struct{}{}
		}
	}
	if len(k.strs) > linearMax {
		k.strSet = make(map[string]struct{}, len(k.strs))
		for _, v := range k.strs {
			k.strSet[v] = struct{}{}
		}
	}
}

func (k *inNode) typ() stream.Type { return stream.TypeBool }
func (k *inNode) kids() []node     { return []node{k.x} }
func (k *inNode) mayFail() bool    { return k.x.mayFail() }

func (k *inNode) eval(b *stream.Batch, act []bool) (*stream.Column, error) {
	xc, err := k.x.eval(b, act)
	if err != nil {
		return nil, err
	}
	n := b.Len()
	o := &k.out
	o.Type, o.Nulls = stream.TypeBool, xc.Nulls
	o.Bools = grow(o.Bools, n)
	out := o.Bools
	switch xc.Type {
	case stream.TypeString:
		for i, v := range xc.Strs[:n] {
			if k.strSet != nil {
				_, out[i] = k.strSet[v]
			} else {
				out[i] = contains(k.strs, v)
			}
		}
	case stream.TypeBool:
		for i, v := range xc.Bools[:n] {
			out[i] = (v && k.hasT) || (!v && k.hasF)
		}
	case stream.TypeFloat64:
		for i, v := range xc.Floats[:n] {
			out[i] = contains(k.floats, v)
		}
	default:
		for i, v := range xc.Ints[:n] {
			if k.intSet != nil {
				_, out[i] = k.intSet[v]
			} else {
				out[i] = contains(k.ints, v)
			}
		}
	}
	return o, nil
}

func contains[T comparable](s []T, v T) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// ---- choice ----

// condNode is cond ? a : b; each branch is needed only for the rows that
// choose it. A null cond gives null.
type condNode struct {
	cond, a, b   node
	t            stream.Type
	maskA, maskB []bool
	out          stream.Column
	outNulls     []uint64
}

func (k *condNode) typ() stream.Type { return k.t }
func (k *condNode) kids() []node     { return []node{k.cond, k.a, k.b} }
func (k *condNode) mayFail() bool    { return anyFails(k.cond, k.a, k.b) }

func (k *condNode) eval(b *stream.Batch, act []bool) (*stream.Column, error) {
	cc, err := k.cond.eval(b, act)
	if err != nil {
		return nil, err
	}
	n := b.Len()
	cv, cn := cc.Bools[:n], cc.Nulls
	aact, bact := act, act
	if k.a.mayFail() {
		aact = narrow(&k.maskA, act, n, func(i int) bool { return cv[i] && !isNullAt(cn, i) })
	}
	if k.b.mayFail() {
		bact = narrow(&k.maskB, act, n, func(i int) bool { return !cv[i] && !isNullAt(cn, i) })
	}
	ac, err := k.a.eval(b, aact)
	if err != nil {
		return nil, err
	}
	bc, err := k.b.eval(b, bact)
	if err != nil {
		return nil, err
	}
	o := &k.out
	o.Type = k.t
	switch k.t {
	case stream.TypeFloat64:
		o.Floats = grow(o.Floats, n)
		pick(cv, ac.Floats[:n], bc.Floats[:n], o.Floats)
	case stream.TypeString:
		o.Strs = grow(o.Strs, n)
		pick(cv, ac.Strs[:n], bc.Strs[:n], o.Strs)
	case stream.TypeBool:
		o.Bools = grow(o.Bools, n)
		pick(cv, ac.Bools[:n], bc.Bools[:n], o.Bools)
	default:
		o.Ints = grow(o.Ints, n)
		pick(cv, ac.Ints[:n], bc.Ints[:n], o.Ints)
	}
	o.Nulls = nil
	if cn == nil && ac.Nulls == nil && bc.Nulls == nil {
		return o, nil
	}
	bm := zeroed(k.outNulls, words(n))
	k.outNulls = bm
	has := false
	for i := range n {
		var null bool
		switch {
		case isNullAt(cn, i):
			null = true
		case cv[i]:
			null = isNullAt(ac.Nulls, i)
		default:
			null = isNullAt(bc.Nulls, i)
		}
		if null {
			bm[i>>6] |= 1 << (uint(i) & 63)
			has = true
		}
	}
	if has {
		o.Nulls = bm
	}
	return o, nil
}

func pick[T any](c []bool, a, b, out []T) {
	a, b, c = a[:len(out)], b[:len(out)], c[:len(out)]
	for i := range out {
		if c[i] {
			out[i] = a[i]
		} else {
			out[i] = b[i]
		}
	}
}
