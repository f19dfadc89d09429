package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/jobspec"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/stream"
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

// runSavepoint makes a savepoint call (what names it in errors) and prints
// where the savepoint went (done says what happened).
func runSavepoint(cmd *cobra.Command, cc *clientConfig, what, done string,
	call func(context.Context, weirpb.JobServiceClient) (*weirpb.SavepointResponse, error)) error {
	client, ctx, release, err := cc.savepointConnect(cmd)
	if err != nil {
		return err
	}
	defer release()
	resp, err := call(ctx, client)
	if err != nil {
		return cc.callErr(what, err)
	}
	return printSavepoint(cmd, cc, done, resp)
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
			return runSavepoint(cmd, cc, "savepoint of job "+args[0], "savepoint of job "+args[0],
				func(ctx context.Context, client weirpb.JobServiceClient) (*weirpb.SavepointResponse, error) {
					return client.TriggerSavepoint(ctx, &weirpb.TriggerSavepointRequest{JobId: args[0], Dir: dir})
				})
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
			return runSavepoint(cmd, cc, "stop job "+args[0], "job "+args[0]+" stopped with a savepoint",
				func(ctx context.Context, client weirpb.JobServiceClient) (*weirpb.SavepointResponse, error) {
					return client.StopJob(ctx, &weirpb.StopJobRequest{JobId: args[0], SavepointDir: dir})
				})
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

func newPlanCommand(cc *clientConfig, reg *stream.Registry) *cobra.Command {
	var from string
	var allowNonRestored bool
	cmd := &cobra.Command{
		Use:   "plan FILE --from SAVEPOINT|JOB_ID@N",
		Short: "Show what starting a job from a savepoint or checkpoint would restore, and whether it would be refused",
		Long: "plan checks the job spec against the savepoint or retained checkpoint as weir submit --from does, without\n" +
			"starting anything, and lists per operator uid: restored, new (no state) or dropped (state the job no\n" +
			"longer has), the old and new parallelism, and the state bytes its subtasks download. It exits non-zero\n" +
			"when the submission would be refused, and says why.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if from == "" {
				return fmt.Errorf("plan %s: --from is required: a savepoint location or JOB_ID@N", args[0])
			}
			g, err := jobspec.Load(args[0], reg)
			if err != nil {
				return err
			}
			client, ctx, done, err := cc.savepointConnect(cmd)
			if err != nil {
				return err
			}
			defer done()
			resp, err := client.PlanJob(ctx, &weirpb.SubmitJobRequest{Graph: weirpb.FromGraph(g), RestoreFrom: from, AllowNonRestoredState: allowNonRestored})
			if err != nil {
				return cc.callErr("plan "+args[0], err)
			}
			if cc.output == "json" {
				if err := printJSON(cmd.OutOrStdout(), resp); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "from %s: checkpoint %d of job %s, maxParallelism %d\n",
					resp.GetFrom(), resp.GetCheckpointId(), resp.GetSourceJobId(), resp.GetMaxParallelism())
				var rows [][]string
				for _, o := range resp.GetOperators() {
					par := fmt.Sprintf("%d -> %d", o.GetOldParallelism(), o.GetNewParallelism())
					switch o.GetStatus() {
					case "new":
						par = fmt.Sprintf("- -> %d", o.GetNewParallelism())
					case "dropped":
						par = fmt.Sprintf("%d -> -", o.GetOldParallelism())
					}
					kind := "canonical"
					if o.GetIncremental() {
						kind = "incremental (pebble only)"
					}
					if o.GetStatus() == "new" {
						kind = "-"
					}
					rows = append(rows, []string{o.GetUid(), o.GetStatus(), par, checkpoint.FormatBytes(o.GetStateBytes()), fmt.Sprint(o.GetObjects()), kind})
				}
				if err := table(cmd.OutOrStdout(), "OPERATOR\tSTATE\tPARALLELISM\tBYTES\tOBJECTS\tFORMAT", rows); err != nil {
					return err
				}
			}
			if r := resp.GetRefusal(); r != "" {
				return fmt.Errorf("plan %s: weir submit --from would refuse it: %s", args[0], r)
			}
			if cc.output != "json" {
				fmt.Fprintln(cmd.OutOrStdout(), "weir submit --from would accept it")
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "the savepoint location, or the retained checkpoint (JOB_ID@N or <storage>/<job id>/chk-N)")
	cmd.Flags().BoolVar(&allowNonRestored, "allow-non-restored-state", false, "as for weir submit: dropping the state of operators the job no longer has is allowed")
	return cmd
}
