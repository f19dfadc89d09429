package keyed

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/weirstream/weir/operators/internal/rowenc"
	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/statebackend/backends"
	"github.com/weirstream/weir/stream"
)

// countTable is the state table of running_count: one int64 per key.
const countTable = "count"

// keyTypesState is the union operator state in which running_count records
// the types of its key fields, so that a restore under another key fails
// clearly instead of reading keys of the wrong shape.
const keyTypesState = "running_count.key-types"

// RunningCount is one subtask of running_count. For each record it adds one
// to its key's count and emits a row of the key fields and the count, with
// the record's event time. The counts live in the job's keyed-state backend
// (statebackend/backends: heap or pebble) as ValueState[int64] per key, the
// key being the rowenc encoding of the key fields; they are checkpointed by
// the backend as per-key-group chunks, which every backend can restore.
type RunningCount struct {
	stream.BaseOperator
	cfg     RunningCountConfig
	name    string
	out     *stream.Schema
	in      *stream.Schema
	keyCols []int
	types   []stream.Type
	maxPar  int
	octx    stream.OperatorContext // with the backend's key groups
	backend statebackend.Backend
	count   statebackend.ValueState[int64]
	snaps   []string // local incremental snapshot directories, oldest first

	hashes []uint64
	keys   []byte // encoded keys of the current batch
	ends   []int  // end offset of each row's key in keys
}

var (
	_ stream.Operator     = (*RunningCount)(nil)
	_ stream.Checkpointed = (*RunningCount)(nil)
)

// NewRunningCount returns a running_count operator for a JSON
// RunningCountConfig.
func NewRunningCount(config []byte) (*RunningCount, error) {
	cfg, err := parseRunningCount(config)
	if err != nil {
		return nil, err
	}
	return &RunningCount{cfg: cfg, name: TypeRunningCount}, nil
}

// Open binds the operator to its keyed input and opens its state backend.
func (o *RunningCount) Open(_ context.Context, octx *stream.OperatorContext) error {
	o.name = instanceName(TypeRunningCount, octx)
	in, cols, err := keyedOpen(o.name, octx)
	if err != nil {
		return err
	}
	out, err := runningCountSchema(in, cols, o.cfg.As)
	if err != nil {
		return fmt.Errorf("%s: %w", o.name, err)
	}
	if octx.OutputSchema != nil {
		if !octx.OutputSchema.Equal(out) {
			return fmt.Errorf("%s: planned output schema %s differs from %s computed at run time; resubmit the job so that it is planned again", o.name, octx.OutputSchema, out)
		}
		out = octx.OutputSchema
	}
	o.out, o.in, o.keyCols = out, in, cols
	o.types = make([]stream.Type, len(cols))
	for j, kc := range cols {
		o.types[j] = in.Fields[kc].Type
	}
	o.maxPar = octx.MaxParallelism
	if o.maxPar <= 0 {
		o.maxPar = stream.DefaultMaxParallelism
	}
	bctx := *octx
	if octx.Parallelism <= 0 { // not placed by a runtime: own every key group
		bctx.KeyGroups = stream.KeyGroupRange{Start: 0, End: o.maxPar - 1}
	}
	o.octx = bctx
	if o.backend, err = backends.Open(&bctx); err != nil {
		return fmt.Errorf("%s: %w", o.name, err)
	}
	return o.bindState()
}

// bindState gets the count table of the current backend.
func (o *RunningCount) bindState() error {
	var err error
	if o.count, err = statebackend.GetValueState(o.backend, countTable, statebackend.Int64Codec); err != nil {
		return fmt.Errorf("%s: %w", o.name, err)
	}
	return nil
}

