package jobmanager

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/weirstream/weir/coordinator"
	"github.com/weirstream/weir/internal/storagemetrics"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/weirstream/weir/blobstore"
	"github.com/weirstream/weir/ha"
	"github.com/weirstream/weir/jobmanager/jobstore"
	"github.com/weirstream/weir/jobmanager/scheduler"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/security"
	"github.com/weirstream/weir/stream"
)

const (
	// rpcTimeout bounds one SubmitTask or CancelTask call.
	rpcTimeout = 10 * time.Second
	// shutdownTimeout bounds the best-effort cancellation of running tasks
	// and the draining of servers when Run stops.
	shutdownTimeout = 5 * time.Second
)

// JobManager is the cluster master. Create it with New and start it with
// Run; its methods are safe for concurrent use.
type JobManager struct {
	cfg Config
	// tls is the loaded Config.TLS; nil: plaintext on loopback.
	tls *security.Material
	// paths confines the files jobs may use (Config.AllowedPaths).
	paths *stream.PathPolicy
	// submitting holds a token per submission being planned.
	submitting chan struct{}
	reg        *stream.Registry
	log        *slog.Logger
	id         string
	now        func() time.Time
	started    atomic.Bool
	ready      chan struct{}
	addrs      struct {
		sync.Mutex
		rpc, rest string
	}
	mu struct {
		sync.Mutex
		core *scheduler.Scheduler
	}
	// Seams to the checkpoint storage and the restart strategies (wiring.go
	// sets the real ones; tests may replace them before Run).
	openStorage func(ctx context.Context, uri string) (checkpointStore, error)
	// storageCounts counts the object-store requests of the checkpoint
	// storages openCheckpointStorage opens (weir_storage_requests_total).
	storageCounts blobstore.Counters
	// jobStorage counts each job's requests to its checkpoint storage:
	// its tasks' uploads (reported with their acknowledgements) and the
	// jobmanager's own for it (manifests, deletions, savepoint copies).
	jobStorage struct {
		sync.Mutex
		m map[string]*blobstore.Counters
	}
	newRestart func(cfg stream.RestartConfig, checkpointing bool) (scheduler.RestartStrategy, error)
	// storages holds the opened checkpoint storage of each job that takes
	// checkpoints.
	storages struct {
		sync.Mutex
		m map[string]checkpointStore
	}
	metrics *prometheus.Registry
	// lead is the current leadership (ha: etcd), nil while standby;
	// haClient the etcd client once connected.
	lead     atomic.Pointer[ha.Leadership]
	haClient atomic.Pointer[ha.Client]
	// local is the job store in Config.DataDir (ha: none), set by Run
	// before anything is served; nil without a data directory.
	local *jobstore.Dir
	// attemptBase is added to the execution attempts of the jobs this
	// leader deploys: the leadership term (from etcd) << attemptTermShift,
	// 0 in ha: none.
	attemptBase atomic.Int64
	// reserved caches, per job, the highest checkpoint id reserved in
	// etcd's counter by this leader.
	reserved struct {
		sync.Mutex
		m map[string]int64
	}
	// pins keep checkpoint deletions of jobs whose savepoint is being
	// copied back (savepoint.go).
	pins struct {
		sync.Mutex
		n        map[string]int
		deferred map[string][]scheduler.Action
	}
	// tidy is the storage hygiene state per job (sharedfiles.go).
	tidy struct {
		sync.Mutex
		m map[string]*tidyState
	}
	// tmMemory is the memory each taskmanager reported in its latest
	// heartbeat, by id (only registered instances' heartbeats count).
	tmMemory struct {
		sync.Mutex
		m map[string]*weirpb.MemoryUsage
	}
	// spReqs are the savepoint requests of the REST API (savepoint.go).
	spReqs struct {
		sync.Mutex
		m     map[string]*restSavepointRequest
		order []string
	}
	// bg runs background work of requests (REST savepoints) under bgCtx,
	// which Run cancels when it stops, and waits for it.
	bg    sync.WaitGroup
	bgCtx context.Context
	// execs calls the taskmanagers and watches their connections; set by
	// Run before anything is served.
	execs atomic.Pointer[grpcTaskExecutors]
	// queue holds actions the core returned, for the dispatcher.
	queue struct {
		sync.Mutex
		pending []scheduler.Action
		signal  chan struct{} // capacity 1
	}
	// lanes hold the checkpoint calls (triggers and notifications, batched
	// per taskmanager) waiting for a taskmanager process to which earlier
	// ones of the same job are being sent (dispatch); a key is present
	// while its lane's goroutine runs.
	lanes struct {
		sync.Mutex
		m map[laneKey][]*checkpointCall
	}
}

