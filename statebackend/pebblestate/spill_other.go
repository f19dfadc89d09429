//go:build !linux

package pebblestate

// oDirect is 0 where the replay does not bypass the page cache.
const oDirect = 0
