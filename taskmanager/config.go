package taskmanager

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/dataflow"
	"github.com/weirstream/weir/dataflow/batchcodec"
	"github.com/weirstream/weir/ha"
	"github.com/weirstream/weir/security"
)

// MaxStateInlineBytes bounds Config.StateInlineBytes: inline snapshots
// make every acknowledgement and manifest larger.
const MaxStateInlineBytes = 64 << 10

// Config configures a TaskManager.
type Config struct {
	// ID names the taskmanager in the cluster. Default: host-pid.
	ID string
	// JobManagerAddress is the jobmanager's gRPC address (host:port).
	// Default "127.0.0.1:6123".
	JobManagerAddress string
	// RPCAddress is where this taskmanager listens for the jobmanager and for
	// other taskmanagers' data (host:port; port 0 picks one).
	// Default "127.0.0.1:0".
	RPCAddress string
	// AdvertiseAddress is the address others use to reach RPCAddress.
	// Default: the bound listen address.
	AdvertiseAddress string
	// ExchangeAddress is where this taskmanager listens for other
	// taskmanagers' data (host:port; port 0 picks one): a server of its
	// own, whose messages may be large, while RPCAddress takes only small
	// control messages. Default: RPCAddress's host, port 0.
	ExchangeAddress string
	// ExchangeAdvertiseAddress is the address other taskmanagers send data
	// to. Default: AdvertiseAddress's host with the exchange's port, or the
	// bound exchange address.
	ExchangeAdvertiseAddress string
	// Slots is the number of task slots offered. Default 2.
	Slots int
	// CreditsPerChannel is the number of batches a receiver buffers per
	// input channel (credit-based flow control). Default
	// dataflow.DefaultCreditsPerChannel (8).
	CreditsPerChannel int
	// ExchangeMemoryBytes is the network memory of the data exchange: the
	// bytes of batches from other taskmanagers that may wait in this
	// taskmanager's input buffers before credits are kept back
	// (dataflow.ExchangeConfig.MemoryBytes). Default 64 MiB.
	ExchangeMemoryBytes int64
	// ChannelBytes bounds the bytes of batches in flight on each channel a
	// task sends on (dataflow.ExchangeConfig.ChannelBytes); 0: no fixed
	// bound (the default).
	ChannelBytes int64
	// DebloatTarget sizes each output channel's byte budget to what its
	// consumer takes in that time (buffer debloating,
	// dataflow.ExchangeConfig.DebloatTarget), so that under backpressure an
	// aligned checkpoint's barrier waits behind about this much; 0: off.
	// Default DefaultDebloatTarget.
	DebloatTarget time.Duration
	// StateInlineBytes is the size up to which a task's snapshot travels
	// inside its handle (in the acknowledgement and the manifest) instead
	// of as an object of its own in checkpoint storage; 0 writes every
	// snapshot as an object. Default checkpoint.DefaultInlineThreshold
	// (4 KiB), at most MaxStateInlineBytes.
	StateInlineBytes int
	// ExchangeCompression compresses the batches sent to other
	// taskmanagers: "none" (default) or "zstd"
	// (dataflow.ExchangeConfig.Compression).
	ExchangeCompression string
	// ExchangeCoalesceRows is the rows up to which a channel to another
	// taskmanager gathers the batches its task sends before it sends
	// them as one (dataflow.ExchangeConfig.CoalesceRows); 0: off. Default
	// dataflow.DefaultCoalesceRows.
	ExchangeCoalesceRows int
	// ExchangeDictionaryBytes is the size of the string dictionary each
	// channel to another taskmanager keeps across batches, at each end
	// (dataflow.ExchangeConfig.DictionaryBytes); 0: off. Default
	// dataflow.DefaultDictionaryBytes.
	ExchangeDictionaryBytes int
	// ExchangeCoalesceTimeout bounds the time such a channel holds
	// batches while its task stays busy (it sends them anyway before the
	// task waits for input). Default dataflow.DefaultCoalesceTimeout.
	ExchangeCoalesceTimeout time.Duration
	// MetricsAddress is where Prometheus metrics are served at /metrics
	// (host:port); empty disables them. Default empty.
	MetricsAddress string
	// RegisterRetry is the pause between attempts to reach the jobmanager.
	// Default 1s.
	RegisterRetry time.Duration
	// StateDir holds the local state of this taskmanager's tasks (one
	// subdirectory per job, in it one per subtask run here); it is created
	// private (0700). It holds at most backends.LocalSnapshotsKept local
	// snapshots per operator of a subtask running here (one more while a
	// checkpoint is taken); the directory of a subtask no longer running
	// here goes once a checkpoint newer than its local snapshots
	// completed, a job's once the job ended. Default: a new private
	// directory under os.TempDir(), removed when Run returns.
	StateDir string
	// AllowedPaths are the directories tasks may read and write files
	// under (file sources and sinks): a task whose paths lead elsewhere
	// fails at open, even if the jobmanager allowed them. Default: the
	// system's temporary directory.
	AllowedPaths []string
	// TLS is the taskmanager's TLS material (its certificate names its ID
	// with the taskmanager role): with it every connection — to the
	// jobmanager, from it, and between taskmanagers — is mutual TLS and
	// every call is authorized (package security); without it the RPC and
	// metrics addresses must be loopback addresses.
	TLS security.TLSConfig
	// HA selects how the jobmanager is found: mode "none" (default) uses
	// JobManagerAddress; "etcd" reads the leading jobmanager's address from
	// etcd (it never campaigns) and follows leader changes.
	HA HAConfig
	// StateCacheBytes is the memory in bytes for the caches of keyed state
	// on this taskmanager. Half is one Pebble block cache that every Pebble
	// backend of the taskmanager shares; the other half is divided evenly
	// among the slots, each slot's share going a quarter to its backends'
	// timer index and the rest to their write-back value cache (the heap
	// backend keeps all state in memory and ignores it). Default 0: a
	// shared block cache of 64 MiB per slot, and every Pebble backend's
	// value cache and timer index at the pebblestate defaults (64 MiB and
	// 8 MiB).
	StateCacheBytes int64
	// CheckpointAckDelay is how long, at most, a task's checkpoint
	// acknowledgement waits to be sent with those of the job's other tasks
	// here: the acknowledgements (and declines) of one checkpoint go to
	// the jobmanager in one call as soon as every task of the job on this
	// taskmanager has reported, or this long after the first unsent one,
	// whichever comes first; a decline goes at once. 0 sends each report
	// at once; at most 10s. Default 50ms (DefaultCheckpointAckDelay).
	CheckpointAckDelay time.Duration
	// GCHeapFloorBytes lets the Go heap grow to this many bytes before a
	// garbage collection runs, however little of it is live (package
	// internal/gctune): a taskmanager streaming batches over small state
	// otherwise collects dozens of times a second. Above the floor GOGC
	// paces as usual. The floor is process-wide (the largest of the
	// taskmanagers in one process applies), GOGC in the environment turns
	// it off, and GOMEMLIMIT still bounds the heap. 0: the Go runtime's
	// default. At most 1 TiB. Default 64 MiB (DefaultGCHeapFloorBytes).
	GCHeapFloorBytes int64
	// CPUCores is the number of CPUs the taskmanager's Go runtime runs
	// goroutines on at once (GOMAXPROCS): the cores its slots share, like
	// Flink's taskmanager.cpu.cores. 0: the runtime's default, the CPUs
	// the process may use (its CPU affinity and its container's CPU
	// limit). Set it to each one's share when several taskmanagers share a
	// machine without containers: otherwise each schedules for every core,
	// together they run more busy threads than there are cores, and the
	// operating system's switching between them and the caches they evict
	// cost CPU (about a fifth more an event on the network exchange
	// benchmark, two taskmanagers on two cores). `weir local` does so. It
	// is process-wide: the last taskmanager started in a process sets it.
	// At most 4096.
	CPUCores int
	Logger   *slog.Logger
}

