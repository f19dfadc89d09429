package connectors

import "math/bits"

// The datagen value functions hash (field seed, seq) with splitmix64. They are
// part of the generated data's definition: changing them changes every
// generated row, so a job replayed after an upgrade would see other data.
const (
	golden = 0x9e3779b97f4a7c15
	mixM1  = 0xbf58476d1ce4e5b9
	mixM2  = 0x94d049bb133111eb
)

func mix64(z uint64) uint64 {
	z = (z ^ z>>30) * mixM1
	z = (z ^ z>>27) * mixM2
	return z ^ z>>31
}

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