// laneKey names the executions of one job on one taskmanager process.
type laneKey struct {
	job                         string
	taskManager, instance, addr string
}

// New returns a JobManager for cfg whose jobs are planned against reg. It
// has no side effects: nothing listens until Run.
func New(cfg Config, reg *stream.Registry) (*JobManager, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if reg == nil {
		return nil, errors.New("jobmanager: no operator registry; pass the registry the taskmanagers use")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	material, err := cfg.TLS.Load()
	if err != nil {
		return nil, fmt.Errorf("jobmanager config: TLS: %w", err)
	}
	if material != nil && !material.Self().Has(security.RoleJobManager) {
		return nil, fmt.Errorf("jobmanager config: TLS: certificate %s is for %q with roles %v, not a jobmanager's; use the jobmanager certificate",
			cfg.TLS.CertFile, material.Self().Name, material.Self().Roles)
	}
	roots := cfg.AllowedPaths
	if len(roots) == 0 {
		roots = []string{os.TempDir()}
	}
	paths, err := stream.NewPathPolicy(roots)
	if err != nil {
		return nil, fmt.Errorf("jobmanager config: AllowedPaths: %w", err)
	}
	jm := &JobManager{cfg: cfg, tls: material, paths: paths, submitting: make(chan struct{}, maxSubmissions), reg: reg, log: log, id: randomID(), now: time.Now, ready: make(chan struct{}),
		newRestart: newRestartStrategy, metrics: cfg.MetricsRegistry, bgCtx: context.Background()}
	jm.openStorage = func(ctx context.Context, uri string) (checkpointStore, error) {
		return openCheckpointStorage(ctx, uri, &jm.storageCounts)
	}
	jm.mu.core = scheduler.New(scheduler.Config{HeartbeatTimeout: cfg.HeartbeatTimeout, CancelTimeout: cfg.HeartbeatTimeout,
		JobRetention: cfg.JobRetention, MaxEndedJobs: cfg.MaxEndedJobs})
	jm.queue.signal = make(chan struct{}, 1)
	jm.storages.m = make(map[string]checkpointStore)
	jm.reserved.m = make(map[string]int64)
	if jm.metrics == nil {
		jm.metrics = prometheus.NewRegistry()
		jm.metrics.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	for _, c := range append([]prometheus.Collector{&collector{jm: jm}}, storagemetrics.Collectors(&jm.storageCounts)...) {
		if err := jm.metrics.Register(c); err != nil {
			return nil, fmt.Errorf("jobmanager: registering metrics: %w; give each jobmanager its own MetricsRegistry", err)
		}
	}
	return jm, nil
}

// Metrics serves the jobmanager's Prometheus metrics (and whatever else
// is registered on Config.MetricsRegistry) in the Prometheus text format.
func (jm *JobManager) Metrics() http.Handler {
	return promhttp.HandlerFor(jm.metrics, promhttp.HandlerOpts{})
}

// storage returns the checkpoint storage of job id, or nil.
func (jm *JobManager) storage(id string) checkpointStore {
	jm.storages.Lock()
	defer jm.storages.Unlock()
	return jm.storages.m[id]
}

// randomID returns 16 random hex characters.
func randomID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails
	return hex.EncodeToString(b[:])
}

// Ready is closed once Run listens on both addresses.
func (jm *JobManager) Ready() <-chan struct{} { return jm.ready }

// RPCAddr returns the address the gRPC server is bound to, or "" before
// Ready is closed.
func (jm *JobManager) RPCAddr() string {
	jm.addrs.Lock()
	defer jm.addrs.Unlock()
	return jm.addrs.rpc
}

// RESTAddr returns the address the REST API is bound to, or "" before Ready
// is closed or when it is disabled.
func (jm *JobManager) RESTAddr() string {
	jm.addrs.Lock()
	defer jm.addrs.Unlock()
	return jm.addrs.rest
}

// Run listens, serves gRPC (ClusterService and JobService) and REST until
// ctx is cancelled, then cancels the running jobs' tasks (best effort,
// bounded by a few seconds) and returns after all its goroutines exit. It
// returns nil after a cancelled ctx, or the error that stopped it.
func (jm *JobManager) Run(ctx context.Context) error {
	if !jm.started.CompareAndSwap(false, true) {
		return errors.New("jobmanager: Run called twice; create a new JobManager")
	}
	// The jobs of the data directory are recovered before anything is
	// served, so that clients never see a restarted jobmanager without
	// them.
	if err := jm.openLocalStore(ctx); err != nil {
		return err
	}
	if jm.local != nil {
		defer jm.local.Close()
	}
	bgCtx, cancelBg := context.WithCancel(ctx)
	jm.bgCtx = bgCtx
	defer jm.bg.Wait()
	defer cancelBg()
	rpcLis, err := net.Listen("tcp", jm.cfg.RPCAddress)
	if err != nil {
		return fmt.Errorf("jobmanager: listen for gRPC on %s: %w; is another jobmanager running? pick another RPCAddress", jm.cfg.RPCAddress, err)
	}
	var restLis net.Listener
	if jm.cfg.RESTAddress != "" {
		restLis, err = net.Listen("tcp", jm.cfg.RESTAddress)
		if err != nil {
			rpcLis.Close()
			return fmt.Errorf("jobmanager: listen for REST on %s: %w; pick another RESTAddress or disable REST with an empty one", jm.cfg.RESTAddress, err)
		}
	}
	execs := newGRPCTaskExecutors(jm.epoch, jm, jm.probeTimeout(), security.DialOption(jm.tls, security.RoleTaskManager))
	defer execs.Close()
	jm.execs.Store(execs)

	gs := grpc.NewServer(append(jobManagerPolicy.ServerOptions(jm.tls, jm.standbyInterceptor),
		grpc.MaxRecvMsgSize(maxRequestBytes), grpc.MaxConcurrentStreams(maxStreams))...)
	weirpb.RegisterClusterServiceServer(gs, &clusterServer{jm: jm})
	weirpb.RegisterJobServiceServer(gs, &jobServer{jm: jm})
	hs := &http.Server{Handler: security.HTTPHandler(jm.tls, jm.restHandler()), ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10}
	if jm.tls != nil {
		hs.TLSConfig = jm.tls.ServerConfig()
	}

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := gs.Serve(rpcLis); err != nil {
			return fmt.Errorf("jobmanager: gRPC server: %w", err)
		}
		return nil
	})
	if restLis != nil {
		g.Go(func() error {
			serve := hs.Serve
			if jm.tls != nil {
				serve = func(l net.Listener) error { return hs.ServeTLS(l, "", "") }
			}
			if err := serve(restLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("jobmanager: REST server: %w", err)
			}
			return nil
		})
	}
	lost := false
	g.Go(func() error {
		if !jm.cfg.HA.etcd() {
			jm.lead.Store(nil)
			jm.runLeader(gctx, execs, nil)
			return nil
		}
		l, err := jm.campaign(gctx)
		if err != nil {
			if gctx.Err() != nil {
				return nil
			}
			return err
		}
		if err := jm.runLeader(gctx, execs, l.Lost()); err != nil {
			lost = true
			jm.log.Error("leadership lost; stopping at once (restart this process to stand by again)", "reason", l.Reason())
			return err
		}
		return nil
	})

	jm.addrs.Lock()
	jm.addrs.rpc = rpcLis.Addr().String()
	if restLis != nil {
		jm.addrs.rest = restLis.Addr().String()
	}
	jm.addrs.Unlock()
	jm.log.Info("jobmanager started", "id", jm.id, "rpc", jm.RPCAddr(), "rest", jm.RESTAddr())
	close(jm.ready)

	<-gctx.Done()
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	jm.stopServers(stopCtx, gs, hs, restLis != nil)
	err = g.Wait()

	if c := jm.haClient.Load(); c != nil {
		defer c.Close()
	}
	if lost || (jm.cfg.HA.etcd() && jm.lead.Load() == nil) {
		return err
	}
	// Best-effort: tell taskmanagers to stop this jobmanager's tasks.
	jm.mu.Lock()
	cancels := jm.mu.core.Shutdown(jm.now())
	logs := jm.mu.core.Logs()
	jm.mu.Unlock()
	jm.logScheduler(logs)
	var wg sync.WaitGroup
	for _, a := range cancels {
		wg.Go(func() {
			ca := a.(scheduler.CancelAction)
			if err := execs.CancelTask(stopCtx, ca.Addr, executionID(ca.JobID, ca.Vertex, ca.Subtask, ca.Attempt)); err != nil {
				jm.log.Warn("cancelling task at shutdown failed", "job", ca.JobID, "taskmanager", ca.TaskManager, "error", err)
			}
		})
	}
	wg.Wait()
	jm.log.Info("jobmanager stopped", "id", jm.id)
	if ctx.Err() != nil && err == nil {
		return nil
	}
	return err
}

