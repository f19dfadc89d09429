package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/proto"

	"github.com/weirstream/weir/blobstore"
	"github.com/weirstream/weir/internal/errkind"
	"github.com/weirstream/weir/proto/weirpb"
)

// ManifestVersion is the manifest (and completed pointer) version this
// package writes and the only one it reads.
const ManifestVersion = 1

// ErrVersion is wrapped by the error of ReadManifest (and
// ReadLatestManifest) for a manifest of a version other than
// ManifestVersion: another Weir version wrote it, and this one cannot
// restore from it. A manifest with no version at all is ErrCorrupt.
var ErrVersion = errors.New("checkpoint: unknown manifest version")

var marshal = proto.MarshalOptions{Deterministic: true}

// WriteManifest stores m at ManifestKey(m.JobId, m.CheckpointId) and returns
// the key and the hex SHA-256 of the stored bytes (for the completed
// pointer). A zero m.Version is written as ManifestVersion; m is not
// modified.
func (s *Storage) WriteManifest(ctx context.Context, m *weirpb.Manifest) (key, sha string, err error) {
	if err := validSegment("job id", m.GetJobId()); err != nil {
		return "", "", err
	}
	if m.GetCheckpointId() < 0 {
		return "", "", fmt.Errorf("checkpoint %d: write manifest: negative checkpoint id", m.GetCheckpointId())
	}
	what := fmt.Sprintf("checkpoint %d", m.GetCheckpointId())
	m, err = versioned(m, what)
	if err != nil {
		return "", "", err
	}
	e := getEncoder()
	defer e.release()
	data, err := e.marshalManifest(m)
	if err != nil {
		return "", "", fmt.Errorf("%s: encode manifest: %w", what, err)
	}
	key = ManifestKey(m.GetJobId(), m.GetCheckpointId())
	// The store keeps no reference to data (blobstore.Store), so that the
	// encoder's buffer serves the next manifest.
	if err := s.store.Put(ctx, key, data); err != nil {
		return "", "", fmt.Errorf("checkpoint %d: write manifest: %w", m.GetCheckpointId(), err)
	}
	return key, sha256Hex(data), nil
}

// ReadManifest reads the manifest of checkpoint id of job jobID. A missing
// manifest gives an error wrapping blobstore.ErrNotFound; a manifest of an
// unknown version is rejected with an error wrapping ErrVersion, and one
// for another job or checkpoint with one wrapping ErrCorrupt.
func (s *Storage) ReadManifest(ctx context.Context, jobID string, id int64) (*weirpb.Manifest, error) {
	m, _, err := s.readManifest(ctx, jobID, id)
	return m, err
}

func (s *Storage) readManifest(ctx context.Context, jobID string, id int64) (*weirpb.Manifest, []byte, error) {
	if err := validSegment("job id", jobID); err != nil {
		return nil, nil, err
	}
	key := ManifestKey(jobID, id)
	data, err := s.store.Get(ctx, key)
	if err != nil {
		if errors.Is(err, blobstore.ErrNotFound) {
			return nil, nil, fmt.Errorf("checkpoint %d of job %s: manifest %s missing; the checkpoint never completed or was deleted: %w", id, jobID, key, err)
		}
		return nil, nil, fmt.Errorf("checkpoint %d of job %s: read manifest: %w", id, jobID, err)
	}
	m, err := decodeManifest(data, fmt.Sprintf("checkpoint %d", id), key)
	if err != nil {
		return nil, nil, err
	}
	if m.GetJobId() != jobID || m.GetCheckpointId() != id {
		return nil, nil, fmt.Errorf("checkpoint %d: manifest %s describes checkpoint %d of job %q; the object was copied or renamed: %w", id, key, m.GetCheckpointId(), m.GetJobId(), ErrCorrupt)
	}
	return m, data, nil
}

