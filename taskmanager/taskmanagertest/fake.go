package taskmanagertest

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/weirstream/weir/proto/weirpb"
)

// rpcTimeout bounds each call the fake makes to the jobmanager, except
// heartbeats, which heartbeatTimeout bounds.
const (
	rpcTimeout       = 10 * time.Second
	heartbeatTimeout = time.Second
)

// fallbackHeartbeatInterval is used when registration fails, so that the
// fake keeps trying to heartbeat.
const fallbackHeartbeatInterval = 20 * time.Millisecond

// Option configures a Fake.
type Option func(*options)

type options struct {
	addr           string
	failWith       func(*weirpb.TaskDeployment) string
	operatorTypes  []string
	ackCheckpoints bool
}

// WithAddr makes the fake listen on addr instead of on a free loopback
// port ("127.0.0.1:0").
func WithAddr(addr string) Option { return func(o *options) { o.addr = addr } }

// FailDeployments makes the fake fail deployments: for each deployment it
// calls fn after reporting the task RUNNING, and if fn returns a non-empty
// message the fake reports the task FAILED with that message.
func FailDeployments(fn func(*weirpb.TaskDeployment) string) Option {
	return func(o *options) { o.failWith = fn }
}

// WithOperatorTypes sets the operator types the fake registers as able to
// run. By default it registers none.
func WithOperatorTypes(types ...string) Option {
	return func(o *options) { o.operatorTypes = slices.Clone(types) }
}

// AckCheckpoints makes the fake acknowledge checkpoints from the start,
// as SetAckCheckpoints(true) does.
func AckCheckpoints() Option { return func(o *options) { o.ackCheckpoints = true } }

// instances numbers the fake taskmanager processes, to give each its own
// instance id.
var instances atomic.Int64

// Fake is a fake taskmanager process. Its methods may be called from any
// goroutine.
type Fake struct {
	weirpb.UnimplementedTaskExecutorServiceServer

	t       testing.TB
	jmAddr  string
	opts    options
	id      string
	inst    string // process instance id
	slots   int
	addr    string
	srv     *grpc.Server
	cc      *grpc.ClientConn
	cluster weirpb.ClusterServiceClient

	wg         sync.WaitGroup
	heartbeats atomic.Int64 // answered heartbeats
	stopHB     chan struct{}
	hbOnce     sync.Once
	// ackCheckpoints: on a trigger, every live task of the job acknowledges
	// with made-up handles (see checkpoint.go).
	ackCheckpoints atomic.Bool
	acks           sync.WaitGroup // acknowledgements being sent

	mu sync.Mutex
	// stopping is set when the test's cleanup begins: from then on no
	// goroutine starts, so that wg.Wait never races a wg.Go, and a failed
	// call to the jobmanager, which stops after the fakes, is not an error.
	stopping bool
	deploy   []*weirpb.TaskDeployment
	live     map[string]*weirpb.ExecutionID // running, by ExecKey
	cancel   []*weirpb.ExecutionID
	triggers []*weirpb.TriggerCheckpointRequest
	notifies []*weirpb.NotifyCheckpointRequest
	acked    map[string]bool                    // job/checkpoint acknowledged
	held     []*weirpb.TriggerCheckpointRequest // triggered while not acknowledging
}

var _ weirpb.TaskExecutorServiceServer = (*Fake)(nil)

// Start starts a fake taskmanager with the given id and number of slots
// that registers with the jobmanager at jmAddr, and returns once the
// registration call has returned. A failed registration fails the test
// but the fake still runs. The fake stops when the test ends.
func Start(t testing.TB, jmAddr, id string, slots int, opts ...Option) *Fake {
	t.Helper()
	o := options{addr: "127.0.0.1:0"}
	for _, opt := range opts {
		opt(&o)
	}
	return start(t, jmAddr, id, slots, o)
}

func start(t testing.TB, jmAddr, id string, slots int, o options) *Fake {
	t.Helper()
	lis, err := net.Listen("tcp", o.addr)
	if err != nil {
		t.Fatal(err)
	}
	f := &Fake{t: t, jmAddr: jmAddr, opts: o, id: id, slots: slots, addr: lis.Addr().String(), srv: grpc.NewServer(),
		inst:   fmt.Sprintf("%s-%d", id, instances.Add(1)),
		stopHB: make(chan struct{}), live: make(map[string]*weirpb.ExecutionID), acked: make(map[string]bool)}
	f.ackCheckpoints.Store(o.ackCheckpoints)
	weirpb.RegisterTaskExecutorServiceServer(f.srv, f)
	f.wg.Go(func() { _ = f.srv.Serve(lis) })
	f.cc, err = grpc.NewClient(jmAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		f.srv.Stop()
		f.wg.Wait()
		t.Fatal(err)
	}
	f.cluster = weirpb.NewClusterServiceClient(f.cc)
	t.Cleanup(func() {
		f.mu.Lock()
		f.stopping = true
		f.mu.Unlock()
		f.StopHeartbeats()
		f.srv.Stop()
		f.wg.Wait()
		f.cc.Close()
	})
	resp := f.register()
	f.wg.Go(func() { f.heartbeatLoop(time.Duration(resp.HeartbeatIntervalMs) * time.Millisecond) })
	return f
}

