package clustertest

// The HA cluster of the fault tests, shared by the process-test packages
// under test/ that run in ha: etcd mode.

import (
	"testing"
	"time"
)

// HALeaseTTL is the leader lease TTL of the fault tests' HA clusters: a
// killed leader blocks a takeover for up to this long.
const HALeaseTTL = 3 * time.Second

// StartHA starts the HA fault tests' cluster in ha: etcd mode as ha says:
// two jobmanagers and two taskmanagers of two slots each (4 slots: the
// sequence job's parallelism), mutual TLS, heartbeats every 500ms that
// time out after 3s, a 2-minute slot wait and info logs; with fault
// proxies on every network path (Options.FaultProxies) when proxies is
// set, and tmArgs added to every taskmanager's command line.
func StartHA(t *testing.T, proxies bool, ha HA, tmArgs ...string) *Cluster {
	t.Helper()
	return Start(t, Options{
		TaskManagerArgs:   tmArgs,
		TLS:               true,
		FaultProxies:      proxies,
		JobManagers:       2,
		TaskManagers:      2,
		Slots:             2,
		HeartbeatInterval: 500 * time.Millisecond,
		HeartbeatTimeout:  3 * time.Second,
		SlotWaitTimeout:   2 * time.Minute,
		LogLevel:          "info",
		HA:                &ha,
	})
}
