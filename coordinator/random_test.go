package coordinator

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// model is an independent record of what the test fed the coordinator,
// against which every action is checked.
type model struct {
	t        *testing.T
	seed     uint64
	cfg      Config
	tasks    []TaskID
	finished map[TaskID]time.Time

	required map[int64][]TaskID       // at trigger time
	acked    map[int64]map[TaskID]any // acks sent while the checkpoint could take them
	ended    map[int64]string         // "complete" or "abort"
	writing  int64                    // outstanding WriteManifestAction, 0 if none
	written  map[int64]bool           // WriteManifestAction emitted
	okCalled map[int64]bool           // ManifestWritten(id, nil) called
	// detached: the manifest was being written when the coordinator
	// stopped or was reset; orphaned: when it was reset.
	detached  map[int64]bool
	orphaned  map[int64]bool
	aborts    map[AbortCause]int
	lastTrig  int64
	lastDone  int64
	stopped   bool
	pending   int
	completed int
	failed    int

	jobFailures int
	consecutive int
	// detachedEnds counts the detached checkpoints that ended.
	detachedEnds int
}

func (m *model) fatalf(format string, a ...any) {
	m.t.Helper()
	m.t.Fatalf("seed %d: %s", m.seed, fmt.Sprintf(format, a...))
}

// check checks the actions of one event, whose aborts may have the causes
// allowed (and, after a FailJobAction, CauseTooManyFailures).
func (m *model) check(c *Coordinator, now time.Time, allowed ...AbortCause) {
	m.t.Helper()
	var completedNow int64 // highest completion in this batch
	failJobDue := int64(0) // the failure that must be followed by FailJobAction
	failedOver := false
	for _, a := range c.Ready() {
		if failJobDue != 0 {
			if fa, ok := a.(FailJobAction); !ok || fa.ID != failJobDue {
				m.fatalf("%v: want FailJobAction for %d, whose failure exceeded the tolerance", a, failJobDue)
			}
			failJobDue = 0
		}
		switch a := a.(type) {
		case TriggerAction:
			if m.stopped {
				m.fatalf("%v while stopped", a)
			}
			if a.ID <= m.lastTrig {
				m.fatalf("%v: id not above the previous trigger %d", a, m.lastTrig)
			}
			m.lastTrig = a.ID
			var req []TaskID
			for _, t := range m.tasks {
				if _, fin := m.finished[t]; !fin {
					req = append(req, t)
				}
			}
			m.required[a.ID] = req
			m.acked[a.ID] = map[TaskID]any{}
			m.pending++
			if m.pending > m.cfg.MaxConcurrent {
				m.fatalf("%d checkpoints pending, max %d", m.pending, m.cfg.MaxConcurrent)
			}
		case WriteManifestAction:
			if m.writing != 0 {
				m.fatalf("%v while the manifest of %d is being written", a, m.writing)
			}
			if m.ended[a.ID] != "" || m.required[a.ID] == nil {
				m.fatalf("%v for a checkpoint that is not pending", a)
			}
			for _, t := range m.required[a.ID] {
				_, ack := m.acked[a.ID][t]
				_, fin := m.finished[t]
				if !ack && !fin {
					m.fatalf("%v without an ack from %v", a, t)
				}
			}
			got := make(map[TaskID]any, len(a.Acks))
			for i, ack := range a.Acks {
				if i > 0 && compareTasks(a.Acks[i-1].Task, ack.Task) >= 0 {
					m.fatalf("%v: acks not in task order", a)
				}
				got[ack.Task] = ack.Payload
			}
			if !maps.Equal(got, m.acked[a.ID]) {
				m.fatalf("%v: acks %v, want %v", a, a.Acks, m.acked[a.ID])
			}
			m.writing = a.ID
			m.written[a.ID] = true
		case NotifyCompleteAction:
			if !m.okCalled[a.ID] || !m.written[a.ID] {
				m.fatalf("%v before ManifestWritten(ok)", a)
			}
			if a.ID <= m.lastDone {
				m.fatalf("%v after completing %d", a, m.lastDone)
			}
			if m.orphaned[a.ID] && len(a.Tasks) != 0 {
				m.fatalf("%v: completed after Reset, yet notifies the new tasks", a)
			}
			m.end(a.ID, "complete")
			m.lastDone = a.ID
			completedNow = max(completedNow, a.ID)
			m.completed++
			m.consecutive = 0
		case AbortAction:
			switch {
			case strings.HasPrefix(a.Cause.String(), "AbortCause("):
				m.fatalf("%v: invalid cause", a)
			case failedOver:
				if a.Cause != CauseTooManyFailures {
					m.fatalf("%v after FailJobAction: want cause %v", a, CauseTooManyFailures)
				}
			case !slices.Contains(allowed, a.Cause):
				m.fatalf("%v: cause %v, want one of %v", a, a.Cause, allowed)
			case a.Cause == CauseSubsumed && a.ID >= completedNow:
				m.fatalf("%v: subsumed, but no higher checkpoint completed (highest %d)", a, completedNow)
			case a.ID == m.writing && a.Cause != CauseWriteFailed:
				m.fatalf("%v: aborted while its manifest is being written", a)
			case a.Cause == CauseWriteFailed && a.ID != m.writing:
				m.fatalf("%v: its manifest was not being written", a)
			}
			if a.Cause.IsFailure() && !m.detached[a.ID] {
				m.consecutive++
				if m.consecutive > m.cfg.TolerableFailures {
					failJobDue = a.ID
				}
			}
			if m.orphaned[a.ID] && len(a.Tasks) != 0 {
				m.fatalf("%v: ended after Reset, yet notifies the new tasks", a)
			}
			m.aborts[a.Cause]++
			m.end(a.ID, "abort")
			m.failed++
		case DiscardAction:
			if slices.Contains(a.IDs, m.lastDone) {
				m.fatalf("%v discards the latest", a)
			}
			for _, id := range a.IDs {
				if m.ended[id] != "complete" {
					m.fatalf("%v: %d is not complete", a, id)
				}
			}
		case FailJobAction:
			if !a.Cause.IsFailure() {
				m.fatalf("%v: cause is not a failure", a)
			}
			m.stopped = true
			m.detached[m.writing] = true
			failedOver = true
			m.jobFailures++
		default:
			m.fatalf("unknown action %T", a)
		}
	}
	if failJobDue != 0 {
		m.fatalf("no FailJobAction after checkpoint %d failed once too often", failJobDue)
	}
	if got := c.ConsecutiveFailures(); got != m.consecutive {
		m.fatalf("consecutive failures %d, want %d", got, m.consecutive)
	}
	if id, ok := c.Writing(); id != m.writing || ok != (m.writing != 0) {
		m.fatalf("Writing() = %d, %v; want %d", id, ok, m.writing)
	}
	counts := c.AbortCounts()
	for _, cause := range AbortCauses() {
		if counts[cause] != m.aborts[cause] {
			m.fatalf("AbortCounts %v, want %v", counts, m.aborts)
		}
	}
	p, done, f := c.Counts()
	if p != m.pending || done != m.completed || f != m.failed {
		m.fatalf("counts %d/%d/%d, want %d/%d/%d", p, done, f, m.pending, m.completed, m.failed)
	}
	if id, _, ok := c.Latest(); ok != (m.lastDone != 0) || id != m.lastDone {
		m.fatalf("latest %d, want %d", id, m.lastDone)
	}
}

