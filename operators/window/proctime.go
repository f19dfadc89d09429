package window

import (
	"github.com/weirstream/weir/operators/internal/rowenc"
	"github.com/weirstream/weir/stream"
)

// Processing-time tumbling windows (WindowConfig.Time "processing").
//
// A batch goes whole into the window of the task's clock when it arrives:
// its rows update their keys' slots in that window's pane (the window is
// one pane), and a key's slot created in a pane registers, for that key, a
// processing-time timer at the window's end. The timer fires once the
// clock reaches the end, when no record can join the window any more: it
// queues the key's row and deletes the slot. Slots and timers are keyed
// state, so a checkpoint holds the pending windows with their timers,
// rescaling moves them together by key group, and a restored timer whose
// time has passed fires at once (the runtime calls OnProcessingTime). The
// pane index, watermarks and lateness play no part.

// processBatch adds the rows of b to their keys' slots in the window of
// the current processing time, registering the timer of each slot it
// creates.
func (w *Window) processBatch(b *stream.Batch) {
	n := b.Len()
	if cap(w.ws) < n {
		w.ws = make([][]int64, n)
		w.mask = make([][]int64, n)
	}
	ws := w.ws[:n]
	if w.keyed {
		w.keys.Encode(b)
	} else {
		rowenc.PadBatchNulls(b)
	}
	p := w.paneStart(w.clock())
	end := p + w.spec.size
	w.gen++ // forget the slots of earlier batches
	for i := range n {
		key, g := w.key(i)
		var h uint64
		if w.keyed {
			h = w.keys.Hash(i)
		}
		m := &w.memo[h&(memoSize-1)]
		if m.gen == w.gen && m.hash == h {
			if k, mg, _ := w.slots.SlotKey(m.slot); mg == g && string(k) == string(key) {
				ws[i] = w.slots.Words(m.slot)
				continue // the slot of an earlier row of this batch
			}
		}
		slot, created := w.slots.Slot(key, g, p)
		*m = memoEntry{gen: w.gen, hash: h, pane: p, slot: slot}
		ws[i] = w.slots.Words(slot)
		if created {
			w.b.SetCurrentKey(key, g)
			w.b.Timers().RegisterProcessingTimeTimer(end)
		}
	}
	w.lay.update(b, ws, w.mask[:n])
	clear(ws)
	w.evict()
}

// OnProcessingTime fires the processing-time windows whose end is at or
// before now and emits their rows, ordered by window end and key value.
// An event-time window has no processing-time timers: it fires nothing.
func (w *Window) OnProcessingTime(now int64, out stream.Collector) error {
	err := w.b.Timers().AdvanceProcessingTime(now, w.fireProcessing)
	w.emitPending(out)
	if w.spec.processing {
		w.evict()
	}
	return err
}

// fireProcessing is key's timer at end: it queues the key's row of the
// window ending at end, if the key has data in it, and deletes the slot.
// A key that is not resident is read and written whole, without making
// it resident.
func (w *Window) fireProcessing(key []byte, g int, end int64) error {
	start := end - w.spec.size
	if w.slots.Spills() && !w.slots.Resident(key, g) {
		recs := w.slots.ReadKey(key, g)
		keep := recs[:0:0]
		for _, r := range recs {
			if r.NS == start {
				w.panes = append(w.panes[:0], paneRef{r.NS, r.Words})
				w.queue(key, end)
			} else {
				keep = append(keep, r)
			}
		}
		if len(keep) != len(recs) {
			w.slots.WriteKey(key, g, keep)
		}
		return nil
	}
	words, ok := w.slots.Lookup(key, g, start)
	if !ok {
		return nil // fired already (a timer registered twice)
	}
	w.panes = append(w.panes[:0], paneRef{start, words})
	w.queue(key, end)
	w.slots.Delete(key, g, start)
	return nil
}
