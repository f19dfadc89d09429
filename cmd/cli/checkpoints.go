package cli

import (
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/proto/weirpb"
)

func newCheckpointsCommand(cc *clientConfig) *cobra.Command {
	cmd := &cobra.Command{Use: "checkpoints", Short: "List, trigger, inspect and explain a job's checkpoints"}
	cmd.AddCommand(newCheckpointStatsCommand(cc), newCheckpointExplainCommand(cc))
	cmd.AddCommand(&cobra.Command{
		Use:   "list JOB",
		Short: "List recent checkpoints: id, status, trigger time, duration, size, slowest task",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, ctx, done, err := cc.connect(cmd)
			if err != nil {
				return err
			}
			defer done()
			resp, err := client.ListCheckpoints(ctx, &weirpb.ListCheckpointsRequest{JobId: args[0]})
			if err != nil {
				return cc.callErr("checkpoints of job "+args[0], err)
			}
			if cc.output == "json" {
				return printJSON(cmd.OutOrStdout(), resp)
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "completed %d, failed %d, in progress %d", resp.GetCompleted(), resp.GetFailed(), resp.GetInProgress())
			if id := resp.GetRestoredFrom(); id > 0 {
				fmt.Fprintf(w, ", last restored from %d", id)
			}
			fmt.Fprintln(w)
			var rows [][]string
			for _, c := range resp.GetCheckpoints() {
				slowest := "-"
				if c.GetSlowestTask() != "" {
					slowest = fmt.Sprintf("%s (%dms)", c.GetSlowestTask(), c.GetSlowestTaskMs())
				}
				rows = append(rows, []string{strconv.FormatInt(c.GetCheckpointId(), 10), trimEnum(c.GetStatus().String(), "CHECKPOINT_STATUS_"),
					fmtTime(c.GetTriggerTimeMs()), fmt.Sprintf("%dms", c.GetDurationMs()), checkpoint.FormatBytes(c.GetSizeBytes()),
					fmt.Sprintf("%d/%d", c.GetAcknowledged(), c.GetTotalTasks()), slowest, c.GetFailure()})
			}
			return table(w, "ID\tSTATUS\tTRIGGERED\tDURATION\tSIZE\tACKED\tSLOWEST TASK\tFAILURE", rows)
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "trigger JOB",
		Short: "Trigger a checkpoint now",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, ctx, done, err := cc.connect(cmd)
			if err != nil {
				return err
			}
			defer done()
			resp, err := client.TriggerCheckpoint(ctx, &weirpb.TriggerJobCheckpointRequest{JobId: args[0]})
			if err != nil {
				return cc.callErr("trigger a checkpoint of job "+args[0], err)
			}
			if cc.output == "json" {
				return printJSON(cmd.OutOrStdout(), resp)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "triggered checkpoint %d of job %s\n", resp.GetCheckpointId(), args[0])
			return nil
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "inspect JOB ID",
		Short: "Show a completed checkpoint's manifest: every operator subtask's state objects",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := strconv.ParseInt(args[1], 10, 64)
			if err != nil || id <= 0 {
				return fmt.Errorf("checkpoint id %q: want a positive number (see `weir checkpoints list %s`)", args[1], args[0])
			}
			client, ctx, done, err := cc.connect(cmd)
			if err != nil {
				return err
			}
			defer done()
			resp, err := client.InspectCheckpoint(ctx, &weirpb.InspectCheckpointRequest{JobId: args[0], CheckpointId: id})
			if err != nil {
				return cc.callErr(fmt.Sprintf("checkpoint %d of job %s", id, args[0]), err)
			}
			if cc.output == "json" {
				return printJSON(cmd.OutOrStdout(), resp)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "manifest: %s\n%s", resp.GetStorageKey(), checkpoint.FormatManifest(resp.GetManifest()))
			return nil
		},
	})
	var dryRun bool
	var minAge time.Duration
	gc := &cobra.Command{
		Use:   "gc JOB",
		Short: "Delete checkpoint objects that no retained or in-progress checkpoint refers to",
		Long: "gc lists the objects in the job's checkpoint storage that belong to no retained or in-progress\n" +
			"checkpoint (leftovers of aborted checkpoints and crashes; with --min-age only those older than it), and\n" +
			"deletes them unless --dry-run is given.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if minAge < 0 {
				return fmt.Errorf("--min-age %v: must not be negative", minAge)
			}
			client, ctx, done, err := cc.connect(cmd)
			if err != nil {
				return err
			}
			defer done()
			ms := minAge.Milliseconds()
			if ms == 0 {
				ms = -1 // the request's 0 means the default
			}
			resp, err := client.CollectGarbage(ctx, &weirpb.CollectGarbageRequest{JobId: args[0], DryRun: dryRun, MinAgeMs: ms})
			if err != nil {
				return cc.callErr("checkpoint garbage of job "+args[0], err)
			}
			if cc.output == "json" {
				return printJSON(cmd.OutOrStdout(), resp)
			}
			var rows [][]string
			for _, o := range resp.GetObjects() {
				rows = append(rows, []string{o.GetKey(), checkpoint.FormatBytes(o.GetSize()), fmtTime(o.GetModTimeMs())})
			}
			if err := table(cmd.OutOrStdout(), "OBJECT\tSIZE\tMODIFIED", rows); err != nil {
				return err
			}
			verb := "deleted"
			if dryRun {
				verb = "would delete"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %d objects, %s\n", verb, len(resp.GetObjects()), checkpoint.FormatBytes(resp.GetBytes()))
			return nil
		},
	}
	gc.Flags().BoolVar(&dryRun, "dry-run", false, "only list what would be deleted")
	gc.Flags().DurationVar(&minAge, "min-age", 0, "collect only objects older than this (default: any age; what checkpoints in progress need is kept)")
	cmd.AddCommand(gc)
	return cmd
}
