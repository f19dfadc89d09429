package dataflow

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/experimental"

	"github.com/weirstream/weir/dataflow/batchcodec"
	"github.com/weirstream/weir/internal/errkind"
)

// ExchangeConfig configures an Exchange.
type ExchangeConfig struct {
	// SelfAddress is the host:port at which other taskmanagers reach this
	// exchange (the gRPC server Register was called with). An output target
	// equal to it is an in-memory channel.
	SelfAddress string
	// CreditsPerChannel is the number of batches a channel may hold in flight
	// (queued at the sender, on the wire and buffered at the receiver
	// together). Default 8: a busy channel between taskmanagers waits for
	// credits its consumer returned through two processes' schedulers,
	// and on a loaded machine 4 batches in flight do not cover that wait
	// (Flink gives a busy channel 2 buffers of its own and up to 8 more of
	// its gate's). Under backpressure the sender's byte budget and the
	// receiver's MemoryBytes bound what the credits allow. The receiver
	// enforces them: a peer that sends a batch beyond the credits granted
	// to it has its stream closed, which fails the tasks on both ends.
	CreditsPerChannel int
	// MemoryBytes is the exchange's network memory: the bytes of batches
	// received from peers that may wait in the consumers' buffers, across
	// all channels of the taskmanager. Once they reach it, the credits a
	// consumer returns are kept back until memory frees, except that a
	// channel left with no credit and no buffered batch gets one: no channel
	// (and no barrier behind its data) is starved. Under backpressure the
	// buffers then hold about MemoryBytes plus a batch per channel; credits
	// granted before memory ran short are honoured, so at that moment they
	// may hold up to CreditsPerChannel batches per channel. Default 64 MiB.
	MemoryBytes int64
	// ChannelBytes bounds the bytes of batches in flight on each channel
	// this exchange's tasks send on (queued here, on the wire and buffered
	// at the consumer), on top of the credits: a batch goes only while
	// less than ChannelBytes are in flight, or nothing is, and a batch
	// larger than half of it goes in pieces (of at least 8 KiB). Sizes are
	// estimated from the values (8 bytes a number, a string's length plus
	// 16). 0: no fixed bound (the default).
	ChannelBytes int64
	// DebloatTarget, when set, sizes each channel's byte budget to what its
	// consumer takes in that time, measured every 200 ms from the credits
	// it returns (buffer debloating): under backpressure the data an
	// aligned checkpoint's barrier waits behind drains in about this time,
	// at any record size and consumer speed. Bounded above by ChannelBytes
	// when that is set, below by 1 KiB. 0: off (the default).
	DebloatTarget time.Duration
	// Compression of batches sent to peers: CompressionNone (default; on
	// a loopback or fast local network it costs more CPU than it saves) or
	// CompressionZstd (its fastest level), for slower networks. Received
	// batches are decompressed whatever this says.
	Compression string
	// CoalesceRows is the rows up to which a channel to a peer gathers the
	// consecutive batches its task sends before it sends them as one,
	// which also stays under MaxFrameBytes by the values' estimated size:
	// every batch crossing the network costs the same hand-offs, whatever
	// its size. A channel sends
	// what it holds before its task waits for input, before any other
	// event on it (watermark, barrier, end of partition) and CoalesceTimeout
	// after it began holding, so gathering delays nothing while the task
	// is idle. 0: the default, 4096; 1 or a negative number: off.
	CoalesceRows int
	// DictionaryBytes is the size of the channel dictionary of each
	// channel to a peer (batchcodec.Encoder): the string values it sends
	// once and then names by number in later batches, with 64 bytes an
	// entry on top of their bytes. It costs up to this much memory at the
	// sender and at the receiver of each channel that carries recurring
	// strings; one that carries none allocates nothing. 0: the default,
	// 256 KiB; a negative number: off (every batch carries its own
	// dictionary). At most batchcodec.MaxDictBytes.
	DictionaryBytes int
	// CoalesceTimeout bounds the time a channel holds batches while its
	// task stays busy (Flink's buffer timeout, which Weir needs only under
	// load). Default 10 ms.
	CoalesceTimeout time.Duration
	// MaxFrameBytes bounds the batch bytes coalesced into one network frame.
	// A single batch larger than this travels alone in its frame, so the
	// receiving gRPC server must accept messages of the largest batch
	// (grpc.MaxRecvMsgSize). Default 1 MiB.
	MaxFrameBytes int
	// DialOptions are used to dial peers. Default: plaintext (insecure
	// transport credentials), for a cluster-internal network, and
	// PeerConnectParams.
	DialOptions []grpc.DialOption
	// Logger receives exchange events. Default: discarded.
	Logger *slog.Logger
}

