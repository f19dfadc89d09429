// Package weirpb holds Weir's protobuf messages and gRPC services (generated
// from the .proto files beside this one by `make proto`) and the hand-written
// conversions between them and the stream package's types. Only the gRPC
// adapters (jobmanager, taskmanager, dataflow's network exchange, the job
// API client in package client) import it.
package weirpb

import (
	"fmt"
	"time"

	"github.com/weirstream/weir/stream"
)

// LeaderMetadataKey is the gRPC trailer (and header) in which a standby
// jobmanager names the leader's address when it refuses a call of the job
// API, so that clients can follow it.
const LeaderMetadataKey = "weir-leader"

// FromSchema converts a stream schema (nil stays nil).
func FromSchema(s *stream.Schema) *Schema {
	if s == nil {
		return nil
	}
	out := &Schema{Fields: make([]*Field, len(s.Fields))}
	for i, f := range s.Fields {
		out.Fields[i] = &Field{Name: f.Name, Type: FieldType(f.Type)}
	}
	return out
}

// ToSchema converts a schema message (nil stays nil).
func ToSchema(s *Schema) (*stream.Schema, error) {
	if s == nil {
		return nil, nil
	}
	fields := make([]stream.Field, len(s.Fields))
	for i, f := range s.GetFields() {
		fields[i] = stream.Field{Name: f.GetName(), Type: stream.Type(f.GetType())}
	}
	return stream.NewSchema(fields...)
}

// FromGraph converts a job graph.
func FromGraph(g *stream.JobGraph) *JobGraph {
	out := &JobGraph{Name: g.Name, Parallelism: int32(g.Parallelism), MaxParallelism: int32(g.MaxParallelism)}
	for _, v := range g.Vertices {
		out.Vertices = append(out.Vertices, FromVertex(v))
	}
	for _, e := range g.Edges {
		out.Edges = append(out.Edges, &Edge{From: int32(e.From), To: int32(e.To), Input: int32(e.Input),
			Partitioning: Partitioning(e.Partitioning), KeyFields: e.KeyFields, SideOutput: e.SideOutput})
	}
	out.Checkpoint = FromCheckpointConfig(g.Checkpoint)
	out.Restart = FromRestartConfig(g.Restart)
	out.StateBackend = g.State.Backend
	out.StateFullSnapshots = g.State.FullSnapshots
	return out
}

func ms(d time.Duration) int64   { return d.Milliseconds() }
func dur(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }

// FromCheckpointConfig converts checkpoint settings.
func FromCheckpointConfig(c stream.CheckpointConfig) *CheckpointSettings {
	return &CheckpointSettings{IntervalMs: ms(c.Interval), TimeoutMs: ms(c.Timeout), MinPauseMs: ms(c.MinPause),
		MaxConcurrent: int32(c.MaxConcurrent), Mode: CheckpointMode(c.Mode), TolerableFailures: int32(c.TolerableFailures),
		Retained: int32(c.Retained), RetainOnCancel: c.Retention == stream.RetainOnCancel, Storage: c.Storage,
		OnCorruption: CorruptionPolicy(c.OnCorruption), Unaligned: c.Unaligned, AlignedCheckpointTimeoutMs: ms(c.AlignedCheckpointTimeout),
		Adaptive: c.Adaptive, MaxOverhead: c.MaxOverhead, MinIntervalMs: ms(c.MinInterval), MaxIntervalMs: ms(c.MaxInterval)}
}

// ToCheckpointConfig converts checkpoint settings (nil is the zero config).
func ToCheckpointConfig(c *CheckpointSettings) stream.CheckpointConfig {
	out := stream.CheckpointConfig{Interval: dur(c.GetIntervalMs()), Timeout: dur(c.GetTimeoutMs()), MinPause: dur(c.GetMinPauseMs()),
		MaxConcurrent: int(c.GetMaxConcurrent()), Mode: stream.CheckpointMode(c.GetMode()), TolerableFailures: int(c.GetTolerableFailures()),
		Retained: int(c.GetRetained()), Storage: c.GetStorage(), OnCorruption: stream.CorruptionPolicy(c.GetOnCorruption()),
		Unaligned: c.GetUnaligned(), AlignedCheckpointTimeout: dur(c.GetAlignedCheckpointTimeoutMs()), Adaptive: c.GetAdaptive(), MaxOverhead: c.GetMaxOverhead(),
		MinInterval: dur(c.GetMinIntervalMs()), MaxInterval: dur(c.GetMaxIntervalMs())}
	if c.GetRetainOnCancel() {
		out.Retention = stream.RetainOnCancel
	}
	return out
}

