// Package cli builds the cobra commands of Weir's three binaries: the `weir`
// CLI (submit, jobs, taskmanagers, local) and the `jobmanager` and
// `taskmanager` processes, which `weir` also offers as subcommands so that
// `weir local` can start them from its own executable.
package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

// NewWeirCommand returns the root `weir` command.
func NewWeirCommand() *cobra.Command {
	var cc clientConfig
	root := &cobra.Command{
		Use:           "weir",
		Short:         "Weir: a stream processor with exactly-once checkpoints",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	cc.bind(root)
	root.AddCommand(newSubmitCommand(&cc), newJobsCommand(&cc), newTaskManagersCommand(&cc), newCheckpointsCommand(&cc), newLocalCommand(),
		NewJobManagerCommand(), NewTaskManagerCommand())
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