// maxCoalesceRows bounds ExchangeConfig.CoalesceRows.
const maxCoalesceRows = 1 << 20

// Default values of ExchangeConfig.
const (
	DefaultCreditsPerChannel = 8
	DefaultMaxFrameBytes     = 1 << 20
	DefaultMemoryBytes       = 64 << 20
	DefaultCoalesceRows      = 4096
	DefaultCoalesceTimeout   = 10 * time.Millisecond
	DefaultDictionaryBytes   = 256 << 10
)

// DefaultExchangeConfig returns the defaults for an exchange reachable at
// selfAddress.
func DefaultExchangeConfig(selfAddress string) ExchangeConfig {
	return ExchangeConfig{
		SelfAddress:       selfAddress,
		CreditsPerChannel: DefaultCreditsPerChannel,
		MaxFrameBytes:     DefaultMaxFrameBytes,
		MemoryBytes:       DefaultMemoryBytes,
		CoalesceRows:      DefaultCoalesceRows,
		DictionaryBytes:   DefaultDictionaryBytes,
		CoalesceTimeout:   DefaultCoalesceTimeout,
	}
}

// Validate reports a configuration NewExchange would not run as given.
func (c ExchangeConfig) Validate() error {
	if c.SelfAddress == "" {
		return errors.New("dataflow: exchange config: SelfAddress is empty; set it to the host:port other taskmanagers dial")
	}
	if c.CreditsPerChannel < 0 {
		return fmt.Errorf("dataflow: exchange config: CreditsPerChannel %d is negative; use at least 1 (default %d)", c.CreditsPerChannel, DefaultCreditsPerChannel)
	}
	switch c.Compression {
	case "", CompressionNone, CompressionZstd:
	default:
		return fmt.Errorf("dataflow: exchange config: Compression %q: use %q or %q", c.Compression, CompressionNone, CompressionZstd)
	}
	if c.MemoryBytes < 0 {
		return fmt.Errorf("dataflow: exchange config: MemoryBytes %d is negative (default %d)", c.MemoryBytes, DefaultMemoryBytes)
	}
	if c.MaxFrameBytes < 0 {
		return fmt.Errorf("dataflow: exchange config: MaxFrameBytes %d is negative (default %d)", c.MaxFrameBytes, DefaultMaxFrameBytes)
	}
	if c.ChannelBytes < 0 {
		return fmt.Errorf("dataflow: exchange config: ChannelBytes %d is negative; use 0 for no bound", c.ChannelBytes)
	}
	if c.DebloatTarget < 0 {
		return fmt.Errorf("dataflow: exchange config: DebloatTarget %v is negative; use 0 for off", c.DebloatTarget)
	}
	if c.DictionaryBytes > batchcodec.MaxDictBytes {
		return fmt.Errorf("dataflow: exchange config: DictionaryBytes %d is above the most allowed, %d (default %d; a negative number: off)", c.DictionaryBytes, batchcodec.MaxDictBytes, DefaultDictionaryBytes)
	}
	if c.CoalesceRows > maxCoalesceRows {
		return fmt.Errorf("dataflow: exchange config: CoalesceRows %d is above the most allowed, %d (default %d; 1: off)", c.CoalesceRows, maxCoalesceRows, DefaultCoalesceRows)
	}
	if c.CoalesceTimeout < 0 {
		return fmt.Errorf("dataflow: exchange config: CoalesceTimeout %v is negative (default %v)", c.CoalesceTimeout, DefaultCoalesceTimeout)
	}
	return nil
}

func (c ExchangeConfig) withDefaults() ExchangeConfig {
	if c.CreditsPerChannel <= 0 {
		c.CreditsPerChannel = DefaultCreditsPerChannel
	}
	if c.MaxFrameBytes <= 0 {
		c.MaxFrameBytes = DefaultMaxFrameBytes
	}
	if c.MemoryBytes <= 0 {
		c.MemoryBytes = DefaultMemoryBytes
	}
	if c.CoalesceRows == 0 {
		c.CoalesceRows = DefaultCoalesceRows
	}
	if c.DictionaryBytes == 0 {
		c.DictionaryBytes = DefaultDictionaryBytes
	}
	if c.CoalesceTimeout <= 0 {
		c.CoalesceTimeout = DefaultCoalesceTimeout
	}
	if c.DialOptions == nil {
		c.DialOptions = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), PeerConnectParams()}
	}
	c.DialOptions = append(c.DialOptions[:len(c.DialOptions):len(c.DialOptions)], exchangeDialOptions()...)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// ErrExchangeClosed is returned by operations on a closed Exchange.
