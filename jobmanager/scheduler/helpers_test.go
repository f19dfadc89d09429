package scheduler

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/weirstream/weir/jobmanager/scheduler/schedulertest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var (
	testRegistry = schedulertest.Registry
	pipeline     = schedulertest.Pipeline
	planned      = schedulertest.Planned
	fanOut       = schedulertest.FanOut
)
