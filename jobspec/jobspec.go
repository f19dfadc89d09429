package jobspec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/weirstream/weir/internal/errkind"
	"github.com/weirstream/weir/stream"
	"go.yaml.in/yaml/v3"
)

// Error is a problem in a job spec, at a line of a file. Err is the reason;
// it is a *stream.VertexError when the operator type's planning rejected the
// operator, so errors.As finds it.
type Error struct {
	File string
	Line int
	Err  error
}

func (e *Error) Error() string { return fmt.Sprintf("%s:%d: %v", e.File, e.Line, e.Err) }
func (e *Error) Unwrap() error { return e.Err }

// Load reads the job spec at path and parses it with Parse. Errors name the
// path as given; when the file cannot be read they wrap the error of the
// file system (errors.Is finds fs.ErrNotExist, fs.ErrPermission). It reads
// no more than MaxSpecBytes and one byte, so that a huge file is rejected
// without being read whole.
func Load(path string, reg *stream.Registry) (*stream.JobGraph, error) {
	data, err := readSpec(path)
	if err != nil {
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil, errkind.Mark(fmt.Errorf("job spec %s: no such file; check the path", path), err)
		case errors.Is(err, fs.ErrPermission):
			return nil, errkind.Mark(fmt.Errorf("job spec %s: permission denied; make the file readable", path), err)
		}
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, fmt.Errorf("job spec %s: cannot read: %w", path, err)
	}
	return Parse(path, data, reg)
}

// readSpec reads the file at path, or its first MaxSpecBytes+1 bytes when
// it is longer, which Parse then rejects.
func readSpec(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, MaxSpecBytes+1))
}

// Parse parses the YAML job spec in data, builds its JobGraph and checks it
// with stream.Plan against reg, so the returned graph has defaults and output
// schemas filled in. filename is used in errors only. The error, if any, is
// the first problem found, as an *Error whose text starts with
// "filename:line: ". reg must not be nil. A spec larger than MaxSpecBytes,
// or than MaxExpandedBytes once its aliases are expanded, is rejected with
// an error wrapping ErrTooLarge before any of it is converted.
func Parse(filename string, data []byte, reg *stream.Registry) (*stream.JobGraph, error) {
	p := &parser{file: filename, reg: reg, byUID: make(map[string]*opSpec)}
	g, err := p.parse(data)
	if err != nil {
		return nil, err
	}
	return g, nil
}

// opSpec is one operator entry as written.
type opSpec struct {
	pos   int // position in the list, from 0
	entry *yaml.Node
	// key nodes, nil when the key is absent
	uidN, typeN, parN, configN, inputN *yaml.Node

	uid, name, typ string
	par            int
	config         json.RawMessage
	edge           edgeSpec // operator-level keyBy / partitioning
	explicit       bool     // input: or inputs: given
	inputs         []inputSpec

	hasInputs bool // resolved
}

// inputSpec is one explicit input.
type inputSpec struct {
	fromN *yaml.Node // the uid's node, for errors
	from  string
	// output is the side output of from to read ("" for the main output):
	// the output: key of a mapping, or the part after the last '.' of a
	// "uid.output" reference, split off by resolveInputs.
	output  string
	outputN *yaml.Node // output:'s value node, nil for the dotted form
	edge    edgeSpec
	label   string // "input" or "inputs[i]"
}

// edgeSpec is a keyBy / partitioning setting; part is 0 when unset.
type edgeSpec struct {
	part   stream.Partitioning
	keys   []string
	keysN  *yaml.Node
	partsN *yaml.Node
}

type parser struct {
	file string
	reg  *stream.Registry

	root                       *yaml.Node
	nameN, parN, maxParN, opsN *yaml.Node
	// autoWatermarkInterval is the job-level setting (awiN its key node,
	// nil when absent).
	autoWatermarkInterval time.Duration
	awiN                  *yaml.Node
	ops                   []*opSpec
	byUID                 map[string]*opSpec
	g                     stream.JobGraph
}

var (
	topKeys   = []string{"name", "parallelism", "maxParallelism", "checkpointing", "restartStrategy", "state", "operators", "autoWatermarkInterval"}
	opKeys    = []string{"uid", "name", "type", "parallelism", "config", "keyBy", "partitioning", "input", "inputs"}
	inputKeys = []string{"from", "output", "keyBy", "partitioning"}
)

