package ha

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/weirstream/weir/jobmanager/jobstore"
)

// MaxValueSize is the largest graph or status value the Store accepts.
const MaxValueSize = jobstore.MaxValueSize

// maxCASAttempts bounds the read-compare-write retries of the counter and
// the checkpoint pointer when another writer of the same leader interferes.
const maxCASAttempts = 16

// Pointer names the latest completed checkpoint of a job.
type Pointer = jobstore.Pointer

// JobRecord is one job's metadata as stored in etcd.
type JobRecord = jobstore.JobRecord

var _ jobstore.Store = (*Store)(nil)

// Store is the leader's metadata in etcd, the jobstore.Store of an HA
// jobmanager, under <prefix>/jobs/<id>/:
//
//	graph            the job graph (opaque bytes, or a pointer into checkpoint storage)
//	status           the job status (opaque bytes)
//	checkpoints/latest  the latest completed checkpoint (a Pointer)
//	checkpoint-id    the last allocated checkpoint id (decimal)
//
// Every write is one etcd transaction conditioned on the leader key still
// having the leadership's epoch as its create revision. A write of a
// leadership that has ended is refused with an error wrapping ErrFenced
// (nothing was written), counted (FencedWrites), logged, and ends the
// leadership (Lost closes). A write in flight when the leadership ends
// returns an error wrapping ErrLeadershipLost: it may or may not have been
// applied. Reads are linearizable and not fenced. Methods may be called
// concurrently.
type Store struct {
	c      *Client
	l      *Leadership
	fenced atomic.Int64
}

func newStore(c *Client, l *Leadership) *Store { return &Store{c: c, l: l} }

// Epoch is the epoch the store's writes are fenced on.
func (s *Store) Epoch() int64 { return s.l.Epoch() }

// FencedWrites is the number of this store's writes refused by the fence.
func (s *Store) FencedWrites() int64 { return s.fenced.Load() }

// PutJob creates or replaces a job's graph and status in one write. The
// job's checkpoint pointer and id counter are kept.
func (s *Store) PutJob(ctx context.Context, id string, graph, status []byte) error {
	if err := checkJobID(id); err != nil {
		return err
	}
	if err := checkValue(id, "graph", graph); err != nil {
		return err
	}
	if err := checkValue(id, "status", status); err != nil {
		return err
	}
	_, err := s.commit(ctx, "put job "+id, nil,
		[]clientv3.Op{clientv3.OpPut(s.jobKey(id, "graph"), string(graph)), clientv3.OpPut(s.jobKey(id, "status"), string(status))})
	return err
}

// PutJobStatus replaces the status of a job stored by PutJob; an unknown
// job gives an error wrapping ErrNotFound.
func (s *Store) PutJobStatus(ctx context.Context, id string, status []byte) error {
	if err := checkJobID(id); err != nil {
		return err
	}
	if err := checkValue(id, "status", status); err != nil {
		return err
	}
	graph := s.jobKey(id, "graph")
	_, err := s.commit(ctx, "put status of job "+id,
		[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(graph), ">", 0)},
		[]clientv3.Op{clientv3.OpPut(s.jobKey(id, "status"), string(status))})
	if errors.Is(err, errConflict) {
		return s.notFound(id)
	}
	return err
}

// Confirm checks in etcd, with the same fence as every write, that this
// leadership still holds; what names the side effect it is about to allow
// (deleting checkpoint files, say) for the refusal. A refusal ends the
// leadership, like a fenced write.
func (s *Store) Confirm(ctx context.Context, what string) error {
	_, err := s.commit(ctx, what, nil, nil)
	return err
}

// DeleteJob deletes everything stored for a job, its checkpoint pointer and
// id counter included. Deleting an unknown job is not an error. Job ids
// must not be reused: a new job of the same id counts checkpoints from 1.
func (s *Store) DeleteJob(ctx context.Context, id string) error {
	if err := checkJobID(id); err != nil {
		return err
	}
	_, err := s.commit(ctx, "delete job "+id, nil,
		[]clientv3.Op{clientv3.OpDelete(s.jobPrefix(id), clientv3.WithPrefix())})
	return err
}

