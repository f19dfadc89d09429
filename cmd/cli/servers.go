package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/weirstream/weir/jobmanager"
	"github.com/weirstream/weir/jobspec"
	"github.com/weirstream/weir/stream"
	"github.com/weirstream/weir/taskmanager"
)

// loadConfigFile decodes a YAML config file into v, rejecting unknown keys.
func loadConfigFile(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("config file %s: %v", path, err)
	}
	return nil
}

func newLogger(level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l})), nil
}

// jobManagerFile is the jobmanager's YAML config file.
type jobManagerFile struct {
	RPCAddress        string `yaml:"rpcAddress"`
	RESTAddress       string `yaml:"restAddress"`
	HeartbeatInterval string `yaml:"heartbeatInterval"`
	HeartbeatTimeout  string `yaml:"heartbeatTimeout"`
	SlotWaitTimeout   string `yaml:"slotWaitTimeout"`
	CheckpointStorage string `yaml:"checkpointStorage"`
	// RestartStrategy is the default for jobs that set none, with the keys
	// of a job spec's restartStrategy.
	RestartStrategy map[string]any `yaml:"restartStrategy"`
	// HA configures high availability (mode none or etcd).
	HA struct {
		haDiscoveryFile   `yaml:",inline"`
		LeaseTTL          string `yaml:"leaseTTL"`
		AdvertisedAddress string `yaml:"advertisedAddress"`
	} `yaml:"ha"`
}

// haDiscoveryFile is the part of the ha: block that jobmanagers and
// taskmanagers share: how to reach etcd and the cluster's prefix.
type haDiscoveryFile struct {
	Mode      string   `yaml:"mode"`
	Endpoints []string `yaml:"endpoints"`
	Prefix    string   `yaml:"prefix"`
}

// apply copies the keys that are set into the config fields whose flags
// (--ha, --ha-etcd-endpoints, --ha-prefix) were not given.
func (h haDiscoveryFile) apply(set func(flag string) bool, mode *string, endpoints *[]string, prefix *string) {
	if h.Mode != "" && !set("ha") {
		*mode = h.Mode
	}
	if len(h.Endpoints) > 0 && !set("ha-etcd-endpoints") {
		*endpoints = h.Endpoints
	}
	if h.Prefix != "" && !set("ha-prefix") {
		*prefix = h.Prefix
	}
}

// NewJobManagerCommand returns the jobmanager process command, which plans
// jobs against reg: the operator types its taskmanagers offer.
func NewJobManagerCommand(reg *stream.Registry) *cobra.Command {
	cfg := jobmanager.DefaultConfig()
	var configPath, logLevel, addrFile string
	cmd := &cobra.Command{
		Use:           "jobmanager",
		Short:         "Run the jobmanager: scheduler, cluster membership and the job API",
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if configPath != "" {
				var f jobManagerFile
				if err := loadConfigFile(configPath, &f); err != nil {
					return err
				}
				if err := applyJobManagerFile(cmd, &cfg, f); err != nil {
					return fmt.Errorf("config file %s: %w", configPath, err)
				}
			}
			log, err := newLogger(logLevel)
			if err != nil {
				return err
			}
			cfg.Logger = log
			jm, err := jobmanager.New(cfg, reg)
			if err != nil {
				return err
			}
			if addrFile != "" {
				go writeAddressFile(cmd.Context(), addrFile, jm)
			}
			return jm.Run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&configPath, "config", "", "YAML config file (flags override it)")
	f.StringVar(&cfg.RPCAddress, "rpc-address", cfg.RPCAddress, "gRPC listen address for taskmanagers and clients")
	f.StringVar(&cfg.RESTAddress, "rest-address", cfg.RESTAddress, "HTTP listen address of the read-only REST API (empty disables it)")
	f.DurationVar(&cfg.HeartbeatInterval, "heartbeat-interval", cfg.HeartbeatInterval, "how often taskmanagers heartbeat")
	f.DurationVar(&cfg.HeartbeatTimeout, "heartbeat-timeout", cfg.HeartbeatTimeout, "silence after which a taskmanager is lost")
	f.DurationVar(&cfg.SlotWaitTimeout, "slot-wait-timeout", cfg.SlotWaitTimeout, "how long a job waits for enough free slots")
	f.StringVar(&cfg.DefaultStateBackend, "state-backend", cfg.DefaultStateBackend, "keyed-state backend of jobs that name none: heap or pebble (default heap)")
	f.StringVar(&cfg.CheckpointStorage, "checkpoint-storage", cfg.CheckpointStorage, "checkpoint storage of jobs that name none: file:///path or s3://bucket/prefix (S3 settings from WEIR_S3_ENDPOINT, WEIR_S3_ACCESS_KEY, WEIR_S3_SECRET_KEY, WEIR_S3_REGION, WEIR_S3_INSECURE)")
	f.StringVar(&cfg.HA.Mode, "ha", "none", "high availability: none, or etcd (several jobmanagers elect a leader through etcd)")
	f.StringSliceVar(&cfg.HA.Endpoints, "ha-etcd-endpoints", nil, "etcd client URLs for --ha etcd, comma-separated")
	f.StringVar(&cfg.HA.Prefix, "ha-prefix", "/weir", "etcd key prefix of this cluster (--ha etcd)")
	f.DurationVar(&cfg.HA.LeaseTTL, "ha-lease-ttl", 10*time.Second, "leader lease TTL: bounds how long a dead leader blocks a takeover (--ha etcd)")
	f.StringVar(&cfg.HA.AdvertisedAddress, "ha-advertised-address", "", "RPC address published to taskmanagers and clients while leading (default: the bound --rpc-address)")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&addrFile, "address-file", "", "once listening, write the bound addresses here as JSON {\"rpc\":…,\"rest\":…} (for scripts and tests that listen on port 0)")
	return cmd
}