func (p *parser) errAt(n *yaml.Node, format string, args ...any) error {
	line := 1
	if n != nil && n.Line > 0 {
		line = n.Line
	}
	return &Error{File: p.file, Line: line, Err: fmt.Errorf(format, args...)}
}

// opErr is an error about one operator; n is the most precise node known.
func (p *parser) opErr(op *opSpec, n *yaml.Node, format string, args ...any) error {
	if n == nil {
		n = op.entry
	}
	return p.errAt(n, "%s: "+format, append([]any{op.label()}, args...)...)
}

func (op *opSpec) label() string {
	if op.uid != "" {
		return fmt.Sprintf("operator %q", op.uid)
	}
	return fmt.Sprintf("operator #%d", op.pos+1)
}

var yamlLine = regexp.MustCompile(`^yaml: (?:line (\d+): )?(.*)$`)

// sideInputMsg matches stream.Plan's errors about an input reading a side
// output.
var sideInputMsg = regexp.MustCompile(`^input (\d+) reads side output `)

func (p *parser) parse(data []byte) (*stream.JobGraph, error) {
	if len(data) > MaxSpecBytes {
		return nil, &Error{File: p.file, Line: 1, Err: errkind.Mark(fmt.Errorf("the spec is larger than %d bytes (jobspec.MaxSpecBytes); "+
			"split the job into several jobs, or move bulky data out of operator configs into files they read", MaxSpecBytes), ErrTooLarge)}
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if err == io.EOF {
			return nil, p.errAt(nil, "the job spec is empty; want a mapping with name and operators")
		}
		return nil, p.yamlErr(data, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, p.errAt(&extra, "a job spec is one YAML document, but a second one starts here")
	} else if err != io.EOF {
		return nil, p.yamlErr(data, err)
	}
	if len(doc.Content) == 0 {
		return nil, p.errAt(&doc, "the job spec is empty; want a mapping with name and operators")
	}
	// Everything below follows aliases, so the whole document is measured
	// as if expanded first: their work is then bounded by MaxExpandedBytes.
	if at, err := checkExpansion(&doc); err != nil {
		return nil, p.errAt(at, "%w", err)
	}
	p.root = deref(doc.Content[0])
	if p.root.Kind != yaml.MappingNode {
		return nil, p.errAt(p.root, "a job spec must be a mapping with name and operators, got %s", describe(p.root))
	}
	if err := p.parseTop(); err != nil {
		return nil, err
	}
	if err := p.resolveInputs(); err != nil {
		return nil, err
	}
	if err := p.checkCycles(); err != nil {
		return nil, err
	}
	p.build()
	if err := stream.Plan(&p.g, p.reg); err != nil {
		return nil, p.planErr(err)
	}
	return &p.g, nil
}

func (p *parser) yamlErr(data []byte, err error) error {
	msg, line := splitYAMLError(err)
	if l := firstFailingLine(data, msg); l > 0 {
		line = l
	}
	return &Error{File: p.file, Line: line, Err: fmt.Errorf("invalid YAML: %s", msg)}
}

// splitYAMLError splits a yaml syntax error into its message and the line
// the yaml package reports (1 when it reports none).
func splitYAMLError(err error) (string, int) {
	msg, line := err.Error(), 1
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		if m[1] != "" {
			line, _ = strconv.Atoi(m[1])
		}
		msg = m[2]
	}
	return msg, line
}

// maxScanLines and maxScanBytes bound the search of firstFailingLine: it
// parses every prefix of the spec up to the failing line, which would take
// time quadratic in the size of a large spec with long lines.
const (
	maxScanLines = 2000
	maxScanBytes = 8 << 20
)

