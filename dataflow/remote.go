package dataflow

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/weirstream/weir/internal/errkind"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/stream"
)

// This file is the network adapter of the exchange: the only code that sees
// gRPC streams and weirpb messages.

// Register registers the exchange's gRPC service (weir.v1.ExchangeService)
// on s, through which peers deliver data for this taskmanager's tasks. Its
// streams carry frames in the exchange's own encoding (frame.go), not
// protobuf messages.
func (x *Exchange) Register(s *grpc.Server) {
	s.RegisterService(&grpc.ServiceDesc{
		ServiceName: "weir.v1.ExchangeService",
		HandlerType: (*any)(nil),
		Streams: []grpc.StreamDesc{{
			StreamName:    "Connect",
			Handler:       func(_ any, stream grpc.ServerStream) error { return x.serveInbound(stream) },
			ServerStreams: true,
			ClientStreams: true,
		}},
		Metadata: "weirpb/exchange.proto",
	}, x)
}

// connectStreamDesc describes the stream to a peer's exchange.
var connectStreamDesc = grpc.StreamDesc{StreamName: "Connect", ServerStreams: true, ClientStreams: true}

func keyToProto(k channelKey) *weirpb.ChannelKey {
	return &weirpb.ChannelKey{
		JobId: k.JobID, Attempt: k.Attempt,
		UpstreamVertex: int32(k.UpstreamVertex), UpstreamSubtask: int32(k.UpstreamSubtask),
		DownstreamVertex: int32(k.DownstreamVertex), DownstreamInput: int32(k.DownstreamInput),
		DownstreamSubtask: int32(k.DownstreamSub),
	}
}

func keyFromProto(k *weirpb.ChannelKey) channelKey {
	return channelKey{
		JobID: k.GetJobId(), Attempt: k.GetAttempt(),
		UpstreamVertex: int(k.GetUpstreamVertex()), UpstreamSubtask: int(k.GetUpstreamSubtask()),
		DownstreamVertex: int(k.GetDownstreamVertex()), DownstreamInput: int(k.GetDownstreamInput()),
		DownstreamSub: int(k.GetDownstreamSubtask()),
	}
}

// ---- sending side ----

// peerConn is the one stream from this exchange to a peer's. It is opened
// lazily by the first channel to that peer and lives until it breaks or the
// exchange closes.
type peerConn struct {
	x      *Exchange
	addr   string
	cc     *grpc.ClientConn
	cancel context.CancelFunc
	wake   chan struct{}

	done     chan struct{}
	failOnce sync.Once
	err      error // set before done is closed

	mu struct {
		sync.Mutex
		queue  []outItem
		spare  []outItem
		nextID uint32
		chans  idTable[outputChannel]
	}
}

// outItem is one queued piece of a frame: a channel opening, an event or a
// channel closing.
type outItem struct {
	id      uint32
	open    *weirpb.ChannelKey
	close   chan struct{} // closed once the closing is handed to gRPC
	kind    eventKind
	payload *[]byte
	value   int64
	ts      int64
	full    bool // barrier: see event.full
	// unaligned: barrier of an unaligned checkpoint (event.unaligned).
	unaligned bool
	// final: an aligned barrier that must stay aligned (event.final).
	final bool
	zstd  bool // batch: payload is compressed
	// cell: a watermark or an aligned barrier for the cell of channel
	// id's upstream subtask and edge at the peer (wmcell.go), not an
	// event of the channel.
	cell bool
}

