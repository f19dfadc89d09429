package dataflow

import (
	"fmt"
	"time"

	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/stream"
)

// This file fires the processing-time timers of the chain's operators
// (stream.ProcessingTimeAware) and their own deadlines
// (stream.ProcessingTimeDeadline, such as the watermarks operator's next
// periodic emission). Between two events the task asks the keyed backends
// of those operators for their earliest timer, and the others for their
// deadline; when one is due by the task's clock it calls the operator, and
// otherwise it keeps one timer armed for the earliest, which wakes the task
// through its control channel (the channel every wait of the task already
// watches), so that a due timer fires without input arriving and nothing
// polls. An operator with neither timers nor a deadline arms nothing.

// wallClock is the default TaskSpec.Clock: Unix milliseconds.
func wallClock() int64 { return time.Now().UnixMilli() }

// maxTimerWait bounds one sleep for a processing-time timer (a timer far in
// the future is waited for in several), so that the wait never overflows a
// time.Duration.
const maxTimerWait = time.Hour

// procTimeOp is an operator of the chain that fires processing-time timers
// kept in its keyed state (timers), has a deadline of its own (deadline),
// or both.
type procTimeOp struct {
	link     *chainLink
	op       stream.ProcessingTimeAware
	timers   statebackend.TimerService     // nil without runtime-owned keyed state
	deadline stream.ProcessingTimeDeadline // nil if op is not one
	out      stream.Collector
}

// next returns the operator's earliest timer or deadline.
func (o *procTimeOp) next() (next int64, ok bool) {
	if o.timers != nil {
		next, ok = o.timers.NextProcessingTime()
	}
	if o.deadline != nil {
		if d, found := o.deadline.NextProcessingTime(); found && (!ok || d < next) {
			next, ok = d, true
		}
	}
	return next, ok
}

// procTimers is the processing-time side of one Run (task goroutine only).
type procTimers struct {
	ops []procTimeOp
	// timer wakes the task for the earliest timer (nil until first
	// needed); armed is the timestamp it is set for, when set is true.
	timer *time.Timer
	armed int64
	set   bool
	ended bool // the input ended: no more firing
}

// wakeProcessingTime makes the task read its clock again and fire the
// processing-time timers then due, between two events. The timer armed for
// the earliest timer calls it, and so may a test after moving a manual
// clock. It is safe from any goroutine.
func (t *Task) wakeProcessingTime() {
	t.ptDue.Store(true)
	t.ctl.signal()
}

// initProcessingTime finds the chain's operators that fire processing-time
// timers: those implementing stream.ProcessingTimeAware whose keyed state
// the runtime owns, and those implementing stream.ProcessingTimeDeadline.
// outs[i] receives chain[i]'s output.
func (r *taskRun) initProcessingTime(outs []stream.Collector) {
	for i := range r.t.chain {
		l := &r.t.chain[i]
		pa, ok := l.op.(stream.ProcessingTimeAware)
		if !ok {
			continue
		}
		o := procTimeOp{link: l, op: pa, out: outs[i]}
		if l.state != nil {
			o.timers = l.state.Backend().Timers()
		}
		o.deadline, _ = l.op.(stream.ProcessingTimeDeadline)
		if o.timers == nil && o.deadline == nil {
			continue
		}
		r.pt.ops = append(r.pt.ops, o)
	}
}

// processingTime fires the processing-time timers that are due and arms the
// timer for the earliest one left. It reads the clock only when the
// earliest timer changed or the armed timer went off, so that it costs a
// call to NextProcessingTime per operator between two events.
func (r *taskRun) processingTime() error {
	p := &r.pt
	if len(p.ops) == 0 || p.ended {
		return nil
	}
	next, ok := p.earliest()
	woken := r.t.ptDue.Swap(false)
	if !woken && ok == p.set && (!ok || next == p.armed) {
		return nil // the timer is armed for the earliest timer, or none is needed
	}
	if !ok {
		p.disarm()
		return nil
	}
	now := r.t.clock()
	if next <= now {
		if err := r.fireProcessingTime(now); err != nil {
			return err
		}
		if next, ok = p.earliest(); !ok {
			p.disarm()
			return nil
		}
		now = r.t.clock()
	}
	p.arm(r.t, next, now)
	return nil
}

// fireProcessingTime calls every operator whose earliest processing-time
// timer or deadline is at or before now, head first.
func (r *taskRun) fireProcessingTime(now int64) error {
	for i := range r.pt.ops {
		o := &r.pt.ops[i]
		if ts, ok := o.next(); !ok || ts > now {
			continue
		}
		err := r.t.guard(o.link, "OnProcessingTime", func() error { return o.op.OnProcessingTime(now, o.out) })
		if err != nil {
			return r.t.opErr(o.link.uid, fmt.Errorf("processing-time timers at %d: %w", now, err))
		}
		if r.err != nil {
			return r.err
		}
	}
	return nil
}

// earliest returns the earliest processing-time timer over the operators.
func (p *procTimers) earliest() (next int64, ok bool) {
	for i := range p.ops {
		if ts, found := p.ops[i].next(); found && (!ok || ts < next) {
			next, ok = ts, true
		}
	}
	return next, ok
}

// timerWait is how long to sleep for a timer at next when the clock says
// now: at once if next is not after now, at most maxTimerWait.
func timerWait(next, now int64) time.Duration {
	if next <= now {
		return 0
	}
	if next-now < 0 || next-now > maxTimerWait.Milliseconds() { // overflowed, or far away
		return maxTimerWait
	}
	return time.Duration(next-now) * time.Millisecond
}

// arm sets the timer to wake the task at next, now being the clock's time.
func (p *procTimers) arm(t *Task, next, now int64) {
	d := timerWait(next, now)
	if p.timer == nil {
		p.timer = time.AfterFunc(d, t.wakeProcessingTime)
	} else {
		p.timer.Reset(d)
	}
	p.armed, p.set = next, true
}

// disarm stops the timer.
func (p *procTimers) disarm() {
	if p.timer != nil {
		p.timer.Stop()
	}
	p.set = false
}

// end stops firing processing-time timers: the task's input has ended, or
// the run is over.
func (p *procTimers) end() {
	p.disarm()
	p.ended = true
}