// maxCPUCores bounds Config.CPUCores.
const maxCPUCores = 4096

// DefaultGCHeapFloorBytes is the default Config.GCHeapFloorBytes: a small
// part of what a taskmanager's state caches and network buffers take, and
// enough to cut collections several times over when little is live.
const DefaultGCHeapFloorBytes = 64 << 20

// maxGCHeapFloorBytes bounds Config.GCHeapFloorBytes.
const maxGCHeapFloorBytes = 1 << 40

// HAConfig is the taskmanager's side of high availability; the keys are
// those of the jobmanager's ha: block.
type HAConfig struct {
	// Mode is "none" (or empty) or "etcd".
	Mode string
	// Endpoints are the etcd client URLs or host:port pairs (ha: etcd).
	Endpoints []string
	// Prefix is the cluster's etcd key prefix. Default "/weir".
	Prefix string
	// EtcdTLS is the etcd client's TLS material: etcd's CA and a client
	// certificate and key (all or none).
	EtcdTLS ha.TLSFiles
	// EtcdUser and EtcdPassword log in to etcd (etcd's own auth); the
	// password comes from WEIR_HA_ETCD_PASSWORD, never a file or flag.
	EtcdUser, EtcdPassword string
}

func (h HAConfig) etcd() bool { return h.Mode == "etcd" }