// writeAddressFile writes the jobmanager's bound addresses once it listens.
// The file is written to a temporary name and renamed, so a reader never
// sees it half-written.
func writeAddressFile(ctx context.Context, path string, jm *jobmanager.JobManager) {
	select {
	case <-ctx.Done():
		return
	case <-jm.Ready():
	}
	writeJSONFile(path, map[string]string{"rpc": jm.RPCAddr(), "rest": jm.RESTAddr()})
}

// writeJSONFile writes v as JSON to a temporary name and renames it to
// path, so that a reader never sees it half-written.
func writeJSONFile(path string, v any) {
	data, _ := json.Marshal(v)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err == nil {
		_ = os.Rename(tmp, path)
	}
}

func applyJobManagerFile(cmd *cobra.Command, cfg *jobmanager.Config, f jobManagerFile) error {
	set := func(flag string) bool { return cmd.Flags().Changed(flag) }
	if f.RPCAddress != "" && !set("rpc-address") {
		cfg.RPCAddress = f.RPCAddress
	}
	if f.RESTAddress != "" && !set("rest-address") {
		cfg.RESTAddress = f.RESTAddress
	}
	if f.CheckpointStorage != "" && !set("checkpoint-storage") {
		cfg.CheckpointStorage = f.CheckpointStorage
	}
	f.HA.apply(set, &cfg.HA.Mode, &cfg.HA.Endpoints, &cfg.HA.Prefix)
	if f.HA.AdvertisedAddress != "" && !set("ha-advertised-address") {
		cfg.HA.AdvertisedAddress = f.HA.AdvertisedAddress
	}
	if f.HA.LeaseTTL != "" && !set("ha-lease-ttl") {
		d, err := time.ParseDuration(f.HA.LeaseTTL)
		if err != nil {
			return fmt.Errorf("ha.leaseTTL %q: %v (want a duration such as 10s)", f.HA.LeaseTTL, err)
		}
		cfg.HA.LeaseTTL = d
	}
	if len(f.RestartStrategy) > 0 {
		r, err := jobspec.ParseRestartStrategy(f.RestartStrategy)
		if err != nil {
			return err
		}
		cfg.DefaultRestart = r
	}
	for _, d := range []struct {
		flag, val string
		dst       *time.Duration
	}{
		{"heartbeat-interval", f.HeartbeatInterval, &cfg.HeartbeatInterval},
		{"heartbeat-timeout", f.HeartbeatTimeout, &cfg.HeartbeatTimeout},
		{"slot-wait-timeout", f.SlotWaitTimeout, &cfg.SlotWaitTimeout},
	} {
		if d.val == "" || set(d.flag) {
			continue
		}
		v, err := time.ParseDuration(d.val)
		if err != nil {
			return fmt.Errorf("%s: %v", strings.ReplaceAll(d.flag, "-", " "), err)
		}
		*d.dst = v
	}
	return nil
}

// taskManagerFile is the taskmanager's YAML config file.
type taskManagerFile struct {
	ID               string `yaml:"id"`
	JobManager       string `yaml:"jobmanager"`
	RPCAddress       string `yaml:"rpcAddress"`
	AdvertiseAddress string `yaml:"advertiseAddress"`
	// ExchangeAdvertiseAddress is where other taskmanagers send data.
	ExchangeAdvertiseAddress string `yaml:"exchangeAdvertiseAddress"`
	Slots                    int    `yaml:"slots"`
	CreditsPerChannel        int    `yaml:"creditsPerChannel"`
	MetricsAddress           string `yaml:"metricsAddress"`
	// HA finds the leading jobmanager through etcd (the keys of the
	// jobmanager's ha: block; the others are ignored).
	HA              haDiscoveryFile `yaml:"ha"`
	StateCacheBytes int64           `yaml:"stateCacheBytes"`
}