var ErrExchangeClosed = errors.New("dataflow: exchange closed")

// PeerError is what a task fails with when a network stream to or from
// another taskmanager's exchange broke (the peer died, or the network
// between them failed). Addr is the peer's exchange address, so that the
// failure can be pinned on that taskmanager (errors.As).
type PeerError struct {
	Addr string
	err  error
}

func (e *PeerError) Error() string { return e.err.Error() }
func (e *PeerError) Unwrap() error { return e.err }

// channelKey names one logical channel.
type channelKey struct {
	JobID            string
	Attempt          int64
	UpstreamVertex   int
	UpstreamSubtask  int
	DownstreamVertex int
	DownstreamInput  int
	DownstreamSub    int
}

func (k channelKey) String() string {
	return fmt.Sprintf("job %s attempt %d: vertex %d subtask %d -> vertex %d input %d subtask %d",
		k.JobID, k.Attempt, k.UpstreamVertex, k.UpstreamSubtask, k.DownstreamVertex, k.DownstreamInput, k.DownstreamSub)
}

// endpoint joins the two ends of a channel arriving at this exchange: the
// consuming task's input channel and the producer's credit sink (a local
// output channel or a network stream). Whichever registers first waits for
// the other; when both exist the consumer grants the initial credits.
type endpoint struct {
	in   atomic.Pointer[inputChannel]
	sink creditSink // guarded by Exchange.mu
}

// Exchange moves batches and events between the tasks of one taskmanager and
// to and from other taskmanagers. One Exchange serves every task of a
// taskmanager; its methods are safe for concurrent use.
type Exchange struct {
	cfg     ExchangeConfig
	log     *slog.Logger
	closing chan struct{}
	wg      sync.WaitGroup // goroutines of peer streams

	sentBytes, sentFrames, receivedBytes, receivedBatches atomic.Int64

	// buffered counts the bytes of received batches not yet decoded, and
	// peak its most; waiting are the credits withheld while buffered is
	// at or above cfg.MemoryBytes.
	buffered, peak atomic.Int64
	waiting        struct {
		sync.Mutex
		sinks []*remoteSink
	}

	// noCells makes tasks send every watermark on every channel, not by
	// cell (wmcell.go): the path cells replace, for tests that compare
	// the two. Set before the exchange is used.
	noCells bool

	// cellWake gathers the watermark cells published since the last
	// wake-up of their consumers (wmcell.go).
	cellWake struct {
		sync.Mutex
		cells []*wmCell
		armed bool
	}

	mu struct {
		sync.Mutex
		closed    bool
		endpoints map[channelKey]*endpoint
		peers     map[string]*peerConn
		cells     map[cellKey]*wmCell
		cellEdges map[cellEdgeKey]*cellEdge
	}
}

// ExchangeStats are an exchange's counters since it was created.
type ExchangeStats struct {
	// SentBytes and SentFrames count the frames sent to peers and their
	// encoded size (before gRPC's framing); ReceivedBytes the size of the
	// batches received from peers.
	SentBytes, SentFrames, ReceivedBytes, ReceivedBatches int64
	// BufferedBytes is the size of the received batches that wait in
	// consumers' buffers now, PeakBufferedBytes its most so far, and
	// MemoryBytes the budget (ExchangeConfig.MemoryBytes).
	BufferedBytes, PeakBufferedBytes, MemoryBytes int64
}

// Stats returns the exchange's counters.
func (x *Exchange) Stats() ExchangeStats {
	return ExchangeStats{SentBytes: x.sentBytes.Load(), SentFrames: x.sentFrames.Load(), ReceivedBytes: x.receivedBytes.Load(),
		ReceivedBatches: x.receivedBatches.Load(), BufferedBytes: x.buffered.Load(), PeakBufferedBytes: x.peak.Load(), MemoryBytes: x.cfg.MemoryBytes}
}

