// Package cli builds the cobra commands of Weir's three binaries: the `weir`
// CLI (submit, jobs, taskmanagers, checkpoints, local) and the `jobmanager`
// and `taskmanager` processes, which `weir` also offers as subcommands so
// that `weir local` can start them from its own executable. Each takes the
// operator registry: a binary that adds operator types of its own builds
// its registry and runs these commands, with all their flags and config
// files (the Temporal-worker pattern; see ExampleNewTaskManagerCommand).
package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/weirstream/weir/stream"
)

// NewWeirCommand returns the root `weir` command; its submit command
// checks specs against reg, and its jobmanager and taskmanager subcommands
// (which `weir local` runs) use reg too.
func NewWeirCommand(reg *stream.Registry) *cobra.Command {
	var cc clientConfig
	root := &cobra.Command{
		Use:           "weir",
		Short:         "Weir: a stream processor with exactly-once checkpoints",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	cc.bind(root)
	root.AddCommand(newSubmitCommand(&cc, reg), newJobsCommand(&cc, reg), newSavepointCommand(&cc), newSavepointsCommand(&cc), newTaskManagersCommand(&cc), newCheckpointsCommand(&cc), newLocalCommand(), newCertsCommand(),
		NewJobManagerCommand(reg), NewTaskManagerCommand(reg))
	return root
}

// Main runs cmd with a context cancelled by SIGINT or SIGTERM and exits with
// status 1 after printing the error, if any.
func Main(cmd *cobra.Command) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := cmd.ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", cmd.Name(), err)
		os.Exit(1)
	}
}