func (m *model) end(id int64, how string) {
	if m.required[id] == nil {
		m.fatalf("%s of %d, which was never triggered", how, id)
	}
	if m.ended[id] != "" {
		m.fatalf("%s of %d, already %s", how, id, m.ended[id])
	}
	m.ended[id] = how
	if m.detached[id] {
		m.detachedEnds++
	}
	m.pending--
	if m.writing == id {
		m.writing = 0
	}
}

// TestRandomized feeds random event sequences and checks the invariants:
// ids only increase, nothing completes without all acks or before
// ManifestWritten(ok), every checkpoint ends once, every abort has the
// cause of the event that caused it, a manifest write in flight ends only
// by its ManifestWritten, failures are counted by cause, counts agree.
func TestRandomized(t *testing.T) {
	var completed, failed, jobFailures, detachedEnds int
	for seed := uint64(1); seed <= 400; seed++ {
		m := runRandom(t, seed)
		completed += m.completed
		failed += m.failed
		jobFailures += m.jobFailures
		detachedEnds += m.detachedEnds
	}
	t.Logf("completed=%d aborted=%d fail-job=%d detached-writes=%d", completed, failed, jobFailures, detachedEnds)
	// The sequences must exercise the interesting paths, or the invariants
	// above prove nothing.
	if completed < 500 || failed < 1000 || jobFailures < 50 || detachedEnds < 50 {
		t.Errorf("random sequences too tame: completed=%d aborted=%d fail-job=%d detached-writes=%d",
			completed, failed, jobFailures, detachedEnds)
	}
}

