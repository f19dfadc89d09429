package expression

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/parser"

	"github.com/weirstream/weir/stream"
)

var testSchema = stream.MustSchema(
	stream.Field{Name: "a", Type: stream.TypeInt64},
	stream.Field{Name: "b", Type: stream.TypeInt64},
	stream.Field{Name: "x", Type: stream.TypeFloat64},
	stream.Field{Name: "y", Type: stream.TypeFloat64},
	stream.Field{Name: "s", Type: stream.TypeString},
	stream.Field{Name: "t", Type: stream.TypeString},
	stream.Field{Name: "ok", Type: stream.TypeBool},
	stream.Field{Name: "ts", Type: stream.TypeTimestamp},
	stream.Field{Name: "num", Type: stream.TypeString},
)

var testStrings = []string{"", "apple", "Apple", "google", "banana", "Äpfel", "x", "hello world", "ape", "éclair", "123", "zeta"}

// randomBatch returns n rows of testSchema; with nulls, about one value in
// eight is null.
func randomBatch(r *rand.Rand, n int, nulls bool) *stream.Batch {
	b := stream.NewBatch(testSchema, n)
	randInt := func() int64 {
		switch r.IntN(10) {
		case 0:
			return []int64{math.MinInt64, math.MaxInt64, 0, -1, 1}[r.IntN(5)]
		case 1, 2, 3:
			return r.Int64N(2_000_001) - 1_000_000
		default:
			return r.Int64N(21) - 10
		}
	}
	randFloat := func() float64 {
		switch r.IntN(8) {
		case 0:
			return []float64{0, -0.5, 2.5, 1e20, -3}[r.IntN(5)]
		default:
			return math.Round((r.Float64()*200-100)*100) / 100
		}
	}
	for range n {
		row := []any{
			randInt(), randInt(), randFloat(), randFloat(),
			testStrings[r.IntN(len(testStrings))], testStrings[r.IntN(len(testStrings))],
			r.IntN(2) == 0, r.Int64N(10_000_000), fmt.Sprint(r.IntN(2000) - 1000),
		}
		if nulls {
			for j := range row {
				if r.IntN(8) == 0 {
					row[j] = nil
				}
			}
		}
		b.AppendRow(row...)
	}
	padNulls(b)
	return b
}

// padNulls extends null bitmaps that AppendRow left shorter than the batch,
// so that Column.IsNull can be used on every row.
func padNulls(b *stream.Batch) {
	for j := range b.Cols {
		c := &b.Cols[j]
		for c.Nulls != nil && len(c.Nulls) < words(b.Len()) {
			c.Nulls = append(c.Nulls, 0)
		}
	}
}

// rowEnv is row i of b as an expr-lang environment, as the oracle sees it.
func rowEnv(b *stream.Batch, i int) map[string]any {
	env := make(map[string]any)
	for j, f := range b.Schema.Fields {
		v := b.Cols[j].Value(i)
		if x, ok := v.(int64); ok {
			v = int(x)
		}
		env[f.Name] = v
	}
	return env
}

func typeEnv(s *stream.Schema) map[string]any {
	env := make(map[string]any)
	for _, f := range s.Fields {
		env[f.Name] = zeroValue(f.Type)
	}
	return env
}

// referenced returns the schema fields that src mentions.
func referenced(t *testing.T, src string, s *stream.Schema) []int {
	tree, err := parser.Parse(src)
	if err != nil {
		t.Fatalf("parse %q: %v", src, err)
	}
	v := &identCollector{names: make(map[string]bool)}
	ast.Walk(&tree.Node, v)
	var idx []int
	for i, f := range s.Fields {
		if v.names[f.Name] {
			idx = append(idx, i)
		}
	}
	return idx
}

// oracleValue normalises an expr-lang result to what a column holds.
func oracleValue(v any, t stream.Type) any {
	switch x := v.(type) {
	case int:
		if t == stream.TypeFloat64 {
			return float64(x)
		}
		return int64(x)
	case float64:
		return x
	}
	return v
}

