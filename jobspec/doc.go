// Package jobspec turns a YAML job spec into a checked stream.JobGraph.
//
// It owns the spec format: its keys, how operators are wired together when
// the spec does not say, and how every problem is reported as one error that
// names the file and line ("job.yaml:14: operator "counts": keyBy: no field
// "user" (the input has key, value, ts)"). It imports stream,
// internal/errkind, the standard library and go.yaml.in/yaml/v3, and
// nothing else of Weir's: operator types
// come from the stream.Registry the caller passes in.
//
// # Format
//
//	name: window-counts          # required
//	parallelism: 4               # default for operators that set none (default 1)
//	maxParallelism: 128          # number of key groups, 1..32768 (default 128)
//	autoWatermarkInterval: 200ms # for watermark generators that set none (see below)
//	operators:                   # required, non-empty, in order
//	  - uid: events              # required, unique, stable across versions (state is keyed by it)
//	    name: Events             # optional display name (default: the uid)
//	    type: datagen            # a registered operator type
//	    parallelism: 2           # optional, at least 1
//	    config: {rows: 1000}     # operator-specific mapping, passed to the operator as JSON
//	  - uid: stamped
//	    type: watermarks
//	    config: {timestampField: ts, maxOutOfOrderness: 500ms}
//	  - uid: counts
//	    type: tumbling_window
//	    keyBy: [key]             # input arrives hash-partitioned by these fields
//	    config: {size: 10s, aggregates: [{fn: count, as: n}]}
//	  - uid: out
//	    type: file
//	    config: {path: /tmp/weir-out, format: csv}
//
// Unknown keys are errors at the top level, in operator entries and in input
// entries. YAML anchors, aliases and merge keys (<<) may be used anywhere.
//
// # autoWatermarkInterval
//
// The job-level autoWatermarkInterval (a duration, whole milliseconds; 0s
// allowed) is copied into the config of every operator whose type sets
// stream.OperatorType.AutoWatermarkInterval (the watermarks operator) and
// whose config has no autoWatermarkInterval of its own, which thus
// overrides it. Without it the operator type's default applies (200ms for
// watermarks: at most one watermark per 200 ms of processing time; 0s
// emits after every batch).
//
// # Limits
//
// A spec is at most MaxSpecBytes as written and MaxExpandedBytes once its
// aliases and merge keys are expanded; Parse measures the expansion without
// performing it, so a few kilobytes of nested aliases cannot make it
// allocate gigabytes. The job is held to the limits of package stream
// (stream.MaxOperators, stream.MaxUIDLength, stream.MaxNameLength,
// stream.MaxConfigBytes), which Parse reports at the line that breaks them.
//
// # Config
//
// An operator's config is converted to JSON for stream.Vertex.Config, keeping
// the order of keys: mapping keys must be strings, YAML integers and floats
// become JSON numbers, true/false become booleans, null becomes null and
// everything else (durations such as 500ms, timestamps, quoted numbers)
// becomes a JSON string. An absent or null config is nil. The operator type's
// Plan function checks the config; its error is reported at the config: line.
//
// # Inputs
//
// Each operator's inputs are decided in this order:
//
//  1. input: <ref> names one input; inputs: [...] names several (input 0,
//     1, ...). A reference is a uid (the operator's main output) or
//     <uid>.<output> (its side output called output); an entry of inputs is
//     a reference or a mapping
//     {from: <uid>, output: <output>, keyBy: [f, ...], partitioning: p}
//     (output optional). inputs: [] says explicitly that the operator has
//     no input (it is a source).
//  2. Otherwise the first operator in the list has no input.
//  3. Otherwise an operator whose type is registered only as a source (like
//     datagen) has no input, wherever it appears: a job may start several
//     pipelines, each at a source.
//  4. Otherwise, if the previous operator in the list is a sink, an operator
//     whose type is also registered as a source (like file, which is both a
//     source and a sink) is a source; any other operator is an error
//     ("operator "x" has no input: the previous operator "y" is a sink; ...").
//  5. Otherwise the operator reads the previous operator in the list. This is
//     how a file sink at the end of a pipeline reads the operator above it.
//
// The previous operator is a sink when it has inputs and its type resolves to
// a stream.KindSink type. An explicit input may name any operator, before or
// after in the list; cycles are errors.
//
// # Side outputs
//
// An operator type may declare side outputs: named extra outputs, such as
// the records a window drops as too late (stream.PlanContext.DeclareSideOutput).
// Another operator reads one like a main output, by reference:
//
//	operators:
//	  - uid: counts
//	    type: tumbling_window
//	    keyBy: [key]
//	    config: {size: 10s, aggregates: [{fn: count, as: n}]}
//	  - uid: late-out
//	    type: file
//	    input: counts.late    # or inputs: [{from: counts, output: late}]
//	    config: {path: /tmp/late, format: jsonl}
//
// Side-output names are letters, digits, '_' and '-', so the last '.' of a
// reference separates them; a reference that is itself a uid (uids may
// contain '.') reads that operator's main output, and the mapping form
// reads a side output of any uid. Reading an output the operator type does
// not declare is an error naming the declared ones. A side output's records
// are partitioned (keyBy, partitioning), checkpointed and ended like the
// main output's; a side output that nothing reads is dropped.
//
// # Partitioning
//
// An edge is forward by default (Plan turns a forward edge between operators
// of different parallelism into rebalance). keyBy: [f, ...] (or keyBy: f)
// makes it hash-partitioned by those fields; partitioning: is one of forward,
// rebalance, broadcast or hash (hash needs keyBy; keyBy with any other
// partitioning is an error). keyBy and partitioning on the operator apply to
// all its inputs; on an entry of inputs they apply to that input only and
// replace the operator's settings for it. A source takes neither.
//
// # Errors
//
// Parse returns the first problem only, as an *Error whose message starts
// with "file:line: ". Errors about one operator read "operator "uid": ..." and
// point at the most precise line known: the offending key or value, the
// config: line for config errors from the operator type, the keyBy: line for
// missing key fields, else the operator's entry. Errors about the whole job
// point at the relevant top-level key.
package jobspec
