package scheduler

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// Taskmanager membership in the scheduler: registration, suspicion and probes,
// loss. A taskmanager is live from its registration until it is lost: by
// the heartbeat timeout, by a failed probe, or by a registration of a new
// process under its id. In between it may be suspected (its connection
// broke, a call to it failed as Unavailable, a peer's data stream from it
// broke): a suspected taskmanager keeps its running tasks but gets no new
// slots until the shell's probe says whether the same process still
// answers.

// ErrTaskManagerReplaced: a registration came from a taskmanager process
// that a newer process with the same id has replaced.
var ErrTaskManagerReplaced = errors.New("jobmanager: taskmanager process replaced")

// maxReplaced bounds the remembered replaced instances.
const maxReplaced = 4096

// Registration is what a taskmanager process registers with.
type Registration struct {
	ID, Instance, Addr string
	// ExchangeAddr is where other taskmanagers send it data; empty: Addr.
	ExchangeAddr string
	Slots        int
	OpTypes      []string
}

// Register adds a taskmanager process, replacing an earlier registration
// with the same id (whose tasks are then gone). The shell opens a fresh
// connection to the address for every registration.
func (c *Scheduler) Register(r Registration, now time.Time) ([]Action, error) {
	switch {
	case r.ID == "":
		return nil, fmt.Errorf("%w: taskmanager registration has no id; give each taskmanager a unique id", ErrInvalidArgument)
	case r.Instance == "":
		return nil, fmt.Errorf("%w: taskmanager %s registered without a process instance id; upgrade the taskmanager to this jobmanager's version", ErrInvalidArgument, r.ID)
	case r.Addr == "":
		return nil, fmt.Errorf("%w: taskmanager %s registered without an address; it must send the host:port of its gRPC server", ErrInvalidArgument, r.ID)
	case r.Slots < 1:
		return nil, fmt.Errorf("%w: taskmanager %s offers %d slots; it must offer at least 1", ErrInvalidArgument, r.ID, r.Slots)
	}
	if id, ok := c.replaced[r.Instance]; ok {
		return nil, fmt.Errorf("%w: taskmanager %s (process instance %s) was replaced by a newer process registered as %s; two processes share one id, give each taskmanager its own --id",
			ErrTaskManagerReplaced, r.ID, r.Instance, id)
	}
	var acts []Action
	if old := c.tms[r.ID]; old != nil {
		if old.instance != r.Instance {
			if len(c.replaced) >= maxReplaced {
				clear(c.replaced)
			}
			c.replaced[old.instance] = r.ID
		}
		if !old.lost {
			old.lost = true
			old.lostReason = "re-registered"
			reason := fmt.Sprintf("taskmanager %s re-registered (it restarted?); its tasks are gone", r.ID)
			if old.instance != r.Instance {
				reason = fmt.Sprintf("taskmanager %s registered as a new process (instance %s, was %s): the old process is gone, and its tasks with it",
					r.ID, r.Instance, old.instance)
			}
			acts = c.tmGone(old, reason, now)
		}
	}
	ex := r.ExchangeAddr
	if ex == "" {
		ex = r.Addr
	}
	c.tms[r.ID] = &tmEntry{id: r.ID, instance: r.Instance, addr: r.Addr, exchangeAddr: ex, slots: r.Slots,
		opTypes: slices.Clone(r.OpTypes), registered: now, lastHeartbeat: now}
	c.log.Info("taskmanager registered", "taskmanager", r.ID, "instance", r.Instance, "address", r.Addr, "slots", r.Slots)
	return append(acts, c.scheduleWaiting(now)...), nil
}

// ReregisterReason says why a heartbeat of process instance of taskmanager
// id is answered with reregister.
func (c *Scheduler) ReregisterReason(id, instance string) string {
	tm := c.tms[id]
	switch {
	case tm == nil:
		return "this jobmanager has no registration of it (it started after the taskmanager registered, or took over the lead)"
	case tm.instance != instance:
		return fmt.Sprintf("taskmanager %s is registered as another process (instance %s)", id, tm.instance)
	case tm.lost:
		return "it was declared lost: " + tm.lostReason
	}
	return ""
}

// current returns the live entry of taskmanager id if it is process
// instance, else nil.
func (c *Scheduler) current(id, instance string) *tmEntry {
	tm := c.tms[id]
	if tm == nil || tm.lost || tm.instance != instance {
		return nil
	}
	return tm
}

// Suspect marks process instance of taskmanager id as suspected for
// reason and asks the shell to probe it. Reports about other processes
// or lost taskmanagers are ignored.
func (c *Scheduler) Suspect(id, instance, reason string, now time.Time) []Action {
	tm := c.current(id, instance)
	if tm == nil {
		return nil
	}
	if !tm.suspected {
		tm.suspected = true
		tm.suspectReason = reason
		c.log.Warn("taskmanager suspected; probing it", "taskmanager", id, "instance", instance, "address", tm.addr, "reason", reason)
	}
	return []Action{ProbeAction{TaskManager: id, Instance: instance, Addr: tm.addr}}
}

// SuspectPeer suspects the live taskmanager whose exchange address is addr
// (a task's data stream to or from it broke).
func (c *Scheduler) SuspectPeer(addr, reason string, now time.Time) []Action {
	for _, tm := range c.tms {
		if !tm.lost && tm.exchangeAddr == addr {
			return c.Suspect(tm.id, tm.instance, reason, now)
		}
	}
	return nil
}

// Probed records the outcome of a probe of process instance of taskmanager
// id: nil, the process answered (a suspicion ends, and deployments that
// waited for it go on); otherwise it is lost.
func (c *Scheduler) Probed(id, instance string, err error, now time.Time) []Action {
	tm := c.current(id, instance)
	if tm == nil {
		return nil
	}
	if err != nil {
		return c.lose(tm, fmt.Sprintf("probe failed: %v", err), now)
	}
	if !tm.suspected {
		return nil
	}
	tm.suspected, tm.suspectReason = false, ""
	c.log.Info("taskmanager answered its probe; no longer suspected", "taskmanager", id, "instance", instance)
	acts := c.scheduleWaiting(now)
	for _, j := range c.jobOrder {
		if j.state.active() {
			acts = append(acts, c.maybeRedeployRegions(j, now)...)
		}
	}
	return acts
}

// lose declares tm lost for reason: its executions fail over.
func (c *Scheduler) lose(tm *tmEntry, reason string, now time.Time) []Action {
	tm.lost = true
	tm.lostAt = now
	tm.suspected = false
	tm.lostReason = reason
	c.log.Warn("taskmanager lost", "taskmanager", tm.id, "instance", tm.instance, "address", tm.addr, "reason", reason)
	return c.tmGone(tm, fmt.Sprintf("taskmanager %s at %s lost: %s", tm.id, tm.addr, reason), now)
}

// ActiveJobs returns the ids of the jobs that are not finished, cancelled or
// failed; heartbeat responses carry them so that taskmanagers remove the
// local state of the others.
func (c *Scheduler) ActiveJobs() []string {
	var out []string
	for _, j := range c.jobOrder {
		if !j.state.Terminal() {
			out = append(out, j.id)
		}
	}
	return out
}