func (x *Exchange) peer(addr string) (*peerConn, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.mu.closed {
		return nil, ErrExchangeClosed
	}
	if c := x.mu.peers[addr]; c != nil {
		return c, nil
	}
	cc, err := grpc.NewClient(addr, x.cfg.DialOptions...)
	if err != nil {
		return nil, fmt.Errorf("dataflow: exchange address %q of a downstream taskmanager: %w", addr, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &peerConn{x: x, addr: addr, cc: cc, cancel: cancel, wake: make(chan struct{}, 1), done: make(chan struct{})}
	x.mu.peers[addr] = c
	x.wg.Add(1)
	go c.run(ctx)
	return c, nil
}

func (c *peerConn) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *peerConn) openChannel(o *outputChannel) {
	c.mu.Lock()
	o.id = c.mu.nextID
	c.mu.nextID++
	c.mu.chans.set(o.id, o)
	c.mu.queue = append(c.mu.queue, outItem{id: o.id, open: keyToProto(o.key)})
	c.mu.Unlock()
	c.signal()
}

func (c *peerConn) closeChannel(o *outputChannel) <-chan struct{} {
	flushed := make(chan struct{})
	c.mu.Lock()
	c.mu.chans.delete(o.id)
	c.mu.queue = append(c.mu.queue, outItem{id: o.id, close: flushed})
	c.mu.Unlock()
	c.signal()
	return flushed
}

// enqueue queues e for sending; the caller holds the credit a batch needs.
// A batch is encoded here, on the sending task's goroutine, and released,
// unless it comes encoded (outputChannel.put or flushLinger).
func (c *peerConn) enqueue(o *outputChannel, e event) error {
	select {
	case <-c.done:
		e.release()
		return c.err
	default:
	}
	it := outItem{id: o.id, kind: e.kind, value: e.value, ts: e.ts, full: e.full, unaligned: e.unaligned, final: e.final}
	if e.kind == eventBatch {
		buf := e.buf // encoded by put or flushLinger
		if buf == nil {
			one := [1]*stream.Batch{e.batch}
			buf = o.encode(one[:])
			e.batch.Release()
		}
		if c.x.cfg.Compression == CompressionZstd {
			if z := compressPayload(*buf); z != nil {
				exchangePool.Put(buf)
				buf, it.zstd = z, true
			}
		}
		it.payload = buf
	}
	c.mu.Lock()
	c.mu.queue = append(c.mu.queue, it)
	c.mu.Unlock()
	c.signal()
	return nil
}

// enqueueCell queues it, a watermark or an aligned barrier with its cell
// flag set, for the peer's cell of channel it.id's upstream subtask and
// edge (wmcell.go).
func (c *peerConn) enqueueCell(it outItem) error {
	select {
	case <-c.done:
		return c.err
	default:
	}
	c.mu.Lock()
	c.mu.queue = append(c.mu.queue, it)
	c.mu.Unlock()
	c.signal()
	return nil
}

// fail ends the stream for good; later sends on its channels return err.
func (c *peerConn) fail(err error) {
	c.failOnce.Do(func() {
		switch {
		case errors.Is(err, ErrExchangeClosed):
			c.err = fmt.Errorf("dataflow: network stream to taskmanager %s closed: %w", c.addr, err)
		case errors.Is(err, errRuntimePanic): // not the peer's fault
			c.err = fmt.Errorf("dataflow: network stream to taskmanager %s failed: %w", c.addr, err)
		default:
			c.err = &PeerError{Addr: c.addr, err: fmt.Errorf("dataflow: network stream to taskmanager %s broke: %w; the tasks sending to it fail and are restarted", c.addr, err)}
		}
		close(c.done)
		c.cancel()
		c.x.mu.Lock()
		if c.x.mu.peers[c.addr] == c {
			delete(c.x.mu.peers, c.addr)
		}
		c.x.mu.Unlock()
		c.mu.Lock()
		for _, it := range c.mu.queue {
			if it.payload != nil {
				exchangePool.Put(it.payload)
			}
		}
		c.mu.queue = nil
		c.mu.Unlock()
		c.x.log.Warn("exchange stream to peer ended", "peer", c.addr, "err", err)
	})
}

func (c *peerConn) run(ctx context.Context) {
	defer c.x.wg.Done()
	defer c.cc.Close()
	defer c.recoverPanic("sending to")
	stream, err := c.cc.NewStream(ctx, &connectStreamDesc, weirpb.ExchangeService_Connect_FullMethodName,
		grpc.CallContentSubtype(frameCodecName))
	if err != nil {
		c.fail(err)
		return
	}
	c.x.wg.Add(1)
	go c.readCredits(stream)
	c.writeLoop(stream)
}

// recoverPanic, deferred by each goroutine of the stream, turns a panic of
// the exchange's code into the stream's failure, which fails the tasks
// sending on it, rather than the end of the process. what says what the
// goroutine does with the peer, for the message.
func (c *peerConn) recoverPanic(what string) {
	if p := recover(); p != nil {
		c.fail(runtimePanic(c.x.log, fmt.Sprintf("network stream %s taskmanager %s", what, c.addr), p))
	}
}

func (c *peerConn) readCredits(stream grpc.ClientStream) {
	defer c.x.wg.Done()
	defer c.recoverPanic("receiving credits from")
	type grant struct {
		o *outputChannel
		n int
	}
	var grants []grant
	var resp creditFrame
	for {
		err := stream.RecvMsg(&resp)
		if err != nil {
			if err == io.EOF {
				err = errors.New("the peer ended the stream")
			}
			c.fail(err)
			return
		}
		grants = grants[:0]
		c.mu.Lock()
		for _, g := range resp.grants {
			if o := c.mu.chans.get(g.id); o != nil {
				grants = append(grants, grant{o, int(g.credits)})
			}
		}
		c.mu.Unlock()
		for _, g := range grants {
			g.o.grant(g.n)
		}
	}
}

// take removes the items for the next frame: whatever is queued, up to
// MaxFrameBytes of batch data (at least one item).
func (c *peerConn) take() []outItem {
	c.mu.Lock()
	defer c.mu.Unlock()
	q := c.mu.queue
	if len(q) == 0 {
		return nil
	}
	size, k := 0, 0
	for k < len(q) {
		if q[k].payload != nil {
			s := len(*q[k].payload)
			if k > 0 && size+s > c.x.cfg.MaxFrameBytes {
				break
			}
			size += s
		}
		k++
	}
	if k == len(q) {
		c.mu.queue = c.mu.spare[:0]
		c.mu.spare = nil
		return q
	}
	out := append([]outItem(nil), q[:k]...)
	n := copy(q, q[k:])
	clear(q[n:])
	c.mu.queue = q[:n]
	return out
}

func (c *peerConn) writeLoop(stream grpc.ClientStream) {
	first := true
	var f outFrame
	for {
		select {
		case <-c.wake:
		case <-c.done:
			return
		}
		for {
			items := c.take()
			if len(items) == 0 {
				break
			}
			f = outFrame{items: items}
			if first {
				f.sender = c.x.cfg.SelfAddress
				first = false
			}
			// The codec takes the payloads it encodes (and gRPC returns
			// them to the pool once written); what it did not take is
			// still ours.
			err := stream.SendMsg(&f)
			if err == nil {
				c.x.sentFrames.Add(1)
				c.x.sentBytes.Add(int64(f.size))
			}
			for i := range items {
				it := &items[i]
				if it.payload != nil {
					exchangePool.Put(it.payload)
				}
				if it.close != nil && err == nil {
					close(it.close)
				}
				*it = outItem{}
			}
			f = outFrame{}
			c.mu.Lock()
			if c.mu.spare == nil && cap(items) <= 4096 {
				c.mu.spare = items[:0]
			}
			c.mu.Unlock()
			if err != nil {
				c.fail(err)
				return
			}
		}
	}
}

// ---- receiving side ----

// inboundStream is a stream a peer opened to this exchange.
type inboundStream struct {
	x    *Exchange
	peer string // the sender's exchange address
	wake chan struct{}
	ids  idTable[inboundChannel] // receive goroutine only

	mu struct {
		sync.Mutex
		grants map[uint32]uint32
		closed bool
	}
}

// inboundChannel is a channel a peer opened on an inbound stream (receive
// goroutine only).
type inboundChannel struct {
	key   channelKey
	e     *endpoint
	sink  *remoteSink
	cell  *wmCell // of the channel's upstream subtask and edge
	ended bool
}

// remoteSink sends a channel's credit grants back on the stream it arrives on.
type remoteSink struct {
	s  *inboundStream
	id uint32
	// granted counts the credits granted to the peer for the channel since
	// it opened it. It grows before the grant is sent, so a peer that keeps
	// to its credits never sends more batches than it says. received counts
	// the batches that arrived, so granted - received credits are the
	// peer's.
	granted, received atomic.Int64
	// Guarded by s.mu: returned counts the credits the consumer returned
	// (batches it took), so granted - returned are the channel's, at the
	// peer or in the buffer; withheld counts those kept back for want of
	// network memory; queued says r waits in the exchange's list.
	returned int64
	withheld int
	queued   bool
}

var _ creditSink = (*remoteSink)(nil)

func (r *remoteSink) connect(_ *inputChannel, credits int) { r.give(credits, false) }

// grant returns n credits: the consumer took n batches out of its buffer.
func (r *remoteSink) grant(n int) { r.give(n, true) }

// give grants n credits to the peer. Short of network memory it keeps them
// back (until memory frees) unless the channel holds none: no credit at the
// peer and no batch in the consumer's buffer; then it grants one.
func (r *remoteSink) give(n int, returned bool) {
	s := r.s
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		return
	}
	if returned {
		r.returned += int64(n)
	}
	queue := false
	if s.x.memoryShort() {
		keep := n
		if r.granted.Load()-r.returned == 0 {
			keep = n - 1
		}
		r.withheld += keep
		n -= keep
		queue = keep > 0 && !r.queued
		r.queued = r.queued || queue
	}
	if n > 0 {
		r.granted.Add(int64(n))
		s.mu.grants[r.id] += uint32(n)
	}
	s.mu.Unlock()
	if n > 0 {
		s.signal()
	}
	if queue {
		s.x.wait(r)
	}
}

