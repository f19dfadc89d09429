package jobstore

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// MaxValueSize is the largest graph or status value a Store accepts. etcd
// refuses requests above 1.5 MiB by default; larger payloads belong in
// checkpoint storage, with a pointer to them stored here.
const MaxValueSize = 1 << 20

// Errors of every Store; inspect them with errors.Is.
var (
	// ErrNotFound means the job, or its checkpoint pointer, is not stored.
	ErrNotFound = errors.New("jobstore: not found")
	// ErrStaleCheckpoint means a checkpoint pointer would move backwards.
	ErrStaleCheckpoint = errors.New("jobstore: checkpoint pointer would move backwards")
	// ErrClosed means a Dir was used after Close.
	ErrClosed = errors.New("jobstore: closed")
)

// Store keeps the jobmanager's job metadata. The jobmanager writes it as
// jobs are submitted, checkpointed and finished, and reads it back with
// ListJobs when it starts leading (after a restart or a takeover) to
// resubmit its running jobs from their latest completed checkpoints.
//
// Methods may be called concurrently. A Store keeps no slice it is given
// and hands out slices the caller owns. Job ids are those that
// stream.ValidateJobID accepts; a Store may refuse others (Dir does, since
// they become directory names). Graph and status are opaque to the Store
// and at most MaxValueSize bytes each.
//
// A write that returns nil is durable: it survives a crash of the
// jobmanager (and a change of leader). A write that fails with an error
// wrapping ErrNotFound or ErrStaleCheckpoint, or because its arguments were
// invalid, changed nothing. After any other error it is unknown whether
// the write took effect; retrying is safe (writes are idempotent, and the
// counters may skip values but never repeat one). An implementation may
// refuse writes for reasons of its own: *ha.Store refuses every write with
// ha.ErrFenced once its leadership ended, and the caller must then stop
// acting for the jobs.
type Store interface {
	// PutJob creates or replaces a job's graph and status in one atomic
	// write: readers, and a jobmanager recovering after a crash, see
	// either the old graph and status or the new ones, never one of each.
	// The job's checkpoint pointer and id counter are kept.
	PutJob(ctx context.Context, id string, graph, status []byte) error
	// PutJobStatus replaces the status of a job stored by PutJob; an
	// unknown job gives an error wrapping ErrNotFound.
	PutJobStatus(ctx context.Context, id string, status []byte) error
	// DeleteJob deletes everything stored for a job, its checkpoint pointer
	// and id counter included, in one atomic write. Deleting an unknown job
	// is not an error. Job ids must not be reused: a new job of the same
	// id counts checkpoints from 1 again.
	DeleteJob(ctx context.Context, id string) error
	// ListJobs returns every stored job, ordered by id (strings.Compare).
	// Leftovers of a job without a graph (there should be none) are
	// skipped and logged. A pointer or counter that cannot be decoded fails
	// the whole call, with an error naming where it is stored.
	ListJobs(ctx context.Context) ([]JobRecord, error)
	// PutLatestCheckpoint records p, which must pass Validate, as the job's
	// latest completed checkpoint. The pointer only moves forward: a
	// pointer with a lower id than the stored one, or with the same id but
	// another manifest, gives an error wrapping ErrStaleCheckpoint; the
	// stored pointer again is a no-op. An unknown job gives an error
	// wrapping ErrNotFound.
	PutLatestCheckpoint(ctx context.Context, job string, p Pointer) error
	// LatestCheckpoint returns the job's latest completed checkpoint, or an
	// error wrapping ErrNotFound when it has none or the job is unknown.
	LatestCheckpoint(ctx context.Context, job string) (Pointer, error)
	// NextCheckpointID allocates the job's next checkpoint id: 1 first,
	// then strictly increasing across calls, restarts and leaders, never
	// handed out twice. An unknown job gives an error wrapping ErrNotFound.
	NextCheckpointID(ctx context.Context, job string) (int64, error)
	// NextTerm allocates the next leadership term of the cluster: 1 for
	// the first leader, then strictly increasing across restarts and
	// leaders, never handed out twice. Terms are small and dense, so a
	// jobmanager can use one as a base for identifiers that must never
	// repeat across leaders (execution attempts).
	NextTerm(ctx context.Context) (int64, error)
	// Confirm checks that this Store may still be written, right before
	// the caller performs a side effect that only the jobs' owner may
	// perform; what names that effect (deleting checkpoint files, say)
	// for the error. *ha.Store checks in etcd, with the fence of its
	// writes, that its leadership holds (a refusal ends the leadership); a
	// Dir holds its directory's lock while open, so it confirms until
	// Close.
	Confirm(ctx context.Context, what string) error
}

// JobRecord is one job's metadata as stored.
type JobRecord struct {
	ID string
	// Graph and Status are the opaque bytes the jobmanager stored.
	Graph, Status []byte
	// Latest is the latest completed checkpoint; nil when the job has none.
	Latest *Pointer
	// LastCheckpointID is the last id NextCheckpointID allocated (0: none).
	LastCheckpointID int64
}