// minStateCachePerSlot is the smallest per-slot share of StateCacheBytes:
// below it Pebble's block cache cannot hold even its index blocks.
const minStateCachePerSlot = 256 << 10

// DefaultConfig returns the defaults documented on Config.
func DefaultConfig() Config {
	host, _ := os.Hostname()
	if host == "" {
		host = "taskmanager"
	}
	return Config{
		ID:                      fmt.Sprintf("%s-%d", host, os.Getpid()),
		JobManagerAddress:       "127.0.0.1:6123",
		RPCAddress:              "127.0.0.1:0",
		Slots:                   2,
		CreditsPerChannel:       dataflow.DefaultCreditsPerChannel,
		ExchangeMemoryBytes:     dataflow.DefaultMemoryBytes,
		DebloatTarget:           DefaultDebloatTarget,
		ExchangeCompression:     dataflow.CompressionNone,
		ExchangeCoalesceRows:    dataflow.DefaultCoalesceRows,
		ExchangeCoalesceTimeout: dataflow.DefaultCoalesceTimeout,
		ExchangeDictionaryBytes: dataflow.DefaultDictionaryBytes,
		StateInlineBytes:        checkpoint.DefaultInlineThreshold,
		RegisterRetry:           time.Second,
		AllowedPaths:            []string{os.TempDir()},
		CheckpointAckDelay:      DefaultCheckpointAckDelay,
		GCHeapFloorBytes:        DefaultGCHeapFloorBytes,
		HA:                      HAConfig{Mode: "none", Prefix: "/weir"},
	}
}

// MaxExchangeCoalesceRows bounds Config.ExchangeCoalesceRows.
const MaxExchangeCoalesceRows = 1 << 20

// DefaultDebloatTarget is the default Config.DebloatTarget: without
// backpressure far more than a channel ever holds, so it costs nothing;
// under backpressure it bounds what an aligned barrier waits behind to
// about a second of the consumer's work.
const DefaultDebloatTarget = time.Second

