package coordinator

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected output of the testdata scenarios")

// The scenario language. A file is a sequence of blocks:
//
//	# comment
//	command arg key=value ...
//	----
//	expected output (one or more lines, ended by a blank line or EOF)
//
// After every command the driver prints the command's own result (if any)
// and then the actions returned by Ready, one per line; "ok" when there is
// nothing. Commands:
//
//	new [interval=D] [timeout=D] [min-pause=D] [max-concurrent=N]
//	    [tolerable=N] [retained=N] [first=N] tasks=V/S,... [sources=V/S,...]
//	tick [D]              advance the clock by D (default 0), then Tick
//	advance D             advance the clock only
//	trigger               TriggerNow
//	ack V/S ID [bytes=N] [payload=X] [sync=D] [async=D] [align=D]
//	decline V/S ID reason...
//	finished V/S
//	manifest-ok ID
//	manifest-fail ID message...
//	stop CAUSE reason...  (CAUSE: failover or job-ended)
//	reset [tasks=...] [sources=...]   (defaults: those of the last new/reset)
//	adopt ID              AdoptCompleted with payload "adopted"
//	history | counts | aborts | latest | state
//
// Every abort prints its cause (cause=...), so the scenarios pin the cause
// of every abort path; "aborts" prints AbortCounts.
//
// Durations use time.ParseDuration; the clock starts at t0.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

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
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) { runScenarioFile(t, f) })
	}
}

type block struct {
	line     int
	cmd      string
	expected string
}

func parseScenario(t *testing.T, path string) (blocks []block, prefix []string) {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	var comments []string
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if strings.TrimSpace(l) == "" || strings.HasPrefix(l, "#") {
			comments = append(comments, l)
			continue
		}
		b := block{line: i + 1, cmd: l}
		if i+1 >= len(lines) || lines[i+1] != "----" {
			t.Fatalf("%s:%d: command %q is not followed by ----", path, i+1, l)
		}
		i += 2
		var out []string
		for ; i < len(lines) && lines[i] != ""; i++ {
			out = append(out, lines[i])
		}
		b.expected = strings.Join(out, "\n")
		blocks = append(blocks, b)
		prefix = append(prefix, strings.Join(comments, "\n"))
		comments = nil
	}
	return blocks, prefix
}

