package jobmanager

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/weirstream/weir/ha"
	"github.com/weirstream/weir/proto/weirpb"
)

// ErrLeadershipLost is returned by Run (ha: etcd) when this jobmanager
// stops leading: it stops acting at once, and the process is expected to
// exit and be restarted (by systemd or the harness) as a standby.
var ErrLeadershipLost = errors.New("jobmanager: leadership lost; exiting so that a restart campaigns again as a standby")

// haStatus is the job status stored in etcd (small, written rarely).
type haStatus struct {
	State      string `json:"state"` // "running" or a terminal state
	SlotWaitMs int64  `json:"slotWaitMs,omitempty"`
}

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
	cfg.Logger = jm.log
	for {
		c, err := ha.Connect(ctx, cfg)
		if err == nil {
			return c, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		jm.log.Error("cannot reach etcd; retrying (check ha.endpoints and that etcd runs)", "endpoints", cfg.Endpoints, "retry", haRetry, "error", err)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(haRetry):
		}
	}
}

// leaderStore returns the fenced store of the current leadership, or nil
// (ha: none, or not leading).
func (jm *JobManager) leaderStore() *ha.Store {
	if l := jm.lead.Load(); l != nil {
		return l.Store()
	}
	return nil
}

// epoch is the fencing epoch sent with every call to taskmanagers (0 in
// ha: none).
func (jm *JobManager) epoch() int64 {
	if l := jm.lead.Load(); l != nil {
		return l.Epoch()
	}
	return 0
}

// standbyInterceptor refuses every RPC while this jobmanager is a standby
// (ha: etcd), naming the leader so that clients can follow.
func (jm *JobManager) standbyInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if !jm.cfg.HA.etcd() || jm.lead.Load() != nil {
		return handler(ctx, req)
	}
	leader := "unknown"
	if c := jm.haClient.Load(); c != nil {
		lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if li, err := c.Leader(lctx); err == nil {
			leader = li.Address
		}
		cancel()
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
	addr := jm.cfg.HA.AdvertisedAddress
	if addr == "" {
		addr = jm.RPCAddr()
	}
	jm.log.Info("campaigning for leadership (standby until elected)", "id", jm.id, "address", addr)
	l, err := c.Campaign(ctx, jm.id, addr)
	if err != nil {
		return nil, fmt.Errorf("jobmanager: campaign: %w", err)
	}
	jm.log.Info("elected leader", "id", jm.id, "epoch", l.Epoch())
	if err := jm.recoverJobs(ctx, l.Store()); err != nil {
		return nil, err
	}
	jm.lead.Store(l)
	return l, nil
}

// recoverJobs resubmits every running job in the store, restoring its
// latest completed checkpoint.
func (jm *JobManager) recoverJobs(ctx context.Context, st *ha.Store) error {
	recs, err := st.ListJobs(ctx)
	if err != nil {
		return fmt.Errorf("jobmanager: listing jobs in etcd: %w", err)
	}
	for _, rec := range recs {
		var s haStatus
		if err := json.Unmarshal(rec.Status, &s); err != nil || s.State != "running" {
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
		opts.FirstCheckpointID = rec.LastCheckpointID + 1
		if rec.Latest != nil {
			m, err := jm.storage(rec.ID).ReadManifest(ctx, rec.ID, rec.Latest.ID)
			if err != nil {
				return fmt.Errorf("jobmanager: job %s: reading the manifest of checkpoint %d (%s): %w", rec.ID, rec.Latest.ID, rec.Latest.ManifestKey, err)
			}
			opts.Restore = m
			opts.FirstCheckpointID = max(opts.FirstCheckpointID, rec.Latest.ID+1)
		}
		jm.step(func(c *core, now time.Time) []action {
			var acts []action
			acts, err = c.submit(rec.ID, g, opts, now)
			return acts
		})
		if err != nil {
			jm.log.Error("cannot recover a stored job", "job", rec.ID, "error", err)
			continue
		}
		jm.log.Info("recovered job after takeover", "job", rec.ID, "checkpoint", opts.Restore.GetCheckpointId(), "firstCheckpointID", opts.FirstCheckpointID)
	}
	return nil
}

// haRecordSubmit stores a submitted job in etcd (ha: etcd).
func (jm *JobManager) haRecordSubmit(ctx context.Context, id string, pg *weirpb.JobGraph, slotWait time.Duration) error {
	st := jm.leaderStore()
	if st == nil {
		return nil
	}
	graph, err := proto.Marshal(pg)
	if err != nil {
		return err
	}
	status, _ := json.Marshal(haStatus{State: "running", SlotWaitMs: slotWait.Milliseconds()})
	return st.PutJob(ctx, id, graph, status)
}

// haPublishTerminal records jobs that reached a terminal state, so that a
// later leader does not recover them.
func (jm *JobManager) haPublishTerminal(ctx context.Context, done map[string]bool) {
	st := jm.leaderStore()
	if st == nil {
		return
	}
	jm.mu.Lock()
	views := jm.mu.core.jobViews()
	jm.mu.Unlock()
	for _, v := range views {
		if !v.State.terminal() || done[v.ID] {
			continue
		}
		b, _ := json.Marshal(haStatus{State: fmt.Sprint(protoJobState(v.State))})
		if err := st.PutJobStatus(ctx, v.ID, b); err != nil {
			jm.log.Warn("recording a job's final state in etcd failed", "job", v.ID, "error", err)
			continue
		}
		done[v.ID] = true
	}
}

// haWritePointer reserves the checkpoint id in etcd's counter (so that a
// later leader never reuses it, and a fenced leader writes no manifest),
// or, after the manifest is written, moves the latest pointer.
func (jm *JobManager) haReserve(ctx context.Context, jobID string, id int64) error {
	st := jm.leaderStore()
	if st == nil {
		return nil
	}
	for {
		n, err := st.NextCheckpointID(ctx, jobID)
		if err != nil {
			return fmt.Errorf("reserving checkpoint id %d in etcd: %w", id, err)
		}
		if n >= id {
			return nil
		}
	}
}