// release grants the credits withheld for want of network memory.
func (r *remoteSink) release() {
	s := r.s
	s.mu.Lock()
	n := r.withheld
	r.withheld, r.queued = 0, false
	if s.mu.closed || n == 0 {
		s.mu.Unlock()
		return
	}
	r.granted.Add(int64(n))
	s.mu.grants[r.id] += uint32(n)
	s.mu.Unlock()
	s.signal()
}

func (s *inboundStream) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (x *Exchange) serveInbound(stream grpc.ServerStream) error {
	s := &inboundStream{x: x, wake: make(chan struct{}, 1)}
	s.mu.grants = make(map[uint32]uint32)
	if p, ok := peer.FromContext(stream.Context()); ok {
		s.peer = p.Addr.String()
	}
	ctx, cancel := context.WithCancel(stream.Context())
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		s.writeGrants(ctx, stream)
	}()
	err := s.receive(stream)
	cancel()
	<-writerDone
	s.teardown(err)
	if status.Code(err) != codes.Canceled {
		x.log.Warn("exchange stream from peer ended", "peer", s.peer, "err", err)
	}
	return err
}

// receive reads the stream until it ends or fails, or the peer breaks the
// protocol. A panic of the code handling the stream ends the stream, which
// fails the tasks reading from it, and not the process.
func (s *inboundStream) receive(stream grpc.ServerStream) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = runtimePanic(s.x.log, "network stream from taskmanager "+s.peer, p)
		}
	}()
	return s.readLoop(stream)
}

