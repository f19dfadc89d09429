package jobmanager

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/weirstream/weir/blobstore"
	"github.com/weirstream/weir/blobstore/storeuri"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/failover"
	"github.com/weirstream/weir/jobmanager/scheduler"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/stream"
)

// checkpointStore is the part of *checkpoint.Storage the jobmanager uses.
// Safe for concurrent use.
type checkpointStore interface {
	WriteManifest(ctx context.Context, m *weirpb.Manifest) (key, sha256 string, err error)
	WritePointer(ctx context.Context, jobID string, p *weirpb.CompletedPointer) error
	ReadManifest(ctx context.Context, jobID string, id int64) (*weirpb.Manifest, error)
	DeleteCheckpoint(ctx context.Context, jobID string, id int64) error
}

var (
	_ checkpointStore           = (*checkpoint.Storage)(nil)
	_ scheduler.RestartStrategy = (failover.Strategy)(nil)
)

// openCheckpointStorage opens a job's checkpoint storage, counting its
// requests in counts.
func openCheckpointStorage(ctx context.Context, uri string, counts *blobstore.Counters) (checkpointStore, error) {
	store, err := storeuri.Open(ctx, uri)
	if err != nil {
		return nil, fmt.Errorf("checkpoint storage: %w", err)
	}
	return checkpoint.NewStorage(blobstore.Counting(store, counts)), nil
}

// newRestartStrategy validates a job's restart settings and returns its
// strategy; each job gets its own randomly seeded jitter.
func newRestartStrategy(cfg stream.RestartConfig, checkpointing bool) (scheduler.RestartStrategy, error) {
	return failover.New(cfg, checkpointing, rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())))
}

// readManifest reads checkpoint id's manifest and says where it lives.
func readManifest(ctx context.Context, st checkpointStore, jobID string, id int64) (*weirpb.Manifest, string, error) {
	m, err := st.ReadManifest(ctx, jobID, id)
	return m, checkpoint.ManifestKey(jobID, id), err
}

func isNotFound(err error) bool { return errors.Is(err, blobstore.ErrNotFound) }
