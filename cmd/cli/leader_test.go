package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/builtin"
	"github.com/weirstream/weir/ha/etcdtest"
	"github.com/weirstream/weir/jobmanager"
	"github.com/weirstream/weir/taskmanager"

	"github.com/weirstream/weir/test/polltest"
)

// Generous: CI is a small, noisy 2-core machine.
const haWait = 30 * time.Second

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	polltest.Eventually(t, haWait, what, cond)
}

type runningJM struct {
	jm   *jobmanager.JobManager
	stop func()
}

func startHAJobManager(t *testing.T, endpoints []string) *runningJM {
	t.Helper()
	cfg := jobmanager.DefaultConfig()
	cfg.RPCAddress, cfg.RESTAddress = "127.0.0.1:0", "127.0.0.1:0"
	cfg.HeartbeatInterval, cfg.HeartbeatTimeout = 100*time.Millisecond, 3*time.Second
	cfg.HA = jobmanager.HAConfig{Mode: "etcd", Endpoints: endpoints, Prefix: "/weir-cli-test", LeaseTTL: 2 * time.Second}
	cfg.Logger = slog.New(slog.DiscardHandler)
	jm, err := jobmanager.New(cfg, builtin.Registry())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- jm.Run(ctx) }()
	<-jm.Ready()
	r := &runningJM{jm: jm}
	stopped := false
	r.stop = func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
		}
	}
	t.Cleanup(r.stop)
	return r
}

// haInfo reads GET /v1/ha of a jobmanager.
func haInfo(t *testing.T, jm *jobmanager.JobManager) (info struct {
	Mode          string `json:"mode"`
	Leader        bool   `json:"leader"`
	Epoch         int64  `json:"epoch"`
	LeaderAddress string `json:"leaderAddress"`
}) {
	t.Helper()
	resp, err := http.Get("http://" + jm.RESTAddr() + "/v1/ha")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/ha: %s", resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&info); err != nil {
		t.Fatal(err)
	}
	return info
}

// weirCLI runs the weir command with args and returns its output.
func weirCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := NewWeirCommand(builtin.Registry())
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(io.Discard)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(context.Background())
	return out.String(), err
}

// TestHALeaderDiscovery runs two jobmanagers and one taskmanager on a real
// embedded etcd. The taskmanager finds the leader through etcd; the CLI
// reaches it through etcd and through the standby (which redirects); the
// standby's REST API answers 503 naming the leader, and /v1/ha describes
// both. When the leader stops, the standby takes over with a higher epoch
// and the taskmanager registers with it.
func TestHALeaderDiscovery(t *testing.T) {
	etcd := etcdtest.Start(t)
	a := startHAJobManager(t, etcd.Endpoints())
	eventually(t, "a leads", func() bool { return haInfo(t, a.jm).Leader })
	b := startHAJobManager(t, etcd.Endpoints())

	tcfg := taskmanager.DefaultConfig()
	tcfg.ID = "tm-ha"
	tcfg.RegisterRetry = 50 * time.Millisecond
	tcfg.HA = taskmanager.HAConfig{Mode: "etcd", Endpoints: etcd.Endpoints(), Prefix: "/weir-cli-test"}
	tcfg.Logger = slog.New(slog.DiscardHandler)
	tm, err := taskmanager.New(tcfg, builtin.Registry())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tmDone := make(chan error, 1)
	go func() { tmDone <- tm.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-tmDone })

	listVia := func(args ...string) string {
		out, err := weirCLI(t, append([]string{"taskmanagers", "list", "--timeout", "5s"}, args...)...)
		if err != nil {
			return "error: " + err.Error()
		}
		return out
	}
	eventually(t, "the taskmanager registers with the leader (seen through etcd)", func() bool {
		return strings.Contains(listVia("--ha-etcd-endpoints", etcd.Endpoint(), "--ha-prefix", "/weir-cli-test"), "tm-ha")
	})
	if out := listVia("--jobmanager", b.jm.RPCAddr()); !strings.Contains(out, "tm-ha") {
		t.Fatalf("the CLI did not follow the standby's redirect to the leader: %s", out)
	}

	hb := haInfo(t, b.jm)
	ha := haInfo(t, a.jm)
	if hb.Leader || hb.Mode != "etcd" || hb.LeaderAddress != a.jm.RPCAddr() {
		t.Fatalf("standby's /v1/ha = %+v, want a standby naming %s", hb, a.jm.RPCAddr())
	}
	if !ha.Leader || ha.Epoch <= 0 {
		t.Fatalf("leader's /v1/ha = %+v", ha)
	}
	resp, err := http.Get("http://" + b.jm.RESTAddr() + "/v1/jobs")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), a.jm.RPCAddr()) {
		t.Fatalf("standby GET /v1/jobs: %s %s, want 503 naming %s", resp.Status, body, a.jm.RPCAddr())
	}

	a.stop()
	eventually(t, "b takes over", func() bool { return haInfo(t, b.jm).Leader })
	if e := haInfo(t, b.jm).Epoch; e <= ha.Epoch {
		t.Fatalf("new leader's epoch %d is not above the old one's %d", e, ha.Epoch)
	}
	eventually(t, "the taskmanager registers with the new leader", func() bool {
		return strings.Contains(listVia("--jobmanager", b.jm.RPCAddr()), "tm-ha")
	})
}
