package ops

import (
	"fmt"
	"strings"

	dto "github.com/prometheus/client_model/go"
)

// A small PromQL scanner, enough to find the metric names an expression
// selects: it is not a parser and does not validate.

// promqlKeywords are identifiers that are never metric names where they
// stand bare: operators, modifiers, aggregations that may precede by or
// without, and the number literals Inf and NaN.
var promqlKeywords = map[string]bool{
	"and": true, "or": true, "unless": true, "atan2": true,
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"offset": true, "bool": true,
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true, "count": true,
	"count_values": true, "bottomk": true, "topk": true, "quantile": true, "limitk": true, "limit_ratio": true,
	"inf": true, "nan": true,
}

// labelListKeywords are followed by a parenthesised list of label names.
var labelListKeywords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
}

type tokenKind int

const (
	tokIdent tokenKind = iota + 1
	tokNumber
	tokString
	tokPunct    // ( ) { } [ ] , and operators
	tokVariable // a Grafana variable: $name, ${name...}, [[name]]
)

type token struct {
	kind tokenKind
	text string
}

// tokenize splits a PromQL expression (Grafana variables allowed) into
// tokens; comments (# to the end of the line) and white space go.
func tokenize(expr string) ([]token, error) {
	var out []token
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '#':
			for i < len(expr) && expr[i] != '\n' {
				i++
			}
		case c == '"' || c == '\'' || c == '`':
			j := i + 1
			for j < len(expr) && expr[j] != c {
				if expr[j] == '\\' && c != '`' {
					j++
				}
				j++
			}
			if j >= len(expr) {
				return nil, fmt.Errorf("unterminated string at offset %d", i)
			}
			out = append(out, token{tokString, expr[i : j+1]})
			i = j + 1
		case c == '$':
			j := i + 1
			if j < len(expr) && expr[j] == '{' {
				k := strings.IndexByte(expr[j:], '}')
				if k < 0 {
					return nil, fmt.Errorf("unterminated ${ at offset %d", i)
				}
				j += k + 1
			} else {
				for j < len(expr) && isIdentChar(expr[j], false) {
					j++
				}
			}
			out = append(out, token{tokVariable, expr[i:j]})
			i = j
		case c == '[' && strings.HasPrefix(expr[i:], "[["):
			k := strings.Index(expr[i:], "]]")
			if k < 0 {
				return nil, fmt.Errorf("unterminated [[ at offset %d", i)
			}
			out = append(out, token{tokVariable, expr[i : i+k+2]})
			i += k + 2
		case isDigit(c) || c == '.' && i+1 < len(expr) && isDigit(expr[i+1]):
			// Numbers and durations (5m, 1h30m, 1.5e3, 0x1f) alike.
			j := i + 1
			for j < len(expr) && (isIdentChar(expr[j], false) || expr[j] == '.' ||
				(expr[j] == '+' || expr[j] == '-') && (expr[j-1] == 'e' || expr[j-1] == 'E') && !strings.ContainsAny(expr[i:j], "xX")) {
				j++
			}
			out = append(out, token{tokNumber, expr[i:j]})
			i = j
		case isIdentChar(c, true):
			j := i + 1
			for j < len(expr) && isIdentChar(expr[j], false) {
				j++
			}
			out = append(out, token{tokIdent, expr[i:j]})
			i = j
		default:
			n := 1
			for _, op := range []string{"==", "!=", ">=", "<=", "=~", "!~"} {
				if strings.HasPrefix(expr[i:], op) {
					n = 2
				}
			}
			if !strings.ContainsRune("(){}[],+-*/%^=<>!@:", rune(c)) {
				return nil, fmt.Errorf("unexpected %q at offset %d", c, i)
			}
			out = append(out, token{tokPunct, expr[i : i+n]})
			i += n
		}
	}
	return out, nil
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// isIdentChar: letters, _ and : start a PromQL identifier; digits may
// follow.
func isIdentChar(c byte, first bool) bool {
	return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || !first && isDigit(c)
}

// metricNames returns the metric names expr selects, in order of first
// appearance: identifiers that are not functions (followed by "("),
// keywords, label names (inside {} or after by, without, on, ignoring,
// group_left, group_right), and a name given as {__name__="..."}.
func metricNames(expr string) ([]string, error) {
	toks, err := tokenize(expr)
	if err != nil {
		return nil, err
	}
	var names []string
	seen := make(map[string]bool)
	add := func(n string) {
		if !seen[n] {
			seen[n] = true
			names = append(names, n)
		}
	}
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		switch {
		case t.kind == tokPunct && t.text == "{":
			// Label matchers: only __name__="x" names a metric.
			j := i + 1
			for ; j < len(toks) && toks[j].text != "}"; j++ {
				if toks[j].kind == tokIdent && toks[j].text == "__name__" && j+2 < len(toks) &&
					toks[j+1].text == "=" && toks[j+2].kind == tokString {
					add(strings.Trim(toks[j+2].text, "\"'`"))
				}
			}
			if j == len(toks) {
				return nil, fmt.Errorf("unclosed { in %q", expr)
			}
			i = j
		case t.kind == tokPunct && t.text == "[":
			// A range, or a subquery's range and step.
			j := i + 1
			for ; j < len(toks) && toks[j].text != "]"; j++ {
			}
			if j == len(toks) {
				return nil, fmt.Errorf("unclosed [ in %q", expr)
			}
			i = j
		case t.kind == tokIdent && labelListKeywords[strings.ToLower(t.text)]:
			if i+1 < len(toks) && toks[i+1].text == "(" {
				j := i + 2
				for ; j < len(toks) && toks[j].text != ")"; j++ {
				}
				if j == len(toks) {
					return nil, fmt.Errorf("unclosed label list after %s in %q", t.text, expr)
				}
				i = j
			}
		case t.kind == tokIdent && promqlKeywords[strings.ToLower(t.text)]:
		case t.kind == tokIdent && i+1 < len(toks) && toks[i+1].text == "(":
			// A function call (rate, histogram_quantile, vector, ...).
		case t.kind == tokIdent && i > 0 && toks[i-1].text == "@":
			// @ start() / @ end() are calls, caught above; nothing else.
		case t.kind == tokIdent:
			add(t.text)
		}
	}
	return names, nil
}

// familyOf returns the metric family that serves series name: name
// itself, or the histogram whose _bucket, _sum or _count series it is, or
// the summary whose _sum or _count it is. ok is false when families (by
// name, with their types) have none.
func familyOf(name string, families map[string]dto.MetricType) (family string, ok bool) {
	if _, ok := families[name]; ok {
		return name, true
	}
	for _, s := range []string{"_bucket", "_sum", "_count"} {
		base, cut := strings.CutSuffix(name, s)
		if !cut {
			continue
		}
		switch families[base] {
		case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
			return base, true
		case dto.MetricType_SUMMARY:
			if s != "_bucket" {
				return base, true
			}
		}
	}
	return "", false
}
