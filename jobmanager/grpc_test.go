package jobmanager

import (
	"testing"
	"time"

	"github.com/weirstream/weir/jobmanager/scheduler"
	"github.com/weirstream/weir/proto/weirpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// jobMessage explains a restarting job or its restarting regions in the
// error field of the APIs.
func TestJobMessage(t *testing.T) {
	now := time.Unix(1000, 0)
	const cause = "task b -> bsink (1/2) on taskmanager a failed: boom"
	for _, tc := range []struct {
		name string
		v    scheduler.JobView
		want string
	}{
		{"failed", scheduler.JobView{State: scheduler.JobFailed, Err: "boom"}, "boom"},
		{"restarting", scheduler.JobView{State: scheduler.JobRestarting, Attempt: 1, RestartDue: now.Add(4 * time.Second), Err: cause},
			"restarting (attempt 2) in 4s after: " + cause},
		{"restart overdue", scheduler.JobView{State: scheduler.JobRestarting, Attempt: 3, RestartDue: now.Add(-time.Second), Err: cause},
			"restarting (attempt 4) in 0s after: " + cause},
		{"regions", scheduler.JobView{State: scheduler.JobRunning, RestartingRegions: []scheduler.RegionView{
			{ID: 1, Of: 2, Phase: scheduler.RegionWaiting, Attempt: 2, Cause: cause, Due: now.Add(2 * time.Second), Tasks: []string{"a", "b", "c"}},
			{ID: 2, Of: 2, Phase: scheduler.RegionWaitingForSlots, Attempt: 2, Cause: cause, SlotDeadline: now.Add(5 * time.Second), Tasks: []string{"d"}},
			{ID: 3, Of: 3, Phase: scheduler.RegionDeploying, Attempt: 5, Cause: cause, Tasks: []string{"e"}},
		}}, "region 1 of 2 (3 tasks) restarting (attempt 2) in 2s after: " + cause +
			"; region 2 of 2 (1 tasks) waiting for slots (attempt 2) for up to 5s after: " + cause +
			"; region 3 of 3 (1 tasks) redeploying (attempt 5) after: " + cause},
	} {
		if got := jobMessage(&tc.v, now); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// Submissions beyond maxSubmissions in flight are refused at once with
// ResourceExhausted rather than queued.
func TestSubmissionsBounded(t *testing.T) {
	jm := &JobManager{submitting: make(chan struct{}, maxSubmissions)}
	for range maxSubmissions {
		jm.submitting <- struct{}{}
	}
	_, err := (&jobServer{jm: jm}).SubmitJob(t.Context(), &weirpb.SubmitJobRequest{})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("submission beyond the bound: %v, want ResourceExhausted", err)
	}
}
