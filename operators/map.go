package operators

import (
	"context"
	"fmt"

	"github.com/weirstream/weir/expression"
	"github.com/weirstream/weir/stream"
)

// MapConfig is the config of a "map" operator.
type MapConfig struct {
	// Set lists the fields to compute, in order; at least one. Each
	// expression sees the input fields only.
	Set []Assignment `json:"set"`
}

// Assignment computes one field.
type Assignment struct {
	// Name is the field to add (at the end of the schema) or replace (in
	// place; its type may change).
	Name string `json:"name"`
	// Expr is an expr-lang expression over the input fields.
	Expr string `json:"expr"`
}

// mapPlan is a map config compiled against an input schema.
type mapPlan struct {
	in, out *stream.Schema
	exprs   []*expression.Expr
	// pos is the output column of each entry; replaced says whether it
	// replaces an input field (pos < in.Len()).
	pos []int
}

func compileMap(cfg *MapConfig, in *stream.Schema) (*mapPlan, error) {
	if len(cfg.Set) == 0 {
		return nil, stream.ConfigErrorf(`map: set: no fields; list at least one {"name": ..., "expr": ...}`)
	}
	p := &mapPlan{in: in}
	fields := append([]stream.Field(nil), in.Fields...)
	seen := make(map[string]int)
	for i, a := range cfg.Set {
		what := fmt.Sprintf("set[%d]", i)
		if a.Name == "" {
			return nil, stream.ConfigErrorf("map: %s: name is empty", what)
		}
		what = fmt.Sprintf("set[%d] (%s)", i, a.Name)
		if j, dup := seen[a.Name]; dup {
			return nil, stream.ConfigErrorf("map: %s: set[%d] already sets %q; set each field once", what, j, a.Name)
		}
		seen[a.Name] = i
		e, err := compileExpr("map", what, a.Expr, in)
		if err != nil {
			return nil, err
		}
		pos := in.Index(a.Name)
		if pos < 0 {
			pos = len(fields)
			fields = append(fields, stream.Field{Name: a.Name, Type: e.Type()})
		} else {
			fields[pos].Type = e.Type()
		}
		p.exprs = append(p.exprs, e)
		p.pos = append(p.pos, pos)
	}
	out, err := stream.NewSchema(fields...)
	if err != nil {
		return nil, stream.ConfigErrorf("map: %v", err)
	}
	p.out = out
	return p, nil
}

func planMap(pc *stream.PlanContext) (*stream.Schema, error) {
	var cfg MapConfig
	if err := stream.DecodeOperatorConfig("map", pc.Config, &cfg); err != nil {
		return nil, err
	}
	in, err := oneInput("map", pc)
	if err != nil {
		return nil, err
	}
	p, err := compileMap(&cfg, in)
	if err != nil {
		return nil, err
	}
	return p.out, nil
}

// Map adds or replaces fields computed by expressions. Batches are changed in
// place and forwarded.
type Map struct {
	stream.BaseOperator
	cfg     MapConfig
	plan    *mapPlan
	scratch []stream.Column // results for replaced fields, swapped in
}

// NewMap returns a map operator for a JSON MapConfig.
func NewMap(config []byte) (*Map, error) {
	m := &Map{}
	if err := stream.DecodeOperatorConfig("map", config, &m.cfg); err != nil {
		return nil, err
	}
	return m, nil
}

// Open compiles the expressions against the input schema.
func (m *Map) Open(_ context.Context, octx *stream.OperatorContext) error {
	in, err := inputSchema("map", octx)
	if err != nil {
		return err
	}
	p, err := compileMap(&m.cfg, in)
	if err != nil {
		return err
	}
	if err := checkOutput("map", octx, p.out); err != nil {
		return err
	}
	m.plan = p
	m.scratch = make([]stream.Column, len(p.exprs))
	return nil
}

// ProcessBatch computes the fields of b and forwards it.
func (m *Map) ProcessBatch(_ int, b *stream.Batch, out stream.Collector) error {
	p := m.plan
	if p == nil {
		return errNoInput
	}
	if b.Len() == 0 {
		b.Release()
		return nil
	}
	padNulls(b)
	nin, nout := p.in.Len(), p.out.Len()
	if cap(b.Cols) >= nout {
		b.Cols = b.Cols[:nout] // reuse the pooled columns' buffers
	} else {
		b.Cols = append(b.Cols[:nin], make([]stream.Column, nout-nin)...)
	}
	// New fields go straight into their columns, which no expression reads;
	// replacements go to scratch until every expression has run.
	for i, e := range p.exprs {
		dst := &m.scratch[i]
		if p.pos[i] >= nin {
			dst = &b.Cols[p.pos[i]]
		}
		if err := e.Eval(b, dst); err != nil {
			b.Release()
			return fmt.Errorf("map: set[%d] (%s): %w", i, m.cfg.Set[i].Name, err)
		}
	}
	for i, pos := range p.pos {
		if pos < nin {
			b.Cols[pos], m.scratch[i] = m.scratch[i], b.Cols[pos]
		}
	}
	b.Schema = p.out
	out.Collect(b)
	return nil
}
