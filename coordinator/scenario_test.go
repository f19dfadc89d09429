package coordinator

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// The scenario language. Each file in testdata is a sequence of blocks:
//
//	# comment
//	command arg key=value key=(a,b) ...
//	----
//	expected output (one or more lines, ended by a blank line or EOF)
//
// Expected output that contains blank lines goes between a double ----
// separator (----, ----, output, ----, ----). Bare arguments come first, in
// the order below; key=value arguments follow in any order. A list is
// written key=(a,b,...); a list of one needs no parentheses. TEXT is free
// text without commas or unbalanced parentheses, written key=(some text).
//
// After every command the driver prints the command's own result (if any)
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
//	history | counts | aborts | latest | state
//
// Tasks and sources left out of new or reset are those of the last new or
// reset. Every abort prints its cause (cause=...), so the scenarios pin the
// cause of every abort path; "aborts" prints AbortCounts.
//
// Durations use time.ParseDuration; the clock starts at t0. Run the tests
// with -rewrite to replace the expected output with the actual one.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// commands gives the syntax of each command: its bare arguments, by name
// (optional ones in brackets), and its keys.
var commands = map[string]struct{ args, keys []string }{
	"new": {nil, []string{"interval", "timeout", "min-pause", "max-concurrent",
		"tolerable", "retained", "first", "tasks", "sources"}},
	"tick":          {[]string{"[D]"}, nil},
	"advance":       {[]string{"D"}, nil},
	"trigger":       {},
	"ack":           {[]string{"V/S", "ID"}, []string{"bytes", "payload", "sync", "async", "align"}},
	"decline":       {[]string{"V/S", "ID"}, []string{"reason"}},
	"finished":      {[]string{"V/S"}, nil},
	"manifest-ok":   {[]string{"ID"}, nil},
	"manifest-fail": {[]string{"ID"}, []string{"reason"}},
	"stop":          {[]string{"CAUSE"}, []string{"reason"}},
	"reset":         {nil, []string{"tasks", "sources"}},
	"adopt":         {[]string{"ID"}, nil},
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
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no scenarios in testdata")
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) {
			s := &scenario{now: t0}
			datadriven.RunTest(t, f, func(t *testing.T, d *datadriven.TestData) string {
				return s.run(newDirective(t, d))
			})
		})
	}
}

// A directive is one command of a scenario. Its methods parse the
// arguments and fail the test, naming the problem, on a bad one.
type directive struct {
	t     *testing.T
	d     *datadriven.TestData
	args  []string            // bare arguments
	named []datadriven.CmdArg // key=value arguments
}

// newDirective checks the command of d and its arguments against commands.
func newDirective(t *testing.T, d *datadriven.TestData) *directive {
	t.Helper()
	c := &directive{t: t, d: d}
	syntax, ok := commands[d.Cmd]
	if !ok {
		c.fatalf("unknown command %q", d.Cmd)
	}
	if d.Input != "" {
		c.fatalf("%s takes no input before ----", d.Cmd)
	}
	for _, a := range d.CmdArgs {
		switch {
		case len(a.Vals) == 0 && len(c.named) > 0:
			c.fatalf("bare argument %q after key=value arguments", a.Key)
		case len(a.Vals) == 0:
			c.args = append(c.args, a.Key)
		case !slices.Contains(syntax.keys, a.Key):
			c.fatalf("unknown argument %s", a)
		case slices.ContainsFunc(c.named, func(b datadriven.CmdArg) bool { return b.Key == a.Key }):
			c.fatalf("argument %s given twice", a.Key)
		default:
			c.named = append(c.named, a)
		}
	}
	required := 0
	for _, name := range syntax.args {
		if !strings.HasPrefix(name, "[") {
			required++
		}
	}
	if len(c.args) < required || len(c.args) > len(syntax.args) {
		usage := append([]string{d.Cmd}, syntax.args...)
		for _, k := range syntax.keys {
			usage = append(usage, "["+k+"=...]")
		}
		c.fatalf("want %s", strings.Join(usage, " "))
	}
	return c
}

// fatalf fails the test with a message that names the line of d.
func (c *directive) fatalf(format string, a ...any) {
	c.t.Helper()
	c.d.Fatalf(c.t, format, a...)
}

// value returns the value of a, which must have one.
func (c *directive) value(a datadriven.CmdArg) string {
	c.t.Helper()
	if len(a.Vals) != 1 {
		c.fatalf("%s: want one value, not %d (a comma separates values)", a.Key, len(a.Vals))
	}
	return a.Vals[0]
}

// duration parses s, the value of the argument name, as a duration.
func (c *directive) duration(name, s string) time.Duration {
	c.t.Helper()
	d, err := time.ParseDuration(s)
	if err != nil {
		c.fatalf("%s: %v", name, err)
	}
	return d
}

