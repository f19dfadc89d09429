package taskmanager

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/dataflow"
	"github.com/weirstream/weir/ha"
	"github.com/weirstream/weir/internal/gctune"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/security"
	"github.com/weirstream/weir/statebackend/backends"
	"github.com/weirstream/weir/stream"
)

// TaskManager runs deployed tasks. Create it with New and start it with Run.
type TaskManager struct {
	cfg Config
	// tls is the loaded Config.TLS; nil: plaintext on loopback.
	tls *security.Material
	// paths confines the files tasks may use (Config.AllowedPaths).
	paths     *stream.PathPolicy
	tempState bool // Run creates a private StateDir and removes it on return
	reg       *stream.Registry
	log       *slog.Logger
	ready     chan struct{}
	addr      string // advertised address, set before ready is closed
	// listenAddr is the bound listen address, and metricsAddr the bound
	// metrics address ("" when off), set before ready is closed.
	listenAddr, metricsAddr string
	// exchangeListenAddr is the bound address of the data exchange.
	exchangeListenAddr string
	// exchangeAddr is the advertised exchange address (addr unless
	// configured), set before ready is closed.
	exchangeAddr string
	// instance is random and new for every TaskManager (process start):
	// the jobmanager tells a restarted process from the old one by it,
	// even at the same address.
	instance string

	mu struct {
		sync.Mutex
		tasks map[taskKey]*runningTask
		// jobsRun holds the jobs this process has run tasks of, whose
		// local state sweepLocalState may remove once they end.
		jobsRun map[string]bool
		// subtasksSwept is, per job, the highest checkpoint id
		// sweepSubtaskState has run with.
		subtasksSwept map[string]int64
		// lateGone holds the late-record counts of tasks no longer in
		// tasks, until their job ends (and endedSeriesGrace passed), so
		// that the counter never goes down when one subtask ends before
		// another (metrics.go).
		lateGone map[lateKey]int64
		// goneTasks holds the final record counts of tasks no longer in
		// tasks, for a while after their job ended (metrics.go).
		goneTasks map[taskKey]*goneTask
		// stopping is set when Run shuts down; submit then refuses tasks,
		// which would otherwise start after cancelAll and never end.
		stopping bool
		// hbInterval and hbTimeout are what the jobmanager asked for.
		hbInterval, hbTimeout time.Duration
		// epoch is the highest jobmanager fencing epoch seen (ha.go).
		epoch int64
	}
	// jm is the jobmanager the taskmanager talks to (in ha: etcd, the
	// leader etcd named last).
	jm atomic.Pointer[jmConn]
	// etcd is the connection to etcd in ha: etcd, while membership runs
	// (nil before it connects): verifyEpoch reads the leader through it.
	etcd atomic.Pointer[ha.Client]
	// testAcceptEpochs skips verifyEpoch, for tests of the fencing rules
	// without an etcd.
	testAcceptEpochs atomic.Bool
	// endedSeriesGrace is how long the metric series of ended tasks stay
	// (metrics.go); tests shorten it. Read under mu.
	endedSeriesGrace time.Duration

	wg sync.WaitGroup // running tasks

	exchange *dataflow.Exchange
	// exchangeRef is exchange for the metrics, which may be read before Run
	// creates it.
	exchangeRef atomic.Pointer[dataflow.Exchange]
	// stateCache is the block cache the Pebble backends of the tasks share
	// (Config.StateCacheBytes), while Run runs.
	stateCache *backends.SharedCache
	storages   storages
	metrics    *metrics
	uploads    sync.WaitGroup // checkpoint uploads in flight
	// acks batches the tasks' checkpoint acknowledgements and declines
	// (ackbatch.go).
	acks *ackBatcher
}

type taskKey struct {
	job     string
	vertex  int32
	subtask int32
}

type runningTask struct {
	id     *weirpb.ExecutionID
	name   string
	task   *dataflow.Task
	deploy *weirpb.TaskDeployment
	spec   *dataflow.TaskSpec
	// cancel stops the task; it also stops the task's checkpoint uploads,
	// which otherwise may outlive a task that finished.
	cancel context.CancelFunc
	state  weirpb.TaskState
	err    string
	// corrupt, on a failed task: it failed on a checkpoint object that does
	// not verify (weirpb.TaskStatus.corrupt_checkpoint).
	corrupt bool
	// brokenPeer, on a failed task, is the exchange address of the
	// taskmanager whose data stream broke and failed it.
	brokenPeer string
	// epoch is the jobmanager epoch the task was deployed under.
	epoch int64
	// restore is the progress of loading the state the task restores
	// (weirpb.TaskStatus.restoring, restored_bytes).
	restore restoreProgress
	// done is closed when runTask returns: the task has ended and closed
	// its state. prev is the earlier attempt of the same subtask that was
	// still running when this one was deployed; this one starts only once
	// prev is done, since both use the subtask's local state directory.
	done chan struct{}
	prev *runningTask
}

