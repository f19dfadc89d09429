package jobspec_test

import (
	"errors"
	"fmt"

	"github.com/weirstream/weir/jobspec"
	"github.com/weirstream/weir/stream"
)

func ExampleParse() {
	// A registry with one source and one sink; a real program registers the
	// built-in operators instead.
	reg := stream.NewRegistry()
	schema := stream.MustSchema(stream.Field{Name: "n", Type: stream.TypeInt64})
	reg.Register(stream.OperatorType{
		Name: "numbers", Kind: stream.KindSource,
		Plan:      func(*stream.PlanContext) (*stream.Schema, error) { return schema, nil },
		NewSource: func([]byte) (stream.Source, error) { return nil, errors.New("not in this example") },
	})
	reg.Register(stream.OperatorType{
		Name: "print", Kind: stream.KindSink,
		Plan:        func(*stream.PlanContext) (*stream.Schema, error) { return nil, nil },
		NewOperator: func([]byte) (stream.Operator, error) { return nil, errors.New("not in this example") },
	})

	g, err := jobspec.Parse("job.yaml", []byte(`
name: example
operators:
  - uid: nums
    type: numbers
    config: {upTo: 10}
  - uid: out
    type: print
    keyBy: [n]
`), reg)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, v := range g.Vertices {
		fmt.Printf("%s %s config=%s\n", v.UID, v.Type, v.Config)
	}
	for _, e := range g.Edges {
		fmt.Println(g.Vertices[e.From].UID, "->", g.Vertices[e.To].UID, e.Partitioning, e.KeyFields)
	}

	_, err = jobspec.Parse("job.yaml", []byte(`
name: example
operators:
  - uid: nums
    type: numbrs
`), reg)
	fmt.Println(err)
	// Output:
	// nums numbers config={"upTo":10}
	// out print config=
	// nums -> out hash [n]
	// job.yaml:5: operator "nums": type: unknown operator type "numbrs" (did you mean "numbers"?); known types: numbers, print
}