// FromRestartConfig converts a restart strategy.
func FromRestartConfig(r stream.RestartConfig) *RestartStrategy {
	return &RestartStrategy{Type: r.Type, Attempts: int32(r.Attempts), DelayMs: ms(r.Delay), MaxFailures: int32(r.MaxFailures),
		IntervalMs: ms(r.Interval), InitialBackoffMs: ms(r.InitialBackoff), MaxBackoffMs: ms(r.MaxBackoff),
		Multiplier: r.Multiplier, Jitter: r.Jitter, ResetBackoffAfterMs: ms(r.ResetBackoffAfter)}
}

// ToRestartConfig converts a restart strategy (nil is the zero config).
func ToRestartConfig(r *RestartStrategy) stream.RestartConfig {
	return stream.RestartConfig{Type: r.GetType(), Attempts: int(r.GetAttempts()), Delay: dur(r.GetDelayMs()),
		MaxFailures: int(r.GetMaxFailures()), Interval: dur(r.GetIntervalMs()), InitialBackoff: dur(r.GetInitialBackoffMs()),
		MaxBackoff: dur(r.GetMaxBackoffMs()), Multiplier: r.GetMultiplier(), Jitter: r.GetJitter(),
		ResetBackoffAfter: dur(r.GetResetBackoffAfterMs())}
}

// FromVertex converts one vertex.
func FromVertex(v *stream.Vertex) *Vertex {
	out := &Vertex{Id: int32(v.ID), Uid: v.UID, Name: v.Name, Type: v.Type, Config: v.Config,
		Parallelism: int32(v.Parallelism), OutSchema: FromSchema(v.OutSchema)}
	if len(v.SideOutSchemas) > 0 {
		out.SideOutSchemas = make(map[string]*Schema, len(v.SideOutSchemas))
		for name, s := range v.SideOutSchemas {
			out.SideOutSchemas[name] = FromSchema(s)
		}
	}
	return out
}

// ToVertex converts one vertex message.
func ToVertex(v *Vertex) (*stream.Vertex, error) {
	s, err := ToSchema(v.GetOutSchema())
	if err != nil {
		return nil, fmt.Errorf("operator %q: output schema: %w", v.GetUid(), err)
	}
	out := &stream.Vertex{ID: int(v.GetId()), UID: v.GetUid(), Name: v.GetName(), Type: v.GetType(),
		Config: v.GetConfig(), Parallelism: int(v.GetParallelism()), OutSchema: s}
	for name, ps := range v.GetSideOutSchemas() {
		s, err := ToSchema(ps)
		if err != nil {
			return nil, fmt.Errorf("operator %q: side output %q schema: %w", v.GetUid(), name, err)
		}
		if s == nil {
			return nil, fmt.Errorf("operator %q: side output %q has no schema", v.GetUid(), name)
		}
		if out.SideOutSchemas == nil {
			out.SideOutSchemas = make(map[string]*stream.Schema, len(v.GetSideOutSchemas()))
		}
		out.SideOutSchemas[name] = s
	}
	return out, nil
}

// ToGraph converts a job graph message.
func ToGraph(g *JobGraph) (*stream.JobGraph, error) {
	if g == nil {
		return nil, fmt.Errorf("no job graph")
	}
	out := &stream.JobGraph{Name: g.GetName(), Parallelism: int(g.GetParallelism()), MaxParallelism: int(g.GetMaxParallelism())}
	for _, v := range g.GetVertices() {
		sv, err := ToVertex(v)
		if err != nil {
			return nil, err
		}
		out.Vertices = append(out.Vertices, sv)
	}
	for _, e := range g.GetEdges() {
		out.Edges = append(out.Edges, &stream.Edge{From: int(e.GetFrom()), To: int(e.GetTo()), Input: int(e.GetInput()),
			Partitioning: stream.Partitioning(e.GetPartitioning()), KeyFields: e.GetKeyFields(), SideOutput: e.GetSideOutput()})
	}
	out.Checkpoint = ToCheckpointConfig(g.GetCheckpoint())
	out.Restart = ToRestartConfig(g.GetRestart())
	out.State.Backend = g.GetStateBackend()
	out.State.FullSnapshots = g.GetStateFullSnapshots()
	return out, nil
}