// New returns a TaskManager; it does nothing until Run.
func New(cfg Config, reg *stream.Registry) (*TaskManager, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	material, err := cfg.TLS.Load()
	if err != nil {
		return nil, fmt.Errorf("taskmanager config: TLS: %w", err)
	}
	if material != nil && (!material.Self().Has(security.RoleTaskManager) || material.Self().Name != cfg.ID) {
		return nil, fmt.Errorf("taskmanager config: TLS: certificate %s is for %q with roles %v; a taskmanager needs a taskmanager certificate issued for its id %q (or set --id %s)",
			cfg.TLS.CertFile, material.Self().Name, material.Self().Roles, cfg.ID, material.Self().Name)
	}
	roots := cfg.AllowedPaths
	if len(roots) == 0 {
		roots = []string{os.TempDir()}
	}
	paths, err := stream.NewPathPolicy(roots)
	if err != nil {
		return nil, fmt.Errorf("taskmanager config: allowed paths: %w", err)
	}
	tm := &TaskManager{cfg: cfg, tls: material, paths: paths, tempState: cfg.StateDir == "", reg: reg, log: cfg.Logger.With("taskmanager", cfg.ID),
		ready: make(chan struct{}), instance: rand.Text()}
	tm.mu.tasks = make(map[taskKey]*runningTask)
	tm.endedSeriesGrace = endedSeriesGrace
	tm.mu.jobsRun = make(map[string]bool)
	tm.mu.subtasksSwept = make(map[string]int64)
	tm.metrics = newMetrics(tm)
	tm.storages.inline = cfg.StateInlineBytes
	tm.acks = newAckBatcher(cfg.ID, cfg.CheckpointAckDelay, tm.checkpointingTasks,
		func() reportSender { return clusterSender{tm.cluster()} }, tm.log)
	tm.mu.hbInterval = time.Second
	tm.mu.hbTimeout = 10 * time.Second
	return tm, nil
}

// Who may call what, when TLS is on: only the jobmanager the task executor
// service, only other taskmanagers the data exchange.
var (
	controlPolicy = security.Policy{
		weirpb.TaskExecutorService_SubmitTask_FullMethodName:         {security.RoleJobManager},
		weirpb.TaskExecutorService_CancelTask_FullMethodName:         {security.RoleJobManager},
		weirpb.TaskExecutorService_TriggerCheckpoint_FullMethodName:  {security.RoleJobManager},
		weirpb.TaskExecutorService_NotifyCheckpoint_FullMethodName:   {security.RoleJobManager},
		weirpb.TaskExecutorService_TriggerCheckpoints_FullMethodName: {security.RoleJobManager},
		weirpb.TaskExecutorService_NotifyCheckpoints_FullMethodName:  {security.RoleJobManager},
		weirpb.TaskExecutorService_Ping_FullMethodName:               {security.RoleJobManager},
	}
	exchangePolicy = security.Policy{
		weirpb.ExchangeService_Connect_FullMethodName: {security.RoleTaskManager},
	}
)

// Message limits of the two servers: a task deployment is the largest
// control message; a data frame may hold one wide batch.
const (
	maxControlBytes = 16 << 20
	maxFrameBytes   = 256 << 20
)

// exchangeListenAddress is where the data exchange listens: ExchangeAddress,
// else the RPC address's host on a free port.
func exchangeListenAddress(cfg Config) string {
	if cfg.ExchangeAddress != "" {
		return cfg.ExchangeAddress
	}
	host, _, _ := net.SplitHostPort(cfg.RPCAddress)
	return net.JoinHostPort(host, "0")
}

// advertisedExchange is the exchange address other taskmanagers dial:
// ExchangeAdvertiseAddress, else AdvertiseAddress's host with the bound
// exchange port, else the bound exchange address.
func advertisedExchange(cfg Config, bound string) string {
	if cfg.ExchangeAdvertiseAddress != "" {
		return cfg.ExchangeAdvertiseAddress
	}
	if cfg.AdvertiseAddress != "" {
		host, _, _ := net.SplitHostPort(cfg.AdvertiseAddress)
		_, port, _ := net.SplitHostPort(bound)
		return net.JoinHostPort(host, port)
	}
	return bound
}

// ExchangeAddr returns the advertised address of the data exchange, where
// other taskmanagers send this one data; valid once Ready is closed.
func (tm *TaskManager) ExchangeAddr() string { return tm.exchangeAddr }

// ExchangeListenAddr returns the address the data exchange is bound to;
// valid once Ready is closed.
func (tm *TaskManager) ExchangeListenAddr() string { return tm.exchangeListenAddr }

// Instance returns the process instance id the taskmanager registers with.
func (tm *TaskManager) Instance() string { return tm.instance }

// Ready is closed once the taskmanager listens; Addr is valid from then on.
func (tm *TaskManager) Ready() <-chan struct{} { return tm.ready }

// Addr returns the advertised address of the taskmanager's gRPC server.
func (tm *TaskManager) Addr() string { return tm.addr }

// ListenAddr returns the address the taskmanager's gRPC server is bound to;
// valid once Ready is closed.
func (tm *TaskManager) ListenAddr() string { return tm.listenAddr }