func runScenarioFile(t *testing.T, path string) {
	blocks, prefix := parseScenario(t, path)
	s := &scenario{now: t0}
	var rewritten strings.Builder
	for i, b := range blocks {
		got := s.run(t, path, b)
		if *rewrite {
			if prefix[i] != "" {
				rewritten.WriteString(prefix[i] + "\n")
			}
			fmt.Fprintf(&rewritten, "%s\n----\n%s\n\n", b.cmd, got)
			continue
		}
		if got != b.expected {
			t.Errorf("%s:%d: %s\n got:\n%s\nwant:\n%s", path, b.line, b.cmd, indent(got), indent(b.expected))
		}
	}
	if *rewrite {
		out := strings.TrimRight(rewritten.String(), "\n") + "\n"
		if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func indent(s string) string { return "    " + strings.ReplaceAll(s, "\n", "\n    ") }

func (s *scenario) run(t *testing.T, path string, b block) string {
	fields := strings.Fields(b.cmd)
	cmd, args := fields[0], fields[1:]
	fail := func(format string, a ...any) string {
		t.Fatalf("%s:%d: %s: %s", path, b.line, b.cmd, fmt.Sprintf(format, a...))
		return ""
	}
	if cmd != "new" && s.c == nil {
		return fail("no coordinator; start with new")
	}
	var out []string
	switch cmd {
	case "new":
		cfg := Config{}
		first := int64(1)
		for _, a := range args {
			k, v, ok := strings.Cut(a, "=")
			if !ok {
				return fail("argument %q is not key=value", a)
			}
			var err error
			switch k {
			case "interval":
				cfg.Interval, err = time.ParseDuration(v)
			case "timeout":
				cfg.Timeout, err = time.ParseDuration(v)
			case "min-pause":
				cfg.MinPause, err = time.ParseDuration(v)
			case "max-concurrent":
				cfg.MaxConcurrent, err = strconv.Atoi(v)
			case "tolerable":
				cfg.TolerableFailures, err = strconv.Atoi(v)
			case "retained":
				cfg.Retained, err = strconv.Atoi(v)
			case "first":
				first, err = strconv.ParseInt(v, 10, 64)
			case "tasks":
				s.tasks, err = parseTasks(v)
			case "sources":
				s.sources, err = parseTasks(v)
			default:
				err = fmt.Errorf("unknown key")
			}
			if err != nil {
				return fail("%s: %v", a, err)
			}
		}
		s.c = New(cfg, s.tasks, s.sources, first, s.now)
	case "tick":
		if len(args) > 0 {
			d, err := time.ParseDuration(args[0])
			if err != nil {
				return fail("%v", err)
			}
			s.now = s.now.Add(d)
		}
		s.c.Tick(s.now)
	case "advance":
		if len(args) != 1 {
			return fail("want advance DURATION")
		}
		d, err := time.ParseDuration(args[0])
		if err != nil {
			return fail("%v", err)
		}
		s.now = s.now.Add(d)
	case "trigger":
		id, err := s.c.TriggerNow(s.now)
		if err != nil {
			out = append(out, "error: "+err.Error())
		} else {
			out = append(out, fmt.Sprintf("triggered %d", id))
		}
	case "ack":
		if len(args) < 2 {
			return fail("want ack V/S ID")
		}
		task, id := s.taskAndID(fail, args[0], args[1])
		var st AckStats
		payload := any(fmt.Sprintf("h%d@%v", id, task))
		for _, a := range args[2:] {
			k, v, _ := strings.Cut(a, "=")
			var err error
			switch k {
			case "bytes":
				st.Bytes, err = strconv.ParseInt(v, 10, 64)
			case "payload":
				payload = v
			case "sync":
				st.SyncDuration, err = time.ParseDuration(v)
			case "async":
				st.AsyncDuration, err = time.ParseDuration(v)
			case "align":
				st.AlignmentDuration, err = time.ParseDuration(v)
			default:
				err = fmt.Errorf("unknown key")
			}
			if err != nil {
				return fail("%s: %v", a, err)
			}
		}
		s.c.Ack(s.now, task, id, payload, st)
	case "decline":
		if len(args) < 2 {
			return fail("want decline V/S ID reason")
		}
		task, id := s.taskAndID(fail, args[0], args[1])
		s.c.Decline(s.now, task, id, strings.Join(args[2:], " "))
	case "finished":
		ts, err := parseTasks(strings.Join(args, ","))
		if err != nil || len(ts) != 1 {
			return fail("want finished V/S")
		}
		s.c.TaskFinished(s.now, ts[0])
	case "manifest-ok", "manifest-fail":
		if len(args) < 1 {
			return fail("want %s ID", cmd)
		}
		id, err := strconv.ParseInt(args[0], 10, 64)
		if err != nil {
			return fail("%v", err)
		}
		var werr error
		if cmd == "manifest-fail" {
			werr = errors.New(strings.Join(args[1:], " "))
		}
		s.c.ManifestWritten(s.now, id, werr)
	case "stop":
		if len(args) < 1 {
			return fail("want stop CAUSE reason")
		}
		cause, ok := parseCause(args[0])
		if !ok {
			return fail("unknown cause %q", args[0])
		}
		s.c.Stop(s.now, cause, strings.Join(args[1:], " "))
	case "adopt":
		if len(args) != 1 {
			return fail("want adopt ID")
		}
		id, err := strconv.ParseInt(args[0], 10, 64)
		if err != nil {
			return fail("%v", err)
		}
		s.c.AdoptCompleted(id, map[TaskID]any{s.tasks[0]: "adopted"})
	case "reset":
		for _, a := range args {
			k, v, _ := strings.Cut(a, "=")
			var err error
			switch k {
			case "tasks":
				s.tasks, err = parseTasks(v)
			case "sources":
				s.sources, err = parseTasks(v)
			default:
				err = fmt.Errorf("unknown key")
			}
			if err != nil {
				return fail("%s: %v", a, err)
			}
		}
		s.c.Reset(s.now, s.tasks, s.sources)
	case "history":
		for _, h := range s.c.History() {
			out = append(out, s.formatStats(h))
		}
	case "counts":
		p, c, f := s.c.Counts()
		out = append(out, fmt.Sprintf("in-progress=%d completed=%d failed=%d ignored=%d consecutive-failures=%d",
			p, c, f, s.c.Ignored(), s.c.ConsecutiveFailures()))
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
		return fail("unknown command %q", cmd)
	}
	for _, a := range s.c.Ready() {
		out = append(out, a.String())
	}
	if len(out) == 0 {
		return "ok"
	}
	return strings.Join(out, "\n")
}

func (s *scenario) taskAndID(fail func(string, ...any) string, task, id string) (TaskID, int64) {
	ts, err := parseTasks(task)
	if err != nil || len(ts) != 1 {
		fail("bad task %q", task)
	}
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil {
		fail("bad checkpoint id %q", id)
	}
	return ts[0], n
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

func parseTasks(s string) ([]TaskID, error) {
	var out []TaskID
	for _, part := range strings.Split(s, ",") {
		if part == "" {
			continue
		}
		v, st, ok := strings.Cut(part, "/")
		if !ok {
			return nil, fmt.Errorf("task %q: want VERTEX/SUBTASK", part)
		}
		vi, err1 := strconv.Atoi(v)
		si, err2 := strconv.Atoi(st)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("task %q: want VERTEX/SUBTASK", part)
		}
		out = append(out, TaskID{vi, si})
	}
	return out, nil
}
