package taskmanager

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/weirstream/weir/jobmanager/jobmanagertest"
	"github.com/weirstream/weir/proto/weirpb"
)

// recordingSender records the calls an ackBatcher makes; with
// unimplemented it answers ReportCheckpoints as an older jobmanager would.
type recordingSender struct {
	unimplemented bool
	mu            sync.Mutex
	batches       []*weirpb.ReportCheckpointsRequest
	singleAcks    []*weirpb.AcknowledgeCheckpointRequest
	singleDecl    []*weirpb.DeclineCheckpointRequest
}

func (s *recordingSender) ReportCheckpoints(_ context.Context, req *weirpb.ReportCheckpointsRequest) error {
	if s.unimplemented {
		return status.Error(codes.Unimplemented, "unknown method ReportCheckpoints")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.batches = append(s.batches, req)
	return nil
}

func (s *recordingSender) AcknowledgeCheckpoint(_ context.Context, req *weirpb.AcknowledgeCheckpointRequest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.singleAcks = append(s.singleAcks, req)
	return nil
}

func (s *recordingSender) DeclineCheckpoint(_ context.Context, req *weirpb.DeclineCheckpointRequest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.singleDecl = append(s.singleDecl, req)
	return nil
}

// sent returns the batches sent so far as "c<checkpoint> a<subtasks> d<subtasks>"
// strings.
func (s *recordingSender) sent() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, b := range s.batches {
		var acks, decl []int32
		var ck int64
		for _, a := range b.GetAcks() {
			acks, ck = append(acks, a.GetId().GetSubtask()), a.GetCheckpointId()
		}
		for _, d := range b.GetDeclines() {
			decl, ck = append(decl, d.GetId().GetSubtask()), d.GetCheckpointId()
		}
		out = append(out, fmt.Sprintf("c%d a%v d%v", ck, acks, decl))
	}
	return out
}

func execID(job string, subtask int32) *weirpb.ExecutionID {
	return &weirpb.ExecutionID{JobId: job, VertexId: 0, Subtask: subtask, Attempt: 1}
}

func ackOf(job string, subtask int32, ck int64) *weirpb.CheckpointAck {
	return &weirpb.CheckpointAck{Id: execID(job, subtask), CheckpointId: ck, Bytes: 10}
}

// newTestBatcher is a batcher for tasks tasks of every job, sending to s.
func newTestBatcher(t *testing.T, delay time.Duration, tasks int, s *recordingSender) *ackBatcher {
	b := newAckBatcher("tm-test", delay, func(string) int { return tasks }, func() reportSender { return s }, slog.New(slog.DiscardHandler))
	t.Cleanup(b.close)
	return b
}

// Once every task of the job here has acknowledged, the checkpoint's
// acknowledgements go in one call, without waiting for the delay.
func TestAckBatchSentWhenAllTasksReported(t *testing.T) {
	s := &recordingSender{}
	b := newTestBatcher(t, time.Hour, 3, s)
	ctx := t.Context()
	b.ack(ctx, "t0", ackOf("j", 0, 1))
	b.ack(ctx, "t1", ackOf("j", 1, 1))
	b.ack(ctx, "other", ackOf("k", 0, 1)) // another job's: a batch of its own
	b.ack(ctx, "t2", ackOf("j", 2, 1))
	waitFor(t, "the batch of checkpoint 1", func() bool { return len(s.sent()) == 1 })
	b.sends.Wait()
	if got, want := s.sent(), []string{"c1 a[0 1 2] d[]"}; !slices.Equal(got, want) {
		t.Fatalf("sent %v, want %v", got, want)
	}
	// The next checkpoint is a batch of its own.
	for i := range int32(3) {
		b.ack(ctx, "t", ackOf("j", i, 2))
	}
	waitFor(t, "the batch of checkpoint 2", func() bool { return len(s.sent()) == 2 })
	if got := s.sent()[1]; got != "c2 a[0 1 2] d[]" {
		t.Fatalf("second batch %s", got)
	}
}

// A decline goes at once, with the acknowledgements of its checkpoint not
// sent yet; later reports of that checkpoint wait for the rest or the delay.
func TestAckBatchDeclineGoesAtOnce(t *testing.T) {
	s := &recordingSender{}
	b := newTestBatcher(t, time.Hour, 3, s)
	b.ack(t.Context(), "t0", ackOf("j", 0, 4))
	b.decline("t1", &weirpb.CheckpointDecline{Id: execID("j", 1), CheckpointId: 4, Reason: "disk full"})
	waitFor(t, "the decline", func() bool { return len(s.sent()) == 1 })
	if got, want := s.sent(), []string{"c4 a[0] d[1]"}; !slices.Equal(got, want) {
		t.Fatalf("sent %v, want %v", got, want)
	}
	b.ack(t.Context(), "t2", ackOf("j", 2, 4)) // completes the tasks' reports
	waitFor(t, "the last acknowledgement", func() bool { return len(s.sent()) == 2 })
	if got := s.sent()[1]; got != "c4 a[2] d[]" {
		t.Fatalf("second batch %s", got)
	}
}