// ProcessBatch counts the records of b and emits one row per record.
func (o *RunningCount) ProcessBatch(_ int, b *stream.Batch, out stream.Collector) error {
	n := b.Len()
	if n == 0 {
		b.Release()
		return nil
	}
	if cap(o.hashes) < n {
		o.hashes = make([]uint64, n)
		o.ends = make([]int, n)
	}
	hashes, ends := o.hashes[:n], o.ends[:n]
	rowenc.PadBatchNulls(b)
	stream.HashKeys(b, o.keyCols, hashes)
	// Encode all keys first, column by column: keys[ends[i-1]:ends[i]] is
	// row i's key. The buffer is not modified while a key of it is current.
	keys := o.keys[:0]
	for i := range n {
		for _, kc := range o.keyCols {
			keys = rowenc.AppendValue(keys, &b.Cols[kc], i)
		}
		ends[i] = len(keys)
	}
	o.keys = keys
	owned := o.backend.KeyGroups()
	res := stream.NewBatch(o.out, n)
	counts := res.Cols[len(o.keyCols)].Ints[:0]
	start := 0
	for i, h := range hashes {
		kg := stream.KeyGroupForHash(h, o.maxPar)
		if !owned.Contains(kg) {
			res.Release()
			b.Release()
			return fmt.Errorf("%s: a record of key group %d reached this subtask, which owns %v; records were routed to the wrong subtask (is the input keyed by the same fields?)", o.name, kg, owned)
		}
		o.backend.SetCurrentKey(keys[start:ends[i]:ends[i]], kg)
		start = ends[i]
		c, _ := o.count.Value()
		c++
		o.count.Update(c)
		counts = append(counts, c)
	}
	for j, kc := range o.keyCols {
		copyColumn(&res.Cols[j], &b.Cols[kc], n)
	}
	res.Cols[len(o.keyCols)].Ints = counts
	if len(b.Times) == n {
		res.Times = append(res.Times[:0], b.Times...)
	}
	res.SetLen(n)
	b.Release()
	out.Collect(res)
	return nil
}

// localSnapshotsKept is how many local incremental snapshot directories
// running_count keeps for local recovery.
const localSnapshotsKept = 3

// SnapshotState writes the counts and the key's field types (as union
// state). A backend that can snapshot incrementally (Pebble) writes its
// files into a local directory and lists them in c.State.Files for the
// runtime to upload; another writes per-key-group chunks.
func (o *RunningCount) SnapshotState(c *stream.SnapshotContext) error {
	c.AddUnionState(keyTypesState, []byte(o.keySignature()))
	if inc, ok := o.backend.(statebackend.IncrementalSnapshotter); ok {
		dir := backends.SnapshotDir(o.octx.LocalStateDir, o.octx.OperatorUID, c.CheckpointID)
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("%s: snapshot directory: %w", o.name, err)
		}
		if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
			return fmt.Errorf("%s: snapshot directory: %w", o.name, err)
		}
		files, err := inc.SnapshotFiles(dir)
		if err != nil {
			return fmt.Errorf("%s: incremental snapshot of checkpoint %d: %w", o.name, c.CheckpointID, err)
		}
		c.State.Files = append(c.State.Files, files...)
		o.snaps = append(o.snaps, dir)
		for len(o.snaps) > localSnapshotsKept {
			_ = os.RemoveAll(o.snaps[0])
			o.snaps = o.snaps[1:]
		}
		return nil
	}
	if err := o.backend.Snapshot(c); err != nil {
		return fmt.Errorf("%s: %w", o.name, err)
	}
	return nil
}

// RestoreState loads the counts of this subtask's key groups.
func (o *RunningCount) RestoreState(c *stream.RestoreContext) error {
	if c.State == nil {
		return nil
	}
	want := o.keySignature()
	for _, sig := range c.State.Union[keyTypesState] {
		if string(sig) != want {
			return fmt.Errorf("%s: restoring checkpoint %d: the state was written for another key (%s); this operator's key is %s; restore it into the job that wrote it, or start without the checkpoint", o.name, c.CheckpointID, sig, want)
		}
	}
	if len(c.State.Files) > 0 {
		var dirs []string
		for _, f := range c.State.Files {
			if d := filepath.Dir(f.Path); !slices.Contains(dirs, d) {
				dirs = append(dirs, d)
			}
		}
		if err := o.backend.Close(); err != nil {
			return fmt.Errorf("%s: %w", o.name, err)
		}
		b, err := backends.OpenFromSnapshots(&o.octx, dirs)
		if err != nil {
			o.backend = nil
			return fmt.Errorf("%s: restoring checkpoint %d: %w", o.name, c.CheckpointID, err)
		}
		o.backend = b
		if err := o.bindState(); err != nil {
			return err
		}
		if len(c.State.Keyed) == 0 {
			return nil
		}
	}
	if err := o.backend.Restore(c); err != nil {
		return fmt.Errorf("%s: restoring checkpoint %d: %w", o.name, c.CheckpointID, err)
	}
	return nil
}

// Close releases the state backend.
func (o *RunningCount) Close() error {
	if o.backend == nil {
		return nil
	}
	err := o.backend.Close()
	o.backend = nil
	if errors.Is(err, statebackend.ErrClosed) {
		return nil
	}
	return err
}

// keySignature names the key's field types, e.g. "(string, int64)".
func (o *RunningCount) keySignature() string {
	names := make([]string, len(o.types))
	for j, t := range o.types {
		names[j] = t.String()
	}
	return "(" + strings.Join(names, ", ") + ")"
}