func (jm *JobManager) stopServers(ctx context.Context, gs *grpc.Server, hs *http.Server, rest bool) {
	done := make(chan struct{})
	go func() { gs.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		gs.Stop()
		<-done
	}
	if rest {
		if err := hs.Shutdown(ctx); err != nil {
			hs.Close()
		}
	}
}

// probeTimeout is how long a suspected taskmanager has to answer a probe:
// half the heartbeat timeout, at least 500ms and at most 3s.
func (jm *JobManager) probeTimeout() time.Duration {
	return min(max(jm.cfg.HeartbeatTimeout/2, 500*time.Millisecond), 3*time.Second)
}

// connBroken and probed receive the connection watchers' findings
// (connEvents).
func (jm *JobManager) connBroken(id, instance, reason string) {
	jm.step(func(c *scheduler.Scheduler, now time.Time) []scheduler.Action {
		return c.Suspect(id, instance, reason, now)
	})
}

func (jm *JobManager) probed(id, instance string, err error) {
	jm.step(func(c *scheduler.Scheduler, now time.Time) []scheduler.Action {
		return c.Probed(id, instance, err, now)
	})
}

// suspectIfUnavailable suspects process instance of taskmanager id when a
// call to it failed as Unavailable: it died, is cut off, or another process
// serves its address.
func suspectIfUnavailable(c *scheduler.Scheduler, id, instance string, err error, now time.Time) []scheduler.Action {
	if !unavailable(err) {
		return nil
	}
	return c.Suspect(id, instance, fmt.Sprintf("a call to it failed: %v", err), now)
}