// hold accounts n bytes of a received batch to the network memory.
func (x *Exchange) hold(n int) {
	b := x.buffered.Add(int64(n))
	for {
		p := x.peak.Load()
		if b <= p || x.peak.CompareAndSwap(p, b) {
			return
		}
	}
}

// free returns n bytes of network memory (a received batch was decoded or
// dropped) and hands out the credits withheld while memory was short.
func (x *Exchange) free(n int) {
	if x.buffered.Add(-int64(n)) >= x.cfg.MemoryBytes {
		return
	}
	x.waiting.Lock()
	sinks := x.waiting.sinks
	x.waiting.sinks = nil
	x.waiting.Unlock()
	for _, r := range sinks {
		r.release()
	}
}

// memoryShort reports whether the network memory is used up.
func (x *Exchange) memoryShort() bool { return x.buffered.Load() >= x.cfg.MemoryBytes }

// wait queues r to be given its withheld credits once memory frees. The
// check after queueing closes the race with a free that found no one
// waiting.
func (x *Exchange) wait(r *remoteSink) {
	x.waiting.Lock()
	x.waiting.sinks = append(x.waiting.sinks, r)
	x.waiting.Unlock()
	if !x.memoryShort() {
		x.free(0)
	}
}

// NewExchange returns an exchange; it has no side effects. Zero config
// fields take their defaults.
func NewExchange(cfg ExchangeConfig) *Exchange {
	cfg = cfg.withDefaults()
	x := &Exchange{cfg: cfg, log: cfg.Logger, closing: make(chan struct{})}
	x.mu.endpoints = make(map[channelKey]*endpoint)
	x.mu.peers = make(map[string]*peerConn)
	x.mu.cells = make(map[cellKey]*wmCell)
	x.mu.cellEdges = make(map[cellEdgeKey]*cellEdge)
	return x
}

// Close closes the streams this exchange opened to peers, failing the tasks
// that were sending on them, and waits for their goroutines. Streams that
// peers opened to this exchange end when those peers close them or when the
// gRPC server stops. Close is idempotent.
func (x *Exchange) Close() error {
	x.mu.Lock()
	if x.mu.closed {
		x.mu.Unlock()
		return nil
	}
	x.mu.closed = true
	close(x.closing)
	peers := make([]*peerConn, 0, len(x.mu.peers))
	for _, c := range x.mu.peers {
		peers = append(peers, c)
	}
	x.mu.Unlock()
	for _, c := range peers {
		c.fail(ErrExchangeClosed)
	}
	x.wg.Wait()
	return nil
}

func (x *Exchange) endpointLocked(key channelKey) *endpoint {
	e := x.mu.endpoints[key]
	if e == nil {
		e = &endpoint{}
		x.mu.endpoints[key] = e
	}
	return e
}

// registerInput makes in receive the data of its channel.
func (x *Exchange) registerInput(in *inputChannel) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.mu.closed {
		return ErrExchangeClosed
	}
	e := x.endpointLocked(in.key)
	if e.in.Load() != nil {
		return fmt.Errorf("dataflow: channel %v is already read by another task; a subtask was deployed twice with the same attempt", in.key)
	}
	// Subscribed before the channel is reachable, so that whoever pushes
	// into it sees its cell.
	x.subscribeLocked(x.acquireCellLocked(cellKeyOf(in.key)), in)
	e.in.Store(in)
	if e.sink != nil {
		in.gate.setSink(in, e.sink)
		e.sink.connect(in, x.cfg.CreditsPerChannel)
	}
	return nil
}

func (x *Exchange) unregisterInput(in *inputChannel) {
	x.mu.Lock()
	defer x.mu.Unlock()
	e := x.mu.endpoints[in.key]
	if e == nil || e.in.Load() != in {
		return
	}
	if in.cell != nil {
		x.unsubscribeLocked(in.cell, in)
		x.releaseCellLocked(in.cell)
	}
	e.in.Store(nil)
	if e.sink == nil {
		delete(x.mu.endpoints, in.key)
	}
}

// attachSink makes s the producer end of channel key.
func (x *Exchange) attachSink(key channelKey, s creditSink) (*endpoint, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.mu.closed {
		return nil, ErrExchangeClosed
	}
	e := x.endpointLocked(key)
	if e.sink != nil {
		return nil, fmt.Errorf("dataflow: channel %v already has a producer; a subtask was deployed twice with the same attempt", key)
	}
	e.sink = s
	if in := e.in.Load(); in != nil {
		in.gate.setSink(in, s)
		s.connect(in, x.cfg.CreditsPerChannel)
	}
	return e, nil
}

