package jobmanager

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/weirstream/weir/blobstore"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/ha"
	"github.com/weirstream/weir/internal/errkind"
	"github.com/weirstream/weir/jobmanager/jobstore"
	"github.com/weirstream/weir/jobmanager/scheduler"
	"github.com/weirstream/weir/proto/weirpb"
)

// ErrLeadershipLost is returned by Run (ha: etcd) when this jobmanager
// stops leading: it stops acting at once, and the process is expected to
// exit and be restarted (by systemd or the harness) as a standby.
var ErrLeadershipLost = errors.New("jobmanager: leadership lost; exiting so that a restart campaigns again as a standby")

// haStatus is the job status kept in the job store (small, written
// rarely).
type haStatus struct {
	State      string `json:"state"` // "running" or a terminal state (weirpb.JobState's name)
	SlotWaitMs int64  `json:"slotWaitMs,omitempty"`
	// Error and EndMs, of an ended job, are shown after a restart.
	Error string `json:"error,omitempty"`
	EndMs int64  `json:"endMs,omitempty"`
	// RestoreJob and RestoreID name the other job's checkpoint the job
	// started from (submit --from), restored again until the job
	// completes a checkpoint of its own.
	RestoreJob string `json:"restoreJob,omitempty"`
	RestoreID  int64  `json:"restoreId,omitempty"`
	// RestoreSavepoint is the savepoint the job started from, restored
	// again likewise.
	RestoreSavepoint string `json:"restoreSavepoint,omitempty"`
}

// maxStoredError bounds the error text kept with an ended job.
const maxStoredError = 4 << 10

// haRetry is how long the jobmanager waits before retrying etcd.
const haRetry = 2 * time.Second

// haConnect connects to etcd, retrying with a clear log line until ctx ends.
func (jm *JobManager) haConnect(ctx context.Context) (*ha.Client, error) {
	cfg := ha.DefaultConfig()
	cfg.Endpoints = jm.cfg.HA.Endpoints
	if jm.cfg.HA.Prefix != "" {
		cfg.Prefix = jm.cfg.HA.Prefix
	}
	if jm.cfg.HA.LeaseTTL > 0 {
		cfg.LeaseTTL = jm.cfg.HA.LeaseTTL
	}
	cfg.TLS, cfg.Username, cfg.Password = jm.cfg.HA.EtcdTLS, jm.cfg.HA.EtcdUser, jm.cfg.HA.EtcdPassword
	cfg.Logger = jm.log
	return ha.ConnectRetrying(ctx, cfg, haRetry, func(err error) {
		jm.log.Error("cannot reach etcd; retrying (check ha.endpoints and that etcd runs)", "endpoints", cfg.Endpoints, "retry", haRetry, "error", err)
	})
}

// leaderStore returns the fenced store of the current leadership, or nil
// (ha: none, or not leading).
func (jm *JobManager) leaderStore() *ha.Store {
	if l := jm.lead.Load(); l != nil {
		return l.Store()
	}
	return nil
}

// jobStore returns where job graphs, statuses and completed-checkpoint
// pointers are kept: the leadership's etcd store (ha: etcd, nil while
// standing by), the data directory (ha: none with Config.DataDir), or nil
// (ha: none without a data directory: jobs do not survive a restart).
func (jm *JobManager) jobStore() jobstore.Store {
	if jm.cfg.HA.etcd() {
		if st := jm.leaderStore(); st != nil {
			return st
		}
		return nil
	}
	if jm.local != nil {
		return jm.local
	}
	return nil
}

// openLocalStore opens Config.DataDir (ha: none) and recovers the jobs it
// holds, as a new leader does from etcd.
func (jm *JobManager) openLocalStore(ctx context.Context) error {
	if jm.cfg.HA.etcd() || jm.cfg.DataDir == "" {
		return nil
	}
	d, err := jobstore.OpenDir(jm.cfg.DataDir, jm.log)
	if err != nil {
		return fmt.Errorf("jobmanager: data directory: %w", err)
	}
	term, err := d.NextTerm(ctx)
	if err == nil && term >= maxTerms {
		err = fmt.Errorf("jobmanager: leader term %d in %s exceeds %d, so execution attempts would overflow; stop every job, then delete %s/leader-term",
			term, jm.cfg.DataDir, maxTerms-1, jm.cfg.DataDir)
	}
	if err == nil {
		jm.attemptBase.Store(term << attemptTermShift)
		err = jm.recoverJobs(ctx, d)
	}
	if err != nil {
		d.Close()
		return err
	}
	jm.local = d
	jm.log.Info("job store opened", "dataDir", jm.cfg.DataDir, "term", term)
	return nil
}

