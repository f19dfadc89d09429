package jobmanager

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weirstream/weir/failover"
	"github.com/weirstream/weir/ha"
	"github.com/weirstream/weir/jobmanager/scheduler"
	"github.com/weirstream/weir/security"
	"github.com/weirstream/weir/stream"
)

// DefaultCheckpointStorage is the checkpoint storage of jobs that name
// none when Config.CheckpointStorage is empty.
const DefaultCheckpointStorage = "file:///tmp/weir-checkpoints"

// Config configures a JobManager. Start from DefaultConfig.
type Config struct {
	// RPCAddress is the host:port the gRPC server (ClusterService and
	// JobService) listens on. Default "127.0.0.1:6123"; port 0 picks a free
	// port (see JobManager.RPCAddr).
	RPCAddress string
	// RESTAddress is the host:port of the JSON REST API and the web UI
	// (docs/rest.md). Default "127.0.0.1:8081"; "" disables both.
	RESTAddress string
	// HeartbeatInterval is how often taskmanagers are told to heartbeat
	// (sent to them at registration). Default 1s.
	HeartbeatInterval time.Duration
	// HeartbeatTimeout is how long a taskmanager may stay silent before it
	// is declared lost and the failover regions of its tasks restart.
	// Default 10s: taskmanagers are small processes whose death should be
	// noticed quickly. It must exceed HeartbeatInterval. It also bounds how
	// long a cancelling, failing or restarting job (or region) waits for its
	// tasks to confirm cancellation, and rate-limits cancels of stale
	// attempts that a taskmanager still reports running.
	HeartbeatTimeout time.Duration
	// SlotWaitTimeout is how long a submitted job waits for enough free
	// slots before it fails. Default 30s. A submit request may override it.
	// The same wait bounds a restart (of the whole job or of a failover
	// region) that finds too few free slots: it resumes as soon as a
	// taskmanager registers, and counts as another failure for the restart
	// strategy only when the wait times out.
	SlotWaitTimeout time.Duration
	// CheckpointStorage is the checkpoint storage URI of jobs that take
	// checkpoints but name no storage of their own: file:///absolute/path
	// or s3://bucket/prefix (the S3 endpoint and credentials come from the
	// WEIR_S3_* environment variables). Default
	// DefaultCheckpointStorage (also when empty),
	// "file:///tmp/weir-checkpoints": fine for
	// one machine, lost on reboot; set a durable location in production.
	// A job's storage is opened when it is submitted; a submission whose
	// storage cannot be opened fails.
	CheckpointStorage string
	// DefaultRestart is the restart strategy of jobs that set none. Its
	// zero value means exponential-delay when the job takes checkpoints,
	// none otherwise.
	DefaultRestart stream.RestartConfig
	// JobRetention is how long an ended job (FINISHED, CANCELED, FAILED)
	// and a lost taskmanager stay listed before the jobmanager forgets
	// them. Default 1h.
	JobRetention time.Duration
	// MaxEndedJobs bounds the ended jobs kept; beyond it the oldest ended
	// are forgotten first. Default 1000.
	MaxEndedJobs int
	// DefaultStateBackend is the keyed-state backend of jobs that name none
	// (stream.StateBackendHeap or stream.StateBackendPebble). Default heap.
	DefaultStateBackend string
	// MetricsRegistry, if set, receives the jobmanager's Prometheus
	// metrics (weir_*); otherwise the jobmanager keeps a registry of its
	// own, with the Go runtime's and the process's metrics (go_*,
	// process_*) too. Either way JobManager.Metrics serves them, as does GET /metrics
	// on the REST address. One registry can hold one jobmanager's metrics.
	MetricsRegistry *prometheus.Registry
	// Logger receives the jobmanager's logs; nil means slog.Default().
	Logger *slog.Logger
	// AllowedPaths are the directories jobs may read and write files
	// under (file sources and sinks, file:// checkpoint storage a job
	// names): a submission naming a path outside them is refused. Every
	// taskmanager checks the same against its own list. Default: the
	// system's temporary directory.
	AllowedPaths []string
	// TLS is the jobmanager's TLS material: with it every gRPC and REST
	// connection is mutual TLS and every call is authorized by the
	// caller's role (package security); without it the RPC and REST
	// addresses must be loopback addresses.
	TLS security.TLSConfig
	// SavepointDir is where savepoints go when a request names no
	// directory (file:///path or s3://bucket/prefix); empty: requests must
	// name one.
	SavepointDir string
	// DataDir (ha: none) is the directory where the jobmanager keeps its
	// jobs' graphs, statuses and completed-checkpoint pointers, so that a
	// restarted jobmanager recovers every running job from its latest
	// completed checkpoint. Empty (the library default): jobs do not
	// survive a restart. The jobmanager command defaults to weir-data
	// under its working directory. With ha: etcd, etcd holds all of this
	// and DataDir is not used.
	DataDir string
	// HA selects high availability: Mode "none" (or "", the default) runs
	// one jobmanager with no external dependency; "etcd" makes several
	// jobmanagers campaign through etcd (see package ha).
	HA HAConfig
	// StoragePrices are the object store's request prices, from which the
	// jobmanager estimates what a job's checkpoints cost a month in
	// requests. Default DefaultStoragePrices.
	StoragePrices StoragePrices
}

