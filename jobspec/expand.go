package jobspec

import (
	"errors"
	"fmt"

	"go.yaml.in/yaml/v3"

	"github.com/weirstream/weir/internal/errkind"
)

// Limits on the size of a job spec. The job it describes is held to the
// limits of package stream as well (stream.MaxOperators and the rest).
const (
	// MaxSpecBytes is the largest job spec Parse and Load accept, in bytes
	// as written. The YAML decoder needs a few hundred bytes for every node
	// it reads, so this bounds its memory; a spec of stream.MaxOperators
	// operators with ordinary configs is far smaller.
	MaxSpecBytes = 1 << 20

	// MaxExpandedBytes is the largest a job spec may be once every alias
	// (*name) and merge key (<<) is replaced by the value it names: the
	// length of every scalar value plus one for every node, counting a
	// value once for every alias that reaches it. A few kilobytes of nested
	// aliases can stand for gigabytes of values ("billion laughs"); Parse
	// measures the expanded size before it converts anything, without
	// expanding, and stops as soon as the limit is passed. A spec without
	// aliases counts at most about twice its written size, so any spec
	// within MaxSpecBytes that uses aliases for modest repetition fits.
	MaxExpandedBytes = 4 << 20
)

// maxExpandedDepth bounds the nesting of a spec with its aliases expanded,
// so that the walk measuring it cannot exhaust the stack. It is deeper
// than any valid spec: an operator's config is itself limited to maxDepth
// levels, and it starts four levels down.
const maxExpandedDepth = 100

// ErrTooLarge is wrapped by the errors of a spec over MaxSpecBytes or
// MaxExpandedBytes.
var ErrTooLarge = errors.New("jobspec: spec too large")

// expansion measures a YAML document as if its aliases were expanded,
// without expanding them.
type expansion struct {
	left int // bytes of MaxExpandedBytes not yet used
	// open holds the anchored nodes on the path being walked: an alias to
	// one of them would make a value contain itself, which yaml.v3 accepts
	// and which would expand forever.
	open map[*yaml.Node]bool
	// via is the outermost alias on the path being walked, or nil: when the
	// budget runs out, the alias that led there is the line to point at.
	via *yaml.Node
}

// checkExpansion returns an error, and the node it is about, if the
// document under doc is larger than MaxExpandedBytes or nested deeper than
// maxExpandedDepth once its aliases are expanded, or if a value contains
// an alias to itself. Its work is bounded by MaxExpandedBytes whatever the
// document holds.
func checkExpansion(doc *yaml.Node) (*yaml.Node, error) {
	x := &expansion{left: MaxExpandedBytes, open: make(map[*yaml.Node]bool)}
	return x.walk(doc, 0)
}

func (x *expansion) walk(n *yaml.Node, depth int) (*yaml.Node, error) {
	if n.Kind == yaml.AliasNode {
		target := n.Alias
		if target == nil { // the decoder rejects unknown anchors; be safe
			return n, fmt.Errorf("alias *%s names no value", n.Value)
		}
		if x.open[target] {
			return n, fmt.Errorf("alias *%s is inside the value it names, so that value would contain itself; refer to a value defined elsewhere", n.Value)
		}
		outer := x.via == nil
		if outer {
			x.via = n
		}
		at, err := x.walk(target, depth)
		if outer {
			x.via = nil
		}
		return at, err
	}
	if depth > maxExpandedDepth {
		return n, fmt.Errorf("the spec is nested more than %d levels deep once its aliases are expanded; flatten it", maxExpandedDepth)
	}
	if x.left -= len(n.Value) + 1; x.left < 0 {
		at, where := n, ""
		if x.via != nil {
			at, where = x.via, " (reached through the alias on this line)"
		}
		return at, errkind.Mark(fmt.Errorf("the spec is larger than %d bytes once YAML aliases and merge keys are expanded%s; "+
			"the limit is jobspec.MaxExpandedBytes; alias fewer or smaller values", MaxExpandedBytes, where), ErrTooLarge)
	}
	if len(n.Content) == 0 {
		return nil, nil
	}
	if n.Anchor != "" {
		x.open[n] = true
		defer delete(x.open, n)
	}
	for _, c := range n.Content {
		if at, err := x.walk(c, depth+1); err != nil {
			return at, err
		}
	}
	return nil, nil
}
