// Command weir is the Weir command-line client: it submits, lists and
// cancels jobs, shows taskmanagers, and runs a local cluster (`weir local`).
package main

import (
	"github.com/weirstream/weir/builtin"
	"github.com/weirstream/weir/cmd/cli"
)

func main() { cli.Main(cli.NewWeirCommand(builtin.Registry())) }
