package taskmanager

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/weirstream/weir/jobmanager/jobmanagertest"
	"github.com/weirstream/weir/proto/weirpb"
)

// taskSeries scrapes the taskmanager's registry for the per-subtask
// counters and renders their series sorted.
func taskSeriesOf(t *testing.T, h *harness) []string {
	t.Helper()
	mfs, err := h.tm.metrics.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, mf := range mfs {
		name := mf.GetName()
		timing := name == "weir_task_backpressured_seconds_total" || name == "weir_task_busy_seconds_total" || name == "weir_task_idle_seconds_total"
		if name != "weir_task_records_in_total" && name != "weir_task_records_out_total" && !timing {
			continue
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			v := m.GetCounter().GetValue()
			if timing {
				v = 0 // timing; only its presence is checked
			}
			out = append(out, fmt.Sprintf("%s{%s} %g", name, strings.Join(labels, ","), v))
		}
	}
	sort.Strings(out)
	return out
}

// TestTaskSeriesMetrics: a subtask's record counters are labelled with
// its task name and index, count what the sink received, stay with their
// final values once the task ended and was forgotten while the job is
// active, and end with the job.
func TestTaskSeriesMetrics(t *testing.T) {
	jm := jobmanagertest.New(t)
	jm.SetActive("j1")
	jm.Serve(t)
	st := newTestState()
	h := startTaskManager(t, jm.Addr(), newTestRegistry(st), nil)
	h.tm.mu.Lock()
	h.tm.endedSeriesGrace = 0 // series end as soon as their job does
	h.tm.mu.Unlock()

	d := chainedTask("j1", 1, genJSON(700, false), "count", "")
	d.Id.Subtask, d.Parallelism = 1, 2
	d.TaskName = "src -> sink (2/2)"
	h.mustSubmit(t, d)
	jm.WaitReported(t, d.GetId(), weirpb.TaskState_TASK_STATE_FINISHED)
	waitFor(t, "the ended task to be forgotten", func() bool {
		h.tm.mu.Lock()
		defer h.tm.mu.Unlock()
		return len(h.tm.mu.tasks) == 0
	})
	rows := st.sinkRows.Load()
	if rows == 0 {
		t.Fatal("the sink received no rows")
	}
	labels := `{job="j1",subtask="1",task="src -> sink"}`
	want := []string{
		"weir_task_backpressured_seconds_total" + labels + " 0",
		"weir_task_busy_seconds_total" + labels + " 0",
		"weir_task_idle_seconds_total" + labels + " 0",
		fmt.Sprintf("weir_task_records_in_total%s %d", labels, rows), // the source's rows
		"weir_task_records_out_total" + labels + " 0",                // a sink emits nothing
	}
	if got := taskSeriesOf(t, h); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("series of the ended task:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	jm.SetActive()
	waitFor(t, "the series to end with the job", func() bool { return len(taskSeriesOf(t, h)) == 0 })
}

func TestTaskLabels(t *testing.T) {
	for _, tc := range []struct {
		name             string
		subtask, par     int
		wantTask, wantID string
	}{
		{"window -> sink (2/4)", 1, 4, "window -> sink", "1"},
		{"src (1/1)", 0, 1, "src", "0"},
		{"odd name (3/4)", 0, 4, "odd name (3/4)", "0"}, // suffix of another subtask: kept
		{"plain", 2, 3, "plain", "2"},
	} {
		task, id := taskLabels(tc.name, tc.subtask, tc.par)
		if task != tc.wantTask || id != tc.wantID {
			t.Errorf("taskLabels(%q, %d, %d) = %q, %q; want %q, %q", tc.name, tc.subtask, tc.par, task, id, tc.wantTask, tc.wantID)
		}
	}
}
