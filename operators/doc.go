// Package operators owns Weir's built-in row transforms that are driven by
// expressions: "map", "filter" and "project". Register adds them to a
// stream.Registry. Their Plan functions decode the JSON config, compile every
// expression against the input schema (so a bad expression fails the job at
// submit time, with the option and the reason) and return the output schema;
// each operator instance compiles its expressions once, in Open.
//
// Configs (JSON; YAML job specs use the same keys):
//
//	map:     {"set": [{"name": "price_eur", "expr": "price * 0.908"}, ...]}
//	filter:  {"where": "price > 100 && channel != 'apple'"}
//	project: {"fields": [{"name": "auction"}, {"name": "eur", "expr": "price * 0.908"}]}
//
// map appends each new name as a field at the end of the schema, in order,
// and replaces an existing field in place (its type may change). Every
// expression of a map sees the input fields only, never the result of an
// earlier entry of the same map: {"set": [{"name": "price", "expr": "price *
// 2"}, {"name": "p2", "expr": "price"}]} gives p2 the original price. Chain
// two maps to build on a computed field.
//
// filter keeps the rows whose where-expression (which must be bool) is true;
// null counts as false. Rows stay in place (Batch.Filter) and a batch that
// loses every row is released rather than forwarded.
//
// project outputs exactly the listed fields, in order: an entry with only a
// name copies that input field, one with an expression computes it.
//
// All three keep each row's event time (Batch.Times) and forward watermarks
// unchanged. Expressions are expr-lang, evaluated column at a time by package
// expression; see there for types and null semantics.
//
// The package imports the standard library, package stream and package
// expression.
package operators
