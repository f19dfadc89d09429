package scheduler

import "time"

// RateWindow is the least time between the two reports a task's rates
// are measured over; reports that come sooner are folded into the next
// measurement.
const RateWindow = 500 * time.Millisecond

// rates turns an execution's cumulative counters, as its reports bring
// them, into records per second and a backpressure fraction.
type rates struct {
	attempt int64 // of the sample; another attempt starts over
	// at, in, out and bp are the sample the next measurement starts from.
	at           time.Time
	sampled      bool
	in, out, bp  int64 // bp in nanoseconds
	inRate       float64
	outRate      float64
	backpressure float64
}

// observe takes the counters of a report of attempt at now. Counters that
// go backwards (a restarted task) start the measurement over.
func (r *rates) observe(attempt, in, out int64, bp time.Duration, now time.Time) {
	if r.attempt != attempt || !r.sampled || in < r.in || out < r.out || int64(bp) < r.bp || now.Before(r.at) {
		*r = rates{attempt: attempt, at: now, sampled: true, in: in, out: out, bp: int64(bp)}
		return
	}
	dt := now.Sub(r.at)
	if dt < RateWindow {
		return
	}
	sec := dt.Seconds()
	r.inRate = float64(in-r.in) / sec
	r.outRate = float64(out-r.out) / sec
	r.backpressure = min(max(float64(int64(bp)-r.bp)/float64(dt), 0), 1)
	r.at, r.in, r.out, r.bp = now, in, out, int64(bp)
}
