package jobmanager

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/stream"
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
	case errors.Is(err, ErrJobNotFound):
		code = codes.NotFound
	case errors.Is(err, ErrJobNotCancelable):
		code = codes.FailedPrecondition
	case errors.Is(err, ErrInvalidArgument):
		code = codes.InvalidArgument
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
	s.jm.step(func(c *core, now time.Time) []action {
		var acts []action
		acts, err = c.register(req.GetTaskmanagerId(), req.GetAddress(), int(req.GetSlots()), req.GetOperatorTypes(), now)
		return acts
	})
	if err != nil {
		return nil, toGRPCError(err)
	}
	return &weirpb.RegisterTaskManagerResponse{
		JobmanagerId:        s.jm.id,
		HeartbeatIntervalMs: s.jm.cfg.HeartbeatInterval.Milliseconds(),
		HeartbeatTimeoutMs:  s.jm.cfg.HeartbeatTimeout.Milliseconds(),
	}, nil
}

func fromTaskStatus(st *weirpb.TaskStatus) taskReport {
	id := st.GetId()
	return taskReport{JobID: id.GetJobId(), Vertex: int(id.GetVertexId()), Subtask: int(id.GetSubtask()), Attempt: id.GetAttempt(),
		State: taskState(st.GetState()), Err: st.GetError(), RecordsIn: st.GetRecordsIn(), RecordsOut: st.GetRecordsOut()}
}

func (s *clusterServer) Heartbeat(_ context.Context, req *weirpb.HeartbeatRequest) (*weirpb.HeartbeatResponse, error) {
	reports := make([]taskReport, len(req.GetTasks()))
	for i, st := range req.GetTasks() {
		reports[i] = fromTaskStatus(st)
	}
	var rereg bool
	s.jm.step(func(c *core, now time.Time) []action {
		var acts []action
		rereg, acts = c.heartbeat(req.GetTaskmanagerId(), reports, now)
		return acts
	})
	return &weirpb.HeartbeatResponse{Reregister: rereg}, nil
}

func (s *clusterServer) UpdateTaskState(_ context.Context, req *weirpb.UpdateTaskStateRequest) (*weirpb.UpdateTaskStateResponse, error) {
	if req.GetStatus() == nil {
		return nil, toGRPCError(fmt.Errorf("%w: UpdateTaskState without a status", ErrInvalidArgument))
	}
	r := fromTaskStatus(req.GetStatus())
	s.jm.step(func(c *core, now time.Time) []action { return c.report(req.GetTaskmanagerId(), r, now) })
	return &weirpb.UpdateTaskStateResponse{}, nil
}

// jobServer serves JobService to clients.
type jobServer struct {
	weirpb.UnimplementedJobServiceServer
	jm *JobManager
}

func (s *jobServer) SubmitJob(_ context.Context, req *weirpb.SubmitJobRequest) (*weirpb.SubmitJobResponse, error) {
	id, err := s.jm.submit(req.GetGraph(), time.Duration(req.GetSlotWaitMs())*time.Millisecond)
	if err != nil {
		return nil, toGRPCError(err)
	}
	return &weirpb.SubmitJobResponse{JobId: id}, nil
}

// submit plans the graph again (the client's planning is not trusted) and
// hands it to the core.
func (jm *JobManager) submit(pg *weirpb.JobGraph, slotWait time.Duration) (string, error) {
	if slotWait < 0 {
		return "", fmt.Errorf("%w: slot_wait_ms %d is negative; use 0 for the default", ErrInvalidArgument, slotWait.Milliseconds())
	}
	if slotWait == 0 {
		slotWait = jm.cfg.SlotWaitTimeout
	}
	g, err := weirpb.ToGraph(pg)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	}
	if err := stream.Plan(g, jm.reg); err != nil {
		return "", fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	}
	id := randomID()
	jm.step(func(c *core, now time.Time) []action {
		var acts []action
		acts, err = c.submit(id, g, slotWait, now)
		return acts
	})
	return id, err
}

func toJobSummary(v *jobView) *weirpb.JobSummary {
	return &weirpb.JobSummary{JobId: v.ID, Name: v.Name, State: weirpb.JobState(v.State), StartTimeMs: unixMillis(v.Start),
		EndTimeMs: unixMillis(v.End), TasksTotal: int32(v.TasksTotal), TasksRunning: int32(v.TasksRunning), Error: v.Err}
}

func (s *jobServer) ListJobs(context.Context, *weirpb.ListJobsRequest) (*weirpb.ListJobsResponse, error) {
	s.jm.mu.Lock()
	views := s.jm.mu.core.jobViews()
	s.jm.mu.Unlock()
	resp := &weirpb.ListJobsResponse{}
	for i := range views {
		resp.Jobs = append(resp.Jobs, toJobSummary(&views[i]))
	}
	return resp, nil
}

func (s *jobServer) GetJob(_ context.Context, req *weirpb.GetJobRequest) (*weirpb.GetJobResponse, error) {
	s.jm.mu.Lock()
	v, err := s.jm.mu.core.jobView(req.GetJobId())
	s.jm.mu.Unlock()
	if err != nil {
		return nil, toGRPCError(err)
	}
	resp := &weirpb.GetJobResponse{Job: toJobSummary(&v), Graph: weirpb.FromGraph(v.Graph)}
	for _, t := range v.Tasks {
		resp.Tasks = append(resp.Tasks, &weirpb.TaskInfo{Id: executionID(v.ID, t.Vertex, t.Subtask, t.Attempt), Name: t.Name,
			State: weirpb.TaskState(t.State), TaskmanagerId: t.TaskManager, Error: t.Err, RecordsIn: t.RecordsIn, RecordsOut: t.RecordsOut})
	}
	return resp, nil
}

func (s *jobServer) CancelJob(_ context.Context, req *weirpb.CancelJobRequest) (*weirpb.CancelJobResponse, error) {
	var err error
	s.jm.step(func(c *core, now time.Time) []action {
		var acts []action
		acts, err = c.cancel(req.GetJobId(), now)
		return acts
	})
	if err != nil {
		return nil, toGRPCError(err)
	}
	return &weirpb.CancelJobResponse{}, nil
}

func (s *jobServer) ListTaskManagers(context.Context, *weirpb.ListTaskManagersRequest) (*weirpb.ListTaskManagersResponse, error) {
	s.jm.mu.Lock()
	views := s.jm.mu.core.tmViews()
	s.jm.mu.Unlock()
	resp := &weirpb.ListTaskManagersResponse{}
	for _, v := range views {
		resp.Taskmanagers = append(resp.Taskmanagers, &weirpb.TaskManagerInfo{TaskmanagerId: v.ID, Address: v.Addr, Live: v.Live,
			SlotsTotal: int32(v.Slots), SlotsFree: int32(v.Free), LastHeartbeatMs: unixMillis(v.LastHeartbeat)})
	}
	return resp, nil
}
