package stream

import (
	"fmt"
	"math"
	"math/bits"
)

// DefaultMaxParallelism is the number of key groups when a job does not set
// one. It bounds how far a keyed job can later be scaled out.
const DefaultMaxParallelism = 128

// KeyGroupRange is the inclusive range [Start, End] of key groups one subtask
// owns. An empty range has End < Start.
type KeyGroupRange struct{ Start, End int }

// Contains reports whether kg is in r.
func (r KeyGroupRange) Contains(kg int) bool { return kg >= r.Start && kg <= r.End }

// Len returns the number of key groups in r.
func (r KeyGroupRange) Len() int { return max(0, r.End-r.Start+1) }

func (r KeyGroupRange) String() string { return fmt.Sprintf("[%d..%d]", r.Start, r.End) }

// KeyGroupRangeFor returns the contiguous key groups that subtask index of an
// operator with parallelism owns when there are maxParallelism key groups.
// Together the ranges of all subtasks cover [0, maxParallelism) exactly once.
func KeyGroupRangeFor(maxParallelism, parallelism, index int) KeyGroupRange {
	start := (index*maxParallelism + parallelism - 1) / parallelism
	end := ((index+1)*maxParallelism+parallelism-1)/parallelism - 1
	return KeyGroupRange{Start: start, End: end}
}

// SubtaskForKeyGroup returns the subtask index that owns key group kg. It is
// the inverse of KeyGroupRangeFor.
func SubtaskForKeyGroup(maxParallelism, parallelism, kg int) int {
	return kg * parallelism / maxParallelism
}

// KeyGroupForHash maps a key hash to its key group.
func KeyGroupForHash(h uint64, maxParallelism int) int {
	return int(h % uint64(maxParallelism))
}

// The key hash is stable across processes and versions: it decides which
// subtask and key group own a key, and so where its state lives in
// checkpoints. Changing it breaks restoring old checkpoints.
const hashSeed = Golden64

// Golden64 is 2^64 divided by the golden ratio: splitmix64's increment.
const Golden64 = 0x9e3779b97f4a7c15

// Mix64 is splitmix64's finalizer: a bijective mix of z whose outputs look
// uniform. It is the one such mix in Weir (key hashing here, generated data
// in connectors): its outputs decide where keyed state lives and what
// generated rows hold, so it never changes.
func Mix64(z uint64) uint64 {
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

func mix64(x uint64) uint64 { return Mix64(x) }

func hashString(h uint64, s string) uint64 {
	// FNV-1a over the bytes, then mixed into h.
	f := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		f ^= uint64(s[i])
		f *= 1099511628211
	}
	return mix64(h ^ f ^ uint64(len(s)))
}

// HashKeys writes into out (len ≥ b.Len()) the hash of each row's key, the
// values of columns keyCols in order. Nulls hash as a fixed value.
func HashKeys(b *Batch, keyCols []int, out []uint64) {
	n := b.Len()
	out = out[:n]
	for i := range out {
		out[i] = hashSeed
	}
	for _, kc := range keyCols {
		c := &b.Cols[kc]
		switch c.Type {
		case TypeInt64, TypeTimestamp:
			for i, v := range c.Ints[:n] {
				out[i] = mix64(out[i] ^ uint64(v))
			}
		case TypeFloat64:
			for i, v := range c.Floats[:n] {
				if v == 0 {
					v = 0 // -0 and +0 are one key
				}
				out[i] = mix64(out[i] ^ math.Float64bits(v))
			}
		case TypeString:
			for i, v := range c.Strs[:n] {
				out[i] = hashString(out[i], v)
			}
		case TypeBool:
			for i, v := range c.Bools[:n] {
				x := uint64(0)
				if v {
					x = 1
				}
				out[i] = mix64(out[i] ^ x)
			}
		}
		if c.Nulls != nil {
			for i := 0; i < n; i++ {
				if c.IsNull(i) {
					out[i] = mix64(out[i] ^ bits.RotateLeft64(hashSeed, 17))
				}
			}
		}
	}
}
