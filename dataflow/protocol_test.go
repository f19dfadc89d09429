package dataflow

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/weirstream/weir/dataflow/batchcodec"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/stream"
)

// rogueAddr is the exchange address a rogue announces.
const rogueAddr = "rogue.invalid:1"

// rogue is a peer taskmanager that speaks the exchange protocol by hand, so
// that it can break it.
type rogue struct {
	t      *testing.T
	stream grpc.ClientStream
	sent   bool // the first frame, which carries the sender address, was sent
}

func dialRogue(t *testing.T, target string) *rogue {
	t.Helper()
	cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	// A receiver that fails to end the stream fails the test, not hangs it.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(func() {
		cancel()
		cc.Close()
	})
	s, err := cc.NewStream(ctx, &connectStreamDesc, weirpb.ExchangeService_Connect_FullMethodName, grpc.CallContentSubtype(frameCodecName))
	if err != nil {
		t.Fatal(err)
	}
	return &rogue{t: t, stream: s}
}

// send sends one frame. An error means the receiver ended the stream;
// streamError tells why.
func (r *rogue) send(items ...outItem) {
	f := &outFrame{items: items}
	if !r.sent {
		f.sender, r.sent = rogueAddr, true
	}
	_ = r.stream.SendMsg(f)
}

func (r *rogue) open(id uint32, key channelKey) {
	r.send(outItem{id: id, open: keyToProto(key)})
}

// awaitGrant waits for the receiver's first credit grant for channel id
// and returns it.
func (r *rogue) awaitGrant(id uint32) uint32 {
	r.t.Helper()
	for {
		var resp creditFrame
		if err := r.stream.RecvMsg(&resp); err != nil {
			r.t.Fatalf("waiting for credits: %v", err)
		}
		for _, g := range resp.grants {
			if g.id == id {
				return g.credits
			}
		}
	}
}

// streamError reads the stream, ignoring grants, until the receiver ends
// it, and returns why.
func (r *rogue) streamError() error {
	for {
		if err := r.stream.RecvMsg(&creditFrame{}); err != nil {
			return err
		}
	}
}

// batchEvents returns n batch events of channel id, each of one row.
func batchEvents(id uint32, n int) []outItem {
	var evs []outItem
	for i := range n {
		b := keyBatch(int64(i))
		p := batchcodec.Append(nil, b)
		evs = append(evs, outItem{id: id, kind: eventBatch, payload: &p})
		b.Release()
	}
	return evs
}

// contents returns how many batches and how many other events wait in
// ch's buffer, and the newest event.
func (ch *inputChannel) contents() (batches, others int, last event) {
	g := ch.gate
	g.mu.Lock()
	defer g.mu.Unlock()
	q := &ch.q
	for i := range q.size {
		e := *q.at(i)
		if e.kind == eventBatch {
			batches++
		} else {
			others++
		}
		last = e
	}
	return batches, others, last
}

// consumerOf returns the input channel reading key at x, or nil.
func consumerOf(x *Exchange, key channelKey) *inputChannel {
	x.mu.Lock()
	defer x.mu.Unlock()
	if e := x.mu.endpoints[key]; e != nil {
		return e.in.Load()
	}
	return nil
}