// encodeManifest returns m, with a zero version set to ManifestVersion (m
// itself is not modified), and the bytes that store it. Checkpoint manifests
// and savepoint metadata share this encoding. what (such as "checkpoint 7")
// starts its error messages.
func encodeManifest(m *weirpb.Manifest, what string) (*weirpb.Manifest, []byte, error) {
	m, err := versioned(m, what)
	if err != nil {
		return nil, nil, err
	}
	var e manifestEncoder // not pooled: the caller keeps the bytes
	data, err := e.marshalManifest(m)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: encode manifest: %w", what, err)
	}
	return m, data, nil
}

// versioned returns m, or a copy of it with a zero version set to
// ManifestVersion, and refuses other versions.
func versioned(m *weirpb.Manifest, what string) (*weirpb.Manifest, error) {
	switch m.GetVersion() {
	case 0:
		m = proto.CloneOf(m)
		m.Version = ManifestVersion
	case ManifestVersion:
	default:
		return nil, fmt.Errorf("%s: write manifest: version %d; this Weir writes version %d", what, m.GetVersion(), ManifestVersion)
	}
	return m, nil
}

// decodeManifest decodes the bytes of the manifest stored at key and checks
// its version: a rejection wraps ErrCorrupt, or ErrVersion for a version
// other than ManifestVersion. It does not check which job or checkpoint the
// manifest describes. what (such as "checkpoint 7") starts its error
// messages.
func decodeManifest(data []byte, what, key string) (*weirpb.Manifest, error) {
	m := &weirpb.Manifest{}
	if err := proto.Unmarshal(data, m); err != nil {
		return nil, fmt.Errorf("%s: manifest %s: cannot decode (%v); the object is corrupt or not a Weir manifest: %w", what, key, err, ErrCorrupt)
	}
	switch v := m.GetVersion(); {
	case v == 0:
		return nil, fmt.Errorf("%s: manifest %s has no version; the object is corrupt or not a Weir manifest: %w", what, key, ErrCorrupt)
	case v != ManifestVersion:
		return nil, errkind.Mark(fmt.Errorf("%s: manifest %s has version %d, but this Weir reads version %d only; restore it with the Weir version that wrote it", what, key, v, ManifestVersion), ErrVersion)
	}
	return m, nil
}

// WritePointer stores p as the job's completed-checkpoint pointer,
// replacing the previous one. A zero p.Version is written as
// ManifestVersion; p is not modified.
func (s *Storage) WritePointer(ctx context.Context, jobID string, p *weirpb.CompletedPointer) error {
	if err := validSegment("job id", jobID); err != nil {
		return err
	}
	switch p.GetVersion() {
	case 0:
		p = proto.CloneOf(p)
		p.Version = ManifestVersion
	case ManifestVersion:
	default:
		return fmt.Errorf("checkpoint: job %s: write completed pointer: version %d; this Weir writes version %d", jobID, p.GetVersion(), ManifestVersion)
	}
	data, err := marshal.Marshal(p)
	if err != nil {
		return fmt.Errorf("checkpoint: job %s: encode completed pointer: %w", jobID, err)
	}
	if err := s.store.Put(ctx, PointerKey(jobID), data); err != nil {
		return fmt.Errorf("checkpoint %d: job %s: write completed pointer: %w", p.GetCheckpointId(), jobID, err)
	}
	return nil
}

// ReadPointer reads the job's completed-checkpoint pointer. If the job has
// none the error wraps blobstore.ErrNotFound.
func (s *Storage) ReadPointer(ctx context.Context, jobID string) (*weirpb.CompletedPointer, error) {
	if err := validSegment("job id", jobID); err != nil {
		return nil, err
	}
	key := PointerKey(jobID)
	data, err := s.store.Get(ctx, key)
	if err != nil {
		if errors.Is(err, blobstore.ErrNotFound) {
			return nil, fmt.Errorf("checkpoint: job %s has no completed checkpoint (no %s): %w", jobID, key, err)
		}
		return nil, fmt.Errorf("checkpoint: job %s: read completed pointer: %w", jobID, err)
	}
	p := &weirpb.CompletedPointer{}
	if err := proto.Unmarshal(data, p); err != nil {
		return nil, fmt.Errorf("checkpoint: object %s: cannot decode (%v); the object is corrupt: %w", key, err, ErrCorrupt)
	}
	if v := p.GetVersion(); v != ManifestVersion {
		return nil, fmt.Errorf("checkpoint: object %s has version %d, but this Weir reads version %d only: %w", key, v, ManifestVersion, ErrCorrupt)
	}
	return p, nil
}

