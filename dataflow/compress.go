package dataflow

import (
	"bytes"
	"errors"
	"fmt"
	"sync"

	"github.com/klauspost/compress/zstd"

	"github.com/weirstream/weir/dataflow/batchcodec"
	"github.com/weirstream/weir/stream"
)

// Compression of batches on the network (ExchangeConfig.Compression). The
// sender compresses each batch's encoding on the producing task's
// goroutine and keeps the compressed form only when it is smaller; the
// receiver's consuming task decompresses it before decoding. A frame says
// per batch whether it is compressed, so the two ends need not agree on
// the setting.
const (
	CompressionNone = "none"
	CompressionZstd = "zstd"
)

// maxDecompressedBatch bounds what one compressed batch may expand to, so
// that a damaged or hostile frame cannot make the receiver allocate
// without limit.
const maxDecompressedBatch = 256 << 20

var (
	zstdOnce sync.Once
	zstdEnc  *zstd.Encoder
	zstdDec  *zstd.Decoder
	zstdErr  error
)

// zstdCodecs returns the shared encoder and decoder; their EncodeAll and
// DecodeAll are safe for concurrent use.
func zstdCodecs() (*zstd.Encoder, *zstd.Decoder, error) {
	zstdOnce.Do(func() {
		zstdEnc, zstdErr = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
		if zstdErr != nil {
			return
		}
		zstdDec, zstdErr = zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecoderMaxMemory(maxDecompressedBatch))
	})
	return zstdEnc, zstdDec, zstdErr
}

// compressPayload returns a pooled buffer holding src compressed, or nil
// when compression does not make it smaller.
func compressPayload(src []byte) *[]byte {
	enc, _, err := zstdCodecs()
	if err != nil {
		return nil
	}
	buf := exchangePool.Get(len(src))
	out := enc.EncodeAll(src, (*buf)[:0])
	if len(out) >= len(src) || cap(out) != cap(*buf) {
		exchangePool.Put(buf)
		return nil
	}
	*buf = out
	return buf
}

// decompressPayload returns a pooled buffer holding src decompressed.
func decompressPayload(src []byte) (*[]byte, error) {
	_, dec, err := zstdCodecs()
	if err != nil {
		return nil, err
	}
	buf := exchangePool.Get(4 * len(src))
	out, err := dec.DecodeAll(src, (*buf)[:0])
	if err != nil {
		exchangePool.Put(buf)
		return nil, fmt.Errorf("a compressed batch does not decompress: %w", err)
	}
	if len(out) > maxDecompressedBatch {
		return nil, errors.New("a compressed batch decompresses beyond the limit")
	}
	if cap(out) != cap(*buf) { // grown beyond the pooled buffer
		exchangePool.Put(buf)
		b := out
		return &b, nil
	}
	*buf = out
	return buf, nil
}

// plainPayload returns the encoding a network event carries, decompressed
// if it is compressed: then also the pooled buffer holding it, which the
// caller returns to exchangePool.
func plainPayload(e *event) ([]byte, *[]byte, error) {
	if !e.zstd {
		return e.data(), nil, nil
	}
	raw, err := decompressPayload(e.data())
	if err != nil {
		return nil, nil, err
	}
	return *raw, raw, nil
}

// decodePayload decodes the batch a network event carries with the channel
// dictionary dec.
func decodePayload(e *event, schema *stream.Schema, dec *batchcodec.Decoder) (*stream.Batch, error) {
	data, raw, err := plainPayload(e)
	if err != nil {
		return nil, err
	}
	if raw != nil {
		defer exchangePool.Put(raw)
	}
	return dec.Decode(data, schema)
}

// selfContained returns the batch of e encoded on its own, without a
// channel dictionary, in a copy e does not share: the form in which a
// checkpoint keeps batches in flight. A network batch that refers to its
// channel's dictionary is decoded with dec, which must hold the dictionary
// as it is just before e (the batches ahead of e decoded with it), and
// encoded anew.
func selfContained(e *event, dec *batchcodec.Decoder, schema *stream.Schema) ([]byte, error) {
	if e.batch != nil {
		return batchcodec.Append(nil, e.batch), nil
	}
	data, raw, err := plainPayload(e)
	if err != nil {
		return nil, err
	}
	if raw != nil {
		defer exchangePool.Put(raw)
	}
	if !batchcodec.UsesChannelDictionary(data) {
		return bytes.Clone(data), nil
	}
	if dec == nil {
		dec = &batchcodec.Decoder{}
	}
	b, err := dec.Decode(data, schema)
	if err != nil {
		return nil, err
	}
	defer b.Release()
	return batchcodec.Append(nil, b), nil
}