// firstFailingLine returns the first line L such that the first L lines of
// data fail to parse with the same message as the whole, or 0. The yaml
// package reports parser errors at the line where the enclosing block
// started, which is often far from the mistake; the shortest failing
// prefix ends at the line where parsing actually went wrong.
func firstFailingLine(data []byte, msg string) int {
	end, scanned := 0, 0
	for l := 1; l <= maxScanLines && end < len(data); l++ {
		if i := bytes.IndexByte(data[end:], '\n'); i >= 0 {
			end += i + 1
		} else {
			end = len(data)
		}
		if scanned += end; scanned > maxScanBytes {
			return 0
		}
		dec := yaml.NewDecoder(bytes.NewReader(data[:end]))
		for {
			var n yaml.Node
			err := dec.Decode(&n)
			if err == nil {
				continue
			}
			if err != io.EOF {
				if m, _ := splitYAMLError(err); m == msg {
					return l
				}
			}
			break
		}
	}
	return 0
}

func (p *parser) parseTop() error {
	ps, at, err := pairs(p.root)
	if err != nil {
		return p.errAt(at, "%v", err)
	}
	for _, kv := range ps {
		k, err := stringKey(kv.key)
		if err != nil {
			return p.errAt(kv.key, "%v", err)
		}
		switch k {
		case "name":
			p.nameN = kv.key
			if p.g.Name, err = asString(kv.val); err != nil {
				return p.errAt(kv.val, "name: %v", err)
			}
			if strings.TrimSpace(p.g.Name) == "" {
				return p.errAt(kv.val, "name: must not be empty")
			}
			if len(p.g.Name) > stream.MaxNameLength {
				return p.errAt(kv.val, "name: is %d bytes; the limit is %d bytes (stream.MaxNameLength); use a shorter name", len(p.g.Name), stream.MaxNameLength)
			}
		case "parallelism":
			p.parN = kv.key
			if p.g.Parallelism, err = asInt(kv.val); err != nil {
				return p.errAt(kv.val, "parallelism: %v", err)
			}
			if p.g.Parallelism < 1 {
				return p.errAt(kv.val, "parallelism: must be at least 1, got %d", p.g.Parallelism)
			}
		case "maxParallelism":
			p.maxParN = kv.key
			if p.g.MaxParallelism, err = asInt(kv.val); err != nil {
				return p.errAt(kv.val, "maxParallelism: %v", err)
			}
			if p.g.MaxParallelism < 1 || p.g.MaxParallelism > stream.MaxKeyGroups {
				return p.errAt(kv.val, "maxParallelism: must be between 1 and %d, got %d", stream.MaxKeyGroups, p.g.MaxParallelism)
			}
		case "autoWatermarkInterval":
			p.awiN = kv.key
			d, err := asDuration(kv.val)
			if err == nil && d%time.Millisecond != 0 {
				err = fmt.Errorf("%s is not a whole number of milliseconds; event time has millisecond precision", d)
			}
			if err != nil {
				return p.errAt(kv.val, "autoWatermarkInterval: %v", err)
			}
			p.autoWatermarkInterval = d
		case "checkpointing":
			if err := p.parseCheckpointing(kv.val); err != nil {
				return err
			}
		case "restartStrategy":
			if err := p.parseRestart(kv.val); err != nil {
				return err
			}
		case "state":
			if err := p.parseState(kv.val); err != nil {
				return err
			}
		case "operators":
			p.opsN = kv.key
			if err := p.parseOperators(kv.val); err != nil {
				return err
			}
		default:
			return p.errAt(kv.key, "unknown key %q%s; a job spec has %s", k, suggest(k, topKeys), strings.Join(topKeys, ", "))
		}
	}
	if p.nameN == nil {
		return p.errAt(p.root, "missing required key \"name\" (the job's name)")
	}
	if p.opsN == nil {
		return p.errAt(p.root, "missing required key \"operators\" (the list of the job's operators)")
	}
	if p.g.Parallelism > 0 && p.g.MaxParallelism > 0 && p.g.Parallelism > p.g.MaxParallelism {
		return p.errAt(p.parN, "parallelism %d exceeds maxParallelism %d; lower it or raise maxParallelism", p.g.Parallelism, p.g.MaxParallelism)
	}
	if p.g.Parallelism > stream.DefaultMaxParallelism && p.g.MaxParallelism == 0 {
		return p.errAt(p.parN, "parallelism %d exceeds the default maxParallelism %d; set maxParallelism", p.g.Parallelism, stream.DefaultMaxParallelism)
	}
	return nil
}