// confirmLeading returns nil when this jobmanager may change checkpoint
// storage: in ha: none always, in ha: etcd only while etcd confirms its
// leadership (a fenced no-op transaction), so that a deposed leader never
// deletes the files of checkpoints its successor relies on.
func (jm *JobManager) confirmLeading(ctx context.Context, what string) error {
	if !jm.cfg.HA.etcd() {
		return nil
	}
	st := jm.leaderStore()
	if st == nil {
		return fmt.Errorf("%s: %w: this jobmanager does not lead", what, ha.ErrFenced)
	}
	return st.Confirm(ctx, what)
}

// epoch is the fencing epoch sent with every call to taskmanagers (0 in
// ha: none).
func (jm *JobManager) epoch() int64 {
	if l := jm.lead.Load(); l != nil {
		return l.Epoch()
	}
	return 0
}

// leading reports whether this jobmanager leads (always in ha: none) and
// the epoch of its leadership (0 in ha: none or while standing by).
func (jm *JobManager) leading() (bool, int64) {
	if !jm.cfg.HA.etcd() {
		return true, 0
	}
	l := jm.lead.Load()
	if l == nil {
		return false, 0
	}
	select {
	case <-l.Lost():
		return false, l.Epoch()
	default:
		return true, l.Epoch()
	}
}

// leaderAddress returns the current leader's advertised address as etcd
// knows it, or "" when unknown.
func (jm *JobManager) leaderAddress(ctx context.Context) string {
	if !jm.cfg.HA.etcd() {
		return jm.advertised()
	}
	c := jm.haClient.Load()
	if c == nil {
		return ""
	}
	lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	li, err := c.Leader(lctx)
	if err != nil {
		return ""
	}
	return li.Address
}

// advertised is the address this jobmanager campaigns with.
func (jm *JobManager) advertised() string {
	if a := jm.cfg.HA.AdvertisedAddress; a != "" {
		return a
	}
	return jm.RPCAddr()
}

// LeaderMetadataKey is the gRPC trailer (and header) that a standby sets
// to the leader's address when it refuses a call, so that clients can
// follow it.
const LeaderMetadataKey = weirpb.LeaderMetadataKey

// standbyInterceptor refuses every RPC while this jobmanager is a standby
// (ha: etcd), naming the leader so that clients can follow.
func (jm *JobManager) standbyInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if !jm.cfg.HA.etcd() || jm.lead.Load() != nil {
		return handler(ctx, req)
	}
	leader := jm.leaderAddress(ctx)
	if leader != "" {
		_ = grpc.SetTrailer(ctx, metadata.Pairs(LeaderMetadataKey, leader))
	} else {
		leader = "unknown"
	}
	return nil, status.Errorf(codes.Unavailable, "not the leader; the leader is %s", leader)
}

// campaign blocks until this jobmanager leads, then recovers the jobs
// stored in etcd.
func (jm *JobManager) campaign(ctx context.Context) (*ha.Leadership, error) {
	c, err := jm.haConnect(ctx)
	if err != nil {
		return nil, err
	}
	jm.haClient.Store(c)
	addr := jm.advertised()
	jm.log.Info("campaigning for leadership (standby until elected)", "id", jm.id, "address", addr)
	l, err := c.Campaign(ctx, jm.id, addr)
	if err != nil {
		return nil, fmt.Errorf("jobmanager: campaign: %w", err)
	}
	term, err := l.Store().NextTerm(ctx)
	if err != nil {
		return nil, fmt.Errorf("jobmanager: allocating a leader term in etcd: %w", err)
	}
	if term >= maxTerms {
		return nil, fmt.Errorf("jobmanager: leader term %d in etcd (key %s/leader-term) exceeds %d, so execution attempts would overflow; "+
			"stop every job, then delete that key (or use a new ha.prefix)", term, jm.cfg.HA.Prefix, maxTerms-1)
	}
	jm.attemptBase.Store(term << attemptTermShift)
	jm.log.Info("elected leader", "id", jm.id, "epoch", l.Epoch(), "term", term)
	if err := jm.recoverJobs(ctx, l.Store()); err != nil {
		return nil, err
	}
	jm.lead.Store(l)
	return l, nil
}

