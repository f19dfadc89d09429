package jobmanager

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/weirstream/weir/coordinator"
	"github.com/weirstream/weir/ha"
	"github.com/weirstream/weir/jobmanager/scheduler"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/security"
	"github.com/weirstream/weir/stream"
)

// Bounds on what callers can make the jobmanager hold at once:
// maxRequestBytes a gRPC request (a submitted job graph is the largest),
// maxStreams the concurrent calls on one connection, maxSubmissions the
// submissions being planned (planning and opening storage take time and
// memory; more wait for none, they are refused with ResourceExhausted).
const (
	maxRequestBytes = 4 << 20
	maxStreams      = 256
	maxSubmissions  = 4
)

// jobManagerPolicy says who may call what, when TLS is on: taskmanagers the
// cluster service (under their own id only), readers the read-only job
// service calls, operators everything else.
var jobManagerPolicy = security.Policy{
	weirpb.ClusterService_RegisterTaskManager_FullMethodName:   {security.RoleTaskManager},
	weirpb.ClusterService_Heartbeat_FullMethodName:             {security.RoleTaskManager},
	weirpb.ClusterService_UpdateTaskState_FullMethodName:       {security.RoleTaskManager},
	weirpb.ClusterService_AcknowledgeCheckpoint_FullMethodName: {security.RoleTaskManager},
	weirpb.ClusterService_DeclineCheckpoint_FullMethodName:     {security.RoleTaskManager},
	weirpb.ClusterService_ReportCheckpoints_FullMethodName:     {security.RoleTaskManager},
	weirpb.ClusterService_SourceInputEnded_FullMethodName:      {security.RoleTaskManager},
	weirpb.JobService_ListJobs_FullMethodName:                  {security.RoleRead},
	weirpb.JobService_GetJob_FullMethodName:                    {security.RoleRead},
	weirpb.JobService_ListTaskManagers_FullMethodName:          {security.RoleRead},
	weirpb.JobService_ListCheckpoints_FullMethodName:           {security.RoleRead},
	weirpb.JobService_InspectCheckpoint_FullMethodName:         {security.RoleRead},
	weirpb.JobService_GetSavepointProgress_FullMethodName:      {security.RoleRead},
	weirpb.JobService_SubmitJob_FullMethodName:                 {security.RoleOperate},
	weirpb.JobService_CancelJob_FullMethodName:                 {security.RoleOperate},
	weirpb.JobService_TriggerCheckpoint_FullMethodName:         {security.RoleOperate},
	weirpb.JobService_CollectGarbage_FullMethodName:            {security.RoleOperate},
	weirpb.JobService_TriggerSavepoint_FullMethodName:          {security.RoleOperate},
	weirpb.JobService_StopJob_FullMethodName:                   {security.RoleOperate},
	weirpb.JobService_DisposeSavepoint_FullMethodName:          {security.RoleOperate},
	weirpb.JobService_PlanJob_FullMethodName:                   {security.RoleOperate},
}

// Errors of the shell, besides the scheduler's.
var (
	// ErrCheckpointNotFound: no such checkpoint of the job.
	ErrCheckpointNotFound = errors.New("jobmanager: checkpoint not found")
	// ErrStorage: checkpoint storage cannot be opened or read.
	ErrStorage = errors.New("jobmanager: checkpoint storage")
)

// toGRPCError turns an error of this package into a gRPC status error. It
// is the only place that picks status codes.
func toGRPCError(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	code := codes.Internal
	switch {
	case errors.Is(err, scheduler.ErrJobNotFound):
		code = codes.NotFound
	case errors.Is(err, ErrCheckpointNotFound), errors.Is(err, ErrSavepointRequestNotFound):
		code = codes.NotFound
	case errors.Is(err, ErrSavepointRequestExists):
		code = codes.AlreadyExists
	case errors.Is(err, scheduler.ErrJobNotCancelable), errors.Is(err, scheduler.ErrCheckpointingOff), errors.Is(err, scheduler.ErrJobNotRunning), errors.Is(err, scheduler.ErrCheckpointNotTriggered),
		errors.Is(err, ErrStorage), errors.Is(err, ErrSavepointFailed):
		code = codes.FailedPrecondition
	case errors.Is(err, scheduler.ErrInvalidArgument):
		code = codes.InvalidArgument
	case errors.Is(err, scheduler.ErrTaskManagerReplaced):
		code = codes.AlreadyExists
	case errors.Is(err, ha.ErrFenced), errors.Is(err, ha.ErrLeadershipLost):
		code = codes.Unavailable // no longer the leader: the client tries another
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	}
	return status.Error(code, err.Error())
}

