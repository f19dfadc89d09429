package taskmanager

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/weirstream/weir/proto/weirpb"
)

// Batched checkpoint reports. The tasks of a job on this taskmanager
// acknowledge (or decline) a checkpoint at about the same time; instead of
// one AcknowledgeCheckpoint call each, their reports go to the jobmanager
// in ReportCheckpoints calls, one per job and checkpoint where possible. A
// job and checkpoint's unsent reports are sent
//
//   - as soon as every task of the job running here that takes checkpoints
//     has acknowledged or declined the checkpoint;
//   - at once on a decline (it aborts the checkpoint; it never waits), with
//     the acknowledgements of the same checkpoint not sent yet;
//   - else Config.CheckpointAckDelay after the first of them was added
//     (a task that is slow, restoring or stuck does not hold up the
//     others' acknowledgements longer than that).
//
// Each entry keeps the semantics of the single call it replaces: one
// attempt to the jobmanager that leads at the time of sending (no retry;
// a lost acknowledgement makes the checkpoint time out, as before); an
// acknowledgement of a task that was cancelled before it was sent is
// dropped (the single call ran under the task's context), a decline is
// sent whatever happened to its task; the jobmanager checks every entry's
// attempt and taskmanager on its own, so a stale entry is dropped there
// without affecting the others. A jobmanager that does not serve
// ReportCheckpoints (Unimplemented) gets the single calls instead.

// DefaultCheckpointAckDelay is Config.CheckpointAckDelay's default.
const DefaultCheckpointAckDelay = 50 * time.Millisecond

// maxCheckpointAckDelay bounds Config.CheckpointAckDelay: acknowledgements
// must arrive well within any checkpoint timeout.
const maxCheckpointAckDelay = 10 * time.Second

// Timeouts of the report calls: as those of the single calls they replace.
const (
	ackCallTimeout     = 10 * time.Second
	declineCallTimeout = 5 * time.Second
)

// ackKey names one checkpoint of one job.
type ackKey struct {
	job string
	id  int64
}

// ackEntry is one task's report of a checkpoint: ack or decline is set.
type ackEntry struct {
	ack     *weirpb.CheckpointAck
	decline *weirpb.CheckpointDecline
	// ctx is the task's (ack only): once it is done the task was
	// cancelled or failed, and its acknowledgement is not sent.
	ctx  context.Context
	name string // the task's, for the log
}

// ackBatch is what the batcher keeps of one job and checkpoint.
type ackBatch struct {
	unsent []ackEntry
	// reported are the tasks that acknowledged or declined it (sent or
	// not).
	reported map[taskKey]struct{}
	// want is how many tasks of the job took checkpoints here when the
	// first of them reported: once that many reported, it is complete.
	want int
	// timer sends unsent at the deadline; set while unsent is not empty.
	timer *time.Timer
}

// reportSender is the part of the jobmanager's ClusterService the batcher
// calls; the current leader's client (TaskManager.cluster) in production.
type reportSender interface {
	ReportCheckpoints(ctx context.Context, req *weirpb.ReportCheckpointsRequest) error
	// AcknowledgeCheckpoint and DeclineCheckpoint are the single calls,
	// for a jobmanager without ReportCheckpoints.
	AcknowledgeCheckpoint(ctx context.Context, req *weirpb.AcknowledgeCheckpointRequest) error
	DeclineCheckpoint(ctx context.Context, req *weirpb.DeclineCheckpointRequest) error
}

// ackBatcher batches the checkpoint reports of a taskmanager's tasks. Its
// methods are safe for concurrent use; close stops it.
type ackBatcher struct {
	tmID  string
	delay time.Duration
	// expected returns how many tasks of job run here and take
	// checkpoints: when that many have reported a checkpoint, it is sent.
	expected func(job string) int
	sender   func() reportSender
	log      *slog.Logger

	sends sync.WaitGroup // calls in flight
	mu    struct {
		sync.Mutex
		open   map[ackKey]*ackBatch
		closed bool
	}
}

// maxOpenAckBatches bounds the checkpoints the batcher remembers reports
// of; beyond it, those with nothing unsent are forgotten. Notifications
// (forget) normally keep far fewer.
const maxOpenAckBatches = 256

func newAckBatcher(tmID string, delay time.Duration, expected func(job string) int, sender func() reportSender, log *slog.Logger) *ackBatcher {
	b := &ackBatcher{tmID: tmID, delay: delay, expected: expected, sender: sender, log: log}
	b.mu.open = make(map[ackKey]*ackBatch)
	return b
}

