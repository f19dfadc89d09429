package dataflow

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"sync"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/weirstream/weir/proto/weirpb"
)

// This file is the exchange's wire format. A network stream carries data
// frames from the sender to the receiver and credit frames back, both
// encoded by frameCodec, a gRPC codec selected by the stream's content
// subtype. It exists so that a batch is encoded once, into a pooled buffer,
// and handed to gRPC as is: no protobuf message is built around it and no
// copy of it is made before gRPC writes it to the connection; the receiver
// copies each batch once, from gRPC's read buffers into a pooled buffer the
// batch event owns.
//
// A data frame is
//
//	header length   uint32, little endian
//	header          (below)
//	payloads        the encoded batches (batchcodec) of the header's batch
//	                items, back to back, in order
//
// and its header
//
//	sender address  uvarint length, bytes (empty after the first frame)
//	items           uvarint count, then each item: a tag byte, the uvarint
//	                channel number, and per tag
//	  open          uvarint length, a weirpb.ChannelKey (protobuf)
//	  close         -
//	  batch         uvarint payload length
//	  zstd batch    uvarint payload length; the payload is compressed
//	  watermark     varint timestamp
//	  cell watermark varint timestamp, for the receiver's watermark cell
//	                of the channel's upstream subtask and edge (wmcell.go)
//	  end           -
//	  barrier       varint checkpoint id, varint trigger time, byte flags
//	                (0 aligned checkpoint, 1 savepoint, 2 unaligned checkpoint,
//	                3 aligned checkpoint that must stay aligned: event.final)
//
// Items apply in order. A credit frame is a uvarint count of grants, each
// a uvarint channel number and a uvarint number of credits.

// frameCodecName is the content subtype of exchange streams.
const frameCodecName = "weir-exchange-v1"

func init() { encoding.RegisterCodecV2(frameCodec{}) }

// Item tags of a data frame.
const (
	tagOpen byte = iota + 1
	tagClose
	tagBatch
	tagWatermark
	tagEnd
	tagBarrier
	tagBatchZstd
	tagWatermarkCell
	tagBarrierCell
)

// Limits a receiver applies to a frame's header, beyond gRPC's bound on
// the whole message.
const (
	maxFrameHeaderBytes = 16 << 20
	maxChannelKeyBytes  = 64 << 10
	maxSenderAddrBytes  = 1 << 10
)

// bufPool is a pool of byte buffers in power-of-two size classes that does
// not clear what it hands out: every user overwrites the bytes it reads
// (gRPC fills its read buffers, the codec its frames). It backs the
// exchange's batch payloads and gRPC's buffers on exchange connections.
type bufPool struct {
	classes [maxPoolClass + 1]sync.Pool
}

const (
	minPoolClass = 8  // 256 B
	maxPoolClass = 24 // 16 MiB; larger buffers are not pooled
)

var exchangePool = &bufPool{}

var _ mem.BufferPool = (*bufPool)(nil)

func poolClass(n int) int {
	if n <= 1<<minPoolClass {
		return minPoolClass
	}
	return bits.Len(uint(n - 1))
}

// Get returns a buffer of length n with unspecified contents.
func (p *bufPool) Get(n int) *[]byte {
	c := poolClass(n)
	if c > maxPoolClass {
		b := make([]byte, n)
		return &b
	}
	if v, ok := p.classes[c].Get().(*[]byte); ok {
		*v = (*v)[:n]
		return v
	}
	b := make([]byte, n, 1<<c)
	return &b
}

// Put returns a buffer obtained from Get.
func (p *bufPool) Put(b *[]byte) {
	c := cap(*b)
	if c < 1<<minPoolClass || c&(c-1) != 0 || c > 1<<maxPoolClass {
		return // not one of ours
	}
	*b = (*b)[:0]
	p.classes[bits.Len(uint(c))-1].Put(b)
}

// outFrame is a data frame to send. Marshal hands the payloads to gRPC,
// which returns them to exchangePool once written.
type outFrame struct {
	sender string
	items  []outItem
	size   int // set by marshal: the encoded size
}

// inFrame is a data frame received.
type inFrame struct {
	sender string
	items  []inItem
	hdr    []byte // scratch, reused across frames
}

// inItem is one item of a received frame. payload, for a batch, is a
// buffer of exchangePool the item owns.
type inItem struct {
	tag     byte
	id      uint32
	key     *weirpb.ChannelKey
	payload *[]byte
	value   int64
	ts      int64
	full    bool
	// unaligned: a barrier of an unaligned checkpoint.
	unaligned bool
	// final: an aligned barrier that must stay aligned (event.final).
	final bool
	zstd  bool // a batch whose payload is compressed
}

// creditFrame is a credit frame: grants by channel number.
type creditFrame struct {
	grants []creditGrant
}

type creditGrant struct {
	id      uint32
	credits uint32
}

type frameCodec struct{}

func (frameCodec) Name() string { return frameCodecName }