func (s *inboundStream) readLoop(stream grpc.ServerStream) error {
	var f inFrame
	for {
		if err := stream.RecvMsg(&f); err != nil {
			if err == io.EOF {
				return errors.New("the peer ended the stream")
			}
			return err
		}
		if f.sender != "" {
			s.peer = f.sender
		}
		err := s.apply(&f)
		f.releasePayloads() // those apply did not hand on
		if err != nil {
			return err
		}
	}
}

// maxQueuedControl bounds the events other than batches (watermarks,
// barriers, end-of-partition) that may wait, unread by the consumer, in the
// buffer of a channel from a peer. Batches are bounded by their credits;
// these need none. A peer that keeps to the protocol queues at most
// credits + 2k + 3 of them there (a watermark between any two other events,
// the end of the channel), k being the barriers it sends while the consumer
// does not read the channel, for barrier alignment: one per checkpoint the
// coordinator starts meanwhile, a handful.
func (x *Exchange) maxQueuedControl() int { return x.cfg.CreditsPerChannel + 1024 }

// violation is the error a stream fails with when its peer broke the
// protocol: kind is errPeerProtocol or a more precise one.
func violation(kind error, code codes.Code, format string, args ...any) error {
	return errkind.Mark(status.Errorf(code, format, args...), kind)
}