// MetricsAddr returns the address metrics are served on ("" when off);
// valid once Ready is closed.
func (tm *TaskManager) MetricsAddr() string { return tm.metricsAddr }

// Run listens, registers with the jobmanager, heartbeats and runs tasks until
// ctx is cancelled. It returns after every task and goroutine has stopped.
func (tm *TaskManager) Run(ctx context.Context) error {
	if gctune.SetFloor(tm.cfg.GCHeapFloorBytes) {
		tm.log.Debug("garbage collection heap floor", "bytes", gctune.Floor())
	}
	if n := tm.cfg.CPUCores; n > 0 {
		runtime.GOMAXPROCS(n)
		tm.log.Info("goroutines run on a set number of CPUs at once (GOMAXPROCS)", "cpu_cores", n, "cpus_available", runtime.NumCPU())
	}
	if tm.tempState {
		// Private and unpredictable: other local users can neither read
		// the state nor plant files where it will be.
		dir, err := os.MkdirTemp("", "weir-state-"+tm.cfg.ID+"-")
		if err != nil {
			return fmt.Errorf("taskmanager: state directory: %w", err)
		}
		tm.cfg.StateDir = dir
		defer os.RemoveAll(dir)
	} else if err := os.MkdirAll(tm.cfg.StateDir, 0o700); err != nil {
		return fmt.Errorf("taskmanager config: state dir %s: %w", tm.cfg.StateDir, err)
	} else {
		tm.adoptLocalState()
	}
	lis, err := net.Listen("tcp", tm.cfg.RPCAddress)
	if err != nil {
		return fmt.Errorf("taskmanager: listen on %s: %w (is another process using the port?)", tm.cfg.RPCAddress, err)
	}
	tm.listenAddr = lis.Addr().String()
	tm.addr = tm.listenAddr
	if tm.cfg.AdvertiseAddress != "" {
		tm.addr = tm.cfg.AdvertiseAddress
	}
	// The data exchange has a listener (and server) of its own, so that the
	// control service accepts only small messages while data frames may
	// be large.
	exchLis, err := net.Listen("tcp", exchangeListenAddress(tm.cfg))
	if err != nil {
		lis.Close()
		return fmt.Errorf("taskmanager: listen for the data exchange on %s: %w (is another process using the port?)", exchangeListenAddress(tm.cfg), err)
	}
	tm.exchangeListenAddr = exchLis.Addr().String()
	tm.exchangeAddr = advertisedExchange(tm.cfg, tm.exchangeListenAddr)
	if !tm.cfg.HA.etcd() {
		if err := tm.switchTo(tm.cfg.JobManagerAddress); err != nil {
			lis.Close()
			exchLis.Close()
			return err
		}
	} else {
		// Until etcd names the leader, calls go nowhere useful.
		c, err := tm.dial("passthrough:///0.0.0.0:1")
		if err != nil {
			lis.Close()
			exchLis.Close()
			return err
		}
		c.addr = ""
		tm.jm.Store(c)
	}
	defer func() { tm.jm.Load().conn.Close() }()

	blockBytes := tm.cfg.StateCacheBytes / 2
	if blockBytes == 0 {
		blockBytes = backends.DefaultBlockCacheBytes * int64(tm.cfg.Slots)
	}
	tm.stateCache = backends.NewSharedCache(blockBytes)
	defer tm.stateCache.Close()
	tm.exchange = dataflow.NewExchange(dataflow.ExchangeConfig{
		SelfAddress:       tm.exchangeAddr,
		CreditsPerChannel: tm.cfg.CreditsPerChannel,
		MemoryBytes:       tm.cfg.ExchangeMemoryBytes,
		ChannelBytes:      tm.cfg.ChannelBytes,
		DebloatTarget:     tm.cfg.DebloatTarget,
		Compression:       tm.cfg.ExchangeCompression,
		CoalesceRows:      offIfZero(tm.cfg.ExchangeCoalesceRows),
		CoalesceTimeout:   tm.cfg.ExchangeCoalesceTimeout,
		DictionaryBytes:   offIfZero(tm.cfg.ExchangeDictionaryBytes),
		DialOptions:       []grpc.DialOption{security.DialOption(tm.tls, security.RoleTaskManager), dataflow.PeerConnectParams()},
		Logger:            tm.log,
	})
	tm.exchangeRef.Store(tm.exchange)
	// The jobmanager's keepalive pings (every 10s) find a half-open
	// connection; allow them.
	keep := grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true})
	srv := grpc.NewServer(append(controlPolicy.ServerOptions(tm.tls), grpc.MaxRecvMsgSize(maxControlBytes), grpc.MaxConcurrentStreams(256), keep)...)
	weirpb.RegisterTaskExecutorServiceServer(srv, &executorServer{tm: tm})
	// A frame holds at most ExchangeConfig.MaxFrameBytes unless one batch is
	// larger; allow generous messages so a wide batch never breaks a stream.
	exchSrv := grpc.NewServer(append(append(exchangePolicy.ServerOptions(tm.tls), dataflow.ExchangeServerOptions()...),
		grpc.MaxRecvMsgSize(maxFrameBytes), grpc.MaxConcurrentStreams(1024), keep)...)
	tm.exchange.Register(exchSrv)
	var metricsSrv *http.Server
	var metricsLis net.Listener
	if tm.cfg.MetricsAddress != "" {
		metricsLis, err = net.Listen("tcp", tm.cfg.MetricsAddress)
		if err != nil {
			lis.Close()
			exchLis.Close()
			return fmt.Errorf("taskmanager: metrics listen on %s: %w", tm.cfg.MetricsAddress, err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(tm.metrics.reg, promhttp.HandlerOpts{}))
		metricsSrv = &http.Server{Handler: security.HTTPHandler(tm.tls, mux), ReadHeaderTimeout: 10 * time.Second,
			ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute}
		if tm.tls != nil {
			metricsSrv.TLSConfig = tm.tls.ServerConfig()
		}
		tm.metricsAddr = metricsLis.Addr().String()
		tm.log.Info("metrics served", "address", tm.metricsAddr)
	}
	close(tm.ready)
	if tm.cfg.HA.etcd() {
		tm.log.Info("taskmanager listening", "address", tm.addr, "instance", tm.instance, "slots", tm.cfg.Slots, "ha", "etcd", "etcd", tm.cfg.HA.Endpoints, "prefix", tm.cfg.HA.Prefix)
	} else {
		tm.log.Info("taskmanager listening", "address", tm.addr, "instance", tm.instance, "slots", tm.cfg.Slots, "jobmanager", tm.cfg.JobManagerAddress)
	}

	g, gctx := errgroup.WithContext(ctx)
	if metricsSrv != nil {
		g.Go(func() error {
			serve := metricsSrv.Serve
			if tm.tls != nil {
				serve = func(l net.Listener) error { return metricsSrv.ServeTLS(l, "", "") }
			}
			if err := serve(metricsLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("taskmanager: metrics: %w", err)
			}
			return nil
		})
		g.Go(func() error {
			<-gctx.Done()
			return metricsSrv.Close()
		})
	}
	g.Go(func() error {
		if err := srv.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			return fmt.Errorf("taskmanager: serve: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		if err := exchSrv.Serve(exchLis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			return fmt.Errorf("taskmanager: serve the data exchange: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		var err error
		if tm.cfg.HA.etcd() {
			err = tm.membershipHA(gctx)
		} else {
			err = tm.membership(gctx)
		}
		tm.stopTasks()
		tm.wg.Wait()
		tm.uploads.Wait()
		tm.acks.close()
		tm.exchange.Close()
		srv.Stop()
		exchSrv.Stop()
		return err
	})
	err = g.Wait()
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

// membership registers with the jobmanager and heartbeats until ctx ends
// (nil), registering again whenever the jobmanager asks or stops
// answering. It returns ErrReplaced when the jobmanager refuses this
// process because a newer one took its id.
func (tm *TaskManager) membership(ctx context.Context) error {
	for ctx.Err() == nil {
		ok, err := tm.register(ctx)
		if !ok {
			return err
		}
		tm.heartbeat(ctx)
	}
	return nil
}

// ErrReplaced: the jobmanager refused to register this process because a
// newer taskmanager process registered with the same id.
var ErrReplaced = errors.New("taskmanager: replaced by a newer process with the same id")

// register registers with the jobmanager, retrying until it answers; it
// returns false when ctx ends (nil) or the jobmanager refuses this process
// for good (ErrReplaced).
func (tm *TaskManager) register(ctx context.Context) (bool, error) {
	req := &weirpb.RegisterTaskManagerRequest{
		TaskmanagerId: tm.cfg.ID, InstanceId: tm.instance, Address: tm.addr, ExchangeAddress: tm.exchangeAddr,
		Slots: int32(tm.cfg.Slots), OperatorTypes: tm.reg.Names(),
	}
	for attempt := 0; ; attempt++ {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		jm := tm.jm.Load()
		resp, err := jm.client.RegisterTaskManager(rctx, req)
		cancel()
		if err == nil {
			tm.observeEpoch(resp.GetEpoch())
			tm.mu.Lock()
			if d := time.Duration(resp.GetHeartbeatIntervalMs()) * time.Millisecond; d > 0 {
				tm.mu.hbInterval = d
			}
			if d := time.Duration(resp.GetHeartbeatTimeoutMs()) * time.Millisecond; d > 0 {
				tm.mu.hbTimeout = d
			}
			tm.mu.Unlock()
			tm.log.Info("registered with jobmanager", "jobmanager", jm.addr, "jobmanager_id", resp.GetJobmanagerId(), "epoch", resp.GetEpoch())
			return true, nil
		}
		if ctx.Err() != nil {
			return false, nil
		}
		if status.Code(err) == codes.AlreadyExists {
			return false, fmt.Errorf("%w: %s", ErrReplaced, status.Convert(err).Message())
		}
		if attempt%10 == 0 {
			tm.log.Warn("cannot register with the jobmanager; retrying (check that it runs and that --jobmanager is right)",
				"jobmanager", jm.addr, "err", err)
		}
		if !sleepCtx(ctx, tm.cfg.RegisterRetry) {
			return false, nil
		}
	}
}

// heartbeat reports task states every interval. It returns when the
// jobmanager asks the taskmanager to register again, or when the
// jobmanager has not answered for the heartbeat timeout: then the
// taskmanager's tasks are cancelled, since the jobmanager will have
// declared them lost.
func (tm *TaskManager) heartbeat(ctx context.Context) {
	lastOK := time.Now()
	for {
		tm.mu.Lock()
		interval, timeout := tm.mu.hbInterval, tm.mu.hbTimeout
		tm.mu.Unlock()
		if !sleepCtx(ctx, interval) {
			return
		}
		req := &weirpb.HeartbeatRequest{TaskmanagerId: tm.cfg.ID, InstanceId: tm.instance, Tasks: tm.statuses(true), Memory: tm.memoryUsage()}
		hctx, cancel := context.WithTimeout(ctx, timeout)
		resp, err := tm.cluster().Heartbeat(hctx, req)
		cancel()
		if err == nil {
			tm.observeEpoch(resp.GetEpoch())
		}
		switch {
		case err == nil && resp.GetReregister():
			tm.log.Warn("jobmanager does not know this taskmanager; cancelling tasks and registering again", "reason", resp.GetReason())
			tm.cancelAll()
			return
		case err == nil:
			lastOK = time.Now()
			tm.forgetReported(req.GetTasks())
			tm.sweepLocalState(resp.GetActiveJobs())
		case ctx.Err() != nil:
			return
		case time.Since(lastOK) > timeout:
			tm.log.Warn("jobmanager unreachable for longer than the heartbeat timeout; cancelling tasks and registering again",
				"timeout", timeout, "err", err)
			tm.cancelAll()
			return
		}
	}
}

// statuses returns every known task's status; with metrics, counters too.
func (tm *TaskManager) statuses(metrics bool) []*weirpb.TaskStatus {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	out := make([]*weirpb.TaskStatus, 0, len(tm.mu.tasks))
	for _, rt := range tm.mu.tasks {
		st := &weirpb.TaskStatus{Id: rt.id, State: rt.state, Error: rt.err, BrokenPeer: rt.brokenPeer, CorruptCheckpoint: rt.corrupt}
		st.Restoring, st.RestoredBytes = rt.restore.load()
		if metrics && rt.task != nil {
			m := rt.task.Metrics()
			st.RecordsIn, st.RecordsOut = m.RecordsIn.Load(), m.RecordsOut.Load()
			st.BackpressuredMs = m.BackpressuredTime().Milliseconds()
		}
		out = append(out, st)
	}
	return out
}

// forgetReported drops terminal tasks whose final state the jobmanager has
// now seen in a heartbeat.
func (tm *TaskManager) forgetReported(sent []*weirpb.TaskStatus) {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	for _, st := range sent {
		if !terminal(st.GetState()) {
			continue
		}
		k := keyOf(st.GetId())
		if rt, ok := tm.mu.tasks[k]; ok && rt.id.GetAttempt() == st.GetId().GetAttempt() && terminal(rt.state) {
			tm.retireLocked(k, rt)
			delete(tm.mu.tasks, k)
		}
	}
}

func terminal(s weirpb.TaskState) bool {
	return s == weirpb.TaskState_TASK_STATE_FINISHED || s == weirpb.TaskState_TASK_STATE_CANCELED || s == weirpb.TaskState_TASK_STATE_FAILED
}

func keyOf(id *weirpb.ExecutionID) taskKey {
	return taskKey{job: id.GetJobId(), vertex: id.GetVertexId(), subtask: id.GetSubtask()}
}

func (tm *TaskManager) cancelAll() {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	tm.cancelAllLocked()
}

// stopTasks cancels every task and refuses new ones, so that tm.wg.Wait
// can return.
func (tm *TaskManager) stopTasks() {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	tm.mu.stopping = true
	tm.cancelAllLocked()
}

func (tm *TaskManager) cancelAllLocked() {
	for _, rt := range tm.mu.tasks {
		if rt.cancel != nil {
			rt.cancel()
		}
	}
}

// submit starts a task deployed under jobmanager epoch epoch (already
// admitted by fenceCall; checked again under the lock that registers it).
func (tm *TaskManager) submit(d *weirpb.TaskDeployment, epoch int64) error {
	spec, err := toTaskSpec(d)
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "task %s: %v", d.GetTaskName(), err)
	}
	spec.LocalStateDir = tm.subtaskStateDir(d.GetId().GetJobId(), d.GetId().GetVertexId(), d.GetId().GetSubtask())
	spec.StateCacheBytes = tm.cfg.StateCacheBytes / int64(tm.cfg.Slots)
	spec.StateCache = tm.stateCache
	spec.Paths = tm.paths
	ctx, cancel := context.WithCancel(context.Background())
	spec.CommitGuard = tm.commitGuard(d.GetTaskName(), epoch)
	if spec.Checkpointing {
		spec.Hooks = &taskHooks{tm: tm, id: d.GetId(), name: d.GetTaskName(), storage: d.GetCheckpointing().GetStorage(),
			spec: spec, ctx: ctx, wg: &tm.uploads}
	}
	task, err := dataflow.NewTask(spec, tm.reg, tm.exchange, tm.log)
	if err != nil {
		cancel()
		return status.Errorf(codes.InvalidArgument, "task %s: %v", d.GetTaskName(), err)
	}
	k := keyOf(d.GetId())
	tm.mu.Lock()
	if tm.mu.stopping {
		tm.mu.Unlock()
		cancel()
		return status.Errorf(codes.Unavailable, "task %s: taskmanager %s is shutting down; deploy the task elsewhere", d.GetTaskName(), tm.cfg.ID)
	}
	if epoch < tm.mu.epoch { // a newer leader appeared since fenceCall
		tm.mu.Unlock()
		cancel()
		return status.Errorf(codes.FailedPrecondition, "stale jobmanager epoch %d < %d: task %s not deployed", epoch, tm.mu.epoch, d.GetTaskName())
	}
	var prev *runningTask
	if old, ok := tm.mu.tasks[k]; ok && !terminal(old.state) {
		if old.epoch >= epoch && old.id.GetAttempt() >= d.GetId().GetAttempt() {
			tm.mu.Unlock()
			cancel()
			return status.Errorf(codes.AlreadyExists, "task %s attempt %d is already running here", d.GetTaskName(), old.id.GetAttempt())
		}
		old.cancel() // an older attempt: it is stale
		prev = old
	}
	if old, ok := tm.mu.tasks[k]; ok {
		tm.retireLocked(k, old)
	}
	rt := &runningTask{id: d.GetId(), name: d.GetTaskName(), task: task, deploy: d, spec: spec, cancel: cancel,
		state: weirpb.TaskState_TASK_STATE_RUNNING, epoch: epoch, done: make(chan struct{}), prev: prev}
	rt.restore.restoring.Store(restores(d))
	tm.mu.tasks[k] = rt
	firstOfJob := !tm.mu.jobsRun[k.job]
	tm.mu.jobsRun[k.job] = true
	tm.wg.Add(1)
	tm.mu.Unlock()
	if firstOfJob {
		tm.markJobDir(k.job)
	}

	tm.log.Info("task deployed", "task", d.GetTaskName(), "job", d.GetId().GetJobId(), "attempt", d.GetId().GetAttempt(), "epoch", epoch)
	go tm.runTask(ctx, rt)
	if id := d.GetRestoreCheckpointId(); id > 0 && d.GetRestoreStorage() == "" && restoreJobID(d) == k.job {
		// A new attempt restores checkpoint id of this job: local state of
		// subtasks gone from here that lacks it is of no more use.
		tm.sweepSubtaskState(k.job, id)
	}
	return nil
}

