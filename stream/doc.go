// Package stream is Weir's user API: the record model (schemas and columnar
// batches), the operator contracts that built-in and custom operators
// implement, the operator registry, key-group arithmetic, and the JobGraph
// with a builder that programs use to describe a job.
//
// A JobGraph written with the builder and one parsed from a YAML job spec
// (package jobspec) are the same value; Plan checks it against a Registry and
// fills in every vertex's output schema. Plan also enforces the size limits
// of a job (MaxOperators, MaxNameLength, MaxUIDLength, MaxConfigBytes,
// MaxKeyGroups), so that every way of submitting a job is held to them
// before a jobmanager or taskmanager spends memory on it.
//
// Besides its main output an operator may have side outputs: its type
// declares them by name and schema at planning
// (PlanContext.DeclareSideOutput), an Edge reads one by naming it
// (Edge.SideOutput, Stream.SideOutput), and the operator emits to one with
// CollectSide. A window operator sends records later than its allowed
// lateness to a side output this way.
//
// A stateful operator type also declares, at planning, the state its
// instances keep (PlanContext.DeclareState: names and kinds, Vertex.States);
// a restore is checked against the declarations before anything runs.
//
// stream imports the standard library only. Everything else in Weir may
// import it; it imports nothing of Weir's.
package stream