// ack adds the acknowledgement a of the task named name, whose context is
// ctx; it is sent as the rules above say.
func (b *ackBatcher) ack(ctx context.Context, name string, a *weirpb.CheckpointAck) {
	b.add(ackEntry{ack: a, ctx: ctx, name: name}, a.GetId(), a.GetCheckpointId())
}

// decline adds the decline d and sends it at once, with the unsent
// acknowledgements of its checkpoint.
func (b *ackBatcher) decline(name string, d *weirpb.CheckpointDecline) {
	b.add(ackEntry{decline: d, name: name}, d.GetId(), d.GetCheckpointId())
}

func (b *ackBatcher) add(e ackEntry, id *weirpb.ExecutionID, checkpoint int64) {
	k := ackKey{job: id.GetJobId(), id: checkpoint}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.mu.closed {
		b.sendLocked([]ackEntry{e})
		return
	}
	bt := b.mu.open[k]
	if bt == nil {
		// The tasks are counted once per checkpoint, without the lock
		// (expected takes the taskmanager's).
		b.mu.Unlock()
		want := b.expected(k.job)
		b.mu.Lock()
		if b.mu.closed {
			b.sendLocked([]ackEntry{e})
			return
		}
		if bt = b.mu.open[k]; bt == nil {
			if len(b.mu.open) >= maxOpenAckBatches {
				b.pruneLocked()
			}
			bt = &ackBatch{reported: make(map[taskKey]struct{}), want: want}
			b.mu.open[k] = bt
		}
	}
	bt.reported[keyOf(id)] = struct{}{}
	bt.unsent = append(bt.unsent, e)
	all := len(bt.reported) >= bt.want
	if e.decline != nil || all || b.delay <= 0 {
		b.flushLocked(bt)
		if all {
			delete(b.mu.open, k)
		}
		return
	}
	if bt.timer == nil {
		bt.timer = time.AfterFunc(b.delay, func() { b.deadline(k, bt) })
	}
}

// deadline sends what bt (of k) holds when its delay passed.
func (b *ackBatcher) deadline(k ackKey, bt *ackBatch) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.mu.closed || b.mu.open[k] != bt || bt.timer == nil {
		return // sent already, or forgotten
	}
	bt.timer = nil
	b.flushLocked(bt)
}

// flushLocked sends bt's unsent entries and stops its timer.
func (b *ackBatcher) flushLocked(bt *ackBatch) {
	if bt.timer != nil {
		bt.timer.Stop()
		bt.timer = nil
	}
	if len(bt.unsent) == 0 {
		return
	}
	b.sendLocked(bt.unsent)
	bt.unsent = nil
}

// maxReportBytes bounds the encoded size of the entries of one
// ReportCheckpoints call (small snapshots travel inline in the acks),
// well under the jobmanager's request limit.
const maxReportBytes = 1 << 20

// sendLocked sends entries in the background, in calls of at most
// maxReportBytes of entries (an entry larger than that alone).
func (b *ackBatcher) sendLocked(entries []ackEntry) {
	size, start := 0, 0
	for i, e := range entries {
		n := proto.Size(e.ack) + proto.Size(e.decline)
		if i > start && size+n > maxReportBytes {
			b.sendChunkLocked(entries[start:i])
			start, size = i, 0
		}
		size += n
	}
	b.sendChunkLocked(entries[start:])
}

func (b *ackBatcher) sendChunkLocked(entries []ackEntry) {
	b.sends.Add(1)
	go func() {
		defer b.sends.Done()
		b.send(entries)
	}()
}

// forget drops what the batcher remembers of the checkpoints of job up to
// id (a notification of id came: they ended), except reports not sent
// yet, which go at their deadline.
func (b *ackBatcher) forget(job string, id int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for k, bt := range b.mu.open {
		if k.job == job && k.id <= id && len(bt.unsent) == 0 {
			delete(b.mu.open, k)
		}
	}
}

// pruneLocked forgets the checkpoints with nothing unsent (their later
// reports wait for the deadline).
func (b *ackBatcher) pruneLocked() {
	for k, bt := range b.mu.open {
		if len(bt.unsent) == 0 {
			delete(b.mu.open, k)
		}
	}
}