// ListJobs returns every stored job, ordered by id. Keys under a job without
// a graph (there should be none) are skipped.
func (s *Store) ListJobs(ctx context.Context) ([]JobRecord, error) {
	root := s.c.prefix + "/jobs/"
	resp, err := s.c.etcd.Get(ctx, root, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("ha: list jobs under %s: %w", root, err)
	}
	var out []JobRecord
	for _, kv := range resp.Kvs { // sorted by key, so a job's keys are adjacent
		rest := strings.TrimPrefix(string(kv.Key), root)
		id, leaf, ok := strings.Cut(rest, "/")
		if !ok {
			continue
		}
		if len(out) == 0 || out[len(out)-1].ID != id {
			out = append(out, JobRecord{ID: id})
		}
		r := &out[len(out)-1]
		switch leaf {
		case "graph":
			r.Graph = kv.Value
		case "status":
			r.Status = kv.Value
		case "checkpoints/latest":
			p, err := jobstore.DecodePointer(string(kv.Key), kv.Value)
			if err != nil {
				return nil, err
			}
			r.Latest = &p
		case "checkpoint-id":
			n, err := decodeCounter(string(kv.Key), kv.Value)
			if err != nil {
				return nil, err
			}
			r.LastCheckpointID = n
		}
	}
	jobs := out[:0]
	for _, r := range out {
		if r.Graph == nil {
			s.c.log.Warn("job keys without a graph in etcd; ignored", "job", r.ID, "prefix", s.jobPrefix(r.ID))
			continue
		}
		jobs = append(jobs, r)
	}
	// Key order is not id order: "job-2/…" sorts before "job/…".
	slices.SortFunc(jobs, func(a, b JobRecord) int { return strings.Compare(a.ID, b.ID) })
	return jobs, nil
}

// PutLatestCheckpoint records p as the job's latest completed checkpoint.
// The pointer only moves forward: a pointer older than the stored one gives
// an error wrapping ErrStaleCheckpoint, the same pointer again is a no-op.
// An unknown job gives an error wrapping ErrNotFound.
func (s *Store) PutLatestCheckpoint(ctx context.Context, job string, p Pointer) error {
	if err := checkJobID(job); err != nil {
		return err
	}
	if err := p.Validate(); err != nil {
		return fmt.Errorf("job %s: %w", job, err)
	}
	key, graph := s.jobKey(job, "checkpoints/latest"), s.jobKey(job, "graph")
	val := jobstore.EncodePointer(p)
	for range maxCASAttempts {
		resp, err := s.c.etcd.Get(ctx, key)
		if err != nil {
			return fmt.Errorf("ha: read checkpoint pointer of job %s: %w", job, err)
		}
		var mod int64
		if len(resp.Kvs) > 0 {
			kv := resp.Kvs[0]
			mod = kv.ModRevision
			cur, err := jobstore.DecodePointer(key, kv.Value)
			if err != nil {
				return err
			}
			switch {
			case cur.ID > p.ID || (cur.ID == p.ID && !bytes.Equal(kv.Value, val)):
				return fmt.Errorf("ha: job %s: checkpoint %d (%s) does not follow the stored checkpoint %d (%s): %w",
					job, p.ID, p.ManifestKey, cur.ID, cur.ManifestKey, ErrStaleCheckpoint)
			case cur.ID == p.ID:
				return nil
			}
		}
		_, err = s.commit(ctx, fmt.Sprintf("put checkpoint %d of job %s", p.ID, job),
			[]clientv3.Cmp{
				clientv3.Compare(clientv3.ModRevision(key), "=", mod),
				clientv3.Compare(clientv3.CreateRevision(graph), ">", 0),
			},
			[]clientv3.Op{clientv3.OpPut(key, string(val))})
		if !errors.Is(err, errConflict) {
			return err
		}
		if missing, err := s.jobMissing(ctx, job); err != nil || missing {
			return errors.Join(err, boolErr(missing, s.notFound(job)))
		}
	}
	return fmt.Errorf("ha: put checkpoint %d of job %s: the pointer kept changing under %d attempts; is another writer using this leadership?", p.ID, job, maxCASAttempts)
}