func sameValue(a, b any) bool {
	fa, ok1 := a.(float64)
	fb, ok2 := b.(float64)
	if ok1 && ok2 {
		return fa == fb && math.Signbit(fa) == math.Signbit(fb) || math.IsNaN(fa) && math.IsNaN(fb)
	}
	return reflect.DeepEqual(a, b)
}

// differentialExprs are checked against expr-lang row by row on rows whose
// referenced fields are not null.
var differentialExprs = []string{
	// arithmetic
	"a + b", "a - b", "a * b", "a / (b % 7 + 8)", "a % (b % 7 + 8)", "a % 7", "a % -3", "a % 1",
	"a % 123", "a % 1000000007", "a % 9223372036854775807", "-a", "+a", "-x", "a - -b",
	"x + y", "x * 2", "a * 0.908", "x / y", "a + x", "x - a", "a ** 2", "x ** 0.5", "2 ** a",
	"ts - 1000", "ts % 1000", "(a + b) * (x - y)", "1 + 2 * 3", "10 / 4", "7 % 3",
	// comparisons
	"a == b", "a != b", "a < b", "a <= x", "x > 0.5", "ts > a", "s == t", "s < t", "s >= 'm'",
	"ok == true", "ok != (a > 0)", "x == y", "a == 3", "x >= a", "a < b < 5", "'b' > 'a'",
	// logic
	"a > 0 && b > 0", "a > 0 || x < 0", "!ok", "not ok", "a > 0 and not ok", "ok or b < 0",
	"a % 123 == 0 || a > 5000", "!(a > 0) && (ok || x > 1)",
	// strings
	"s + t", "s + '!'", "'pre-' + s", "s contains 'a'", "s startsWith 'ap'", "t endsWith 'e'",
	"s contains t", "s startsWith t", "s matches '^a.*e$'", "s matches '[0-9]+'", "s not contains 'p'",
	// ternary, in
	"a > 0 ? x : y", "ok ? a : x", "ok ? s : t", "ok ? 1 : 2", "a > b ? a : b", "ok ? ts : ts + 1",
	"a in [1, 2, 3, 5, 8]", "s in ['apple', 'google', 'x']", "a not in [1, 2]", "x in [1, 2.5, -3]",
	"a in [1.0, 2.5, 3]", "s in ['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h', 'apple', 'zeta']",
	"a in [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, -10]", "ok in [true]", "s in []",
	// builtins
	"abs(a)", "abs(x)", "lower(s)", "upper(s)", "len(s)", "int(x)", "float(a)", "string(a)",
	"string(x)", "string(ok)", "string(s)", "round(x)", "floor(x)", "ceil(x)", "round(a)",
	"int(num) + 1", "float(num) / 2", "int(x) % 3", "float(a) / 2", "s | upper()", "len(upper(s) + t)",
	"string(x * 3)", "int(ts)", "abs(-3)",
	// fallback constructs
	"max(a, b)", "min(x, y, 0.5)", "trim(s)", "len(split(s, 'a'))", "let z = a + 1; z * 2",
	"a > 0 ? len(filter([1, 2, 3], # > a % 3)) : 0", "upper(s) + lower(t)", "indexOf(s, 'p')",
	"sum([a, b])", "len(s) > 3 && hasPrefix(t, 'a')", "repeat(s, 2) + t", "float(mean([x, y]))",
	"any([a, b], # > 5)", "type(a)", "bitand(a, 255)", "string(first([s, t]))", "ok ? a : x + 0.5",
}

