// Command jobmanager is the jobmanager binary of the process tests: the stock command
// with the test operator registry (testbin.Registry).
package main

import (
	"github.com/weirstream/weir/cmd/cli"
	"github.com/weirstream/weir/test/testbin"
)

func main() { cli.Main(cli.NewJobManagerCommand(testbin.Registry())) }
