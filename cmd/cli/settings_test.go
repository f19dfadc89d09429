package cli

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/weirstream/weir/builtin"
	"github.com/weirstream/weir/jobmanager"
	"github.com/weirstream/weir/taskmanager"
)

// Every setting of both processes is reachable by flag and by config-file
// key, and the file and the flag give the same value.
func TestEverySettingBothWays(t *testing.T) {
	jcfg, restart := jobmanager.DefaultConfig(), map[string]string{}
	tcfg := taskmanager.DefaultConfig()
	for name, table := range map[string][]setting{
		"jobmanager":  jobManagerSettings(&jcfg, &restart),
		"taskmanager": taskManagerSettings(&tcfg),
	} {
		var cmdFlags func(string) bool
		if name == "jobmanager" {
			cmd := NewJobManagerCommand(builtin.Registry())
			cmdFlags = func(f string) bool { return cmd.Flags().Lookup(f) != nil }
		} else {
			cmd := NewTaskManagerCommand(builtin.Registry())
			cmdFlags = func(f string) bool { return cmd.Flags().Lookup(f) != nil }
		}
		keys := map[string]bool{}
		for _, s := range table {
			if !cmdFlags(s.flag) {
				t.Errorf("%s: setting %s has no flag --%s", name, s.key, s.flag)
			}
			if keys[s.key] {
				t.Errorf("%s: key %s twice", name, s.key)
			}
			keys[s.key] = true
		}
	}
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConfigFileAndFlags(t *testing.T) {
	path := writeFile(t, `
rpcAddress: 0.0.0.0:7000
heartbeatTimeout: 7s
restartStrategy: {type: fixed-delay, attempts: 3, delay: 2s}
ha:
  mode: etcd
  endpoints: [e1:2379, e2:2379]
  leaseTTL: 4s
`)
	cfg, err := loadJobManagerConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.RPCAddress != "0.0.0.0:7000" || cfg.HeartbeatTimeout != 7*time.Second || cfg.HA.Mode != "etcd" ||
		!slices.Equal(cfg.HA.Endpoints, []string{"e1:2379", "e2:2379"}) || cfg.HA.LeaseTTL != 4*time.Second ||
		cfg.HA.Prefix != "/weir" || cfg.HeartbeatInterval != time.Second {
		t.Fatalf("config %+v", cfg)
	}
	if cfg.DefaultRestart.Type != "fixed-delay" || cfg.DefaultRestart.Attempts != 3 || cfg.DefaultRestart.Delay != 2*time.Second {
		t.Fatalf("restart strategy %+v", cfg.DefaultRestart)
	}

	// A flag given overrides the file; the others come from the file.
	tcfg := taskmanager.DefaultConfig()
	table := taskManagerSettings(&tcfg)
	fs := pflag.NewFlagSet("taskmanager", pflag.ContinueOnError)
	bindSettings(fs, table)
	if err := fs.Parse([]string{"--slots", "3"}); err != nil {
		t.Fatal(err)
	}
	tpath := writeFile(t, "id: tm-9\nslots: 8\nha: {mode: etcd, endpoints: [a:1]}\n")
	if err := applyConfigFile(fs, table, tpath, nil); err != nil {
		t.Fatal(err)
	}
	if tcfg.Slots != 3 || tcfg.ID != "tm-9" || tcfg.HA.Mode != "etcd" || !slices.Equal(tcfg.HA.Endpoints, []string{"a:1"}) {
		t.Errorf("--slots 3 over a file with id tm-9, slots 8, ha etcd on a:1: %+v", tcfg)
	}
}

func TestConfigFileErrors(t *testing.T) {
	for _, tt := range []struct {
		body string
		want []string // the key, the value and the right keys
	}{
		{"rpcAdress: x\n", []string{`"rpcAdress"`, "rpcAddress"}},
		{"ha:\n  mod: etcd\n", []string{`"ha.mod"`, "ha.mode"}},
		{"heartbeatTimeout: soon\n", []string{"heartbeatTimeout", "soon"}},
		{"ha: etcd\n", []string{`"ha"`, "ha.mode"}},
		{"rpcAddress: {a: b}\n", []string{"rpcAddress", "mapping"}},
		{"restartStrategy: {type: fixed-delay, attempts: x}\n", []string{"attempts"}},
	} {
		_, err := loadJobManagerConfig(writeFile(t, tt.body))
		if err == nil {
			t.Errorf("%q: no error", tt.body)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%q: error %q does not contain %q", tt.body, err, w)
			}
		}
	}
}
