package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strconv"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/weirstream/weir/jobmanager"
	"github.com/weirstream/weir/jobspec"
	"github.com/weirstream/weir/stream"
	"github.com/weirstream/weir/taskmanager"
)

func newLogger(level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l})), nil
}

// DefaultDataDir is the jobmanager command's data directory (--data-dir),
// relative to its working directory.
const DefaultDataDir = "weir-data"

// envEtcdPassword holds the etcd password: command lines and config files
// are readable by more people than the process environment.
const envEtcdPassword = "WEIR_HA_ETCD_PASSWORD"

// jobManagerSettings is the jobmanager's settings table; restart receives
// the default restart strategy's keys (finishJobManagerConfig parses them).
func jobManagerSettings(cfg *jobmanager.Config, restart *map[string]string) []setting {
	return []setting{
		{"rpcAddress", "rpc-address", "gRPC listen address for taskmanagers and clients", &cfg.RPCAddress},
		{"restAddress", "rest-address", "HTTP listen address of the REST API and /metrics (empty disables it)", &cfg.RESTAddress},
		{"heartbeatInterval", "heartbeat-interval", "how often taskmanagers heartbeat", &cfg.HeartbeatInterval},
		{"heartbeatTimeout", "heartbeat-timeout", "silence after which a taskmanager is lost", &cfg.HeartbeatTimeout},
		{"slotWaitTimeout", "slot-wait-timeout", "how long a job waits for enough free slots", &cfg.SlotWaitTimeout},
		{"jobRetention", "job-retention", "how long ended jobs and lost taskmanagers stay listed", &cfg.JobRetention},
		{"maxEndedJobs", "max-ended-jobs", "ended jobs kept at most; the oldest are forgotten first", &cfg.MaxEndedJobs},
		{"stateBackend", "state-backend", "keyed-state backend of jobs that name none: heap or pebble", &cfg.DefaultStateBackend},
		{"checkpointStorage", "checkpoint-storage", "checkpoint storage of jobs that name none: file:///path or s3://bucket/prefix (S3 settings from WEIR_S3_ENDPOINT, WEIR_S3_ACCESS_KEY, WEIR_S3_SECRET_KEY, WEIR_S3_REGION, WEIR_S3_INSECURE, WEIR_S3_CA_FILE)", &cfg.CheckpointStorage},
		{"restartStrategy", "restart-strategy", "restart strategy of jobs that set none, with a job spec's restartStrategy keys (type=exponential-delay,initialBackoff=1s,...)", restart},
		{"savepointDir", "savepoint-dir", "where savepoints go when a request names no directory: file:///path or s3://bucket/prefix", &cfg.SavepointDir},
		{"dataDir", "data-dir", "directory where the jobmanager keeps its jobs and their latest checkpoints, so that a restarted jobmanager resumes them (ha none; created 0700; one jobmanager per directory)", &cfg.DataDir},
		{"allowedPaths", "allowed-paths", "directories jobs may read and write files under (file sources and sinks, file:// checkpoint storage a job names), comma-separated", &cfg.AllowedPaths},
		{"tls.ca", "tls-ca", "cluster CA certificate (PEM); with --tls-cert and --tls-key every connection is mutual TLS and every call authorized by role (without them only loopback addresses are allowed)", &cfg.TLS.CAFile},
		{"tls.cert", "tls-cert", "this jobmanager's certificate (PEM, role jobmanager; weir certs init makes one)", &cfg.TLS.CertFile},
		{"tls.key", "tls-key", "the private key of --tls-cert (PEM)", &cfg.TLS.KeyFile},
		{"ha.mode", "ha", "high availability: none, or etcd (several jobmanagers elect a leader through etcd)", &cfg.HA.Mode},
		{"ha.endpoints", "ha-etcd-endpoints", "etcd client URLs for --ha etcd, comma-separated", &cfg.HA.Endpoints},
		{"ha.prefix", "ha-prefix", "etcd key prefix of this cluster (--ha etcd)", &cfg.HA.Prefix},
		{"ha.etcdCA", "ha-etcd-ca", "etcd's CA certificate (PEM), for TLS to etcd with --ha-etcd-cert and --ha-etcd-key", &cfg.HA.EtcdTLS.CAFile},
		{"ha.etcdCert", "ha-etcd-cert", "client certificate (PEM) presented to etcd", &cfg.HA.EtcdTLS.CertFile},
		{"ha.etcdKey", "ha-etcd-key", "the private key of --ha-etcd-cert (PEM)", &cfg.HA.EtcdTLS.KeyFile},
		{"ha.etcdUser", "ha-etcd-user", "etcd user to log in as (the password from WEIR_HA_ETCD_PASSWORD)", &cfg.HA.EtcdUser},
		{"ha.leaseTTL", "ha-lease-ttl", "leader lease TTL: bounds how long a dead leader blocks a takeover (--ha etcd)", &cfg.HA.LeaseTTL},
		{"storagePrices.currency", "storage-price-currency", "currency of the storage request prices", &cfg.StoragePrices.Currency},
		{"storagePrices.put", "storage-price-put", "price of 1,000 PUT (and COPY, POST) requests to checkpoint storage, for the estimated monthly request cost", &cfg.StoragePrices.Put},
		{"storagePrices.get", "storage-price-get", "price of 1,000 GET requests to checkpoint storage", &cfg.StoragePrices.Get},
		{"storagePrices.list", "storage-price-list", "price of 1,000 LIST requests to checkpoint storage", &cfg.StoragePrices.List},
		{"storagePrices.delete", "storage-price-delete", "price of 1,000 DELETE requests to checkpoint storage", &cfg.StoragePrices.Delete},
		{"ha.advertisedAddress", "ha-advertised-address", "RPC address published to taskmanagers and clients while leading (default: the bound --rpc-address)", &cfg.HA.AdvertisedAddress},
	}
}

