package taskmanagertest_test

import (
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/weirstream/weir/jobmanager/jobmanagertest"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/taskmanager/taskmanagertest"
	"github.com/weirstream/weir/test/polltest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const waitTimeout = 10 * time.Second

// executor returns a TaskExecutorService client of the fake at addr.
func executor(t *testing.T, addr string) weirpb.TaskExecutorServiceClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return weirpb.NewTaskExecutorServiceClient(cc)
}

// The two fakes talk to each other: the fake taskmanager registers,
// heartbeats and reports task states to the fake jobmanager.
func TestFakesTogether(t *testing.T) {
	jm := jobmanagertest.Start(t)
	tm := taskmanagertest.Start(t, jm.Addr(), "tm-a", 2, taskmanagertest.WithOperatorTypes("gen"))
	regs := jm.Registrations()
	if len(regs) != 1 || regs[0].TaskmanagerId != "tm-a" || regs[0].InstanceId != tm.Instance() ||
		regs[0].Address != tm.Addr() || regs[0].Slots != 2 || !slices.Equal(regs[0].OperatorTypes, []string{"gen"}) {
		t.Fatalf("registrations %v", regs)
	}
	polltest.Eventually(t, waitTimeout, "answered heartbeats", func() bool { return tm.Heartbeats() >= 2 })

	exec := executor(t, tm.Addr())
	id := &weirpb.ExecutionID{JobId: "job", VertexId: 1, Subtask: 0, Attempt: 1}
	if _, err := exec.SubmitTask(t.Context(), &weirpb.SubmitTaskRequest{Task: &weirpb.TaskDeployment{Id: id, TaskName: "t"}}); err != nil {
		t.Fatal(err)
	}
	jm.WaitReported(t, id, weirpb.TaskState_TASK_STATE_RUNNING)
	if live := tm.Live(); len(live) != 1 || taskmanagertest.ExecKey(live[0]) != "job/1/0/1" {
		t.Errorf("live tasks %v", live)
	}
	if _, err := exec.CancelTask(t.Context(), &weirpb.CancelTaskRequest{Id: id}); err != nil {
		t.Fatal(err)
	}
	jm.WaitReported(t, id, weirpb.TaskState_TASK_STATE_CANCELED)
	if _, err := exec.CancelTask(t.Context(), &weirpb.CancelTaskRequest{Id: id}); status.Code(err) != codes.NotFound {
		t.Errorf("second cancel: %v, want NotFound", err)
	}
	if got := tm.Cancelled(); !slices.Equal(got, []string{"job/1/0/1", "job/1/0/1"}) || tm.Cancels() != 2 || len(tm.Live()) != 0 {
		t.Errorf("cancelled %v, live %v", got, tm.Live())
	}

	// A fake asked to register again does so.
	jm.AskReregister(1)
	polltest.Eventually(t, waitTimeout, "a second registration", func() bool { return len(jm.Registrations()) == 2 })

	// Killed and restarted, the taskmanager is a new process at the same
	// address.
	tm2 := tm.Restart(t)
	if tm2.Addr() != tm.Addr() || tm2.Instance() == tm.Instance() || tm2.ID() != "tm-a" || len(tm2.Deployments()) != 0 {
		t.Errorf("restarted fake at %s as %s, was at %s as %s", tm2.Addr(), tm2.Instance(), tm.Addr(), tm.Instance())
	}
	regs = jm.Registrations()
	if last := regs[len(regs)-1]; last.InstanceId != tm2.Instance() || last.Address != tm.Addr() {
		t.Errorf("last registration %v", last)
	}
}

// A deployment FailDeployments refuses reports RUNNING, then FAILED.
func TestFailDeployments(t *testing.T) {
	jm := jobmanagertest.Start(t)
	tm := taskmanagertest.Start(t, jm.Addr(), "tm-a", 1, taskmanagertest.FailDeployments(func(d *weirpb.TaskDeployment) string {
		return "boom " + d.TaskName
	}))
	id := &weirpb.ExecutionID{JobId: "job", Attempt: 1}
	if _, err := executor(t, tm.Addr()).SubmitTask(t.Context(), &weirpb.SubmitTaskRequest{Task: &weirpb.TaskDeployment{Id: id, TaskName: "t"}}); err != nil {
		t.Fatal(err)
	}
	if st := jm.WaitReported(t, id, weirpb.TaskState_TASK_STATE_FAILED); st.Error != "boom t" {
		t.Errorf("failed with %q", st.Error)
	}
	if got := jm.StatesOf(id); !slices.Equal(got, []weirpb.TaskState{weirpb.TaskState_TASK_STATE_RUNNING, weirpb.TaskState_TASK_STATE_FAILED}) {
		t.Errorf("states %v", got)
	}
}