// recoverJobs resubmits every running job in the store, restoring its
// latest completed checkpoint.
func (jm *JobManager) recoverJobs(ctx context.Context, st jobstore.Store) error {
	recs, err := st.ListJobs(ctx)
	if err != nil {
		return fmt.Errorf("jobmanager: listing the stored jobs: %w", err)
	}
	for _, rec := range recs {
		var s haStatus
		if err := json.Unmarshal(rec.Status, &s); err != nil {
			jm.log.Error("cannot decode a stored job status; skipping the job", "job", rec.ID, "error", err)
			continue
		}
		ended, isEnded := weirpb.JobState_value[s.State]
		if s.State != "running" && !isEnded {
			jm.log.Error("a stored job has an unknown status; skipping it", "job", rec.ID, "state", s.State)
			continue
		}
		var pg weirpb.JobGraph
		if err := proto.Unmarshal(rec.Graph, &pg); err != nil {
			jm.log.Error("cannot decode a stored job graph; skipping the job", "job", rec.ID, "error", err)
			continue
		}
		opts, g, err := jm.prepare(ctx, rec.ID, &pg, time.Duration(s.SlotWaitMs)*time.Millisecond)
		if err != nil {
			jm.log.Error("cannot recover a stored job; skipping it", "job", rec.ID, "error", err)
			continue
		}
		if isEnded { // listed as it ended, until the retention forgets it
			jm.step(func(c *scheduler.Scheduler, now time.Time) []scheduler.Action {
				err = c.AddEnded(rec.ID, g, opts, scheduler.JobState(ended), s.Error, time.UnixMilli(s.EndMs), now)
				return nil
			})
			if err != nil {
				jm.log.Error("cannot list a stored ended job", "job", rec.ID, "error", err)
			}
			continue
		}
		opts.FirstCheckpointID = rec.LastCheckpointID + 1
		if rec.Latest == nil && s.RestoreJob != "" {
			// Started from another job's checkpoint and has none of its
			// own yet: that one is restored again.
			var m *weirpb.Manifest
			switch st := jm.storage(rec.ID); {
			case s.RestoreSavepoint != "":
				m, err = readSavepoint(ctx, s.RestoreSavepoint)
			case st != nil:
				m, err = st.ReadManifest(ctx, s.RestoreJob, s.RestoreID)
			default:
				err = fmt.Errorf("no checkpoint storage")
			}
			if err != nil {
				jm.log.Error("cannot recover a job: the checkpoint it started from cannot be read; the job stays stopped until the next start",
					"job", rec.ID, "from", fmt.Sprintf("%s@%d", s.RestoreJob, s.RestoreID), "error", err)
				continue
			}
			opts.Restore, opts.RestoreForeign = completed{m: m, storage: s.RestoreSavepoint}, true
			opts.FirstCheckpointID = max(opts.FirstCheckpointID, m.GetCheckpointId()+1)
		}
		if rec.Latest != nil {
			m, err := readVerifiedManifest(ctx, jm.storage(rec.ID), rec.ID, *rec.Latest)
			if errors.Is(err, checkpoint.ErrCorrupt) {
				// No fallback to an older retained checkpoint: its 2PC
				// sinks may already have committed the latest one, so
				// restoring an older state would duplicate output. The
				// job is listed FAILED, naming the object, and its
				// final state stored, so that it is not recovered again.
				cause := fmt.Sprintf("recovery: checkpoint %d does not verify, so the job cannot be restored from it: %v; "+
					"resubmit the job from an older retained checkpoint (weir submit --from) or repair the object", rec.Latest.ID, err)
				jm.step(func(c *scheduler.Scheduler, now time.Time) []scheduler.Action {
					err = c.AddEnded(rec.ID, g, opts, scheduler.JobFailed, cause, now, now)
					return nil
				})
				if err != nil {
					jm.log.Error("cannot list a job whose checkpoint does not verify", "job", rec.ID, "error", err)
				}
				continue
			}
			if err != nil {
				// Storage unreachable, for one: the job stays "running"
				// in the store and is recovered at the next start.
				jm.log.Error("cannot recover a job: its latest checkpoint cannot be read; the job stays stopped until the next start", "job", rec.ID, "error", err)
				continue
			}
			opts.Restore, opts.RestoreRetained = completed{m: m}, rec.Latest.RetainedIDs()
			opts.FirstCheckpointID = max(opts.FirstCheckpointID, rec.Latest.ID+1)
		}
		jm.step(func(c *scheduler.Scheduler, now time.Time) []scheduler.Action {
			var acts []scheduler.Action
			acts, err = c.Submit(rec.ID, g, opts, now)
			return acts
		})
		if err != nil {
			jm.log.Error("cannot recover a stored job", "job", rec.ID, "error", err)
			continue
		}
		jm.log.Info("recovered a stored job", "job", rec.ID, "checkpoint", checkpointIDOf(opts.Restore), "firstCheckpointID", opts.FirstCheckpointID)
	}
	return nil
}

// haRecordSubmit stores a submitted job in the job store.
func (jm *JobManager) haRecordSubmit(ctx context.Context, id string, pg *weirpb.JobGraph, opts scheduler.JobOptions) error {
	st := jm.jobStore()
	if st == nil {
		return nil
	}
	graph, err := proto.Marshal(pg)
	if err != nil {
		return err
	}
	hs := haStatus{State: "running", SlotWaitMs: opts.SlotWait.Milliseconds()}
	if m := manifestOf(opts.Restore); m != nil && opts.RestoreForeign {
		hs.RestoreJob, hs.RestoreID = m.GetJobId(), m.GetCheckpointId()
		if c, ok := opts.Restore.(completed); ok {
			hs.RestoreSavepoint = c.storage
		}
	}
	status, _ := json.Marshal(hs)
	return st.PutJob(ctx, id, graph, status)
}

