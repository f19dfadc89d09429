package jobmanagertest

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/test/polltest"
)

// Defaults of a Fake's settings.
const (
	DefaultID                = "fake-jm"
	DefaultHeartbeatInterval = 50 * time.Millisecond
	DefaultHeartbeatTimeout  = 500 * time.Millisecond
	// DefaultWaitTimeout is generous: test machines may be small and busy.
	DefaultWaitTimeout = 20 * time.Second
)

// Option configures a Fake.
type Option func(*options)

type options struct {
	id                string
	heartbeatInterval time.Duration
	heartbeatTimeout  time.Duration
	waitTimeout       time.Duration
}

// WithID sets the jobmanager id registrations are answered with.
func WithID(id string) Option { return func(o *options) { o.id = id } }

// WithHeartbeat sets the heartbeat interval and timeout registrations are
// answered with.
func WithHeartbeat(interval, timeout time.Duration) Option {
	return func(o *options) { o.heartbeatInterval, o.heartbeatTimeout = interval, timeout }
}

// WithWaitTimeout sets how long WaitReported waits.
func WithWaitTimeout(d time.Duration) Option { return func(o *options) { o.waitTimeout = d } }

// Fake is a fake jobmanager's ClusterService. Its methods may be called
// from any goroutine.
type Fake struct {
	weirpb.UnimplementedClusterServiceServer
	addr string
	opts options

	mu struct {
		sync.Mutex
		lis        net.Listener // open listener not yet served, or nil
		srv        *grpc.Server
		served     chan struct{}
		regs       []*weirpb.RegisterTaskManagerRequest
		heartbeats []*weirpb.HeartbeatRequest
		updates    []*weirpb.UpdateTaskStateRequest
		reports    []*weirpb.ReportCheckpointsRequest
		reregister int      // heartbeats still to answer with reregister=true
		active     []string // the active jobs heartbeats answer with
	}
}

var _ weirpb.ClusterServiceServer = (*Fake)(nil)

// New returns a fake listening on a free loopback port that does not serve
// until Serve is called: meanwhile a client's connection waits in the
// accept backlog. The fake stops and closes its listener when the test
// ends.
func New(t testing.TB, opts ...Option) *Fake {
	t.Helper()
	o := options{id: DefaultID, heartbeatInterval: DefaultHeartbeatInterval,
		heartbeatTimeout: DefaultHeartbeatTimeout, waitTimeout: DefaultWaitTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	j := &Fake{addr: lis.Addr().String(), opts: o}
	j.mu.lis = lis
	t.Cleanup(func() {
		j.Stop()
		j.mu.Lock()
		defer j.mu.Unlock()
		if j.mu.lis != nil {
			j.mu.lis.Close()
			j.mu.lis = nil
		}
	})
	return j
}

// Start returns a fake that serves at once: New followed by Serve.
func Start(t testing.TB, opts ...Option) *Fake {
	t.Helper()
	j := New(t, opts...)
	j.Serve(t)
	return j
}

// Addr returns the address the fake listens on, or listened on last.
func (j *Fake) Addr() string { return j.addr }

// CloseListener closes the listener of a fake that does not serve, so that
// nothing listens at Addr. Serve listens again.
func (j *Fake) CloseListener(t testing.TB) {
	t.Helper()
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.mu.lis == nil {
		t.Fatal("fake jobmanager: no unserved listener to close")
	}
	j.mu.lis.Close()
	j.mu.lis = nil
}

// Serve starts serving on Addr, listening again if needed. It fails the
// test if the fake already serves or the address is taken.
func (j *Fake) Serve(t testing.TB) {
	t.Helper()
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.mu.srv != nil {
		t.Fatal("fake jobmanager: already serving")
	}
	lis := j.mu.lis
	if lis == nil {
		var err error
		if lis, err = net.Listen("tcp", j.addr); err != nil {
			t.Fatalf("fake jobmanager: listen again on %s: %v", j.addr, err)
		}
	}
	j.mu.lis = nil
	srv := grpc.NewServer()
	weirpb.RegisterClusterServiceServer(srv, j)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(lis)
	}()
	j.mu.srv, j.mu.served = srv, served
}

// Stop stops serving (closing the listener and every connection) and waits
// for the server to exit. It does nothing when the fake does not serve.
func (j *Fake) Stop() {
	j.mu.Lock()
	srv, served := j.mu.srv, j.mu.served
	j.mu.srv, j.mu.served = nil, nil
	j.mu.Unlock()
	if srv != nil {
		srv.Stop()
		<-served
	}
}