// LatestCheckpoint returns the job's latest completed checkpoint, or an
// error wrapping ErrNotFound when it has none.
func (s *Store) LatestCheckpoint(ctx context.Context, job string) (Pointer, error) {
	if err := checkJobID(job); err != nil {
		return Pointer{}, err
	}
	key := s.jobKey(job, "checkpoints/latest")
	resp, err := s.c.etcd.Get(ctx, key)
	if err != nil {
		return Pointer{}, fmt.Errorf("ha: read checkpoint pointer of job %s: %w", job, err)
	}
	if len(resp.Kvs) == 0 {
		return Pointer{}, fmt.Errorf("ha: job %s has no completed checkpoint in etcd: %w", job, ErrNotFound)
	}
	return jobstore.DecodePointer(key, resp.Kvs[0].Value)
}

// NextCheckpointID allocates the job's next checkpoint id: 1 first, then
// strictly increasing across calls and leaders, never handed out twice. An
// unknown job gives an error wrapping ErrNotFound.
func (s *Store) NextCheckpointID(ctx context.Context, job string) (int64, error) {
	if err := checkJobID(job); err != nil {
		return 0, err
	}
	key, graph := s.jobKey(job, "checkpoint-id"), s.jobKey(job, "graph")
	next, err := s.increment(ctx, key, "checkpoint id of job "+job,
		[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(graph), ">", 0)},
		func() error {
			missing, err := s.jobMissing(ctx, job)
			if err != nil || missing {
				return errors.Join(err, boolErr(missing, s.notFound(job)))
			}
			return nil
		})
	if err != nil {
		return 0, err
	}
	return next, nil
}