func (p *parser) parseOperators(n *yaml.Node) error {
	d := deref(n)
	if isNull(d) || (d.Kind == yaml.SequenceNode && len(d.Content) == 0) {
		return p.errAt(p.opsN, "operators: the list is empty; a job needs at least one operator")
	}
	if d.Kind != yaml.SequenceNode {
		return p.errAt(n, "operators: must be a list of operators, got %s", describe(n))
	}
	if len(d.Content) > stream.MaxOperators {
		return p.errAt(p.opsN, "operators: the job has %d operators; the limit is %d (stream.MaxOperators); split it into several jobs", len(d.Content), stream.MaxOperators)
	}
	for i, e := range d.Content {
		op := &opSpec{pos: i, entry: e}
		if err := p.parseOperator(op); err != nil {
			return err
		}
		p.ops = append(p.ops, op)
	}
	return nil
}

func (p *parser) parseOperator(op *opSpec) error {
	e := deref(op.entry)
	if e.Kind != yaml.MappingNode {
		return p.errAt(op.entry, "operator #%d: must be a mapping with uid and type, got %s", op.pos+1, describe(op.entry))
	}
	ps, at, err := pairs(e)
	if err != nil {
		return p.errAt(at, "operator #%d: %v", op.pos+1, err)
	}
	// The uid first, so that every later error can name the operator.
	for _, kv := range ps {
		if k, _ := stringKey(kv.key); k == "uid" {
			op.uidN = kv.key
			uid, err := asString(kv.val)
			if err != nil {
				return p.opErr(op, kv.val, "uid: %v", err)
			}
			if uid == "" {
				return p.opErr(op, kv.val, "uid: must not be empty")
			}
			// Checked before op.uid is set, since errors name the
			// operator by its uid.
			if len(uid) > stream.MaxUIDLength {
				return p.opErr(op, kv.val, "uid: is %d bytes; the limit is %d bytes (stream.MaxUIDLength); use a shorter uid", len(uid), stream.MaxUIDLength)
			}
			op.uid = uid
			if prev, dup := p.byUID[op.uid]; dup {
				return p.opErr(op, kv.val, "uid: %q is already the uid of the operator at line %d; uids must be unique", op.uid, prev.entry.Line)
			}
			p.byUID[op.uid] = op
		}
	}
	for _, kv := range ps {
		k, err := stringKey(kv.key)
		if err != nil {
			return p.opErr(op, kv.key, "%v", err)
		}
		switch k {
		case "uid":
		case "name":
			if op.name, err = asString(kv.val); err != nil {
				return p.opErr(op, kv.val, "name: %v", err)
			}
			if len(op.name) > stream.MaxNameLength {
				return p.opErr(op, kv.val, "name: is %d bytes; the limit is %d bytes (stream.MaxNameLength); use a shorter name", len(op.name), stream.MaxNameLength)
			}
		case "type":
			op.typeN = kv.key
			if op.typ, err = asString(kv.val); err != nil {
				return p.opErr(op, kv.val, "type: %v", err)
			}
			if op.typ == "" {
				return p.opErr(op, kv.val, "type: must not be empty")
			}
			if len(op.typ) > stream.MaxNameLength {
				return p.opErr(op, kv.val, "type: is %d bytes, and type names are at most %d bytes (stream.MaxNameLength); use a registered type", len(op.typ), stream.MaxNameLength)
			}
		case "parallelism":
			op.parN = kv.key
			if op.par, err = asInt(kv.val); err != nil {
				return p.opErr(op, kv.val, "parallelism: %v", err)
			}
			if op.par < 1 {
				return p.opErr(op, kv.val, "parallelism: must be at least 1, got %d", op.par)
			}
		case "config":
			op.configN = kv.key
			if isNull(kv.val) {
				break
			}
			if deref(kv.val).Kind != yaml.MappingNode {
				return p.opErr(op, kv.val, "config: must be a mapping, got %s", describe(kv.val))
			}
			if op.config, err = toJSON(kv.val); err != nil {
				var ce *configError
				if errors.As(err, &ce) {
					return p.opErr(op, ce.node, "%w", err) // err's text is ce's
				}
				return p.opErr(op, kv.val, "%v", err)
			}
		case "keyBy":
			op.edge.keysN = kv.key
			if op.edge.keys, err = asStrings(kv.val); err != nil {
				return p.opErr(op, kv.val, "keyBy: %v", err)
			}
			if len(op.edge.keys) == 0 {
				return p.opErr(op, kv.val, "keyBy: must name at least one field")
			}
		case "partitioning":
			op.edge.partsN = kv.key
			if op.edge.part, err = parsePartitioning(kv.val); err != nil {
				return p.opErr(op, kv.val, "partitioning: %v", err)
			}
		case "input":
			if op.inputN != nil {
				return p.opErr(op, kv.key, "input: set together with inputs; use one of them")
			}
			op.inputN, op.explicit = kv.key, true
			in := inputSpec{fromN: kv.val, label: "input"}
			if in.from, err = asString(kv.val); err != nil {
				return p.opErr(op, kv.val, "input: must be the uid of an operator, got %s; use inputs: for several", describe(kv.val))
			}
			op.inputs = []inputSpec{in}
		case "inputs":
			if op.inputN != nil {
				return p.opErr(op, kv.key, "inputs: set together with input; use one of them")
			}
			op.inputN, op.explicit = kv.key, true
			if op.inputs, err = p.parseInputs(op, kv.val); err != nil {
				return err
			}
		default:
			return p.opErr(op, kv.key, "unknown key %q%s; an operator has %s", k, suggest(k, opKeys), strings.Join(opKeys, ", "))
		}
	}
	if err := p.checkEdgeSpec(op, op.edge, ""); err != nil {
		return err
	}
	if op.uidN == nil {
		return p.opErr(op, nil, "missing required key \"uid\" (a unique name that stays the same across versions of the job)")
	}
	if op.typeN == nil {
		return p.opErr(op, nil, "missing required key \"type\" (known types: %s)", strings.Join(p.reg.Names(), ", "))
	}
	return nil
}

