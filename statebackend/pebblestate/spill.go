package pebblestate

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"unsafe"
)

// A restore's replay spills the partitions of a changelog chain larger than
// Options.ReplayMemoryBytes to files, writes each once and reads it back
// once, a few seconds later. Through the page cache those gigabytes would
// count against the kernel's dirty-page limits together with the
// database's own files (the downloaded checkpoint, the replay's sstables):
// past the background limit writeback starts, and every further write
// pays for it. On the 2-core test machine writing 2.2 GB of spill so took
// 10.8 s, written straight to the disk 1.8 s. So where the file system
// allows it (Linux, not tmpfs), spill files are written and read with
// O_DIRECT, through buffers aligned to directAlign, and padded with zeros
// to a multiple of it; elsewhere, or once the file system refuses a
// direct write, they fall back to plain writes.

// directAlign is the alignment of O_DIRECT buffers, lengths and offsets:
// the page size, a multiple of every device's logical block size.
const directAlign = 4096

// spillDirectIO is false to write spill files through the page cache
// everywhere (a test's switch).
var spillDirectIO = true

// spillFile is a partition spilled to a file, written through a buffer.
type spillFile struct {
	f      *os.File
	direct bool   // opened with O_DIRECT
	buf    []byte // bytes not yet written; cap is a multiple of directAlign
	size   int64  // bytes written, buf included
}

// createSpill creates the spill file path with a write buffer of about
// bufSize bytes.
func createSpill(path string, bufSize int) (*spillFile, error) {
	const flags = os.O_RDWR | os.O_CREATE | os.O_TRUNC
	s := &spillFile{buf: alignedBytes(max(bufSize/directAlign, 1) * directAlign)[:0]}
	var err error
	if oDirect != 0 && spillDirectIO {
		if s.f, err = os.OpenFile(path, flags|oDirect, 0o644); err == nil {
			s.direct = true
			return s, nil
		}
	}
	if s.f, err = os.OpenFile(path, flags, 0o644); err != nil {
		return nil, err
	}
	return s, nil
}

// write appends p.
func (s *spillFile) write(p []byte) error {
	for len(p) > 0 {
		n := copy(s.buf[len(s.buf):cap(s.buf)], p)
		s.buf, p = s.buf[:len(s.buf)+n], p[n:]
		s.size += int64(n)
		if len(s.buf) == cap(s.buf) {
			if err := s.writeOut(s.buf); err != nil {
				return err
			}
			s.buf = s.buf[:0]
		}
	}
	return nil
}

// flush writes what is buffered, padded with zeros to a multiple of
// directAlign for O_DIRECT; nothing may be written after it.
func (s *spillFile) flush() error {
	out := s.buf
	if s.direct {
		out = out[:alignUp(len(out))]
		clear(out[len(s.buf):])
	}
	s.buf = s.buf[:0]
	if len(out) == 0 {
		return nil
	}
	// Padding written through a fallback (writeOut) lies past size, where
	// read does not look.
	return s.writeOut(out)
}

// writeOut appends p to the file. A file system that opened the file with
// O_DIRECT but refuses the write (EINVAL: some do not support direct I/O
// after all) gets it, and every later write, through the page cache: the
// file is reopened without O_DIRECT, its content so far (whole aligned
// buffers of records, no padding) kept.
func (s *spillFile) writeOut(p []byte) error {
	_, err := s.f.Write(p)
	if err == nil || !s.direct || !errors.Is(err, syscall.EINVAL) {
		return err
	}
	f, oerr := os.OpenFile(s.f.Name(), os.O_RDWR, 0)
	if oerr != nil {
		return errors.Join(err, oerr)
	}
	if _, serr := f.Seek(0, io.SeekEnd); serr != nil {
		f.Close()
		return errors.Join(err, serr)
	}
	s.f.Close()
	s.f, s.direct = f, false
	_, err = s.f.Write(p)
	return err
}

// read returns the records written, read into buf if it is large enough
// (and, for O_DIRECT, aligned: a buffer read returned before is), else into
// a new buffer.
func (s *spillFile) read(buf []byte) ([]byte, error) {
	n := int(s.size)
	if s.direct {
		n = alignUp(n)
	}
	if cap(buf) < n {
		buf = alignedBytes(n)
	}
	data := buf[:n]
	if _, err := s.f.ReadAt(data, 0); err != nil {
		return nil, fmt.Errorf("reading back %s: %w", s.f.Name(), err)
	}
	return data[:s.size], nil
}

// remove closes and removes the file.
func (s *spillFile) remove() {
	s.f.Close()
	os.Remove(s.f.Name())
}

func alignUp(n int) int { return (n + directAlign - 1) &^ (directAlign - 1) }

// alignedBytes returns n bytes starting at an address that is a multiple
// of directAlign (the Go heap does not move objects).
func alignedBytes(n int) []byte {
	b := make([]byte, n+directAlign)
	off := int(uintptr(unsafe.Pointer(unsafe.SliceData(b))) & (directAlign - 1))
	if off != 0 {
		off = directAlign - off
	}
	return b[off : off+n : off+n]
}
