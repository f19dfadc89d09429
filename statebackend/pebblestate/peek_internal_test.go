package pebblestate

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/weirstream/weir/statebackend"
	"github.com/weirstream/weir/stream"
)

// Peek leaves a stub in the value cache (the value's length, not the
// value), so that writing the key back reads nothing; a Get after it
// still reads the value.
func TestPeekLeavesAStub(t *testing.T) {
	t.Parallel()
	b, err := New(Options{Dir: filepath.Join(t.TempDir(), "db"), DeleteOnClose: true}, stream.KeyGroupRange{Start: 0, End: 127})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	tb, err := b.Table(statebackend.Descriptor{Name: "v", Kind: statebackend.KindValue, Codec: statebackend.Untyped(statebackend.BytesCodec)})
	if err != nil {
		t.Fatal(err)
	}
	p := tb.(statebackend.Peeker)
	b.SetCurrentKey([]byte("k1"), 3)
	tb.Put(nil, []byte("hello"))
	b.dropCache() // written to Pebble, nothing cached
	if v, ok := p.Peek(nil); !ok || string(v.([]byte)) != "hello" {
		t.Fatalf("Peek = %q, %v", v, ok)
	}
	e := b.cache.lookup(tb.(*table).key(nil))
	if kv, klen := e.kv(); e == nil || e.flags&entStub == 0 || e.cur != 5 || len(kv) >= klen+5 {
		t.Fatalf("after Peek the cache holds %+v, want a stub of a 5-byte value", e)
	}
	reads := b.reads
	if v, ok := tb.Get(nil); !ok || string(v.([]byte)) != "hello" {
		t.Fatalf("Get after Peek = %q, %v", v, ok)
	}
	if b.reads != reads+1 {
		t.Fatalf("Get after Peek read %d times, want once", b.reads-reads)
	}
	if e.flags&entStub != 0 {
		t.Fatal("Get left the stub")
	}
	b.dropCache()
	p.Peek(nil)
	reads = b.reads
	tb.Put(nil, []byte("hi"))
	if b.reads != reads {
		t.Fatalf("Put over a stub read %d times, want none", b.reads-reads)
	}
	if want := int64(len(tb.(*table).key(nil)) + 2); b.SizeBytes() != want {
		t.Fatalf("SizeBytes %d after Put over a stub, want %d", b.SizeBytes(), want)
	}
	tb.Delete(nil)
	if b.SizeBytes() != 0 {
		t.Fatalf("SizeBytes %d after Delete, want 0", b.SizeBytes())
	}
	if _, ok := p.Peek(nil); ok {
		t.Fatal("Peek finds a deleted key")
	}
}

// Random Peeks, Gets, Puts and Deletes through a value cache a fraction
// of the keys' size read what an independent map holds, and SizeBytes
// stays the map's key and value bytes; after a flush every key reads back.
func TestPeekGetPutModel(t *testing.T) {
	t.Parallel()
	const keys = 2_000
	b, err := New(NoSync(Options{Dir: filepath.Join(t.TempDir(), "db"), ValueCacheBytes: 32 << 10, MemTableBytes: 256 << 10, DeleteOnClose: true}),
		stream.KeyGroupRange{Start: 0, End: 127})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	tb, err := b.Table(statebackend.Descriptor{Name: "v", Kind: statebackend.KindValue, Codec: statebackend.Untyped(statebackend.BytesCodec)})
	if err != nil {
		t.Fatal(err)
	}
	p := tb.(statebackend.Peeker)
	model := map[int][]byte{}
	var size int64
	stateKeyLen := func(i int) int64 { return int64(len(tb.(*table).key(nil))) }
	rng := rand.New(rand.NewPCG(11, 12))
	key := func(i int) []byte { return binary.BigEndian.AppendUint64(nil, uint64(i)*0x9e3779b97f4a7c15) }
	for step := range 20_000 {
		i := rng.IntN(keys)
		b.SetCurrentKey(key(i), i%128)
		want, has := model[i]
		switch op := rng.IntN(10); {
		case op < 3:
			v, ok := p.Peek(nil)
			if ok != has || ok && !bytes.Equal(v.([]byte), want) {
				t.Fatalf("step %d: Peek key %d = %x, %v; want %x, %v", step, i, v, ok, want, has)
			}
		case op < 6:
			v, ok := tb.Get(nil)
			if ok != has || ok && !bytes.Equal(v.([]byte), want) {
				t.Fatalf("step %d: Get key %d = %x, %v; want %x, %v", step, i, v, ok, want, has)
			}
		case op < 9:
			v := make([]byte, rng.IntN(40))
			for j := range v {
				v[j] = byte(rng.Uint32())
			}
			if has {
				size -= stateKeyLen(i) + int64(len(want))
			}
			tb.Put(nil, v)
			model[i] = v
			size += stateKeyLen(i) + int64(len(v))
		default:
			tb.Delete(nil)
			if has {
				size -= stateKeyLen(i) + int64(len(want))
			}
			delete(model, i)
		}
		if b.SizeBytes() != size {
			t.Fatalf("step %d: SizeBytes %d, want %d", step, b.SizeBytes(), size)
		}
		if err := b.Err(); err != nil {
			t.Fatal(err)
		}
	}
	b.dropCache()
	for i := range keys {
		b.SetCurrentKey(key(i), i%128)
		v, ok := tb.Get(nil)
		want, has := model[i]
		if ok != has || ok && !bytes.Equal(v.([]byte), want) {
			t.Fatalf("after a flush key %d reads %x, %v; want %x, %v", i, v, ok, want, has)
		}
	}
}
