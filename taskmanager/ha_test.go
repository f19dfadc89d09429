package taskmanager

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/weirstream/weir/ha"
	"github.com/weirstream/weir/ha/etcdtest"
	"github.com/weirstream/weir/jobmanager/jobmanagertest"
	"github.com/weirstream/weir/proto/weirpb"
)

// TestStaleEpochRejected: once a taskmanager has seen epoch 7, every
// jobmanager call carrying a lower epoch is refused with
// FailedPrecondition, counted once and logged once with
// zombie_write_rejected=1; calls carrying the current epoch pass.
func TestStaleEpochRejected(t *testing.T) {
	jm := jobmanagertest.Start(t)
	st := newTestState()
	h := startTaskManager(t, jm.Addr(), newTestRegistry(st), nil)
	ctx := context.Background()

	task := chainedTask("job-e", 1, genJSON(0, true), "count", "")
	if _, err := h.exec.SubmitTask(ctx, &weirpb.SubmitTaskRequest{Task: task, Epoch: 7, InstanceId: h.tm.Instance()}); err != nil {
		t.Fatalf("SubmitTask at epoch 7: %v", err)
	}
	id := task.GetId()
	// Both operators of the epoch-7 task open before the stale calls come.
	waitFor(t, "the epoch-7 task opens its operators", func() bool { return st.opened.Load() == 2 })
	calls := []struct {
		name string
		call func(epoch int64) error
	}{
		{"SubmitTask", func(e int64) error {
			d := chainedTask("job-z", 1, genJSON(0, true), "count", "")
			_, err := h.exec.SubmitTask(ctx, &weirpb.SubmitTaskRequest{Task: d, Epoch: e, InstanceId: h.tm.Instance()})
			return err
		}},
		{"CancelTask", func(e int64) error {
			_, err := h.exec.CancelTask(ctx, &weirpb.CancelTaskRequest{Id: id, Epoch: e})
			return err
		}},
		{"TriggerCheckpoint", func(e int64) error {
			_, err := h.exec.TriggerCheckpoint(ctx, &weirpb.TriggerCheckpointRequest{Id: id, CheckpointId: 1, Epoch: e})
			return err
		}},
		{"NotifyCheckpoint", func(e int64) error {
			_, err := h.exec.NotifyCheckpoint(ctx, &weirpb.NotifyCheckpointRequest{Id: id, CheckpointId: 1, Complete: true, Epoch: e})
			return err
		}},
	}
	for i, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			err := c.call(3)
			if status.Code(err) != codes.FailedPrecondition {
				t.Fatalf("%s at epoch 3 after 7: got %v, want FailedPrecondition", c.name, err)
			}
			// The message names both epochs.
			if msg := status.Convert(err).Message(); !strings.Contains(msg, "epoch 3 < 7") {
				t.Fatalf("%s: message %q does not name epochs 3 and 7", c.name, msg)
			}
			if got, want := fencedCalls(t, h), float64(i+1); got != want {
				t.Fatalf("weir_taskmanager_fenced_calls_total = %v, want %v", got, want)
			}
			if got, want := h.logs.count("zombie_write_rejected=1"), i+1; got != want {
				t.Fatalf("%d log lines with zombie_write_rejected=1, want %d", got, want)
			}
		})
	}
	// The task of epoch 7 was never touched by the stale calls.
	if _, ok := h.tm.task(id); !ok {
		t.Fatal("the epoch-7 task is gone after stale calls")
	}
	if got := st.opened.Load(); got != 2 { // gen + count of the epoch-7 task only
		t.Fatalf("%d operators opened, want 2 (the stale SubmitTask must not deploy)", got)
	}
	// The current epoch passes.
	if _, err := h.exec.CancelTask(ctx, &weirpb.CancelTaskRequest{Id: id, Epoch: 7}); err != nil {
		t.Fatalf("CancelTask at the current epoch: %v", err)
	}
	jm.WaitReported(t, id, canceled)
	if got := h.logs.count("zombie_write_rejected"); got != len(calls) {
		t.Fatalf("%d lines mention zombie_write_rejected, want %d", got, len(calls))
	}
}

