package dataflow

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weirstream/weir/dataflow/batchcodec"
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
	// dictBytes, above 0, is the size of the channel dictionary of a
	// channel to a peer whose batches have string columns
	// (ExchangeConfig.DictionaryBytes); enc, its encoder, made for the
	// first batch. With enc the channel
	// encodes each batch as it takes it (put), so that batches are encoded
	// in the order they are sent, as the receiver decodes them. Task
	// goroutine only.
	dictBytes int
	enc       *batchcodec.Encoder
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
	// pendingChans, if not nil, counts the channels of the partitioner
	// that have events in pending (task goroutine only): outputWriter.flush
	// looks only at partitioners with such channels, and while there are
	// any the partitioner sends watermarks on every channel rather than by
	// cell (wmcell.go).
	pendingChans *int
	// budget bounds the bytes in flight on the channel (see
	// ExchangeConfig.ChannelBytes and DebloatTarget); nil when unbounded.
	budget *flowBudget
	// coalesce, when above 0, is the rows up to which the channel gathers
	// consecutive batches before it sends them (coalesce.go): linger
	// holds them, lingerRows counts their rows, and the channel is listed
	// in lingerSet while it may hold any. It holds less than
	// coalesceBytes (ExchangeConfig.MaxFrameBytes). lingerNeedsCredit (a gated
	// task's channel): hold only what could be sent at once. Task
	// goroutine only.
	coalesce          int
	coalesceBytes     int64
	lingerNeedsCredit bool
	linger            []*stream.Batch
	lingerRows        int
	lingerBytes       int64 // their estimated size (batchBytes)
	lingerSet         *lingerSet
	inLingerSet       bool
	// full, if not nil, counts the channels of the task's output that
	// cannot take a batch now (outputWriter.full): the channel adds itself
	// while it is connected and has no credit (or budget) left.
	full *atomic.Int64

	mu struct {
		sync.Mutex
		credits   int
		connected bool
		local     *inputChannel // the consumer, for in-memory channels
		flow      flowState     // with budget only
		counted   bool          // counted in full
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
	if o.budget != nil {
		o.mu.flow.returned(n, o.budget, time.Now())
	}
	o.countFullLocked()
	o.mu.Unlock()
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// put is send for a channel that may be deferred: a deferred channel
// queues what cannot go at once instead of waiting for it. A channel to a
// peer may hold a batch to send it with the next ones (coalesce.go). On a
// channel with a byte budget a batch larger than half the budget goes in
// pieces.
func (o *outputChannel) put(ctx context.Context, e event) error {
	if o.coalesce > 0 {
		if e.kind == eventBatch {
			return o.lingerBatch(ctx, e.batch)
		}
		if err := o.flushLinger(ctx); err != nil {
			e.release()
			return err
		}
	}
	return o.putNow(ctx, e)
}

// putNow is put without coalescing.
func (o *outputChannel) putNow(ctx context.Context, e event) error {
	if o.budget != nil && e.kind == eventBatch {
		if rows := o.pieceRows(e.batch); rows > 0 {
			return o.putPieces(ctx, e.batch, rows)
		}
	}
	return o.putOne(ctx, e)
}

// putOne is put without cutting batches.
func (o *outputChannel) putOne(ctx context.Context, e event) error {
	if o.dictBytes > 0 && e.kind == eventBatch && e.batch != nil {
		if o.budget != nil && e.value == 0 {
			e.value = batchBytes(e.batch)
		}
		one := [1]*stream.Batch{e.batch}
		e.buf = o.encode(one[:])
		e.batch.Release()
		e.batch = nil
	}
	if !o.deferred {
		return o.send(ctx, e)
	}
	if o.pending.len() > 0 {
		o.queuePending(e)
		return nil
	}
	sent, err := o.trySend(e)
	if err == nil && !sent {
		o.queuePending(e)
	}
	return err
}

// queuePending adds e at the end of pending.
func (o *outputChannel) queuePending(e event) {
	if o.pending.len() == 0 && o.pendingChans != nil {
		*o.pendingChans++
	}
	o.pending.push(e)
}

// popPending removes the oldest event of pending, which must not be empty.
func (o *outputChannel) popPending() event {
	e := o.pending.pop()
	if o.pending.len() == 0 && o.pendingChans != nil {
		*o.pendingChans--
	}
	return e
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
	needCredit := e.kind == eventBatch
	size := o.sizeOf(e)
	o.mu.Lock()
	if !o.mu.connected || needCredit && !o.mayTakeLocked(size) {
		o.mu.Unlock()
		return false, nil
	}
	if needCredit {
		o.takeLocked(size)
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
			o.popPending()
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
// after it, and so do the batches the channel holds to coalesce them; the
// caller recorded them all as channel state first.
func (o *outputChannel) overtake(e event) error {
	sent, err := o.trySend(e)
	if err != nil || sent {
		return err
	}
	// No consumer yet: the barrier goes first once it exists.
	if o.pending.len() == 0 && o.pendingChans != nil {
		*o.pendingChans++
	}
	var q ring[event]
	q.push(e)
	for o.pending.len() > 0 {
		q.push(o.pending.pop())
	}
	o.pending = q
	return nil
}

// encode returns a pooled buffer holding the encoding of bs, with the
// channel dictionary if the channel has one. The dictionary may forget its
// entries only while nothing waits in pending: pendingData decodes what
// waits there with the dictionary as it is.
func (o *outputChannel) encode(bs []*stream.Batch) *[]byte {
	buf := exchangePool.Get(max(o.payloadHint, 1024))
	if o.enc == nil && o.dictBytes > 0 {
		o.enc = batchcodec.NewEncoder(o.dictBytes)
	}
	if o.enc != nil {
		*buf = o.enc.AppendBatches((*buf)[:0], bs, o.pending.len() == 0)
	} else {
		*buf = batchcodec.AppendBatches((*buf)[:0], bs)
	}
	o.payloadHint = len(*buf)
	return buf
}

// hasStrings reports whether schema s has a string column.
func hasStrings(s *stream.Schema) bool {
	if s == nil {
		return false
	}
	for _, f := range s.Fields {
		if f.Type == stream.TypeString {
			return true
		}
	}
	return false
}

// pendingData calls f with the encoding of every batch waiting in pending,
// oldest first, then of those the channel holds to coalesce them: each an
// encoding of its own, without the channel dictionary.
func (o *outputChannel) pendingData(schema *stream.Schema, f func(data []byte)) error {
	var dec *batchcodec.Decoder
	for i := 0; i < o.pending.len(); i++ {
		e := o.pending.at(i)
		switch {
		case e.kind != eventBatch:
		case e.batch != nil:
			f(batchcodec.Append(nil, e.batch))
		default: // encoded by put or flushLinger
			if dec == nil && o.enc != nil {
				dec = o.enc.Decoder()
			}
			data, err := selfContained(e, dec, schema)
			if err != nil {
				return err
			}
			f(data)
		}
	}
	for _, b := range o.linger {
		f(batchcodec.Append(nil, b))
	}
	return nil
}

// dropPending releases what waits in pending and what the channel holds
// to coalesce (the task is ending).
func (o *outputChannel) dropPending() {
	o.dropLinger()
	for o.pending.len() > 0 {
		e := o.popPending()
		e.release()
	}
}

// send delivers e, waiting for a credit (batches) or for the consumer to
// exist (other events). The channel takes ownership of e's batch, and
// releases it on error. It returns ctx.Err() when ctx is done first, and the
// stream's error when the network stream breaks.
func (o *outputChannel) send(ctx context.Context, e event) error {
	needCredit := e.kind == eventBatch
	size := o.sizeOf(e)
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
		if o.mu.connected && (!needCredit || o.mayTakeLocked(size)) {
			if needCredit {
				o.takeLocked(size)
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

// sizeOf is the bytes a batch event counts against the channel's budget;
// 0 without one. A batch event's value, when set (by coalescing, which
// measured it already), is its size.
func (o *outputChannel) sizeOf(e event) int64 {
	if o.budget == nil || e.kind != eventBatch {
		return 0
	}
	if e.value > 0 || e.batch == nil {
		return e.value
	}
	return batchBytes(e.batch)
}

// mayTakeLocked reports whether a batch of size bytes may go now: the
// channel holds a credit and, with a budget, the batch fits in what is
// left of it, or nothing is in flight (a batch larger than the budget
// goes alone). o.mu must be held.
func (o *outputChannel) mayTakeLocked(size int64) bool {
	if o.mu.credits == 0 {
		return false
	}
	if o.budget == nil {
		return true
	}
	f := &o.mu.flow
	return f.sizes.len() == 0 || f.limit <= 0 || f.inflight+size <= f.limit
}

// takeLocked spends a credit on a batch of size bytes. o.mu must be held.
func (o *outputChannel) takeLocked(size int64) {
	o.mu.credits--
	if o.budget != nil {
		f := &o.mu.flow
		if f.sizes.buf == nil {
			// Within the channel for the default credits: no buffer of
			// its own to allocate and to miss in the cache.
			f.sizes.buf = f.inline[:]
		}
		f.sizes.push(size)
		o.mu.flow.inflight += size
	}
	o.countFullLocked()
}

// countFullLocked keeps o's place in the count of full channels: a
// connected channel that could not take a batch now is full. o.mu must
// be held.
func (o *outputChannel) countFullLocked() {
	if o.full == nil {
		return
	}
	full := o.mu.connected && (o.mu.credits == 0 ||
		o.budget != nil && o.mu.flow.sizes.len() > 0 && o.mu.flow.limit > 0 && o.mu.flow.inflight >= o.mu.flow.limit)
	if full != o.mu.counted {
		o.mu.counted = full
		if full {
			o.full.Add(1)
		} else {
			o.full.Add(-1)
		}
	}
}

// brokenErr returns the error of o's network stream if it broke.
func (o *outputChannel) brokenErr() error {
	if o.conn == nil {
		return nil
	}
	select {
	case <-o.conn.done:
		return o.conn.err
	default:
		return nil
	}
}

// pieceRows returns the rows of each piece b is sent in, or 0 to send it
// whole: a batch larger than half the channel's budget goes in pieces of
// about half the budget (at least minPieceBytes each), so that the budget
// holds more than one piece and the consumer works on one while the next
// travels.
func (o *outputChannel) pieceRows(b *stream.Batch) int {
	o.mu.Lock()
	limit := o.mu.flow.limit
	o.mu.Unlock()
	n := b.Len()
	if limit <= 0 || n < 2 {
		return 0
	}
	size := batchBytes(b)
	piece := max(limit/2, minPieceBytes)
	if size <= piece {
		return 0
	}
	rows := int(int64(n) * piece / size)
	if rows < 1 {
		rows = 1
	}
	if rows >= n {
		return 0
	}
	return rows
}

// putPieces sends b (which it owns) in pieces of rows rows, in order.
func (o *outputChannel) putPieces(ctx context.Context, b *stream.Batch, rows int) error {
	n := b.Len()
	k := (n + rows - 1) / rows
	dest, pos := make([]int32, n), make([]int32, n)
	for i := range dest {
		dest[i], pos[i] = int32(i/rows), int32(i%rows)
	}
	subs := make([]*stream.Batch, k)
	for t := range subs {
		m := min(rows, n-t*rows)
		subs[t] = stream.NewBatch(b.Schema, m)
		subs[t].SetLen(m)
	}
	scatter(b, dest, pos, subs, make([]*stream.Column, k))
	b.Release()
	var err error
	for _, s := range subs {
		if err != nil {
			s.Release()
			continue
		}
		err = o.putOne(ctx, event{kind: eventBatch, batch: s})
	}
	return err
}

// Buffer debloating bounds.
const (
	// debloatPeriod is how often a channel measures the rate its consumer
	// takes its bytes at.
	debloatPeriod = 200 * time.Millisecond
	// minBudgetBytes is the least budget debloating sets.
	minBudgetBytes = 1 << 10
	// minPieceBytes is the least size a batch is cut down to: smaller
	// batches would cost the consumer more per record than the budget
	// saves.
	minPieceBytes = 8 << 10
)

// flowBudget is a channel's byte budget settings (immutable).
type flowBudget struct {
	// fixed is the budget in bytes; 0: none but debloating's.
	fixed int64
	// target is the time the consumer should take to work off what is in
	// flight; 0: no debloating.
	target time.Duration
}

// flowState is what a bounded channel measures (under outputChannel.mu).
type flowState struct {
	sizes    ring[int64] // bytes of the batches in flight, oldest first
	inline   [4]int64    // sizes' first buffer: the default credits; a power of two (ring)
	inflight int64       // their sum
	// limit is the budget now: fixed, lowered to rate × target once a rate
	// is measured; 0: none yet.
	limit int64
	// The consumer's rate: bytes returned since winStart, and the smoothed
	// bytes per second.
	winStart time.Time
	winBytes int64
	rate     float64
}

// returned accounts n credits coming back at now: the consumer took the n
// oldest batches in flight. The first credits (the consumer's initial
// grant) find nothing in flight and free nothing.
func (f *flowState) returned(n int, b *flowBudget, now time.Time) {
	for ; n > 0 && f.sizes.len() > 0; n-- {
		s := f.sizes.pop()
		f.inflight -= s
		f.winBytes += s
	}
	if b.target <= 0 {
		return
	}
	if f.winStart.IsZero() {
		f.winStart = now
		f.winBytes = 0
		return
	}
	d := now.Sub(f.winStart)
	if d < debloatPeriod {
		return
	}
	r := float64(f.winBytes) / d.Seconds()
	if f.rate == 0 {
		f.rate = r
	} else {
		f.rate = 0.5*f.rate + 0.5*r
	}
	f.winStart, f.winBytes = now, 0
	limit := max(int64(f.rate*b.target.Seconds()), minBudgetBytes)
	if b.fixed > 0 {
		limit = min(limit, b.fixed)
	}
	f.limit = limit
}

// batchBytes estimates the memory of b's values: 8 bytes per number or
// timestamp, 1 per bool, a string's length plus its 16-byte header.
func batchBytes(b *stream.Batch) int64 {
	n := b.Len()
	var size int64
	for j := range b.Cols {
		c := &b.Cols[j]
		switch c.Type {
		case stream.TypeInt64, stream.TypeTimestamp, stream.TypeFloat64:
			size += 8 * int64(n)
		case stream.TypeBool:
			size += int64(n)
		case stream.TypeString:
			size += 16 * int64(n)
			for _, v := range c.Strs[:n] {
				size += int64(len(v))
			}
		}
	}
	if len(b.Times) != 0 {
		size += 8 * int64(n)
	}
	return size
}

// setFullCounter makes o count itself in full while it cannot take a
// batch (outputWriter.gated).
func (o *outputChannel) setFullCounter(full *atomic.Int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.full = full
	o.countFullLocked()
}