// tickInterval is how often deadlines (heartbeats, slot waits, cancel
// confirmations, restart delays, checkpoint triggers and timeouts) are
// checked: at most every 100ms, and four times per checkpoint interval of
// the running jobs, but not more often than every 5ms.
func (jm *JobManager) tickInterval() time.Duration {
	d := min(max(min(jm.cfg.HeartbeatTimeout, jm.cfg.SlotWaitTimeout)/20, 5*time.Millisecond), 100*time.Millisecond)
	jm.mu.Lock()
	ck := jm.mu.core.MinCheckpointInterval()
	jm.mu.Unlock()
	if ck > 0 {
		d = max(min(d, ck/4), 5*time.Millisecond)
	}
	return d
}

// runLeader runs the tick loop and the dispatcher until ctx ends (nil)
// or lost closes (ErrLeadershipLost).
func (jm *JobManager) runLeader(ctx context.Context, execs taskExecutors, lost <-chan struct{}) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { jm.tickLoop(ctx) })
	wg.Go(func() { jm.dispatch(ctx, execs) })
	var err error
	select {
	case <-ctx.Done():
	case <-lost:
		err = ErrLeadershipLost
	}
	cancel()
	wg.Wait()
	return err
}

func (jm *JobManager) tickLoop(ctx context.Context) {
	t := time.NewTimer(jm.tickInterval())
	defer t.Stop()
	done := make(map[string]bool)
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			jm.step(func(c *scheduler.Scheduler, now time.Time) []scheduler.Action { return c.Tick(now) })
			if jm.jobStore() != nil && time.Since(last) > 500*time.Millisecond {
				last = time.Now()
				jm.haPublishTerminal(ctx, done)
			}
			t.Reset(jm.tickInterval())
		}
	}
}

// step runs fn on the core under the lock and queues the actions it
// returns.
func (jm *JobManager) step(fn func(c *scheduler.Scheduler, now time.Time) []scheduler.Action) {
	jm.mu.Lock()
	acts := fn(jm.mu.core, jm.now())
	logs := jm.mu.core.Logs()
	jm.mu.Unlock()
	jm.logScheduler(logs)
	jm.enqueue(acts)
}

// logScheduler writes what the scheduler noted to the log.
func (jm *JobManager) logScheduler(entries []scheduler.LogEntry) {
	for _, e := range entries {
		jm.log.Log(context.Background(), slog.Level(e.Level), e.Msg, e.Attrs...)
	}
}

func (jm *JobManager) enqueue(acts []scheduler.Action) {
	if len(acts) == 0 {
		return
	}
	jm.queue.Lock()
	jm.queue.pending = append(jm.queue.pending, acts...)
	jm.queue.Unlock()
	select {
	case jm.queue.signal <- struct{}{}:
	default:
	}
}