// TestHigherEpochCancelsOlderTasks: a call of a new leader (higher epoch)
// cancels the tasks deployed under the old one, and their commits are
// refused from then on; the new leader's task runs.
func TestHigherEpochCancelsOlderTasks(t *testing.T) {
	jm := jobmanagertest.Start(t)
	st := newTestState()
	h := startTaskManager(t, jm.Addr(), newTestRegistry(st), nil)
	ctx := context.Background()

	old := chainedTask("job-h", 1, genJSON(0, true), "count", "")
	if _, err := h.exec.SubmitTask(ctx, &weirpb.SubmitTaskRequest{Task: old, Epoch: 5, InstanceId: h.tm.Instance()}); err != nil {
		t.Fatal(err)
	}
	jm.WaitReported(t, old.GetId(), running)
	guard := h.tm.commitGuard("old", 5)
	if err := guard(1); err != nil {
		t.Fatalf("commit guard of the current epoch refused: %v", err)
	}
	// The new leader redeploys with a higher attempt (its term's base).
	next := chainedTask("job-h", 1<<16+1, genJSON(0, true), "count", "")
	if _, err := h.exec.SubmitTask(ctx, &weirpb.SubmitTaskRequest{Task: next, Epoch: 9, InstanceId: h.tm.Instance()}); err != nil {
		t.Fatalf("SubmitTask of the new leader: %v", err)
	}
	jm.WaitReported(t, old.GetId(), canceled)
	jm.WaitReported(t, next.GetId(), running)
	if err := guard(2); err == nil {
		t.Fatal("commit guard of epoch 5 passed after epoch 9 was seen")
	}
	if got := h.logs.count("zombie_write_rejected"); got != 0 {
		t.Fatalf("%d zombie_write_rejected lines, want 0 (nothing stale was called)", got)
	}
}

func fencedCalls(t *testing.T, h *harness) float64 {
	t.Helper()
	var m dto.Metric
	if err := h.tm.metrics.fencedCalls.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestEpochVerified: an epoch higher than any the taskmanager has seen is
// admitted only when no higher than the leader's epoch in etcd, so that a
// holder of a jobmanager certificate cannot lock the real leader out with
// a huge epoch. Without HA, any epoch other than 0 is refused.
func TestEpochVerified(t *testing.T) {
	ctx := context.Background()
	t.Run("without HA", func(t *testing.T) {
		jm := jobmanagertest.Start(t)
		h := startTaskManager(t, jm.Addr(), newTestRegistry(newTestState()), nil)
		h.tm.testAcceptEpochs.Store(false)
		id := &weirpb.ExecutionID{JobId: "job-p", Attempt: 1}
		_, err := h.exec.CancelTask(ctx, &weirpb.CancelTaskRequest{Id: id, Epoch: 1 << 62})
		if status.Code(err) != codes.PermissionDenied || !strings.Contains(status.Convert(err).Message(), "without HA") {
			t.Fatalf("CancelTask with epoch 2^62: %v, want PermissionDenied naming the missing HA", err)
		}
		// The real jobmanager's epoch 0 still passes.
		if _, err := h.exec.CancelTask(ctx, &weirpb.CancelTaskRequest{Id: id}); err != nil {
			t.Fatalf("CancelTask at epoch 0 after the refused poisoning: %v", err)
		}
	})
	t.Run("ha etcd", func(t *testing.T) {
		srv := etcdtest.Start(t)
		jm := jobmanagertest.Start(t)
		cfg := ha.DefaultConfig()
		cfg.Endpoints = srv.Endpoints()
		cfg.Prefix = "/weir-epoch-test"
		cfg.Logger = slog.New(slog.DiscardHandler)
		c, err := ha.Connect(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		lead, err := c.Campaign(ctx, "jm-test", jm.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = lead.Resign(context.Background()) })
		h := startTaskManager(t, jm.Addr(), newTestRegistry(newTestState()), func(tc *Config) {
			tc.HA = HAConfig{Mode: "etcd", Endpoints: srv.Endpoints(), Prefix: cfg.Prefix}
		})
		h.tm.testAcceptEpochs.Store(false)
		id := &weirpb.ExecutionID{JobId: "job-p", Attempt: 1}
		cancel := func(epoch int64) error {
			var err error
			// Unavailable until the taskmanager has connected to etcd.
			waitFor(t, "the taskmanager connects to etcd", func() bool {
				_, err = h.exec.CancelTask(ctx, &weirpb.CancelTaskRequest{Id: id, Epoch: epoch})
				return status.Code(err) != codes.Unavailable
			})
			return err
		}
		forged := lead.Epoch() + 1<<40
		if err := cancel(forged); status.Code(err) != codes.PermissionDenied || !strings.Contains(status.Convert(err).Message(), "only the leading jobmanager") {
			t.Fatalf("CancelTask with an epoch above the leader's: %v, want PermissionDenied", err)
		}
		if err := cancel(lead.Epoch()); err != nil {
			t.Fatalf("CancelTask at the leader's epoch after the refused poisoning: %v", err)
		}
		h.tm.mu.Lock()
		got := h.tm.mu.epoch
		h.tm.mu.Unlock()
		if got != lead.Epoch() {
			t.Fatalf("taskmanager epoch %d, want the leader's %d", got, lead.Epoch())
		}
	})
}