func (tm *TaskManager) runTask(ctx context.Context, rt *runningTask) {
	defer tm.wg.Done()
	defer close(rt.done)
	tm.report(rt, weirpb.TaskState_TASK_STATE_RUNNING, "", "", false)
	var err error
	if p := rt.prev; p != nil {
		// The stale attempt was cancelled; it may be in the middle of a
		// long step. Its local state goes when it ends.
		select {
		case <-p.done:
		case <-ctx.Done():
			// Cancelled while waiting: this attempt is done only when the
			// stale one is, so that a later attempt waits for both.
			err = ctx.Err()
			defer func() { <-p.done }()
		}
		rt.prev = nil
	}
	if err == nil {
		// The subtask's local state directory is this attempt's now.
		// Restore files are of use only while an attempt opens its state:
		// none are left when it starts or once it ended, however it ended.
		tm.clearRestoreFiles(rt.spec.LocalStateDir)
		restoreStart := time.Now()
		// The restore ends when the task has its state in place: the
		// download of restoreState, then the opening of the state in Run
		// (a Pebble backend streams and replays its changelog there).
		rt.spec.StateRestored = func() {
			if rt.restore.restoring.Swap(false) {
				now := time.Now()
				tm.metrics.observeRestore(rt.id.GetJobId(), rt.name, rt.spec.Subtask, rt.spec.Parallelism, now.Sub(restoreStart), now)
				// The jobmanager learns at once that the task processes
				// (weir submit --from waits for it).
				tm.report(rt, weirpb.TaskState_TASK_STATE_RUNNING, "", "", false)
			}
		}
		err = tm.restoreState(ctx, rt.deploy, rt.spec, &rt.restore)
		if err == nil {
			err = rt.task.Run(ctx)
		}
		rt.restore.restoring.Store(false)
		tm.clearRestoreFiles(rt.spec.LocalStateDir)
	}
	state, msg, peer, corrupt := weirpb.TaskState_TASK_STATE_FINISHED, "", "", false
	switch {
	case err == nil:
	case ctx.Err() != nil:
		state = weirpb.TaskState_TASK_STATE_CANCELED
	default:
		state, msg = weirpb.TaskState_TASK_STATE_FAILED, err.Error()
		if pe := (*dataflow.PeerError)(nil); errors.As(err, &pe) {
			peer = pe.Addr
		}
		corrupt = errors.Is(err, checkpoint.ErrCorrupt)
		tm.log.Error("task failed", "task", rt.name, "err", err)
	}
	rt.cancel()
	tm.mu.Lock()
	rt.state, rt.err, rt.brokenPeer, rt.corrupt = state, msg, peer, corrupt
	tm.mu.Unlock()
	tm.log.Info("task ended", "task", rt.name, "state", state.String())
	tm.report(rt, state, msg, peer, corrupt)
}