// Validate reports the first invalid setting.
func (c *Config) Validate() error {
	if c.ID == "" {
		return errors.New("taskmanager config: id is empty")
	}
	if _, _, err := net.SplitHostPort(c.JobManagerAddress); err != nil {
		return fmt.Errorf("taskmanager config: jobmanager address %q: %v (want host:port)", c.JobManagerAddress, err)
	}
	if _, _, err := net.SplitHostPort(c.RPCAddress); err != nil {
		return fmt.Errorf("taskmanager config: rpc address %q: %v (want host:port)", c.RPCAddress, err)
	}
	if !c.TLS.Enabled() {
		if err := security.RequireLoopback("taskmanager config: rpc address", c.RPCAddress); err != nil {
			return err
		}
		if c.ExchangeAddress != "" {
			if err := security.RequireLoopback("taskmanager config: exchange address", c.ExchangeAddress); err != nil {
				return err
			}
		}
		if c.MetricsAddress != "" {
			if err := security.RequireLoopback("taskmanager config: metrics address", c.MetricsAddress); err != nil {
				return err
			}
		}
	}
	if c.Slots < 1 {
		return fmt.Errorf("taskmanager config: slots %d: must be at least 1", c.Slots)
	}
	if c.StateInlineBytes < 0 || c.StateInlineBytes > MaxStateInlineBytes {
		return fmt.Errorf("taskmanager config: state inline bytes %d: must be between 0 and %d (default %d)", c.StateInlineBytes, MaxStateInlineBytes, checkpoint.DefaultInlineThreshold)
	}
	switch c.ExchangeCompression {
	case "", dataflow.CompressionNone, dataflow.CompressionZstd:
	default:
		return fmt.Errorf("taskmanager config: exchange compression %q: use %q or %q", c.ExchangeCompression, dataflow.CompressionNone, dataflow.CompressionZstd)
	}
	if c.ExchangeCoalesceRows < 0 || c.ExchangeCoalesceRows > MaxExchangeCoalesceRows {
		return fmt.Errorf("taskmanager config: exchange coalesce rows %d: must be between 0 (off) and %d (default %d)", c.ExchangeCoalesceRows, MaxExchangeCoalesceRows, dataflow.DefaultCoalesceRows)
	}
	if c.ExchangeDictionaryBytes < 0 || c.ExchangeDictionaryBytes > batchcodec.MaxDictBytes {
		return fmt.Errorf("taskmanager config: exchange dictionary bytes %d: must be between 0 (off) and %d (default %d)", c.ExchangeDictionaryBytes, batchcodec.MaxDictBytes, dataflow.DefaultDictionaryBytes)
	}
	if c.ExchangeCoalesceTimeout <= 0 || c.ExchangeCoalesceTimeout > time.Minute {
		return fmt.Errorf("taskmanager config: exchange coalesce timeout %v: must be above 0 and at most 1m (default %v)", c.ExchangeCoalesceTimeout, dataflow.DefaultCoalesceTimeout)
	}
	if c.ExchangeMemoryBytes < 1<<20 {
		return fmt.Errorf("taskmanager config: exchange memory %d bytes: must be at least 1 MiB (default %d)", c.ExchangeMemoryBytes, dataflow.DefaultMemoryBytes)
	}
	if c.ChannelBytes < 0 {
		return fmt.Errorf("taskmanager config: channel bytes %d: must not be negative (0: no fixed bound)", c.ChannelBytes)
	}
	if c.DebloatTarget < 0 {
		return fmt.Errorf("taskmanager config: network debloat target %v: must not be negative (0: off; default %v)", c.DebloatTarget, DefaultDebloatTarget)
	}
	if c.CreditsPerChannel < 1 {
		return fmt.Errorf("taskmanager config: credits per channel %d: must be at least 1", c.CreditsPerChannel)
	}
	switch c.HA.Mode {
	case "", "none":
	case "etcd":
		if len(c.HA.Endpoints) == 0 {
			return errors.New("taskmanager config: ha mode etcd without endpoints; set --ha-etcd-endpoints (ha.endpoints) to the etcd client URLs")
		}
	default:
		return fmt.Errorf("taskmanager config: ha mode %q: want none or etcd", c.HA.Mode)
	}
	if c.StateCacheBytes < 0 {
		return fmt.Errorf("taskmanager config: state cache bytes %d: must be 0 (backend defaults) or positive", c.StateCacheBytes)
	}
	if c.StateCacheBytes > 0 && c.StateCacheBytes/int64(c.Slots) < minStateCachePerSlot {
		return fmt.Errorf("taskmanager config: state cache bytes %d: %d bytes per slot (%d slots) is below the minimum of %d; give at least %d bytes or use fewer slots",
			c.StateCacheBytes, c.StateCacheBytes/int64(c.Slots), c.Slots, minStateCachePerSlot, minStateCachePerSlot*int64(c.Slots))
	}
	if c.GCHeapFloorBytes < 0 || c.GCHeapFloorBytes > maxGCHeapFloorBytes {
		return fmt.Errorf("taskmanager config: gc heap floor bytes %d: must be between 0 (the Go runtime's default) and %d (default %d)",
			c.GCHeapFloorBytes, int64(maxGCHeapFloorBytes), int64(DefaultGCHeapFloorBytes))
	}
	if c.CPUCores < 0 || c.CPUCores > maxCPUCores {
		return fmt.Errorf("taskmanager config: cpu cores %d: must be between 0 (the CPUs the process may use) and %d", c.CPUCores, maxCPUCores)
	}
	if c.CheckpointAckDelay < 0 || c.CheckpointAckDelay > maxCheckpointAckDelay {
		return fmt.Errorf("taskmanager config: checkpoint ack delay %v: must be between 0 (no batching by time) and %v (default %v)",
			c.CheckpointAckDelay, maxCheckpointAckDelay, DefaultCheckpointAckDelay)
	}
	if c.RegisterRetry <= 0 {
		return fmt.Errorf("taskmanager config: register retry %v: must be positive", c.RegisterRetry)
	}
	return nil
}
