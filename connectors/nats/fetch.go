package nats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

const (
	// defaultFetchWait is the longest the fetcher waits for a message
	// before it looks again whether it should stop or has drained a
	// bounded stream.
	defaultFetchWait = 500 * time.Millisecond
	// linger is how long the fetcher waits for more messages to fill a
	// batch once it has one.
	linger = time.Millisecond
	// consumerInactiveThreshold is how long the server keeps a consumer
	// nobody pulls from: the consumers of a task that died go away by
	// themselves.
	consumerInactiveThreshold = 5 * time.Minute
	// fetchAhead is how many fetched batches wait for Poll at most.
	fetchAhead = 2
	// minPullBytes is the least byte budget of one pull request; it is
	// larger when the server's max_payload is.
	minPullBytes = 4 << 20
	// chunkBytes bounds the payload bytes of one batch handed to Poll.
	chunkBytes = 4 << 20
	// fetchFailAfter is how long fetching may fail before the source
	// fails its task; it is longer than the client's reconnect budget.
	fetchFailAfter = time.Minute
)

// record is one fetched message.
type record struct {
	seq     uint64 // stream sequence
	ts      int64  // when the stream stored it, Unix ms
	subject string
	data    []byte
}

// chunk is what the fetcher hands to Poll: messages in stream order, or
// the news that nothing below the bound is left (bounded mode), or the
// error that ends fetching.
type chunk struct {
	recs    []record
	drained bool
	err     error
}

// fetcher reads a stream in order through ephemeral AckNone pull
// consumers, in a goroutine of its own, and hands batches of messages to
// Poll over out. The client keeps pull requests outstanding (up to two
// batches of messages, and a byte budget per request), so that messages
// stream in while Poll emits. Its fields are set before start and
// read-only after.
type fetcher struct {
	conn      *connection
	stream    string
	consumer  func(next uint64) jetstream.ConsumerConfig
	batch     int
	pullBytes int
	limit     uint64 // stop before this sequence; 0: never
	wait      time.Duration
	log       *slog.Logger

	out    chan chunk
	cancel context.CancelFunc
	done   chan struct{}
}

func newFetcher(conn *connection, streamName string, consumer func(uint64) jetstream.ConsumerConfig, batch int, limit uint64, wait time.Duration, log *slog.Logger) *fetcher {
	// A pull request's byte budget must hold the largest message the
	// server takes, or the consumer stalls on it.
	pull := max(minPullBytes, int(conn.nc.MaxPayload())+64<<10)
	return &fetcher{
		conn: conn, stream: streamName, consumer: consumer, batch: batch,
		pullBytes: pull, limit: limit, wait: wait, log: log,
		out: make(chan chunk, fetchAhead),
	}
}

// start starts fetching at stream sequence next.
func (f *fetcher) start(next uint64) {
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel, f.done = cancel, make(chan struct{})
	go func() {
		defer close(f.done)
		f.run(ctx, next)
	}()
}

// stop stops the goroutine and returns when it has exited.
func (f *fetcher) stop() {
	f.cancel()
	<-f.done
}

// reader is one consumer and the iterator over its messages.
type reader struct {
	cons      jetstream.Consumer
	it        jetstream.MessagesContext
	stopIt    func() bool // stops it when the fetcher's context ends
	delivered uint64      // consumer sequence of the last message received
}

// run fetches from next on until ctx ends, a terminal error, or (bounded)
// the limit.
func (f *fetcher) run(ctx context.Context, next uint64) {
	var (
		r        *reader
		lastOK   = time.Now()
		lastMsg  = lastOK // the last message or consumer check
		failures int
	)
	defer func() { f.close(r) }()
	fail := func(err error) bool { // false: give up (err was sent)
		if ctx.Err() != nil {
			return false
		}
		if terminal(err) || f.conn.nc.IsClosed() || time.Since(lastOK) > fetchFailAfter {
			f.send(ctx, chunk{err: f.conn.explain(sourceOp, fmt.Sprintf("read stream %q", f.stream), err)})
			return false
		}
		failures++
		f.log.Debug(sourceOp+": fetch failed; retrying", "stream", f.stream, "error", err, "failures", failures)
		backoff(ctx, failures)
		return true
	}
	for ctx.Err() == nil {
		if f.limit > 0 && next >= f.limit {
			return // Poll ends when it reaches the limit
		}
		if r == nil {
			var err error
			if r, err = f.open(ctx, next); err != nil {
				if !fail(err) {
					return
				}
				continue
			}
		}
		recs, err := f.collect(r, &next)
		if len(recs) > 0 && !f.send(ctx, chunk{recs: recs}) {
			return
		}
		if err != nil {
			// A gap in the delivery or a failed consumer: continue on a
			// new consumer after the last message received.
			f.close(r)
			r = nil
			if !fail(err) {
				return
			}
			continue
		}
		lastOK, failures = time.Now(), 0
		if len(recs) > 0 {
			lastMsg = lastOK
			continue
		}
		// Idle. A bounded source may have drained the stream; and a
		// consumer the server dropped (deleted, or lost in a restart)
		// shows no error to the iterator, so ask after it now and then.
		if f.limit == 0 && time.Since(lastMsg) < idleCheckWaits*f.wait {
			continue
		}
		lastMsg = time.Now()
		info, err := r.cons.Info(ctx)
		if err != nil {
			f.close(r)
			r = nil
			if !fail(err) {
				return
			}
			continue
		}
		// Drained when the server has nothing left for the consumer and
		// everything it delivered has arrived.
		if f.limit > 0 && info.NumPending == 0 && info.Delivered.Consumer == r.delivered {
			f.send(ctx, chunk{drained: true})
			return
		}
	}
}