// Restart kills f, if it is not dead already, and starts a new process of
// the same taskmanager: same id, slots, options and address, but a new
// instance id and no recorded calls. The new fake stops when t ends.
func (f *Fake) Restart(t testing.TB) *Fake {
	t.Helper()
	f.Kill()
	o := f.opts
	o.addr = f.addr
	return start(t, f.jmAddr, f.id, f.slots, o)
}

// ID returns the taskmanager id.
func (f *Fake) ID() string { return f.id }

// Addr returns the address the fake listens on.
func (f *Fake) Addr() string { return f.addr }

// Instance returns the id of this process of the taskmanager.
func (f *Fake) Instance() string { return f.inst }

// Cluster returns the fake's client of the jobmanager's ClusterService,
// for tests that send their own calls as this taskmanager.
func (f *Fake) Cluster() weirpb.ClusterServiceClient { return f.cluster }

func (f *Fake) register() *weirpb.RegisterTaskManagerResponse {
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	resp, err := f.cluster.RegisterTaskManager(ctx, &weirpb.RegisterTaskManagerRequest{
		TaskmanagerId: f.id, InstanceId: f.inst, Address: f.addr, Slots: int32(f.slots), OperatorTypes: f.opts.operatorTypes})
	if err != nil {
		if !f.isStopping() {
			f.t.Errorf("register %s: %v", f.id, err)
		}
		return &weirpb.RegisterTaskManagerResponse{HeartbeatIntervalMs: fallbackHeartbeatInterval.Milliseconds()}
	}
	return resp
}

// heartbeatLoop heartbeats every interval, reporting each live task
// RUNNING with 7 records in, and registers again when the jobmanager asks.
func (f *Fake) heartbeatLoop(interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-f.stopHB:
			return
		case <-tick.C:
		}
		f.mu.Lock()
		req := &weirpb.HeartbeatRequest{TaskmanagerId: f.id, InstanceId: f.inst}
		for _, id := range f.live {
			req.Tasks = append(req.Tasks, &weirpb.TaskStatus{Id: id, State: weirpb.TaskState_TASK_STATE_RUNNING, RecordsIn: 7})
		}
		f.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), heartbeatTimeout)
		resp, err := f.cluster.Heartbeat(ctx, req)
		cancel()
		if err == nil {
			f.heartbeats.Add(1)
			if resp.Reregister {
				f.register()
			}
		}
	}
}

// Heartbeats returns how many heartbeats the jobmanager has answered.
func (f *Fake) Heartbeats() int64 { return f.heartbeats.Load() }

// StopHeartbeats stops heartbeating for good; the fake goes on serving.
func (f *Fake) StopHeartbeats() { f.hbOnce.Do(func() { close(f.stopHB) }) }

// Kill stops the fake as a killed process stops: its server and its
// connections close, and it heartbeats no more. Its calls to the
// jobmanager already under way may still arrive.
func (f *Fake) Kill() {
	f.StopHeartbeats()
	f.srv.Stop()
}

// report sends a task's state to the jobmanager. An unavailable
// jobmanager is not an error; any other failure fails the test.
func (f *Fake) report(id *weirpb.ExecutionID, s weirpb.TaskState, msg string) {
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	_, err := f.cluster.UpdateTaskState(ctx, &weirpb.UpdateTaskStateRequest{TaskmanagerId: f.id,
		Status: &weirpb.TaskStatus{Id: id, State: s, Error: msg}})
	if err != nil && status.Code(err) != codes.Unavailable && !f.isStopping() {
		f.t.Errorf("%s: UpdateTaskState: %v", f.id, err)
	}
}

// goLocked runs fn in a goroutine the cleanup waits for, unless the
// cleanup has begun. f.mu must be held.
func (f *Fake) goLocked(fn func()) {
	if !f.stopping {
		f.wg.Go(fn)
	}
}

