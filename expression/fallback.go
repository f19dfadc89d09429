package expression

import (
	"errors"
	"fmt"
	"strings"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/file"
	"github.com/expr-lang/expr/vm"

	"github.com/weirstream/weir/stream"
)

// fallbackNode evaluates a subtree that has no native kernel row by row with
// expr-lang's own compiled program, reusing one VM and one environment map.
// A row where a referenced field is null yields null without running the
// program.
type fallbackNode struct {
	t       stream.Type
	what    string
	prog    *vm.Program
	machine vm.VM
	fields  []int    // schema indexes of the referenced fields
	names   []string // and their names
	env     map[string]any
	out     stream.Column
	nullBuf []uint64
}

type identCollector struct{ names map[string]bool }

func (v *identCollector) Visit(n *ast.Node) {
	if id, ok := (*n).(*ast.IdentifierNode); ok {
		v.names[id.Value] = true
	}
}

func newFallback(n ast.Node, t stream.Type, schema *stream.Schema, env map[string]any) (*fallbackNode, error) {
	src := n.String()
	prog, err := expr.Compile(src, expr.Env(env))
	if err != nil {
		return nil, fmt.Errorf("%s: expr-lang cannot compile this part on its own: %v", src, err)
	}
	idents := &identCollector{names: make(map[string]bool)}
	ast.Walk(&n, idents)
	k := &fallbackNode{t: t, what: src, prog: prog, env: make(map[string]any)}
	for i, f := range schema.Fields {
		// $env reaches every field by name.
		if idents.names[f.Name] || idents.names["$env"] {
			k.fields = append(k.fields, i)
			k.names = append(k.names, f.Name)
		}
	}
	return k, nil
}

func (k *fallbackNode) typ() stream.Type { return k.t }
func (k *fallbackNode) kids() []node     { return nil }
func (k *fallbackNode) mayFail() bool    { return true }

func (k *fallbackNode) eval(b *stream.Batch, act []bool) (*stream.Column, error) {
	n := b.Len()
	o := &k.out
	o.Type = k.t
	switch k.t {
	case stream.TypeFloat64:
		o.Floats = grow(o.Floats, n)
	case stream.TypeString:
		o.Strs = grow(o.Strs, n)
	case stream.TypeBool:
		o.Bools = grow(o.Bools, n)
	default:
		o.Ints = grow(o.Ints, n)
	}
	nulls := zeroed(k.nullBuf, words(n))
	k.nullBuf = nulls
	has := false
	for i := range n {
		if !k.load(b, act, i) {
			// Inactive, or a referenced field is null.
			k.setZero(i)
			nulls[i>>6] |= 1 << (uint(i) & 63)
			has = true
			continue
		}
		v, err := k.machine.Run(k.prog, k.env)
		if err != nil {
			var fe *file.Error
			msg := err.Error()
			if errors.As(err, &fe) {
				msg = fe.Message
			}
			// Errors travel to the jobmanager's API and logs: data values
			// quoted in the message are left out.
			return nil, fmt.Errorf("row %d: %s: %s", i, k.what, redactQuoted(msg))
		}
		if v == nil {
			k.setZero(i)
			nulls[i>>6] |= 1 << (uint(i) & 63)
			has = true
			continue
		}
		if !k.store(i, v) {
			return nil, fmt.Errorf("row %d: %s: yielded %T, want %s", i, k.what, v, k.t)
		}
	}
	if has {
		o.Nulls = nulls
	} else {
		o.Nulls = nil
	}
	return o, nil
}

// load puts row i's referenced fields into the environment; it returns
// false when the row is inactive or one of them is null.
func (k *fallbackNode) load(b *stream.Batch, act []bool, i int) bool {
	if act != nil && !act[i] {
		return false
	}
	for j, fi := range k.fields {
		c := &b.Cols[fi]
		if c.Nulls != nil && i>>6 < len(c.Nulls) && c.IsNull(i) {
			return false
		}
		k.env[k.names[j]] = boxValue(c, i)
	}
	return true
}

func (k *fallbackNode) setZero(i int) {
	o := &k.out
	switch k.t {
	case stream.TypeFloat64:
		o.Floats[i] = 0
	case stream.TypeString:
		o.Strs[i] = ""
	case stream.TypeBool:
		o.Bools[i] = false
	default:
		o.Ints[i] = 0
	}
}

// store puts v into row i, converting between Go's numeric types.
func (k *fallbackNode) store(i int, v any) bool {
	o := &k.out
	switch k.t {
	case stream.TypeString:
		s, ok := v.(string)
		o.Strs[i] = s
		return ok
	case stream.TypeBool:
		x, ok := v.(bool)
		o.Bools[i] = x
		return ok
	case stream.TypeFloat64:
		switch x := v.(type) {
		case float64:
			o.Floats[i] = x
		case float32:
			o.Floats[i] = float64(x)
		default:
			iv, ok := toInt64(v)
			o.Floats[i] = float64(iv)
			return ok
		}
		return true
	default:
		iv, ok := toInt64(v)
		o.Ints[i] = iv
		return ok
	}
}

func toInt64(v any) (int64, bool) {
	switch x := v.(type) {
	case int:
		return int64(x), true
	case int64:
		return x, true
	case int32:
		return int64(x), true
	case int16:
		return int64(x), true
	case int8:
		return int64(x), true
	case uint:
		return int64(x), true
	case uint64:
		return int64(x), true
	case uint32:
		return int64(x), true
	case uint16:
		return int64(x), true
	case uint8:
		return int64(x), true
	}
	return 0, false
}

// boxValue returns row i of c as the Go value expr-lang expects for the
// field's declared type.
func boxValue(c *stream.Column, i int) any {
	switch c.Type {
	case stream.TypeFloat64:
		return c.Floats[i]
	case stream.TypeString:
		return c.Strs[i]
	case stream.TypeBool:
		return c.Bools[i]
	}
	return int(c.Ints[i])
}

// redactQuoted replaces every double-quoted part of msg (the runtime's way
// of showing a value) with "…".
func redactQuoted(msg string) string {
	var b strings.Builder
	for {
		i := strings.IndexByte(msg, '"')
		if i < 0 {
			break
		}
		j := strings.IndexByte(msg[i+1:], '"')
		if j < 0 {
			break
		}
		b.WriteString(msg[:i])
		b.WriteString(`"…"`)
		msg = msg[i+j+2:]
	}
	b.WriteString(msg)
	return b.String()
}
