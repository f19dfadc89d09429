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
				if err := s.flush(); err != nil {
					t.Fatal(err)
				}
				got, err := s.read(reuse)
				if err != nil {
					t.Fatal(err)
				}
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
