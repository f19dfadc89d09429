package expression

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strings"

	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/checker"
	"github.com/expr-lang/expr/checker/nature"
	"github.com/expr-lang/expr/conf"
	"github.com/expr-lang/expr/file"

	"github.com/weirstream/weir/stream"
)

// ErrDivideByZero is wrapped by the error Eval and Select return when an
// integer division or remainder by zero happens in a row whose value is
// needed.
var ErrDivideByZero = errors.New("integer division by zero")

// errUnsupported tells a parent node that a child cannot be evaluated as a
// column (its type is not a scalar), so the parent must fall back as a whole.
var errUnsupported = errors.New("not a column expression")

// Expr is a compiled expression. It is not safe for concurrent use: it owns
// scratch buffers reused from one batch to the next.
type Expr struct {
	src    string
	schema *stream.Schema
	root   node
	typ    stream.Type
}

// Compile parses and type-checks src against schema and builds its
// vectorized evaluator. Errors name the expression and the reason; an
// unknown field lists the schema's fields.
func Compile(src string, schema *stream.Schema) (*Expr, error) {
	return compile(src, schema, false)
}

// compile is Compile; forceFallback evaluates the whole expression with
// expr-lang's virtual machine (for benchmarks and differential tests).
func compile(src string, schema *stream.Schema, forceFallback bool) (*Expr, error) {
	if schema == nil {
		return nil, fmt.Errorf("expression %q: no input schema", src)
	}
	if strings.TrimSpace(src) == "" {
		return nil, errors.New("expression is empty")
	}
	env := make(map[string]any, len(schema.Fields))
	for _, f := range schema.Fields {
		env[f.Name] = zeroValue(f.Type)
	}
	c := &compiler{src: src, schema: schema, env: env}
	tree, err := checker.ParseCheck(src, conf.New(env))
	if err != nil {
		return nil, c.checkError(err)
	}
	root, err := c.build(tree.Node)
	if forceFallback && err == nil {
		// The native tree knows the type where expr-lang does not (ok ? 1 : 2.5).
		root, err = newFallback(tree.Node, root.typ(), schema, env)
	}
	if errors.Is(err, errUnsupported) {
		return nil, fmt.Errorf("expression %q: result has type %s; an expression must yield an int, float, string or bool (convert it with int(), float() or string())", src, tree.Node.Type())
	}
	if err != nil {
		return nil, fmt.Errorf("expression %q: %w", src, err)
	}
	if root.typ() == stream.TypeInvalid {
		return nil, fmt.Errorf("expression %q: result is always nil, so it has no type", src)
	}
	return &Expr{src: src, schema: schema, root: root, typ: root.typ()}, nil
}

// Type returns the type of the expression's values.
func (e *Expr) Type() stream.Type { return e.typ }

// Source returns the expression's text.
func (e *Expr) Source() string { return e.src }

// Schema returns the schema the expression was compiled against; batches
// passed to Eval and Select must have it.
func (e *Expr) Schema() *stream.Schema { return e.schema }

func (e *Expr) String() string { return e.src }

// Eval computes the expression for every row of b into out, which is
// overwritten with b.Len() values of e.Type() (its capacity is reused). out
// must not be one of b's columns.
func (e *Expr) Eval(b *stream.Batch, out *stream.Column) error {
	c, err := e.root.eval(b, nil)
	if err != nil {
		return fmt.Errorf("expression %q: %w", e.src, err)
	}
	copyColumn(out, c, b.Len())
	return nil
}

// Select appends to sel[:0] the ascending indexes of the rows of b for which
// the expression is true (null counts as false) and returns it. It is for
// bool expressions only.
func (e *Expr) Select(b *stream.Batch, sel []int) ([]int, error) {
	if e.typ != stream.TypeBool {
		return sel[:0], fmt.Errorf("expression %q has type %s; only a bool expression can select rows", e.src, e.typ)
	}
	c, err := e.root.eval(b, nil)
	if err != nil {
		return sel[:0], fmt.Errorf("expression %q: %w", e.src, err)
	}
	return selectTrue(c, b.Len(), sel), nil
}