func (frameCodec) Marshal(v any) (mem.BufferSlice, error) {
	switch f := v.(type) {
	case *outFrame:
		return f.marshal()
	case *creditFrame:
		b := exchangePool.Get(0)
		*b = binary.AppendUvarint((*b)[:0], uint64(len(f.grants)))
		for _, g := range f.grants {
			*b = binary.AppendUvarint(*b, uint64(g.id))
			*b = binary.AppendUvarint(*b, uint64(g.credits))
		}
		return mem.BufferSlice{mem.NewBuffer(b, exchangePool)}, nil
	}
	return nil, fmt.Errorf("dataflow: exchange codec cannot marshal %T", v)
}

func (frameCodec) Unmarshal(data mem.BufferSlice, v any) error {
	switch f := v.(type) {
	case *inFrame:
		return f.unmarshal(data)
	case *creditFrame:
		buf := data.Materialize()
		n, k := binary.Uvarint(buf)
		if k <= 0 || n > uint64(len(buf)) {
			return errors.New("credit frame: bad grant count")
		}
		buf = buf[k:]
		f.grants = f.grants[:0]
		for range n {
			id, k1 := binary.Uvarint(buf)
			if k1 <= 0 || id > 1<<32-1 {
				return errors.New("credit frame: bad channel number")
			}
			c, k2 := binary.Uvarint(buf[k1:])
			if k2 <= 0 || c > 1<<32-1 {
				return errors.New("credit frame: bad credit count")
			}
			buf = buf[k1+k2:]
			f.grants = append(f.grants, creditGrant{id: uint32(id), credits: uint32(c)})
		}
		if len(buf) != 0 {
			return errors.New("credit frame: trailing bytes")
		}
		return nil
	}
	return fmt.Errorf("dataflow: exchange codec cannot unmarshal into %T", v)
}

// marshal encodes the header into a pooled buffer and passes the payloads
// on as they are; the frame no longer owns them.
func (f *outFrame) marshal() (mem.BufferSlice, error) {
	h := exchangePool.Get(256)
	b := append((*h)[:0], 0, 0, 0, 0)
	b = binary.AppendUvarint(b, uint64(len(f.sender)))
	b = append(b, f.sender...)
	b = binary.AppendUvarint(b, uint64(len(f.items)))
	npay := 0
	for i := range f.items {
		it := &f.items[i]
		switch {
		case it.open != nil:
			key, err := proto.Marshal(it.open)
			if err != nil {
				return nil, err
			}
			b = append(b, tagOpen)
			b = binary.AppendUvarint(b, uint64(it.id))
			b = binary.AppendUvarint(b, uint64(len(key)))
			b = append(b, key...)
		case it.close != nil:
			b = append(b, tagClose)
			b = binary.AppendUvarint(b, uint64(it.id))
		default:
			switch it.kind {
			case eventBatch:
				tag := tagBatch
				if it.zstd {
					tag = tagBatchZstd
				}
				b = append(b, tag)
				b = binary.AppendUvarint(b, uint64(it.id))
				b = binary.AppendUvarint(b, uint64(len(*it.payload)))
				npay++
			case eventWatermark:
				tag := tagWatermark
				if it.cell {
					tag = tagWatermarkCell
				}
				b = append(b, tag)
				b = binary.AppendUvarint(b, uint64(it.id))
				b = binary.AppendVarint(b, it.value)
			case eventEndOfPartition:
				b = append(b, tagEnd)
				b = binary.AppendUvarint(b, uint64(it.id))
			case eventBarrier:
				tag := tagBarrier
				if it.cell {
					tag = tagBarrierCell
				}
				b = append(b, tag)
				b = binary.AppendUvarint(b, uint64(it.id))
				b = binary.AppendVarint(b, it.value)
				b = binary.AppendVarint(b, it.ts)
				flags := byte(0)
				switch {
				case it.full:
					flags = 1
				case it.unaligned:
					flags = 2
				case it.final:
					flags = 3
				}
				b = append(b, flags)
			default:
				return nil, fmt.Errorf("dataflow: exchange codec: event of kind %v cannot be sent", it.kind)
			}
		}
	}
	binary.LittleEndian.PutUint32(b, uint32(len(b)-4))
	f.size = len(b)
	*h = b
	out := make(mem.BufferSlice, 0, 1+npay)
	out = append(out, mem.NewBuffer(h, exchangePool))
	for i := range f.items {
		if p := f.items[i].payload; p != nil {
			f.size += len(*p)
			out = append(out, mem.NewBuffer(p, exchangePool))
			f.items[i].payload = nil
		}
	}
	return out, nil
}