func (s *inboundStream) apply(f *inFrame) error {
	for i := range f.items {
		it := &f.items[i]
		switch it.tag {
		case tagOpen:
			if ic := s.ids.get(it.id); ic != nil {
				return violation(errPeerProtocol, codes.InvalidArgument, "taskmanager %s opened channel %d twice, for %v and for %v; the taskmanagers run incompatible versions",
					s.peer, it.id, ic.key, keyFromProto(it.key))
			}
			key := keyFromProto(it.key)
			sink := &remoteSink{s: s, id: it.id}
			e, err := s.x.attachSink(key, sink)
			if err != nil {
				return status.Errorf(codes.FailedPrecondition, "taskmanager %s opening channel %v: %v", s.peer, key, err)
			}
			s.ids.set(it.id, &inboundChannel{key: key, e: e, sink: sink, cell: s.x.acquireCell(cellKeyOf(key))})
			continue
		case tagClose:
			if ic := s.ids.get(it.id); ic != nil {
				s.ids.delete(it.id)
				s.x.detachSink(ic.key, ic.sink)
				s.x.releaseCell(ic.cell)
				if in := ic.e.in.Load(); in != nil && !ic.ended {
					in.gate.push(in, event{kind: eventError, err: fmt.Errorf("taskmanager %s: %w", s.peer, errUpstreamGone(ic.key))})
				}
			}
			continue
		}
		ic := s.ids.get(it.id)
		if ic == nil {
			return violation(errPeerProtocol, codes.InvalidArgument, "taskmanager %s sent an event on channel %d, which it did not open", s.peer, it.id)
		}
		switch it.tag {
		case tagWatermarkCell:
			ic.cell.publish(it.value)
			continue
		case tagBarrierCell:
			if it.unaligned {
				return violation(errPeerProtocol, codes.InvalidArgument, "taskmanager %s sent the barrier of unaligned checkpoint %d for the cell of channel %v; unaligned barriers go on each channel; the taskmanagers run incompatible versions",
					s.peer, it.value, ic.key)
			}
			ic.cell.publishBarrier(barrierMark{id: it.value, ts: it.ts, full: it.full, final: it.final})
			continue
		}
		var e event
		switch it.tag {
		case tagBatch:
			e = event{kind: eventBatch, zstd: it.zstd}
		case tagWatermark:
			e = event{kind: eventWatermark, value: it.value}
		case tagEnd:
			e = event{kind: eventEndOfPartition}
		case tagBarrier:
			e = event{kind: eventBarrier, value: it.value, ts: it.ts, full: it.full, unaligned: it.unaligned, final: it.final}
		}
		if ic.ended {
			return violation(errPeerProtocol, codes.InvalidArgument, "taskmanager %s sent an event of kind %v on channel %v after it ended the channel", s.peer, e.kind, ic.key)
		}
		switch e.kind {
		case eventBatch:
			// The consumer's buffer holds what the credits allow: a peer
			// that sends more would make it grow without bound.
			received := ic.sink.received.Load()
			if granted := ic.sink.granted.Load(); received >= granted {
				return violation(errCreditExceeded, codes.ResourceExhausted,
					"taskmanager %s sent batch %d on channel %v (stream channel %d) beyond its credit: it had been granted %d credits on the channel in all and had used them all; it ignores the exchange's credit-based flow control, so the stream is closed",
					s.peer, received+1, ic.key, it.id, granted)
			}
			ic.sink.received.Add(1)
			n := len(*it.payload)
			s.x.receivedBytes.Add(int64(n))
			s.x.receivedBatches.Add(1)
			s.x.hold(n)
			e.buf, e.mem, it.payload = it.payload, s.x, nil
		case eventEndOfPartition:
			ic.ended = true
		}
		if in := ic.e.in.Load(); in != nil {
			if e.buf != nil && in.gate.buffered != nil {
				e.held = in.gate.buffered
				e.held.Add(int64(len(*e.buf)))
			}
			if limit := s.x.maxQueuedControl(); !in.gate.pushBounded(in, e, limit) {
				return violation(errPeerProtocol, codes.ResourceExhausted,
					"taskmanager %s sent a %v event on channel %v when %d events other than batches (watermarks, barriers), the most allowed, already waited there unread; it does not keep to the exchange protocol, so the stream is closed",
					s.peer, e.kind, ic.key, limit)
			}
		} else {
			e.release()
		}
	}
	return nil
}

