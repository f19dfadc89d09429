package ops

import (
	"testing"

	"github.com/weirstream/weir/test/clustertest"
)

// A taskmanager started with --cpu-cores runs its goroutines on that many
// CPUs at once, as its Go runtime reports (go_sched_gomaxprocs_threads).
func TestTaskManagerCPUCores(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{TaskManagers: 1, Slots: 1, LogLevel: "info",
		TaskManagerArgs: []string{"--cpu-cores", "1"}})
	e := env{t: t, c: c, client: c.HTTPClient()}
	got, n := e.taskManagers()["tm-0"].value("go_sched_gomaxprocs_threads", nil)
	if n != 1 || got != 1 {
		t.Fatalf("go_sched_gomaxprocs_threads %v (%d samples), want 1", got, n)
	}
}
