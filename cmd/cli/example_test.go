package cli_test

import (
	"fmt"
	"slices"

	"github.com/weirstream/weir/builtin"
	"github.com/weirstream/weir/cmd/cli"
	"github.com/weirstream/weir/stream"
)

// upper is a custom operator type: it passes its input through. A real one
// would implement stream.Operator.
var upper = stream.OperatorType{Name: "my_upper", Kind: stream.KindTransform,
	Plan:        func(p *stream.PlanContext) (*stream.Schema, error) { return p.Inputs[0].Schema, nil },
	NewOperator: func([]byte) (stream.Operator, error) { return nil, fmt.Errorf("not in this example") }}

// A taskmanager binary that offers an operator type of its own next to the
// built-in ones, with every flag and config-file key of the stock
// taskmanager: its main function is
//
//	func main() { cli.Main(cli.NewTaskManagerCommand(registry())) }
//
// and the jobmanager, which plans jobs, gets the same registry.
func ExampleNewTaskManagerCommand() {
	reg := builtin.Registry()
	reg.Register(upper)
	cmd := cli.NewTaskManagerCommand(reg)
	fmt.Println(cmd.Name(), slices.Contains(reg.Names(), "my_upper"), cmd.Flags().Lookup("config") != nil)
	// Output: taskmanager true true
}