func zeroValue(t stream.Type) any {
	switch t {
	case stream.TypeFloat64:
		return float64(0)
	case stream.TypeString:
		return ""
	case stream.TypeBool:
		return false
	}
	return int(0)
}

// compiler turns a checked expr-lang tree into kernels.
type compiler struct {
	src    string
	schema *stream.Schema
	env    map[string]any
}

// checkError turns an expr-lang parse or type error into ours.
func (c *compiler) checkError(err error) error {
	var fe *file.Error
	if !errors.As(err, &fe) {
		return fmt.Errorf("expression %q: %v", c.src, err)
	}
	if name, ok := strings.CutPrefix(fe.Message, "unknown name "); ok {
		return fmt.Errorf("expression %q: unknown field %q (fields: %s)", c.src, name, strings.Join(c.schema.Names(), ", "))
	}
	return fmt.Errorf("expression %q: %s (at column %d)", c.src, fe.Message, fe.Column+1)
}

// build returns the kernel for n: native when possible, else expr-lang's VM
// for the subtree. It returns errUnsupported when n's value is not a scalar.
func (c *compiler) build(n ast.Node) (node, error) {
	k, err := c.native(n)
	if errors.Is(err, errUnsupported) {
		return c.fallback(n)
	}
	if err != nil {
		return nil, err
	}
	return c.fold(k), nil
}

// fold replaces a native node whose operands are all constants by its value.
// A node that fails on constants (1 % 0) is kept, so that the error is
// reported only if a row needs its value.
func (c *compiler) fold(k node) node {
	switch k.(type) {
	case *constNode, *fieldNode, *fallbackNode:
		return k
	}
	kids := k.kids()
	for _, kid := range kids {
		if _, ok := kid.(*constNode); !ok {
			return k
		}
	}
	b := stream.NewBatch(c.schema, 0)
	defer b.Release()
	b.SetLen(1)
	col, err := k.eval(b, nil)
	if err != nil || k.typ() == stream.TypeInvalid {
		return k
	}
	return constFromColumn(col, k.typ())
}

// native builds a kernel for n, or returns errUnsupported.
func (c *compiler) native(n ast.Node) (node, error) {
	switch n := n.(type) {
	case *ast.IdentifierNode:
		i := c.schema.Index(n.Value)
		if i < 0 {
			return nil, errUnsupported
		}
		return &fieldNode{idx: i, t: c.schema.Fields[i].Type}, nil
	case *ast.IntegerNode:
		return &constNode{t: stream.TypeInt64, i: int64(n.Value)}, nil
	case *ast.FloatNode:
		return &constNode{t: stream.TypeFloat64, f: n.Value}, nil
	case *ast.StringNode:
		return &constNode{t: stream.TypeString, s: n.Value}, nil
	case *ast.BoolNode:
		return &constNode{t: stream.TypeBool, b: n.Value}, nil
	case *ast.NilNode:
		return &constNode{t: stream.TypeInvalid, null: true}, nil
	case *ast.UnaryNode:
		return c.unary(n)
	case *ast.BinaryNode:
		return c.binary(n)
	case *ast.ConditionalNode:
		return c.conditional(n)
	case *ast.BuiltinNode:
		return c.builtin(n)
	}
	return nil, errUnsupported
}

func (c *compiler) unary(n *ast.UnaryNode) (node, error) {
	x, err := c.build(n.Node)
	if err != nil {
		return nil, err
	}
	switch n.Operator {
	case "!", "not":
		if x.typ() != stream.TypeBool {
			return nil, errUnsupported
		}
		return &notNode{x: x}, nil
	case "-":
		if !isNum(x.typ()) {
			return nil, errUnsupported
		}
		return &negNode{x: x, t: numType(x.typ())}, nil
	case "+":
		if !isNum(x.typ()) {
			return nil, errUnsupported
		}
		return x, nil
	}
	return nil, errUnsupported
}