// NewTaskManagerCommand returns the taskmanager process command.
//
// A binary with operator types of its own (registered in reg, next to
// builtin.Registry's) runs this command to be a taskmanager that offers
// them, with every flag and config-file key of the stock one.
func NewTaskManagerCommand(reg *stream.Registry) *cobra.Command {
	cfg := taskmanager.DefaultConfig()
	if env := os.Getenv("WEIR_JOBMANAGER"); env != "" {
		cfg.JobManagerAddress = env
	}
	var configPath, logLevel, addrFile string
	cmd := &cobra.Command{
		Use:           "taskmanager",
		Short:         "Run a taskmanager: offers slots to the jobmanager and runs tasks",
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if configPath != "" {
				var f taskManagerFile
				if err := loadConfigFile(configPath, &f); err != nil {
					return err
				}
				set := func(flag string) bool { return cmd.Flags().Changed(flag) }
				if f.ID != "" && !set("id") {
					cfg.ID = f.ID
				}
				if f.JobManager != "" && !set("jobmanager") && os.Getenv("WEIR_JOBMANAGER") == "" {
					cfg.JobManagerAddress = f.JobManager
				}
				if f.RPCAddress != "" && !set("rpc-address") {
					cfg.RPCAddress = f.RPCAddress
				}
				if f.AdvertiseAddress != "" && !set("advertise-address") {
					cfg.AdvertiseAddress = f.AdvertiseAddress
				}
				if f.ExchangeAdvertiseAddress != "" && !set("exchange-advertise-address") {
					cfg.ExchangeAdvertiseAddress = f.ExchangeAdvertiseAddress
				}
				if f.Slots != 0 && !set("slots") {
					cfg.Slots = f.Slots
				}
				if f.MetricsAddress != "" && !set("metrics-address") {
					cfg.MetricsAddress = f.MetricsAddress
				}
				if f.CreditsPerChannel != 0 && !set("credits-per-channel") {
					cfg.CreditsPerChannel = f.CreditsPerChannel
				}
				f.HA.apply(set, &cfg.HA.Mode, &cfg.HA.Endpoints, &cfg.HA.Prefix)
				if f.StateCacheBytes != 0 && !set("state-cache-bytes") {
					cfg.StateCacheBytes = f.StateCacheBytes
				}
			}
			log, err := newLogger(logLevel)
			if err != nil {
				return err
			}
			cfg.Logger = log
			tm, err := taskmanager.New(cfg, reg)
			if err != nil {
				return err
			}
			if addrFile != "" {
				go func() {
					select {
					case <-cmd.Context().Done():
					case <-tm.Ready():
						writeJSONFile(addrFile, map[string]string{"rpc": tm.ListenAddr(), "advertised": tm.Addr(), "instance": tm.Instance(),
							"metrics": tm.MetricsAddr()})
					}
				}()
			}
			return tm.Run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&configPath, "config", "", "YAML config file (flags and WEIR_JOBMANAGER override it)")
	f.StringVar(&cfg.ID, "id", cfg.ID, "taskmanager id")
	f.StringVar(&cfg.JobManagerAddress, "jobmanager", cfg.JobManagerAddress, "jobmanager gRPC address (env WEIR_JOBMANAGER)")
	f.StringVar(&cfg.RPCAddress, "rpc-address", cfg.RPCAddress, "listen address for the jobmanager and other taskmanagers")
	f.StringVar(&cfg.AdvertiseAddress, "advertise-address", cfg.AdvertiseAddress, "address others reach this taskmanager at (default: the listen address)")
	f.StringVar(&cfg.ExchangeAdvertiseAddress, "exchange-advertise-address", cfg.ExchangeAdvertiseAddress, "address other taskmanagers send data to (default: --advertise-address)")
	f.IntVar(&cfg.Slots, "slots", cfg.Slots, "number of task slots")
	f.StringVar(&cfg.MetricsAddress, "metrics-address", cfg.MetricsAddress, "serve Prometheus metrics at http://ADDRESS/metrics (empty: off)")
	f.StringVar(&cfg.StateDir, "state-dir", cfg.StateDir, "directory for local keyed state (pebble backend); default $TMPDIR/weir-state-<id>")
	f.Int64Var(&cfg.StateCacheBytes, "state-cache-bytes", cfg.StateCacheBytes, "memory for keyed-state caches, divided among the slots; per slot half goes to Pebble's block cache, half to its write-back value cache (0: 64 MiB + 32 MiB per Pebble backend)")
	f.IntVar(&cfg.CreditsPerChannel, "credits-per-channel", cfg.CreditsPerChannel, "batches buffered per input channel (flow-control credits)")
	f.StringVar(&cfg.HA.Mode, "ha", "none", "how to find the jobmanager: none (--jobmanager), or etcd (the leader named in etcd, followed across takeovers)")
	f.StringSliceVar(&cfg.HA.Endpoints, "ha-etcd-endpoints", nil, "etcd client URLs for --ha etcd, comma-separated")
	f.StringVar(&cfg.HA.Prefix, "ha-prefix", "/weir", "etcd key prefix of this cluster (--ha etcd)")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&addrFile, "address-file", "", "once listening, write the bound address, the advertised one, the process instance id and the bound metrics address here as JSON {\"rpc\":…,\"advertised\":…,\"instance\":…,\"metrics\":…} (for scripts and tests that listen on port 0)")
	return cmd
}
