package dataflow

import "github.com/weirstream/weir/stream"

// watermarkCombiner turns per-channel watermarks into the operator's
// watermark: an input's watermark is the minimum over its channels, and the
// operator's the minimum over its inputs. It is pure bookkeeping, driven by
// the task goroutine.
//
// Each input keeps its channels in a min-heap by watermark, so an update
// costs O(log p) for an input of p channels rather than a scan of all of
// them: on a wide keyBy every upstream subtask's watermark reaches every
// downstream subtask, p watermarks per round for each of p tasks.
type watermarkCombiner struct {
	channel []int64 // per channel
	inputOf []int   // channel -> input
	byInput [][]int // input -> channels
	// heap[in] holds input in's channels, a min-heap by channel
	// watermark; pos[ch] is ch's index in its input's heap.
	heap     [][]int
	pos      []int
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
		heap:     make([][]int, inputs),
		pos:      make([]int, len(inputOf)),
		input:    make([]int64, inputs),
		combined: stream.MinWatermark,
	}
	for i, in := range inputOf {
		w.channel[i] = stream.MinWatermark
		w.byInput[in] = append(w.byInput[in], i)
		w.pos[i] = len(w.heap[in])
		w.heap[in] = append(w.heap[in], i) // all equal: a valid heap
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
	w.down(w.heap[in], w.pos[ch])
	m := w.channel[w.heap[in][0]]
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

// down restores the heap order of h after the watermark of the channel at
// index i grew.
func (w *watermarkCombiner) down(h []int, i int) {
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		c := l
		if r := l + 1; r < len(h) && w.channel[h[r]] < w.channel[h[l]] {
			c = r
		}
		if w.channel[h[i]] <= w.channel[h[c]] {
			return
		}
		h[i], h[c] = h[c], h[i]
		w.pos[h[i]], w.pos[h[c]] = i, c
		i = c
	}
}
