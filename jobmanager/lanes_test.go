package jobmanager

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/weirstream/weir/jobmanager/scheduler"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/test/polltest"
)

// orderExecs records the checkpoint ids of the triggers and notifications
// each execution receives, taking a random while over each call, and the
// calls each taskmanager address receives.
type orderExecs struct {
	taskExecutors
	mu    sync.Mutex
	got   map[int32][]int64 // by subtask
	calls map[string][]int64
	rnd   *rand.Rand
}

func (e *orderExecs) record(addr string, ids []*weirpb.ExecutionID, cp int64) {
	e.mu.Lock()
	d := time.Duration(e.rnd.IntN(300)) * time.Microsecond
	e.mu.Unlock()
	time.Sleep(d) // the RPC's duration, not synchronisation
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, id := range ids {
		e.got[id.GetSubtask()] = append(e.got[id.GetSubtask()], cp)
	}
	if e.calls == nil {
		e.calls = make(map[string][]int64)
	}
	e.calls[addr] = append(e.calls[addr], cp)
}

func (e *orderExecs) TriggerCheckpoints(_ context.Context, addr string, req *weirpb.TriggerCheckpointsRequest) (*weirpb.TriggerCheckpointsResponse, error) {
	e.record(addr, req.GetIds(), req.GetCheckpointId())
	return &weirpb.TriggerCheckpointsResponse{}, nil
}

func (e *orderExecs) NotifyCheckpoints(_ context.Context, addr string, req *weirpb.NotifyCheckpointsRequest) (*weirpb.NotifyCheckpointsResponse, error) {
	e.record(addr, req.GetIds(), -req.GetCheckpointId())
	return &weirpb.NotifyCheckpointsResponse{}, nil
}

// The triggers and notifications of one execution reach it in the order
// they were issued, however the batches they come in are spread over
// goroutines; different executions do not wait for each other.
func TestDispatchKeepsEachExecutionInOrder(t *testing.T) {
	jm := &JobManager{}
	jm.queue.signal = make(chan struct{}, 1)
	execs := &orderExecs{got: map[int32][]int64{}, rnd: rand.New(rand.NewPCG(1, 2))}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { jm.dispatch(ctx, execs); close(done) }()
	const subtasks, checkpoints = 4, 50
	want := make(map[int32][]int64)
	for id := int64(1); id <= checkpoints; id++ {
		var batch []scheduler.Action
		for s := range subtasks {
			tg := scheduler.Target{JobID: "job", Subtask: s, Attempt: 1, Addr: fmt.Sprintf("tm-%d", s%2)}
			batch = append(batch, scheduler.TriggerAction{Target: tg, CheckpointID: id},
				scheduler.NotifyAction{Target: tg, CheckpointID: id, Complete: true})
			want[int32(s)] = append(want[int32(s)], id, -id)
		}
		jm.enqueue(batch)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		execs.mu.Lock()
		n := 0
		for _, ids := range execs.got {
			n += len(ids)
		}
		execs.mu.Unlock()
		if n == subtasks*checkpoints*2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d actions performed", n, subtasks*checkpoints*2)
		}
		time.Sleep(time.Millisecond) // polling
	}
	cancel()
	<-done
	for s, ids := range want {
		if !slices.Equal(execs.got[s], ids) {
			t.Fatalf("subtask %d received %v, want %v", s, execs.got[s], ids)
		}
	}
	if len(jm.lanes.m) != 0 {
		t.Errorf("%d lanes left after they drained", len(jm.lanes.m))
	}
}

// The scheduler's triggers and notifications of one checkpoint for the
// executions on one taskmanager go in one call per taskmanager; their
// order per execution stays that of the actions.
func TestDispatchBatchesPerTaskManager(t *testing.T) {
	jm := &JobManager{}
	jm.queue.signal = make(chan struct{}, 1)
	execs := &orderExecs{got: map[int32][]int64{}, rnd: rand.New(rand.NewPCG(3, 4))}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { jm.dispatch(ctx, execs); close(done) }()
	const subtasks, tms = 12, 3
	var batch []scheduler.Action
	for _, id := range []int64{1, 2} {
		for s := range subtasks {
			tg := scheduler.Target{JobID: "job", Subtask: s, Attempt: 1, Addr: fmt.Sprintf("tm-%d", s%tms)}
			batch = append(batch, scheduler.TriggerAction{Target: tg, CheckpointID: id})
		}
		for s := range subtasks {
			tg := scheduler.Target{JobID: "job", Subtask: s, Attempt: 1, Addr: fmt.Sprintf("tm-%d", s%tms)}
			batch = append(batch, scheduler.NotifyAction{Target: tg, CheckpointID: id, Complete: true})
		}
	}
	jm.enqueue(batch)
	polltest.Eventually(t, time.Minute, "every action performed", func() bool {
		execs.mu.Lock()
		defer execs.mu.Unlock()
		n := 0
		for _, ids := range execs.got {
			n += len(ids)
		}
		return n == subtasks*4
	})
	cancel()
	<-done
	for tm := range tms {
		addr := fmt.Sprintf("tm-%d", tm)
		if want := []int64{1, -1, 2, -2}; !slices.Equal(execs.calls[addr], want) {
			t.Errorf("taskmanager %s received calls %v, want one per checkpoint and kind: %v", addr, execs.calls[addr], want)
		}
	}
	for s := range int32(subtasks) {
		if want := []int64{1, -1, 2, -2}; !slices.Equal(execs.got[s], want) {
			t.Errorf("subtask %d received %v, want %v", s, execs.got[s], want)
		}
	}
}