// StoragePrices are an object store's request prices, per 1,000 requests
// of each kind, in Currency.
type StoragePrices struct {
	Currency               string
	Put, Get, List, Delete float64
}

// DefaultStoragePrices are S3 Standard's request prices in us-east-1 (PUT,
// COPY, POST and LIST $0.005, GET $0.0004 per 1,000; DELETE free). Set
// your store's.
var DefaultStoragePrices = StoragePrices{Currency: "USD", Put: 0.005, Get: 0.0004, List: 0.005, Delete: 0}

// HAConfig configures high availability.
type HAConfig struct {
	// Mode is "none" (default) or "etcd".
	Mode string
	// Endpoints are the etcd client URLs (ha: etcd).
	Endpoints []string
	// Prefix is the cluster prefix of every etcd key. Default "/weir".
	Prefix string
	// LeaseTTL bounds how long a dead leader blocks a takeover. Default 10s.
	LeaseTTL time.Duration
	// AdvertisedAddress is the RPC address other processes reach this
	// jobmanager at, published in etcd while it leads. Default: the bound
	// RPC address.
	AdvertisedAddress string
	// EtcdTLS is the etcd client's TLS material: etcd's CA and a client
	// certificate and key (all or none).
	EtcdTLS ha.TLSFiles
	// EtcdUser and EtcdPassword log in to etcd (etcd's own auth); the
	// password comes from WEIR_HA_ETCD_PASSWORD, never a file or flag.
	EtcdUser, EtcdPassword string
}

// etcd reports whether the HA mode is etcd.
func (h HAConfig) etcd() bool { return h.Mode == "etcd" }

// DefaultConfig returns the default configuration.
func DefaultConfig() Config {
	return Config{
		RPCAddress:        "127.0.0.1:6123",
		RESTAddress:       "127.0.0.1:8081",
		HeartbeatInterval: time.Second,
		HeartbeatTimeout:  10 * time.Second,
		SlotWaitTimeout:   30 * time.Second,
		CheckpointStorage: DefaultCheckpointStorage,
		AllowedPaths:      []string{os.TempDir()},
		JobRetention:      scheduler.DefaultJobRetention,
		MaxEndedJobs:      scheduler.DefaultMaxEndedJobs,
		HA:                HAConfig{Mode: "none", Prefix: "/weir", LeaseTTL: 10 * time.Second},
		StoragePrices:     DefaultStoragePrices,
	}
}

// Validate reports the first invalid setting, naming the field and the fix.
func (c *Config) Validate() error {
	if c.RPCAddress == "" {
		return errors.New("jobmanager config: RPCAddress is empty; set a host:port such as 127.0.0.1:6123")
	}
	if c.HeartbeatInterval <= 0 {
		return fmt.Errorf("jobmanager config: HeartbeatInterval %s must be positive", c.HeartbeatInterval)
	}
	if c.HeartbeatTimeout <= c.HeartbeatInterval {
		return fmt.Errorf("jobmanager config: HeartbeatTimeout %s must exceed HeartbeatInterval %s; use several intervals (default 10s vs 1s)",
			c.HeartbeatTimeout, c.HeartbeatInterval)
	}
	if c.SlotWaitTimeout <= 0 {
		return fmt.Errorf("jobmanager config: SlotWaitTimeout %s must be positive", c.SlotWaitTimeout)
	}
	if c.JobRetention < 0 || c.MaxEndedJobs < 0 {
		return fmt.Errorf("jobmanager config: JobRetention %s and MaxEndedJobs %d must not be negative (0 means the default)", c.JobRetention, c.MaxEndedJobs)
	}
	if !c.TLS.Enabled() {
		if err := security.RequireLoopback("jobmanager config: RPCAddress", c.RPCAddress); err != nil {
			return err
		}
		if c.RESTAddress != "" {
			if err := security.RequireLoopback("jobmanager config: RESTAddress", c.RESTAddress); err != nil {
				return err
			}
		}
	}
	if c.CheckpointStorage != "" && !strings.HasPrefix(c.CheckpointStorage, "file://") && !strings.HasPrefix(c.CheckpointStorage, "s3://") {
		return fmt.Errorf("jobmanager config: CheckpointStorage %q must be file:///absolute/path or s3://bucket/prefix", c.CheckpointStorage)
	}
	switch c.HA.Mode {
	case "", "none":
	case "etcd":
		if len(c.HA.Endpoints) == 0 {
			return errors.New("jobmanager config: ha mode etcd needs etcd endpoints; set ha.endpoints (for example http://127.0.0.1:2379)")
		}
		if c.HA.LeaseTTL != 0 && c.HA.LeaseTTL < time.Second {
			return fmt.Errorf("jobmanager config: ha lease TTL %s is below 1s", c.HA.LeaseTTL)
		}
	default:
		return fmt.Errorf("jobmanager config: ha mode %q is unknown; use none or etcd", c.HA.Mode)
	}
	if p := c.StoragePrices; p.Put < 0 || p.Get < 0 || p.List < 0 || p.Delete < 0 {
		return fmt.Errorf("jobmanager config: storage prices must not be negative (put %g, get %g, list %g, delete %g per 1,000 requests)", p.Put, p.Get, p.List, p.Delete)
	}
	if c.DefaultRestart.Type != "" {
		if err := failover.Validate(c.DefaultRestart, true); err != nil {
			return fmt.Errorf("jobmanager config: DefaultRestart: %w", err)
		}
	}
	return nil
}