// Without the reports of every task, the ones there are go when the delay
// since the first unsent one passed.
func TestAckBatchDeadline(t *testing.T) {
	s := &recordingSender{}
	b := newTestBatcher(t, 30*time.Millisecond, 3, s)
	start := time.Now()
	b.ack(t.Context(), "t0", ackOf("j", 0, 1))
	b.ack(t.Context(), "t1", ackOf("j", 1, 1))
	waitFor(t, "the deadline's batch", func() bool { return len(s.sent()) == 1 })
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Fatalf("sent after %v, before the delay", d)
	}
	if got := s.sent()[0]; got != "c1 a[0 1] d[]" {
		t.Fatalf("batch %s", got)
	}
	// The third task's report completes the checkpoint: it goes at once.
	b.ack(t.Context(), "t2", ackOf("j", 2, 1))
	waitFor(t, "the last acknowledgement", func() bool { return len(s.sent()) == 2 })
	if got := s.sent()[1]; got != "c1 a[2] d[]" {
		t.Fatalf("second batch %s", got)
	}
}

// The acknowledgement of a task cancelled before it was sent is dropped
// (the single call ran under the task's context); a decline is not.
func TestAckBatchDropsCancelledTasksAcks(t *testing.T) {
	s := &recordingSender{}
	b := newTestBatcher(t, time.Hour, 3, s)
	gone, cancel := context.WithCancel(t.Context())
	b.ack(gone, "t0", ackOf("j", 0, 1))
	cancel()
	b.ack(t.Context(), "t1", ackOf("j", 1, 1))
	b.decline("t2", &weirpb.CheckpointDecline{Id: execID("j", 2), CheckpointId: 1, Reason: "failed"})
	waitFor(t, "the batch", func() bool { return len(s.sent()) == 1 })
	if got := s.sent()[0]; got != "c1 a[1] d[2]" {
		t.Fatalf("batch %s; want the cancelled task's acknowledgement left out", got)
	}
}

// A jobmanager without ReportCheckpoints gets the single calls.
func TestAckBatchFallsBackToSingleCalls(t *testing.T) {
	s := &recordingSender{unimplemented: true}
	b := newTestBatcher(t, time.Hour, 2, s)
	b.ack(t.Context(), "t0", ackOf("j", 0, 1))
	b.decline("t1", &weirpb.CheckpointDecline{Id: execID("j", 1), CheckpointId: 1, Reason: "failed"})
	waitFor(t, "the single calls", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.singleAcks) == 1 && len(s.singleDecl) == 1
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	if a := s.singleAcks[0]; a.GetTaskmanagerId() != "tm-test" || a.GetId().GetSubtask() != 0 || a.GetBytes() != 10 {
		t.Errorf("single acknowledgement %v", a)
	}
	if d := s.singleDecl[0]; d.GetTaskmanagerId() != "tm-test" || d.GetReason() != "failed" {
		t.Errorf("single decline %v", d)
	}
}

// close sends what is unsent at once; forget drops what a notification
// ended but keeps unsent reports.
func TestAckBatchCloseAndForget(t *testing.T) {
	s := &recordingSender{}
	b := newAckBatcher("tm-test", time.Hour, func(string) int { return 3 }, func() reportSender { return s }, slog.New(slog.DiscardHandler))
	b.ack(t.Context(), "t0", ackOf("j", 0, 1))
	b.ack(t.Context(), "t0", ackOf("j", 0, 2))
	b.decline("t1", &weirpb.CheckpointDecline{Id: execID("j", 1), CheckpointId: 2, Reason: "x"}) // 2: nothing unsent
	b.sends.Wait()
	b.forget("j", 2)
	b.mu.Lock()
	_, kept1 := b.mu.open[ackKey{"j", 1}]
	_, kept2 := b.mu.open[ackKey{"j", 2}]
	b.mu.Unlock()
	if !kept1 || kept2 {
		t.Fatalf("after forget: checkpoint 1 (unsent) kept %v, 2 (all sent) kept %v; want true, false", kept1, kept2)
	}
	b.close()
	if got, want := s.sent(), []string{"c2 a[0] d[1]", "c1 a[0] d[]"}; !slices.Equal(got, want) {
		t.Fatalf("sent %v, want %v", got, want)
	}
}

