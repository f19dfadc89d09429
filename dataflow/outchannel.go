package dataflow

import (
	"context"
	"sync"
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
			if e.kind == eventEndOfPartition {
				o.sentEnd = true
			}
			if o.conn == nil {
				local.gate.push(local, e)
				return nil
			}
			return o.conn.enqueue(o, e)
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