// unmarshal decodes a data frame; each batch payload is copied into a
// buffer of its own.
func (f *inFrame) unmarshal(data mem.BufferSlice) error {
	f.sender, f.items = "", f.items[:0]
	r := data.Reader()
	defer r.Close()
	var lb [4]byte
	if _, err := io.ReadFull(r, lb[:]); err != nil {
		return errors.New("data frame: shorter than its header length")
	}
	hl := int(binary.LittleEndian.Uint32(lb[:]))
	if hl > maxFrameHeaderBytes || hl > r.Remaining() {
		return fmt.Errorf("data frame: header of %d bytes, but the frame has %d more", hl, r.Remaining())
	}
	if cap(f.hdr) < hl {
		f.hdr = make([]byte, hl)
	}
	f.hdr = f.hdr[:hl]
	if _, err := io.ReadFull(r, f.hdr); err != nil {
		return errors.New("data frame: short header")
	}
	if err := f.parseHeader(f.hdr); err != nil {
		return fmt.Errorf("data frame: %w", err)
	}
	for i := range f.items {
		it := &f.items[i]
		if it.tag != tagBatch {
			continue
		}
		n := int(it.value)
		if n > r.Remaining() {
			f.releasePayloads()
			return fmt.Errorf("data frame: batch of %d bytes, but the frame has %d more", n, r.Remaining())
		}
		p := exchangePool.Get(n)
		if _, err := io.ReadFull(r, *p); err != nil {
			exchangePool.Put(p)
			f.releasePayloads()
			return errors.New("data frame: short batch")
		}
		it.payload, it.value = p, 0
	}
	if r.Remaining() != 0 {
		f.releasePayloads()
		return fmt.Errorf("data frame: %d bytes after the last batch", r.Remaining())
	}
	return nil
}

// releasePayloads returns the payloads the frame still owns to the pool.
func (f *inFrame) releasePayloads() {
	for i := range f.items {
		if p := f.items[i].payload; p != nil {
			exchangePool.Put(p)
			f.items[i].payload = nil
		}
	}
}

// parseHeader fills f.sender and f.items from a header; a batch item's
// value is its payload length until unmarshal reads the payload.
func (f *inFrame) parseHeader(b []byte) error {
	d := hdrReader{b: b}
	if n := d.uvarint(); n > maxSenderAddrBytes {
		return fmt.Errorf("sender address of %d bytes", n)
	} else {
		f.sender = string(d.bytes(int(n)))
	}
	n := d.uvarint()
	if d.err == nil && n > uint64(len(b)) { // every item takes at least 2 bytes
		return fmt.Errorf("%d items in a header of %d bytes", n, len(b))
	}
	for i := uint64(0); i < n && d.err == nil; i++ {
		it := inItem{tag: d.byte()}
		id := d.uvarint()
		if id > 1<<32-1 {
			return fmt.Errorf("channel number %d out of range", id)
		}
		it.id = uint32(id)
		switch it.tag {
		case tagOpen:
			kl := d.uvarint()
			if kl > maxChannelKeyBytes {
				return fmt.Errorf("channel key of %d bytes", kl)
			}
			kb := d.bytes(int(kl))
			if d.err != nil {
				break
			}
			it.key = &weirpb.ChannelKey{}
			if err := proto.Unmarshal(kb, it.key); err != nil {
				return fmt.Errorf("channel key: %w", err)
			}
		case tagClose, tagEnd:
		case tagBatch, tagBatchZstd:
			it.zstd = it.tag == tagBatchZstd
			it.tag = tagBatch
			pl := d.uvarint()
			if pl > uint64(len(b))+1<<31 {
				return fmt.Errorf("batch of %d bytes", pl)
			}
			it.value = int64(pl)
		case tagWatermark, tagWatermarkCell:
			it.value = d.varint()
		case tagBarrier, tagBarrierCell:
			it.value, it.ts = d.varint(), d.varint()
			switch d.byte() {
			case 0:
			case 1:
				it.full = true
			case 2:
				it.unaligned = true
			case 3:
				it.final = true
			default:
				return errors.New("barrier: bad flags")
			}
		default:
			if d.err == nil {
				return fmt.Errorf("unknown item tag %d", it.tag)
			}
		}
		f.items = append(f.items, it)
	}
	if d.err != nil {
		return d.err
	}
	if len(d.b) != 0 {
		return fmt.Errorf("%d bytes after the last item of the header", len(d.b))
	}
	return nil
}

// hdrReader reads a frame header; the first error sticks.
type hdrReader struct {
	b   []byte
	err error
}

var errShortHeader = errors.New("header ends inside an item")

func (d *hdrReader) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, k := binary.Uvarint(d.b)
	if k <= 0 {
		d.err = errShortHeader
		return 0
	}
	d.b = d.b[k:]
	return v
}

func (d *hdrReader) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, k := binary.Varint(d.b)
	if k <= 0 {
		d.err = errShortHeader
		return 0
	}
	d.b = d.b[k:]
	return v
}

func (d *hdrReader) byte() byte {
	if d.err != nil || len(d.b) == 0 {
		d.err = errShortHeader
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *hdrReader) bytes(n int) []byte {
	if d.err != nil || n > len(d.b) || n < 0 {
		d.err = errShortHeader
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}
