package pebblestate

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"unsafe"
)

// TestSpillFileRoundTrip writes records of random sizes to spill files,
// with O_DIRECT (where the file system takes it) and through the page
// cache, ending on and off a directAlign boundary, and reads back exactly
// what was written, also into a reused buffer.
func TestSpillFileRoundTrip(t *testing.T) {
	for _, direct := range []bool{true, false} {
		t.Run(fmt.Sprint("direct=", direct), func(t *testing.T) {
			defer func(old bool) { spillDirectIO = old }(spillDirectIO)
			spillDirectIO = direct
			dir := t.TempDir()
			rng := rand.New(rand.NewPCG(3, 4))
			var reuse []byte
			for i, total := range []int{0, 1, directAlign - 1, directAlign, 3*directAlign + 17, 70_000} {
				path := filepath.Join(dir, fmt.Sprint("part-", i))
				s, err := createSpill(path, 2*directAlign)
				if err != nil {
					t.Fatal(err)
				}
				if i == 0 {
					t.Logf("O_DIRECT: %v", s.direct)
				}
				if s.direct && !direct {
					t.Fatal("opened with O_DIRECT although switched off")
				}
				var want []byte
				for len(want) < total {
					rec := make([]byte, min(rng.IntN(300)+1, total-len(want)))
					for j := range rec {
						rec[j] = byte(rng.Uint32())
					}
					want = append(want, rec...)
					if err := s.write(rec); err != nil {
						t.Fatal(err)
					}
				}
				got := flushAndRead(t, s, reuse)
				if !bytes.Equal(got, want) {
					t.Fatalf("%d bytes written, %d read back, equal: %v", len(want), len(got), bytes.Equal(got[:min(len(got), len(want))], want[:min(len(got), len(want))]))
				}
				if len(got) > 0 {
					if p := uintptr(unsafe.Pointer(&got[0])); p%directAlign != 0 {
						t.Fatalf("read buffer at %#x is not aligned", p)
					}
					reuse = got
				}
				s.remove()
				if _, err := os.Stat(path); !os.IsNotExist(err) {
					t.Fatalf("%s left behind: %v", path, err)
				}
			}
		})
	}
}

// TestSpillFileFallsBackFromDirect: a file system that opened a spill file
// with O_DIRECT but refuses a write (EINVAL, provoked here by a buffer off
// the alignment) gets that write and the rest through the page cache, and
// nothing written before is lost.
func TestSpillFileFallsBackFromDirect(t *testing.T) {
	s, err := createSpill(filepath.Join(t.TempDir(), "part"), directAlign)
	if err != nil {
		t.Fatal(err)
	}
	defer s.remove()
	if !s.direct {
		t.Skip("the temporary directory's file system does not take O_DIRECT")
	}
	rng := rand.New(rand.NewPCG(5, 6))
	chunk := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	want := chunk(directAlign) // fills the buffer: one direct write
	if err := s.write(want); err != nil {
		t.Fatal(err)
	}
	// The next buffer starts one byte past an aligned address.
	s.buf = alignedBytes(2 * directAlign)[1 : 1 : directAlign+1]
	for _, n := range []int{directAlign, 100} {
		c := chunk(n)
		want = append(want, c...)
		if err := s.write(c); err != nil {
			t.Fatalf("write after the refused direct write: %v", err)
		}
	}
	if s.direct {
		t.Fatal("still writing with O_DIRECT after a write it refused")
	}
	if got := flushAndRead(t, s, nil); !bytes.Equal(got, want) {
		t.Fatalf("read back %d bytes, wrote %d", len(got), len(want))
	}
}

// flushAndRead ends the writes to s and reads back what they wrote, into
// buf if it fits.
func flushAndRead(t *testing.T, s *spillFile, buf []byte) []byte {
	t.Helper()
	if err := s.flush(); err != nil {
		t.Fatal(err)
	}
	got, err := s.read(buf)
	if err != nil {
		t.Fatal(err)
	}
	return got
}