// idleCheckWaits is how many empty waits for messages pass before an
// idle fetcher checks that its consumer still exists.
const idleCheckWaits = 10

// errGap reports a gap in the consumer's delivery sequence.
var errGap = errors.New("nats: gap in the consumer's delivery sequence")

// collect returns the next messages: up to a batch (or chunkBytes of
// payload), waiting up to f.wait for the first and linger for each
// further one. It advances next (the stream sequence after the last
// message). An error means the consumer must be replaced.
func (f *fetcher) collect(r *reader, next *uint64) ([]record, error) {
	var recs []record
	bytes := 0
	for len(recs) < f.batch && bytes < chunkBytes {
		wait := f.wait
		if len(recs) > 0 {
			wait = linger
		}
		m, err := r.it.Next(jetstream.NextMaxWait(wait))
		if errors.Is(err, natsgo.ErrTimeout) {
			return recs, nil
		}
		if err != nil {
			return recs, err
		}
		meta, err := m.Metadata()
		if err != nil {
			return recs, err
		}
		if meta.Sequence.Consumer != r.delivered+1 {
			return recs, fmt.Errorf("%w: got delivery %d after %d", errGap, meta.Sequence.Consumer, r.delivered)
		}
		r.delivered = meta.Sequence.Consumer
		if meta.Sequence.Stream < *next {
			continue // delivered before: cannot happen with AckNone, but never emit it twice
		}
		data := m.Data()
		recs = append(recs, record{seq: meta.Sequence.Stream, ts: meta.Timestamp.UnixMilli(), subject: m.Subject(), data: data})
		bytes += len(data)
		*next = meta.Sequence.Stream + 1
	}
	return recs, nil
}

// open creates a consumer that delivers from stream sequence next and
// starts iterating over its messages.
func (f *fetcher) open(ctx context.Context, next uint64) (*reader, error) {
	cctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	cons, err := f.conn.js.CreateConsumer(cctx, f.stream, f.consumer(next))
	if err != nil {
		return nil, err
	}
	r := &reader{cons: cons}
	if r.it, err = cons.Messages(jetstream.PullMaxMessagesWithBytesLimit(2*f.batch, f.pullBytes)); err != nil {
		f.close(r)
		return nil, err
	}
	r.stopIt = context.AfterFunc(ctx, r.it.Stop)
	return r, nil
}

// close stops r's iterator and deletes its consumer if the connection is
// up (otherwise the server removes it after consumerInactiveThreshold).
func (f *fetcher) close(r *reader) {
	if r == nil {
		return
	}
	if r.it != nil {
		r.stopIt()
		r.it.Stop()
	}
	if f.conn.nc.Status() != natsgo.CONNECTED {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := f.conn.js.DeleteConsumer(ctx, f.stream, r.cons.CachedInfo().Name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		f.log.Debug(sourceOp+": delete consumer", "stream", f.stream, "error", err)
	}
}

// send hands c to Poll; false when ctx ended first.
func (f *fetcher) send(ctx context.Context, c chunk) bool {
	select {
	case f.out <- c:
		return true
	case <-ctx.Done():
		return false
	}
}

// terminal reports whether retrying cannot help.
func terminal(err error) bool {
	if errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrJetStreamNotEnabled) ||
		errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) || errors.Is(err, natsgo.ErrConnectionClosed) ||
		errors.Is(err, natsgo.ErrAuthorization) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.Code == 400 // a bad consumer config, such as a filter outside the stream
}

// backoff waits before retry number n: 100ms doubling to 2s.
func backoff(ctx context.Context, n int) {
	d := 100 * time.Millisecond << min(n-1, 5)
	d = min(d, 2*time.Second)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