func (x *Exchange) detachSink(key channelKey, s creditSink) {
	x.mu.Lock()
	defer x.mu.Unlock()
	e := x.mu.endpoints[key]
	if e == nil || e.sink != s {
		return
	}
	e.sink = nil
	if e.in.Load() == nil {
		delete(x.mu.endpoints, key)
	}
}

// openOutput creates the producing end of channel key, whose consumer runs
// on the taskmanager whose exchange address is target.
func (x *Exchange) openOutput(key channelKey, target string) (*outputChannel, error) {
	return x.openOutputWake(key, target, make(chan struct{}, 1))
}

// openOutputWake is openOutput for a channel signalling its credit grants on
// wake (capacity 1), which several channels may share.
func (x *Exchange) openOutputWake(key channelKey, target string, wake chan struct{}) (*outputChannel, error) {
	o := &outputChannel{key: key, wake: wake}
	if x.cfg.ChannelBytes > 0 || x.cfg.DebloatTarget > 0 {
		o.budget = &flowBudget{fixed: x.cfg.ChannelBytes, target: x.cfg.DebloatTarget}
		o.mu.flow.limit = x.cfg.ChannelBytes
	}
	if target == x.cfg.SelfAddress {
		if _, err := x.attachSink(key, o); err != nil {
			return nil, err
		}
		return o, nil
	}
	c, err := x.peer(target)
	if err != nil {
		return nil, err
	}
	o.conn = c
	c.openChannel(o)
	return o, nil
}

// closeOutput retires o. The returned channel is closed when everything sent
// on o has been handed to the network (at once for in-memory channels).
func (x *Exchange) closeOutput(o *outputChannel) <-chan struct{} {
	if o.conn == nil {
		x.detachSink(o.key, o)
		if in := o.localConsumer(); in != nil && !o.sentEnd {
			in.gate.push(in, event{kind: eventError, err: errUpstreamGone(o.key)})
		}
		return closedChan
	}
	return o.conn.closeChannel(o)
}

// errUpstreamGone is what a consumer sees when its producer stops without
// ending the channel.
func errUpstreamGone(k channelKey) error {
	return errkind.Mark(fmt.Errorf("dataflow: channel %v: the upstream task stopped (failed or was cancelled) before it ended the channel", k), errUpstreamStopped)
}

var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// numEndpoints reports how many channels are registered, for leak tests.
func (x *Exchange) numEndpoints() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.mu.endpoints)
}

// Transport settings of exchange connections. The exchange's credits bound
// the data in flight per channel; HTTP/2's flow control windows must not
// bound it tighter, or a stream to a peer stalls on window updates while
// its channels still hold credits. Large read and write buffers make one
// system call move many frames.
const (
	exchangeStreamWindow = 16 << 20
	exchangeConnWindow   = 64 << 20
	exchangeIOBuffer     = 256 << 10
)

func exchangeDialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithInitialWindowSize(exchangeStreamWindow),
		grpc.WithInitialConnWindowSize(exchangeConnWindow),
		grpc.WithReadBufferSize(exchangeIOBuffer),
		grpc.WithWriteBufferSize(exchangeIOBuffer),
		experimental.WithBufferPool(exchangePool),
	}
}

// ExchangeServerOptions are the options of the gRPC server an Exchange is
// registered on (besides its credentials and message size limit): the
// transport settings its peers' connections use too.
func ExchangeServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.InitialWindowSize(exchangeStreamWindow),
		grpc.InitialConnWindowSize(exchangeConnWindow),
		grpc.ReadBufferSize(exchangeIOBuffer),
		grpc.WriteBufferSize(exchangeIOBuffer),
		experimental.BufferPool(exchangePool),
	}
}

// PeerConnectParams caps gRPC's reconnect backoff for connections between
// cluster processes (gRPC's default grows to 2 minutes): a process that
// restarts, on the same address or not, is reached again within about a
// second. Every stream to a peer also dials a connection of its own, so no
// stream waits out the backoff of a connection to a process that died.
func PeerConnectParams() grpc.DialOption {
	return grpc.WithConnectParams(grpc.ConnectParams{
		Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
		MinConnectTimeout: 2 * time.Second,
	})
}
