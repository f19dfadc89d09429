package stream

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Partitioning says how records travel along an edge from the upstream
// subtasks to the downstream ones.
type Partitioning int

const (
	// Forward sends subtask i's output to downstream subtask i; both ends
	// must have the same parallelism. Forward edges are chained.
	Forward Partitioning = iota + 1
	// Hash sends each record to the subtask owning its key's key group.
	Hash
	// Rebalance spreads records round-robin over all downstream subtasks.
	Rebalance
	// Broadcast sends every record to every downstream subtask.
	Broadcast
)

var partitioningNames = map[Partitioning]string{Forward: "forward", Hash: "hash", Rebalance: "rebalance", Broadcast: "broadcast"}

func (p Partitioning) String() string {
	if s, ok := partitioningNames[p]; ok {
		return s
	}
	return "invalid"
}

// ParsePartitioning is the inverse of Partitioning.String.
func ParsePartitioning(s string) (Partitioning, error) {
	for p, n := range partitioningNames {
		if n == s {
			return p, nil
		}
	}
	return 0, fmt.Errorf("unknown partitioning %q (want forward, hash, rebalance or broadcast)", s)
}

// Vertex is one operator of a job.
type Vertex struct {
	// ID is the vertex's index in JobGraph.Vertices.
	ID int
	// UID is stable across versions of a job; state in checkpoints is keyed
	// by it.
	UID  string
	Name string
	// Type is a registered operator type name.
	Type   string
	Config json.RawMessage
	// Parallelism is the number of subtasks; 0 means the job's default.
	Parallelism int
	// OutSchema is filled by Plan (nil for sinks).
	OutSchema *Schema
	// SideOutSchemas is filled by Plan: the side outputs the operator type
	// declared (PlanContext.DeclareSideOutput), by name; nil when none.
	SideOutSchemas map[string]*Schema
}

// OutputSchema returns the schema of the vertex's output called name: ""
// is the main output (OutSchema), anything else a declared side output. It
// returns nil for an output the vertex does not have.
func (v *Vertex) OutputSchema(name string) *Schema {
	if name == "" {
		return v.OutSchema
	}
	return v.SideOutSchemas[name]
}

// Edge connects an output of vertex From to input number Input of To.
type Edge struct {
	From, To int
	// SideOutput names the output of From that the edge reads: "" is the
	// main output, anything else a side output that From's operator type
	// declares at planning (PlanContext.DeclareSideOutput). Side-output
	// edges are partitioned, checkpointed and ended like main ones, but are
	// never chained: their reader runs in a task of its own.
	SideOutput   string
	Input        int
	Partitioning Partitioning
	// KeyFields are the key of a Hash edge, fields of the schema of the
	// output the edge reads.
	KeyFields []string
}

// JobGraph is a job: operators and the edges between them. It is what the
// builder and the YAML spec produce and what is submitted.
type JobGraph struct {
	Name string
	// Parallelism is the default for vertices that set none (default 1).
	Parallelism int
	// MaxParallelism is the number of key groups (default 128).
	MaxParallelism int
	Vertices       []*Vertex
	Edges          []*Edge
	// Checkpoint settings; checkpointing is off unless Interval is set.
	Checkpoint CheckpointConfig
	// Restart is the restart strategy; empty Type means the cluster default.
	Restart RestartConfig
	// State selects the keyed-state backend; empty means the cluster default.
	State StateConfig
}