// ReadLatestManifest follows the job's completed pointer to its manifest
// and checks the manifest's SHA-256 against the pointer.
func (s *Storage) ReadLatestManifest(ctx context.Context, jobID string) (*weirpb.Manifest, error) {
	p, err := s.ReadPointer(ctx, jobID)
	if err != nil {
		return nil, err
	}
	id := p.GetCheckpointId()
	if key := ManifestKey(jobID, id); p.GetManifestKey() != "" && p.GetManifestKey() != key {
		return nil, fmt.Errorf("checkpoint %d: completed pointer %s names manifest %s, want %s: %w", id, PointerKey(jobID), p.GetManifestKey(), key, ErrCorrupt)
	}
	m, data, err := s.readManifest(ctx, jobID, id)
	if err != nil {
		return nil, err
	}
	if want := p.GetManifestSha256(); want != "" {
		if got := sha256Hex(data); got != want {
			return nil, fmt.Errorf("checkpoint %d: object %s: checksum mismatch (want sha256 %s, got %s); the object was modified or truncated: %w",
				id, ManifestKey(jobID, id), want, got, ErrCorrupt)
		}
	}
	return m, nil
}

// DeleteCheckpoint deletes every object of checkpoint id of job jobID
// (everything under CheckpointPrefix). Deleting a checkpoint that has no
// objects is not an error.
func (s *Storage) DeleteCheckpoint(ctx context.Context, jobID string, id int64) error {
	if err := validSegment("job id", jobID); err != nil {
		return err
	}
	infos, err := s.store.List(ctx, CheckpointPrefix(jobID, id))
	if err != nil {
		return fmt.Errorf("checkpoint %d of job %s: delete: %w", id, jobID, err)
	}
	// Delete the manifest first, so that a checkpoint whose deletion is
	// interrupted no longer looks complete.
	slices.SortStableFunc(infos, func(a, b blobstore.ObjectInfo) int {
		return boolInt(!strings.HasSuffix(a.Key, "/_manifest")) - boolInt(!strings.HasSuffix(b.Key, "/_manifest"))
	})
	if len(infos) > 0 && strings.HasSuffix(infos[0].Key, "/_manifest") {
		if err := s.store.Delete(ctx, infos[0].Key); err != nil {
			return fmt.Errorf("checkpoint %d of job %s: delete: %w", id, jobID, err)
		}
		infos = infos[1:]
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(fetchParallelism)
	for _, info := range infos {
		g.Go(func() error { return s.store.Delete(gctx, info.Key) })
	}
	if err := g.Wait(); err != nil {
		return fmt.Errorf("checkpoint %d of job %s: delete: %w", id, jobID, err)
	}
	return nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// ListCheckpointIDs returns, ascending, the ids of the job's checkpoints
// that have any object in storage — completed ones (with a manifest) and
// leftovers of aborted or in-progress ones alike.
func (s *Storage) ListCheckpointIDs(ctx context.Context, jobID string) ([]int64, error) {
	if err := validSegment("job id", jobID); err != nil {
		return nil, err
	}
	infos, err := s.store.List(ctx, jobID+"/chk-")
	if err != nil {
		return nil, fmt.Errorf("checkpoint: job %s: list checkpoints: %w", jobID, err)
	}
	var ids []int64
	for _, info := range infos {
		if id, ok := CheckpointOf(jobID, info.Key); ok {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids), nil
}

// ChannelStateBytes is the size of the records in flight that the
// checkpoint of m keeps (an unaligned checkpoint's channel state, counted
// on its handles); 0 for an aligned checkpoint.
func ChannelStateBytes(m *weirpb.Manifest) int64 {
	var n int64
	for _, op := range m.GetOperators() {
		for _, h := range op.GetHandles() {
			n += h.GetChannelStateBytes()
		}
	}
	return n
}

// FormatManifest renders m as text for people (weir checkpoints inspect).
func FormatManifest(m *weirpb.Manifest) string {
	var b strings.Builder
	fmt.Fprintf(&b, "job:             %s", m.GetJobId())
	if m.GetJobName() != "" {
		fmt.Fprintf(&b, " (%s)", m.GetJobName())
	}
	b.WriteByte('\n')
	fmt.Fprintf(&b, "checkpoint:      %d\n", m.GetCheckpointId())
	fmt.Fprintf(&b, "manifest:        version %d\n", m.GetVersion())
	fmt.Fprintf(&b, "mode:            %s\n", modeName(m.GetMode()))
	fmt.Fprintf(&b, "triggered:       %s\n", formatMillis(m.GetTriggerTimeMs()))
	fmt.Fprintf(&b, "completed:       %s", formatMillis(m.GetCompleteTimeMs()))
	if m.GetTriggerTimeMs() > 0 && m.GetCompleteTimeMs() >= m.GetTriggerTimeMs() {
		fmt.Fprintf(&b, " (took %v)", time.Duration(m.GetCompleteTimeMs()-m.GetTriggerTimeMs())*time.Millisecond)
	}
	b.WriteByte('\n')
	fmt.Fprintf(&b, "max parallelism: %d\n", m.GetMaxParallelism())
	var total int64
	var handles, inline int
	for _, op := range m.GetOperators() {
		for _, h := range op.GetHandles() {
			total += h.GetSize()
			handles++
			if IsInline(h) {
				inline++
			}
		}
	}
	fmt.Fprintf(&b, "state:           %s in %d snapshots (%d inline in this manifest)\n", FormatBytes(total), handles, inline)
	if cs := ChannelStateBytes(m); cs > 0 {
		fmt.Fprintf(&b, "channel state:   %s (unaligned: records in flight, restorable only at the same parallelism)\n", FormatBytes(cs))
	}
	for _, op := range m.GetOperators() {
		var opSize int64
		for _, h := range op.GetHandles() {
			opSize += h.GetSize()
		}
		fmt.Fprintf(&b, "operator %s: parallelism %d, %s\n", op.GetOperatorUid(), op.GetParallelism(), FormatBytes(opSize))
		hs := slices.Clone(op.GetHandles())
		slices.SortStableFunc(hs, func(a, b *weirpb.StateHandle) int { return int(a.GetSubtask()) - int(b.GetSubtask()) })
		for _, h := range hs {
			kg := "-"
			if h.GetKeyGroupEnd() >= h.GetKeyGroupStart() {
				kg = fmt.Sprintf("%d..%d", h.GetKeyGroupStart(), h.GetKeyGroupEnd())
			}
			sha := h.GetSha256()
			if len(sha) > 12 {
				sha = sha[:12]
			}
			where := h.GetKey()
			if IsInline(h) {
				where = "(inline)"
			}
			fmt.Fprintf(&b, "  subtask %-3d key groups %-9s %10s  sha256 %-12s  %s\n", h.GetSubtask(), kg, FormatBytes(h.GetSize()), sha, where)
		}
	}
	return b.String()
}

func modeName(m weirpb.CheckpointMode) string {
	switch m {
	case weirpb.CheckpointMode_CHECKPOINT_MODE_EXACTLY_ONCE:
		return "exactly_once"
	case weirpb.CheckpointMode_CHECKPOINT_MODE_AT_LEAST_ONCE:
		return "at_least_once"
	}
	return "unspecified"
}

func formatMillis(ms int64) string {
	if ms == 0 {
		return "-"
	}
	return time.UnixMilli(ms).UTC().Format("2006-01-02 15:04:05.000 UTC")
}

// FormatBytes renders a byte count for people: B, KiB, MiB or GiB.
func FormatBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