func unixMillis(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// clusterServer serves ClusterService to taskmanagers.
type clusterServer struct {
	weirpb.UnimplementedClusterServiceServer
	jm *JobManager
}

func (s *clusterServer) RegisterTaskManager(_ context.Context, req *weirpb.RegisterTaskManagerRequest) (*weirpb.RegisterTaskManagerResponse, error) {
	var err error
	r := scheduler.Registration{ID: req.GetTaskmanagerId(), Instance: req.GetInstanceId(), Addr: req.GetAddress(),
		ExchangeAddr: req.GetExchangeAddress(), Slots: int(req.GetSlots()), OpTypes: req.GetOperatorTypes()}
	s.jm.step(func(c *scheduler.Scheduler, now time.Time) []scheduler.Action {
		var acts []scheduler.Action
		acts, err = c.Register(r, now)
		if err == nil {
			// A fresh, watched connection before any action for the new
			// registration is dispatched: the old one may sit in the
			// reconnect backoff of a process that died at this address.
			if ex := s.jm.execs.Load(); ex != nil {
				ex.Track(r.ID, r.Instance, r.Addr)
			}
		}
		return acts
	})
	if err != nil {
		return nil, toGRPCError(err)
	}
	return &weirpb.RegisterTaskManagerResponse{
		JobmanagerId:        s.jm.id,
		HeartbeatIntervalMs: s.jm.cfg.HeartbeatInterval.Milliseconds(),
		HeartbeatTimeoutMs:  s.jm.cfg.HeartbeatTimeout.Milliseconds(),
		Epoch:               s.jm.epoch(),
	}, nil
}

func fromTaskStatus(st *weirpb.TaskStatus) scheduler.TaskReport {
	id := st.GetId()
	return scheduler.TaskReport{JobID: id.GetJobId(), Vertex: int(id.GetVertexId()), Subtask: int(id.GetSubtask()), Attempt: id.GetAttempt(),
		State: scheduler.TaskState(st.GetState()), Err: st.GetError(), RecordsIn: st.GetRecordsIn(), RecordsOut: st.GetRecordsOut(),
		BrokenPeer: st.GetBrokenPeer(), Corrupt: st.GetCorruptCheckpoint(), Restoring: st.GetRestoring(), RestoredBytes: st.GetRestoredBytes(),
		Backpressured: time.Duration(min(max(st.GetBackpressuredMs(), 0), 1<<40)) * time.Millisecond}
}

func (s *clusterServer) Heartbeat(_ context.Context, req *weirpb.HeartbeatRequest) (*weirpb.HeartbeatResponse, error) {
	reports := make([]scheduler.TaskReport, len(req.GetTasks()))
	for i, st := range req.GetTasks() {
		reports[i] = fromTaskStatus(st)
	}
	var rereg bool
	var reason string
	var active []string
	s.jm.step(func(c *scheduler.Scheduler, now time.Time) []scheduler.Action {
		var acts []scheduler.Action
		rereg, acts = c.Heartbeat(req.GetTaskmanagerId(), req.GetInstanceId(), reports, now)
		if rereg {
			reason = c.ReregisterReason(req.GetTaskmanagerId(), req.GetInstanceId())
		}
		active = c.ActiveJobs()
		return acts
	})
	if !rereg && req.GetMemory() != nil {
		s.jm.tmMemory.Lock()
		if s.jm.tmMemory.m == nil {
			s.jm.tmMemory.m = make(map[string]*weirpb.MemoryUsage)
		}
		s.jm.tmMemory.m[req.GetTaskmanagerId()] = req.GetMemory()
		s.jm.tmMemory.Unlock()
	}
	return &weirpb.HeartbeatResponse{Reregister: rereg, Epoch: s.jm.epoch(), Reason: reason, ActiveJobs: active}, nil
}

func (s *clusterServer) UpdateTaskState(_ context.Context, req *weirpb.UpdateTaskStateRequest) (*weirpb.UpdateTaskStateResponse, error) {
	if req.GetStatus() == nil {
		return nil, toGRPCError(fmt.Errorf("%w: UpdateTaskState without a status", scheduler.ErrInvalidArgument))
	}
	r := fromTaskStatus(req.GetStatus())
	s.jm.step(func(c *scheduler.Scheduler, now time.Time) []scheduler.Action {
		return c.Report(req.GetTaskmanagerId(), r, now)
	})
	return &weirpb.UpdateTaskStateResponse{}, nil
}

func (s *clusterServer) AcknowledgeCheckpoint(_ context.Context, req *weirpb.AcknowledgeCheckpointRequest) (*weirpb.AcknowledgeCheckpointResponse, error) {
	id := req.GetId()
	if id == nil {
		return nil, toGRPCError(fmt.Errorf("%w: AcknowledgeCheckpoint without an execution id", scheduler.ErrInvalidArgument))
	}
	st := ackStats(req.GetSyncDurationMs(), req.GetAsyncDurationMs(), req.GetAlignmentDurationMs(), req.GetBytes(),
		req.GetChannelStateBytes(), req.GetBarrierReceivedUnixMs(), req.GetStorageRequests())
	s.jm.countAckStorage(id.GetJobId(), st.Storage)
	handles := req.GetHandles()
	s.jm.step(func(c *scheduler.Scheduler, now time.Time) []scheduler.Action {
		return c.Ack(req.GetTaskmanagerId(), id.GetJobId(), int(id.GetVertexId()), int(id.GetSubtask()), id.GetAttempt(),
			req.GetCheckpointId(), handles, st, now)
	})
	return &weirpb.AcknowledgeCheckpointResponse{}, nil
}

// ackStats converts an acknowledgement's measurements; negative values
// (a confused or hostile sender) count as 0.
func ackStats(syncMs, asyncMs, alignMs, bytes, channelBytes, barrierMs int64, reqs *weirpb.StorageRequests) scheduler.AckStats {
	ms := func(v int64) time.Duration { return time.Duration(max(v, 0)) * time.Millisecond }
	st := scheduler.AckStats{SyncDuration: ms(syncMs), AsyncDuration: ms(asyncMs), AlignmentDuration: ms(alignMs),
		Bytes: max(bytes, 0), ChannelStateBytes: max(channelBytes, 0),
		Storage: coordinator.StorageRequests{Put: max(reqs.GetPut(), 0), Get: max(reqs.GetGet(), 0),
			List: max(reqs.GetList(), 0), Delete: max(reqs.GetDelete(), 0)}}
	if barrierMs > 0 {
		st.BarrierReceived = time.UnixMilli(barrierMs)
	}
	return st
}

func (s *clusterServer) DeclineCheckpoint(_ context.Context, req *weirpb.DeclineCheckpointRequest) (*weirpb.DeclineCheckpointResponse, error) {
	id := req.GetId()
	if id == nil {
		return nil, toGRPCError(fmt.Errorf("%w: DeclineCheckpoint without an execution id", scheduler.ErrInvalidArgument))
	}
	reason := req.GetReason()
	if reason == "" {
		reason = "no reason given"
	}
	s.jm.step(func(c *scheduler.Scheduler, now time.Time) []scheduler.Action {
		return c.Decline(req.GetTaskmanagerId(), id.GetJobId(), int(id.GetVertexId()), int(id.GetSubtask()), id.GetAttempt(),
			req.GetCheckpointId(), reason, now)
	})
	return &weirpb.DeclineCheckpointResponse{}, nil
}

// ReportCheckpoints applies a taskmanager's batch of acknowledgements and
// declines in one step of the core, each entry exactly as
// AcknowledgeCheckpoint or DeclineCheckpoint would: the core drops those of
// stale attempts, of other taskmanagers and of checkpoints no longer
// pending one by one. A batch with an entry that names no execution is
// refused as a whole (InvalidArgument).
func (s *clusterServer) ReportCheckpoints(_ context.Context, req *weirpb.ReportCheckpointsRequest) (*weirpb.ReportCheckpointsResponse, error) {
	for _, a := range req.GetAcks() {
		if a.GetId() == nil {
			return nil, toGRPCError(fmt.Errorf("%w: ReportCheckpoints: an acknowledgement of checkpoint %d without an execution id", scheduler.ErrInvalidArgument, a.GetCheckpointId()))
		}
	}
	for _, d := range req.GetDeclines() {
		if d.GetId() == nil {
			return nil, toGRPCError(fmt.Errorf("%w: ReportCheckpoints: a decline of checkpoint %d without an execution id", scheduler.ErrInvalidArgument, d.GetCheckpointId()))
		}
	}
	tm := req.GetTaskmanagerId()
	s.jm.step(func(c *scheduler.Scheduler, now time.Time) []scheduler.Action {
		var acts []scheduler.Action
		for _, a := range req.GetAcks() {
			id := a.GetId()
			st := ackStats(a.GetSyncDurationMs(), a.GetAsyncDurationMs(), a.GetAlignmentDurationMs(), a.GetBytes(),
				a.GetChannelStateBytes(), a.GetBarrierReceivedUnixMs(), a.GetStorageRequests())
			s.jm.countAckStorage(id.GetJobId(), st.Storage)
			acts = append(acts, c.Ack(tm, id.GetJobId(), int(id.GetVertexId()), int(id.GetSubtask()), id.GetAttempt(),
				a.GetCheckpointId(), a.GetHandles(), st, now)...)
		}
		for _, d := range req.GetDeclines() {
			id := d.GetId()
			reason := d.GetReason()
			if reason == "" {
				reason = "no reason given"
			}
			acts = append(acts, c.Decline(tm, id.GetJobId(), int(id.GetVertexId()), int(id.GetSubtask()), id.GetAttempt(),
				d.GetCheckpointId(), reason, now)...)
		}
		return acts
	})
	return &weirpb.ReportCheckpointsResponse{}, nil
}

func (s *clusterServer) SourceInputEnded(_ context.Context, req *weirpb.SourceInputEndedRequest) (*weirpb.SourceInputEndedResponse, error) {
	id := req.GetId()
	if id == nil {
		return nil, toGRPCError(fmt.Errorf("%w: SourceInputEnded without an execution id", scheduler.ErrInvalidArgument))
	}
	s.jm.step(func(c *scheduler.Scheduler, now time.Time) []scheduler.Action {
		return c.SourceInputEnded(req.GetTaskmanagerId(), id.GetJobId(), int(id.GetVertexId()), int(id.GetSubtask()), id.GetAttempt(), now)
	})
	return &weirpb.SourceInputEndedResponse{}, nil
}

// jobServer serves JobService to clients.
type jobServer struct {
	weirpb.UnimplementedJobServiceServer
	jm *JobManager
}

// admitSubmission takes one of the tokens of the submissions being planned
// at once, or refuses with ResourceExhausted; release returns it.
func (jm *JobManager) admitSubmission() (release func(), err error) {
	select {
	case jm.submitting <- struct{}{}:
		return func() { <-jm.submitting }, nil
	default:
		return nil, status.Errorf(codes.ResourceExhausted, "jobmanager: %d submissions are being planned already; retry in a moment", cap(jm.submitting))
	}
}

func (s *jobServer) SubmitJob(ctx context.Context, req *weirpb.SubmitJobRequest) (*weirpb.SubmitJobResponse, error) {
	release, err := s.jm.admitSubmission()
	if err != nil {
		return nil, err
	}
	defer release()
	id, err := s.jm.submit(ctx, req.GetGraph(), time.Duration(req.GetSlotWaitMs())*time.Millisecond, req.GetRestoreFrom(), req.GetAllowNonRestoredState())
	if err != nil {
		return nil, toGRPCError(err)
	}
	return &weirpb.SubmitJobResponse{JobId: id}, nil
}

// submit plans the graph again (the client's planning is not trusted),
// checks its checkpoint and restart settings, opens its checkpoint storage,
// reads the checkpoint it starts from (from: see parseRestoreFrom; "" for
// none) and hands it to the core. Nothing is left behind when it fails.
func (jm *JobManager) submit(ctx context.Context, pg *weirpb.JobGraph, slotWait time.Duration, from string, allowNonRestored bool) (string, error) {
	id := randomID()
	opts, g, err := jm.prepare(ctx, id, pg, slotWait)
	if err == nil && from != "" {
		opts.Restore, err = jm.loadRestore(ctx, id, from, allowNonRestored, g, opts)
		opts.RestoreForeign = true
		// The job's checkpoint ids go on after the one it starts from, so
		// that an id names one cut of the job's history: two-phase-commit
		// sinks derive their transactions' names from it.
		opts.FirstCheckpointID = checkpointIDOf(opts.Restore) + 1
	}
	if err != nil {
		jm.storages.Lock()
		delete(jm.storages.m, id)
		jm.storages.Unlock()
		return "", err
	}
	if err := jm.haRecordSubmit(ctx, id, pg, opts); err != nil {
		jm.storages.Lock()
		delete(jm.storages.m, id)
		jm.storages.Unlock()
		return "", fmt.Errorf("jobmanager: recording job %q in etcd: %w; retry the submission", g.Name, err)
	}
	jm.step(func(c *scheduler.Scheduler, now time.Time) []scheduler.Action {
		var acts []scheduler.Action
		acts, err = c.Submit(id, g, opts, now)
		return acts
	})
	if err != nil {
		jm.storages.Lock()
		delete(jm.storages.m, id)
		jm.storages.Unlock()
		return "", err
	}
	return id, nil
}

// prepare plans the graph, checks its settings and opens its checkpoint
// storage (registered under id).
func (jm *JobManager) prepare(ctx context.Context, id string, pg *weirpb.JobGraph, slotWait time.Duration) (scheduler.JobOptions, *stream.JobGraph, error) {
	if slotWait < 0 {
		return scheduler.JobOptions{}, nil, fmt.Errorf("%w: slot_wait_ms %d is negative; use 0 for the default", scheduler.ErrInvalidArgument, slotWait.Milliseconds())
	}
	if slotWait == 0 {
		slotWait = jm.cfg.SlotWaitTimeout
	}
	g, err := weirpb.ToGraph(pg)
	if err != nil {
		return scheduler.JobOptions{}, nil, fmt.Errorf("%w: %v", scheduler.ErrInvalidArgument, err)
	}
	if err := stream.PlanWith(g, jm.reg, stream.PlanOptions{Paths: jm.paths}); err != nil { // validates g.Checkpoint too
		return scheduler.JobOptions{}, nil, fmt.Errorf("%w: %v", scheduler.ErrInvalidArgument, err)
	}
	if err := stream.ValidateStateBackend(g.State.Backend); err != nil {
		return scheduler.JobOptions{}, nil, fmt.Errorf("%w: job %q: state: %v", scheduler.ErrInvalidArgument, g.Name, err)
	}
	g.State.Backend = cmp.Or(g.State.Backend, jm.cfg.DefaultStateBackend, stream.StateBackendHeap)
	ck := g.Checkpoint.WithDefaults()
	restartCfg := g.Restart
	if restartCfg.Type == "" {
		restartCfg = jm.cfg.DefaultRestart
	}
	strategy, err := jm.newRestart(restartCfg, ck.Enabled())
	if err != nil {
		return scheduler.JobOptions{}, nil, fmt.Errorf("%w: job %q: restart strategy: %v", scheduler.ErrInvalidArgument, g.Name, err)
	}
	opts := scheduler.JobOptions{SlotWait: slotWait, Restart: strategy, Checkpoint: ck, FirstAttempt: jm.attemptBase.Load() + 1}
	if ck.Enabled() {
		// Storage the job names itself is confined like its files; the
		// jobmanager's own default is the operator's choice.
		if dir, ok := strings.CutPrefix(ck.Storage, "file://"); ok && filepath.IsAbs(dir) { // a relative one the opener refuses
			if err := jm.paths.Check("checkpointing storage", dir); err != nil {
				return scheduler.JobOptions{}, nil, fmt.Errorf("%w: job %q: %v", scheduler.ErrInvalidArgument, g.Name, err)
			}
		}
		opts.Storage = cmp.Or(ck.Storage, jm.cfg.CheckpointStorage, DefaultCheckpointStorage)
		st, err := jm.openStorage(ctx, opts.Storage)
		if err != nil {
			return scheduler.JobOptions{}, nil, fmt.Errorf("%w %s of job %q cannot be opened: %v; fix the job's checkpointing storage (or the jobmanager's default) and submit again",
				ErrStorage, opts.Storage, g.Name, err)
		}
		jm.storages.Lock()
		jm.storages.m[id] = st
		jm.storages.Unlock()
	}
	return opts, g, nil
}

// restartingMessage explains a RESTARTING job in the error field of the
// APIs (gRPC shows the state as FAILING).
func restartingMessage(v *scheduler.JobView, now time.Time) string {
	left := max(v.RestartDue.Sub(now), 0).Round(100 * time.Millisecond)
	return fmt.Sprintf("restarting (attempt %d) in %s after: %s", v.Attempt+1, left, v.Err)
}

// regionsMessage explains the restarting regions of a job that is not
// restarting as a whole, in the error field of the APIs.
func regionsMessage(v *scheduler.JobView, now time.Time) string {
	left := func(t time.Time) time.Duration { return max(t.Sub(now), 0).Round(100 * time.Millisecond) }
	parts := make([]string, 0, len(v.RestartingRegions))
	for _, r := range v.RestartingRegions {
		var what string
		switch r.Phase {
		case scheduler.RegionDeploying:
			what = fmt.Sprintf("redeploying (attempt %d)", r.Attempt)
		case scheduler.RegionWaitingForSlots:
			what = fmt.Sprintf("waiting for slots (attempt %d) for up to %s", r.Attempt, left(r.SlotDeadline))
		default:
			what = fmt.Sprintf("restarting (attempt %d) in %s", r.Attempt, left(r.Due))
		}
		parts = append(parts, fmt.Sprintf("region %d of %d (%d tasks) %s after: %s", r.ID, r.Of, len(r.Tasks), what, r.Cause))
	}
	return strings.Join(parts, "; ")
}

// jobMessage is the error field of a job in the APIs: the job's error, or
// why it or some of its regions restart.
func jobMessage(v *scheduler.JobView, now time.Time) string {
	switch {
	case v.State == scheduler.JobRestarting:
		return restartingMessage(v, now)
	case len(v.RestartingRegions) > 0:
		return regionsMessage(v, now)
	}
	return v.Err
}

// protoJobState maps the core's job state to the protobuf enum, which has
// no RESTARTING: a restarting job shows as FAILING.
func protoJobState(s scheduler.JobState) weirpb.JobState {
	if s == scheduler.JobRestarting {
		return weirpb.JobState_JOB_STATE_FAILING
	}
	return weirpb.JobState(s)
}

func toJobSummary(v *scheduler.JobView, now time.Time) *weirpb.JobSummary {
	s := &weirpb.JobSummary{JobId: v.ID, Name: v.Name, State: protoJobState(v.State), StartTimeMs: unixMillis(v.Start),
		EndTimeMs: unixMillis(v.End), TasksTotal: int32(v.TasksTotal), TasksRunning: int32(v.TasksRunning), Error: jobMessage(v, now)}
	return s
}

func (s *jobServer) ListJobs(context.Context, *weirpb.ListJobsRequest) (*weirpb.ListJobsResponse, error) {
	s.jm.mu.Lock()
	views, now := s.jm.mu.core.Jobs(), s.jm.now()
	s.jm.mu.Unlock()
	resp := &weirpb.ListJobsResponse{}
	for i := range views {
		resp.Jobs = append(resp.Jobs, toJobSummary(&views[i], now))
	}
	return resp, nil
}

func (s *jobServer) GetJob(_ context.Context, req *weirpb.GetJobRequest) (*weirpb.GetJobResponse, error) {
	s.jm.mu.Lock()
	v, err := s.jm.mu.core.Job(req.GetJobId())
	now := s.jm.now()
	s.jm.mu.Unlock()
	if err != nil {
		return nil, toGRPCError(err)
	}
	resp := &weirpb.GetJobResponse{Job: toJobSummary(&v, now), Graph: weirpb.FromGraph(v.Graph),
		Restore: &weirpb.RestoreProgress{BytesRestored: v.Restore.RestoredBytes, BytesTotal: v.Restore.RestoreBytes, TasksRestoring: int32(v.Restore.TasksRestoring)}}
	for _, t := range v.Tasks {
		resp.Tasks = append(resp.Tasks, &weirpb.TaskInfo{Id: executionID(v.ID, t.Vertex, t.Subtask, t.Attempt), Name: t.Name,
			State: weirpb.TaskState(t.State), TaskmanagerId: t.TaskManager, Error: t.Err, RecordsIn: t.RecordsIn, RecordsOut: t.RecordsOut,
			Restoring: t.Restoring, RestoredBytes: t.RestoredBytes, RestoreBytes: t.RestoreBytes})
	}
	return resp, nil
}

func (s *jobServer) CancelJob(_ context.Context, req *weirpb.CancelJobRequest) (*weirpb.CancelJobResponse, error) {
	var err error
	s.jm.step(func(c *scheduler.Scheduler, now time.Time) []scheduler.Action {
		var acts []scheduler.Action
		acts, err = c.Cancel(req.GetJobId(), now)
		return acts
	})
	if err != nil {
		return nil, toGRPCError(err)
	}
	return &weirpb.CancelJobResponse{}, nil
}

func (s *jobServer) ListTaskManagers(context.Context, *weirpb.ListTaskManagersRequest) (*weirpb.ListTaskManagersResponse, error) {
	s.jm.mu.Lock()
	views := s.jm.mu.core.TaskManagers()
	s.jm.mu.Unlock()
	resp := &weirpb.ListTaskManagersResponse{}
	for _, v := range views {
		resp.Taskmanagers = append(resp.Taskmanagers, &weirpb.TaskManagerInfo{TaskmanagerId: v.ID, Address: v.Addr, Live: v.Live,
			Suspected: v.Suspected, Reason: v.Reason,
			SlotsTotal: int32(v.Slots), SlotsFree: int32(v.Free), LastHeartbeatMs: unixMillis(v.LastHeartbeat)})
	}
	return resp, nil
}

func toCheckpointStatus(s coordinator.Status) weirpb.CheckpointStatus {
	switch s {
	case coordinator.InProgress:
		return weirpb.CheckpointStatus_CHECKPOINT_STATUS_IN_PROGRESS
	case coordinator.Completed:
		return weirpb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED
	case coordinator.Failed:
		return weirpb.CheckpointStatus_CHECKPOINT_STATUS_FAILED
	}
	return weirpb.CheckpointStatus_CHECKPOINT_STATUS_UNSPECIFIED
}

// listCheckpoints reports a job's recent checkpoints, newest first. The
// duration of a checkpoint in progress is the time since its trigger.
func (jm *JobManager) listCheckpoints(jobID string) (*weirpb.ListCheckpointsResponse, error) {
	jm.mu.Lock()
	v, err := jm.mu.core.Checkpoints(jobID)
	now := jm.now()
	jm.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if !v.Enabled {
		return nil, fmt.Errorf("%w: job %s takes no checkpoints; set a checkpointing interval in its spec", scheduler.ErrCheckpointingOff, jobID)
	}
	resp := &weirpb.ListCheckpointsResponse{Completed: int64(v.Completed), Failed: int64(v.Failed), InProgress: int64(v.InProgress),
		RestoredFrom: v.RestoredFrom}
	for _, s := range v.History {
		d := s.Duration()
		if s.Status == coordinator.InProgress {
			d = now.Sub(s.TriggerTime)
		}
		info := &weirpb.CheckpointInfo{CheckpointId: s.ID, Status: toCheckpointStatus(s.Status), TriggerTimeMs: unixMillis(s.TriggerTime),
			DurationMs: d.Milliseconds(), SizeBytes: s.Bytes, Failure: s.Failure, Acknowledged: int32(s.Acked), TotalTasks: int32(s.Total)}
		if s.Acked > 0 {
			info.SlowestTask = v.TaskNames[s.SlowestTask]
			info.SlowestTaskMs = s.SlowestAck.Milliseconds()
		}
		resp.Checkpoints = append(resp.Checkpoints, info)
	}
	return resp, nil
}

// inspectCheckpoint reads a completed checkpoint's manifest from storage.
func (jm *JobManager) inspectCheckpoint(ctx context.Context, jobID string, id int64) (*weirpb.InspectCheckpointResponse, error) {
	jm.mu.Lock()
	v, err := jm.mu.core.Checkpoints(jobID)
	jm.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if !v.Enabled {
		return nil, fmt.Errorf("%w: job %s takes no checkpoints", scheduler.ErrCheckpointingOff, jobID)
	}
	st := jm.storage(jobID)
	if id < 1 || st == nil {
		return nil, fmt.Errorf("%w: job %s has no checkpoint %d", ErrCheckpointNotFound, jobID, id)
	}
	m, key, err := readManifest(ctx, st, jobID, id)
	if err != nil {
		if isNotFound(err) {
			return nil, fmt.Errorf("%w: job %s has no checkpoint %d in %s (retained: %v): %v", ErrCheckpointNotFound, jobID, id, v.Storage, v.Retained, err)
		}
		return nil, fmt.Errorf("%w: reading the manifest of checkpoint %d of job %s from %s: %v", ErrStorage, id, jobID, v.Storage, err)
	}
	return &weirpb.InspectCheckpointResponse{Manifest: m, StorageKey: key}, nil
}

func (s *jobServer) CollectGarbage(ctx context.Context, req *weirpb.CollectGarbageRequest) (*weirpb.CollectGarbageResponse, error) {
	minAge := time.Duration(req.GetMinAgeMs()) * time.Millisecond
	switch {
	case req.GetMinAgeMs() == 0:
		minAge = DefaultGCMinAge
	case minAge < 0:
		minAge = 0 // no minimum age
	}
	resp, err := s.jm.collectGarbage(ctx, req.GetJobId(), req.GetDryRun(), minAge)
	return resp, toGRPCError(err)
}

func (s *jobServer) TriggerSavepoint(ctx context.Context, req *weirpb.TriggerSavepointRequest) (*weirpb.SavepointResponse, error) {
	r, err := s.jm.newSavepointRequest(req.GetRequestId(), req.GetJobId(), false, false)
	if err != nil {
		return nil, toGRPCError(err)
	}
	resp, err := s.jm.runSavepointRequest(ctx, req.GetDir(), r)
	return resp, toGRPCError(err)
}

func (s *jobServer) StopJob(ctx context.Context, req *weirpb.StopJobRequest) (*weirpb.SavepointResponse, error) {
	r, err := s.jm.newSavepointRequest(req.GetRequestId(), req.GetJobId(), true, req.GetDrain())
	if err != nil {
		return nil, toGRPCError(err)
	}
	resp, err := s.jm.runSavepointRequest(ctx, req.GetSavepointDir(), r)
	return resp, toGRPCError(err)
}

func (s *jobServer) GetSavepointProgress(_ context.Context, req *weirpb.GetSavepointProgressRequest) (*weirpb.SavepointProgress, error) {
	p, err := s.jm.savepointProgress(req.GetRequestId())
	return p, toGRPCError(err)
}

func (s *jobServer) PlanJob(ctx context.Context, req *weirpb.SubmitJobRequest) (*weirpb.PlanJobResponse, error) {
	release, err := s.jm.admitSubmission()
	if err != nil {
		return nil, err
	}
	defer release()
	resp, err := s.jm.planJob(ctx, req.GetGraph(), req.GetRestoreFrom(), req.GetAllowNonRestoredState())
	return resp, toGRPCError(err)
}

func (s *jobServer) DisposeSavepoint(ctx context.Context, req *weirpb.DisposeSavepointRequest) (*weirpb.DisposeSavepointResponse, error) {
	n, err := s.jm.disposeSavepoint(ctx, req.GetLocation())
	if err != nil {
		return nil, toGRPCError(err)
	}
	return &weirpb.DisposeSavepointResponse{DeletedObjects: int32(n)}, nil
}

func (s *jobServer) ListCheckpoints(_ context.Context, req *weirpb.ListCheckpointsRequest) (*weirpb.ListCheckpointsResponse, error) {
	resp, err := s.jm.listCheckpoints(req.GetJobId())
	return resp, toGRPCError(err)
}

func (s *jobServer) TriggerCheckpoint(_ context.Context, req *weirpb.TriggerJobCheckpointRequest) (*weirpb.TriggerJobCheckpointResponse, error) {
	id, err := s.jm.triggerCheckpoint(req.GetJobId())
	if err != nil {
		return nil, toGRPCError(err)
	}
	return &weirpb.TriggerJobCheckpointResponse{CheckpointId: id}, nil
}

func (jm *JobManager) triggerCheckpoint(jobID string) (int64, error) {
	var id int64
	var err error
	jm.step(func(c *scheduler.Scheduler, now time.Time) []scheduler.Action {
		var acts []scheduler.Action
		id, acts, err = c.TriggerNow(jobID, now)
		return acts
	})
	return id, err
}

func (s *jobServer) InspectCheckpoint(ctx context.Context, req *weirpb.InspectCheckpointRequest) (*weirpb.InspectCheckpointResponse, error) {
	resp, err := s.jm.inspectCheckpoint(ctx, req.GetJobId(), req.GetCheckpointId())
	return resp, toGRPCError(err)
}