func (c *compiler) binary(n *ast.BinaryNode) (node, error) {
	switch n.Operator {
	case "in":
		return c.in(n)
	case "matches":
		return c.matches(n)
	}
	l, err := c.build(n.Left)
	if err != nil {
		return nil, err
	}
	r, err := c.build(n.Right)
	if err != nil {
		return nil, err
	}
	lt, rt := l.typ(), r.typ()
	switch n.Operator {
	case "+", "-", "*", "/", "%", "**", "^":
		if n.Operator == "+" && lt == stream.TypeString && rt == stream.TypeString {
			return &concatNode{l: l, r: r}, nil
		}
		if !isNum(lt) || !isNum(rt) {
			return nil, errUnsupported
		}
		op := arithOps[n.Operator]
		t := stream.TypeInt64
		if lt == stream.TypeFloat64 || rt == stream.TypeFloat64 || op == opDiv || op == opPow {
			t = stream.TypeFloat64
		}
		if op == opMod && t != stream.TypeInt64 {
			return nil, errUnsupported
		}
		k := &arithNode{op: op, l: l, r: r, t: t, what: n.String()}
		if op == opMod {
			if cn, ok := r.(*constNode); ok && !cn.null && cn.i != 0 {
				k.div = newDivisor(cn.i)
			}
		}
		return k, nil
	case "==", "!=", "<", "<=", ">", ">=":
		op := cmpOps[n.Operator]
		if op == cmpEq || op == cmpNe {
			if isNil(l) && isNil(r) {
				return &constNode{t: stream.TypeBool, b: op == cmpEq}, nil
			}
			if isNil(r) {
				return &isNullNode{x: l, not: op == cmpNe}, nil
			}
			if isNil(l) {
				return &isNullNode{x: r, not: op == cmpNe}, nil
			}
		}
		switch {
		case isNum(lt) && isNum(rt):
		case lt == stream.TypeString && rt == stream.TypeString:
		case lt == stream.TypeBool && rt == stream.TypeBool && (op == cmpEq || op == cmpNe):
		default:
			return nil, errUnsupported
		}
		return &cmpNode{op: op, l: l, r: r}, nil
	case "&&", "and", "||", "or":
		if lt != stream.TypeBool || rt != stream.TypeBool {
			return nil, errUnsupported
		}
		return &logicNode{or: n.Operator == "||" || n.Operator == "or", l: l, r: r}, nil
	case "contains", "startsWith", "endsWith":
		if lt != stream.TypeString || rt != stream.TypeString {
			return nil, errUnsupported
		}
		return &strPredNode{op: n.Operator, l: l, r: r}, nil
	case "??":
		t, ok := unify(lt, rt)
		if !ok {
			return nil, errUnsupported
		}
		if t == stream.TypeInvalid {
			return nil, errUnsupported
		}
		return &coalesceNode{l: coerce(l, t), r: coerce(r, t), t: t}, nil
	}
	return nil, errUnsupported
}

// in handles x in [literal, ...].
func (c *compiler) in(n *ast.BinaryNode) (node, error) {
	arr, ok := n.Right.(*ast.ArrayNode)
	if !ok {
		return nil, errUnsupported
	}
	x, err := c.build(n.Left)
	if err != nil {
		return nil, err
	}
	k := &inNode{x: x}
	for _, e := range arr.Nodes {
		ek, err := c.native(e)
		if err != nil {
			return nil, errUnsupported
		}
		ek = c.fold(ek)
		cn, ok := ek.(*constNode)
		if !ok {
			return nil, errUnsupported
		}
		k.add(cn)
	}
	switch x.typ() {
	case stream.TypeInt64, stream.TypeTimestamp, stream.TypeFloat64, stream.TypeString, stream.TypeBool:
	default:
		return nil, errUnsupported
	}
	k.finish()
	return k, nil
}

func (c *compiler) matches(n *ast.BinaryNode) (node, error) {
	pat, ok := n.Right.(*ast.StringNode)
	if !ok {
		return nil, errUnsupported
	}
	x, err := c.build(n.Left)
	if err != nil {
		return nil, err
	}
	if x.typ() != stream.TypeString {
		return nil, errUnsupported
	}
	re, err := regexp.Compile(pat.Value)
	if err != nil {
		return nil, fmt.Errorf("matches: invalid regular expression %q: %v", pat.Value, err)
	}
	return &matchNode{x: x, re: re}, nil
}

