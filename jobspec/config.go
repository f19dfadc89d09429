package jobspec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	"go.yaml.in/yaml/v3"
)

// configError is a problem in a config node, with the node that has it and
// the path from the config root ("config.fields[2].name").
type configError struct {
	node *yaml.Node
	path string
	msg  string
}

func (e *configError) Error() string { return e.path + ": " + e.msg }

// toJSON converts a YAML node to JSON, keeping the order of mapping keys.
// The JSON is at most a few times the size of n with its aliases expanded,
// which Parse has checked against MaxExpandedBytes before converting
// anything; stream.Plan then holds it to stream.MaxConfigBytes.
func toJSON(n *yaml.Node) (json.RawMessage, error) {
	var c converter
	if err := c.write(n, "config", 0); err != nil {
		return nil, err
	}
	return json.RawMessage(c.b.Bytes()), nil
}

// maxDepth bounds the nesting of a config so that its error can name the
// path; checkExpansion has already bounded the nesting of the whole spec.
const maxDepth = 64

type converter struct {
	b bytes.Buffer
}

func (c *converter) write(n *yaml.Node, path string, depth int) error {
	if depth > maxDepth {
		return &configError{n, path, fmt.Sprintf("nested more than %d levels deep", maxDepth)}
	}
	b := &c.b
	orig := n
	n = deref(n)
	switch n.Kind {
	case yaml.MappingNode:
		ps, at, err := pairs(n)
		if err != nil {
			return &configError{at, path, err.Error()}
		}
		b.WriteByte('{')
		for i, p := range ps {
			k, err := stringKey(p.key)
			if err != nil {
				return &configError{p.key, path, err.Error()}
			}
			if i > 0 {
				b.WriteByte(',')
			}
			writeString(b, k)
			b.WriteByte(':')
			if err := c.write(p.val, path+"."+k, depth+1); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	case yaml.SequenceNode:
		b.WriteByte('[')
		for i, e := range n.Content {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := c.write(e, fmt.Sprintf("%s[%d]", path, i), depth+1); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	case yaml.ScalarNode:
		return writeScalar(b, n, path)
	default:
		return &configError{orig, path, fmt.Sprintf("unsupported YAML node (%s)", describe(orig))}
	}
	return nil
}

func writeScalar(b *bytes.Buffer, n *yaml.Node, path string) error {
	switch n.ShortTag() {
	case "!!null":
		b.WriteString("null")
	case "!!bool":
		var v bool
		if err := n.Decode(&v); err != nil {
			return &configError{n, path, fmt.Sprintf("invalid bool %q", n.Value)}
		}
		b.WriteString(strconv.FormatBool(v))
	case "!!int":
		var i int64
		if err := n.Decode(&i); err == nil {
			b.WriteString(strconv.FormatInt(i, 10))
			return nil
		}
		var u uint64
		if err := n.Decode(&u); err == nil {
			b.WriteString(strconv.FormatUint(u, 10))
			return nil
		}
		return &configError{n, path, fmt.Sprintf("integer %s does not fit in 64 bits; quote it to pass a string", n.Value)}
	case "!!float":
		var f float64
		if err := n.Decode(&f); err != nil {
			return &configError{n, path, fmt.Sprintf("invalid number %q", n.Value)}
		}
		if math.IsInf(f, 0) || math.IsNaN(f) {
			return &configError{n, path, fmt.Sprintf("%s cannot be represented in JSON; quote it to pass a string", n.Value)}
		}
		b.WriteString(strconv.FormatFloat(f, 'g', -1, 64))
	case "!!str", "!!timestamp", "!!binary":
		writeString(b, n.Value)
	default:
		return &configError{n, path, fmt.Sprintf("unsupported YAML tag %s", n.Tag)}
	}
	return nil
}

// writeString writes s as a JSON string without HTML escaping, so that an
// expression such as "price > 10" stays readable in the config.
func writeString(b *bytes.Buffer, s string) {
	e := json.NewEncoder(b)
	e.SetEscapeHTML(false)
	_ = e.Encode(s)         // a string always encodes
	b.Truncate(b.Len() - 1) // Encode appends a newline
}