// dispatch performs queued actions, each in its own goroutine (the
// checkpoint calls of one job to one taskmanager, in its lane, one after
// another), until ctx is done; it returns after they all finished.
func (jm *JobManager) dispatch(ctx context.Context, execs taskExecutors) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-jm.queue.signal:
		}
		jm.queue.Lock()
		acts := jm.queue.pending
		jm.queue.pending = nil
		jm.queue.Unlock()
		// Every action of the batch is in its lane before a lane's
		// goroutine starts, so that the triggers (and notifications) one
		// step of the core issued for a checkpoint go in one call per
		// taskmanager.
		var start []laneKey
		for _, a := range acts {
			if k, ok := laneOf(a); ok {
				if jm.enqueueLane(k, a) {
					start = append(start, k)
				}
				continue
			}
			wg.Go(func() { jm.perform(ctx, execs, a) })
		}
		for _, k := range start {
			wg.Go(func() { jm.runLane(ctx, execs, k) })
		}
	}
}

// laneOf returns the lane of a trigger or notification: the checkpoint
// calls of one job to one taskmanager process are sent one after another,
// in the order the scheduler issued their actions, so that a task never
// sees checkpoint n+1's trigger before n's (it would decline n) nor a
// notification overtake a trigger. The scheduler's actions name one
// execution each; a lane merges consecutive ones of the same checkpoint
// into one call (checkpointCall), which keeps every execution's order.
func laneOf(a scheduler.Action) (laneKey, bool) {
	var t scheduler.Target
	switch a := a.(type) {
	case scheduler.TriggerAction:
		t = a.Target
	case scheduler.NotifyAction:
		t = a.Target
	default:
		return laneKey{}, false
	}
	return laneKey{job: t.JobID, taskManager: t.TaskManager, instance: t.Instance, addr: t.Addr}, true
}

// checkpointCall is one TriggerCheckpoints or NotifyCheckpoints call: the
// trigger actions (or the notify actions) of one checkpoint, with the same
// flags, for executions of one job on one taskmanager process. Exactly one
// of the two lists is non-empty.
type checkpointCall struct {
	triggers []scheduler.TriggerAction
	notifies []scheduler.NotifyAction
}

func newCheckpointCall(a scheduler.Action) *checkpointCall {
	switch a := a.(type) {
	case scheduler.TriggerAction:
		return &checkpointCall{triggers: []scheduler.TriggerAction{a}}
	case scheduler.NotifyAction:
		return &checkpointCall{notifies: []scheduler.NotifyAction{a}}
	}
	panic(fmt.Sprintf("jobmanager: %T is no checkpoint call", a))
}

// merge adds a to c and reports true when it belongs to the same call: a
// trigger (or notification) of the same checkpoint with the same flags.
func (c *checkpointCall) merge(a scheduler.Action) bool {
	switch a := a.(type) {
	case scheduler.TriggerAction:
		if len(c.triggers) == 0 {
			return false
		}
		f := c.triggers[0]
		if f.CheckpointID != a.CheckpointID || !f.Timestamp.Equal(a.Timestamp) || f.Savepoint != a.Savepoint || f.Drain != a.Drain {
			return false
		}
		c.triggers = append(c.triggers, a)
		return true
	case scheduler.NotifyAction:
		if len(c.notifies) == 0 {
			return false
		}
		f := c.notifies[0]
		if f.CheckpointID != a.CheckpointID || f.Complete != a.Complete {
			return false
		}
		c.notifies = append(c.notifies, a)
		return true
	}
	return false
}

// enqueueLane adds a to lane k — to the call at its tail when a belongs to
// it, else as a new call — and reports whether the lane needs a goroutine:
// it is new (none runs it, and the caller must start one). Only calls not
// yet taken by the lane's goroutine grow.
func (jm *JobManager) enqueueLane(k laneKey, a scheduler.Action) (start bool) {
	jm.lanes.Lock()
	defer jm.lanes.Unlock()
	if jm.lanes.m == nil {
		jm.lanes.m = make(map[laneKey][]*checkpointCall)
	}
	q, running := jm.lanes.m[k]
	if n := len(q); n == 0 || !q[n-1].merge(a) {
		q = append(q, newCheckpointCall(a))
	}
	jm.lanes.m[k] = q
	return !running
}

// runLane performs the calls of lane k in order until it is empty.
func (jm *JobManager) runLane(ctx context.Context, execs taskExecutors, k laneKey) {
	for {
		jm.lanes.Lock()
		q := jm.lanes.m[k]
		if len(q) == 0 {
			delete(jm.lanes.m, k)
			jm.lanes.Unlock()
			return
		}
		c := q[0]
		q[0] = nil
		jm.lanes.m[k] = q[1:]
		jm.lanes.Unlock()
		if len(c.triggers) > 0 {
			jm.sendTriggers(ctx, execs, c.triggers)
		} else {
			jm.sendNotifies(ctx, execs, c.notifies)
		}
	}
}

