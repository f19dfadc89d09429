package taskmanagertest

import (
	"context"
	"fmt"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/stream"
)

// The checkpoint side of the fake. When it acknowledges checkpoints, a
// trigger makes every live task of the job on this taskmanager (whatever
// its attempt, as regions restart with attempts of their own) acknowledge,
// once per checkpoint and all in one ReportCheckpoints call, with one
// made-up handle per operator of its chain,
// whose key (see HandleKey) names checkpoint, operator, subtask and
// attempt.

// HandleKey returns the storage key of the handle the fake acknowledges
// for subtask of operator uid, in checkpoint ck of the job, by the
// execution with the given attempt.
func HandleKey(jobID string, ck int64, uid string, subtask int32, attempt int64) string {
	return fmt.Sprintf("%s/chk-%d/%s/%d-a%d", jobID, ck, uid, subtask, attempt)
}

// handles returns the made-up handles deployment d acknowledges for
// checkpoint ck: 50 bytes each, covering the subtask's key groups.
func handles(d *weirpb.TaskDeployment, ck int64) []*weirpb.StateHandle {
	var out []*weirpb.StateHandle
	kg := stream.KeyGroupRangeFor(int(d.MaxParallelism), int(d.Parallelism), int(d.Id.Subtask))
	for _, op := range d.Chain {
		out = append(out, &weirpb.StateHandle{OperatorUid: op.Vertex.Uid, Subtask: d.Id.Subtask, Parallelism: d.Parallelism,
			Key: HandleKey(d.Id.JobId, ck, op.Vertex.Uid, d.Id.Subtask, d.Id.Attempt), Size: 50, Sha256: "00",
			KeyGroupStart: int32(kg.Start), KeyGroupEnd: int32(kg.End)})
	}
	return out
}

// SetAckCheckpoints turns acknowledging checkpoints on or off. Off (the
// default), triggers are recorded and answered but never acknowledged.
func (f *Fake) SetAckCheckpoints(on bool) { f.ackCheckpoints.Store(on) }

// WaitAcks waits until every acknowledgement the fake has started sending
// has been answered by the jobmanager. After SetAckCheckpoints(false) and
// WaitAcks no acknowledgement is on its way.
func (f *Fake) WaitAcks() {
	// A trigger being handled holds f.mu while it starts its
	// acknowledgements: taking the lock waits for it.
	f.mu.Lock()
	//lint:ignore SA2001 the lock is taken only to wait for a holder
	f.mu.Unlock()
	f.acks.Wait()
}

// TriggerCheckpoint records the trigger and answers NotFound if its task
// is not live. When acknowledging, the first trigger of a checkpoint makes
// every live task of the job acknowledge it.
func (f *Fake) TriggerCheckpoint(_ context.Context, req *weirpb.TriggerCheckpointRequest) (*weirpb.TriggerCheckpointResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.triggers = append(f.triggers, req)
	if _, ok := f.live[ExecKey(req.Id)]; !ok {
		return nil, status.Errorf(codes.NotFound, "no task %s", ExecKey(req.Id))
	}
	if !f.ackCheckpoints.Load() {
		f.held = append(f.held, req)
		return &weirpb.TriggerCheckpointResponse{}, nil
	}
	f.ackLocked(req)
	return &weirpb.TriggerCheckpointResponse{}, nil
}

// TriggerCheckpoints handles each task of the batch as TriggerCheckpoint
// does (recording one TriggerCheckpointRequest per task); the tasks that
// are not live are the response's failures.
func (f *Fake) TriggerCheckpoints(ctx context.Context, req *weirpb.TriggerCheckpointsRequest) (*weirpb.TriggerCheckpointsResponse, error) {
	resp := &weirpb.TriggerCheckpointsResponse{}
	for _, id := range req.GetIds() {
		_, err := f.TriggerCheckpoint(ctx, &weirpb.TriggerCheckpointRequest{Id: id, CheckpointId: req.GetCheckpointId(),
			TimestampMs: req.GetTimestampMs(), Epoch: req.GetEpoch(), Savepoint: req.GetSavepoint(), Drain: req.GetDrain()})
		if err != nil {
			st := status.Convert(err)
			resp.Failures = append(resp.Failures, &weirpb.TaskCallFailure{Id: id, Code: int32(st.Code()), Message: st.Message()})
		}
	}
	return resp, nil
}

// NotifyCheckpoints records one NotifyCheckpointRequest per task of the
// batch.
func (f *Fake) NotifyCheckpoints(ctx context.Context, req *weirpb.NotifyCheckpointsRequest) (*weirpb.NotifyCheckpointsResponse, error) {
	for _, id := range req.GetIds() {
		_, _ = f.NotifyCheckpoint(ctx, &weirpb.NotifyCheckpointRequest{Id: id, CheckpointId: req.GetCheckpointId(),
			Complete: req.GetComplete(), Epoch: req.GetEpoch()})
	}
	return &weirpb.NotifyCheckpointsResponse{}, nil
}

// AckHeld acknowledges the checkpoints triggered while acknowledging was
// off, as a taskmanager that was slow would, so that they can complete
// instead of waiting for their timeout.
func (f *Fake) AckHeld() {
	f.mu.Lock()
	defer f.mu.Unlock()
	held := f.held
	f.held = nil
	for _, req := range held {
		f.ackLocked(req)
	}
}

// ackLocked acknowledges checkpoint req from every live task of its job,
// once per job and checkpoint.
func (f *Fake) ackLocked(req *weirpb.TriggerCheckpointRequest) {
	ackKey := fmt.Sprintf("%s/%d", req.Id.JobId, req.CheckpointId)
	if f.acked[ackKey] {
		return
	}
	f.acked[ackKey] = true
	// One batch per job and checkpoint, as a taskmanager sends them.
	batch := &weirpb.ReportCheckpointsRequest{TaskmanagerId: f.id}
	for _, d := range f.deploy {
		if _, live := f.live[ExecKey(d.Id)]; !live || d.Id.JobId != req.Id.JobId {
			continue
		}
		batch.Acks = append(batch.Acks, &weirpb.CheckpointAck{Id: d.Id, CheckpointId: req.CheckpointId,
			Handles: handles(d, req.CheckpointId), Bytes: 100, AlignmentDurationMs: int64(d.Id.Subtask + 1), SyncDurationMs: 1, AsyncDurationMs: 2})
	}
	if len(batch.Acks) == 0 || f.stopping {
		return
	}
	f.acks.Add(1)
	f.wg.Go(func() {
		defer f.acks.Done()
		ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
		defer cancel()
		_, err := f.cluster.ReportCheckpoints(ctx, batch)
		if err != nil && status.Code(err) != codes.Unavailable && !f.isStopping() {
			f.t.Errorf("%s: ReportCheckpoints: %v", f.id, err)
		}
	})
}

// NotifyCheckpoint records the notification.
func (f *Fake) NotifyCheckpoint(_ context.Context, req *weirpb.NotifyCheckpointRequest) (*weirpb.NotifyCheckpointResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.notifies = append(f.notifies, req)
	return &weirpb.NotifyCheckpointResponse{}, nil
}

// Triggers returns every checkpoint trigger received, in arrival order.
func (f *Fake) Triggers() []*weirpb.TriggerCheckpointRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.triggers)
}

// CompleteNotified returns the executions notified that checkpoint ck
// completed, as sorted, distinct ExecKey strings.
func (f *Fake) CompleteNotified(ck int64) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, n := range f.notifies {
		if n.CheckpointId == ck && n.Complete {
			out = append(out, ExecKey(n.Id))
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
