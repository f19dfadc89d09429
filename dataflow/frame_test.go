package dataflow

import (
	"bytes"
	"testing"

	"google.golang.org/grpc/mem"

	"github.com/weirstream/weir/dataflow/batchcodec"
)

// roundTrip marshals f's items and unmarshals them, split into gRPC-sized
// pieces as a receiver sees them.
func roundTrip(t testing.TB, f *outFrame) (*inFrame, error) {
	t.Helper()
	out, err := frameCodec{}.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	wire := out.Materialize()
	out.Free()
	var in inFrame
	return &in, frameCodec{}.Unmarshal(splitBuffers(wire, 7), &in)
}

// splitBuffers cuts b into pieces of n bytes.
func splitBuffers(b []byte, n int) mem.BufferSlice {
	var s mem.BufferSlice
	for len(b) > 0 {
		k := min(n, len(b))
		s = append(s, mem.SliceBuffer(append([]byte(nil), b[:k]...)))
		b = b[k:]
	}
	return s
}

// TestFrameRoundTrip: every kind of item crosses the wire with its fields
// and batches intact, in order, however gRPC splits the frame.
func TestFrameRoundTrip(t *testing.T) {
	key := channelKey{JobID: "job-1", Attempt: 3, UpstreamVertex: 1, UpstreamSubtask: 2, DownstreamVertex: 4, DownstreamInput: 1, DownstreamSub: 7}
	var payloads [][]byte
	items := []outItem{{id: 9, open: keyToProto(key)}}
	for i := range 3 {
		b := keyBatch(int64(100 + i))
		p := batchcodec.Append(nil, b)
		b.Release()
		payloads = append(payloads, append([]byte(nil), p...))
		items = append(items, outItem{id: 9, kind: eventBatch, payload: &p})
	}
	items = append(items,
		outItem{id: 9, kind: eventWatermark, value: -5},
		outItem{id: 9, kind: eventWatermark, value: 1 << 40, cell: true},
		outItem{id: 9, kind: eventBarrier, value: 42, ts: 1234567, full: true},
		outItem{id: 9, kind: eventBarrier, value: 43, ts: 7},
		outItem{id: 9, kind: eventBarrier, value: 44, ts: 8, unaligned: true},
		outItem{id: 9, kind: eventBarrier, value: 45, ts: 9, final: true},
		outItem{id: 9, kind: eventBarrier, value: 46, ts: 10, full: true, cell: true},
		outItem{id: 9, kind: eventEndOfPartition},
		outItem{id: 9, close: make(chan struct{})})
	f := &outFrame{sender: "10.0.0.1:6124", items: items}
	in, err := roundTrip(t, f)
	if err != nil {
		t.Fatal(err)
	}
	defer in.releasePayloads()
	if in.sender != f.sender || len(in.items) != len(items) {
		t.Fatalf("got sender %q and %d items, want %q and %d", in.sender, len(in.items), f.sender, len(items))
	}
	if got := keyFromProto(in.items[0].key); in.items[0].tag != tagOpen || got != key {
		t.Fatalf("open: %+v", in.items[0])
	}
	for i := range 3 {
		it := in.items[1+i]
		if it.tag != tagBatch || it.payload == nil || !bytes.Equal(*it.payload, payloads[i]) {
			t.Fatalf("batch %d does not match what was sent", i)
		}
	}
	want := []inItem{
		{tag: tagWatermark, id: 9, value: -5},
		{tag: tagWatermarkCell, id: 9, value: 1 << 40},
		{tag: tagBarrier, id: 9, value: 42, ts: 1234567, full: true},
		{tag: tagBarrier, id: 9, value: 43, ts: 7},
		{tag: tagBarrier, id: 9, value: 44, ts: 8, unaligned: true},
		{tag: tagBarrier, id: 9, value: 45, ts: 9, final: true},
		{tag: tagBarrierCell, id: 9, value: 46, ts: 10, full: true},
		{tag: tagEnd, id: 9},
		{tag: tagClose, id: 9},
	}
	for i, w := range want {
		if got := in.items[4+i]; got.tag != w.tag || got.id != w.id || got.value != w.value || got.ts != w.ts || got.full != w.full ||
			got.unaligned != w.unaligned || got.final != w.final {
			t.Fatalf("item %d: got %+v, want %+v", 4+i, got, w)
		}
	}
	if sum := len(payloads[0]) + len(payloads[1]) + len(payloads[2]); f.size <= sum+len(f.sender) {
		t.Fatalf("marshal reported %d bytes for %d bytes of batches and a header", f.size, sum)
	}
}

// TestFrameRejectsDamage: a frame cut short or with bytes added is refused.
func TestFrameRejectsDamage(t *testing.T) {
	b := keyBatch(1)
	p := batchcodec.Append(nil, b)
	b.Release()
	out, err := frameCodec{}.Marshal(&outFrame{items: []outItem{{id: 1, kind: eventBatch, payload: &p}, {id: 1, kind: eventWatermark, value: 3}}})
	if err != nil {
		t.Fatal(err)
	}
	wire := out.Materialize()
	for _, bad := range [][]byte{wire[:len(wire)-1], append(append([]byte(nil), wire...), 0), wire[:3], wire[:10]} {
		var in inFrame
		if err := (frameCodec{}).Unmarshal(splitBuffers(bad, 5), &in); err == nil {
			t.Fatalf("a damaged frame of %d bytes (of %d) was accepted", len(bad), len(wire))
		}
	}
}

// FuzzFrameUnmarshal: no input makes the receiver panic or keep a payload
// longer than the frame.
func FuzzFrameUnmarshal(f *testing.F) {
	b := keyBatch(1)
	p := batchcodec.Append(nil, b)
	b.Release()
	out, _ := frameCodec{}.Marshal(&outFrame{sender: "a:1", items: []outItem{
		{id: 1, open: keyToProto(channelKey{JobID: "j"})},
		{id: 1, kind: eventBatch, payload: &p},
		{id: 1, kind: eventBarrier, value: 2, ts: 3},
		{id: 1, kind: eventWatermark, value: 4},
	}})
	f.Add(out.Materialize())
	f.Fuzz(func(t *testing.T, data []byte) {
		var in inFrame
		if err := (frameCodec{}).Unmarshal(splitBuffers(data, 11), &in); err != nil {
			return
		}
		total := 0
		for _, it := range in.items {
			if it.payload != nil {
				total += len(*it.payload)
			}
		}
		if total > len(data) {
			t.Fatalf("payloads of %d bytes from a frame of %d", total, len(data))
		}
		in.releasePayloads()
	})
}
