// Package expression compiles expr-lang (github.com/expr-lang/expr)
// expressions against a stream.Schema into vectorized evaluators that work a
// whole stream.Batch column at a time. It owns the mapping from expr-lang's
// syntax and types onto Weir's columns and their null semantics; the built-in
// map, filter and project operators (package operators) and any other
// operator that takes user expressions use it.
//
// It may import the standard library, package stream and expr-lang; nothing
// else of Weir's.
//
// # How an expression is evaluated
//
// Compile parses and type-checks the source once with expr-lang, declaring
// every schema field as a variable (int64 and timestamp fields as int,
// float64 as float, string and bool as themselves). It then walks the typed
// syntax tree and builds a tree of column kernels: each kernel turns its
// operands' columns into one result column of b.Len() values in a tight loop,
// reusing its scratch buffers from one batch to the next. Natively supported:
//
//   - field references, int/float/string/bool literals and nil;
//   - + - * / % ** (int64 and float64, ints promoted to float when mixed;
//     / always yields float64, as in expr-lang), unary - and +;
//   - == != < <= > >= on numbers, strings, bools (== and != only) and
//     timestamps;
//   - and/&&, or/||, not/!; the ternary c ? a : b; a ?? b;
//   - string concatenation with +; in / not in a literal array;
//     contains, startsWith, endsWith; matches with a constant pattern
//     (compiled once);
//   - abs, lower, upper, len (of a string, in runes), int, float, string,
//     round, floor, ceil.
//
// Any other valid expr-lang construct (closures such as filter or all,
// let, member access, other builtins, a non-constant regular expression…)
// is evaluated row by row by expr-lang's own virtual machine, on the smallest
// subtree that contains it, with one reused environment. Every valid
// expression with a scalar (int, float, string or bool) result therefore
// works; unsupported parts are merely slower.
//
// # Nulls and errors
//
// If any operand of an operator or function is null, its result is null,
// with these exceptions: x == nil and x != nil test for null and are never
// null; a ?? b yields b where a is null; and/or use three-valued logic
// (false && null is false, true || null is true); c ? a : b is null where c
// is null. A subtree evaluated by expr-lang is null where any field it
// references is null. Expr.Select treats null as false.
//
// Like expr-lang, && and || do not evaluate their right operand where the
// left one decides the result, and a ternary evaluates each branch only for
// the rows that choose it: an error (such as an integer division by zero) in
// a row that does not need the value is not reported.
//
// Integer division by zero (x % 0, and x / 0 with both operands integers,
// where expr-lang would return +Inf) is an error that names the expression
// and the row. Float division by zero yields ±Inf or NaN as in IEEE 754.
// Integer overflow wraps, as in Go.
//
// Timestamp fields behave as int64 milliseconds; a bare reference to a
// timestamp field (or a ternary choosing between timestamps) keeps the
// timestamp type, any arithmetic on it yields int64.
//
// # Concurrency
//
// An Expr holds scratch buffers and must be used by one goroutine at a time;
// compile one per operator instance.
package expression
