package dataflow

import (
	"sync/atomic"

	"github.com/weirstream/weir/stream"
)

// eventKind is what travels on a channel. Events of one channel are delivered
// in order.
type eventKind uint8

const (
	eventBatch eventKind = iota + 1
	eventWatermark
	eventEndOfPartition
	// eventBarrier is a checkpoint barrier: value is the checkpoint id, ts
	// the trigger time (Unix ms). Like watermarks it needs no credit and
	// keeps its place among the channel's batches.
	eventBarrier
	// eventError is not sent by producers: the exchange injects it when the
	// stream feeding a channel breaks, so that the consuming task fails.
	eventError
)

func (k eventKind) String() string {
	switch k {
	case eventBatch:
		return "batch"
	case eventWatermark:
		return "watermark"
	case eventEndOfPartition:
		return "end-of-partition"
	case eventBarrier:
		return "barrier"
	case eventError:
		return "error"
	}
	return "invalid"
}

// event is one item of a channel. A batch event carries either a batch
// (in-memory channels, passed by pointer) or its encoding (network channels,
// decoded by the consuming task's goroutine).
//
// Events are copied into and out of every channel's buffer, so the fields
// are ordered to keep the struct small (80 bytes).
type event struct {
	kind eventKind
	// zstd: the encoding in buf is compressed (ExchangeConfig.Compression).
	zstd bool
	// full, on a barrier: the checkpoint is a savepoint, whose keyed state
	// is snapshotted in the canonical format whatever the backend.
	full bool
	// unaligned, on a barrier: the checkpoint is unaligned; at a task that
	// reads it the barrier overtakes the batches buffered ahead of it
	// (inputGate.pushBounded), which it marks with before.
	unaligned bool
	// final, on an aligned barrier: a source whose input ended sent it, so
	// the checkpoint may be the job's final one and must stay aligned (no
	// switch on TaskSpec.AlignedCheckpointTimeout): two-phase-commit sinks
	// downstream must see all the data before it.
	final bool
	// replay: a batch of restored channel state, pushed without a credit
	// (none goes back to the producer when it is taken).
	replay bool
	batch  *stream.Batch
	// buf, if not nil, holds the batch's encoding (data) and goes back to
	// exchangePool once the batch is decoded or dropped; then its bytes
	// return to mem's network memory.
	buf *[]byte
	mem *Exchange
	// held, if not nil, is the consuming task's count of network memory,
	// which buf's bytes leave too.
	held *atomic.Int64
	// value: the watermark timestamp or checkpoint id; on a batch being
	// sent, its estimated size when known (outputChannel.sizeOf).
	value int64
	ts    int64 // barrier: checkpoint trigger time (Unix ms)
	// before, on a batch, is the id of the latest unaligned checkpoint
	// whose barrier overtook it in its channel's buffer (0: none).
	before int64
	err    error
}

// data is the encoding of a network batch (nil for one passed in memory).
func (e *event) data() []byte {
	if e.buf == nil {
		return nil
	}
	return *e.buf
}

// release frees what an event holds when it is dropped.
func (e *event) release() {
	if e.batch != nil {
		e.batch.Release()
		e.batch = nil
	}
	if e.buf != nil {
		if e.mem != nil {
			e.mem.free(len(*e.buf))
			e.mem = nil
		}
		if e.held != nil {
			e.held.Add(-int64(len(*e.buf)))
			e.held = nil
		}
		exchangePool.Put(e.buf)
		e.buf = nil
	}
}

// ring is a FIFO queue that reuses its buffer, whose length is 0 or a power
// of two (grow). The first buffer holds two elements: a wide job has a
// ring per channel, and most hold a batch and a watermark at most, so that
// a larger first buffer would be memory that the garbage collector scans on
// every cycle (events hold pointers) for nothing; a busy ring doubles to
// its size once.
type ring[T any] struct {
	buf        []T
	head, size int
}

func (q *ring[T]) len() int { return q.size }

func (q *ring[T]) push(v T) {
	q.grow()
	q.buf[(q.head+q.size)&(len(q.buf)-1)] = v
	q.size++
}

// pushFront adds v as the oldest element.
func (q *ring[T]) pushFront(v T) {
	q.grow()
	q.head = (q.head + len(q.buf) - 1) & (len(q.buf) - 1)
	q.buf[q.head] = v
	q.size++
}

func (q *ring[T]) grow() {
	if q.size == len(q.buf) {
		buf := make([]T, max(2, 2*len(q.buf)))
		for i := 0; i < q.size; i++ {
			buf[i] = q.buf[(q.head+i)&(len(q.buf)-1)]
		}
		q.buf, q.head = buf, 0
	}
}

// last returns the newest element, or nil.
func (q *ring[T]) last() *T {
	if q.size == 0 {
		return nil
	}
	return &q.buf[(q.head+q.size-1)&(len(q.buf)-1)]
}

// peek returns the oldest element; the queue must not be empty.
func (q *ring[T]) peek() *T { return &q.buf[q.head] }

// at returns the i-th oldest element, i < len().
func (q *ring[T]) at(i int) *T { return &q.buf[(q.head+i)&(len(q.buf)-1)] }

// pop removes and returns the oldest element; the queue must not be empty.
func (q *ring[T]) pop() T {
	var zero T
	v := q.buf[q.head]
	q.buf[q.head] = zero
	q.head = (q.head + 1) & (len(q.buf) - 1)
	q.size--
	return v
}

// eventQueue is an input channel's buffer: a FIFO of events whose oldest
// one lives in the queue itself. A channel of a wide job mostly holds no
// event or one (a barrier, a watermark, a batch of a few rows), so most
// channels never allocate a buffer: a push writes into memory the push
// touches anyway, and the garbage collector has no buffers of thousands of
// idle channels to scan.
type eventQueue struct {
	first event       // the oldest event, if size > 0
	rest  ring[event] // the others, oldest first
	size  int
}

func (q *eventQueue) len() int { return q.size }

func (q *eventQueue) push(e event) {
	if q.size == 0 {
		q.first = e
	} else {
		q.rest.push(e)
	}
	q.size++
}

// pushFront adds e as the oldest event.
func (q *eventQueue) pushFront(e event) {
	if q.size > 0 {
		q.rest.pushFront(q.first)
	}
	q.first = e
	q.size++
}

// last returns the newest event, or nil.
func (q *eventQueue) last() *event {
	switch {
	case q.size == 0:
		return nil
	case q.rest.len() > 0:
		return q.rest.last()
	}
	return &q.first
}

// peek returns the oldest event; the queue must not be empty.
func (q *eventQueue) peek() *event { return &q.first }

// at returns the i-th oldest event, i < len().
func (q *eventQueue) at(i int) *event {
	if i == 0 {
		return &q.first
	}
	return q.rest.at(i - 1)
}

// pop removes and returns the oldest event; the queue must not be empty.
func (q *eventQueue) pop() event {
	e := q.first
	if q.rest.len() > 0 {
		q.first = q.rest.pop()
	} else {
		q.first = event{}
	}
	q.size--
	return e
}
