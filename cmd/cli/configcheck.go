package cli

import (
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/weirstream/weir/jobmanager"
	"github.com/weirstream/weir/stream"
	"github.com/weirstream/weir/taskmanager"
)

// JobManagerConfig returns the configuration a jobmanager started with
// args (its command-line arguments, --config included) would run with,
// without starting it: the arguments are parsed by the real command's
// flags and the config file is read as the process reads it, unknown keys
// being errors. The environment (WEIR_HA_ETCD_PASSWORD) is not applied,
// and the result is not validated: call its Validate. For checking
// deployment manifests against the binary.
func JobManagerConfig(args []string) (jobmanager.Config, error) {
	if err := checkArgs(NewJobManagerCommand(stream.NewRegistry()), args); err != nil {
		return jobmanager.Config{}, err
	}
	cfg := jobmanager.DefaultConfig()
	cfg.DataDir = DefaultDataDir
	restart := map[string]string{}
	table := jobManagerSettings(&cfg, &restart)
	fs, configPath, err := parseSettings("jobmanager", table, args)
	if err != nil {
		return cfg, err
	}
	if configPath != "" {
		if err := applyConfigFile(fs, table, configPath, nil); err != nil {
			return cfg, err
		}
	}
	return cfg, finishJobManagerConfig(&cfg, restart)
}

// TaskManagerConfig is JobManagerConfig for a taskmanager; neither
// WEIR_JOBMANAGER nor WEIR_HA_ETCD_PASSWORD is applied.
func TaskManagerConfig(args []string) (taskmanager.Config, error) {
	if err := checkArgs(NewTaskManagerCommand(stream.NewRegistry()), args); err != nil {
		return taskmanager.Config{}, err
	}
	cfg := taskmanager.DefaultConfig()
	table := taskManagerSettings(&cfg)
	fs, configPath, err := parseSettings("taskmanager", table, args)
	if err != nil {
		return cfg, err
	}
	if configPath != "" {
		if err := applyConfigFile(fs, table, configPath, nil); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}

// checkArgs parses args with cmd's own flags, so that a flag the process
// does not know (or a value it cannot parse) is an error here too.
func checkArgs(cmd *cobra.Command, args []string) error {
	if err := cmd.ParseFlags(args); err != nil {
		return fmt.Errorf("%s: %w", cmd.Name(), err)
	}
	if err := cmd.ValidateArgs(cmd.Flags().Args()); err != nil {
		return fmt.Errorf("%s: %w", cmd.Name(), err)
	}
	return nil
}

// parseSettings parses args into a flag set bound to table (flags outside
// the table, already checked by checkArgs, are skipped) and returns it
// with the --config path.
func parseSettings(name string, table []setting, args []string) (*pflag.FlagSet, string, error) {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.ParseErrorsAllowlist.UnknownFlags = true
	var configPath string
	fs.StringVar(&configPath, "config", "", "")
	bindSettings(fs, table)
	if err := fs.Parse(args); err != nil {
		return nil, "", fmt.Errorf("%s: %w", name, err)
	}
	return fs, configPath, nil
}
