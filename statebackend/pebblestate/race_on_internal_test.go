//go:build race

package pebblestate

// raceEnabled reports whether the race detector is on: it pads every
// tiny allocation (a boxed int64) to 16 bytes instead of packing two in
// one 16-byte block.
const raceEnabled = true
