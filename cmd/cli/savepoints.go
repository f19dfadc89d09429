package cli

import (
	"cmp"
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
// where the savepoint went (done says what happened). On a terminal it
// names the savepoint with a request id (call's rid; "" otherwise) and
// shows its progress meanwhile.
func runSavepoint(cmd *cobra.Command, cc *clientConfig, what, done string,
	call func(ctx context.Context, client weirpb.JobServiceClient, rid string) (*weirpb.SavepointResponse, error)) error {
	client, ctx, release, err := cc.savepointConnect(cmd)
	if err != nil {
		return err
	}
	defer release()
	line := newProgressLine(cmd.OutOrStdout(), cc.output)
	var resp *weirpb.SavepointResponse
	if line.on() {
		rid := newRequestID()
		wctx, stop := context.WithCancel(ctx)
		watched := make(chan struct{})
		go func() {
			defer close(watched)
			watchSavepoint(wctx, cc, client, line, what, rid)
		}()
		resp, err = call(ctx, client, rid)
		stop()
		<-watched
		line.clear()
	} else {
		resp, err = call(ctx, client, "")
	}
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
			"weir submit JOB.yaml --from LOCATION; delete it with weir savepoints dispose LOCATION. On a terminal\n" +
			"it shows the checkpoint being taken, then the bytes copied, on a line it erases when done.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runSavepoint(cmd, cc, "savepoint of job "+args[0], "savepoint of job "+args[0],
				func(ctx context.Context, client weirpb.JobServiceClient, rid string) (*weirpb.SavepointResponse, error) {
					return client.TriggerSavepoint(ctx, &weirpb.TriggerSavepointRequest{JobId: args[0], Dir: dir, RequestId: rid})
				})
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "directory to put the savepoint in: file:///path or s3://bucket/prefix (default: the jobmanager's savepointDir)")
	return cmd
}

func newStopCommand(cc *clientConfig) *cobra.Command {
	var dir string
	var drain bool
	cmd := &cobra.Command{
		Use:   "stop JOB",
		Short: "Stop a job with a savepoint: it ends FINISHED at a checkpoint copied into a savepoint",
		Long: "stop takes a checkpoint of the job, stops the job at it (no later checkpoint completes, so no output\n" +
			"past it is committed) and copies it into a savepoint. Resume with weir submit JOB.yaml --from LOCATION:\n" +
			"the new job commits what the savepoint had pending and replays the rest. Event-time windows and timers\n" +
			"that have not fired stay in the savepoint's state, to fire in the resumed job.\n\n" +
			"With --drain the sources first end their input and emit the maximum watermark: every event-time\n" +
			"window and timer fires and its output is committed with the savepoint's checkpoint, and the tasks\n" +
			"finish. Use it to end a job for good; a job resumed from a drained savepoint would start with those\n" +
			"windows already emitted. Should the checkpoint fail after the sources drained, the job fails over\n" +
			"(its restart strategy decides) instead of running on.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			done := "job " + args[0] + " stopped with a savepoint"
			if drain {
				done = "job " + args[0] + " drained and stopped with a savepoint"
			}
			return runSavepoint(cmd, cc, "stop job "+args[0], done,
				func(ctx context.Context, client weirpb.JobServiceClient, rid string) (*weirpb.SavepointResponse, error) {
					return client.StopJob(ctx, &weirpb.StopJobRequest{JobId: args[0], SavepointDir: dir, Drain: drain, RequestId: rid})
				})
		},
	}
	cmd.Flags().StringVar(&dir, "savepoint-dir", "", "directory to put the savepoint in: file:///path or s3://bucket/prefix (default: the jobmanager's savepointDir)")
	cmd.Flags().BoolVar(&drain, "drain", false, "emit the maximum watermark from every source before the savepoint, so that all event-time windows and timers fire and their output is committed; for ending a job for good")
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
			"longer has), the old and new parallelism, and the state bytes its subtasks download; then per operator\n" +
			"its type (old -> new when it changed) and its states as name (kind): restored, new (starts empty),\n" +
			"dropped or incompatible (another kind or type). It exits non-zero when the submission would be\n" +
			"refused, and says why.",
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
				fmt.Fprintln(cmd.OutOrStdout())
				if err := table(cmd.OutOrStdout(), "OPERATOR\tTYPE\tSTATE\tSTATUS", planStateRows(resp.GetOperators())); err != nil {
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

// planStateRows are the rows of the state table of weir jobs plan: per
// operator, each state as name (kind[, type]) with what the restore does
// with it, old -> new where the two differ.
func planStateRows(ops []*weirpb.OperatorRestorePlan) [][]string {
	var rows [][]string
	for _, o := range ops {
		typ := cmp.Or(o.GetNewType(), o.GetOldType(), "-")
		if o.GetOldType() != "" && o.GetNewType() != "" && o.GetOldType() != o.GetNewType() {
			typ = o.GetOldType() + " -> " + o.GetNewType()
		}
		if len(o.GetStates()) == 0 {
			rows = append(rows, []string{o.GetUid(), typ, "-", cmp.Or(o.GetStatesUnknown(), "no state declared")})
			continue
		}
		for _, s := range o.GetStates() {
			kind := cmp.Or(s.GetOldKind(), s.GetNewKind())
			if s.GetOldKind() != "" && s.GetNewKind() != "" && s.GetOldKind() != s.GetNewKind() {
				kind = s.GetOldKind() + " -> " + s.GetNewKind()
			}
			switch ot, nt := s.GetOldType(), s.GetNewType(); {
			case ot != "" && nt != "" && ot != nt:
				kind += ", " + ot + " -> " + nt
			case cmp.Or(ot, nt) != "":
				kind += ", " + cmp.Or(ot, nt)
			}
			status := s.GetStatus()
			switch status {
			case "new":
				status = "new, starts empty"
			case "dropped":
				status = "would be dropped"
			}
			rows = append(rows, []string{o.GetUid(), typ, fmt.Sprintf("%s (%s)", s.GetName(), kind), status})
		}
	}
	return rows
}
