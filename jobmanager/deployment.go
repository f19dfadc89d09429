package jobmanager

import (
	"github.com/weirstream/weir/jobmanager/scheduler"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/stream"
)

// buildDeployment describes the execution a scheduler.DeployAction places for the
// taskmanager that runs it. a.SlotAddrs[i] is the address of the
// taskmanager hosting shared slot i, and so every task's subtask i.
func buildDeployment(a *scheduler.DeployAction) *weirpb.TaskDeployment {
	g, t, subtask := a.Graph, a.Task, a.Subtask
	d := &weirpb.TaskDeployment{
		Id:                 &weirpb.ExecutionID{JobId: a.JobID, VertexId: int32(t.Head), Subtask: int32(subtask), Attempt: a.Attempt},
		TaskName:           t.SubtaskName(subtask),
		Parallelism:        int32(t.Parallelism),
		MaxParallelism:     int32(g.MaxParallelism),
		StateBackend:       g.State.Backend,
		StateFullSnapshots: g.State.FullSnapshots,
	}
	if ck := a.Checkpointing; ck.Enabled {
		d.Checkpointing = &weirpb.TaskCheckpointing{Enabled: true, Mode: weirpb.CheckpointMode(ck.Mode), Storage: ck.Storage,
			AlignedCheckpointTimeoutMs: ck.AlignedTimeout.Milliseconds()}
	}
	if m := manifestOf(a.Restore); m != nil {
		d.RestoreCheckpointId = m.CheckpointId
		d.RestoreJobId = m.JobId
		if c, ok := a.Restore.(completed); ok {
			d.RestoreStorage = c.storage
		}
		d.Restore = restoreHandles(m, g, t, subtask)
		d.RestoreFinished = finishedIn(m, g.Vertices[t.Head].UID, subtask, t.Parallelism)
	}
	slotAddrs := a.SlotAddrs
	for _, id := range t.Chain {
		op := &weirpb.ChainedOperator{Vertex: weirpb.FromVertex(g.Vertices[id])}
		for _, e := range g.Inputs(id) {
			op.InputSchemas = append(op.InputSchemas, weirpb.FromSchema(g.EdgeSchema(e)))
			kf := &weirpb.KeyFields{}
			if e.Partitioning == stream.Hash {
				kf.Fields = append([]string(nil), e.KeyFields...)
			}
			op.InputKeys = append(op.InputKeys, kf)
		}
		d.Chain = append(d.Chain, op)
	}
	for _, e := range g.Inputs(t.Head) {
		d.Inputs = append(d.Inputs, &weirpb.InputGate{
			Input:               int32(e.Input),
			UpstreamVertex:      int32(e.From),
			UpstreamParallelism: int32(g.Vertices[e.From].Parallelism),
			Partitioning:        weirpb.Partitioning(e.Partitioning),
		})
	}
	for _, e := range g.Outputs(t.Last()) {
		down := g.Vertices[e.To].Parallelism
		out := &weirpb.OutputSpec{
			SideOutput:            e.SideOutput,
			DownstreamVertex:      int32(e.To),
			DownstreamInput:       int32(e.Input),
			DownstreamParallelism: int32(down),
			Partitioning:          weirpb.Partitioning(e.Partitioning),
			Targets:               append([]string(nil), slotAddrs[:down]...),
		}
		if e.Partitioning == stream.Hash {
			out.KeyFields = append([]string(nil), e.KeyFields...)
		}
		d.Outputs = append(d.Outputs, out)
	}
	return d
}