// report tells the jobmanager about a state change (brokenPeer and
// corrupt: see weirpb.TaskStatus). A lost report is not fatal: heartbeats
// carry every task's state too.
func (tm *TaskManager) report(rt *runningTask, state weirpb.TaskState, msg, brokenPeer string, corrupt bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m := rt.task.Metrics()
	restoring, restored := rt.restore.load()
	_, err := tm.cluster().UpdateTaskState(ctx, &weirpb.UpdateTaskStateRequest{
		TaskmanagerId: tm.cfg.ID,
		Status: &weirpb.TaskStatus{Id: rt.id, State: state, Error: msg, BrokenPeer: brokenPeer, CorruptCheckpoint: corrupt,
			RecordsIn: m.RecordsIn.Load(), RecordsOut: m.RecordsOut.Load(), Restoring: restoring, RestoredBytes: restored,
			BackpressuredMs: m.BackpressuredTime().Milliseconds()},
	})
	if err != nil {
		tm.log.Debug("task state report failed; the next heartbeat carries it", "err", err)
	}
}

func (tm *TaskManager) cancel(id *weirpb.ExecutionID) {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	if rt, ok := tm.mu.tasks[keyOf(id)]; ok && rt.id.GetAttempt() == id.GetAttempt() {
		rt.cancel()
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// executorServer adapts TaskManager to the generated gRPC service.
type executorServer struct {
	weirpb.UnimplementedTaskExecutorServiceServer
	tm *TaskManager
}

func (s *executorServer) SubmitTask(ctx context.Context, req *weirpb.SubmitTaskRequest) (*weirpb.SubmitTaskResponse, error) {
	if req.GetTask() == nil || req.GetTask().GetId() == nil {
		return nil, status.Error(codes.InvalidArgument, "submit task: no task deployment")
	}
	// The job id becomes a directory of the local state: it must be one
	// path segment.
	if err := stream.ValidateJobID(req.GetTask().GetId().GetJobId()); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "submit task: %v", err)
	}
	if req.GetInstanceId() != s.tm.instance {
		// The jobmanager placed the task on another process at this
		// address (one that died here): Unavailable, so that it takes
		// that process as gone and places the task anew.
		return nil, status.Errorf(codes.Unavailable, "task %s was placed on taskmanager process instance %q, but %s at %s is instance %s",
			req.GetTask().GetTaskName(), req.GetInstanceId(), s.tm.cfg.ID, s.tm.addr, s.tm.instance)
	}
	if err := s.tm.fenceCall(ctx, "SubmitTask", req.GetEpoch()); err != nil {
		return nil, err
	}
	if err := s.tm.submit(req.GetTask(), req.GetEpoch()); err != nil {
		return nil, err
	}
	return &weirpb.SubmitTaskResponse{}, nil
}

