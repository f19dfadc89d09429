// Command jobmanager runs the Weir jobmanager: cluster membership, the
// scheduler and the job API. See `jobmanager --help`.
package main

import (
	"github.com/weirstream/weir/builtin"
	"github.com/weirstream/weir/cmd/cli"
)

func main() { cli.Main(cli.NewJobManagerCommand(builtin.Registry())) }
