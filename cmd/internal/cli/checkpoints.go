package cli

import (
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/proto/weirpb"
)

func newCheckpointsCommand(cc *clientConfig) *cobra.Command {
	cmd := &cobra.Command{Use: "checkpoints", Short: "List, trigger and inspect a job's checkpoints"}
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
					fmtTime(c.GetTriggerTimeMs()), fmt.Sprintf("%dms", c.GetDurationMs()), humanBytes(c.GetSizeBytes()),
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
	return cmd
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