func (c *compiler) conditional(n *ast.ConditionalNode) (node, error) {
	cond, err := c.build(n.Cond)
	if err != nil {
		return nil, err
	}
	if cond.typ() != stream.TypeBool {
		return nil, errUnsupported
	}
	a, err := c.build(n.Exp1)
	if err != nil {
		return nil, err
	}
	b, err := c.build(n.Exp2)
	if err != nil {
		return nil, err
	}
	t, ok := unify(a.typ(), b.typ())
	if !ok || t == stream.TypeInvalid {
		return nil, errUnsupported
	}
	return &condNode{cond: cond, a: coerce(a, t), b: coerce(b, t), t: t}, nil
}

func (c *compiler) builtin(n *ast.BuiltinNode) (node, error) {
	if len(n.Arguments) != 1 {
		return nil, errUnsupported
	}
	switch n.Name {
	case "abs", "lower", "upper", "len", "int", "float", "string", "round", "floor", "ceil":
	default:
		return nil, errUnsupported
	}
	x, err := c.build(n.Arguments[0])
	if err != nil {
		return nil, err
	}
	xt := x.typ()
	k := &funcNode{fn: n.Name, x: x, what: n.String()}
	switch n.Name {
	case "abs":
		if !isNum(xt) {
			return nil, errUnsupported
		}
		k.t = numType(xt)
	case "lower", "upper":
		if xt != stream.TypeString {
			return nil, errUnsupported
		}
		k.t = stream.TypeString
	case "len":
		if xt != stream.TypeString {
			return nil, errUnsupported
		}
		k.t = stream.TypeInt64
	case "int":
		if !isNum(xt) && xt != stream.TypeString {
			return nil, errUnsupported
		}
		k.t = stream.TypeInt64
	case "float", "round", "floor", "ceil":
		if !isNum(xt) && (xt != stream.TypeString || n.Name != "float") {
			return nil, errUnsupported
		}
		k.t = stream.TypeFloat64
	case "string":
		if xt == stream.TypeInvalid {
			return nil, errUnsupported
		}
		k.t = stream.TypeString
	}
	return k, nil
}

// fallback evaluates n row by row with expr-lang's VM.
func (c *compiler) fallback(n ast.Node) (node, error) {
	t, ok := scalarType(n.Nature())
	if !ok {
		return nil, errUnsupported
	}
	return newFallback(n, t, c.schema, c.env)
}

// scalarType maps an expr-lang type onto a column type.
func scalarType(nt *nature.Nature) (stream.Type, bool) {
	if nt == nil || nt.Type == nil {
		return stream.TypeInvalid, false
	}
	return kindType(nt.Type.Kind())
}

func isNum(t stream.Type) bool { return t.IsNumeric() }

// numType is the arithmetic type of a numeric operand (timestamps are ints).
func numType(t stream.Type) stream.Type {
	if t == stream.TypeFloat64 {
		return t
	}
	return stream.TypeInt64
}

func isNil(k node) bool {
	cn, ok := k.(*constNode)
	return ok && cn.t == stream.TypeInvalid
}

// unify returns the type of a value that is either of a or b (ternary, ??).
func unify(a, b stream.Type) (stream.Type, bool) {
	switch {
	case a == b:
		return a, true
	case a == stream.TypeInvalid:
		return b, true
	case b == stream.TypeInvalid:
		return a, true
	case isNum(a) && isNum(b):
		if a == stream.TypeFloat64 || b == stream.TypeFloat64 {
			return stream.TypeFloat64, true
		}
		return stream.TypeInt64, true
	}
	return stream.TypeInvalid, false
}

// kindType maps a reflect kind onto a column type.
func kindType(k reflect.Kind) (stream.Type, bool) {
	switch k {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return stream.TypeInt64, true
	case reflect.Float32, reflect.Float64:
		return stream.TypeFloat64, true
	case reflect.String:
		return stream.TypeString, true
	case reflect.Bool:
		return stream.TypeBool, true
	}
	return stream.TypeInvalid, false
}
