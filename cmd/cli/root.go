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
	"path/filepath"
	"runtime/pprof"
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
	root.AddCommand(newOperatorsCommand(&cc, reg))
	addVersion(root)
	return root
}

// Main runs cmd with a context cancelled by SIGINT or SIGTERM and exits with
// status 1 after printing the error, if any. It gives cmd a `version`
// subcommand and a --version flag unless it has them.
//
// With WEIR_CPU_PROFILE set to a directory, the process writes a CPU
// profile of its whole run there (NAME-PID.pprof, for `go tool pprof`): a
// developer's aid for profiling processes that tests and benchmarks start.
func Main(cmd *cobra.Command) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	addVersion(cmd)
	stopProfile := startCPUProfile(cmd.Name())
	err := cmd.ExecuteContext(ctx)
	stopProfile()
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", cmd.Name(), err)
		os.Exit(1)
	}
}

// startCPUProfile starts the CPU profile WEIR_CPU_PROFILE asks for, if any,
// and returns the function that ends it.
func startCPUProfile(name string) func() {
	dir := os.Getenv("WEIR_CPU_PROFILE")
	if dir == "" {
		return func() {}
	}
	f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s-%d.pprof", name, os.Getpid())))
	if err == nil {
		err = pprof.StartCPUProfile(f)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: WEIR_CPU_PROFILE: %v; running without a profile\n", name, err)
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}