func runRandom(t *testing.T, seed uint64) *model {
	r := rand.New(rand.NewPCG(seed, 7))
	cfg := Config{
		Interval:          time.Duration(r.IntN(3)) * time.Second,
		Timeout:           time.Duration(1+r.IntN(5)) * time.Second,
		MinPause:          time.Duration(r.IntN(2)) * 500 * time.Millisecond,
		MaxConcurrent:     1 + r.IntN(3),
		TolerableFailures: r.IntN(4),
		Retained:          1 + r.IntN(3),
	}
	tasks := []TaskID{{0, 0}, {0, 1}, {1, 0}, {1, 1}, {2, 0}}
	sources := tasks[:2]
	now := t0
	m := &model{t: t, seed: seed, cfg: cfg, tasks: tasks, finished: map[TaskID]time.Time{},
		required: map[int64][]TaskID{}, acked: map[int64]map[TaskID]any{}, ended: map[int64]string{},
		written: map[int64]bool{}, okCalled: map[int64]bool{}, detached: map[int64]bool{}, orphaned: map[int64]bool{},
		aborts: map[AbortCause]int{}}
	c := New(cfg, tasks, sources, 1, now)
	randID := func() int64 { return m.lastTrig - int64(r.IntN(4)) + 1 }
	for step := 0; step < 400; step++ {
		task := tasks[r.IntN(len(tasks))]
		var allowed []AbortCause // the causes of the aborts this step may cause
		switch k := r.IntN(100); {
		case k < 20:
			now = now.Add(time.Duration(r.IntN(700)) * time.Millisecond)
			c.Tick(now)
			allowed = []AbortCause{CauseExpired}
		case k < 25:
			id, err := c.TriggerNow(now)
			if err == nil && id <= 0 {
				m.fatalf("TriggerNow returned id %d", id)
			}
			if err != nil && !errors.Is(err, ErrStopped) && !errors.Is(err, ErrTooManyPending) && !errors.Is(err, ErrNoSources) {
				m.fatalf("TriggerNow: unexpected error %v", err)
			}
		case k < 65:
			id := randID()
			if open := m.open(); len(open) > 0 && r.IntN(5) > 0 {
				id = open[r.IntN(len(open))]
				if req := m.required[id]; len(req) > 0 {
					task = req[r.IntN(len(req))]
				}
			}
			payload := fmt.Sprintf("p%d-%v-%d", id, task, step)
			// The model's own rule for an ack that counts: the checkpoint
			// is pending and has not got all its acks, the task is
			// required, has not acked nor finished.
			_, fin := m.finished[task]
			_, dup := m.acked[id][task]
			if m.required[id] != nil && m.ended[id] == "" && !m.written[id] && !m.allIn(id) &&
				slices.Contains(m.required[id], task) && !fin && !dup {
				m.acked[id][task] = payload
			}
			c.Ack(now, task, id, payload, AckStats{Bytes: int64(r.IntN(100))})
		case k < 67:
			c.Decline(now, task, randID(), "random")
			allowed = []AbortCause{CauseDeclined}
		case k < 71:
			if _, fin := m.finished[task]; !fin {
				m.finished[task] = now
			}
			c.TaskFinished(now, task)
			allowed = []AbortCause{CauseTasksFinished}
		case k < 88:
			id := m.writing
			if id == 0 || r.IntN(10) == 0 {
				id = randID()
			}
			var err error
			if r.IntN(5) == 0 {
				err = errors.New("write failed")
			} else if id == m.writing {
				m.okCalled[id] = true
			}
			c.ManifestWritten(now, id, err)
			allowed = []AbortCause{CauseWriteFailed, CauseSubsumed}
		case k < 89:
			cause := []AbortCause{CauseFailover, CauseJobEnded}[r.IntN(2)]
			c.Stop(now, cause, "stopped")
			m.stopped = true
			m.detached[m.writing] = true
			allowed = []AbortCause{cause}
		case k < 91:
			c.Reset(now, tasks, sources)
			m.detached[m.writing] = true
			m.orphaned[m.writing] = true
			m.consecutive = 0
			m.check(c, now, CauseFailover) // the aborts of Reset belong to the old tasks
			m.stopped = false
			m.finished = map[TaskID]time.Time{}
			continue
		default:
			now = now.Add(time.Duration(r.IntN(200)) * time.Millisecond)
		}
		m.check(c, now, allowed...)
	}
	return m
}

// allIn reports whether every required task of id acked or finished.
func (m *model) allIn(id int64) bool {
	for _, t := range m.required[id] {
		_, ack := m.acked[id][t]
		_, fin := m.finished[t]
		if !ack && !fin {
			return false
		}
	}
	return true
}

// open returns the ids of the checkpoints the model thinks are pending.
func (m *model) open() []int64 {
	var ids []int64
	for id := range m.required {
		if m.ended[id] == "" {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}
