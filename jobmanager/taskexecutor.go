package jobmanager

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/weirstream/weir/proto/weirpb"
)

// taskExecutors calls the TaskExecutorService of taskmanagers by address
// and watches the connection to each registered taskmanager process. Safe
// for concurrent use.
type taskExecutors interface {
	// Track opens a fresh connection to process instance of taskmanager id
	// at addr (it never calls connEvents itself, so a caller may hold a
	// lock that the events take), closing any earlier one to addr or to id (which may sit in
	// the reconnect backoff of a process that died there), probes it at
	// once and then watches it: a connection that breaks is reported with
	// connBroken and probed again; every probe's outcome is reported with
	// probed. Watching ends with a failed probe, a later Track of the same
	// id or address, or Close.
	Track(id, instance, addr string)
	// Probe probes process instance of taskmanager id again (it is
	// suspected), if it is tracked.
	Probe(id, instance string)
	SubmitTask(ctx context.Context, addr string, d *weirpb.TaskDeployment, instance string) error
	CancelTask(ctx context.Context, addr string, id *weirpb.ExecutionID) error
	// TriggerCheckpoints and NotifyCheckpoints make one call for several
	// tasks (of one job, on the taskmanager at addr); the response names
	// the tasks that did not take it. They set req.Epoch.
	TriggerCheckpoints(ctx context.Context, addr string, req *weirpb.TriggerCheckpointsRequest) (*weirpb.TriggerCheckpointsResponse, error)
	NotifyCheckpoints(ctx context.Context, addr string, req *weirpb.NotifyCheckpointsRequest) (*weirpb.NotifyCheckpointsResponse, error)
	// Close closes every connection and returns after the watchers ended.
	Close() error
}

// connEvents receives what the connection watchers find.
type connEvents interface {
	// connBroken: the connection to a tracked process left the READY
	// state; a probe follows.
	connBroken(id, instance, reason string)
	// probed: nil when the same process answered a probe.
	probed(id, instance string, err error)
}

var _ taskExecutors = (*grpcTaskExecutors)(nil)

// tmConn is the connection to one taskmanager process and its watcher.
type tmConn struct {
	id, instance, addr string
	cc                 *grpc.ClientConn
	kick               chan struct{} // capacity 1: probe now
	stop               context.CancelFunc
	done               chan struct{} // closed when the watcher returned
}

// grpcTaskExecutors keeps one client connection per taskmanager address.
// Every call carries the fencing epoch that epoch returns at the time of
// the call (0 in ha: none), so that a taskmanager that has seen a newer
// leader rejects it. Connections use insecure credentials: the cluster
// runs on a trusted network (loopback in tests).
type grpcTaskExecutors struct {
	epoch        func() int64
	events       connEvents
	probeTimeout time.Duration
	// creds are the transport credentials for taskmanagers (mutual TLS
	// expecting the taskmanager role, or plaintext).
	creds    grpc.DialOption
	mu       sync.Mutex
	conns    map[string]*tmConn // by address
	closed   bool
	watchers sync.WaitGroup
}

// newGRPCTaskExecutors returns executors whose probes give a process
// probeTimeout to answer.
func newGRPCTaskExecutors(epoch func() int64, events connEvents, probeTimeout time.Duration, creds grpc.DialOption) *grpcTaskExecutors {
	return &grpcTaskExecutors{epoch: epoch, events: events, probeTimeout: probeTimeout, creds: creds, conns: make(map[string]*tmConn)}
}

// dialTaskManager opens a (lazy) client connection to a taskmanager: a
// reconnect backoff capped at a second (gRPC's default grows to two
// minutes), keepalive pings that find a half-open connection, and no idle
// timeout, so that a watched connection leaves READY only when it breaks.
func dialTaskManager(addr string, creds grpc.DialOption) (*grpc.ClientConn, error) {
	return grpc.NewClient(addr, creds,
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: 2 * time.Second,
		}),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 5 * time.Second, PermitWithoutStream: true}),
		grpc.WithIdleTimeout(0))
}

func (g *grpcTaskExecutors) Track(id, instance, addr string) {
	cc, err := dialTaskManager(addr, g.creds)
	if err != nil { // only for an address gRPC cannot parse
		// Reported from another goroutine: Track may be called with the
		// caller's lock held, which the report takes.
		g.watchers.Add(1)
		go func() {
			defer g.watchers.Done()
			g.events.probed(id, instance, fmt.Errorf("taskmanager address %q: %w", addr, err))
		}()
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &tmConn{id: id, instance: instance, addr: addr, cc: cc, kick: make(chan struct{}, 1), stop: cancel, done: make(chan struct{})}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		cancel()
		cc.Close()
		return
	}
	var old []*tmConn
	for a, o := range g.conns {
		if a == addr || o.id == id {
			old = append(old, o)
			delete(g.conns, a)
		}
	}
	g.conns[addr] = c
	g.watchers.Add(1)
	g.mu.Unlock()
	for _, o := range old {
		o.stop()
		o.cc.Close()
	}
	go func() {
		defer g.watchers.Done()
		defer close(c.done)
		g.watch(ctx, c)
	}()
}