func (p *parser) maxParallelism() int {
	if p.g.MaxParallelism > 0 {
		return p.g.MaxParallelism
	}
	return stream.DefaultMaxParallelism
}

func parsePartitioning(n *yaml.Node) (stream.Partitioning, error) {
	s, err := asString(n)
	if err != nil {
		return 0, err
	}
	pt, err := stream.ParsePartitioning(s)
	if err != nil {
		return 0, fmt.Errorf("unknown partitioning %q%s (want forward, hash, rebalance or broadcast)", s, suggest(s, []string{"forward", "hash", "rebalance", "broadcast"}))
	}
	return pt, nil
}

// checkEdgeSpec checks that keyBy and partitioning agree and turns keyBy into
// hash partitioning. where is "" for the operator or "inputs[i]: ".
func (p *parser) checkEdgeSpec(op *opSpec, es edgeSpec, where string) error {
	switch {
	case es.keys != nil && es.part != 0 && es.part != stream.Hash:
		return p.opErr(op, es.partsN, "%spartitioning: %v cannot be used with keyBy (keyBy means hash partitioning); remove one of them", where, es.part)
	case es.keys == nil && es.part == stream.Hash:
		return p.opErr(op, es.partsN, "%spartitioning: hash needs keyBy: [field, ...]", where)
	}
	return nil
}

func (es edgeSpec) partitioning() stream.Partitioning {
	if es.keys != nil {
		return stream.Hash
	}
	return es.part
}

func (es edgeSpec) set() bool { return es.keys != nil || es.part != 0 }

