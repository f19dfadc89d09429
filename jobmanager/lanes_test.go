package jobmanager

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/weirstream/weir/jobmanager/scheduler"
	"github.com/weirstream/weir/proto/weirpb"
)

// orderExecs records the checkpoint ids of the triggers and notifications
// each execution receives, taking a random while over each.
type orderExecs struct {
	taskExecutors
	mu  sync.Mutex
	got map[int32][]int64 // by subtask
	rnd *rand.Rand
}

func (e *orderExecs) record(id *weirpb.ExecutionID, cp int64) {
	e.mu.Lock()
	d := time.Duration(e.rnd.IntN(300)) * time.Microsecond
	e.mu.Unlock()
	time.Sleep(d) // the RPC's duration, not synchronisation
	e.mu.Lock()
	e.got[id.GetSubtask()] = append(e.got[id.GetSubtask()], cp)
	e.mu.Unlock()
}

func (e *orderExecs) TriggerCheckpoint(_ context.Context, _ string, req *weirpb.TriggerCheckpointRequest) error {
	e.record(req.GetId(), req.GetCheckpointId())
	return nil
}

func (e *orderExecs) NotifyCheckpoint(_ context.Context, _ string, req *weirpb.NotifyCheckpointRequest) error {
	e.record(req.GetId(), -req.GetCheckpointId())
	return nil
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
			tg := scheduler.Target{JobID: "job", Subtask: s, Attempt: 1}
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
