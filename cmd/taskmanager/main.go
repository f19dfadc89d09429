// Command taskmanager runs a Weir taskmanager, which offers task slots to the
// jobmanager and runs the tasks deployed to it. See `taskmanager --help`.
package main

import (
	"github.com/weirstream/weir/builtin"
	"github.com/weirstream/weir/cmd/cli"
)

func main() { cli.Main(cli.NewTaskManagerCommand(builtin.Registry())) }