// spareGrants is the most channels whose grants a write-out may have held
// for writeGrants to clear its map and use it again.
const spareGrants = 64

func (s *inboundStream) writeGrants(ctx context.Context, stream grpc.ServerStream) {
	spare := make(map[uint32]uint32)
	var resp creditFrame
	for {
		select {
		case <-s.wake:
		case <-ctx.Done():
			return
		}
		s.mu.Lock()
		pending := s.mu.grants
		s.mu.grants = spare
		s.mu.Unlock()
		if len(pending) == 0 {
			spare = pending
			continue
		}
		resp.grants = resp.grants[:0]
		for id, n := range pending {
			resp.grants = append(resp.grants, creditGrant{id: id, credits: n})
		}
		// A map that once held many channels' grants (the first grants
		// of a wide job) is not kept: clearing keeps its size, and every
		// later write would walk it.
		if len(pending) > spareGrants {
			pending = make(map[uint32]uint32)
		}
		clear(pending)
		spare = pending
		if err := stream.SendMsg(&resp); err != nil {
			return // the stream is broken; the receive loop sees it too
		}
	}
}

// teardown fails the channels the stream left unfinished.
func (s *inboundStream) teardown(cause error) {
	s.mu.Lock()
	s.mu.closed = true
	s.mu.Unlock()
	s.ids.each(func(_ uint32, ic *inboundChannel) {
		s.x.detachSink(ic.key, ic.sink)
		s.x.releaseCell(ic.cell)
		if ic.ended {
			return
		}
		in := ic.e.in.Load()
		if in == nil {
			return
		}
		var err error
		switch {
		case errors.Is(cause, errRuntimePanic): // not the peer's fault
			err = fmt.Errorf("dataflow: network stream from taskmanager %s failed before channel %v ended: %w", s.peer, ic.key, cause)
		case errors.Is(cause, errPeerProtocol):
			err = &PeerError{Addr: s.peer, err: fmt.Errorf(
				"dataflow: network stream from taskmanager %s closed before channel %v ended: %w", s.peer, ic.key, cause)}
		default:
			err = &PeerError{Addr: s.peer, err: fmt.Errorf(
				"dataflow: network stream from taskmanager %s broke before channel %v ended: %w; the upstream task or its taskmanager failed", s.peer, ic.key, cause)}
		}
		in.gate.push(in, event{kind: eventError, err: err})
	})
	s.ids = idTable[inboundChannel]{}
}
