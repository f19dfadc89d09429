package webui

import (
	"cmp"
	"fmt"
	"html/template"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/weirstream/weir/jobmanager/webui/view"
	"github.com/weirstream/weir/proto/weirpb"
)

// This file shapes the documents of package view for the templates: it
// arranges and sums them up, and never reads anything else.

// funcs are the templates' helpers.
var funcs = template.FuncMap{
	"time":       formatTime,
	"ms":         formatMillis,
	"bytes":      formatBytes,
	"age":        age,
	"stateClass": stateClass,
	"rate":       formatRate,
	"pct":        formatPercent,
	"phase":      phaseName,
}

// formatRate shows a per-second rate with three significant digits.
func formatRate(v float64) string {
	switch {
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', 2, 64) + " M/s"
	case v >= 1e4:
		return strconv.FormatFloat(v/1e3, 'f', 1, 64) + " k/s"
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64) + "/s"
	}
	return strconv.FormatFloat(v, 'f', 1, 64) + "/s"
}

// formatPercent shows a fraction (0 to 1) as a whole percentage.
func formatPercent(f float64) string {
	return strconv.FormatFloat(100*f, 'f', 0, 64) + "%"
}

// phaseName is a checkpoint phase (view.Phase) for people.
func phaseName(name string) string {
	switch name {
	case "start_delay":
		return "start delay"
	case "sync":
		return "synchronous snapshot"
	case "async":
		return "asynchronous upload"
	case "ack":
		return "acknowledgement"
	}
	return name
}

// formatTime shows Unix milliseconds as UTC; 0 is "–".
func formatTime(ms int64) string {
	if ms == 0 {
		return "–"
	}
	return time.UnixMilli(ms).UTC().Format("2006-01-02 15:04:05 UTC")
}

// formatMillis shows a duration in milliseconds.
func formatMillis(ms int64) string {
	d := time.Duration(ms) * time.Millisecond
	switch {
	case d < time.Second:
		return strconv.FormatInt(ms, 10) + " ms"
	case d < time.Minute:
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + " s"
	case d%time.Minute == 0:
		return strconv.FormatInt(int64(d/time.Minute), 10) + " min"
	}
	return d.Round(time.Second).String()
}

// formatBytes shows a size in binary units.
func formatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10) + " B"
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// age is how long before now the Unix milliseconds ms were.
func age(now time.Time, ms int64) string {
	if ms == 0 {
		return "never"
	}
	d := max(now.Sub(time.UnixMilli(ms)), 0)
	return formatMillis(d.Milliseconds()) + " ago"
}

// stateClass is the CSS class of a job, task or checkpoint state.
func stateClass(state string) string {
	switch state {
	case "RUNNING", "FINISHED", "COMPLETED":
		return "state ok"
	case "FAILED", "FAILING":
		return "state bad"
	case "CANCELED", "CANCELING":
		return "state off"
	}
	return "state busy" // CREATED, SCHEDULED, DEPLOYING, RESTARTING, IN_PROGRESS, ...
}

func parseID(s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("webui: %.20q is not a positive number", s)
	}
	return n, nil
}

// jobState is one job state and how many jobs are in it.
type jobState struct {
	State string
	Count int
}

type overviewPage struct {
	view.Overview
	SlotsUsed int
	// States are the job states that have jobs, in the order of
	// jobStateOrder.
	States []jobState
	Jobs   []view.Job
}

// jobStateOrder is the order states are listed in: active ones first.
var jobStateOrder = []string{"RUNNING", "RESTARTING", "FAILING", "CREATED", "SCHEDULED", "CANCELING", "FINISHED", "CANCELED", "FAILED"}

