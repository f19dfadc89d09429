package connectors

import (
	"math/bits"

	"github.com/weirstream/weir/stream"
)

// The datagen value functions hash (field seed, seq) with splitmix64
// (stream.Mix64). They are part of the generated data's definition:
// changing them changes every generated row, so a job replayed after an
// upgrade would see other data.
const golden = stream.Golden64

func mix64(z uint64) uint64 { return stream.Mix64(z) }

// fieldSeed derives the hash seed of field number field from the job's seed.
func fieldSeed(seed int64, field int) uint64 {
	return mix64(uint64(seed) ^ mix64(uint64(field)+golden))
}

// seqHash is the uniform 64-bit hash of row seq for a field seeded fs.
func seqHash(fs uint64, seq int64) uint64 {
	return mix64(fs + uint64(seq)*golden)
}

// below maps a uniform h to [0, n) (Lemire's multiply-shift, cheaper than %).
func below(h, n uint64) uint64 {
	hi, _ := bits.Mul64(h, n)
	return hi
}
