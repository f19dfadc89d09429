package jobmanager

import (
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/weirstream/weir/jobmanager/scheduler/schedulertest"
	"github.com/weirstream/weir/test/polltest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Graph fixtures shared with the scheduler's tests.
var (
	testRegistry = schedulertest.Registry
	pipeline     = schedulertest.Pipeline
	planned      = schedulertest.Planned
	fanOut       = schedulertest.FanOut
)

// eventually polls cond until it holds or timeout passes.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	polltest.Eventually(t, timeout, what, cond)
}
