package stream

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
)

// Kind says what role an operator type plays in a graph.
type Kind int

const (
	KindSource Kind = iota + 1
	KindTransform
	KindSink
)

func (k Kind) String() string {
	switch k {
	case KindSource:
		return "source"
	case KindTransform:
		return "transform"
	case KindSink:
		return "sink"
	}
	return "invalid"
}

// PlanInput is one input of a vertex as Plan sees it.
type PlanInput struct {
	Schema *Schema
	// KeyFields are the key of a hash (keyBy) edge, else nil.
	KeyFields []string
}

// PlanContext is what an OperatorType's Plan function is given.
type PlanContext struct {
	UID         string
	Config      []byte // JSON; nil or "null" when the spec has none
	Inputs      []PlanInput
	Parallelism int
	// Paths confines the files the operator may read or write; an
	// operator that takes paths checks them with Paths.Check. Nil (a
	// client planning a spec) allows every path; the jobmanager plans
	// with its own policy.
	Paths *PathPolicy

	// sides are the side outputs declared by DeclareSideOutput; sideErr
	// the first bad declaration, reported by Plan.
	sides   map[string]*Schema
	sideErr error
	// states are the states declared by DeclareState; stateErr the first
	// bad declaration, reported by Plan.
	states   []StateDecl
	stateErr error
}

// DeclareSideOutput declares that the operator may emit batches of schema
// to its side output called name (with CollectSide), so that other
// operators can read it (an Edge with SideOutput name). A Plan function of
// a source or transform calls it, once per name, whether or not anything
// will read the output. A name is 1-64 letters, digits, '_' or '-',
// starting with a letter; a bad or repeated name or a nil schema is
// reported by Plan as an error of the operator.
func (p *PlanContext) DeclareSideOutput(name string, schema *Schema) {
	var err error
	switch {
	case !ValidSideOutputName(name):
		err = fmt.Errorf("side output %q: %s", name, sideOutputSyntax)
	case schema == nil:
		err = fmt.Errorf("side output %q has no schema", name)
	case p.sides[name] != nil:
		err = fmt.Errorf("side output %q is declared twice", name)
	}
	if err != nil {
		if p.sideErr == nil {
			p.sideErr = err
		}
		return
	}
	if p.sides == nil {
		p.sides = make(map[string]*Schema)
	}
	p.sides[name] = schema
}

// SideOutputs returns the side outputs declared so far, by name (nil when
// none). The map must not be modified.
func (p *PlanContext) SideOutputs() map[string]*Schema { return p.sides }

// DecodeConfig decodes the JSON config into v, rejecting unknown fields so
// that a misspelt option is an error rather than silently ignored. An empty
// config leaves v unchanged.
func DecodeConfig(config []byte, v any) error {
	config = bytes.TrimSpace(config)
	if len(config) == 0 || bytes.Equal(config, []byte("null")) {
		return nil
	}
	d := json.NewDecoder(bytes.NewReader(config))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return fmt.Errorf("config: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	return nil
}

// ConfigErrorf returns an error about an operator's config found at planning
// time: its text is the reason alone (a spec parser adds where it is), and
// errors.Is(err, ErrConfig) holds.
func ConfigErrorf(format string, args ...any) error {
	return &configError{msg: fmt.Sprintf(format, args...)}
}

type configError struct{ msg string }

func (e *configError) Error() string { return e.msg }
func (e *configError) Unwrap() error { return ErrConfig }

// DecodeOperatorConfig is DecodeConfig for operator type op, returning a
// ConfigErrorf error that names op.
func DecodeOperatorConfig(op string, config []byte, v any) error {
	if err := DecodeConfig(config, v); err != nil {
		return ConfigErrorf("%s: %v", op, err)
	}
	return nil
}

// OperatorType is a registered kind of operator: how to check its config
// against its inputs and how to build instances.
type OperatorType struct {
	Name string
	Kind Kind
	// Inputs is the number of inputs a transform or sink takes (1 unless set);
	// ignored for sources.
	Inputs int
	// Plan validates the config against the inputs and returns the output
	// schema (nil for sinks). It runs at submit time on the client and on the
	// jobmanager, so it must be pure. It declares the operator's side
	// outputs, if any, with p.DeclareSideOutput.
	Plan func(p *PlanContext) (*Schema, error)
	// NewSource builds a source instance (KindSource only).
	NewSource func(config []byte) (Source, error)
	// NewOperator builds a transform or sink instance.
	NewOperator func(config []byte) (Operator, error)
	// AutoWatermarkInterval says that the type generates watermarks and
	// its config takes the key "autoWatermarkInterval" (a duration
	// string): a job spec's job-level autoWatermarkInterval is copied into
	// the config of every operator of the type that does not set its own.
	AutoWatermarkInterval bool
	// Doc is one line for `weir operators`.
	Doc string
	// Config, when set, is a zero value of the struct the type's Plan
	// decodes its config into (with DecodeConfig or DecodeOperatorConfig):
	// `weir operators` lists the config keys from its json tags. It is
	// documentation only; nothing decodes into it.
	Config any
}

// Registry maps operator type names to types. A source and a non-source type
// may share a name (the "file" source and the "file" sink): a vertex without
// inputs resolves to the source. It is safe for concurrent use.
type Registry struct {
	mu      sync.RWMutex
	sources map[string]*OperatorType
	types   map[string]*OperatorType
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{sources: make(map[string]*OperatorType), types: make(map[string]*OperatorType)}
}

// Register adds t. It panics if the name is taken or the type is incomplete:
// registration happens at start-up and a clash is a programming error.
func (r *Registry) Register(t OperatorType) {
	if t.Name == "" || t.Plan == nil {
		panic("stream: operator type needs a name and a Plan function")
	}
	switch t.Kind {
	case KindSource:
		if t.NewSource == nil {
			panic("stream: source type " + t.Name + " has no NewSource")
		}
	case KindTransform, KindSink:
		if t.NewOperator == nil {
			panic("stream: operator type " + t.Name + " has no NewOperator")
		}
		if t.Inputs == 0 {
			t.Inputs = 1
		}
	default:
		panic("stream: operator type " + t.Name + " has no kind")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.types
	if t.Kind == KindSource {
		m = r.sources
	}
	if _, dup := m[t.Name]; dup {
		panic("stream: operator type " + t.Name + " registered twice")
	}
	m[t.Name] = &t
}

// Lookup returns the type called name for a vertex that is a source (has no
// inputs) or not.
func (r *Registry) Lookup(name string, source bool) (*OperatorType, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	m := r.types
	if source {
		m = r.sources
	}
	t, ok := m[name]
	return t, ok
}

// Names returns the registered type names, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	seen := make(map[string]bool)
	for n := range r.types {
		seen[n] = true
	}
	for n := range r.sources {
		seen[n] = true
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