func TestDifferential(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	batches := []*stream.Batch{randomBatch(r, 200, true), randomBatch(r, 67, true), randomBatch(r, 1024, false), randomBatch(r, 0, false)}
	env := typeEnv(testSchema)
	for _, src := range differentialExprs {
		t.Run(src, func(t *testing.T) {
			prog, err := expr.Compile(src, expr.Env(env))
			if err != nil {
				t.Fatalf("expr-lang rejects %q: %v", src, err)
			}
			refs := referenced(t, src, testSchema)
			for _, fallback := range []bool{false, true} {
				e, err := compile(src, testSchema, fallback)
				if err != nil {
					t.Fatalf("compile(fallback=%v): %v", fallback, err)
				}
				var out stream.Column
				var sel []int
				for bi, b := range batches {
					if err := e.Eval(b, &out); err != nil {
						t.Fatalf("batch %d fallback=%v: %v", bi, fallback, err)
					}
					if out.Len() != b.Len() || out.Type != e.Type() && !(e.Type() == stream.TypeTimestamp && out.Type == stream.TypeTimestamp) {
						t.Fatalf("batch %d: got %d values of %v, want %d of %v", bi, out.Len(), out.Type, b.Len(), e.Type())
					}
					var want []int
					for i := range b.Len() {
						nullIn := false
						for _, j := range refs {
							nullIn = nullIn || b.Cols[j].IsNull(i)
						}
						if nullIn {
							continue
						}
						v, err := expr.Run(prog, rowEnv(b, i))
						if err != nil {
							t.Fatalf("oracle row %d: %v", i, err)
						}
						wantV := oracleValue(v, e.Type())
						if got := out.Value(i); !sameValue(got, wantV) {
							t.Fatalf("batch %d row %d (fallback=%v, env %v): got %#v, want %#v", bi, i, fallback, rowEnv(b, i), got, wantV)
						}
						if v == true {
							want = append(want, i)
						}
					}
					if e.Type() != stream.TypeBool {
						continue
					}
					sel, err = e.Select(b, sel)
					if err != nil {
						t.Fatal(err)
					}
					// Rows with null inputs select nothing unless decided
					// by three-valued logic; compare on the oracle's rows.
					got := sel[:0:0]
					for _, i := range sel {
						nullIn := false
						for _, j := range refs {
							nullIn = nullIn || b.Cols[j].IsNull(i)
						}
						if !nullIn {
							got = append(got, i)
						}
						if !out.Value(i).(bool) {
							t.Fatalf("Select picked row %d whose value is %v", i, out.Value(i))
						}
					}
					if !reflect.DeepEqual(got, want) && (len(got) != 0 || len(want) != 0) {
						t.Fatalf("batch %d Select: got %v, want %v", bi, got, want)
					}
				}
			}
		})
	}
}

// TestNulls checks the null semantics that expr-lang itself does not have.
func TestNulls(t *testing.T) {
	s := stream.MustSchema(
		stream.Field{Name: "a", Type: stream.TypeInt64},
		stream.Field{Name: "b", Type: stream.TypeInt64},
		stream.Field{Name: "ok", Type: stream.TypeBool},
		stream.Field{Name: "s", Type: stream.TypeString},
	)
	b := stream.NewBatch(s, 4)
	b.AppendRow(nil, int64(0), false, "x")     // row 0
	b.AppendRow(int64(5), nil, true, nil)      // row 1
	b.AppendRow(int64(-2), int64(3), nil, "y") // row 2
	b.AppendRow(nil, nil, nil, nil)            // row 3
	tests := []struct {
		src  string
		want []any
	}{
		{"a + 1", []any{nil, int64(6), int64(-1), nil}},
		{"a * 1.5", []any{nil, 7.5, -3.0, nil}},
		{"a == nil", []any{true, false, false, true}},
		{"nil != a", []any{false, true, true, false}},
		{"a ?? 7", []any{int64(7), int64(5), int64(-2), int64(7)}},
		{"a ?? b", []any{int64(0), int64(5), int64(-2), nil}},
		{"a ?? 0.5", []any{0.5, 5.0, -2.0, 0.5}},
		{"a > 0 && ok", []any{false, true, false, nil}},
		{"a > 0 || ok", []any{nil, true, nil, nil}},
		{"ok || a > 0", []any{nil, true, nil, nil}},
		{"ok && a > 0", []any{false, true, false, nil}},
		{"!ok", []any{true, false, nil, nil}},
		{"ok ? 1 : 2", []any{int64(2), int64(1), nil, nil}},
		{"ok ? a : nil", []any{nil, int64(5), nil, nil}},
		{"ok ? nil : s", []any{"x", nil, nil, nil}},
		{"s + '!'", []any{"x!", nil, "y!", nil}},
		{"len(s)", []any{int64(1), nil, int64(1), nil}},
		{"a in [5, -2]", []any{nil, true, true, nil}},
		{"max(a, 1)", []any{nil, int64(5), int64(1), nil}},
		{"a % b", []any{nil, nil, int64(-2), nil}},
		{"string(a)", []any{nil, "5", "-2", nil}},
		{"s == nil ? 'none' : s", []any{"x", "none", "y", "none"}},
		{"nil ?? 3", []any{int64(3), int64(3), int64(3), int64(3)}},
	}
	for _, tt := range tests {
		t.Run(tt.src, func(t *testing.T) {
			e, err := Compile(tt.src, s)
			if err != nil {
				t.Fatal(err)
			}
			var out stream.Column
			out.Nulls = []uint64{^uint64(0)} // stale state must be overwritten
			if err := e.Eval(b, &out); err != nil {
				t.Fatal(err)
			}
			if err := checkColumn(&out, b.Len()); err != nil {
				t.Fatal(err)
			}
			for i, w := range tt.want {
				if got := out.Value(i); !sameValue(got, w) {
					t.Errorf("row %d: got %#v, want %#v", i, got, w)
				}
			}
			if e.Type() != stream.TypeBool {
				return
			}
			sel, err := e.Select(b, nil)
			if err != nil {
				t.Fatal(err)
			}
			var want []int
			for i, w := range tt.want {
				if w == true {
					want = append(want, i)
				}
			}
			if !reflect.DeepEqual(sel, want) && len(sel)+len(want) > 0 {
				t.Errorf("Select: got %v, want %v", sel, want)
			}
		})
	}
}