// sendTriggers sends the triggers ts (one checkpointCall) in one
// TriggerCheckpoints call and feeds the failures back to the core: a task
// that no longer runs is not a decline; any other failure, of the call or
// of one task, declines the checkpoint for that task (TriggerFailed).
func (jm *JobManager) sendTriggers(parent context.Context, execs taskExecutors, ts []scheduler.TriggerAction) {
	ctx, cancel := context.WithTimeout(parent, rpcTimeout)
	defer cancel()
	f := ts[0]
	err := jm.haReserve(ctx, f.JobID, f.CheckpointID)
	var resp *weirpb.TriggerCheckpointsResponse
	if err == nil {
		req := &weirpb.TriggerCheckpointsRequest{Ids: make([]*weirpb.ExecutionID, len(ts)), CheckpointId: f.CheckpointID,
			TimestampMs: f.Timestamp.UnixMilli(), Savepoint: f.Savepoint, Drain: f.Drain, Unaligned: f.Unaligned}
		for i, a := range ts {
			req.Ids[i] = executionID(a.JobID, a.Vertex, a.Subtask, a.Attempt)
		}
		resp, err = execs.TriggerCheckpoints(ctx, f.Addr, req)
	}
	errs := taskErrors(len(ts), func(i int) laneTask { return laneTaskOf(ts[i].Target) }, err, resp.GetFailures())
	var ended, failed int
	var firstErr error
	for i, e := range errs {
		switch {
		case e == nil:
		case status.Code(e) == codes.NotFound:
			// The taskmanager no longer runs the task: the trigger raced
			// with its end, whose report takes the task out of the
			// checkpoint (or, after a failure, the failover aborts it).
			// Not a decline.
			ended++
			jm.log.Debug("checkpoint trigger found the task ended", "job", f.JobID, "checkpoint", f.CheckpointID,
				"vertex", ts[i].Vertex, "subtask", ts[i].Subtask, "taskmanager", f.TaskManager)
		default:
			failed++
			if firstErr == nil {
				firstErr = e
			}
		}
	}
	if ended > 0 {
		jm.log.Info("checkpoint trigger found tasks ended", "job", f.JobID, "checkpoint", f.CheckpointID, "tasks", ended, "taskmanager", f.TaskManager)
	}
	if failed == 0 {
		return
	}
	jm.log.Warn("triggering a checkpoint failed", "job", f.JobID, "checkpoint", f.CheckpointID, "tasks", failed, "of", len(ts),
		"taskmanager", f.TaskManager, "error", firstErr)
	jm.step(func(c *scheduler.Scheduler, now time.Time) []scheduler.Action {
		acts := suspectIfUnavailable(c, f.TaskManager, f.Instance, err, now)
		for i, e := range errs {
			if e != nil && status.Code(e) != codes.NotFound {
				acts = append(acts, c.TriggerFailed(ts[i], e, now)...)
			}
		}
		return acts
	})
}

// sendNotifies sends the notifications ns (one checkpointCall) in one
// NotifyCheckpoints call, best effort: a later completion subsumes this
// one.
func (jm *JobManager) sendNotifies(parent context.Context, execs taskExecutors, ns []scheduler.NotifyAction) {
	ctx, cancel := context.WithTimeout(parent, rpcTimeout)
	defer cancel()
	f := ns[0]
	req := &weirpb.NotifyCheckpointsRequest{Ids: make([]*weirpb.ExecutionID, len(ns)), CheckpointId: f.CheckpointID, Complete: f.Complete}
	for i, a := range ns {
		req.Ids[i] = executionID(a.JobID, a.Vertex, a.Subtask, a.Attempt)
	}
	resp, err := execs.NotifyCheckpoints(ctx, f.Addr, req)
	if unavailable(err) {
		jm.step(func(c *scheduler.Scheduler, now time.Time) []scheduler.Action {
			return suspectIfUnavailable(c, f.TaskManager, f.Instance, err, now)
		})
	}
	if err != nil {
		jm.log.Debug("notifying tasks of a checkpoint failed", "job", f.JobID, "checkpoint", f.CheckpointID,
			"complete", f.Complete, "tasks", len(ns), "taskmanager", f.TaskManager, "error", err)
	} else if n := len(resp.GetFailures()); n > 0 {
		jm.log.Debug("notifying tasks of a checkpoint failed", "job", f.JobID, "checkpoint", f.CheckpointID,
			"complete", f.Complete, "tasks", n, "of", len(ns), "taskmanager", f.TaskManager, "error", resp.GetFailures()[0].GetMessage())
	}
}

