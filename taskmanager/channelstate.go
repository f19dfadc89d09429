package taskmanager

import "github.com/weirstream/weir/proto/weirpb"

// markChannelState records on the handle of the head operator's own (not
// union) snapshot that it holds n bytes of channel state of an unaligned
// checkpoint (dataflow.SnapshotStats.ChannelStateBytes; the records its
// barrier overtook), so that the checkpoint's manifest says so and the
// jobmanager refuses to restore it at another parallelism.
func markChannelState(handles []*weirpb.StateHandle, headUID string, n int64) {
	if n <= 0 {
		return
	}
	for _, h := range handles {
		if h.GetOperatorUid() == headUID && !h.GetUnionOnly() {
			h.ChannelStateBytes = n
			return
		}
	}
}