// TestReceiverEnforcesProtocol has a rogue peer break the exchange protocol
// on a channel whose consumer reads nothing, so that whatever the receiver
// accepts stays in the consumer's buffer: the receiver closes the stream
// with an error saying what the peer did, the buffer holds no more than
// the credits granted (batches) and the bound on other events, and the
// consumer is handed the stream's failure.
func TestReceiverEnforcesProtocol(t *testing.T) {
	const credits = 3
	const id = 7
	key := channelKey{JobID: "job-1", Attempt: 1, UpstreamVertex: 0, UpstreamSubtask: 0, DownstreamVertex: 1, DownstreamInput: 0, DownstreamSub: 0}
	for _, tc := range []struct {
		name      string
		misbehave func(r *rogue, x *Exchange)
		code      codes.Code
		kind      error
		says      []string
		// check inspects the consumer's buffer after the stream failed.
		check func(t *testing.T, batches, others int, last event, x *Exchange)
	}{
		{
			name:      "batches beyond credit",
			misbehave: func(r *rogue, _ *Exchange) { r.send(batchEvents(id, credits+5)...) },
			code:      codes.ResourceExhausted,
			kind:      errCreditExceeded,
			says: []string{fmt.Sprintf("taskmanager %s sent batch %d on channel %v (stream channel %d) beyond its credit", rogueAddr, credits+1, key, id),
				fmt.Sprintf("granted %d credits", credits)},
			check: func(t *testing.T, batches, _ int, last event, _ *Exchange) {
				// Nothing consumed, so the buffer only grew: its length now is
				// the most it ever had.
				if batches != credits {
					t.Errorf("the consumer's buffer holds %d batches; credits allow exactly %d", batches, credits)
				}
				var pe *PeerError
				if last.kind != eventError || !errors.Is(last.err, errCreditExceeded) || !errors.As(last.err, &pe) || pe.Addr != rogueAddr {
					t.Errorf("the consumer's last event is %v %v; want the stream's credit error, blaming %s", last.kind, last.err, rogueAddr)
				}
			},
		},
		{
			name: "barriers flooding an unread channel",
			misbehave: func(r *rogue, x *Exchange) {
				var evs []outItem
				for cp := range x.maxQueuedControl() + 10 {
					evs = append(evs, outItem{id: id, kind: eventBarrier, value: int64(cp + 1)},
						outItem{id: id, kind: eventWatermark, value: int64(cp)})
				}
				r.send(evs...)
			},
			code: codes.ResourceExhausted,
			kind: errPeerProtocol,
			says: []string{fmt.Sprintf("taskmanager %s sent a ", rogueAddr), fmt.Sprintf("on channel %v when %d events other than batches", key, credits+1024)},
			check: func(t *testing.T, batches, others int, last event, x *Exchange) {
				if limit := x.maxQueuedControl(); batches != 0 || others != limit+1 {
					t.Errorf("the consumer's buffer holds %d batches and %d other events; want none and %d (the bound, and the stream's error)", batches, others, limit+1)
				}
				if last.kind != eventError || !errors.Is(last.err, errPeerProtocol) {
					t.Errorf("the consumer's last event is %v %v; want the stream's error", last.kind, last.err)
				}
			},
		},
		{
			name: "events after the end of the channel",
			misbehave: func(r *rogue, _ *Exchange) {
				r.send(outItem{id: id, kind: eventEndOfPartition}, outItem{id: id, kind: eventWatermark, value: 5})
			},
			code: codes.InvalidArgument,
			kind: errPeerProtocol,
			says: []string{fmt.Sprintf("on channel %v after it ended the channel", key)},
			check: func(t *testing.T, batches, others int, last event, _ *Exchange) {
				// The channel ended before the stream failed: its consumer
				// keeps the end and is not failed.
				if batches != 0 || others != 1 || last.kind != eventEndOfPartition {
					t.Errorf("the consumer's buffer holds %d batches and %d other events, the last %v; want the end of the channel alone", batches, others, last.kind)
				}
			},
		},
		{
			name: "an unaligned barrier for a cell",
			misbehave: func(r *rogue, _ *Exchange) {
				r.send(outItem{id: id, kind: eventBarrier, value: 3, unaligned: true, cell: true})
			},
			code: codes.InvalidArgument,
			kind: errPeerProtocol,
			says: []string{fmt.Sprintf("taskmanager %s sent the barrier of unaligned checkpoint 3 for the cell of channel %v", rogueAddr, key)},
			check: func(t *testing.T, batches, others int, last event, _ *Exchange) {
				if batches != 0 || others != 1 || last.kind != eventError || !errors.Is(last.err, errPeerProtocol) {
					t.Errorf("the consumer's buffer holds %d batches and %d other events, the last %v %v; want the stream's error alone", batches, others, last.kind, last.err)
				}
			},
		},
		{
			name: "a channel opened twice",
			misbehave: func(r *rogue, _ *Exchange) {
				other := key
				other.DownstreamSub = 1
				r.open(id, other)
			},
			code: codes.InvalidArgument,
			kind: errPeerProtocol,
			says: []string{fmt.Sprintf("taskmanager %s opened channel %d twice", rogueAddr, id)},
			check: func(t *testing.T, _, _ int, last event, x *Exchange) {
				if last.kind != eventError || !errors.Is(last.err, errPeerProtocol) {
					t.Errorf("the consumer's last event is %v %v; want the stream's error", last.kind, last.err)
				}
				if n := x.numEndpoints(); n != 1 {
					t.Errorf("%d channel endpoints are registered, want only the consumer's", n)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node := startNode(t, credits)
			g := newInputGate()
			ch := g.add(key, 0, genSchema)
			if err := node.x.registerInput(ch); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				node.x.unregisterInput(ch)
				g.close()
			})
			r := dialRogue(t, node.addr)
			r.open(id, key)
			if got := r.awaitGrant(id); got != credits {
				t.Fatalf("the first grant is %d credits, want %d", got, credits)
			}
			tc.misbehave(r, node.x)
			err := r.streamError()
			if status.Code(err) != tc.code {
				t.Fatalf("the stream ended with %v; want code %v", err, tc.code)
			}
			for _, want := range tc.says {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the stream's error %q does not say %q", err, want)
				}
			}
			// The receiver tears the stream down before it returns the
			// error; poll anyway, in case the order ever changes.
			waitFor(t, "the stream to be torn down", func() bool { return node.x.numEndpoints() == 1 })
			batches, others, last := ch.contents()
			if tc.kind != nil && last.kind == eventError && !errors.Is(last.err, tc.kind) {
				t.Errorf("the consumer got %v; want an error of kind %v", last.err, tc.kind)
			}
			tc.check(t, batches, others, last, node.x)
		})
	}
}