func (p *parser) parseInputs(op *opSpec, n *yaml.Node) ([]inputSpec, error) {
	d := deref(n)
	if isNull(d) {
		return nil, p.opErr(op, n, "inputs: must be a list (use inputs: [] for an operator without inputs)")
	}
	if d.Kind != yaml.SequenceNode {
		return nil, p.opErr(op, n, "inputs: must be a list of uids or {from: uid, keyBy: [...]} mappings, got %s", describe(n))
	}
	ins := make([]inputSpec, 0, len(d.Content))
	for i, e := range d.Content {
		in := inputSpec{fromN: e, label: fmt.Sprintf("inputs[%d]", i)}
		de := deref(e)
		switch de.Kind {
		case yaml.ScalarNode:
			s, err := asString(e)
			if err != nil {
				return nil, p.opErr(op, e, "%s: must be the uid of an operator, got %s", in.label, describe(e))
			}
			in.from = s
		case yaml.MappingNode:
			ps, at, err := pairs(de)
			if err != nil {
				return nil, p.opErr(op, at, "%s: %v", in.label, err)
			}
			in.fromN = nil
			for _, kv := range ps {
				k, err := stringKey(kv.key)
				if err != nil {
					return nil, p.opErr(op, kv.key, "%s: %v", in.label, err)
				}
				switch k {
				case "from":
					in.fromN = kv.val
					if in.from, err = asString(kv.val); err != nil {
						return nil, p.opErr(op, kv.val, "%s.from: must be the uid of an operator, got %s", in.label, describe(kv.val))
					}
				case "output":
					in.outputN = kv.val
					if in.output, err = asString(kv.val); err != nil {
						return nil, p.opErr(op, kv.val, "%s.output: must be the name of a side output, got %s", in.label, describe(kv.val))
					}
					if !stream.ValidSideOutputName(in.output) {
						return nil, p.opErr(op, kv.val, "%s.output: %q is not a side-output name (1-64 letters, digits, '_' or '-', starting with a letter)", in.label, in.output)
					}
				case "keyBy":
					in.edge.keysN = kv.key
					if in.edge.keys, err = asStrings(kv.val); err != nil {
						return nil, p.opErr(op, kv.val, "%s.keyBy: %v", in.label, err)
					}
					if len(in.edge.keys) == 0 {
						return nil, p.opErr(op, kv.val, "%s.keyBy: must name at least one field", in.label)
					}
				case "partitioning":
					in.edge.partsN = kv.key
					if in.edge.part, err = parsePartitioning(kv.val); err != nil {
						return nil, p.opErr(op, kv.val, "%s.partitioning: %v", in.label, err)
					}
				default:
					return nil, p.opErr(op, kv.key, "%s: unknown key %q%s; an input has %s", in.label, k, suggest(k, inputKeys), strings.Join(inputKeys, ", "))
				}
			}
			if in.fromN == nil {
				return nil, p.opErr(op, e, "%s: missing required key \"from\" (the uid of the operator to read)", in.label)
			}
			if err := p.checkEdgeSpec(op, in.edge, in.label+"."); err != nil {
				return nil, err
			}
		default:
			return nil, p.opErr(op, e, "%s: must be a uid or a {from: uid, keyBy: [...]} mapping, got %s", in.label, describe(e))
		}
		ins = append(ins, in)
	}
	return ins, nil
}

// resolveInputs decides every operator's inputs, following the rules in the
// package documentation, and checks that named inputs exist.
func (p *parser) resolveInputs() error {
	names := p.reg.Names()
	for i, op := range p.ops {
		_, isSource := p.reg.Lookup(op.typ, true)
		_, isOp := p.reg.Lookup(op.typ, false)
		if !isSource && !isOp {
			return p.opErr(op, op.typeN, "type: unknown operator type %q%s; known types: %s", op.typ, suggest(op.typ, names), strings.Join(names, ", "))
		}
		if limit := p.maxParallelism(); op.par > limit {
			return p.opErr(op, op.parN, "parallelism %d exceeds maxParallelism %d; lower it or raise maxParallelism", op.par, limit)
		}
		if op.explicit {
			for j := range op.inputs {
				if err := p.resolveFrom(op, &op.inputs[j]); err != nil {
					return err
				}
			}
			op.hasInputs = len(op.inputs) > 0
		} else if i > 0 && !(isSource && !isOp) {
			prev := p.ops[i-1]
			if p.isSink(prev) {
				if !isSource {
					return p.errAt(op.entry, "operator %q has no input: the previous operator %q is a sink; name the operator to read with input: <uid>", op.uid, prev.uid)
				}
			} else {
				op.inputs = []inputSpec{{fromN: op.entry, from: prev.uid, label: "input"}}
				op.hasInputs = true
			}
		}
		if !op.hasInputs && op.edge.set() && isSource {
			n := op.edge.keysN
			if n == nil {
				n = op.edge.partsN
			}
			return p.opErr(op, n, "%s: this operator has no input (it is a source); set keyBy or partitioning on the operator that reads it", n.Value)
		}
	}
	for _, op := range p.ops {
		for _, in := range op.inputs {
			if up := p.byUID[in.from]; p.isSink(up) {
				what := "has no output"
				if in.output != "" {
					what = "has no side outputs"
				}
				return p.opErr(op, in.fromN, "%s: %q is a sink and %s; read the operator that feeds it instead", in.label, in.from, what)
			}
		}
	}
	return nil
}

