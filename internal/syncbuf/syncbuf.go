// Package syncbuf has a byte buffer that one goroutine (or a child
// process's output) writes while another reads it: tests collect logs and
// output with it.
package syncbuf

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer safe for concurrent use. With a Limit, writes
// beyond it are dropped (and still reported as written), so that a chatty
// process cannot fill memory. The zero value is an empty, unlimited
// buffer.
type Buffer struct {
	// Limit bounds the bytes kept; 0 keeps everything.
	Limit int

	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p, up to Limit.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.Limit > 0 {
		if room := b.Limit - b.buf.Len(); room < len(p) {
			b.buf.Write(p[:max(room, 0)])
			return len(p), nil
		}
	}
	return b.buf.Write(p)
}

// String returns what was written.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