// number parses s, the value of the argument name, as an integer.
func (c *directive) number(name, s string) int64 {
	c.t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		c.fatalf("%s: %v", name, err)
	}
	return n
}

// task parses s, the value of the argument name, as a task V/S.
func (c *directive) task(name, s string) TaskID {
	c.t.Helper()
	task, err := parseTask(s)
	if err != nil {
		c.fatalf("%s: %v", name, err)
	}
	return task
}

// tasks returns the list of tasks a; empty values are skipped, so that
// key=() is the empty list.
func (c *directive) tasks(a datadriven.CmdArg) []TaskID {
	c.t.Helper()
	var out []TaskID
	for _, v := range a.Vals {
		if v != "" {
			out = append(out, c.task(a.Key, v))
		}
	}
	return out
}

// reason returns the value of the reason argument, or "" without one.
func (c *directive) reason() string {
	c.t.Helper()
	for _, a := range c.named {
		if a.Key == "reason" {
			return c.value(a)
		}
	}
	return ""
}

// run runs the command c and returns its output.
func (s *scenario) run(c *directive) string {
	c.t.Helper()
	cmd, args := c.d.Cmd, c.args
	if cmd != "new" && s.c == nil {
		c.fatalf("no coordinator; start with new")
	}
	var out []string
	switch cmd {
	case "new":
		cfg := Config{}
		first := int64(1)
		for _, a := range c.named {
			switch a.Key {
			case "interval":
				cfg.Interval = c.duration(a.Key, c.value(a))
			case "timeout":
				cfg.Timeout = c.duration(a.Key, c.value(a))
			case "min-pause":
				cfg.MinPause = c.duration(a.Key, c.value(a))
			case "max-concurrent":
				cfg.MaxConcurrent = int(c.number(a.Key, c.value(a)))
			case "tolerable":
				cfg.TolerableFailures = int(c.number(a.Key, c.value(a)))
			case "retained":
				cfg.Retained = int(c.number(a.Key, c.value(a)))
			case "first":
				first = c.number(a.Key, c.value(a))
			case "tasks":
				s.tasks = c.tasks(a)
			case "sources":
				s.sources = c.tasks(a)
			}
		}
		s.c = New(cfg, s.tasks, s.sources, first, s.now)
	case "tick":
		if len(args) > 0 {
			s.now = s.now.Add(c.duration("D", args[0]))
		}
		s.c.Tick(s.now)
	case "advance":
		s.now = s.now.Add(c.duration("D", args[0]))
	case "trigger":
		id, err := s.c.TriggerNow(s.now)
		if err != nil {
			out = append(out, "error: "+err.Error())
		} else {
			out = append(out, fmt.Sprintf("triggered %d", id))
		}
	case "ack":
		task, id := c.task("V/S", args[0]), c.number("ID", args[1])
		var st AckStats
		payload := any(fmt.Sprintf("h%d@%v", id, task))
		for _, a := range c.named {
			switch a.Key {
			case "bytes":
				st.Bytes = c.number(a.Key, c.value(a))
			case "payload":
				payload = c.value(a)
			case "sync":
				st.SyncDuration = c.duration(a.Key, c.value(a))
			case "async":
				st.AsyncDuration = c.duration(a.Key, c.value(a))
			case "align":
				st.AlignmentDuration = c.duration(a.Key, c.value(a))
			}
		}
		s.c.Ack(s.now, task, id, payload, st)
	case "decline":
		task, id := c.task("V/S", args[0]), c.number("ID", args[1])
		s.c.Decline(s.now, task, id, c.reason())
	case "finished":
		s.c.TaskFinished(s.now, c.task("V/S", args[0]))
	case "manifest-ok":
		s.c.ManifestWritten(s.now, c.number("ID", args[0]), nil)
	case "manifest-fail":
		s.c.ManifestWritten(s.now, c.number("ID", args[0]), errors.New(c.reason()))
	case "stop":
		cause, ok := parseCause(args[0])
		if !ok {
			c.fatalf("unknown cause %q", args[0])
		}
		s.c.Stop(s.now, cause, c.reason())
	case "adopt":
		id := c.number("ID", args[0])
		if len(s.tasks) == 0 {
			c.fatalf("adopt needs a task")
		}
		s.c.AdoptCompleted(id, map[TaskID]any{s.tasks[0]: "adopted"})
	case "reset":
		for _, a := range c.named {
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
			out = append(out, WriteManifestAction{ID: id, Acks: payloads}.String()[len("write-manifest "):])
		}
	case "state":
		writing := "none"
		if id, ok := s.c.Writing(); ok {
			writing = strconv.FormatInt(id, 10)
		}
		out = append(out, fmt.Sprintf("pending=%v writing=%s retained=%v stopped=%v", s.c.Pending(), writing, s.c.Retained(), s.c.Stopped()))
	default:
		c.fatalf("unknown command %q", cmd)
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
