package keyed

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/weirstream/weir/stream"
)

// FailConfig is the JSON config of the fail operator.
type FailConfig struct {
	// Failures lists where to fail. Each applies to one attempt (one
	// deployment of the job: OperatorContext.Attempt) and one subtask.
	Failures []Failure `json:"failures"`
}

// Failure is one injected failure.
type Failure struct {
	// Attempt is the job attempt that fails (1 for the first deployment
	// by the current jobmanager: stream.DeploymentOf).
	Attempt int64 `json:"attempt"`
	// Subtask is the failing subtask; default 0.
	Subtask *int `json:"subtask,omitempty"`
	// At is where it fails:
	//   "records"  in ProcessBatch, on the batch that holds record number
	//              After+1 of this subtask in this attempt (not forwarded);
	//   "snapshot" in SnapshotState;
	//   "restore"  in RestoreState;
	//   "notify"   in NotifyCheckpointComplete.
	At string `json:"at"`
	// After is the number of records passed through before failing ("records"
	// only).
	After int64 `json:"after,omitempty"`
}

// Failure points.
const (
	AtRecords  = "records"
	AtSnapshot = "snapshot"
	AtRestore  = "restore"
	AtNotify   = "notify"
)

// ErrInjected is the error the fail operator fails with, wrapped as
// "injected failure (attempt N, at X)".
var ErrInjected = errors.New("injected failure")

func parseFail(raw []byte, parallelism int) (FailConfig, error) {
	var c FailConfig
	if err := stream.DecodeOperatorConfig(TypeFail, raw, &c); err != nil {
		return c, err
	}
	for i, f := range c.Failures {
		where := fmt.Sprintf("%s: failures[%d]", TypeFail, i)
		switch f.At {
		case AtRecords, AtSnapshot, AtRestore, AtNotify:
		case "":
			return c, stream.ConfigErrorf("%s: at is required (records, snapshot, restore or notify)", where)
		default:
			return c, stream.ConfigErrorf("%s: unknown at %q (want records, snapshot, restore or notify)", where, f.At)
		}
		if f.Attempt < 1 {
			return c, stream.ConfigErrorf("%s: attempt %d: must be at least 1 (the first deployment is attempt 1)", where, f.Attempt)
		}
		if f.After < 0 {
			return c, stream.ConfigErrorf("%s: after %d: must not be negative", where, f.After)
		}
		if f.After != 0 && f.At != AtRecords {
			return c, stream.ConfigErrorf("%s: after applies only to at \"records\", not %q", where, f.At)
		}
		if f.Subtask != nil && (*f.Subtask < 0 || parallelism > 0 && *f.Subtask >= parallelism) {
			return c, stream.ConfigErrorf("%s: subtask %d: must be in [0, %d) (the operator's parallelism)", where, *f.Subtask, max(parallelism, 1))
		}
	}
	return c, nil
}

func planFail(p *stream.PlanContext) (*stream.Schema, error) {
	if _, err := parseFail(p.Config, p.Parallelism); err != nil {
		return nil, err
	}
	if len(p.Inputs) != 1 || p.Inputs[0].Schema == nil {
		return nil, stream.ConfigErrorf("%s: takes exactly one input, got %d", TypeFail, len(p.Inputs))
	}
	p.DeclareState(stream.StateDecl{Name: failStateName, Kind: stream.StateOperatorList})
	return p.Inputs[0].Schema, nil
}

// Fail is one subtask of the fail operator: a pass-through that fails where
// its config says, for testing recovery. It is checkpointed (one small item
// of list state "fail", so that a restore always calls RestoreState) and a
// checkpoint listener.
type Fail struct {
	stream.BaseOperator
	cfg     FailConfig
	attempt int64
	subtask int
	seen    int64 // records passed through in this attempt
	after   int64 // fail when seen would pass this; -1 never
	at      map[string]bool
}

var (
	_ stream.Operator           = (*Fail)(nil)
	_ stream.Checkpointed       = (*Fail)(nil)
	_ stream.CheckpointListener = (*Fail)(nil)
)

// NewFail returns a fail operator for a JSON FailConfig.
func NewFail(config []byte) (*Fail, error) {
	cfg, err := parseFail(config, 0)
	if err != nil {
		return nil, err
	}
	return &Fail{cfg: cfg, after: -1}, nil
}

// Open picks the failures of this attempt and subtask.
func (o *Fail) Open(_ context.Context, octx *stream.OperatorContext) error {
	// Failures name deployments as counted by the current jobmanager.
	o.attempt, o.subtask = stream.DeploymentOf(octx.Attempt), octx.Subtask
	o.at = make(map[string]bool)
	for _, f := range o.cfg.Failures {
		sub := 0
		if f.Subtask != nil {
			sub = *f.Subtask
		}
		if f.Attempt != o.attempt || sub != octx.Subtask {
			continue
		}
		o.at[f.At] = true
		if f.At == AtRecords && (o.after < 0 || f.After < o.after) {
			o.after = f.After
		}
	}
	return nil
}

func (o *Fail) fail(at string) error {
	return fmt.Errorf("%w (attempt %d, at %s)", ErrInjected, o.attempt, at)
}

// ProcessBatch forwards b, or fails if it holds record number after+1.
func (o *Fail) ProcessBatch(_ int, b *stream.Batch, out stream.Collector) error {
	n := int64(b.Len())
	if o.after >= 0 && o.seen+n > o.after {
		b.Release()
		return o.fail(AtRecords)
	}
	o.seen += n
	out.Collect(b)
	return nil
}

const failStateName = "fail"

// SnapshotState writes one item (version 1, varint subtask), or fails.
func (o *Fail) SnapshotState(c *stream.SnapshotContext) error {
	if o.at[AtSnapshot] {
		return o.fail(AtSnapshot)
	}
	c.AddListState(failStateName, binary.AppendVarint([]byte{1}, int64(o.subtask)))
	return nil
}

// RestoreState does nothing, or fails.
func (o *Fail) RestoreState(*stream.RestoreContext) error {
	if o.at[AtRestore] {
		return o.fail(AtRestore)
	}
	return nil
}

// NotifyCheckpointComplete does nothing, or fails.
func (o *Fail) NotifyCheckpointComplete(int64) error {
	if o.at[AtNotify] {
		return o.fail(AtNotify)
	}
	return nil
}

// NotifyCheckpointAborted does nothing.
func (o *Fail) NotifyCheckpointAborted(int64) error { return nil }