// finishJobManagerConfig parses the default restart strategy.
func finishJobManagerConfig(cfg *jobmanager.Config, restart map[string]string) error {
	cfg.HA.EtcdPassword = os.Getenv(envEtcdPassword)
	if len(restart) == 0 {
		return nil
	}
	m := make(map[string]any, len(restart))
	for k, v := range restart {
		m[k] = typedValue(v)
	}
	r, err := jobspec.ParseRestartStrategy(m)
	if err != nil {
		return err
	}
	cfg.DefaultRestart = r
	return nil
}

// typedValue reads a flag's text as a YAML scalar would be read: an
// integer, a number, or a string.
func typedValue(v string) any {
	if i, err := strconv.Atoi(v); err == nil {
		return i
	}
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		return f
	}
	return v
}

// loadJobManagerConfig returns the jobmanager configuration that the
// config file at path gives, with no flags.
func loadJobManagerConfig(path string) (jobmanager.Config, error) {
	cfg := jobmanager.DefaultConfig()
	cfg.DataDir = DefaultDataDir
	restart := map[string]string{}
	table := jobManagerSettings(&cfg, &restart)
	fs := pflag.NewFlagSet("jobmanager", pflag.ContinueOnError)
	bindSettings(fs, table)
	if err := applyConfigFile(fs, table, path, nil); err != nil {
		return cfg, err
	}
	return cfg, finishJobManagerConfig(&cfg, restart)
}