func overviewData(o view.Overview, jobs []view.Job) overviewPage {
	p := overviewPage{Overview: o, SlotsUsed: o.SlotsTotal - o.SlotsFree, Jobs: jobs}
	seen := make(map[string]bool)
	for _, s := range jobStateOrder {
		seen[s] = true
		p.States = append(p.States, jobState{s, o.Jobs[s]})
	}
	var rest []string
	for s := range o.Jobs {
		if !seen[s] {
			rest = append(rest, s)
		}
	}
	slices.Sort(rest)
	for _, s := range rest {
		p.States = append(p.States, jobState{s, o.Jobs[s]})
	}
	return p
}

// edge is an input of an operator, with the upstream operator's uid.
type edge struct {
	view.Input
	FromUID string
}

// vertex is an operator with its resolved inputs and its tasks' totals.
type vertex struct {
	view.Vertex
	In                    []edge
	Running               int
	RecordsIn, RecordsOut int64
	// InRate and OutRate sum the task's subtasks; Backpressure is its
	// most backpressured subtask's fraction.
	InRate, OutRate, Backpressure float64
}

type jobPage struct {
	view.JobDetail
	// Stages are the operators by their distance from the sources: the
	// sources first, each operator one stage after its furthest input.
	Stages [][]vertex
	Ops    []vertex
	// Ended: the job is FINISHED, CANCELED or FAILED; it takes no
	// actions.
	Ended bool
}

func jobData(d view.JobDetail) jobPage {
	uid := make(map[int]string, len(d.Vertices))
	for _, v := range d.Vertices {
		uid[v.ID] = v.UID
	}
	// A chain's tasks report for the chain: records in at its head, out
	// at its end, so the totals are per task (head vertex).
	type sums struct {
		running             int
		in, out             int64
		inRate, outRate, bp float64
	}
	byTask := make(map[int]*sums)
	for _, t := range d.Tasks {
		s := byTask[t.VertexID]
		if s == nil {
			s = &sums{}
			byTask[t.VertexID] = s
		}
		if t.State == "RUNNING" {
			s.running++
		}
		s.in += t.RecordsIn
		s.out += t.RecordsOut
		s.inRate += t.RecordsInPerSec
		s.outRate += t.RecordsOutPerSec
		s.bp = max(s.bp, t.Backpressure)
	}
	p := jobPage{JobDetail: d}
	switch d.Job.State {
	case "FINISHED", "CANCELED", "FAILED":
		p.Ended = true
	}
	depth := make(map[int]int, len(d.Vertices))
	// Vertices come in topological order (inputs before the operators that
	// read them); an input not seen yet counts as a source.
	for _, v := range d.Vertices {
		x := vertex{Vertex: v}
		for _, in := range v.Inputs {
			x.In = append(x.In, edge{Input: in, FromUID: cmp.Or(uid[in.From], "#"+strconv.Itoa(in.From))})
			depth[v.ID] = max(depth[v.ID], depth[in.From]+1)
		}
		if s := byTask[v.TaskID]; s != nil {
			x.Running, x.RecordsIn, x.RecordsOut = s.running, s.in, s.out
			x.InRate, x.OutRate, x.Backpressure = s.inRate, s.outRate, s.bp
		}
		p.Ops = append(p.Ops, x)
		for len(p.Stages) <= depth[v.ID] {
			p.Stages = append(p.Stages, nil)
		}
		p.Stages[depth[v.ID]] = append(p.Stages[depth[v.ID]], x)
	}
	return p
}

type checkpointsPage struct {
	Job         view.Job
	Checkpoints *view.Checkpoints // nil: the job takes none
}

// subtaskState is what one subtask of an operator wrote into a
// checkpoint.
type subtaskState struct {
	Subtask         int32
	Objects, Inline int
	Files           int
	Bytes           int64
	KeyGroups       string
	keyGroups       []string
	FinishedEarlier bool
}

type operatorState struct {
	UID, Type   string
	Parallelism int32
	Bytes       int64
	States      []*weirpb.StateInfo
	Subtasks    []subtaskState
	Finished    []int32
}

