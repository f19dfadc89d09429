package stream

import (
	"encoding/json"
	"fmt"
)

// Builder assembles a JobGraph in Go:
//
//	b := stream.NewBuilder("clicks")
//	b.Source("gen", "datagen", cfg).
//		Then("stamp", "watermarks", wcfg).
//		KeyBy("user").
//		Then("counts", "tumbling_window", agg).
//		Then("out", "print", nil)
//	g, err := b.Build()
//
// Configs are any values that encode to the operator type's JSON config.
type Builder struct {
	g   JobGraph
	err error
}

// Stream is an output of one vertex (its main output, or a side output),
// waiting to be connected.
type Stream struct {
	b    *Builder
	id   int
	side string // "" for the main output
	part Partitioning
	keys []string
}

// NewBuilder starts a job called name.
func NewBuilder(name string) *Builder { return &Builder{g: JobGraph{Name: name}} }

// Parallelism sets the job's default parallelism.
func (b *Builder) Parallelism(p int) *Builder { b.g.Parallelism = p; return b }

// MaxParallelism sets the number of key groups.
func (b *Builder) MaxParallelism(p int) *Builder { b.g.MaxParallelism = p; return b }

func (b *Builder) add(uid, typ string, config any) int {
	raw, err := marshalConfig(config)
	if err != nil && b.err == nil {
		b.err = fmt.Errorf("operator %q: %w", uid, err)
	}
	id := len(b.g.Vertices)
	b.g.Vertices = append(b.g.Vertices, &Vertex{ID: id, UID: uid, Name: uid, Type: typ, Config: raw})
	return id
}

func marshalConfig(config any) (json.RawMessage, error) {
	switch c := config.(type) {
	case nil:
		return nil, nil
	case json.RawMessage:
		return c, nil
	case []byte:
		return json.RawMessage(c), nil
	}
	return json.Marshal(config)
}

// Source adds a source vertex.
func (b *Builder) Source(uid, typ string, config any) *Stream {
	return &Stream{b: b, id: b.add(uid, typ, config), part: Forward}
}

// Vertex returns the vertex a stream comes from, to set its parallelism or
// name.
func (s *Stream) Vertex() *Vertex { return s.b.g.Vertices[s.id] }

// SetParallelism sets the parallelism of the vertex s comes from.
func (s *Stream) SetParallelism(p int) *Stream { s.Vertex().Parallelism = p; return s }

// SideOutput returns the side output called name of the vertex s comes
// from, which its operator type must declare (PlanContext.DeclareSideOutput;
// Plan checks). It is forward-connected until KeyBy, Rebalance or
// Broadcast says otherwise.
//
//	counts := keyed.Then("counts", "tumbling_window", cfg)
//	counts.SideOutput("late").Then("late-out", "print", nil)
func (s *Stream) SideOutput(name string) *Stream {
	return &Stream{b: s.b, id: s.id, side: name, part: Forward}
}

// KeyBy partitions s by the given fields for the next operator.
func (s *Stream) KeyBy(fields ...string) *Stream {
	return &Stream{b: s.b, id: s.id, side: s.side, part: Hash, keys: fields}
}

// Rebalance spreads s round-robin over the next operator's subtasks.
func (s *Stream) Rebalance() *Stream {
	return &Stream{b: s.b, id: s.id, side: s.side, part: Rebalance}
}

// Broadcast sends all of s to every subtask of the next operator.
func (s *Stream) Broadcast() *Stream {
	return &Stream{b: s.b, id: s.id, side: s.side, part: Broadcast}
}

// Then adds a one-input operator reading s.
func (s *Stream) Then(uid, typ string, config any) *Stream {
	id := s.b.add(uid, typ, config)
	s.b.connect(s, id, 0)
	return &Stream{b: s.b, id: id, part: Forward}
}

// Join adds a two-input operator reading s as input 0 and other as input 1.
func (s *Stream) Join(other *Stream, uid, typ string, config any) *Stream {
	id := s.b.add(uid, typ, config)
	s.b.connect(s, id, 0)
	s.b.connect(other, id, 1)
	return &Stream{b: s.b, id: id, part: Forward}
}

func (b *Builder) connect(s *Stream, to, input int) {
	b.g.Edges = append(b.g.Edges, &Edge{From: s.id, SideOutput: s.side, To: to, Input: input, Partitioning: s.part, KeyFields: s.keys})
}

// Build returns the graph, unplanned: call Plan (or submit it) to check it.
func (b *Builder) Build() (*JobGraph, error) {
	if b.err != nil {
		return nil, b.err
	}
	g := b.g
	return &g, nil
}