// NewJobManagerCommand returns the jobmanager process command, which plans
// jobs against reg: the operator types its taskmanagers offer.
func NewJobManagerCommand(reg *stream.Registry) *cobra.Command {
	cfg := jobmanager.DefaultConfig()
	cfg.DataDir = DefaultDataDir
	restart := map[string]string{}
	table := jobManagerSettings(&cfg, &restart)
	var configPath, logLevel, addrFile string
	cmd := &cobra.Command{
		Use:           "jobmanager",
		Short:         "Run the jobmanager: scheduler, cluster membership and the job API",
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if configPath != "" {
				if err := applyConfigFile(cmd.Flags(), table, configPath, nil); err != nil {
					return err
				}
			}
			if err := finishJobManagerConfig(&cfg, restart); err != nil {
				return err
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
	f.StringVar(&configPath, "config", "", "YAML config file; its keys are the flags' (rpcAddress, ha.endpoints, ...), and flags given override it")
	bindSettings(f, table)
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

// taskManagerSettings is the taskmanager's settings table.
func taskManagerSettings(cfg *taskmanager.Config) []setting {
	return []setting{
		{"id", "id", "taskmanager id, unique in the cluster", &cfg.ID},
		{"jobmanager", "jobmanager", "jobmanager gRPC address (env WEIR_JOBMANAGER)", &cfg.JobManagerAddress},
		{"rpcAddress", "rpc-address", "listen address for the jobmanager and other taskmanagers", &cfg.RPCAddress},
		{"advertiseAddress", "advertise-address", "address others reach this taskmanager at (default: the listen address)", &cfg.AdvertiseAddress},
		{"exchangeAddress", "exchange-address", "listen address for other taskmanagers' data, a server of its own (default: the --rpc-address host, a free port)", &cfg.ExchangeAddress},
		{"exchangeAdvertiseAddress", "exchange-advertise-address", "address other taskmanagers send data to (default: the --advertise-address host with the exchange's port)", &cfg.ExchangeAdvertiseAddress},
		{"slots", "slots", "number of task slots", &cfg.Slots},
		{"creditsPerChannel", "credits-per-channel", "batches buffered per input channel (flow-control credits)", &cfg.CreditsPerChannel},
		{"checkpointAckDelay", "checkpoint-ack-delay", "longest wait to batch the acknowledgements of a checkpoint's subtasks into one call (0: each at once)", &cfg.CheckpointAckDelay},
		{"stateInlineBytes", "state-inline-bytes", "snapshots up to this size travel inside the checkpoint's metadata instead of as objects of their own (0: never)", &cfg.StateInlineBytes},
		{"exchangeCompression", "exchange-compression", "compress batches sent to other taskmanagers: none or zstd (for networks slower than the CPU)", &cfg.ExchangeCompression},
		{"exchangeCoalesceRows", "exchange-coalesce-rows", "gather the batches a task sends to another taskmanager into batches of up to this many rows while the task is busy; sent before it waits for input (0: off)", &cfg.ExchangeCoalesceRows},
		{"exchangeDictionaryBytes", "exchange-dictionary-bytes", "size of the string dictionary each channel to another taskmanager keeps at each end, so that recurring values cross once (0: off)", &cfg.ExchangeDictionaryBytes},
		{"exchangeCoalesceTimeout", "exchange-coalesce-timeout", "longest time a busy task's channel to another taskmanager holds batches to gather them", &cfg.ExchangeCoalesceTimeout},
		{"exchangeMemoryBytes", "exchange-memory-bytes", "network memory: bytes of batches from other taskmanagers buffered here before credits are held back (each channel keeps one)", &cfg.ExchangeMemoryBytes},
		{"channelBytes", "channel-bytes", "bytes of batches in flight per output channel, on top of the credits (0: no fixed bound)", &cfg.ChannelBytes},
		{"networkDebloatTarget", "network-debloat-target", "size each output channel's in-flight budget to what its consumer takes in this time, so that under backpressure aligned checkpoints wait behind about this much (0: off)", &cfg.DebloatTarget},
		{"metricsAddress", "metrics-address", "serve Prometheus metrics at http://ADDRESS/metrics (empty: off)", &cfg.MetricsAddress},
		{"stateDir", "state-dir", "directory for local keyed state (pebble backend), created private (0700); default: a new private directory under $TMPDIR, removed on exit", &cfg.StateDir},
		{"tls.ca", "tls-ca", "cluster CA certificate (PEM); with --tls-cert and --tls-key every connection is mutual TLS and every call authorized by role (without them only loopback addresses are allowed)", &cfg.TLS.CAFile},
		{"allowedPaths", "allowed-paths", "directories tasks may read and write files under (file sources and sinks), comma-separated; the jobmanager's list should match", &cfg.AllowedPaths},
		{"tls.cert", "tls-cert", "this taskmanager's certificate (PEM, role taskmanager, issued for its --id)", &cfg.TLS.CertFile},
		{"tls.key", "tls-key", "the private key of --tls-cert (PEM)", &cfg.TLS.KeyFile},
		{"stateCacheBytes", "state-cache-bytes", "memory for keyed-state caches: half is one Pebble block cache all slots share, the other half is divided among the slots, a quarter of each share to the timer index and the rest to the write-back value cache (0: a 64 MiB block cache per slot, shared, and 64 MiB value cache + 8 MiB timer index per Pebble backend)", &cfg.StateCacheBytes},
		{"cpuCores", "cpu-cores", "CPUs the taskmanager runs on at once (GOMAXPROCS); when several share a machine without containers, give each its share (0: all the process may use)", &cfg.CPUCores},
		{"gcHeapFloorBytes", "gc-heap-floor-bytes", "let the Go heap grow to this many bytes before a garbage collection, however little is live; above it GOGC applies (0: the Go default; GOGC in the environment turns it off)", &cfg.GCHeapFloorBytes},
		{"ha.mode", "ha", "how to find the jobmanager: none (--jobmanager), or etcd (the leader named in etcd, followed across takeovers)", &cfg.HA.Mode},
		{"ha.endpoints", "ha-etcd-endpoints", "etcd client URLs for --ha etcd, comma-separated", &cfg.HA.Endpoints},
		{"ha.prefix", "ha-prefix", "etcd key prefix of this cluster (--ha etcd)", &cfg.HA.Prefix},
		{"ha.etcdCA", "ha-etcd-ca", "etcd's CA certificate (PEM), for TLS to etcd with --ha-etcd-cert and --ha-etcd-key", &cfg.HA.EtcdTLS.CAFile},
		{"ha.etcdCert", "ha-etcd-cert", "client certificate (PEM) presented to etcd", &cfg.HA.EtcdTLS.CertFile},
		{"ha.etcdKey", "ha-etcd-key", "the private key of --ha-etcd-cert (PEM)", &cfg.HA.EtcdTLS.KeyFile},
		{"ha.etcdUser", "ha-etcd-user", "etcd user to log in as (the password from WEIR_HA_ETCD_PASSWORD)", &cfg.HA.EtcdUser},
	}
}

// loadTaskManagerConfig returns the taskmanager configuration that the
// config file at path gives, with no flags.
func loadTaskManagerConfig(path string) (taskmanager.Config, error) {
	cfg := taskmanager.DefaultConfig()
	table := taskManagerSettings(&cfg)
	fs := pflag.NewFlagSet("taskmanager", pflag.ContinueOnError)
	bindSettings(fs, table)
	return cfg, applyConfigFile(fs, table, path, nil)
}

// NewTaskManagerCommand returns the taskmanager process command.
//
// A binary with operator types of its own (registered in reg, next to
// builtin.Registry's) runs this command to be a taskmanager that offers
// them, with every flag and config-file key of the stock one.
func NewTaskManagerCommand(reg *stream.Registry) *cobra.Command {
	cfg := taskmanager.DefaultConfig()
	env := os.Getenv("WEIR_JOBMANAGER")
	if env != "" {
		cfg.JobManagerAddress = env
	}
	table := taskManagerSettings(&cfg)
	var configPath, logLevel, addrFile string
	cmd := &cobra.Command{
		Use:           "taskmanager",
		Short:         "Run a taskmanager: offers slots to the jobmanager and runs tasks",
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if configPath != "" {
				// WEIR_JOBMANAGER overrides the file, as a flag would.
				skip := func(flag string) bool { return flag == "jobmanager" && env != "" }
				if err := applyConfigFile(cmd.Flags(), table, configPath, skip); err != nil {
					return err
				}
			}
			cfg.HA.EtcdPassword = os.Getenv(envEtcdPassword)
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
						writeJSONFile(addrFile, map[string]string{"rpc": tm.ListenAddr(), "exchange": tm.ExchangeListenAddr(), "advertised": tm.Addr(), "instance": tm.Instance(),
							"metrics": tm.MetricsAddr()})
					}
				}()
			}
			return tm.Run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&configPath, "config", "", "YAML config file; its keys are the flags' (rpcAddress, ha.endpoints, ...), and flags and WEIR_JOBMANAGER given override it")
	bindSettings(f, table)
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&addrFile, "address-file", "", "once listening, write the bound address, the advertised one, the process instance id and the bound metrics address here as JSON {\"rpc\":…,\"advertised\":…,\"instance\":…,\"metrics\":…}")
	return cmd
}