// Inputs returns the edges into vertex id, ordered by input number.
func (g *JobGraph) Inputs(id int) []*Edge {
	var out []*Edge
	for _, e := range g.Edges {
		if e.To == id {
			out = append(out, e)
		}
	}
	for i := 1; i < len(out); i++ { // insertion sort: few inputs
		for j := i; j > 0 && out[j].Input < out[j-1].Input; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// Outputs returns the edges out of vertex id.
func (g *JobGraph) Outputs(id int) []*Edge {
	var out []*Edge
	for _, e := range g.Edges {
		if e.From == id {
			out = append(out, e)
		}
	}
	return out
}

// EdgeSchema returns the schema of the records travelling along e: the
// schema of the output of e.From that e reads. The graph must be planned.
func (g *JobGraph) EdgeSchema(e *Edge) *Schema {
	return g.Vertices[e.From].OutputSchema(e.SideOutput)
}

// VertexError is a planning error attributed to one vertex, so a spec parser
// can point at the line that declared it.
type VertexError struct {
	UID string
	Err error
}

func (e *VertexError) Error() string { return fmt.Sprintf("operator %q: %v", e.UID, e.Err) }
func (e *VertexError) Unwrap() error { return e.Err }

var uidPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)

// sideOutputPattern is the syntax of side-output names. It has no '.', so
// that a job spec can write "uid.output".
var sideOutputPattern = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]{0,63}$`)

// ValidSideOutputName reports whether name may name a side output: 1-64
// letters, digits, '_' or '-', starting with a letter.
func ValidSideOutputName(name string) bool { return sideOutputPattern.MatchString(name) }

// Plan checks g against the operator types in reg and fills in defaults and
// every vertex's OutSchema and SideOutSchemas. It returns the first problem
// found; errors about one vertex are *VertexError (an edge reading an output
// its upstream operator does not have is an error of the reading vertex).
// Plan modifies g only when it succeeds.
func Plan(g *JobGraph, reg *Registry) error {
	if g.Name == "" {
		return errors.New("job has no name")
	}
	par := g.Parallelism
	if par == 0 {
		par = 1
	}
	if par < 0 {
		return fmt.Errorf("job parallelism %d: must be at least 1", g.Parallelism)
	}
	maxPar := g.MaxParallelism
	if maxPar == 0 {
		maxPar = DefaultMaxParallelism
	}
	if maxPar < 1 || maxPar > 32768 {
		return fmt.Errorf("job maxParallelism %d: must be between 1 and 32768", g.MaxParallelism)
	}
	if len(g.Vertices) == 0 {
		return errors.New("job has no operators")
	}
	if err := g.Checkpoint.Validate(); err != nil {
		return err
	}
	uids := make(map[string]bool)
	pars := make([]int, len(g.Vertices))
	types := make([]*OperatorType, len(g.Vertices))
	for i, v := range g.Vertices {
		if v.ID != i {
			return fmt.Errorf("vertex %q has ID %d at position %d", v.UID, v.ID, i)
		}
		if !uidPattern.MatchString(v.UID) {
			return &VertexError{v.UID, errors.New("uid must be 1-128 letters, digits, '_', '.' or '-', starting with a letter or digit")}
		}
		if uids[v.UID] {
			return &VertexError{v.UID, errors.New("uid is used by another operator; uids must be unique")}
		}
		uids[v.UID] = true
		hasInputs := false
		for _, e := range g.Edges {
			hasInputs = hasInputs || e.To == i
		}
		t, ok := reg.Lookup(v.Type, !hasInputs)
		if !ok && !hasInputs {
			if _, isOp := reg.Lookup(v.Type, false); isOp {
				return &VertexError{v.UID, fmt.Errorf("%q needs an input, but nothing feeds this operator", v.Type)}
			}
		}
		if !ok && hasInputs {
			if _, isSrc := reg.Lookup(v.Type, true); isSrc {
				return &VertexError{v.UID, fmt.Errorf("%q is a source and takes no input", v.Type)}
			}
		}
		if !ok {
			return &VertexError{v.UID, fmt.Errorf("unknown operator type %q (known types: %s)", v.Type, strings.Join(reg.Names(), ", "))}
		}
		types[i] = t
		switch {
		case v.Parallelism < 0:
			return &VertexError{v.UID, fmt.Errorf("parallelism %d: must be at least 1", v.Parallelism)}
		case v.Parallelism == 0:
			pars[i] = par
		default:
			pars[i] = v.Parallelism
		}
		if pars[i] > maxPar {
			return &VertexError{v.UID, fmt.Errorf("parallelism %d exceeds maxParallelism %d", pars[i], maxPar)}
		}
	}
	// parts are the edges' partitionings as planned, applied to g only
	// once everything else succeeded.
	parts := make([]Partitioning, len(g.Edges))
	for i, e := range g.Edges {
		parts[i] = e.Partitioning
		if e.From < 0 || e.From >= len(g.Vertices) || e.To < 0 || e.To >= len(g.Vertices) {
			return fmt.Errorf("edge %d->%d names a vertex that does not exist", e.From, e.To)
		}
		if e.From == e.To {
			return &VertexError{g.Vertices[e.To].UID, errors.New("operator reads its own output")}
		}
		if e.SideOutput != "" && !ValidSideOutputName(e.SideOutput) {
			return &VertexError{g.Vertices[e.To].UID, fmt.Errorf("input %d reads side output %q of %q: %s", e.Input, e.SideOutput, g.Vertices[e.From].UID, sideOutputSyntax)}
		}
		switch e.Partitioning {
		case Forward:
			// Like Flink: an unspecified (forward) edge between operators of
			// different parallelism redistributes round-robin.
			if pars[e.From] != pars[e.To] {
				parts[i] = Rebalance
			}
		case Hash:
			if len(e.KeyFields) == 0 {
				return &VertexError{g.Vertices[e.To].UID, errors.New("keyBy needs at least one key field")}
			}
		case Rebalance, Broadcast:
		default:
			return &VertexError{g.Vertices[e.To].UID, fmt.Errorf("edge from %q has no partitioning", g.Vertices[e.From].UID)}
		}
	}
	order, err := topoOrder(g)
	if err != nil {
		return err
	}
	schemas := make([]*Schema, len(g.Vertices))
	sides := make([]map[string]*Schema, len(g.Vertices))
	for _, id := range order {
		v, t := g.Vertices[id], types[id]
		ins := g.Inputs(id)
		if t.Kind == KindSource && len(ins) > 0 {
			return &VertexError{v.UID, fmt.Errorf("%q is a source and takes no input", v.Type)}
		}
		if t.Kind != KindSource && len(ins) != t.Inputs {
			return &VertexError{v.UID, fmt.Errorf("%q takes %d input(s), got %d", v.Type, t.Inputs, len(ins))}
		}
		if t.Kind == KindSink && len(g.Outputs(id)) > 0 {
			return &VertexError{v.UID, fmt.Errorf("%q is a sink; nothing may read from it", v.Type)}
		}
		pc := &PlanContext{UID: v.UID, Config: v.Config, Parallelism: pars[id]}
		for i, e := range ins {
			if e.Input != i {
				return &VertexError{v.UID, fmt.Errorf("inputs must be numbered 0..%d", len(ins)-1)}
			}
			in := schemas[e.From]
			if e.SideOutput != "" {
				in = sides[e.From][e.SideOutput]
				if in == nil {
					return &VertexError{v.UID, undeclaredSideOutput(g.Vertices[e.From], e, sides[e.From])}
				}
			}
			if in == nil {
				return &VertexError{v.UID, fmt.Errorf("input %q is a sink and has no output", g.Vertices[e.From].UID)}
			}
			if e.Partitioning == Hash {
				if _, err := in.Lookup(e.KeyFields...); err != nil {
					return &VertexError{v.UID, fmt.Errorf("keyBy: %v", err)}
				}
			}
			pc.Inputs = append(pc.Inputs, PlanInput{Schema: in, KeyFields: keyFields(e)})
		}
		out, err := t.Plan(pc)
		if err != nil {
			return &VertexError{v.UID, err}
		}
		if t.Kind != KindSink && out == nil {
			return &VertexError{v.UID, fmt.Errorf("operator type %q planned no output schema", v.Type)}
		}
		if err := pc.sideErr; err != nil {
			return &VertexError{v.UID, fmt.Errorf("operator type %q: %w", v.Type, err)}
		}
		if t.Kind == KindSink && len(pc.sides) > 0 {
			return &VertexError{v.UID, fmt.Errorf("operator type %q is a sink but declares side outputs (%s); only sources and transforms may", v.Type, strings.Join(sortedNames(pc.sides), ", "))}
		}
		schemas[id] = out
		sides[id] = pc.sides
	}
	g.Parallelism = par
	g.MaxParallelism = maxPar
	for i, e := range g.Edges {
		e.Partitioning = parts[i]
	}
	for i, v := range g.Vertices {
		v.Parallelism = pars[i]
		v.OutSchema = schemas[i]
		v.SideOutSchemas = sides[i]
		if v.Name == "" {
			v.Name = v.UID
		}
	}
	return nil
}

const sideOutputSyntax = "a side-output name is 1-64 letters, digits, '_' or '-', starting with a letter"

// undeclaredSideOutput explains an edge reading a side output that its
// upstream vertex up does not declare.
func undeclaredSideOutput(up *Vertex, e *Edge, declared map[string]*Schema) error {
	if len(declared) == 0 {
		return fmt.Errorf("input %d reads side output %q of %q, but operator type %q declares no side outputs; read its main output (%q) instead",
			e.Input, e.SideOutput, up.UID, up.Type, up.UID)
	}
	return fmt.Errorf("input %d reads side output %q of %q, but operator type %q declares only %s",
		e.Input, e.SideOutput, up.UID, up.Type, strings.Join(quoted(sortedNames(declared)), ", "))
}

func sortedNames(m map[string]*Schema) []string {
	out := make([]string, 0, len(m))
	for n := range m {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

func quoted(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = strconv.Quote(n)
	}
	return out
}

func keyFields(e *Edge) []string {
	if e.Partitioning == Hash {
		return e.KeyFields
	}
	return nil
}

func topoOrder(g *JobGraph) ([]int, error) {
	indeg := make([]int, len(g.Vertices))
	for _, e := range g.Edges {
		indeg[e.To]++
	}
	var queue, order []int
	for i, d := range indeg {
		if d == 0 {
			queue = append(queue, i)
		}
	}
	for len(queue) > 0 {
		id := queue[0]
		queue = queue[1:]
		order = append(order, id)
		for _, e := range g.Edges {
			if e.From == id {
				if indeg[e.To]--; indeg[e.To] == 0 {
					queue = append(queue, e.To)
				}
			}
		}
	}
	if len(order) != len(g.Vertices) {
		return nil, errors.New("job graph has a cycle")
	}
	return order, nil
}

// TopoOrder returns the vertex IDs of g with every vertex after its inputs.
func (g *JobGraph) TopoOrder() ([]int, error) { return topoOrder(g) }
