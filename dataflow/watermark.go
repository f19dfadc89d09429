package dataflow

import "github.com/weirstream/weir/stream"

// watermarkCombiner turns per-channel watermarks into the operator's
// watermark: an input's watermark is the minimum over its channels, and the
// operator's the minimum over its inputs. It is pure bookkeeping, driven by
// the task goroutine.
//
// Each input keeps its minimum and how many of its channels are at it. An
// update of a channel above the minimum costs nothing more; only the update
// that moves the last channel off the minimum scans the input's channels
// again. On a wide keyBy every upstream subtask's watermark reaches every
// downstream subtask in rounds, p watermarks per round for each of p
// tasks, and a round then costs each task one scan: O(1) a watermark. The
// worst case, where the update always lands on the input's only slowest
// channel, is a scan of contiguous memory per update.
type watermarkCombiner struct {
	channel []int64 // per channel
	inputOf []int   // channel -> input
	byInput [][]int // input -> channels
	input   []inputWatermark
	// combined is the operator's watermark so far: the minimum over the
	// inputs, never lowered.
	combined int64
}

// inputWatermark is the minimum over one input's channels and how many of
// them are at it.
type inputWatermark struct {
	min   int64
	atMin int
}

// newWatermarkCombiner tracks channels where channel i belongs to input
// inputOf[i]. An input in [0, inputs) without channels does not hold the
// operator's watermark back.
func newWatermarkCombiner(inputOf []int, inputs int) *watermarkCombiner {
	w := &watermarkCombiner{
		channel:  make([]int64, len(inputOf)),
		inputOf:  append([]int(nil), inputOf...),
		byInput:  make([][]int, inputs),
		input:    make([]inputWatermark, inputs),
		combined: stream.MinWatermark,
	}
	for i, in := range inputOf {
		w.channel[i] = stream.MinWatermark
		w.byInput[in] = append(w.byInput[in], i)
	}
	for in := range w.input {
		w.rescan(in)
	}
	return w
}

// rescan computes input in's minimum and how many channels are at it.
func (w *watermarkCombiner) rescan(in int) {
	m, n := stream.MaxWatermark, 0
	for _, c := range w.byInput[in] {
		switch v := w.channel[c]; {
		case v < m:
			m, n = v, 1
		case v == m:
			n++
		}
	}
	w.input[in] = inputWatermark{min: m, atMin: n}
}

// update records watermark wm on channel ch (an ended channel reports
// stream.MaxWatermark) and returns the combined watermark and whether it
// advanced. A watermark below the channel's current one is ignored.
func (w *watermarkCombiner) update(ch int, wm int64) (int64, bool) {
	old := w.channel[ch]
	if wm <= old {
		return w.combined, false
	}
	w.channel[ch] = wm
	in := w.inputOf[ch]
	iw := &w.input[in]
	if old != iw.min {
		return w.combined, false // the input's minimum is elsewhere
	}
	if iw.atMin--; iw.atMin > 0 {
		return w.combined, false // other channels are still at it
	}
	w.rescan(in)
	c := stream.MaxWatermark
	for _, v := range w.input {
		c = min(c, v.min)
	}
	if c <= w.combined {
		return w.combined, false
	}
	w.combined = c
	return c, true
}
