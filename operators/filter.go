package operators

import (
	"context"
	"fmt"

	"github.com/weirstream/weir/expression"
	"github.com/weirstream/weir/stream"
)

// FilterConfig is the config of a "filter" operator.
type FilterConfig struct {
	// Where is a bool expr-lang expression; rows where it is true are kept
	// (null counts as false).
	Where string `json:"where"`
}

func compileFilter(cfg *FilterConfig, in *stream.Schema) (*expression.Expr, error) {
	e, err := compileExpr("filter", "where", cfg.Where, in)
	if err != nil {
		return nil, err
	}
	if e.Type() != stream.TypeBool {
		return nil, stream.ConfigErrorf("filter: where: expression %q has type %s, but a filter needs a bool (for example %s != 0)", cfg.Where, e.Type(), cfg.Where)
	}
	return e, nil
}

func planFilter(pc *stream.PlanContext) (*stream.Schema, error) {
	var cfg FilterConfig
	if err := stream.DecodeOperatorConfig("filter", pc.Config, &cfg); err != nil {
		return nil, err
	}
	in, err := oneInput("filter", pc)
	if err != nil {
		return nil, err
	}
	if _, err := compileFilter(&cfg, in); err != nil {
		return nil, err
	}
	return in, nil
}

// Filter keeps the rows of each batch for which an expression is true.
type Filter struct {
	stream.BaseOperator
	cfg  FilterConfig
	expr *expression.Expr
	sel  []int
}

// NewFilter returns a filter operator for a JSON FilterConfig.
func NewFilter(config []byte) (*Filter, error) {
	f := &Filter{}
	if err := stream.DecodeOperatorConfig("filter", config, &f.cfg); err != nil {
		return nil, err
	}
	return f, nil
}

// Open compiles the where-expression against the input schema.
func (f *Filter) Open(_ context.Context, octx *stream.OperatorContext) error {
	in, err := inputSchema("filter", octx)
	if err != nil {
		return err
	}
	e, err := compileFilter(&f.cfg, in)
	if err != nil {
		return err
	}
	if err := checkOutput("filter", octx, in); err != nil {
		return err
	}
	f.expr = e
	return nil
}

// ProcessBatch drops the rows of b that do not match and forwards the rest;
// a batch with no matching row is released.
func (f *Filter) ProcessBatch(_ int, b *stream.Batch, out stream.Collector) error {
	if f.expr == nil {
		return errNoInput
	}
	padNulls(b)
	sel, err := f.expr.Select(b, f.sel)
	f.sel = sel
	if err != nil {
		b.Release()
		return fmt.Errorf("filter: where: %w", err)
	}
	if len(sel) == 0 {
		b.Release()
		return nil
	}
	b.Filter(sel)
	out.Collect(b)
	return nil
}