// resolveFrom checks that in names an operator. A reference that is not a
// uid but reads "<uid>.<output>" for an existing uid names that operator's
// side output; a uid that contains '.' itself wins.
func (p *parser) resolveFrom(op *opSpec, in *inputSpec) error {
	if _, ok := p.byUID[in.from]; ok {
		return nil
	}
	if i := strings.LastIndexByte(in.from, '.'); i > 0 && in.outputN == nil {
		uid, output := in.from[:i], in.from[i+1:]
		if _, ok := p.byUID[uid]; ok {
			if !stream.ValidSideOutputName(output) {
				return p.opErr(op, in.fromN, "%s: %q reads operator %q, but %q is not a side-output name (1-64 letters, digits, '_' or '-', starting with a letter)", in.label, in.from, uid, output)
			}
			in.from, in.output = uid, output
			return nil
		}
		return p.opErr(op, in.fromN, "%s: no operator has uid %q or %q%s (read a side output as <uid>.<output>)", in.label, in.from, uid, suggest(uid, p.uids()))
	}
	return p.opErr(op, in.fromN, "%s: no operator has uid %q%s", in.label, in.from, suggest(in.from, p.uids()))
}

func (p *parser) uids() []string {
	out := make([]string, len(p.ops))
	for i, op := range p.ops {
		out[i] = op.uid
	}
	return out
}

// isSink reports whether op, as resolved, is a sink: it has inputs and its
// type as a non-source is a sink type.
func (p *parser) isSink(op *opSpec) bool {
	if !op.hasInputs {
		return false
	}
	t, ok := p.reg.Lookup(op.typ, false)
	return ok && t.Kind == stream.KindSink
}

// checkCycles reports an operator that (transitively) reads its own output.
// Of the edges on the cycle it names the first one written with input: or
// inputs:, since an implicit edge from the previous entry is rarely the
// mistake.
func (p *parser) checkCycles() error {
	const (
		unseen = iota
		active
		done
	)
	type step struct {
		op *opSpec
		in inputSpec // the input of op being followed
	}
	state := make(map[*opSpec]int, len(p.ops))
	var stack []step
	var visit func(op *opSpec) error
	visit = func(op *opSpec) error {
		state[op] = active
		for _, in := range op.inputs {
			up := p.byUID[in.from]
			stack = append(stack, step{op, in})
			switch state[up] {
			case active:
				if up == op {
					return p.opErr(op, in.fromN, "%s: an operator cannot read its own output", in.label)
				}
				start := len(stack) - 1
				for stack[start].op != up {
					start--
				}
				cycle := stack[start:] // cycle[k].op reads cycle[k+1].op, the last reads the first
				at := len(cycle) - 1
				for k, st := range cycle {
					if st.op.explicit {
						at = k
						break
					}
				}
				path := make([]string, 0, len(cycle)+1)
				for k := range len(cycle) + 1 {
					path = append(path, cycle[(at+k)%len(cycle)].op.uid)
				}
				c := cycle[at]
				return p.opErr(c.op, c.in.fromN, "%s: reading %q makes a cycle (%s); a job graph must be acyclic", c.in.label, c.in.from, strings.Join(path, " reads "))
			case unseen:
				if err := visit(up); err != nil {
					return err
				}
			}
			stack = stack[:len(stack)-1]
		}
		state[op] = done
		return nil
	}
	for _, op := range p.ops {
		if state[op] == unseen {
			if err := visit(op); err != nil {
				return err
			}
		}
	}
	return nil
}