func (g *grpcTaskExecutors) Probe(id, instance string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, c := range g.conns {
		if c.id == id && c.instance == instance {
			select {
			case c.kick <- struct{}{}:
			default:
			}
			return
		}
	}
}

// watch probes c, then waits for its connection to leave READY (or a
// kick), reports that and probes again, until a probe fails or ctx ends.
func (g *grpcTaskExecutors) watch(ctx context.Context, c *tmConn) {
	for {
		select {
		case <-c.kick:
		default:
		}
		err := g.probe(ctx, c)
		if ctx.Err() != nil {
			return
		}
		g.events.probed(c.id, c.instance, err)
		if err != nil {
			return
		}
		reason := "a call to it failed"
		wctx, cancel := context.WithCancel(ctx)
		changed := make(chan struct{})
		go func() {
			defer close(changed)
			c.cc.WaitForStateChange(wctx, connectivity.Ready)
		}()
		select {
		case <-c.kick:
		case <-changed:
			reason = fmt.Sprintf("its connection broke (%s)", c.cc.GetState())
		case <-ctx.Done():
		}
		cancel()
		<-changed
		if ctx.Err() != nil {
			return
		}
		g.events.connBroken(c.id, c.instance, reason)
	}
}

// probe asks the process at c.addr for its instance id; it fails unless
// c's process answers within the probe timeout. A connection is probed
// when it is new or just left READY, so it dials at once; one that is in
// its reconnect backoff has failed to connect, and so fails the probe.
// (ClientConn.ResetConnectBackoff is not used: in gRPC 1.85 it reads the
// connection's subchannel map without the lock that guards it.)
func (g *grpcTaskExecutors) probe(ctx context.Context, c *tmConn) error {
	ctx, cancel := context.WithTimeout(ctx, g.probeTimeout)
	defer cancel()
	resp, err := weirpb.NewTaskExecutorServiceClient(c.cc).Ping(ctx, &weirpb.PingRequest{})
	switch {
	case err != nil:
		return fmt.Errorf("no answer at %s: %w", c.addr, err)
	case resp.GetInstanceId() != c.instance:
		return fmt.Errorf("%s is now served by another process (taskmanager %s instance %s, not instance %s)",
			c.addr, resp.GetTaskmanagerId(), resp.GetInstanceId(), c.instance)
	}
	return nil
}

// client returns a client for the taskmanager at addr: its tracked
// connection, or a new untracked one.
func (g *grpcTaskExecutors) client(addr string) (weirpb.TaskExecutorServiceClient, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil, errors.New("jobmanager: shutting down")
	}
	c := g.conns[addr]
	if c == nil {
		cc, err := dialTaskManager(addr, g.creds)
		if err != nil {
			return nil, fmt.Errorf("connect to taskmanager at %s: %w", addr, err)
		}
		c = &tmConn{addr: addr, cc: cc, stop: func() {}}
		g.conns[addr] = c
	}
	return weirpb.NewTaskExecutorServiceClient(c.cc), nil
}

func (g *grpcTaskExecutors) SubmitTask(ctx context.Context, addr string, d *weirpb.TaskDeployment, instance string) error {
	c, err := g.client(addr)
	if err != nil {
		return err
	}
	_, err = c.SubmitTask(ctx, &weirpb.SubmitTaskRequest{Task: d, Epoch: g.epoch(), InstanceId: instance})
	return err
}

func (g *grpcTaskExecutors) CancelTask(ctx context.Context, addr string, id *weirpb.ExecutionID) error {
	c, err := g.client(addr)
	if err != nil {
		return err
	}
	_, err = c.CancelTask(ctx, &weirpb.CancelTaskRequest{Id: id, Epoch: g.epoch()})
	return err
}

func (g *grpcTaskExecutors) TriggerCheckpoints(ctx context.Context, addr string, req *weirpb.TriggerCheckpointsRequest) (*weirpb.TriggerCheckpointsResponse, error) {
	c, err := g.client(addr)
	if err != nil {
		return nil, err
	}
	req.Epoch = g.epoch()
	return c.TriggerCheckpoints(ctx, req)
}

func (g *grpcTaskExecutors) NotifyCheckpoints(ctx context.Context, addr string, req *weirpb.NotifyCheckpointsRequest) (*weirpb.NotifyCheckpointsResponse, error) {
	c, err := g.client(addr)
	if err != nil {
		return nil, err
	}
	req.Epoch = g.epoch()
	return c.NotifyCheckpoints(ctx, req)
}

// Close closes every connection and waits for the watchers; later calls
// fail.
func (g *grpcTaskExecutors) Close() error {
	g.mu.Lock()
	g.closed = true
	var errs []error
	for addr, c := range g.conns {
		c.stop()
		errs = append(errs, c.cc.Close())
		delete(g.conns, addr)
	}
	g.mu.Unlock()
	g.watchers.Wait()
	return errors.Join(errs...)
}

// unavailable reports whether err says the taskmanager process called is
// not there (dead, cut off, or replaced by another process at its address).
func unavailable(err error) bool { return status.Code(err) == codes.Unavailable }