// close sends every unsent entry at once and waits for the calls in
// flight. Entries added later are sent at once, one call each.
func (b *ackBatcher) close() {
	b.mu.Lock()
	if !b.mu.closed {
		b.mu.closed = true
		for _, bt := range b.mu.open {
			b.flushLocked(bt)
		}
		b.mu.open = nil
	}
	b.mu.Unlock()
	b.sends.Wait()
}

// send makes one ReportCheckpoints call of entries (acknowledgements of
// tasks cancelled meanwhile left out), or the single calls when the
// jobmanager does not serve it.
func (b *ackBatcher) send(entries []ackEntry) {
	req := &weirpb.ReportCheckpointsRequest{TaskmanagerId: b.tmID}
	timeout := declineCallTimeout
	for _, e := range entries {
		switch {
		case e.decline != nil:
			req.Declines = append(req.Declines, e.decline)
		case e.ctx == nil || e.ctx.Err() == nil:
			req.Acks = append(req.Acks, e.ack)
			timeout = ackCallTimeout
		}
	}
	if len(req.Acks)+len(req.Declines) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	s := b.sender()
	err := s.ReportCheckpoints(ctx, req)
	if status.Code(err) == codes.Unimplemented {
		b.sendSingly(ctx, s, req)
		return
	}
	if err != nil {
		b.log.Warn("checkpoint reports failed", "acks", len(req.Acks), "declines", len(req.Declines),
			"checkpoint", firstCheckpoint(req), "err", err)
	}
}

// sendSingly sends req's entries one call each, for a jobmanager that does
// not serve ReportCheckpoints.
func (b *ackBatcher) sendSingly(ctx context.Context, s reportSender, req *weirpb.ReportCheckpointsRequest) {
	for _, a := range req.GetAcks() {
		err := s.AcknowledgeCheckpoint(ctx, &weirpb.AcknowledgeCheckpointRequest{TaskmanagerId: b.tmID, Id: a.GetId(),
			CheckpointId: a.GetCheckpointId(), Handles: a.GetHandles(), SyncDurationMs: a.GetSyncDurationMs(),
			AsyncDurationMs: a.GetAsyncDurationMs(), AlignmentDurationMs: a.GetAlignmentDurationMs(), Bytes: a.GetBytes(),
			BarrierReceivedUnixMs: a.GetBarrierReceivedUnixMs(), ChannelStateBytes: a.GetChannelStateBytes(),
			StorageRequests: a.GetStorageRequests()})
		if err != nil {
			b.log.Warn("checkpoint acknowledgement failed", "checkpoint", a.GetCheckpointId(), "err", err)
		}
	}
	for _, d := range req.GetDeclines() {
		err := s.DeclineCheckpoint(ctx, &weirpb.DeclineCheckpointRequest{TaskmanagerId: b.tmID, Id: d.GetId(),
			CheckpointId: d.GetCheckpointId(), Reason: d.GetReason()})
		if err != nil {
			b.log.Debug("decline failed", "checkpoint", d.GetCheckpointId(), "err", err)
		}
	}
}

func firstCheckpoint(req *weirpb.ReportCheckpointsRequest) int64 {
	if len(req.GetAcks()) > 0 {
		return req.GetAcks()[0].GetCheckpointId()
	}
	return req.GetDeclines()[0].GetCheckpointId()
}

// clusterSender sends reports to the jobmanager the taskmanager follows
// at the time of each call.
type clusterSender struct{ c weirpb.ClusterServiceClient }

var _ reportSender = clusterSender{}

func (s clusterSender) ReportCheckpoints(ctx context.Context, req *weirpb.ReportCheckpointsRequest) error {
	_, err := s.c.ReportCheckpoints(ctx, req)
	return err
}

func (s clusterSender) AcknowledgeCheckpoint(ctx context.Context, req *weirpb.AcknowledgeCheckpointRequest) error {
	_, err := s.c.AcknowledgeCheckpoint(ctx, req)
	return err
}

func (s clusterSender) DeclineCheckpoint(ctx context.Context, req *weirpb.DeclineCheckpointRequest) error {
	_, err := s.c.DeclineCheckpoint(ctx, req)
	return err
}

// checkpointingTasks counts the tasks of job on this taskmanager that take
// checkpoints and have not ended: those whose reports the batcher waits
// for.
func (tm *TaskManager) checkpointingTasks(job string) int {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	n := 0
	for k, rt := range tm.mu.tasks {
		if k.job == job && !terminal(rt.state) && rt.spec != nil && rt.spec.Checkpointing {
			n++
		}
	}
	return n
}