func (s *executorServer) TriggerCheckpoint(ctx context.Context, req *weirpb.TriggerCheckpointRequest) (*weirpb.TriggerCheckpointResponse, error) {
	if err := s.tm.fenceCall(ctx, "TriggerCheckpoint", req.GetEpoch()); err != nil {
		return nil, err
	}
	if err := s.tm.triggerCheckpoint(req.GetId(), req.GetCheckpointId(), req.GetTimestampMs(), req.GetSavepoint(), req.GetDrain(), req.GetUnaligned()); err != nil {
		return nil, err
	}
	return &weirpb.TriggerCheckpointResponse{}, nil
}

// TriggerCheckpoints triggers the checkpoint on each task named, fenced
// once for all; the tasks that could not take it are the response's
// failures, each with the status TriggerCheckpoint would have failed with.
func (s *executorServer) TriggerCheckpoints(ctx context.Context, req *weirpb.TriggerCheckpointsRequest) (*weirpb.TriggerCheckpointsResponse, error) {
	if err := s.tm.fenceCall(ctx, "TriggerCheckpoints", req.GetEpoch()); err != nil {
		return nil, err
	}
	resp := &weirpb.TriggerCheckpointsResponse{}
	for _, id := range req.GetIds() {
		if err := s.tm.triggerCheckpoint(id, req.GetCheckpointId(), req.GetTimestampMs(), req.GetSavepoint(), req.GetDrain(), req.GetUnaligned()); err != nil {
			resp.Failures = append(resp.Failures, callFailure(id, err))
		}
	}
	return resp, nil
}