// A taskmanager running several tasks of a job sends their
// acknowledgements of a checkpoint in one call, as soon as the last one
// has its snapshot uploaded (well before the delay).
func TestTaskManagerSendsOneAckCallPerCheckpoint(t *testing.T) {
	jm := jobmanagertest.Start(t)
	st := newTestState()
	const delay = 10 * time.Second
	h := startTaskManager(t, jm.Addr(), newTestRegistry(st), func(c *Config) { c.CheckpointAckDelay = delay })
	const job = "job-batched-acks"
	store := (&url.URL{Scheme: "file", Path: t.TempDir()}).String()
	var ids []*weirpb.ExecutionID
	for i := range int32(3) {
		d := chainedTask(job, 1, genJSON(100, true), "count", "")
		d.Id.Subtask, d.Parallelism = i, 3
		d.Checkpointing = &weirpb.TaskCheckpointing{Enabled: true, Storage: store}
		h.mustSubmit(t, d)
		jm.WaitReported(t, d.GetId(), running)
		ids = append(ids, d.GetId())
	}
	for _, ck := range []int64{1, 2} {
		start := time.Now()
		resp, err := h.exec.TriggerCheckpoints(t.Context(), &weirpb.TriggerCheckpointsRequest{Ids: ids, CheckpointId: ck, TimestampMs: 1})
		if err != nil || len(resp.GetFailures()) > 0 {
			t.Fatalf("TriggerCheckpoints: %v %v", resp, err)
		}
		var acks []int32
		waitFor(t, fmt.Sprintf("the acknowledgements of checkpoint %d", ck), func() bool {
			acks = nil
			for _, r := range jm.CheckpointReports() {
				for _, a := range r.GetAcks() {
					if a.GetCheckpointId() == ck {
						acks = append(acks, a.GetId().GetSubtask())
					}
				}
			}
			return len(acks) == 3
		})
		if d := time.Since(start); d >= delay {
			t.Fatalf("the acknowledgements took %v: sent at the deadline, not once all tasks had acknowledged", d)
		}
		slices.Sort(acks)
		if !slices.Equal(acks, []int32{0, 1, 2}) {
			t.Fatalf("checkpoint %d acknowledged by subtasks %v", ck, acks)
		}
		if n := len(jm.CheckpointReports()); n != int(ck) {
			t.Fatalf("%d ReportCheckpoints calls after %d checkpoints, want one per checkpoint", n, ck)
		}
		for _, r := range jm.CheckpointReports() {
			if r.GetTaskmanagerId() != testTaskManagerID {
				t.Fatalf("batch from %q", r.GetTaskmanagerId())
			}
		}
	}
	// A task that is not here is a failure of its own; the others take
	// the trigger.
	missing := &weirpb.ExecutionID{JobId: job, VertexId: 0, Subtask: 7, Attempt: 1}
	resp, err := h.exec.TriggerCheckpoints(t.Context(), &weirpb.TriggerCheckpointsRequest{Ids: append(slices.Clone(ids), missing), CheckpointId: 3, TimestampMs: 1})
	if err != nil {
		t.Fatal(err)
	}
	if f := resp.GetFailures(); len(f) != 1 || f[0].GetId().GetSubtask() != 7 || codes.Code(f[0].GetCode()) != codes.NotFound {
		t.Fatalf("failures %v; want subtask 7 not found", f)
	}
	nresp, err := h.exec.NotifyCheckpoints(t.Context(), &weirpb.NotifyCheckpointsRequest{Ids: append(slices.Clone(ids), missing), CheckpointId: 2, Complete: true})
	if err != nil || len(nresp.GetFailures()) != 1 {
		t.Fatalf("NotifyCheckpoints: %v %v; want one failure", nresp, err)
	}
	for _, id := range ids {
		h.cancelTask(t, id)
		jm.WaitReported(t, id, canceled)
	}
}

// Acknowledgements whose inline snapshots together exceed maxReportBytes
// go in several calls, none over the bound (unless one entry alone is),
// every entry exactly once.
func TestAckBatchSplitsLargeReports(t *testing.T) {
	s := &recordingSender{}
	const tasks = 10
	b := newTestBatcher(t, time.Hour, tasks, s)
	for i := range int32(tasks) {
		a := ackOf("j", i, 1)
		a.Handles = []*weirpb.StateHandle{{OperatorUid: "win", InlineData: make([]byte, maxReportBytes/4)}}
		b.ack(t.Context(), "t", a)
	}
	waitFor(t, "every acknowledgement", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		n := 0
		for _, r := range s.batches {
			n += len(r.GetAcks())
		}
		return n == tasks
	})
	b.sends.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[int32]bool{}
	for _, r := range s.batches {
		size := 0
		for _, a := range r.GetAcks() {
			size += proto.Size(a)
			if seen[a.GetId().GetSubtask()] {
				t.Fatalf("subtask %d acknowledged twice", a.GetId().GetSubtask())
			}
			seen[a.GetId().GetSubtask()] = true
		}
		if size > maxReportBytes {
			t.Fatalf("a call carries %d bytes of entries, over %d", size, maxReportBytes)
		}
	}
	if len(s.batches) < 3 {
		t.Fatalf("%d calls for 10 entries of a quarter of the bound each, want at least 3", len(s.batches))
	}
}