// checkColumn verifies the stream.Column contract: n values, null slots
// hold the zero value, no stray null bits.
func checkColumn(c *stream.Column, n int) error {
	if c.Len() != n {
		return fmt.Errorf("column has %d values, want %d", c.Len(), n)
	}
	if c.Nulls == nil {
		return nil
	}
	if len(c.Nulls) < words(n) {
		return fmt.Errorf("null bitmap has %d words for %d rows", len(c.Nulls), n)
	}
	for i := range n {
		if !c.IsNull(i) {
			continue
		}
		var zero bool
		switch c.Type {
		case stream.TypeInt64, stream.TypeTimestamp:
			zero = c.Ints[i] == 0
		case stream.TypeFloat64:
			zero = c.Floats[i] == 0
		case stream.TypeString:
			zero = c.Strs[i] == ""
		case stream.TypeBool:
			zero = !c.Bools[i]
		}
		if !zero {
			return fmt.Errorf("null row %d holds a value", i)
		}
	}
	return nil
}

func TestRuntimeErrors(t *testing.T) {
	s := stream.MustSchema(
		stream.Field{Name: "a", Type: stream.TypeInt64},
		stream.Field{Name: "b", Type: stream.TypeInt64},
		stream.Field{Name: "x", Type: stream.TypeFloat64},
		stream.Field{Name: "s", Type: stream.TypeString},
	)
	b := stream.NewBatch(s, 3)
	b.AppendRow(int64(7), int64(2), 1.0, "12")
	b.AppendRow(int64(7), int64(0), 0.0, "abc")
	b.AppendRow(int64(7), nil, 2.0, nil)
	padNulls(b)
	tests := []struct {
		src     string
		wantErr string // empty: no error
	}{
		{"a % b", `expression "a % b": row 1: a % b: integer division by zero`},
		{"a / b", `expression "a / b": row 1: a / b: integer division by zero`},
		{"(a + 1) % (b * 2) > 0", `row 1: (a + 1) % (b * 2): integer division by zero`},
		{"a % 0", `row 0: a % 0: integer division by zero`},
		{"int(s)", `expression "int(s)": row 1: int(s): cannot convert the string (3 bytes) to int: not an integer`},
		{"float(s) > 0", `row 1: float(s): cannot convert the string (3 bytes) to float: not a number`},
		{"a > 0 ? int(s) : 0", `row 1`},
		{"max(a % b, 1)", `row 1: max(a % b, 1):`},
		{"a / x", ""}, // float division: +Inf
		{"x / 0", ""},
		{"b != 0 ? a % b : -1", ""},
		{"b == 0 || a % b == 1", ""},
		{"b != 0 && a % b == 1", ""},
		{"b == 0 ? 0 : a / b", ""},
		{"s == 'abc' ? 0 : int(s)", ""},
		{"b == 0 ? nil : a % b", ""},
		{"(b == 0 ? 1 : b) ?? 0", ""},
		{"a % b ?? 0", `row 1`},
		{"b != 0 ? max(a % b, 0) : 0", ""},
		{"false && a % 0 == 1", ""},
	}
	for _, tt := range tests {
		t.Run(tt.src, func(t *testing.T) {
			e, err := Compile(tt.src, s)
			if err != nil {
				t.Fatal(err)
			}
			var out stream.Column
			err = e.Eval(b, &out)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("got error %v, want one containing %q", err, tt.wantErr)
			}
			if strings.Contains(tt.wantErr, "division") && !errors.Is(err, ErrDivideByZero) {
				t.Fatalf("error %v does not wrap ErrDivideByZero", err)
			}
		})
	}
}

