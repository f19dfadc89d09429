package dataflow

import "github.com/weirstream/weir/stream"

// watermarkCombiner turns per-channel watermarks into the operator's
// watermark: an input's watermark is the minimum over its channels, and the
// operator's the minimum over its inputs. It is pure bookkeeping, driven by
// the task goroutine.
type watermarkCombiner struct {
	channel  []int64 // per channel
	inputOf  []int   // channel -> input
	byInput  [][]int // input -> channels
	input    []int64 // per input
	combined int64
}

// newWatermarkCombiner tracks channels where channel i belongs to input
// inputOf[i]; every input in [0, inputs) must have at least one channel.
func newWatermarkCombiner(inputOf []int, inputs int) *watermarkCombiner {
	w := &watermarkCombiner{
		channel:  make([]int64, len(inputOf)),
		inputOf:  append([]int(nil), inputOf...),
		byInput:  make([][]int, inputs),
		input:    make([]int64, inputs),
		combined: stream.MinWatermark,
	}
	for i, in := range inputOf {
		w.channel[i] = stream.MinWatermark
		w.byInput[in] = append(w.byInput[in], i)
	}
	for i := range w.input {
		w.input[i] = stream.MinWatermark
	}
	return w
}

// update records watermark wm on channel ch (an ended channel reports
// stream.MaxWatermark) and returns the combined watermark and whether it
// advanced. A watermark below the channel's current one is ignored.
func (w *watermarkCombiner) update(ch int, wm int64) (int64, bool) {
	if wm <= w.channel[ch] {
		return w.combined, false
	}
	w.channel[ch] = wm
	in := w.inputOf[ch]
	m := stream.MaxWatermark
	for _, c := range w.byInput[in] {
		m = min(m, w.channel[c])
	}
	if m == w.input[in] {
		return w.combined, false
	}
	w.input[in] = m
	c := stream.MaxWatermark
	for _, v := range w.input {
		c = min(c, v)
	}
	if c <= w.combined {
		return w.combined, false
	}
	w.combined = c
	return c, true
}