// increment adds one to the decimal counter at key (absent: 0) in a fenced
// compare-and-swap that also requires cmps, and returns the new value.
// When the swap loses a race it calls conflict, whose error ends the
// attempts, and tries again.
func (s *Store) increment(ctx context.Context, key, what string, cmps []clientv3.Cmp, conflict func() error) (int64, error) {
	for range maxCASAttempts {
		resp, err := s.c.etcd.Get(ctx, key)
		if err != nil {
			return 0, fmt.Errorf("ha: read the %s counter %s: %w", what, key, err)
		}
		var cur, mod int64
		if len(resp.Kvs) > 0 {
			mod = resp.Kvs[0].ModRevision
			if cur, err = decodeCounter(key, resp.Kvs[0].Value); err != nil {
				return 0, err
			}
		}
		next := cur + 1
		_, err = s.commit(ctx, fmt.Sprintf("allocate %s %d", what, next),
			append([]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", mod)}, cmps...),
			[]clientv3.Op{clientv3.OpPut(key, strconv.FormatInt(next, 10))})
		if err == nil {
			return next, nil
		}
		if !errors.Is(err, errConflict) {
			return 0, err
		}
		if conflict != nil {
			if err := conflict(); err != nil {
				return 0, err
			}
		}
	}
	return 0, fmt.Errorf("ha: allocate a %s: the counter %s kept changing under %d attempts", what, key, maxCASAttempts)
}

// errConflict: the fence held but another condition of the transaction did
// not. Internal; callers translate it.
var errConflict = errors.New("ha: transaction condition failed")

// commit runs then in one transaction if the fence and cmps hold. When the
// fence holds but a cmp does not it returns errConflict.
func (s *Store) commit(ctx context.Context, what string, cmps []clientv3.Cmp, then []clientv3.Op) (*clientv3.TxnResponse, error) {
	epoch, key := s.l.Epoch(), s.l.Key()
	select {
	case <-s.l.Lost():
		return nil, s.refuse(what, "its leadership already ended ("+s.l.Reason()+")")
	default:
	}
	// A write must not outlive the leadership.
	octx, cancel := context.WithCancel(ctx)
	stop := make(chan struct{})
	go func() {
		select {
		case <-s.l.Lost():
			cancel()
		case <-stop:
		}
	}()
	defer func() { close(stop); cancel() }()

	conds := append([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", epoch)}, cmps...)
	resp, err := s.c.etcd.Txn(octx).If(conds...).Then(then...).
		Else(clientv3.OpGet(s.c.electionPrefix()+"/", clientv3.WithFirstCreate()...)).Commit()
	if err != nil {
		if ctx.Err() == nil && octx.Err() != nil {
			return nil, fmt.Errorf("ha: %s: %w while writing (the write may or may not have been applied): %s", what, ErrLeadershipLost, s.l.Reason())
		}
		return nil, fmt.Errorf("ha: %s in etcd at %v: %w", what, s.c.cfg.Endpoints, err)
	}
	if resp.Succeeded {
		return resp, nil
	}
	rng := resp.Responses[0].GetResponseRange()
	if len(rng.Kvs) > 0 && string(rng.Kvs[0].Key) == key && rng.Kvs[0].CreateRevision == epoch {
		return resp, errConflict
	}
	now := "no jobmanager leads now"
	if len(rng.Kvs) > 0 {
		kv := rng.Kvs[0]
		li, _ := decodeLeader(kv.Value, kv.CreateRevision)
		now = fmt.Sprintf("jobmanager %q leads now with epoch %d", li.ID, li.Epoch)
	}
	err = s.refuse(what, "its leader key "+key+" is gone; "+now)
	s.l.end("a write was fenced: " + now)
	return nil, err
}

// refuse counts and logs a fenced write and returns its error.
func (s *Store) refuse(what, why string) error {
	s.fenced.Add(1)
	s.c.fenced.Add(1)
	// zombie_write_rejected=1 marks each refused write exactly once (the
	// process tests count these lines).
	s.c.log.Warn("fenced write refused", "zombie_write_rejected", 1, "write", what, "epoch", s.l.Epoch(), "id", s.l.ID(), "why", why, "fencedWrites", s.c.fenced.Load())
	return fmt.Errorf("ha: %s refused: %w: jobmanager %q (epoch %d) no longer leads: %s; it must step down",
		what, ErrFenced, s.l.ID(), s.l.Epoch(), why)
}

func (s *Store) jobMissing(ctx context.Context, job string) (bool, error) {
	resp, err := s.c.etcd.Get(ctx, s.jobKey(job, "graph"), clientv3.WithCountOnly())
	if err != nil {
		return false, fmt.Errorf("ha: read job %s: %w", job, err)
	}
	return resp.Count == 0, nil
}

func (s *Store) notFound(job string) error {
	return fmt.Errorf("ha: job %s is not stored in etcd under %s (PutJob first, or it was deleted): %w", job, s.c.prefix, ErrNotFound)
}

func (s *Store) jobPrefix(id string) string    { return s.c.prefix + "/jobs/" + id + "/" }
func (s *Store) jobKey(id, leaf string) string { return s.jobPrefix(id) + leaf }

func boolErr(b bool, err error) error {
	if b {
		return err
	}
	return nil
}

func decodeCounter(key string, b []byte) (int64, error) {
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("ha: %s holds %q, not a checkpoint id", key, b)
	}
	return n, nil
}

func checkJobID(id string) error {
	if id == "" || len(id) > 256 {
		return fmt.Errorf("ha: job id %q: must be 1 to 256 bytes", id)
	}
	for _, r := range id {
		if r == '/' || r < 0x21 || r == 0x7f {
			return fmt.Errorf("ha: job id %q: must not contain '/', spaces or control characters", id)
		}
	}
	return nil
}

func checkValue(job, what string, b []byte) error {
	if len(b) > MaxValueSize {
		return fmt.Errorf("ha: job %s: %s of %d bytes exceeds %d; store it in checkpoint storage and put a pointer to it here", job, what, len(b), MaxValueSize)
	}
	return nil
}

// NextTerm allocates the next leadership term of the cluster: 1 for the
// first leader, then strictly increasing across leaders, never handed out
// twice. Unlike Epoch (an etcd revision, large and sparse) terms are small
// and dense, so a jobmanager can use one as a base for identifiers that
// must never repeat across leaders (execution attempts).
func (s *Store) NextTerm(ctx context.Context) (int64, error) {
	return s.increment(ctx, s.c.prefix+"/leader-term", "leader term", nil, nil)
}