func TestCompileErrors(t *testing.T) {
	s := stream.MustSchema(
		stream.Field{Name: "auction", Type: stream.TypeInt64},
		stream.Field{Name: "bidder", Type: stream.TypeInt64},
		stream.Field{Name: "price", Type: stream.TypeInt64},
		stream.Field{Name: "name", Type: stream.TypeString},
	)
	tests := []struct {
		src     string
		wantErr string
	}{
		{"price * rat", `expression "price * rat": unknown field "rat" (fields: auction, bidder, price, name)`},
		{`"name" + 1`, `expression "\"name\" + 1": invalid operation: + (mismatched types string and int)`},
		{"name > 3", "mismatched types string and int"},
		{"price +", `expression "price +": unexpected token EOF`},
		{"", "expression is empty"},
		{"filter([1, 2], # > 1)", "result has type []interface {}"},
		{"nil", "always nil"},
		{"name matches '['", "error parsing regexp"},
		{"price % 1.5", "mismatched types int and float64"},
	}
	for _, tt := range tests {
		t.Run(tt.src, func(t *testing.T) {
			_, err := Compile(tt.src, s)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("got error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
	if _, err := Compile("price", nil); err == nil {
		t.Fatal("compiling against a nil schema succeeded")
	}
	e, err := Compile("price * 2", s)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Select(stream.NewBatch(s, 0), nil); err == nil || !strings.Contains(err.Error(), "only a bool expression") {
		t.Fatalf("Select on an int expression: %v", err)
	}
}

func TestType(t *testing.T) {
	tests := []struct {
		src  string
		want stream.Type
	}{
		{"1 + 2", stream.TypeInt64},
		{"1.5", stream.TypeFloat64},
		{"a / 2", stream.TypeFloat64},
		{"ts", stream.TypeTimestamp},
		{"ts + 1", stream.TypeInt64},
		{"ok ? ts : ts", stream.TypeTimestamp},
		{"s + t", stream.TypeString},
		{"a > 1", stream.TypeBool},
		{"ok ? 1 : 2.5", stream.TypeFloat64},
		{"max(a, b)", stream.TypeInt64},
		{"trim(s)", stream.TypeString},
		{"round(a)", stream.TypeFloat64},
		{"len(s)", stream.TypeInt64},
		{"'a' + 'b'", stream.TypeString},
	}
	for _, tt := range tests {
		e, err := Compile(tt.src, testSchema)
		if err != nil {
			t.Fatalf("%s: %v", tt.src, err)
		}
		if e.Type() != tt.want {
			t.Errorf("%s: type %v, want %v", tt.src, e.Type(), tt.want)
		}
		if e.Source() != tt.src {
			t.Errorf("Source() = %q, want %q", e.Source(), tt.src)
		}
	}
}

// TestFolding checks that constant subexpressions are computed once and
// errors in constants are still reported only when a row needs them.
func TestFolding(t *testing.T) {
	e, err := Compile("a * (2 + 3) + len('abc')", testSchema)
	if err != nil {
		t.Fatal(err)
	}
	add := e.root.(*arithNode)
	mul := add.l.(*arithNode)
	if c, ok := mul.r.(*constNode); !ok || c.i != 5 {
		t.Fatalf("2 + 3 not folded: %#v", mul.r)
	}
	if c, ok := add.r.(*constNode); !ok || c.i != 3 {
		t.Fatalf("len('abc') not folded: %#v", add.r)
	}
	e, err = Compile("1 % 0", testSchema)
	if err != nil {
		t.Fatal(err)
	}
	var out stream.Column
	if err := e.Eval(randomBatch(rand.New(rand.NewPCG(3, 4)), 2, false), &out); !errors.Is(err, ErrDivideByZero) {
		t.Fatalf("1 %% 0: got %v", err)
	}
}

func TestModConst(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	divisors := []int64{1, -1, 2, -2, 3, 7, 10, 123, 1000, 1 << 32, 1<<32 + 1, 1 << 62, 1<<62 + 3, math.MaxInt64, math.MinInt64, math.MinInt64 + 1}
	for range 200 {
		d := int64(r.Uint64())
		if d != 0 {
			divisors = append(divisors, d, d>>r.IntN(63)|1)
		}
	}
	xs := []int64{0, 1, -1, math.MaxInt64, math.MinInt64, math.MinInt64 + 1, math.MaxInt64 - 1}
	for range 2000 {
		xs = append(xs, int64(r.Uint64()), int64(r.Uint64())>>r.IntN(64), r.Int64N(1000)-500)
	}
	out := make([]int64, len(xs))
	for _, d := range divisors {
		modConst(xs, newDivisor(d), out)
		for i, x := range xs {
			if want := x % d; out[i] != want {
				t.Fatalf("%d %% %d: got %d, want %d", x, d, out[i], want)
			}
		}
	}
}

// TestShortNullBitmap covers input columns whose null bitmap does not reach
// the last rows (stream.Batch.AppendRow leaves it so).
func TestShortNullBitmap(t *testing.T) {
	s := stream.MustSchema(stream.Field{Name: "a", Type: stream.TypeInt64})
	b := stream.NewBatch(s, 130)
	b.AppendRow(nil)
	for i := 1; i < 130; i++ {
		b.AppendRow(int64(i))
	}
	if len(b.Cols[0].Nulls) != 1 {
		t.Skip("stream now pads null bitmaps")
	}
	for _, src := range []string{"a + 1", "a > 100", "max(a, 0)", "a ?? 0", "a"} {
		e, err := Compile(src, s)
		if err != nil {
			t.Fatal(err)
		}
		var out stream.Column
		if err := e.Eval(b, &out); err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		if err := checkColumn(&out, 130); err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		if src != "a ?? 0" && out.Value(0) != nil || out.Value(129) == nil {
			t.Fatalf("%s: rows 0 and 129 are %v and %v", src, out.Value(0), out.Value(129))
		}
	}
}

// Runtime errors travel to the jobmanager's API: they name the row and the
// expression, never the data value that failed.
func TestRuntimeErrorsDoNotEchoValues(t *testing.T) {
	s := stream.MustSchema(stream.Field{Name: "s", Type: stream.TypeString})
	b := stream.NewBatch(s, 1)
	b.AppendRow("AWS_SECRET_ACCESS_KEY=hunter2")
	padNulls(b)
	for _, src := range []string{"int(s)", "float(s) > 0"} {
		e, err := Compile(src, s)
		if err != nil {
			t.Fatal(err)
		}
		var out stream.Column
		err = e.Eval(b, &out)
		if err == nil || strings.Contains(err.Error(), "hunter2") || !strings.Contains(err.Error(), "row 0") {
			t.Errorf("%s: error %v; want one that names row 0 and not the value", src, err)
		}
	}
	if got := redactQuoted(`strconv.Atoi: parsing "secret": invalid syntax; "x" and "`); got != `strconv.Atoi: parsing "…": invalid syntax; "…" and "` {
		t.Errorf("redactQuoted: %q", got)
	}
}
