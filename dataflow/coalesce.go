package dataflow

import (
	"context"
	"time"

	"github.com/weirstream/weir/stream"
)

// Coalescing: a channel to a peer gathers consecutive batches into one of up
// to ExchangeConfig.CoalesceRows rows before it sends them, while its task
// keeps producing. Each batch that crosses the network costs the same
// hand-offs (encoding setup, a queue item, a frame entry, a credit, a push
// into the consumer's buffer and their goroutine wake-ups) and a string
// dictionary of its own, whatever its size; fewer, larger batches spread
// that over more rows. Gathering adds no latency when the task has nothing
// to do: what a channel holds goes out before the task waits for input
// (outputWriter.flushLinger), before any other event on the channel
// (watermark, barrier, end of partition), and at the latest
// CoalesceTimeout after the first batch was held.
//
// What a channel holds counts as sent from the task's side in every
// respect the checkpoints see:
//   - a deferred channel (a source of an exactly-once job) treats it like
//     its pending batches: part of the channel state an unaligned barrier
//     records, sent after the barrier;
//   - a gated task's channel starts holding batches only while it has a
//     credit, which it keeps until it sends them, so that what it holds can
//     always go ahead of an unaligned barrier without waiting;
//   - any other channel sends what it holds with the usual wait for
//     credit.

// lingerSet lists the channels of one task's output that hold batches
// (task goroutine only).
type lingerSet struct {
	chans   []*outputChannel
	since   time.Time // when the first of them started holding
	timeout time.Duration
}

// lingerBatch holds b (which it owns) on o to be sent with the batches that
// follow it, or sends what o holds and b once they reach o.coalesce rows.
// What o holds stays below o.coalesceBytes by the values' estimated size
// (batchBytes), and on a channel with a byte budget below the size a batch
// would be cut to (pieceRows).
func (o *outputChannel) lingerBatch(ctx context.Context, b *stream.Batch) error {
	size := batchBytes(b)
	if len(o.linger) > 0 && (!o.mayJoin(b) || !o.mayHold(o.lingerBytes+size)) {
		if err := o.flushLinger(ctx); err != nil {
			b.Release()
			return err
		}
	}
	if len(o.linger) == 0 {
		if b.Len() >= o.coalesce || !joinable(b) || !o.mayHold(size) {
			return o.putNow(ctx, event{kind: eventBatch, batch: b, value: size})
		}
		if !o.inLingerSet {
			s := o.lingerSet
			if len(s.chans) == 0 {
				s.since = time.Now()
			}
			s.chans = append(s.chans, o)
			o.inLingerSet = true
		}
	}
	o.linger = append(o.linger, b)
	o.lingerRows += b.Len()
	o.lingerBytes += size
	if o.lingerRows >= o.coalesce {
		return o.flushLinger(ctx)
	}
	return nil
}

// mayHold reports whether o may hold batches of size bytes (batchBytes) to
// coalesce them: less than o.coalesceBytes; on a channel with a byte
// budget, also less than the size a batch would be cut to; on a gated
// task's channel, only what it could send at once.
func (o *outputChannel) mayHold(size int64) bool {
	if size >= o.coalesceBytes {
		return false
	}
	if o.budget == nil && !o.lingerNeedsCredit {
		return true
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.budget != nil {
		if limit := o.mu.flow.limit; limit > 0 && size >= max(limit/2, minPieceBytes) {
			return false
		}
	}
	return !o.lingerNeedsCredit || o.mu.connected && o.mayTakeLocked(size)
}

// mayJoin reports whether b may be sent in one batch with those o holds:
// the same schema, and event times on all of them or on none.
func (o *outputChannel) mayJoin(b *stream.Batch) bool {
	first := o.linger[0]
	return joinable(b) && b.Schema == first.Schema && hasTimes(b) == hasTimes(first)
}

// joinable reports whether b may be joined to others: it has rows, and an
// event time on each row or none.
func joinable(b *stream.Batch) bool {
	return b.Len() > 0 && (len(b.Times) == 0 || len(b.Times) == b.Len())
}

func hasTimes(b *stream.Batch) bool { return len(b.Times) != 0 }

// flushLinger sends what o holds, as one batch: encoded here, without
// building it, when o holds more than one. The event carries the batches'
// estimated size (sizeOf).
func (o *outputChannel) flushLinger(ctx context.Context) error {
	var e event
	switch len(o.linger) {
	case 0:
		return nil
	case 1:
		e = event{kind: eventBatch, batch: o.linger[0], value: o.lingerBytes}
		o.linger[0] = nil
	default:
		e = event{kind: eventBatch, buf: o.encode(o.linger), value: o.lingerBytes}
	}
	o.dropLinger()
	return o.putOne(ctx, e)
}

// dropLinger releases what o holds (the task is ending, or flushLinger took
// it).
func (o *outputChannel) dropLinger() {
	for _, b := range o.linger {
		b.Release() // nil for one flushLinger took
	}
	clear(o.linger)
	o.linger = o.linger[:0]
	o.lingerRows, o.lingerBytes = 0, 0
}

// lingering reports whether a channel of the output may hold batches.
func (w *outputWriter) lingering() bool { return len(w.linger.chans) > 0 }

// lingerDue reports whether the channels have held batches for the
// coalescing timeout.
func (w *outputWriter) lingerDue() bool {
	return len(w.linger.chans) > 0 && time.Since(w.linger.since) >= w.linger.timeout
}

// flushLinger sends what every channel of the output holds.
func (w *outputWriter) flushLinger() error {
	s := &w.linger
	var err error
	for i, o := range s.chans {
		o.inLingerSet = false
		if err == nil {
			err = o.flushLinger(w.ctx)
		}
		s.chans[i] = nil
	}
	s.chans = s.chans[:0]
	return err
}
