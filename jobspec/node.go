package jobspec

import (
	"fmt"
	"math"
	"strings"

	"go.yaml.in/yaml/v3"
)

// pair is one key/value of a YAML mapping, after merge keys are expanded.
type pair struct {
	key, val *yaml.Node
}

// deref follows aliases to the node they name.
func deref(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

// describe names a node's YAML type and value for "got ..." in errors.
func describe(n *yaml.Node) string {
	n = deref(n)
	if n == nil {
		return "nothing"
	}
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!str":
			return fmt.Sprintf("string %q", n.Value)
		case "!!int":
			return "integer " + n.Value
		case "!!float":
			return "number " + n.Value
		case "!!bool":
			return "bool " + n.Value
		case "!!null":
			return "null"
		}
		return fmt.Sprintf("%s %q", n.ShortTag(), n.Value)
	}
	return "an empty document"
}

func isNull(n *yaml.Node) bool {
	n = deref(n)
	return n == nil || (n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null")
}

// pairs returns the entries of mapping n in document order, expanding merge
// keys (<<) the way YAML 1.1 defines them: keys written in n win over merged
// ones, and earlier merged mappings win over later ones. A key written twice
// in n is an error at the second occurrence. Its work is bounded by the
// size of n with merged mappings expanded, which Parse has checked against
// MaxExpandedBytes (checkExpansion) before anything calls it.
func pairs(n *yaml.Node) ([]pair, *yaml.Node, error) {
	n = deref(n)
	var out []pair
	seen := make(map[string]*yaml.Node)
	var merged [][]pair
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			ms, at, err := mergeSources(v)
			if err != nil {
				return nil, at, err
			}
			merged = append(merged, ms...)
			continue
		}
		if k.Kind == yaml.ScalarNode {
			if prev, dup := seen[k.Value]; dup {
				return nil, k, fmt.Errorf("%s: key is already set at line %d", k.Value, prev.Line)
			}
			seen[k.Value] = k
		}
		out = append(out, pair{k, v})
	}
	for _, ms := range merged {
		for _, p := range ms {
			if p.key.Kind != yaml.ScalarNode {
				out = append(out, p)
				continue
			}
			if _, dup := seen[p.key.Value]; dup {
				continue
			}
			seen[p.key.Value] = p.key
			out = append(out, p)
		}
	}
	return out, nil, nil
}

// mergeSources returns the mappings a merge key's value names, in priority
// order.
func mergeSources(v *yaml.Node) ([][]pair, *yaml.Node, error) {
	d := deref(v)
	var srcs []*yaml.Node
	switch d.Kind {
	case yaml.MappingNode:
		srcs = []*yaml.Node{d}
	case yaml.SequenceNode:
		srcs = d.Content
	default:
		return nil, v, fmt.Errorf("<<: merge key needs a mapping or a list of mappings, got %s", describe(v))
	}
	var out [][]pair
	for _, s := range srcs {
		if deref(s).Kind != yaml.MappingNode {
			return nil, s, fmt.Errorf("<<: merge key needs a mapping or a list of mappings, got %s", describe(s))
		}
		ps, at, err := pairs(s)
		if err != nil {
			return nil, at, err
		}
		out = append(out, ps)
	}
	return out, nil, nil
}

// stringKey returns a mapping key as a string, or an error if it is not one.
func stringKey(k *yaml.Node) (string, error) {
	d := deref(k)
	if d.Kind != yaml.ScalarNode || d.ShortTag() != "!!str" {
		return "", fmt.Errorf("mapping keys must be strings, got %s", describe(k))
	}
	return d.Value, nil
}

func asString(n *yaml.Node) (string, error) {
	d := deref(n)
	if d.Kind != yaml.ScalarNode || d.ShortTag() != "!!str" {
		return "", fmt.Errorf("must be a string, got %s", describe(n))
	}
	return d.Value, nil
}

func asInt(n *yaml.Node) (int, error) {
	d := deref(n)
	if d.Kind != yaml.ScalarNode || d.ShortTag() != "!!int" {
		return 0, fmt.Errorf("must be an integer, got %s", describe(n))
	}
	var v int64
	if err := d.Decode(&v); err != nil || v > math.MaxInt32 || v < math.MinInt32 {
		return 0, fmt.Errorf("integer %s is out of range", d.Value)
	}
	return int(v), nil
}

// asStrings accepts a list of strings or a single string.
func asStrings(n *yaml.Node) ([]string, error) {
	d := deref(n)
	if d.Kind == yaml.ScalarNode && d.ShortTag() == "!!str" {
		return []string{d.Value}, nil
	}
	if d.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("must be a list of field names, got %s", describe(n))
	}
	out := make([]string, 0, len(d.Content))
	for i, e := range d.Content {
		s, err := asString(e)
		if err != nil {
			return nil, fmt.Errorf("[%d]: %v", i, err)
		}
		if s == "" {
			return nil, fmt.Errorf("[%d]: field name is empty", i)
		}
		out = append(out, s)
	}
	return out, nil
}

// suggest returns " (did you mean \"x\"?)" for the candidate closest to s,
// or "" when none is close.
func suggest(s string, candidates []string) string {
	best, bestD := "", -1
	ls := strings.ToLower(s)
	for _, c := range candidates {
		d := editDistance(ls, strings.ToLower(c))
		if bestD < 0 || d < bestD {
			best, bestD = c, d
		}
	}
	limit := max(1, len(s)/3)
	if bestD < 0 || bestD > limit || best == s {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// editDistance is the optimal-string-alignment distance between a and b
// (Levenshtein plus transposition of adjacent bytes).
func editDistance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1) // transposition
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