// build fills p.g's vertices and edges from the resolved operators.
func (p *parser) build() {
	ids := make(map[string]int, len(p.ops))
	for i, op := range p.ops {
		ids[op.uid] = i
		cfg := op.config
		if p.awiN != nil {
			if t, ok := p.reg.Lookup(op.typ, !op.hasInputs); ok && t.AutoWatermarkInterval {
				cfg = withDefaultKey(cfg, "autoWatermarkInterval", p.autoWatermarkInterval.String())
			}
		}
		p.g.Vertices = append(p.g.Vertices, &stream.Vertex{
			ID: i, UID: op.uid, Name: op.name, Type: op.typ, Config: cfg, Parallelism: op.par,
		})
	}
	for i, op := range p.ops {
		for j, in := range op.inputs {
			es := op.edge
			if in.edge.set() {
				es = in.edge
			}
			part := es.partitioning()
			if part == 0 {
				part = stream.Forward
			}
			var keys []string
			if part == stream.Hash {
				keys = append([]string(nil), es.keys...)
			}
			p.g.Edges = append(p.g.Edges, &stream.Edge{From: ids[in.from], SideOutput: in.output, To: i, Input: j, Partitioning: part, KeyFields: keys})
		}
	}
}

// withDefaultKey returns the JSON object config with key set to the string
// value when config does not have key, keeping the order of its keys; a
// nil config becomes {key: value}. A config that is not an object is
// returned as it is, for the type's Plan to reject.
func withDefaultKey(config json.RawMessage, key, value string) json.RawMessage {
	kv, _ := json.Marshal(map[string]string{key: value}) // {"key":"value"}
	if len(bytes.TrimSpace(config)) == 0 || bytes.Equal(bytes.TrimSpace(config), []byte("null")) {
		return kv
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(config, &m) != nil {
		return config
	}
	if _, ok := m[key]; ok {
		return config
	}
	c := bytes.TrimSpace(config)
	out := append([]byte(nil), c[:len(c)-1]...) // without the closing brace
	if len(m) > 0 {
		out = append(out, ',')
	}
	return append(out, kv[1:]...)
}

// planErr attributes an error from stream.Plan to a line.
func (p *parser) planErr(err error) error {
	var ve *stream.VertexError
	if errors.As(err, &ve) {
		op := p.byUID[ve.UID]
		if op == nil {
			return &Error{File: p.file, Line: p.root.Line, Err: err}
		}
		return &Error{File: p.file, Line: p.vertexLine(op, ve.Err), Err: err}
	}
	msg := err.Error()
	n := p.root
	switch {
	case strings.HasPrefix(msg, "job maxParallelism") && p.maxParN != nil:
		n = p.maxParN
	case strings.HasPrefix(msg, "job parallelism") && p.parN != nil:
		n = p.parN
	case (strings.HasPrefix(msg, "job has no name") || strings.HasPrefix(msg, "job name")) && p.nameN != nil:
		n = p.nameN
	case (strings.HasPrefix(msg, "job has ") || strings.Contains(msg, "cycle")) && p.opsN != nil:
		n = p.opsN
	}
	return &Error{File: p.file, Line: n.Line, Err: err}
}

// vertexLine picks the line of op that a planning message is about.
func (p *parser) vertexLine(op *opSpec, err error) int {
	msg := err.Error()
	n := op.entry
	pick := func(c *yaml.Node) {
		if c != nil {
			n = c
		}
	}
	switch {
	case strings.HasPrefix(msg, "config") || errors.Is(err, stream.ErrConfig):
		pick(op.configN)
	case strings.HasPrefix(msg, "keyBy"):
		if op.edge.keysN != nil {
			pick(op.edge.keysN)
		} else {
			var only *yaml.Node
			count := 0
			for _, in := range op.inputs {
				if in.edge.keys != nil {
					only = in.edge.keysN
					count++
				}
			}
			if count == 1 {
				pick(only)
			}
		}
	case strings.HasPrefix(msg, "uid"):
		pick(op.uidN)
	case strings.HasPrefix(msg, "parallelism"):
		pick(op.parN)
	case strings.HasPrefix(msg, "unknown operator type"):
		pick(op.typeN)
	case sideInputMsg.MatchString(msg):
		// "input N reads side output ...": the reference to it.
		m := sideInputMsg.FindStringSubmatch(msg)
		if j, err := strconv.Atoi(m[1]); err == nil && j < len(op.inputs) {
			pick(op.inputs[j].fromN)
			pick(op.inputs[j].outputN)
		}
	case strings.Contains(msg, "input"):
		pick(op.inputN)
	}
	return n.Line
}
