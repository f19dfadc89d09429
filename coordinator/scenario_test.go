package coordinator

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/weirstream/weir/internal/scenariotest"
)

// The scenario language: the files in testdata are read by
// internal/scenariotest (see its documentation for the file format); TEXT
// is free text without commas or unbalanced parentheses, written
// key=(some text). After every command the driver prints the command's own result (if any)
// and then the actions returned by Ready, one per line; "ok" when there is
// nothing. Commands:
//
//	new [interval=D] [timeout=D] [min-pause=D] [max-concurrent=N]
//	    [tolerable=N] [retained=N] [first=N] [tasks=(V/S,...)] [sources=(V/S,...)]
//	tick [D]              advance the clock by D (default 0), then Tick
//	advance D             advance the clock only
//	trigger               TriggerNow
//	ack V/S ID [bytes=N] [payload=X] [sync=D] [async=D] [align=D]
//	decline V/S ID [reason=(TEXT)]
//	finished V/S
//	manifest-ok ID
//	manifest-fail ID [reason=(TEXT)]     the write failed with error TEXT
//	stop CAUSE [reason=(TEXT)]           (CAUSE: failover or job-ended)
//	reset [tasks=(V/S,...)] [sources=(V/S,...)]
//	adopt ID              AdoptCompleted with payload "adopted"
//	adopt-older ID...     AdoptOlder
//	history | counts | aborts | latest | state
//
// Tasks and sources left out of new or reset are those of the last new or
// reset. Every abort prints its cause (cause=...), so the scenarios pin the
// cause of every abort path; "aborts" prints AbortCounts.
//
// Durations use time.ParseDuration; the clock starts at t0.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// commands gives the syntax of each command: its bare arguments, by name
// (optional ones in brackets), and its keys.
var commands = map[string]scenariotest.Syntax{
	"new": {Keys: []string{"interval", "timeout", "min-pause", "max-concurrent",
		"tolerable", "retained", "first", "tasks", "sources"}},
	"tick":          {Args: []string{"[D]"}},
	"advance":       {Args: []string{"D"}},
	"trigger":       {},
	"ack":           {Args: []string{"V/S", "ID"}, Keys: []string{"bytes", "payload", "sync", "async", "align"}},
	"decline":       {Args: []string{"V/S", "ID"}, Keys: []string{"reason"}},
	"finished":      {Args: []string{"V/S"}},
	"manifest-ok":   {Args: []string{"ID"}},
	"manifest-fail": {Args: []string{"ID"}, Keys: []string{"reason"}},
	"stop":          {Args: []string{"CAUSE"}, Keys: []string{"reason"}},
	"reset":         {Keys: []string{"tasks", "sources"}},
	"adopt":         {Args: []string{"ID"}},
	"adopt-older":   {Args: []string{"ID", "[ID]", "[ID]", "[ID]"}},
	"history":       {},
	"counts":        {},
	"aborts":        {},
	"latest":        {},
	"state":         {},
}

// A scenario is the state carried from one command of a file to the next.
type scenario struct {
	c       *Coordinator
	now     time.Time
	tasks   []TaskID
	sources []TaskID
}

func TestScenarios(t *testing.T) {
	scenariotest.RunFiles(t, func(*testing.T) *scenario { return &scenario{now: t0} }, (*scenario).run, commands)
}

// directive is one command of a scenario.
type directive struct{ *scenariotest.Directive }

// task parses s, the value of the argument name, as a task V/S.
func (c directive) task(name, s string) TaskID {
	c.T.Helper()
	task, err := parseTask(s)
	if err != nil {
		c.Fatalf("%s: %v", name, err)
	}
	return task
}

// tasks returns the list of tasks a; empty values are skipped, so that
// key=() is the empty list.
func (c directive) tasks(a datadriven.CmdArg) []TaskID {
	c.T.Helper()
	var out []TaskID
	for _, v := range a.Vals {
		if v != "" {
			out = append(out, c.task(a.Key, v))
		}
	}
	return out
}

