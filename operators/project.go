package operators

import (
	"context"
	"fmt"
	"strings"

	"github.com/weirstream/weir/expression"
	"github.com/weirstream/weir/stream"
)

// ProjectConfig is the config of a "project" operator.
type ProjectConfig struct {
	// Fields are the output fields, in order; at least one.
	Fields []ProjectField `json:"fields"`
}

// ProjectField is one output field of a project.
type ProjectField struct {
	// Name is the output field's name.
	Name string `json:"name"`
	// Expr computes the field from the input fields. Empty means: copy the
	// input field called Name.
	Expr string `json:"expr,omitempty"`
}

// projectPlan is a project config compiled against an input schema.
type projectPlan struct {
	in, out *stream.Schema
	exprs   []*expression.Expr // nil for a copied field
	src     []int              // input column of a copied field
}

func compileProject(cfg *ProjectConfig, in *stream.Schema) (*projectPlan, error) {
	if len(cfg.Fields) == 0 {
		return nil, stream.ConfigErrorf(`project: fields: none listed; list at least one {"name": ...} or {"name": ..., "expr": ...}`)
	}
	p := &projectPlan{in: in}
	fields := make([]stream.Field, 0, len(cfg.Fields))
	seen := make(map[string]int)
	for i, f := range cfg.Fields {
		what := fmt.Sprintf("fields[%d]", i)
		if f.Name == "" {
			return nil, stream.ConfigErrorf("project: %s: name is empty", what)
		}
		if j, dup := seen[f.Name]; dup {
			return nil, stream.ConfigErrorf("project: %s: name %q is also used by fields[%d]; output names must be unique", what, f.Name, j)
		}
		seen[f.Name] = i
		if f.Expr == "" {
			j := in.Index(f.Name)
			if j < 0 {
				return nil, stream.ConfigErrorf("project: %s: no input field %q (the input has %s); give an expr to compute it", what, f.Name, strings.Join(in.Names(), ", "))
			}
			fields = append(fields, in.Fields[j])
			p.exprs = append(p.exprs, nil)
			p.src = append(p.src, j)
			continue
		}
		e, err := compileExpr("project", fmt.Sprintf("%s (%s)", what, f.Name), f.Expr, in)
		if err != nil {
			return nil, err
		}
		fields = append(fields, stream.Field{Name: f.Name, Type: e.Type()})
		p.exprs = append(p.exprs, e)
		p.src = append(p.src, -1)
	}
	out, err := stream.NewSchema(fields...)
	if err != nil {
		return nil, stream.ConfigErrorf("project: %v", err)
	}
	p.out = out
	return p, nil
}

func planProject(pc *stream.PlanContext) (*stream.Schema, error) {
	var cfg ProjectConfig
	if err := stream.DecodeOperatorConfig("project", pc.Config, &cfg); err != nil {
		return nil, err
	}
	in, err := oneInput("project", pc)
	if err != nil {
		return nil, err
	}
	p, err := compileProject(&cfg, in)
	if err != nil {
		return nil, err
	}
	return p.out, nil
}

// Project outputs exactly the configured fields. Copied fields move their
// buffers from the input batch without copying values (output names are
// unique, so no input column is copied twice).
type Project struct {
	stream.BaseOperator
	cfg  ProjectConfig
	plan *projectPlan
}

// NewProject returns a project operator for a JSON ProjectConfig.
func NewProject(config []byte) (*Project, error) {
	p := &Project{}
	if err := stream.DecodeOperatorConfig("project", config, &p.cfg); err != nil {
		return nil, err
	}
	return p, nil
}

// Open compiles the expressions against the input schema.
func (p *Project) Open(_ context.Context, octx *stream.OperatorContext) error {
	in, err := inputSchema("project", octx)
	if err != nil {
		return err
	}
	pl, err := compileProject(&p.cfg, in)
	if err != nil {
		return err
	}
	if err := checkOutput("project", octx, pl.out); err != nil {
		return err
	}
	p.plan = pl
	return nil
}

// ProcessBatch builds the projected batch, releases b and forwards the
// result.
func (p *Project) ProcessBatch(_ int, b *stream.Batch, out stream.Collector) error {
	pl := p.plan
	if pl == nil {
		return errNoInput
	}
	n := b.Len()
	if n == 0 {
		b.Release()
		return nil
	}
	padNulls(b)
	nb := stream.NewBatch(pl.out, 0)
	// Compute first: moving columns out of b would hide them from the
	// expressions.
	for k, e := range pl.exprs {
		if e == nil {
			continue
		}
		if err := e.Eval(b, &nb.Cols[k]); err != nil {
			nb.Release()
			b.Release()
			return fmt.Errorf("project: fields[%d] (%s): %w", k, p.cfg.Fields[k].Name, err)
		}
	}
	for k, j := range pl.src {
		if j >= 0 {
			nb.Cols[k], b.Cols[j] = b.Cols[j], nb.Cols[k]
		}
	}
	nb.Times, b.Times = b.Times, nb.Times
	nb.SetLen(n)
	b.Release()
	out.Collect(nb)
	return nil
}
