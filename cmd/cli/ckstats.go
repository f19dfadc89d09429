package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/jobmanager/webui/view"
)

// ratesTimeout bounds how long weir jobs status waits for the rates.
const ratesTimeout = 3 * time.Second

// taskKey names a subtask: its task's head vertex and its index.
type taskKey struct{ vertex, subtask int }

// taskRates reads the job's tasks' rates from the REST API.
func (c *clientConfig) taskRates(ctx context.Context, jobID string) (map[taskKey]view.Task, error) {
	var d view.JobDetail
	if err := c.restGet(ctx, "rates of job "+jobID, "/v1/jobs/"+url.PathEscape(jobID), &d); err != nil {
		return nil, err
	}
	out := make(map[taskKey]view.Task, len(d.Tasks))
	for _, t := range d.Tasks {
		out[taskKey{t.VertexID, t.Subtask}] = t
	}
	return out, nil
}

// fmtRate shows records per second.
func fmtRate(v float64) string {
	switch {
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', 2, 64) + "M"
	case v >= 1e4:
		return strconv.FormatFloat(v/1e3, 'f', 1, 64) + "k"
	}
	return strconv.FormatFloat(v, 'f', 0, 64)
}

// parseCheckpointArgs reads JOB ID.
func parseCheckpointArgs(args []string) (string, int64, error) {
	id, err := strconv.ParseInt(args[1], 10, 64)
	if err != nil || id <= 0 {
		return "", 0, fmt.Errorf("checkpoint id %q: want a positive number (see `weir checkpoints list %s`)", args[1], args[0])
	}
	return args[0], id, nil
}

func newCheckpointStatsCommand(cc *clientConfig) *cobra.Command {
	return &cobra.Command{
		Use:   "stats JOB ID",
		Short: "Show a recent checkpoint's timings and sizes per task and subtask (from the REST API)",
		Long: "stats shows, for a checkpoint among the last 50 of the job, every subtask's start delay (trigger to\n" +
			"first barrier), alignment, synchronous snapshot, asynchronous upload, end-to-end time and state\n" +
			"size, and their spread per task. It reads the jobmanager's REST API (--rest).",
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			job, id, err := parseCheckpointArgs(args)
			if err != nil {
				return err
			}
			ctx, cancel := cc.ctx(cmd.Context())
			defer cancel()
			var st view.CheckpointStats
			if err := cc.restGet(ctx, fmt.Sprintf("checkpoint %d of job %s", id, job),
				fmt.Sprintf("/v1/jobs/%s/checkpoints/%d/stats", url.PathEscape(job), id), &st); err != nil {
				return err
			}
			if cc.output == "json" {
				return writeJSON(cmd.OutOrStdout(), st)
			}
			return printCheckpointStats(cmd.OutOrStdout(), &st)
		},
	}
}

func printCheckpointStats(w io.Writer, st *view.CheckpointStats) error {
	fmt.Fprintf(w, "checkpoint %d: %s, %dms end to end, %s state, %s in flight, %d/%d acknowledged\n", st.ID, strings.ToLower(st.Status),
		st.DurationMs, checkpoint.FormatBytes(st.SizeBytes), checkpoint.FormatBytes(st.ChannelStateBytes), st.Acknowledged, st.TotalTasks)
	if st.Failure != "" {
		fmt.Fprintf(w, "failure: %s\n", st.Failure)
	}
	if r := st.StorageRequests; r != (view.StorageRequests{}) {
		fmt.Fprintf(w, "storage requests: %d put, %d get, %d list, %d delete\n", r.Put, r.Get, r.List, r.Delete)
	}
	for _, t := range st.Tasks {
		fmt.Fprintf(w, "\n%s (task %d, %d of %d acknowledged)\n", t.Name, t.TaskID, t.Acknowledged, t.Parallelism)
		var rows [][]string
		for _, s := range t.Subtasks {
			if !s.Acknowledged {
				rows = append(rows, []string{strconv.Itoa(s.Subtask), "-", "-", "-", "-", "-", "-", "-", "-", "not acknowledged"})
				continue
			}
			r := s.StorageRequests
			rows = append(rows, []string{strconv.Itoa(s.Subtask), fmt.Sprintf("%dms", s.EndToEndMs), fmt.Sprintf("%dms", s.StartDelayMs),
				fmt.Sprintf("%dms", s.AlignmentMs), fmt.Sprintf("%dms", s.SyncMs), fmt.Sprintf("%dms", s.AsyncMs),
				checkpoint.FormatBytes(s.StateBytes), checkpoint.FormatBytes(s.ChannelStateBytes), strconv.FormatInt(r.Put+r.Get+r.List+r.Delete, 10), ""})
		}
		if err := table(w, "SUBTASK\tEND TO END\tSTART DELAY\tALIGNMENT\tSYNC\tASYNC\tSTATE\tIN FLIGHT\tREQUESTS\t", rows); err != nil {
			return err
		}
	}
	return nil
}

func newCheckpointExplainCommand(cc *clientConfig) *cobra.Command {
	return &cobra.Command{
		Use:   "explain JOB ID",
		Short: "Explain what made a recent checkpoint slow: its critical path and the likely cause (from the REST API)",
		Long: "explain follows the slowest subtask of a checkpoint among the last 50 of the job from the trigger to\n" +
			"its acknowledgement (start delay, alignment, sync, async upload, ack), names the phase that\n" +
			"dominated, the task whose barrier came latest and the input it came through, and a cause:\n" +
			"backpressure, barrier_delay, slow_upload, slow_snapshot or slow_ack. It reads the jobmanager's\n" +
			"REST API (--rest).",
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			job, id, err := parseCheckpointArgs(args)
			if err != nil {
				return err
			}
			ctx, cancel := cc.ctx(cmd.Context())
			defer cancel()
			var ex view.CheckpointExplain
			if err := cc.restGet(ctx, fmt.Sprintf("checkpoint %d of job %s", id, job),
				fmt.Sprintf("/v1/jobs/%s/checkpoints/%d/explain", url.PathEscape(job), id), &ex); err != nil {
				return err
			}
			if cc.output == "json" {
				return writeJSON(cmd.OutOrStdout(), ex)
			}
			printExplain(cmd.OutOrStdout(), &ex)
			return nil
		},
	}
}

func printExplain(w io.Writer, ex *view.CheckpointExplain) {
	fmt.Fprintf(w, "checkpoint %d: %s, %dms end to end; cause: %s\n", ex.ID, strings.ToLower(ex.Status), ex.EndToEndMs, ex.Cause)
	if len(ex.Path) > 0 {
		steps := []string{"trigger"}
		for _, p := range ex.Path {
			step := fmt.Sprintf("%s %dms", p.Name, p.Ms)
			if p.Name == ex.Dominant {
				step = "[" + step + "]"
			}
			steps = append(steps, step)
		}
		fmt.Fprintf(w, "critical path (%s, subtask %d): %s\n", ex.SlowestTask, ex.SlowestSubtask, strings.Join(steps, " → "))
	}
	if ex.SlowestInput != "" {
		fmt.Fprintf(w, "slowest input: %s (sender %.0f%% backpressured now)\n", ex.SlowestInput, 100*ex.UpstreamBackpressure)
	}
	for _, s := range ex.Explanation {
		fmt.Fprintf(w, "  %s\n", s)
	}
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