// callFailure is the failure of one task of a batched call.
func callFailure(id *weirpb.ExecutionID, err error) *weirpb.TaskCallFailure {
	st := status.Convert(err)
	return &weirpb.TaskCallFailure{Id: id, Code: int32(st.Code()), Message: st.Message()}
}

// triggerCheckpoint triggers checkpoint on the task attempt id (the call
// is admitted); the error is a status error.
func (tm *TaskManager) triggerCheckpoint(id *weirpb.ExecutionID, checkpoint, timestampMs int64, savepoint, drain, unaligned bool) error {
	rt, ok := tm.task(id)
	if !ok {
		return status.Errorf(codes.NotFound, "trigger checkpoint %d: no such task attempt on taskmanager %s", checkpoint, tm.cfg.ID)
	}
	trigger := rt.task.TriggerCheckpoint
	switch {
	case drain:
		trigger = rt.task.TriggerDrain
	case savepoint:
		trigger = rt.task.TriggerSavepoint
	case unaligned:
		trigger = rt.task.TriggerUnalignedCheckpoint
	}
	if err := trigger(checkpoint, timestampMs); err != nil {
		code := codes.FailedPrecondition
		if errors.Is(err, dataflow.ErrTaskEnded) {
			code = codes.NotFound // as for a task already removed
		}
		return status.Errorf(code, "trigger checkpoint %d on task %s: %v", checkpoint, rt.name, err)
	}
	return nil
}

