package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/proto/weirpb"
)

// defaultSavepointTimeout bounds a savepoint command when --timeout is
// not given: the call returns when the copy is done, which for large state
// takes far longer than other calls.
const defaultSavepointTimeout = time.Hour

// savepointConnect is connect with defaultSavepointTimeout unless
// --timeout was given.
func (c *clientConfig) savepointConnect(cmd *cobra.Command) (weirpb.JobServiceClient, context.Context, func(), error) {
	client, closeFn, err := c.dial()
	if err != nil {
		return nil, nil, nil, err
	}
	timeout := c.timeout
	if f := cmd.Flags().Lookup("timeout"); f == nil || !f.Changed {
		timeout = defaultSavepointTimeout
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
	return client, ctx, func() { cancel(); closeFn() }, nil
}

// printSavepoint prints where a savepoint went.
func printSavepoint(cmd *cobra.Command, cc *clientConfig, what string, resp *weirpb.SavepointResponse) error {
	if cc.output == "json" {
		return printJSON(cmd.OutOrStdout(), resp)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s at checkpoint %d (%s): %s\n", what, resp.GetCheckpointId(),
		checkpoint.FormatBytes(resp.GetSizeBytes()), resp.GetLocation())
	return nil
}

func newSavepointCommand(cc *clientConfig) *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "savepoint JOB",
		Short: "Take a savepoint of a running job: a self-contained copy of its state to start jobs from",
		Long: "savepoint takes a checkpoint of the job and copies every file it needs into a directory of its own,\n" +
			"<dir>/savepoint-<job>-<checkpoint>, which can be moved and outlives the job. Start a job from it with\n" +
			"weir submit JOB.yaml --from LOCATION; delete it with weir savepoints dispose LOCATION.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, ctx, done, err := cc.savepointConnect(cmd)
			if err != nil {
				return err
			}
			defer done()
			resp, err := client.TriggerSavepoint(ctx, &weirpb.TriggerSavepointRequest{JobId: args[0], Dir: dir})
			if err != nil {
				return cc.callErr("savepoint of job "+args[0], err)
			}
			return printSavepoint(cmd, cc, "savepoint of job "+args[0], resp)
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "directory to put the savepoint in: file:///path or s3://bucket/prefix (default: the jobmanager's savepointDir)")
	return cmd
}

func newStopCommand(cc *clientConfig) *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "stop JOB",
		Short: "Stop a job with a savepoint: it ends FINISHED at a checkpoint copied into a savepoint",
		Long: "stop takes a checkpoint of the job, stops the job at it (no later checkpoint completes, so no output\n" +
			"past it is committed) and copies it into a savepoint. Resume with weir submit JOB.yaml --from LOCATION:\n" +
			"the new job commits what the savepoint had pending and replays the rest.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, ctx, done, err := cc.savepointConnect(cmd)
			if err != nil {
				return err
			}
			defer done()
			resp, err := client.StopJob(ctx, &weirpb.StopJobRequest{JobId: args[0], SavepointDir: dir})
			if err != nil {
				return cc.callErr("stop job "+args[0], err)
			}
			return printSavepoint(cmd, cc, "job "+args[0]+" stopped with a savepoint", resp)
		},
	}
	cmd.Flags().StringVar(&dir, "savepoint-dir", "", "directory to put the savepoint in: file:///path or s3://bucket/prefix (default: the jobmanager's savepointDir)")
	return cmd
}

func newSavepointsCommand(cc *clientConfig) *cobra.Command {
	cmd := &cobra.Command{Use: "savepoints", Short: "Manage savepoints"}
	cmd.AddCommand(&cobra.Command{
		Use:   "dispose LOCATION",
		Short: "Delete a savepoint's files (only a directory holding a savepoint's _metadata)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, ctx, done, err := cc.savepointConnect(cmd)
			if err != nil {
				return err
			}
			defer done()
			resp, err := client.DisposeSavepoint(ctx, &weirpb.DisposeSavepointRequest{Location: args[0]})
			if err != nil {
				return cc.callErr("dispose savepoint "+args[0], err)
			}
			if cc.output == "json" {
				return printJSON(cmd.OutOrStdout(), resp)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "savepoint %s disposed (%d objects deleted)\n", args[0], resp.GetDeletedObjects())
			return nil
		},
	})
	return cmd
}
