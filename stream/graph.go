package stream

import (
	"cmp"
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
	// States is filled by Plan: the state the operator type declared
	// (PlanContext.DeclareState), in the order declared; nil when none.
	States []StateDecl
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

// Inputs returns the edges into vertex id, ordered by input number. It
// scans every edge of g; code that visits the edges of every vertex should
// build an EdgeIndex once (Index) instead.
func (g *JobGraph) Inputs(id int) []*Edge {
	var out []*Edge
	for _, e := range g.Edges {
		if e.To == id {
			out = append(out, e)
		}
	}
	slices.SortStableFunc(out, byInput)
	return out
}

// Outputs returns the edges out of vertex id, in the order of g.Edges. It
// scans every edge of g; code that visits the edges of every vertex should
// build an EdgeIndex once (Index) instead.
func (g *JobGraph) Outputs(id int) []*Edge {
	var out []*Edge
	for _, e := range g.Edges {
		if e.From == id {
			out = append(out, e)
		}
	}
	return out
}

func byInput(a, b *Edge) int { return cmp.Compare(a.Input, b.Input) }

// EdgeIndex lists the edges into and out of every vertex of a graph. Built
// once in O(V + E log E) time, it answers Inputs and Outputs without
// scanning all edges, so that a pass over every vertex's edges (planning,
// chaining, building deployments) is not quadratic in the size of the job.
//
// An EdgeIndex is a snapshot: it does not see edges added to or changed in
// the graph after Index returned. It is safe for concurrent reads. The
// slices it returns belong to the index and must not be modified.
type EdgeIndex struct {
	// The edges into vertex id are in[inStart[id]:inStart[id+1]], and
	// those out of it out[outStart[id]:outStart[id+1]]: one allocation per
	// direction rather than one per vertex.
	inStart, outStart []int
	in, out           []*Edge
}

// Index returns the edges of g by vertex. Nil edges and edges naming a
// vertex that g does not have are left out; Plan reports them.
func (g *JobGraph) Index() *EdgeIndex {
	n := len(g.Vertices)
	x := &EdgeIndex{inStart: make([]int, n+1), outStart: make([]int, n+1)}
	valid := func(e *Edge) bool { return e != nil && e.From >= 0 && e.From < n && e.To >= 0 && e.To < n }
	for _, e := range g.Edges {
		if valid(e) {
			x.inStart[e.To+1]++
			x.outStart[e.From+1]++
		}
	}
	for i := range n {
		x.inStart[i+1] += x.inStart[i]
		x.outStart[i+1] += x.outStart[i]
	}
	x.in, x.out = make([]*Edge, x.inStart[n]), make([]*Edge, x.outStart[n])
	inPos, outPos := slices.Clone(x.inStart[:n]), slices.Clone(x.outStart[:n])
	for _, e := range g.Edges {
		if valid(e) {
			x.in[inPos[e.To]] = e
			inPos[e.To]++
			x.out[outPos[e.From]] = e
			outPos[e.From]++
		}
	}
	for id := range n {
		if ins := x.in[x.inStart[id]:x.inStart[id+1]]; len(ins) > 1 {
			slices.SortStableFunc(ins, byInput)
		}
	}
	return x
}

// Inputs returns the edges into vertex id, ordered by input number (edges
// with the same number in the order of the graph's Edges).
func (x *EdgeIndex) Inputs(id int) []*Edge {
	if id < 0 || id+1 >= len(x.inStart) {
		return nil
	}
	lo, hi := x.inStart[id], x.inStart[id+1]
	return x.in[lo:hi:hi]
}

// Outputs returns the edges out of vertex id, in the order of the graph's
// Edges.
func (x *EdgeIndex) Outputs(id int) []*Edge {
	if id < 0 || id+1 >= len(x.outStart) {
		return nil
	}
	lo, hi := x.outStart[id], x.outStart[id+1]
	return x.out[lo:hi:hi]
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

// uidPattern is the syntax of uids; their length is checked separately
// against MaxUIDLength.
var uidPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)

// sideOutputPattern is the syntax of side-output names. It has no '.', so
// that a job spec can write "uid.output".
var sideOutputPattern = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]{0,63}$`)

// maxSideOutputLength is the longest side-output name sideOutputPattern
// accepts.
const maxSideOutputLength = 64

// ValidSideOutputName reports whether name may name a side output: 1-64
// letters, digits, '_' or '-', starting with a letter.
func ValidSideOutputName(name string) bool { return sideOutputPattern.MatchString(name) }

// Plan checks g against the operator types in reg and the limits of this
// package (MaxOperators and the rest), and fills in defaults and every
// vertex's OutSchema and SideOutSchemas. It returns the first problem
// found; errors about one vertex are *VertexError (an edge reading an
// output its upstream operator does not have is an error of the reading
// vertex). Plan modifies g only when it succeeds. It takes time linear in
// the number of vertices and edges, apart from sorting each vertex's inputs
// and the operator types' own Plan functions.
func Plan(g *JobGraph, reg *Registry) error { return PlanWith(g, reg, PlanOptions{}) }

// PlanOptions are settings of the process that plans a graph.
type PlanOptions struct {
	// Paths confines the files operators may read and write
	// (PlanContext.Paths); nil allows every path.
	Paths *PathPolicy
}

// PlanWith is Plan with the planning process's options.
func PlanWith(g *JobGraph, reg *Registry, opts PlanOptions) error {
	if g.Name == "" {
		return errors.New("job has no name")
	}
	if len(g.Name) > MaxNameLength {
		return fmt.Errorf("job name is %d bytes; the limit is %d bytes (stream.MaxNameLength); use a shorter name", len(g.Name), MaxNameLength)
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
	if maxPar < 1 || maxPar > MaxKeyGroups {
		return fmt.Errorf("job maxParallelism %d: must be between 1 and %d", g.MaxParallelism, MaxKeyGroups)
	}
	if len(g.Vertices) == 0 {
		return errors.New("job has no operators")
	}
	// Checked before anything is allocated per vertex or per edge, so that
	// an oversized graph costs no more than reading it.
	if len(g.Vertices) > MaxOperators {
		return fmt.Errorf("job has %d operators; the limit is %d (stream.MaxOperators); split it into several jobs", len(g.Vertices), MaxOperators)
	}
	if err := g.Checkpoint.Validate(); err != nil {
		return err
	}
	idx := g.Index()
	uids := make(map[string]bool, len(g.Vertices))
	pars := make([]int, len(g.Vertices))
	types := make([]*OperatorType, len(g.Vertices))
	for i, v := range g.Vertices {
		if err := checkVertex(i, v); err != nil {
			return err
		}
		if uids[v.UID] {
			return &VertexError{v.UID, errors.New("uid is used by another operator; uids must be unique")}
		}
		uids[v.UID] = true
		hasInputs := len(idx.Inputs(i)) > 0
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
		if e == nil {
			return fmt.Errorf("edge #%d is nil", i+1)
		}
		parts[i] = e.Partitioning
		if e.From < 0 || e.From >= len(g.Vertices) || e.To < 0 || e.To >= len(g.Vertices) {
			return fmt.Errorf("edge %d->%d names a vertex that does not exist", e.From, e.To)
		}
		if e.From == e.To {
			return &VertexError{g.Vertices[e.To].UID, errors.New("operator reads its own output")}
		}
		if e.SideOutput != "" && !ValidSideOutputName(e.SideOutput) {
			return &VertexError{g.Vertices[e.To].UID, fmt.Errorf("input %d reads side output %s of %q: %s", e.Input, quoteName(e.SideOutput, maxSideOutputLength), g.Vertices[e.From].UID, sideOutputSyntax)}
		}
		switch e.Partitioning {
		case Forward:
			// An unspecified (forward) edge between operators of different
			// parallelism cannot pair subtask i with subtask i, so it
			// redistributes round-robin instead.
			if pars[e.From] != pars[e.To] {
				parts[i] = Rebalance
			}
		case Hash:
			if len(e.KeyFields) == 0 {
				return &VertexError{g.Vertices[e.To].UID, errors.New("keyBy needs at least one key field")}
			}
			for j, k := range e.KeyFields {
				if len(k) > MaxNameLength {
					return &VertexError{g.Vertices[e.To].UID, fmt.Errorf("keyBy: key field #%d is %d bytes; the limit is %d bytes (stream.MaxNameLength); name a field of the input", j+1, len(k), MaxNameLength)}
				}
			}
		case Rebalance, Broadcast:
		default:
			return &VertexError{g.Vertices[e.To].UID, fmt.Errorf("edge from %q has no partitioning", g.Vertices[e.From].UID)}
		}
	}
	order, err := topoOrder(g, idx)
	if err != nil {
		return err
	}
	schemas := make([]*Schema, len(g.Vertices))
	sides := make([]map[string]*Schema, len(g.Vertices))
	states := make([][]StateDecl, len(g.Vertices))
	for _, id := range order {
		v, t := g.Vertices[id], types[id]
		ins := idx.Inputs(id)
		if t.Kind == KindSource && len(ins) > 0 {
			return &VertexError{v.UID, fmt.Errorf("%q is a source and takes no input", v.Type)}
		}
		if t.Kind != KindSource && len(ins) != t.Inputs {
			return &VertexError{v.UID, fmt.Errorf("%q takes %d input(s), got %d", v.Type, t.Inputs, len(ins))}
		}
		if t.Kind == KindSink && len(idx.Outputs(id)) > 0 {
			return &VertexError{v.UID, fmt.Errorf("%q is a sink; nothing may read from it", v.Type)}
		}
		pc := &PlanContext{UID: v.UID, Config: v.Config, Parallelism: pars[id], Paths: opts.Paths}
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
		if err := pc.stateErr; err != nil {
			return &VertexError{v.UID, fmt.Errorf("operator type %q: %w", v.Type, err)}
		}
		if t.Kind == KindSink && len(pc.sides) > 0 {
			return &VertexError{v.UID, fmt.Errorf("operator type %q is a sink but declares side outputs (%s); only sources and transforms may", v.Type, strings.Join(sortedNames(pc.sides), ", "))}
		}
		schemas[id] = out
		sides[id] = pc.sides
		states[id] = pc.states
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
		v.States = states[i]
		if v.Name == "" {
			v.Name = v.UID
		}
	}
	return nil
}

// checkVertex checks what Plan can tell about vertex v at position i
// without looking at the rest of the graph: its position, its uid's syntax
// and the size limits. A uid, name or type over its limit is not repeated
// in the error, which would make the error as large as the input.
func checkVertex(i int, v *Vertex) error {
	if v == nil {
		return fmt.Errorf("vertex #%d is nil", i+1)
	}
	if len(v.UID) > MaxUIDLength {
		return fmt.Errorf("operator #%d: uid is %d bytes; the limit is %d bytes (stream.MaxUIDLength); use a shorter uid", i+1, len(v.UID), MaxUIDLength)
	}
	if !uidPattern.MatchString(v.UID) {
		return &VertexError{v.UID, fmt.Errorf("uid must be 1-%d letters, digits, '_', '.' or '-', starting with a letter or digit", MaxUIDLength)}
	}
	if v.ID != i {
		return fmt.Errorf("vertex %q has ID %d at position %d", v.UID, v.ID, i)
	}
	switch {
	case len(v.Name) > MaxNameLength:
		return &VertexError{v.UID, fmt.Errorf("name is %d bytes; the limit is %d bytes (stream.MaxNameLength); use a shorter name", len(v.Name), MaxNameLength)}
	case len(v.Type) > MaxNameLength:
		return &VertexError{v.UID, fmt.Errorf("unknown operator type: the type name is %d bytes, and type names are at most %d bytes (stream.MaxNameLength); use a registered type", len(v.Type), MaxNameLength)}
	case len(v.Config) > MaxConfigBytes:
		return &VertexError{v.UID, fmt.Errorf("config is %d bytes; the limit is %d bytes (stream.MaxConfigBytes); move bulky data out of the config into a file or a source the operator reads", len(v.Config), MaxConfigBytes)}
	}
	return nil
}

// quoteName quotes an identifier for an error message, or only says how
// long it is when it is longer than limit bytes: an over-long identifier is
// usually data pasted into the wrong place, and it is not repeated back.
func quoteName(s string, limit int) string {
	if len(s) > limit {
		return fmt.Sprintf("(a name of %d bytes)", len(s))
	}
	return strconv.Quote(s)
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

// topoOrder returns the vertex ids of g, every vertex after its inputs, in
// O(V + E) time using idx (an index of g).
func topoOrder(g *JobGraph, idx *EdgeIndex) ([]int, error) {
	indeg := make([]int, len(g.Vertices))
	for id := range indeg {
		indeg[id] = len(idx.Inputs(id))
	}
	order := make([]int, 0, len(g.Vertices))
	for i, d := range indeg {
		if d == 0 {
			order = append(order, i)
		}
	}
	// order doubles as the queue: order[next:] are the vertices whose
	// inputs are all placed but whose outputs are not yet followed.
	for next := 0; next < len(order); next++ {
		for _, e := range idx.Outputs(order[next]) {
			if indeg[e.To]--; indeg[e.To] == 0 {
				order = append(order, e.To)
			}
		}
	}
	if len(order) != len(g.Vertices) {
		return nil, errors.New("job graph has a cycle")
	}
	return order, nil
}

// TopoOrder returns the vertex IDs of g with every vertex after its inputs.
// Edges naming a vertex that g does not have are ignored.
func (g *JobGraph) TopoOrder() ([]int, error) { return topoOrder(g, g.Index()) }