func (s *executorServer) NotifyCheckpoint(ctx context.Context, req *weirpb.NotifyCheckpointRequest) (*weirpb.NotifyCheckpointResponse, error) {
	if err := s.tm.fenceCall(ctx, "NotifyCheckpoint", req.GetEpoch()); err != nil {
		return nil, err
	}
	if err := s.tm.notifyCheckpoint(req.GetId(), req.GetCheckpointId(), req.GetComplete()); err != nil {
		return nil, err
	}
	s.tm.checkpointEnded(req.GetId().GetJobId(), req.GetCheckpointId(), req.GetComplete())
	return &weirpb.NotifyCheckpointResponse{}, nil
}

// NotifyCheckpoints notifies each task named, fenced once for all; the
// tasks not found are the response's failures.
func (s *executorServer) NotifyCheckpoints(ctx context.Context, req *weirpb.NotifyCheckpointsRequest) (*weirpb.NotifyCheckpointsResponse, error) {
	if err := s.tm.fenceCall(ctx, "NotifyCheckpoints", req.GetEpoch()); err != nil {
		return nil, err
	}
	resp := &weirpb.NotifyCheckpointsResponse{}
	jobs := make(map[string]bool, 1)
	for _, id := range req.GetIds() {
		if err := s.tm.notifyCheckpoint(id, req.GetCheckpointId(), req.GetComplete()); err != nil {
			resp.Failures = append(resp.Failures, callFailure(id, err))
			continue
		}
		jobs[id.GetJobId()] = true
	}
	for job := range jobs {
		s.tm.checkpointEnded(job, req.GetCheckpointId(), req.GetComplete())
	}
	return resp, nil
}

// notifyCheckpoint tells the task attempt id (the call is admitted) that
// checkpoint completed or was aborted; the error is a status error.
func (tm *TaskManager) notifyCheckpoint(id *weirpb.ExecutionID, checkpoint int64, complete bool) error {
	rt, ok := tm.task(id)
	if !ok {
		return status.Errorf(codes.NotFound, "notify checkpoint %d: no such task attempt on taskmanager %s", checkpoint, tm.cfg.ID)
	}
	if complete {
		rt.task.NotifyCheckpointComplete(checkpoint)
	} else {
		rt.task.NotifyCheckpointAborted(checkpoint)
	}
	return nil
}

// checkpointEnded does what a notification of checkpoint of job calls for
// once per job, after its tasks were notified: a completed one makes
// older local state of no use, and the reports of both are no longer
// awaited.
func (tm *TaskManager) checkpointEnded(job string, checkpoint int64, complete bool) {
	if complete {
		tm.sweepSubtaskState(job, checkpoint)
	}
	tm.acks.forget(job, checkpoint)
}

func (s *executorServer) Ping(context.Context, *weirpb.PingRequest) (*weirpb.PingResponse, error) {
	return &weirpb.PingResponse{TaskmanagerId: s.tm.cfg.ID, InstanceId: s.tm.instance}, nil
}

func (s *executorServer) CancelTask(ctx context.Context, req *weirpb.CancelTaskRequest) (*weirpb.CancelTaskResponse, error) {
	if err := s.tm.fenceCall(ctx, "CancelTask", req.GetEpoch()); err != nil {
		return nil, err
	}
	s.tm.cancel(req.GetId())
	return &weirpb.CancelTaskResponse{}, nil
}

// offIfZero is a setting of Config where 0 means off as the exchange takes
// it (where 0 means its default): Config.ExchangeCoalesceRows,
// Config.ExchangeDictionaryBytes.
func offIfZero(n int) int {
	if n == 0 {
		return -1
	}
	return n
}
