package dataflow

import (
	"context"
	"sync"

	"github.com/weirstream/weir/stream"
)

// outputChannel is the producing end of one channel, written by one task
// goroutine. It holds the credits its consumer granted: a batch is sent only
// with a credit, and other events only once the consumer exists (its first
// grant), so a channel never carries anything its consumer cannot hold.
type outputChannel struct {
	key  channelKey
	conn *peerConn // nil for an in-memory channel
	id   uint32    // the channel's number on conn's stream
	wake chan struct{}
	// sentEnd records that end-of-partition was sent (task goroutine only).
	sentEnd bool
	// payloadHint is the size of the last batch encoded for the network
	// (task goroutine only), to size the next one's buffer.
	payloadHint int
	// backpressure, if not nil, accumulates the time send waits for
	// credit (the producing task's Metrics; set before the first send).
	backpressure *Metrics
	// deferred channels (those of an ExactlyOnce source task, see
	// TriggerUnalignedCheckpoint) never wait in put: what cannot go at once
	// waits in pending, in order, until the task goroutine flushes it as
	// credit arrives, so that the task handles checkpoint triggers while
	// its output is backpressured. Task goroutine only.
	deferred bool
	pending  ring[event]

	mu struct {
		sync.Mutex
		credits   int
		connected bool
		local     *inputChannel // the consumer, for in-memory channels
	}
}

var _ creditSink = (*outputChannel)(nil)

func (o *outputChannel) connect(in *inputChannel, credits int) {
	o.mu.Lock()
	o.mu.local = in
	o.mu.Unlock()
	o.grant(credits)
}

func (o *outputChannel) grant(n int) {
	o.mu.Lock()
	o.mu.connected = true
	o.mu.credits += n
	o.mu.Unlock()
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// put is send for a channel that may be deferred: a deferred channel
// queues what cannot go at once instead of waiting for it.
func (o *outputChannel) put(ctx context.Context, e event) error {
	if !o.deferred {
		return o.send(ctx, e)
	}
	if o.pending.len() > 0 {
		o.pending.push(e)
		return nil
	}
	sent, err := o.trySend(e)
	if err == nil && !sent {
		o.pending.push(e)
	}
	return err
}

// trySend delivers e if it can go without waiting: it has a credit (a
// batch) or the consumer exists (other events). It reports whether it
// took e; on an error it released e. A broken network stream is an error,
// as in send: a deferred channel must not wait for credit that will never
// come.
func (o *outputChannel) trySend(e event) (bool, error) {
	if o.conn != nil {
		select {
		case <-o.conn.done:
			e.release()
			return false, o.conn.err
		default:
		}
	}
	o.mu.Lock()
	needCredit := e.kind == eventBatch
	if !o.mu.connected || needCredit && o.mu.credits == 0 {
		o.mu.Unlock()
		return false, nil
	}
	if needCredit {
		o.mu.credits--
	}
	local := o.mu.local
	o.mu.Unlock()
	return true, o.deliver(local, e)
}

// deliver hands e, for which the channel holds what it needs, to the
// consumer (local) or the network stream.
func (o *outputChannel) deliver(local *inputChannel, e event) error {
	if e.kind == eventEndOfPartition {
		o.sentEnd = true
	}
	if o.conn == nil {
		local.gate.push(local, e)
		return nil
	}
	return o.conn.enqueue(o, e)
}

// flush sends what waits in pending while it can go, and reports whether
// anything still waits.
func (o *outputChannel) flush() (bool, error) {
	for o.pending.len() > 0 {
		e := *o.pending.peek()
		sent, err := o.trySend(e)
		if sent || err != nil {
			o.pending.pop()
		}
		if err != nil {
			return true, err
		}
		if !sent {
			return true, nil
		}
	}
	return false, nil
}

// overtake sends barrier e ahead of the batches waiting in pending (an
// unaligned checkpoint at a source). They stay in pending, to be sent
// after it; the caller recorded them as channel state first.
func (o *outputChannel) overtake(e event) error {
	sent, err := o.trySend(e)
	if err != nil || sent {
		return err
	}
	// No consumer yet: the barrier goes first once it exists.
	var q ring[event]
	q.push(e)
	for o.pending.len() > 0 {
		q.push(o.pending.pop())
	}
	o.pending = q
	return nil
}

// pendingBatches calls f with every batch waiting in pending, oldest first.
func (o *outputChannel) pendingBatches(f func(*stream.Batch)) {
	for i := 0; i < o.pending.len(); i++ {
		if e := o.pending.at(i); e.kind == eventBatch {
			f(e.batch)
		}
	}
}

// dropPending releases what waits in pending (the task is ending).
func (o *outputChannel) dropPending() {
	for o.pending.len() > 0 {
		e := o.pending.pop()
		e.release()
	}
}

// send delivers e, waiting for a credit (batches) or for the consumer to
// exist (other events). The channel takes ownership of e's batch, and
// releases it on error. It returns ctx.Err() when ctx is done first, and the
// stream's error when the network stream breaks.
func (o *outputChannel) send(ctx context.Context, e event) error {
	needCredit := e.kind == eventBatch
	var broken <-chan struct{}
	if o.conn != nil {
		broken = o.conn.done
	}
	waiting := false // for credit, counted in o.backpressure
	defer func() {
		if waiting {
			o.backpressure.endBackpressure()
		}
	}()
	for {
		o.mu.Lock()
		if o.mu.connected && (!needCredit || o.mu.credits > 0) {
			if needCredit {
				o.mu.credits--
			}
			local := o.mu.local
			o.mu.Unlock()
			return o.deliver(local, e)
		}
		noCredit := o.mu.connected && needCredit
		o.mu.Unlock()
		if noCredit && !waiting && o.backpressure != nil {
			waiting = true
			o.backpressure.startBackpressure()
		}
		select {
		case <-o.wake:
		case <-ctx.Done():
			e.release()
			return ctx.Err()
		case <-broken:
			e.release()
			return o.conn.err
		}
	}
}

// localConsumer returns the consumer of an in-memory channel, or nil.
func (o *outputChannel) localConsumer() *inputChannel {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.mu.local
}