// TestCreditViolationFailsTask has a rogue peer flood a sink task's input
// channel with batches while the sink is stuck on the first one: the
// receiver closes the stream once the rogue exceeds its credit, the
// sink's buffer never holds more batches than the credits granted, and
// the task, once unstuck, processes what was accepted and fails with the
// stream's error, blaming the rogue.
func TestCreditViolationFailsTask(t *testing.T) {
	const credits = 3
	node := startNode(t, credits)
	st := newTestState()
	reg := newTestRegistry(st)
	b := stream.NewBuilder("flood").Parallelism(1)
	b.Source("src", "gen", nil).Rebalance().Then("sink", "collect", nil)
	spec := buildSpecs(t, plan(t, b, reg), [][]int{{0}, {1}}, func(int, int) string { return node.addr })[1]
	release := make(chan struct{})
	st.slowSink = func() { <-release }
	task, err := NewTask(spec, reg, node.x, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := runTask(t, t.Context(), task)
	key := task.channelKey(0, 0, 1, 0, 0)
	waitFor(t, "the sink to register its channel", func() bool { return consumerOf(node.x, key) != nil })

	r := dialRogue(t, node.addr)
	r.open(0, key)
	if got := r.awaitGrant(0); got != credits {
		t.Fatalf("the first grant is %d credits, want %d", got, credits)
	}
	r.send(batchEvents(0, 20)...)
	if err := r.streamError(); status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "beyond its credit") {
		t.Fatalf("the stream ended with %v; want the credit error", err)
	}
	// The sink took one batch (and returned its credit) at most.
	if batches, _, _ := consumerOf(node.x, key).contents(); batches > credits {
		t.Errorf("the sink's buffer holds %d batches; credits allow %d", batches, credits)
	}
	close(release)
	err = <-done
	var pe *PeerError
	if !errors.Is(err, errCreditExceeded) || !errors.As(err, &pe) || pe.Addr != rogueAddr || !strings.Contains(err.Error(), "task sink (1/1)") {
		t.Fatalf("the task ended with %v; want the credit error of the stream from %s", err, rogueAddr)
	}
	// The initial credits, and one more if the sink took its first batch
	// before the flood was checked.
	var granted int64
	if m := regexp.MustCompile(`granted (\d+) credits`).FindStringSubmatch(err.Error()); m != nil {
		granted, _ = strconv.ParseInt(m[1], 10, 64)
	}
	if granted != credits && granted != credits+1 {
		t.Fatalf("the error %q does not say that %d or %d credits were granted", err, credits, credits+1)
	}
	if n := st.consumed.Load(); n != granted {
		t.Errorf("the sink consumed %d rows; want the %d batches of one row the credits allowed", n, granted)
	}
	waitFor(t, "the channels to be unregistered", func() bool { return node.x.numEndpoints() == 0 })
}

// TestExchangePanicFailsStream: a panic in the exchange's own code on the
// goroutine receiving a peer's stream (here from an input channel that
// lost its gate after it was registered, a stand-in for a bug of the
// runtime) ends that stream with an internal error, not the process.
func TestExchangePanicFailsStream(t *testing.T) {
	node := startNode(t, 2)
	key := channelKey{JobID: "job-1", Attempt: 1, DownstreamVertex: 1}
	broken := newInputGate().add(key, 0, genSchema)
	if err := node.x.registerInput(broken); err != nil {
		t.Fatal(err)
	}
	gate := broken.gate
	// Under the exchange's lock, which the stream takes before it uses the
	// channel.
	node.x.mu.Lock()
	broken.gate = nil // opening the channel panics
	node.x.mu.Unlock()
	t.Cleanup(func() {
		node.x.mu.Lock()
		broken.gate = gate
		node.x.mu.Unlock()
		node.x.unregisterInput(broken)
	})
	r := dialRogue(t, node.addr)
	r.open(0, key)
	err := r.streamError()
	if status.Code(err) != codes.Unknown || !strings.Contains(err.Error(), "network stream from taskmanager "+rogueAddr+": internal error: the task runtime panicked: runtime error: invalid memory address") {
		t.Fatalf("the stream ended with %v; want the internal error of the panic", err)
	}

	// The exchange still serves other streams.
	other := channelKey{JobID: "job-1", Attempt: 1, DownstreamVertex: 2}
	g := newInputGate()
	ch := g.add(other, 0, genSchema)
	if err := node.x.registerInput(ch); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		node.x.unregisterInput(ch)
		g.close()
	})
	r2 := dialRogue(t, node.addr)
	r2.open(0, other)
	if got := r2.awaitGrant(0); got != 2 {
		t.Fatalf("a new stream got a first grant of %d credits, want 2", got)
	}
}