func (f *Fake) isStopping() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stopping
}

// Ping answers with the taskmanager and instance ids.
func (f *Fake) Ping(context.Context, *weirpb.PingRequest) (*weirpb.PingResponse, error) {
	return &weirpb.PingResponse{TaskmanagerId: f.id, InstanceId: f.inst}, nil
}

// SubmitTask records the deployment, makes the task live and reports it
// RUNNING, then FAILED if FailDeployments says so.
func (f *Fake) SubmitTask(_ context.Context, req *weirpb.SubmitTaskRequest) (*weirpb.SubmitTaskResponse, error) {
	d := req.GetTask()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deploy = append(f.deploy, d)
	f.live[ExecKey(d.Id)] = d.Id
	f.goLocked(func() {
		f.report(d.Id, weirpb.TaskState_TASK_STATE_RUNNING, "")
		if f.opts.failWith != nil {
			if msg := f.opts.failWith(d); msg != "" {
				f.mu.Lock()
				delete(f.live, ExecKey(d.Id))
				f.mu.Unlock()
				f.report(d.Id, weirpb.TaskState_TASK_STATE_FAILED, msg)
			}
		}
	})
	return &weirpb.SubmitTaskResponse{}, nil
}

// CancelTask records the call and, if the task is live, ends it and
// reports it CANCELED; it answers NotFound for a task that is not live.
func (f *Fake) CancelTask(_ context.Context, req *weirpb.CancelTaskRequest) (*weirpb.CancelTaskResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cancel = append(f.cancel, req.Id)
	key := ExecKey(req.Id)
	if _, ok := f.live[key]; !ok {
		return nil, status.Errorf(codes.NotFound, "no task %s", key)
	}
	delete(f.live, key)
	f.goLocked(func() { f.report(req.Id, weirpb.TaskState_TASK_STATE_CANCELED, "") })
	return &weirpb.CancelTaskResponse{}, nil
}

// FinishAll reports FINISHED for every live task; none is live afterwards.
func (f *Fake) FinishAll() {
	f.mu.Lock()
	ids := f.live
	f.live = make(map[string]*weirpb.ExecutionID)
	f.mu.Unlock()
	for _, id := range ids {
		f.report(id, weirpb.TaskState_TASK_STATE_FINISHED, "")
	}
}

// FailTask reports the live execution of subtask of vertex FAILED with
// msg. It fails the test if there is no such live task.
func (f *Fake) FailTask(vertex, subtask int32, msg string) {
	f.t.Helper()
	f.mu.Lock()
	var id *weirpb.ExecutionID
	for k, e := range f.live {
		if e.VertexId == vertex && e.Subtask == subtask {
			id = e
			delete(f.live, k)
		}
	}
	f.mu.Unlock()
	if id == nil {
		f.t.Fatalf("%s: no live task %d/%d", f.id, vertex, subtask)
	}
	f.report(id, weirpb.TaskState_TASK_STATE_FAILED, msg)
}

// Deployments returns every deployment received, in arrival order.
func (f *Fake) Deployments() []*weirpb.TaskDeployment {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.deploy)
}

// DeploymentsOf returns the deployments received with the given attempt
// number, in arrival order.
func (f *Fake) DeploymentsOf(attempt int64) []*weirpb.TaskDeployment {
	var out []*weirpb.TaskDeployment
	for _, d := range f.Deployments() {
		if d.Id.Attempt == attempt {
			out = append(out, d)
		}
	}
	return out
}

// Live returns the executions that are live (deployed, and neither
// cancelled, finished nor failed), sorted by ExecKey.
func (f *Fake) Live() []*weirpb.ExecutionID {
	f.mu.Lock()
	defer f.mu.Unlock()
	keys := make([]string, 0, len(f.live))
	for k := range f.live {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]*weirpb.ExecutionID, 0, len(keys))
	for _, k := range keys {
		out = append(out, f.live[k])
	}
	return out
}

// Cancels returns how many CancelTask calls arrived, including those for
// tasks that were not live.
func (f *Fake) Cancels() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.cancel)
}

// Cancelled returns the executions CancelTask was called for, as ExecKey
// strings, in arrival order.
func (f *Fake) Cancelled() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, id := range f.cancel {
		out = append(out, ExecKey(id))
	}
	return out
}

// ExecKey formats an execution id as job/vertex/subtask/attempt.
func ExecKey(id *weirpb.ExecutionID) string {
	return fmt.Sprintf("%s/%d/%d/%d", id.JobId, id.VertexId, id.Subtask, id.Attempt)
}
