package operators

import (
	"errors"
	"fmt"

	"github.com/weirstream/weir/expression"
	"github.com/weirstream/weir/stream"
)

// Operator type names.
const (
	TypeMap     = "map"
	TypeFilter  = "filter"
	TypeProject = "project"
)

// Register adds map, filter and project to r.
func Register(r *stream.Registry) {
	r.Register(stream.OperatorType{
		Name:        TypeMap,
		Kind:        stream.KindTransform,
		Plan:        planMap,
		NewOperator: func(config []byte) (stream.Operator, error) { return NewMap(config) },
		Config:      MapConfig{},
		Doc:         "adds or replaces fields computed by expressions ({\"set\": [{\"name\", \"expr\"}]})",
	})
	r.Register(stream.OperatorType{
		Name:        TypeFilter,
		Kind:        stream.KindTransform,
		Plan:        planFilter,
		NewOperator: func(config []byte) (stream.Operator, error) { return NewFilter(config) },
		Config:      FilterConfig{},
		Doc:         "keeps the rows for which a bool expression is true ({\"where\": expr})",
	})
	r.Register(stream.OperatorType{
		Name:        TypeProject,
		Kind:        stream.KindTransform,
		Plan:        planProject,
		NewOperator: func(config []byte) (stream.Operator, error) { return NewProject(config) },
		Config:      ProjectConfig{},
		Doc:         "outputs exactly the listed fields, copied or computed ({\"fields\": [{\"name\", \"expr\"}]})",
	})
}

// oneInput returns the single input schema of a plan.
func oneInput(op string, p *stream.PlanContext) (*stream.Schema, error) {
	if len(p.Inputs) != 1 || p.Inputs[0].Schema == nil {
		return nil, stream.ConfigErrorf("%s: takes exactly one input, got %d", op, len(p.Inputs))
	}
	return p.Inputs[0].Schema, nil
}

// inputSchema returns the single input schema an operator instance is opened
// with.
func inputSchema(op string, octx *stream.OperatorContext) (*stream.Schema, error) {
	if octx == nil || len(octx.InputSchemas) != 1 || octx.InputSchemas[0] == nil {
		return nil, fmt.Errorf("%s: opened without exactly one input schema", op)
	}
	return octx.InputSchemas[0], nil
}

// checkOutput verifies that the schema computed in Open is the one Plan
// returned, when the runtime supplies it.
func checkOutput(op string, octx *stream.OperatorContext, got *stream.Schema) error {
	if octx.OutputSchema != nil && !octx.OutputSchema.Equal(got) {
		return fmt.Errorf("%s: output schema %s differs from the planned %s; the job was planned against another input", op, got, octx.OutputSchema)
	}
	return nil
}

// compileExpr compiles src for option what of operator op.
func compileExpr(op, what, src string, in *stream.Schema) (*expression.Expr, error) {
	if src == "" {
		return nil, stream.ConfigErrorf("%s: %s: expression is empty", op, what)
	}
	e, err := expression.Compile(src, in)
	if err != nil {
		return nil, stream.ConfigErrorf("%s: %s: %v", op, what, err)
	}
	return e, nil
}

// padNulls extends null bitmaps that are shorter than the batch (as
// stream.Batch.AppendRow leaves them), which Batch.Filter and Column.IsNull
// cannot index. It is a no-op for well-formed batches.
func padNulls(b *stream.Batch) {
	w := (b.Len() + 63) >> 6
	for j := range b.Cols {
		c := &b.Cols[j]
		for c.Nulls != nil && len(c.Nulls) < w {
			c.Nulls = append(c.Nulls, 0)
		}
	}
}

var errNoInput = errors.New("operators: ProcessBatch called before Open")
