package heap_test

import (
	"encoding/binary"
	"hash/crc32"
	"testing"

	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/statebackend/heap"
	"github.com/weirstream/weir/stream"
)

const fuzzKG = 3

var fuzzRange = stream.KeyGroupRange{Start: 0, End: 7}

// seedChunk returns a real chunk of key group fuzzKG with every kind of
// state and timers of both domains (a version 2 chunk).
func seedChunk(tb testing.TB) []byte {
	b := heap.New(fuzzRange)
	v, _ := statebackend.GetValueState(b, "v", statebackend.Int64Codec)
	l, _ := statebackend.GetListState(b, "l", statebackend.StringCodec)
	m, _ := statebackend.GetMapState(b, "m", statebackend.StringCodec, statebackend.BytesCodec)
	r, _ := statebackend.GetReducingState(b, "r", statebackend.Float64Codec, func(a, b float64) float64 { return a + b })
	for _, k := range []string{"a", "bb", ""} {
		b.SetCurrentKey([]byte(k), fuzzKG)
		v.Update(int64(len(k)) * 1000)
		l.AddAll([]string{"x", k})
		m.Put(k, []byte{1, 2, 3})
		r.Add(1.5)
		b.Timers().RegisterEventTimeTimer(int64(len(k)) - 1)
		b.Timers().RegisterProcessingTimeTimer(int64(len(k)) + 5)
	}
	c := &stream.SnapshotContext{KeyGroups: fuzzRange}
	if err := b.Snapshot(c); err != nil {
		tb.Fatal(err)
	}
	return c.State.Keyed[fuzzKG][0]
}

// FuzzRestore feeds arbitrary chunks to Restore: it must never panic, and a
// chunk it accepts must survive a snapshot and restore with the same keys.
// With fixCRC the checksum is recomputed, so that the fuzzer gets past it
// into the decoder.
func FuzzRestore(f *testing.F) {
	good := seedChunk(f)
	f.Add(good, false)
	f.Add(good, true)
	f.Add(good[:len(good)/2], true)
	f.Add([]byte("WKG\x01"), true)
	f.Add([]byte("WKG\x02"), true)
	f.Add([]byte{}, false)
	castagnoli := crc32.MakeTable(crc32.Castagnoli)
	f.Fuzz(func(t *testing.T, chunk []byte, fixCRC bool) {
		if fixCRC && len(chunk) >= 4 {
			chunk = append([]byte(nil), chunk...)
			body := chunk[:len(chunk)-4]
			binary.LittleEndian.PutUint32(chunk[len(chunk)-4:], crc32.Checksum(body, castagnoli))
		}
		b := heap.New(fuzzRange)
		err := b.Restore(&stream.RestoreContext{KeyGroups: fuzzRange, State: &stream.OperatorSnapshot{Keyed: map[int][][]byte{fuzzKG: {chunk}}}})
		if err != nil {
			return
		}
		c := &stream.SnapshotContext{KeyGroups: fuzzRange}
		if err := b.Snapshot(c); err != nil {
			t.Fatalf("snapshot of accepted chunk: %v", err)
		}
		b2 := heap.New(fuzzRange)
		if err := b2.Restore(&stream.RestoreContext{KeyGroups: fuzzRange, State: &c.State}); err != nil {
			t.Fatalf("restore of a re-snapshotted chunk: %v", err)
		}
		for kg := range c.State.Keyed {
			if kg != fuzzKG {
				t.Fatalf("chunk of key group %d became state of key group %d", fuzzKG, kg)
			}
		}
		// Asking for tables with byte codecs decodes anything.
		for _, name := range []string{"v", "l", "m", "r"} {
			n1, n2 := 0, 0
			b.Keys(name, fuzzKG, func([]byte) bool { n1++; return true })
			b2.Keys(name, fuzzKG, func([]byte) bool { n2++; return true })
			if n1 != n2 {
				t.Fatalf("table %s: %d keys, %d after a second round trip", name, n1, n2)
			}
		}
		if _, err := b.Table(statebackend.Descriptor{Name: "v", Kind: statebackend.KindValue, Codec: statebackend.Untyped(statebackend.BytesCodec)}); err == nil {
			b.SetCurrentKey([]byte("a"), fuzzKG)
			_ = b.Timers().AdvanceWatermark(stream.MaxWatermark, func([]byte, int, int64) error { return nil })
		}
	})
}