// run runs the command c and returns its output.
func (s *scenario) run(d *scenariotest.Directive) string {
	c := directive{d}
	c.T.Helper()
	cmd, args := c.Cmd(), c.Args
	if cmd != "new" && s.c == nil {
		c.Fatalf("no coordinator; start with new")
	}
	var out []string
	switch cmd {
	case "new":
		cfg := Config{}
		first := int64(1)
		for _, a := range c.Named {
			switch a.Key {
			case "interval":
				cfg.Interval = c.Duration(a.Key, c.Value(a))
			case "timeout":
				cfg.Timeout = c.Duration(a.Key, c.Value(a))
			case "min-pause":
				cfg.MinPause = c.Duration(a.Key, c.Value(a))
			case "max-concurrent":
				cfg.MaxConcurrent = int(c.Number(a.Key, c.Value(a)))
			case "tolerable":
				cfg.TolerableFailures = int(c.Number(a.Key, c.Value(a)))
			case "retained":
				cfg.Retained = int(c.Number(a.Key, c.Value(a)))
			case "first":
				first = c.Number(a.Key, c.Value(a))
			case "tasks":
				s.tasks = c.tasks(a)
			case "sources":
				s.sources = c.tasks(a)
			}
		}
		s.c = New(cfg, s.tasks, s.sources, first, s.now)
	case "tick":
		if len(args) > 0 {
			s.now = s.now.Add(c.Duration("D", args[0]))
		}
		s.c.Tick(s.now)
	case "advance":
		s.now = s.now.Add(c.Duration("D", args[0]))
	case "trigger":
		id, err := s.c.TriggerNow(s.now)
		if err != nil {
			out = append(out, "error: "+err.Error())
		} else {
			out = append(out, fmt.Sprintf("triggered %d", id))
		}
	case "ack":
		task, id := c.task("V/S", args[0]), c.Number("ID", args[1])
		var st AckStats
		payload := any(fmt.Sprintf("h%d@%v", id, task))
		for _, a := range c.Named {
			switch a.Key {
			case "bytes":
				st.Bytes = c.Number(a.Key, c.Value(a))
			case "payload":
				payload = c.Value(a)
			case "sync":
				st.SyncDuration = c.Duration(a.Key, c.Value(a))
			case "async":
				st.AsyncDuration = c.Duration(a.Key, c.Value(a))
			case "align":
				st.AlignmentDuration = c.Duration(a.Key, c.Value(a))
			}
		}
		s.c.Ack(s.now, task, id, payload, st)
	case "decline":
		task, id := c.task("V/S", args[0]), c.Number("ID", args[1])
		s.c.Decline(s.now, task, id, c.Text("reason"))
	case "finished":
		s.c.TaskFinished(s.now, c.task("V/S", args[0]))
	case "manifest-ok":
		s.c.ManifestWritten(s.now, c.Number("ID", args[0]), nil)
	case "manifest-fail":
		s.c.ManifestWritten(s.now, c.Number("ID", args[0]), errors.New(c.Text("reason")))
	case "stop":
		cause, ok := parseCause(args[0])
		if !ok {
			c.Fatalf("unknown cause %q", args[0])
		}
		s.c.Stop(s.now, cause, c.Text("reason"))
	case "adopt":
		id := c.Number("ID", args[0])
		if len(s.tasks) == 0 {
			c.Fatalf("adopt needs a task")
		}
		s.c.AdoptCompleted(id, map[TaskID]any{s.tasks[0]: "adopted"})
	case "adopt-older":
		var ids []int64
		for _, a := range args {
			ids = append(ids, c.Number("ID", a))
		}
		s.c.AdoptOlder(ids)
	case "reset":
		for _, a := range c.Named {
			switch a.Key {
			case "tasks":
				s.tasks = c.tasks(a)
			case "sources":
				s.sources = c.tasks(a)
			}
		}
		s.c.Reset(s.now, s.tasks, s.sources)
	case "history":
		for _, h := range s.c.History() {
			out = append(out, s.formatStats(h))
		}
	case "counts":
		p, completed, f := s.c.Counts()
		out = append(out, fmt.Sprintf("in-progress=%d completed=%d failed=%d ignored=%d consecutive-failures=%d",
			p, completed, f, s.c.Ignored(), s.c.ConsecutiveFailures()))
	case "aborts":
		counts := s.c.AbortCounts()
		var parts []string
		for _, cause := range AbortCauses() {
			if n := counts[cause]; n > 0 {
				parts = append(parts, fmt.Sprintf("%v=%d", cause, n))
			}
		}
		out = append(out, "aborts: "+strings.Join(parts, " "))
	case "latest":
		id, payloads, ok := s.c.Latest()
		if !ok {
			out = append(out, "none")
		} else {
			var acks []Ack
			for _, t := range slices.SortedFunc(maps.Keys(payloads), compareTasks) {
				acks = append(acks, Ack{Task: t, Payload: payloads[t]})
			}
			out = append(out, WriteManifestAction{ID: id, Acks: acks}.String()[len("write-manifest "):])
		}
	case "state":
		writing := "none"
		if id, ok := s.c.Writing(); ok {
			writing = strconv.FormatInt(id, 10)
		}
		out = append(out, fmt.Sprintf("pending=%v writing=%s retained=%v stopped=%v", s.c.Pending(), writing, s.c.Retained(), s.c.Stopped()))
	default:
		c.Fatalf("unknown command %q", cmd)
	}
	for _, a := range s.c.Ready() {
		out = append(out, a.String())
	}
	if len(out) == 0 {
		return "ok"
	}
	return strings.Join(out, "\n")
}

func (s *scenario) rel(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Sub(t0).String()
}

func (s *scenario) formatStats(h Stats) string {
	line := fmt.Sprintf("%d %v trigger=%s end=%s acked=%d/%d bytes=%d", h.ID, h.Status, s.rel(h.TriggerTime), s.rel(h.EndTime), h.Acked, h.Total, h.Bytes)
	if h.Manual {
		line += " manual"
	}
	if h.Acked > 0 {
		line += fmt.Sprintf(" slowest=%v@%v", h.SlowestTask, h.SlowestAck)
	}
	if h.MaxSync > 0 || h.MaxAsync > 0 || h.MaxAlignment > 0 {
		line += fmt.Sprintf(" sync=%v async=%v align=%v", h.MaxSync, h.MaxAsync, h.MaxAlignment)
	}
	if h.Cause != 0 {
		line += fmt.Sprintf(" cause=%v", h.Cause)
	}
	if h.Failure != "" {
		line += fmt.Sprintf(" failure=%q", h.Failure)
	}
	return line
}

func parseCause(name string) (AbortCause, bool) {
	for _, c := range AbortCauses() {
		if c.String() == name {
			return c, true
		}
	}
	return 0, false
}

func parseTask(s string) (TaskID, error) {
	v, st, ok := strings.Cut(s, "/")
	if !ok {
		return TaskID{}, fmt.Errorf("task %q: want VERTEX/SUBTASK", s)
	}
	vi, err1 := strconv.Atoi(v)
	si, err2 := strconv.Atoi(st)
	if err1 != nil || err2 != nil {
		return TaskID{}, fmt.Errorf("task %q: want VERTEX/SUBTASK", s)
	}
	return TaskID{vi, si}, nil
}
