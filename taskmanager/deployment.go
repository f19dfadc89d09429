package taskmanager

import (
	"errors"
	"fmt"
	"time"

	"github.com/weirstream/weir/dataflow"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/stream"
)

// toTaskSpec converts a deployment message into the runtime's task spec.
func toTaskSpec(d *weirpb.TaskDeployment) (*dataflow.TaskSpec, error) {
	id := d.GetId()
	if len(d.GetChain()) == 0 {
		return nil, errors.New("deployment has no operators")
	}
	spec := &dataflow.TaskSpec{
		JobID:                    id.GetJobId(),
		Attempt:                  id.GetAttempt(),
		VertexID:                 int(id.GetVertexId()),
		Subtask:                  int(id.GetSubtask()),
		Parallelism:              int(d.GetParallelism()),
		MaxParallelism:           int(d.GetMaxParallelism()),
		TaskName:                 d.GetTaskName(),
		Checkpointing:            d.GetCheckpointing().GetEnabled(),
		Mode:                     stream.CheckpointMode(d.GetCheckpointing().GetMode()),
		AlignedCheckpointTimeout: time.Duration(min(max(d.GetCheckpointing().GetAlignedCheckpointTimeoutMs(), 0), 1<<40)) * time.Millisecond,
		RestoreFinished:          d.GetRestoreFinished(),
		RestoreJobID:             restoreJobID(d),
		StateBackend:             d.GetStateBackend(),
		FullSnapshots:            d.GetStateFullSnapshots(),
	}
	if spec.Checkpointing && d.GetCheckpointing().GetStorage() == "" {
		return nil, errors.New("checkpointing is on but the deployment names no checkpoint storage")
	}
	for _, co := range d.GetChain() {
		v, err := weirpb.ToVertex(co.GetVertex())
		if err != nil {
			return nil, err
		}
		c := dataflow.ChainedOperator{Vertex: v}
		for i, s := range co.GetInputSchemas() {
			in, err := weirpb.ToSchema(s)
			if err != nil {
				return nil, fmt.Errorf("operator %q: input %d schema: %w", v.UID, i, err)
			}
			c.InputSchemas = append(c.InputSchemas, in)
		}
		for _, k := range co.GetInputKeys() {
			c.InputKeys = append(c.InputKeys, k.GetFields())
		}
		spec.Chain = append(spec.Chain, c)
	}
	for _, in := range d.GetInputs() {
		spec.Inputs = append(spec.Inputs, dataflow.InputGate{
			Input:               int(in.GetInput()),
			UpstreamVertex:      int(in.GetUpstreamVertex()),
			UpstreamParallelism: int(in.GetUpstreamParallelism()),
			Partitioning:        stream.Partitioning(in.GetPartitioning()),
		})
	}
	for _, out := range d.GetOutputs() {
		spec.Outputs = append(spec.Outputs, dataflow.Output{
			SideOutput:            out.GetSideOutput(),
			DownstreamVertex:      int(out.GetDownstreamVertex()),
			DownstreamInput:       int(out.GetDownstreamInput()),
			DownstreamParallelism: int(out.GetDownstreamParallelism()),
			Partitioning:          stream.Partitioning(out.GetPartitioning()),
			KeyFields:             out.GetKeyFields(),
			Targets:               out.GetTargets(),
		})
	}
	return spec, nil
}

// restoreJobID returns the job whose checkpoint the deployed task starts
// from, or "" for a fresh start. It is set whenever the deployment names a
// checkpoint, also when restoreState has nothing to load (the task had
// finished as of the checkpoint, or its operators have no state there):
// such a task's operators still open, and a sink among them must be able to
// take over what the restored job left (its directory claim) rather than
// be refused as a stranger. A jobmanager that predates restore_job_id
// restores only the job's own checkpoints.
func restoreJobID(d *weirpb.TaskDeployment) string {
	switch {
	case d.GetRestoreCheckpointId() == 0:
		return ""
	case d.GetRestoreJobId() != "":
		return d.GetRestoreJobId()
	}
	return d.GetId().GetJobId()
}