// checkpointStatsPage is a checkpoint's page: its statistics while the
// jobmanager's history holds it, its manifest while storage retains it,
// or both.
type checkpointStatsPage struct {
	Job view.Job
	ID  int64
	// Stats and Explain are nil when the checkpoint is no longer in the
	// history; Manifest when it has none (not completed, or discarded),
	// ManifestErr then says why.
	Stats       *view.CheckpointStats
	Explain     *view.CheckpointExplain
	Manifest    *checkpointPage
	ManifestErr string
}

type checkpointPage struct {
	Job        view.Job
	ID         int64
	StorageKey string
	Trigger    int64
	Complete   int64
	Mode       string
	MaxPar     int32
	Bytes      int64
	Operators  []operatorState
}

// manifestData sums a checkpoint's manifest up per operator and subtask.
// It shows sizes and key-group ranges, never the state itself (small
// snapshots are inline in the manifest).
func manifestData(j view.Job, resp *weirpb.InspectCheckpointResponse) checkpointPage {
	m := resp.GetManifest()
	p := checkpointPage{Job: j, ID: m.GetCheckpointId(), StorageKey: resp.GetStorageKey(), Trigger: m.GetTriggerTimeMs(),
		Complete: m.GetCompleteTimeMs(), Mode: strings.ToLower(strings.TrimPrefix(m.GetMode().String(), "CHECKPOINT_MODE_")),
		MaxPar: m.GetMaxParallelism()}
	for _, op := range m.GetOperators() {
		o := operatorState{UID: op.GetOperatorUid(), Type: op.GetOperatorType(), Parallelism: op.GetParallelism(), States: op.GetStates(),
			Finished: op.GetFinishedSubtasks()}
		bySub := make(map[int32]*subtaskState)
		for _, h := range op.GetHandles() {
			s := bySub[h.GetSubtask()]
			if s == nil {
				s = &subtaskState{Subtask: h.GetSubtask()}
				bySub[h.GetSubtask()] = s
			}
			if len(h.GetInlineData()) > 0 || h.GetKey() == "" {
				s.Inline++
			} else {
				s.Objects++
			}
			s.Files += len(h.GetFiles())
			s.Bytes += h.GetSize()
			for _, f := range h.GetFiles() {
				s.Bytes += f.GetSize()
			}
			if h.GetKeyGroupEnd() > h.GetKeyGroupStart() || h.GetKeyGroupStart() != 0 { // 0–0 is also "not keyed"
				if r := fmt.Sprintf("%d–%d", h.GetKeyGroupStart(), h.GetKeyGroupEnd()); !slices.Contains(s.keyGroups, r) {
					s.keyGroups = append(s.keyGroups, r)
				}
			}
		}
		for _, f := range op.GetFinishedSubtasks() {
			if s := bySub[f]; s != nil {
				s.FinishedEarlier = true
			}
		}
		for _, s := range bySub {
			s.KeyGroups = strings.Join(s.keyGroups, ", ")
			o.Subtasks = append(o.Subtasks, *s)
			o.Bytes += s.Bytes
		}
		slices.SortFunc(o.Subtasks, func(a, b subtaskState) int { return cmp.Compare(a.Subtask, b.Subtask) })
		p.Bytes += o.Bytes
		p.Operators = append(p.Operators, o)
	}
	return p
}

type exceptionsPage struct {
	Job view.Job
	// History is the job's exception history, newest first.
	History []view.Exception
	// Failed are the tasks that report an error, newest attempt first.
	Failed []view.Task
}

func exceptionsData(d view.JobDetail, history []view.Exception) exceptionsPage {
	p := exceptionsPage{Job: d.Job, History: history}
	for _, t := range d.Tasks {
		if t.Error != "" {
			p.Failed = append(p.Failed, t)
		}
	}
	slices.SortStableFunc(p.Failed, func(a, b view.Task) int { return cmp.Compare(b.Attempt, a.Attempt) })
	return p
}