// RegisterTaskManager records the registration and accepts it, answering
// with the fake's id and heartbeat settings.
func (j *Fake) RegisterTaskManager(_ context.Context, req *weirpb.RegisterTaskManagerRequest) (*weirpb.RegisterTaskManagerResponse, error) {
	j.mu.Lock()
	j.mu.regs = append(j.mu.regs, req)
	j.mu.Unlock()
	return &weirpb.RegisterTaskManagerResponse{
		JobmanagerId:        j.opts.id,
		HeartbeatIntervalMs: j.opts.heartbeatInterval.Milliseconds(),
		HeartbeatTimeoutMs:  j.opts.heartbeatTimeout.Milliseconds(),
	}, nil
}

// Heartbeat records the heartbeat and answers with the active jobs, or
// asks for a new registration if AskReregister says so.
func (j *Fake) Heartbeat(_ context.Context, req *weirpb.HeartbeatRequest) (*weirpb.HeartbeatResponse, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.mu.heartbeats = append(j.mu.heartbeats, req)
	if j.mu.reregister > 0 {
		j.mu.reregister--
		return &weirpb.HeartbeatResponse{Reregister: true}, nil
	}
	return &weirpb.HeartbeatResponse{ActiveJobs: j.mu.active}, nil
}

// UpdateTaskState records the update.
func (j *Fake) UpdateTaskState(_ context.Context, req *weirpb.UpdateTaskStateRequest) (*weirpb.UpdateTaskStateResponse, error) {
	j.mu.Lock()
	j.mu.updates = append(j.mu.updates, req)
	j.mu.Unlock()
	return &weirpb.UpdateTaskStateResponse{}, nil
}

// ReportCheckpoints records the batch of checkpoint reports.
func (j *Fake) ReportCheckpoints(_ context.Context, req *weirpb.ReportCheckpointsRequest) (*weirpb.ReportCheckpointsResponse, error) {
	j.mu.Lock()
	j.mu.reports = append(j.mu.reports, req)
	j.mu.Unlock()
	return &weirpb.ReportCheckpointsResponse{}, nil
}

// CheckpointReports returns every ReportCheckpoints batch received, in
// arrival order.
func (j *Fake) CheckpointReports() []*weirpb.ReportCheckpointsRequest {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.mu.reports)
}

// SetActive makes heartbeats answer that jobs are the active ones.
func (j *Fake) SetActive(jobs ...string) {
	j.mu.Lock()
	j.mu.active = jobs
	j.mu.Unlock()
}

// AskReregister makes the next n heartbeats answer reregister=true.
func (j *Fake) AskReregister(n int) {
	j.mu.Lock()
	j.mu.reregister += n
	j.mu.Unlock()
}

// Registrations returns every registration received, in arrival order.
func (j *Fake) Registrations() []*weirpb.RegisterTaskManagerRequest {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.mu.regs)
}

// Heartbeats returns every heartbeat received, in arrival order.
func (j *Fake) Heartbeats() []*weirpb.HeartbeatRequest {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.mu.heartbeats)
}

// NumHeartbeats returns how many heartbeats arrived.
func (j *Fake) NumHeartbeats() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.mu.heartbeats)
}

// NumUpdates returns how many task state updates arrived.
func (j *Fake) NumUpdates() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.mu.updates)
}

// UpdatesFor returns the statuses UpdateTaskState reported for id, in
// arrival order.
func (j *Fake) UpdatesFor(id *weirpb.ExecutionID) []*weirpb.TaskStatus {
	j.mu.Lock()
	defer j.mu.Unlock()
	var out []*weirpb.TaskStatus
	for _, u := range j.mu.updates {
		if proto.Equal(u.GetStatus().GetId(), id) {
			out = append(out, u.GetStatus())
		}
	}
	return out
}

// StatesOf returns the states UpdateTaskState reported for id, in arrival
// order.
func (j *Fake) StatesOf(id *weirpb.ExecutionID) []weirpb.TaskState {
	var out []weirpb.TaskState
	for _, st := range j.UpdatesFor(id) {
		out = append(out, st.GetState())
	}
	return out
}

// Reported returns the first status UpdateTaskState reported for id in
// state, or nil.
func (j *Fake) Reported(id *weirpb.ExecutionID, state weirpb.TaskState) *weirpb.TaskStatus {
	for _, st := range j.UpdatesFor(id) {
		if st.GetState() == state {
			return st
		}
	}
	return nil
}

// WaitReported waits until UpdateTaskState has reported id in state and
// returns that status. It fails the test if the wait timeout passes first.
func (j *Fake) WaitReported(t testing.TB, id *weirpb.ExecutionID, state weirpb.TaskState) *weirpb.TaskStatus {
	t.Helper()
	var st *weirpb.TaskStatus
	polltest.Eventually(t, j.opts.waitTimeout, fmt.Sprintf("task %v to report %v", id, state), func() bool {
		st = j.Reported(id, state)
		return st != nil
	})
	return st
}