// laneTask names one execution attempt of a batched call.
type laneTask struct {
	vertex, subtask int32
	attempt         int64
}

func laneTaskOf(t scheduler.Target) laneTask {
	return laneTask{int32(t.Vertex), int32(t.Subtask), t.Attempt}
}

// taskErrors gives the outcome of each of the n tasks of a batched call
// (task(i) names the i-th): the call's error for all when it failed, else
// the failure the response names for it, else nil.
func taskErrors(n int, task func(i int) laneTask, callErr error, failures []*weirpb.TaskCallFailure) []error {
	errs := make([]error, n)
	if callErr != nil {
		for i := range errs {
			errs[i] = callErr
		}
		return errs
	}
	if len(failures) == 0 {
		return errs
	}
	index := make(map[laneTask]int, n)
	for i := range n {
		index[task(i)] = i
	}
	for _, f := range failures {
		id := f.GetId()
		if i, ok := index[laneTask{id.GetVertexId(), id.GetSubtask(), id.GetAttempt()}]; ok {
			errs[i] = status.Error(codes.Code(f.GetCode()), f.GetMessage())
		}
	}
	return errs
}

func executionID(jobID string, vertex, subtask int, attempt int64) *weirpb.ExecutionID {
	return &weirpb.ExecutionID{JobId: jobID, VertexId: int32(vertex), Subtask: int32(subtask), Attempt: attempt}
}

func (jm *JobManager) perform(parent context.Context, execs taskExecutors, a scheduler.Action) {
	ctx, cancel := context.WithTimeout(parent, rpcTimeout)
	defer cancel()
	switch a := a.(type) {
	case scheduler.DeployAction:
		d := buildDeployment(&a)
		err := execs.SubmitTask(ctx, a.Addr, d, a.Instance)
		if err != nil {
			jm.log.Warn("deploying task failed", "job", a.JobID, "task", d.TaskName, "taskmanager", a.TaskManager, "error", err)
		}
		jm.step(func(c *scheduler.Scheduler, now time.Time) []scheduler.Action {
			return append(suspectIfUnavailable(c, a.TaskManager, a.Instance, err, now), c.DeployDone(a, err, now)...)
		})
	case scheduler.CancelAction:
		err := execs.CancelTask(ctx, a.Addr, executionID(a.JobID, a.Vertex, a.Subtask, a.Attempt))
		// Unavailable: the taskmanager process is not there (killed, or
		// cut off). Treating its task as gone is safe: a task that still
		// runs somewhere carries an old attempt, so its data, acks and
		// commits are rejected, and its taskmanager cancels it when it
		// learns it was declared lost.
		gone := status.Code(err) == codes.NotFound || unavailable(err)
		jm.step(func(c *scheduler.Scheduler, now time.Time) []scheduler.Action {
			return append(suspectIfUnavailable(c, a.TaskManager, a.Instance, err, now), c.CancelDone(a, err, gone, now)...)
		})
	case scheduler.WriteManifestAction:
		m := buildManifest(a)
		var reqs blobstore.Counters // the write's requests, counted in the checkpoint's
		err := jm.writeManifest(blobstore.WithCounters(jm.jobStorageCtx(ctx, a.JobID), &reqs), a.JobID, m, a.Retained)
		if err != nil {
			jm.log.Warn("writing a checkpoint manifest failed", "job", a.JobID, "checkpoint", a.ID, "error", err)
		}
		jm.step(func(c *scheduler.Scheduler, now time.Time) []scheduler.Action {
			return c.ManifestWrittenWith(a.JobID, completed{m: m}, err, coordinatorRequests(reqs.Snapshot()), now)
		})
	case scheduler.ProbeAction:
		execs.Probe(a.TaskManager, a.Instance)
	case scheduler.ForgetJobAction:
		jm.forgetJob(ctx, a)
	case scheduler.DeleteCheckpointsAction:
		if jm.deferIfPinned(a) { // a savepoint is being copied
			return
		}
		st := jm.storage(a.JobID)
		if st == nil {
			return
		}
		ctx = jm.jobStorageCtx(ctx, a.JobID)
		if a.All {
			jm.sweepJob(jm.jobStorageCtx(parent, a.JobID), a.JobID, a.IDs, st)
			return
		}
		for _, id := range a.IDs {
			err := jm.confirmLeading(ctx, fmt.Sprintf("delete checkpoint %d of job %s", id, a.JobID))
			if err == nil {
				err = st.DeleteCheckpoint(ctx, a.JobID, id)
			}
			if err != nil {
				jm.log.Warn("deleting a checkpoint failed; its files stay in storage", "job", a.JobID, "checkpoint", id, "error", err)
			}
		}
		jm.tidyStorage(ctx, a.JobID, st, a.Tidy)
	}
}

