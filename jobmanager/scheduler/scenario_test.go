package scheduler

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/coordinator"
	"github.com/weirstream/weir/failover"
	"github.com/weirstream/weir/internal/scenariotest"
	"github.com/weirstream/weir/stream"
)

// The scenario language: the files in testdata are read by
// internal/scenariotest (see its documentation for the file format). TEXT
// is free text without commas or unbalanced parentheses, written
// key=(some text); V/S names an execution by the vertex id of its task's
// head and its subtask; JOB defaults to "j". Commands:
//
//	config [heartbeat=D] [cancel-timeout=D] [retention=D] [max-ended=N]
//	                        a new, empty scheduler (default 10s, 10s, 1h, 1000)
//	register TM [slots=N] [instance=X] [exchange=ADDR]
//	                        Register (instance TM-1, address TM:1, 2 slots)
//	heartbeat TM [instance=X]
//	submit JOB [pipeline=S/W] [fanout=P] [restart=(N,D)] [interval=D]
//	    [tolerable=N] [concurrent=N] [retained=N] [on-corruption=P]
//	    [slot-wait=D] [restore=ID] [first=ID]
//	                        Submit pipeline S/W (the default, 1/1: src ->
//	                        map, then window -> sink keyed) or fanout P;
//	                        restart: fixed delay, N attempts D apart (no
//	                        restart without it); interval turns on
//	                        checkpoints; on-corruption: fail or fallback;
//	                        restore: a checkpoint a new leader
//	                        recovered, the first one taking id first
//	cancel JOB
//	deployed [job=J] [tasks=(V/S,...)] [err=(TEXT)]
//	                        DeployDone for the deployments not yet reported
//	cancelled [gone] [job=J] [tasks=(V/S,...)] [err=(TEXT)]
//	                        CancelDone for the cancels not yet reported; gone:
//	                        the taskmanager did not know the execution
//	report STATE [job=J] [tasks=(V/S,...)] [attempt=N] [err=(TEXT)] [peer=ADDR] [corrupt=true]
//	                        Report from the taskmanager of each execution's
//	                        latest deployment (its attempt unless attempt=)
//	run [job=J]             deployed, then report RUNNING of those deployments
//	tick [D]                advance the clock by D (default 0), then Tick
//	advance D               advance the clock only
//	ack ID [job=J] [tasks=(V/S,...)] [attempt=N] [tm=TM]
//	                        Ack from each execution's latest deployment (all
//	                        by default; its attempt and taskmanager unless
//	                        attempt= or tm=, "none" for an empty id); the
//	                        payload is "V/S@attempt"
//	decline ID V/S [job=J] [reason=(TEXT)]
//	trigger-failed [job=J] [err=(TEXT)]   for the triggers not yet acknowledged
//	manifest-ok [job=J]     ManifestWritten(nil) for the write in flight
//	manifest-fail [job=J] [err=(TEXT)]
//	trigger JOB             TriggerNow
//	stop JOB [drain]        StopWithSavepoint (drain: with --drain)
//	input-ended V/S [job=J] SourceInputEnded
//	suspect TM [reason=(TEXT)] | suspect-peer ADDR [reason=(TEXT)]
//	probed TM [err=(TEXT)]
//	shutdown
//	job JOB | tms | checkpoints JOB      print a view
//
// After every command the driver prints the command's own result (if any),
// then the actions it returned, one per line, consecutive ones of a kind
// merged into one line (their executions listed), then the info and warn
// entries it logged, prefixed with "> "; "ok" when there is nothing. The
// clock starts at t0 and times print relative to it.
var commands = map[string]scenariotest.Syntax{
	"config":    {Keys: []string{"heartbeat", "cancel-timeout", "retention", "max-ended"}},
	"register":  {Args: []string{"TM"}, Keys: []string{"slots", "instance", "exchange"}},
	"heartbeat": {Args: []string{"TM"}, Keys: []string{"instance"}},
	"submit": {Args: []string{"JOB"}, Keys: []string{"pipeline", "fanout", "restart", "interval", "tolerable",
		"concurrent", "retained", "on-corruption", "slot-wait", "restore", "first"}},
	"cancel":         {Args: []string{"JOB"}},
	"deployed":       {Keys: []string{"job", "tasks", "err"}},
	"cancelled":      {Args: []string{"[gone]"}, Keys: []string{"job", "tasks", "err"}},
	"report":         {Args: []string{"STATE"}, Keys: []string{"job", "tasks", "attempt", "err", "peer", "corrupt"}},
	"run":            {Keys: []string{"job"}},
	"tick":           {Args: []string{"[D]"}},
	"advance":        {Args: []string{"D"}},
	"ack":            {Args: []string{"ID"}, Keys: []string{"job", "tasks", "attempt", "tm"}},
	"decline":        {Args: []string{"ID", "V/S"}, Keys: []string{"job", "reason"}},
	"trigger-failed": {Keys: []string{"job", "err"}},
	"manifest-ok":    {Keys: []string{"job"}},
	"manifest-fail":  {Keys: []string{"job", "err"}},
	"trigger":        {Args: []string{"JOB"}},
	"stop":           {Args: []string{"JOB", "[drain]"}},
	"input-ended":    {Args: []string{"V/S"}, Keys: []string{"job"}},
	"suspect":        {Args: []string{"TM"}, Keys: []string{"reason"}},
	"suspect-peer":   {Args: []string{"ADDR"}, Keys: []string{"reason"}},
	"probed":         {Args: []string{"TM"}, Keys: []string{"err"}},
	"shutdown":       {},
	"job":            {Args: []string{"JOB"}},
	"tms":            {},
	"checkpoints":    {Args: []string{"JOB"}},
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// execRef names an execution of a job.
type execRef struct {
	job string
	id  coordinator.TaskID
}

// A scenario is the state carried from one command of a file to the next:
// the scheduler, the clock, and what the scheduler asked for that the
// scenario has not yet answered.
type scenario struct {
	t         *testing.T
	c         *Scheduler
	now       time.Time
	instances map[string]string // taskmanager → its current instance
	// latest is each execution's latest deployment.
	latest   map[execRef]DeployAction
	deploys  []DeployAction // not yet answered with DeployDone
	cancels  []CancelAction // not yet answered with CancelDone
	triggers []TriggerAction
	writes   map[string]WriteManifestAction // per job, the write in flight
}

func TestScenarios(t *testing.T) {
	scenariotest.RunFiles(t, newScenario, (*scenario).run, commands)
}

func newScenario(t *testing.T) *scenario {
	return &scenario{t: t, c: New(Config{HeartbeatTimeout: 10 * time.Second, CancelTimeout: 10 * time.Second}), now: t0,
		instances: make(map[string]string), latest: make(map[execRef]DeployAction), writes: make(map[string]WriteManifestAction)}
}

// directive is one command of a scenario.
type directive struct{ *scenariotest.Directive }

// job is the job argument, "j" by default.
func (c directive) job() string {
	if j := c.Text("job"); j != "" {
		return j
	}
	return "j"
}

func (c directive) task(s string) coordinator.TaskID {
	c.T.Helper()
	v, sub, ok := strings.Cut(s, "/")
	if !ok {
		c.Fatalf("execution %q: want V/S", s)
	}
	return coordinator.TaskID{Vertex: int(c.Number("V", v)), Subtask: int(c.Number("S", sub))}
}

// tasks returns the executions listed by tasks=, or nil when not given.
func (c directive) tasks() []coordinator.TaskID {
	c.T.Helper()
	a, ok := c.Lookup("tasks")
	if !ok {
		return nil
	}
	var out []coordinator.TaskID
	for _, v := range a.Vals {
		out = append(out, c.task(v))
	}
	return out
}

// errArg is the error named by key, or nil without one.
func (c directive) errArg(key string) error {
	if a, ok := c.Lookup(key); ok {
		return errors.New(c.Value(a))
	}
	return nil
}

func (s *scenario) run(d *scenariotest.Directive) string {
	c := directive{d}
	c.T.Helper()
	var out []string
	var acts []Action
	args := c.Args
	switch c.Cmd() {
	case "config":
		cfg := Config{HeartbeatTimeout: 10 * time.Second, CancelTimeout: 10 * time.Second}
		if v := c.Text("heartbeat"); v != "" {
			cfg.HeartbeatTimeout = c.Duration("heartbeat", v)
		}
		if v := c.Text("cancel-timeout"); v != "" {
			cfg.CancelTimeout = c.Duration("cancel-timeout", v)
		}
		if v := c.Text("retention"); v != "" {
			cfg.JobRetention = c.Duration("retention", v)
		}
		if v := c.Text("max-ended"); v != "" {
			cfg.MaxEndedJobs = int(c.Number("max-ended", v))
		}
		*s = *newScenario(s.t)
		s.c = New(cfg)
	case "register":
		tm := args[0]
		r := Registration{ID: tm, Instance: tm + "-1", Addr: tm + ":1", Slots: 2, ExchangeAddr: c.Text("exchange")}
		if v := c.Text("instance"); v != "" {
			r.Instance = v
		}
		if v := c.Text("slots"); v != "" {
			r.Slots = int(c.Number("slots", v))
		}
		var err error
		acts, err = s.c.Register(r, s.now)
		if err != nil {
			out = append(out, "error: "+err.Error())
		} else {
			s.instances[tm] = r.Instance
		}
	case "heartbeat":
		tm := args[0]
		inst := cmp.Or(c.Text("instance"), s.instances[tm])
		var again bool
		again, acts = s.c.Heartbeat(tm, inst, nil, s.now)
		if again {
			out = append(out, "reregister")
		}
	case "submit":
		g, opts := s.jobSpec(c)
		var err error
		acts, err = s.c.Submit(args[0], g, opts, s.now)
		if err != nil {
			out = append(out, "error: "+err.Error())
		}
	case "cancel":
		var err error
		acts, err = s.c.Cancel(args[0], s.now)
		if err != nil {
			out = append(out, "error: "+err.Error())
		}
	case "deployed":
		acts = s.deployed(c.job(), c.tasks(), c.errArg("err"))
	case "cancelled":
		job, only, err := c.job(), c.tasks(), c.errArg("err")
		var keep []CancelAction
		for _, a := range s.cancels {
			if a.JobID != job || (only != nil && !slices.Contains(only, coordinator.TaskID{Vertex: a.Vertex, Subtask: a.Subtask})) {
				keep = append(keep, a)
				continue
			}
			acts = append(acts, s.c.CancelDone(a, err, len(args) > 0, s.now)...)
		}
		s.cancels = keep
	case "report":
		state, ok := parseTaskState(args[0])
		if !ok {
			c.Fatalf("unknown task state %q", args[0])
		}
		job := c.job()
		for _, d := range s.executions(job, c.tasks()) {
			r := TaskReport{JobID: job, Vertex: d.Task.Head, Subtask: d.Subtask, Attempt: d.Attempt, State: state,
				Err: c.Text("err"), BrokenPeer: c.Text("peer"), Corrupt: c.Text("corrupt") == "true"}
			if v := c.Text("attempt"); v != "" {
				r.Attempt = c.Number("attempt", v)
			}
			acts = append(acts, s.c.Report(d.TaskManager, r, s.now)...)
		}
	case "run":
		job := c.job()
		var started []DeployAction
		for _, a := range s.deploys {
			if a.JobID == job {
				started = append(started, a)
			}
		}
		acts = s.deployed(job, nil, nil)
		for _, d := range started {
			acts = append(acts, s.c.Report(d.TaskManager, TaskReport{JobID: job, Vertex: d.Task.Head, Subtask: d.Subtask,
				Attempt: d.Attempt, State: TaskRunning}, s.now)...)
		}
	case "tick":
		if len(args) > 0 {
			s.now = s.now.Add(c.Duration("D", args[0]))
		}
		acts = s.c.Tick(s.now)
	case "advance":
		s.now = s.now.Add(c.Duration("D", args[0]))
	case "ack":
		job, id := c.job(), c.Number("ID", args[0])
		for _, d := range s.executions(job, c.tasks()) {
			if v := c.Text("attempt"); v != "" {
				d.Attempt = c.Number("attempt", v)
			}
			if v := c.Text("tm"); v == "none" {
				d.TaskManager = ""
			} else if v != "" {
				d.TaskManager = v
			}
			payload := fmt.Sprintf("%d/%d@%d", d.Task.Head, d.Subtask, d.Attempt)
			acts = append(acts, s.c.Ack(d.TaskManager, job, d.Task.Head, d.Subtask, d.Attempt, id, payload, AckStats{}, s.now)...)
		}
	case "decline":
		job, id := c.job(), c.Number("ID", args[0])
		d := s.executions(job, []coordinator.TaskID{c.task(args[1])})[0]
		acts = s.c.Decline(d.TaskManager, job, d.Task.Head, d.Subtask, d.Attempt, id, c.Text("reason"), s.now)
	case "trigger-failed":
		job := c.job()
		var keep []TriggerAction
		for _, a := range s.triggers {
			if a.JobID != job {
				keep = append(keep, a)
				continue
			}
			acts = append(acts, s.c.TriggerFailed(a, cmp.Or(c.errArg("err"), errors.New("unreachable")), s.now)...)
		}
		s.triggers = keep
	case "manifest-ok", "manifest-fail":
		job := c.job()
		w, ok := s.writes[job]
		if !ok {
			out = append(out, "no manifest write of job "+job+" in flight")
			break
		}
		delete(s.writes, job)
		var err error
		if c.Cmd() == "manifest-fail" {
			err = cmp.Or(c.errArg("err"), errors.New("storage unavailable"))
		}
		acts = s.c.ManifestWritten(job, checkpointOf(w), err, s.now)
	case "trigger":
		id, a, err := s.c.TriggerNow(args[0], s.now)
		acts = a
		if err != nil {
			out = append(out, "error: "+err.Error())
		} else {
			out = append(out, fmt.Sprintf("triggered %d", id))
		}
	case "stop":
		id, a, err := s.c.StopWithSavepoint(args[0], len(args) > 1 && args[1] == "drain", s.now)
		acts = a
		if err != nil {
			out = append(out, "error: "+err.Error())
		} else {
			out = append(out, fmt.Sprintf("stopping at %d", id))
		}
	case "input-ended":
		job := c.job()
		d := s.executions(job, []coordinator.TaskID{c.task(args[0])})[0]
		acts = s.c.SourceInputEnded(d.TaskManager, job, d.Task.Head, d.Subtask, d.Attempt, s.now)
	case "suspect":
		acts = s.c.Suspect(args[0], s.instances[args[0]], c.Text("reason"), s.now)
	case "suspect-peer":
		acts = s.c.SuspectPeer(args[0], c.Text("reason"), s.now)
	case "probed":
		acts = s.c.Probed(args[0], s.instances[args[0]], c.errArg("err"), s.now)
	case "shutdown":
		acts = s.c.Shutdown(s.now)
	case "job":
		v, err := s.c.Job(args[0])
		if err != nil {
			out = append(out, "error: "+err.Error())
		} else {
			out = append(out, s.formatJob(v)...)
		}
	case "tms":
		for _, v := range s.c.TaskManagers() {
			line := fmt.Sprintf("%s addr=%s live=%v slots=%d free=%d", v.ID, v.Addr, v.Live, v.Slots, v.Free)
			if v.Suspected {
				line += " suspected"
			}
			if v.Reason != "" {
				line += fmt.Sprintf(" reason=%q", v.Reason)
			}
			out = append(out, line)
		}
	case "checkpoints":
		v, err := s.c.Checkpoints(args[0])
		if err != nil {
			out = append(out, "error: "+err.Error())
			break
		}
		out = append(out, fmt.Sprintf("enabled=%v in-progress=%d completed=%d failed=%d aborted=%d latest=%d restored-from=%d retained=%v",
			v.Enabled, v.InProgress, v.Completed, v.Failed, v.Aborted, v.Latest, v.RestoredFrom, v.Retained))
	}
	s.remember(acts)
	out = append(out, formatActions(acts)...)
	for _, e := range s.c.Logs() {
		if e.Level >= LevelInfo {
			out = append(out, "> "+e.Msg)
		}
	}
	if len(out) == 0 {
		return "ok"
	}
	return strings.Join(out, "\n")
}

// jobSpec is the graph and options of a submit command.
func (s *scenario) jobSpec(c directive) (*stream.JobGraph, JobOptions) {
	c.T.Helper()
	var g *stream.JobGraph
	switch {
	case c.Text("fanout") != "":
		g = fanOut(s.t, int(c.Number("fanout", c.Text("fanout"))))
	default:
		src, win := int64(1), int64(1)
		if v := c.Text("pipeline"); v != "" {
			a, b, ok := strings.Cut(v, "/")
			if !ok {
				c.Fatalf("pipeline=%s: want S/W", v)
			}
			src, win = c.Number("pipeline", a), c.Number("pipeline", b)
		}
		g = pipeline(s.t, int(src), int(win))
	}
	g = planned(s.t, g, testRegistry(s.t))
	var opts JobOptions
	if a, ok := c.Lookup("restart"); ok {
		if len(a.Vals) != 2 {
			c.Fatalf("restart: want (N,D)")
		}
		r, err := failover.New(stream.RestartConfig{Type: failover.FixedDelay, Attempts: int(c.Number("restart", a.Vals[0])),
			Delay: c.Duration("restart", a.Vals[1])}, false, nil)
		if err != nil {
			c.Fatalf("restart: %v", err)
		}
		opts.Restart = r
	}
	if v := c.Text("interval"); v != "" {
		ck := stream.CheckpointConfig{Interval: c.Duration("interval", v)}
		if v := c.Text("tolerable"); v != "" {
			ck.TolerableFailures = int(c.Number("tolerable", v))
		}
		if v := c.Text("concurrent"); v != "" {
			ck.MaxConcurrent = int(c.Number("concurrent", v))
		}
		if v := c.Text("retained"); v != "" {
			ck.Retained = int(c.Number("retained", v))
		}
		if v := c.Text("on-corruption"); v != "" {
			p, err := stream.ParseCorruptionPolicy(v)
			if err != nil {
				c.Fatalf("on-corruption: %v", err)
			}
			ck.OnCorruption = p
		}
		opts.Checkpoint = ck.WithDefaults()
		opts.Storage = "file:///ck"
	}
	if v := c.Text("slot-wait"); v != "" {
		opts.SlotWait = c.Duration("slot-wait", v)
	}
	if v := c.Text("restore"); v != "" {
		opts.Restore = &testCheckpoint{id: c.Number("restore", v)}
	}
	if v := c.Text("first"); v != "" {
		opts.FirstCheckpointID = c.Number("first", v)
	}
	return g, opts
}

// deployed answers the pending deployments of job (those of only, when
// given) with DeployDone(err).
func (s *scenario) deployed(job string, only []coordinator.TaskID, err error) []Action {
	var acts []Action
	var keep []DeployAction
	for _, a := range s.deploys {
		if a.JobID != job || (only != nil && !slices.Contains(only, coordinator.TaskID{Vertex: a.Task.Head, Subtask: a.Subtask})) {
			keep = append(keep, a)
			continue
		}
		acts = append(acts, s.c.DeployDone(a, err, s.now)...)
	}
	s.deploys = keep
	return acts
}

// executions are the latest deployments of the listed executions of job,
// or of all of them, in vertex and subtask order.
func (s *scenario) executions(job string, only []coordinator.TaskID) []DeployAction {
	s.t.Helper()
	var out []DeployAction
	if only != nil {
		for _, id := range only {
			d, ok := s.latest[execRef{job, id}]
			if !ok {
				s.t.Fatalf("execution %d/%d of job %s was never deployed", id.Vertex, id.Subtask, job)
			}
			out = append(out, d)
		}
		return out
	}
	for ref, d := range s.latest {
		if ref.job == job {
			out = append(out, d)
		}
	}
	slices.SortFunc(out, func(a, b DeployAction) int {
		return cmp.Or(cmp.Compare(a.Task.Head, b.Task.Head), cmp.Compare(a.Subtask, b.Subtask))
	})
	return out
}

// remember keeps the requests among acts that a later command answers.
func (s *scenario) remember(acts []Action) {
	for _, a := range acts {
		switch a := a.(type) {
		case DeployAction:
			s.deploys = append(s.deploys, a)
			s.latest[execRef{a.JobID, coordinator.TaskID{Vertex: a.Task.Head, Subtask: a.Subtask}}] = a
		case CancelAction:
			s.cancels = append(s.cancels, a)
		case TriggerAction:
			s.triggers = append(s.triggers, a)
		case WriteManifestAction:
			s.writes[a.JobID] = a
		}
	}
	// A trigger is answered by the acknowledgement that follows; only
	// those of the newest checkpoint of each job can still fail.
	newest := make(map[string]int64)
	for _, a := range s.triggers {
		newest[a.JobID] = max(newest[a.JobID], a.CheckpointID)
	}
	s.triggers = slices.DeleteFunc(s.triggers, func(a TriggerAction) bool { return a.CheckpointID < newest[a.JobID] })
}

// rel prints t relative to t0.
func rel(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Sub(t0).String()
}

func (s *scenario) formatJob(v JobView) []string {
	head := fmt.Sprintf("%s %s attempt=%d restarts=%d restored-from=%d regions=%d", v.ID, v.State, v.Attempt, v.Restarts, v.RestoredFrom, v.Regions)
	if !v.RestartDue.IsZero() {
		head += " restart-due=" + rel(v.RestartDue)
	}
	if v.StoppedAt != 0 || v.StopPending != 0 {
		head += fmt.Sprintf(" stopped-at=%d stop-pending=%d", v.StoppedAt, v.StopPending)
	}
	if v.StopFailed != "" {
		head += fmt.Sprintf(" stop-failed=%q", v.StopFailed)
	}
	if v.Err != "" {
		head += fmt.Sprintf(" err=%q", v.Err)
	}
	out := []string{head}
	for _, r := range v.RestartingRegions {
		line := fmt.Sprintf("  region %d/%d %s attempt=%d due=%s tasks=%d cause=%q", r.ID, r.Of, r.Phase, r.Attempt, rel(r.Due), len(r.Tasks), r.Cause)
		if !r.SlotDeadline.IsZero() {
			line += " slot-deadline=" + rel(r.SlotDeadline)
		}
		out = append(out, line)
	}
	for _, t := range v.Tasks {
		line := fmt.Sprintf("  %d/%d %s attempt=%d tm=%s", t.Vertex, t.Subtask, t.State, t.Attempt, cmp.Or(t.TaskManager, "-"))
		if t.Err != "" {
			line += fmt.Sprintf(" err=%q", t.Err)
		}
		out = append(out, line)
	}
	return out
}

// formatActions prints acts one per line, merging consecutive actions that
// differ only in their execution into one line that lists them.
func formatActions(acts []Action) []string {
	var out []string
	var lastKey string
	var execs []string
	flush := func() {
		if lastKey != "" {
			out = append(out, strings.Replace(lastKey, "%EXECS%", strings.Join(execs, " "), 1))
		}
		lastKey, execs = "", nil
	}
	for _, a := range acts {
		key, exec := formatAction(a)
		if key != lastKey || exec == "" {
			flush()
		}
		lastKey = key
		if exec != "" {
			execs = append(execs, exec)
		}
	}
	flush()
	return out
}

// formatAction prints a with %EXECS% where its executions go, and the
// execution it is about ("" for none); a deployment restored as finished
// is marked "(finished)".
func formatAction(a Action) (line, exec string) {
	switch a := a.(type) {
	case DeployAction:
		line = fmt.Sprintf("deploy %s [%%EXECS%%] attempt=%d tm=%s slots=%s", a.JobID, a.Attempt, a.TaskManager, strings.Join(a.SlotAddrs, ","))
		if a.Restore != nil {
			line += " restore=" + strconv.FormatInt(a.Restore.CheckpointID(), 10)
		}
		exec = fmt.Sprintf("%d/%d", a.Task.Head, a.Subtask)
		if a.Restore != nil && a.Restore.Finished(a.Graph.Vertices[a.Task.Head].UID, a.Subtask, a.Task.Parallelism) {
			exec += "(finished)"
		}
		return line, exec
	case CancelAction:
		line = fmt.Sprintf("cancel %s [%%EXECS%%] attempt=%d tm=%s", a.JobID, a.Attempt, a.TaskManager)
		if a.Stale {
			line += " stale"
		}
		return line, fmt.Sprintf("%d/%d", a.Vertex, a.Subtask)
	case TriggerAction:
		kind := "trigger"
		switch {
		case a.Drain:
			kind = "trigger-drain"
		case a.Savepoint:
			kind = "trigger-savepoint"
		}
		return fmt.Sprintf("%s %s %d [%%EXECS%%] at=%s", kind, a.JobID, a.CheckpointID, rel(a.Timestamp)), fmt.Sprintf("%d/%d", a.Vertex, a.Subtask)
	case NotifyAction:
		what := "aborted"
		if a.Complete {
			what = "complete"
		}
		return fmt.Sprintf("notify %s %d %s [%%EXECS%%]", a.JobID, a.CheckpointID, what), fmt.Sprintf("%d/%d", a.Vertex, a.Subtask)
	case WriteManifestAction:
		var acks []string
		for _, ack := range a.Acks {
			acks = append(acks, ack.Payload.(string))
		}
		slices.Sort(acks)
		line = fmt.Sprintf("write-manifest %s %d acks=%v", a.JobID, a.ID, acks)
		if len(a.Finished) > 0 {
			line += fmt.Sprintf(" finished=%v", a.Finished)
		}
		return line, ""
	case DeleteCheckpointsAction:
		line = fmt.Sprintf("delete-checkpoints %s %v", a.JobID, a.IDs)
		if a.All {
			line += " all"
		}
		if a.Tidy {
			line += " tidy"
		}
		return line, ""
	case ProbeAction:
		return fmt.Sprintf("probe %s instance=%s", a.TaskManager, a.Instance), ""
	case ForgetJobAction:
		return fmt.Sprintf("forget %s %s", a.JobID, a.State), ""
	}
	return fmt.Sprintf("unknown action %T", a), ""
}

func parseTaskState(name string) (TaskState, bool) {
	for s := TaskCreated; s <= TaskFailed; s++ {
		if s.String() == name {
			return s, true
		}
	}
	return 0, false
}