// haPublishTerminal records jobs that reached a terminal state, so that a
// later leader does not recover them.
func (jm *JobManager) haPublishTerminal(ctx context.Context, done map[string]bool) {
	st := jm.jobStore()
	if st == nil {
		return
	}
	jm.mu.Lock()
	views := jm.mu.core.Jobs()
	jm.mu.Unlock()
	known := make(map[string]bool, len(views))
	for _, v := range views {
		known[v.ID] = true
	}
	for id := range done { // forgotten jobs (forgetJob recorded their state)
		if !known[id] {
			delete(done, id)
		}
	}
	for _, v := range views {
		if !v.State.Terminal() || done[v.ID] {
			continue
		}
		msg := v.Err
		if len(msg) > maxStoredError {
			msg = msg[:maxStoredError]
		}
		b, _ := json.Marshal(haStatus{State: fmt.Sprint(protoJobState(v.State)), Error: msg, EndMs: v.End.UnixMilli()})
		if err := st.PutJobStatus(ctx, v.ID, b); err != nil {
			jm.log.Warn("recording a job's final state in etcd failed", "job", v.ID, "error", err)
			continue
		}
		done[v.ID] = true
	}
}

// haReserve reserves checkpoint id in etcd's counter before the checkpoint
// is triggered and again before its manifest is written, so that a later
// leader never reuses the id (its checkpoints start above the counter, and
// a fenced leader's snapshots, manifests and deletions of aborted
// checkpoints never touch the new leader's) and a fenced leader neither
// triggers nor completes a checkpoint. Reservations are cached per job.
func (jm *JobManager) haReserve(ctx context.Context, jobID string, id int64) error {
	st := jm.jobStore()
	if st == nil {
		return nil
	}
	jm.reserved.Lock()
	done := jm.reserved.m[jobID] >= id
	jm.reserved.Unlock()
	if done {
		return nil
	}
	for {
		n, err := st.NextCheckpointID(ctx, jobID)
		if err != nil {
			return fmt.Errorf("reserving checkpoint id %d in the job store: %w", id, err)
		}
		if n >= id {
			jm.reserved.Lock()
			jm.reserved.m[jobID] = max(jm.reserved.m[jobID], n)
			jm.reserved.Unlock()
			return nil
		}
	}
}

// Execution attempts of a leadership start at term<<attemptTermShift, so
// each leadership has 65535 (re)deployments per job before it would reach
// the next term's range, and there are maxTerms terms before an attempt
// reaches 2^31, where the file sink's transaction ids (attempt<<32) would
// overflow.
const (
	attemptTermShift = 16 // stream.AttemptsPerTerm == 1 << attemptTermShift
	maxTerms         = 1 << (31 - attemptTermShift)
)

// rawStore is the optional capability of a checkpoint store to read an
// object's bytes (the real checkpoint.Storage has it).
type rawStore interface {
	Store() blobstore.Store
}

// readVerifiedManifest reads the manifest that an etcd pointer names and
// checks its SHA-256 against the pointer's; a mismatch gives an error
// wrapping checkpoint.ErrCorrupt.
func readVerifiedManifest(ctx context.Context, st checkpointStore, jobID string, p ha.Pointer) (*weirpb.Manifest, error) {
	if st == nil {
		return nil, fmt.Errorf("job %s: no checkpoint storage to read checkpoint %d from", jobID, p.ID)
	}
	if rs, ok := st.(rawStore); ok && p.ManifestSHA256 != "" {
		data, err := rs.Store().Get(ctx, p.ManifestKey)
		if err != nil {
			return nil, fmt.Errorf("job %s: checkpoint %d: reading manifest %s: %w", jobID, p.ID, p.ManifestKey, err)
		}
		sum := sha256.Sum256(data)
		if got := hex.EncodeToString(sum[:]); got != p.ManifestSHA256 {
			return nil, errkind.Mark(fmt.Errorf("job %s: checkpoint %d: manifest %s: checksum mismatch (etcd pointer says sha256 %s, storage has %s); "+
				"the manifest was modified or truncated after it was written: restore the object from a backup, or cancel the job and resubmit it",
				jobID, p.ID, p.ManifestKey, p.ManifestSHA256, got), checkpoint.ErrCorrupt)
		}
	}
	m, err := st.ReadManifest(ctx, jobID, p.ID)
	if err != nil {
		return nil, fmt.Errorf("job %s: reading the manifest of checkpoint %d (%s): %w", jobID, p.ID, p.ManifestKey, err)
	}
	return m, nil
}