// writeManifest writes a completed checkpoint's manifest, then the pointer
// to it.
func (jm *JobManager) writeManifest(ctx context.Context, jobID string, m *weirpb.Manifest, retained []int64) error {
	st := jm.storage(jobID)
	if st == nil {
		return fmt.Errorf("%w: job %s has no checkpoint storage", ErrStorage, jobID)
	}
	if err := jm.haReserve(ctx, jobID, m.CheckpointId); err != nil {
		return err
	}
	if err := jm.checkSharedFiles(ctx, jobID, st, m); err != nil {
		return err
	}
	key, sum, err := st.WriteManifest(ctx, m)
	if err != nil {
		return err
	}
	if js := jm.jobStore(); js != nil {
		p := jobstore.Pointer{ID: m.CheckpointId, ManifestKey: key, ManifestSHA256: sum, Retained: retained}
		if err := js.PutLatestCheckpoint(ctx, jobID, p); err != nil {
			return fmt.Errorf("recording checkpoint %d in the job store: %w", m.CheckpointId, err)
		}
	}
	return st.WritePointer(ctx, jobID, &weirpb.CompletedPointer{Version: 1, CheckpointId: m.CheckpointId,
		ManifestKey: key, ManifestSha256: sum})
}

// forgetJob drops what the shell keeps about a job the scheduler forgot:
// its record in the job store (so that no later start recovers it and the
// store does not grow), its checkpoint storage, its reserved checkpoint id
// and its storage hygiene state. Should the deletion fail, it records the
// job's final state instead.
func (jm *JobManager) forgetJob(ctx context.Context, a scheduler.ForgetJobAction) {
	if st := jm.jobStore(); st != nil {
		if err := st.DeleteJob(ctx, a.JobID); err != nil {
			jm.log.Warn("deleting a forgotten job from the job store failed; recording its final state instead", "job", a.JobID, "error", err)
			b, _ := json.Marshal(haStatus{State: fmt.Sprint(protoJobState(a.State))})
			if err := st.PutJobStatus(ctx, a.JobID, b); err != nil {
				jm.log.Warn("recording a forgotten job's final state in the job store failed", "job", a.JobID, "error", err)
			}
		}
	}
	jm.storages.Lock()
	delete(jm.storages.m, a.JobID)
	jm.storages.Unlock()
	jm.jobStorage.Lock()
	delete(jm.jobStorage.m, a.JobID)
	jm.jobStorage.Unlock()
	jm.reserved.Lock()
	delete(jm.reserved.m, a.JobID)
	jm.reserved.Unlock()
	jm.tidy.Lock()
	delete(jm.tidy.m, a.JobID)
	jm.tidy.Unlock()
}

// jobStorageCounters returns the Counters of job jobID's storage requests.
func (jm *JobManager) jobStorageCounters(jobID string) *blobstore.Counters {
	jm.jobStorage.Lock()
	defer jm.jobStorage.Unlock()
	c := jm.jobStorage.m[jobID]
	if c == nil {
		if jm.jobStorage.m == nil {
			jm.jobStorage.m = make(map[string]*blobstore.Counters)
		}
		c = new(blobstore.Counters)
		jm.jobStorage.m[jobID] = c
	}
	return c
}

// jobStorageCtx returns ctx under which storage requests count as job
// jobID's.
func (jm *JobManager) jobStorageCtx(ctx context.Context, jobID string) context.Context {
	return blobstore.WithCounters(ctx, jm.jobStorageCounters(jobID))
}

// coordinatorRequests converts request counts for the coordinator.
func coordinatorRequests(r blobstore.RequestCounts) coordinator.StorageRequests {
	return coordinator.StorageRequests{Put: r.Put, Get: r.Get, List: r.List, Delete: r.Delete}
}

// countAckStorage counts the storage requests a task's acknowledgement
// reports in its job's. Requests of a stale attempt's upload were made all
// the same, so every acknowledgement counts; one of a job without checkpoint
// storage here (unknown, or forgotten) is dropped.
func (jm *JobManager) countAckStorage(jobID string, r coordinator.StorageRequests) {
	if r.Total() == 0 || jm.storage(jobID) == nil {
		return
	}
	jm.jobStorageCounters(jobID).Add(blobstore.RequestCounts{Put: r.Put, Get: r.Get, List: r.List, Delete: r.Delete})
}
