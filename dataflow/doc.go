// Package dataflow is Weir's task runtime. It owns:
//
//   - Task: one deployed subtask, a chain of operators called directly one
//     after another (no goroutine or queue between chained operators), fed
//     by a Source or by its input gate, and writing to its outputs through
//     partitioners (forward, hash, rebalance, broadcast); an edge reading a
//     side output of the chain's last operator (stream.CollectSide) has a
//     partitioner of its own and gets the same watermarks, barriers and
//     end-of-partition as the main output's edges;
//   - the input gate: the task's view of every channel it reads, with
//     per-channel watermarks combined into one operator watermark;
//   - Exchange: the movement of batches and in-band events (watermarks,
//     end-of-partition, checkpoint barriers) between tasks, through bounded
//     in-memory channels inside one taskmanager and over one multiplexed gRPC
//     stream per pair of taskmanagers otherwise, with credit-based flow
//     control per logical channel so that backpressure reaches the sources;
//     the receiver enforces the credits it granted (and bounds the other
//     events a channel may queue), closing the stream of a peer that sends
//     more, so that a misbehaving peer fails tasks instead of exhausting
//     memory; on edges other than forward an upstream subtask's watermark
//     goes once per taskmanager into a watermark cell that the consumers
//     there read, and as a channel event only on channels that carried
//     data since their last watermark, in the same place among each
//     channel's events as an event on every channel (wmcell.go);
//   - the task side of checkpoints (checkpoint.go, align.go): triggers
//     injected between two Poll calls of a source task, barrier alignment at
//     other tasks (exactly-once blocks a channel whose barrier arrived until
//     every channel delivered it; at-least-once does not block), the
//     synchronous snapshot of the chain handed to CheckpointHooks, restore
//     before the first record, checkpoint notifications delivered on the
//     task goroutine, and the final checkpoint: with checkpointing on, a
//     task whose input ended finishes only once a checkpoint covering all
//     its output has completed, so two-phase-commit sinks commit everything;
//     a trigger that drains (Task.TriggerDrain, a stop with --drain) ends a
//     source's input before its barrier the same way, maximum watermark
//     included.
//     An exactly-once source task never waits for credit while it sends:
//     what its output channels cannot take waits in the task (one Poll's
//     output at most; outchannel.go, deferred) and goes as credit arrives,
//     triggers handled meanwhile. The barrier of an unaligned checkpoint
//     (Task.TriggerUnalignedCheckpoint) overtakes those batches, and the
//     batches buffered in the input channels downstream (gate.go); what it
//     overtook is channel state, kept with the snapshot and put first by a
//     restore. With TaskSpec.AlignedCheckpointTimeout a task that has
//     aligned a checkpoint for longer than that switches it to unaligned
//     (alignTimeout): the missing barriers already buffered overtake the
//     batches ahead of them (inputGate.promote) and an unaligned barrier
//     goes downstream.
//     Uploading, acknowledging and the coordinator are not here: the
//     taskmanager and jobmanager drive them through CheckpointHooks and
//     Task.TriggerCheckpoint / NotifyCheckpointComplete / Aborted;
//   - processing-time timers (proctime.go): between two events the task asks
//     the keyed-state backends of its stream.ProcessingTimeAware operators
//     for their earliest timer, and its stream.ProcessingTimeDeadline
//     operators (the watermarks operator's periodic emission) for their
//     deadline, calls an operator whose timer is due by the
//     task's clock (TaskSpec.Clock), and keeps one timer armed for the
//     earliest, which wakes the task through its control channel, so that
//     timers fire without input and nothing polls;
//   - containment of panics (panic.go): every call into operator or source
//     code recovers a panic into an error (ErrOperatorPanic) that fails
//     only that task, through the same path as an operator's error; a
//     panic of the runtime's own code fails the task too, or the network
//     stream when it happens in the exchange's goroutines, with the stack
//     logged, rather than ending the taskmanager with all its tasks.
//
// Wire format of batches is package dataflow/batchcodec.
//
// dataflow imports stream, statebackend and statebackend/backends (the
// keyed state of the chain's operators), dataflow/batchcodec, the
// generated proto/weirpb messages (used only by the network exchange
// adapter, remote.go), internal/errkind, gRPC and the standard library. It must not import
// the taskmanager or jobmanager.
package dataflow