// Pointer names the latest completed checkpoint of a job: the checkpoint
// id, the key of its manifest in checkpoint storage and the manifest's
// SHA-256, which the restoring jobmanager checks.
type Pointer struct {
	ID             int64
	ManifestKey    string
	ManifestSHA256 string // 64 lowercase hex digits
	// Retained are the completed checkpoints the job retains with this
	// one as its latest: ascending, ending with ID (nil means just ID). A
	// jobmanager that recovers the job keeps these and deletes any other.
	Retained []int64
}

// MaxRetained is the most retained checkpoints a Pointer may list.
const MaxRetained = 1000

// RetainedIDs returns p.Retained, or just p.ID when it lists none.
func (p Pointer) RetainedIDs() []int64 {
	if len(p.Retained) == 0 {
		return []int64{p.ID}
	}
	return slices.Clone(p.Retained)
}

// Validate reports what is wrong with p.
func (p Pointer) Validate() error {
	if p.ID <= 0 {
		return fmt.Errorf("jobstore: checkpoint pointer: id %d is not positive", p.ID)
	}
	if p.ManifestKey == "" {
		return fmt.Errorf("jobstore: checkpoint pointer %d: empty manifest key", p.ID)
	}
	if len(p.ManifestSHA256) != 64 {
		// Not quoted: it may come from a damaged file.
		return fmt.Errorf("jobstore: checkpoint pointer %d: manifest sha256 of %d bytes is not 64 lowercase hex digits", p.ID, len(p.ManifestSHA256))
	}
	if strings.ToLower(p.ManifestSHA256) != p.ManifestSHA256 {
		return fmt.Errorf("jobstore: checkpoint pointer %d: manifest sha256 %q is not 64 lowercase hex digits", p.ID, p.ManifestSHA256)
	}
	if _, err := hex.DecodeString(p.ManifestSHA256); err != nil {
		return fmt.Errorf("jobstore: checkpoint pointer %d: manifest sha256 %q is not hex", p.ID, p.ManifestSHA256)
	}
	if len(p.Retained) > MaxRetained {
		return fmt.Errorf("jobstore: checkpoint pointer %d: %d retained checkpoints, more than %d", p.ID, len(p.Retained), MaxRetained)
	}
	for i, id := range p.Retained {
		if id < 1 || (i > 0 && id <= p.Retained[i-1]) {
			return fmt.Errorf("jobstore: checkpoint pointer %d: retained checkpoints are not positive and ascending", p.ID)
		}
	}
	if n := len(p.Retained); n > 0 && p.Retained[n-1] != p.ID {
		return fmt.Errorf("jobstore: checkpoint pointer %d: retained checkpoints do not end with it", p.ID)
	}
	return nil
}

// pointerValue is the stored form of a Pointer, version 1.
type pointerValue struct {
	Version        int     `json:"v"`
	ID             int64   `json:"id"`
	ManifestKey    string  `json:"manifestKey"`
	ManifestSHA256 string  `json:"manifestSha256"`
	Retained       []int64 `json:"retained,omitempty"`
}

// EncodePointer returns the stored form of p, version 1:
// {"v":1,"id":…,"manifestKey":…,"manifestSha256":…,"retained":[…]}, the
// last field only when p lists retained checkpoints (readers that predate
// it ignore it). Every Store stores pointers in this form.
func EncodePointer(p Pointer) []byte {
	b, _ := json.Marshal(pointerValue{Version: 1, ID: p.ID, ManifestKey: p.ManifestKey, ManifestSHA256: p.ManifestSHA256, Retained: p.Retained})
	return b
}

// DecodePointer decodes what EncodePointer returned and validates it; where
// names the key or file b was read from, for the error. The error describes
// a bad b without repeating it.
func DecodePointer(where string, b []byte) (Pointer, error) {
	var v pointerValue
	if err := json.Unmarshal(b, &v); err != nil {
		return Pointer{}, fmt.Errorf("jobstore: %s holds %d bytes that are not a checkpoint pointer: %s", where, len(b), describeJSONError(err))
	}
	switch v.Version {
	case 1:
	case 0:
		return Pointer{}, fmt.Errorf("jobstore: %s holds %d bytes that are not a checkpoint pointer: no version", where, len(b))
	default:
		return Pointer{}, fmt.Errorf("jobstore: %s: checkpoint pointer version %d unknown (this build reads version 1); upgrade the jobmanager", where, v.Version)
	}
	p := Pointer{ID: v.ID, ManifestKey: v.ManifestKey, ManifestSHA256: v.ManifestSHA256, Retained: v.Retained}
	if err := p.Validate(); err != nil {
		return Pointer{}, fmt.Errorf("%s: %w", where, err)
	}
	return p, nil
}

// describeJSONError says why JSON did not decode without quoting the input
// (json's syntax errors quote the offending character).
func describeJSONError(err error) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Sprintf("invalid JSON at byte %d", syn.Offset)
	case errors.As(err, &typ):
		return fmt.Sprintf("field %q holds a JSON %s", typ.Field, typ.Value)
	}
	return "invalid JSON"
}
