package pebblestate

import (
	"os"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// LongTests reports whether the long variants of the package's slow tests
// run (WEIR_LONG_TESTS=1): the randomised tests with all their seeds and
// steps, the large-state tests at their first sizes, and every database on
// Pebble's own file system. By default (the -race run of `make test`) they
// run shorter, with every check and every configuration.
func LongTests() bool { return os.Getenv("WEIR_LONG_TESTS") == "1" }

// The long-running tests open hundreds of Pebble databases, checkpoint
// them and flush small memtables; each of these creates and syncs files
// and directories, and on a busy disk the syncs took about half of those
// tests' time under -race. No test observes a sync (none simulates a
// crash), so those tests give their databases noSyncFS: the real file
// system, in the same directories, whose syncs return at once. With
// WEIR_LONG_TESTS=1 they use Pebble's own file system.

// NoSync returns o with its Pebble databases on noSyncFS (after o's own
// Configure, if any), or o unchanged with WEIR_LONG_TESTS=1.
func NoSync(o Options) Options {
	if LongTests() {
		return o
	}
	configure := o.Configure
	o.Configure = func(po *pebble.Options) {
		if configure != nil {
			configure(po)
		}
		fs := po.FS
		if fs == nil {
			fs = vfs.Default
		}
		po.FS = noSyncFS{fs}
	}
	return o
}

// noSyncFS is a vfs.FS whose files (and directories) do not sync.
type noSyncFS struct{ vfs.FS }

func noSyncFile(f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return unsyncedFile{f}, nil
}

func (fs noSyncFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	return noSyncFile(fs.FS.Create(name, c))
}

func (fs noSyncFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	return noSyncFile(fs.FS.Open(name, opts...))
}

func (fs noSyncFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	return noSyncFile(fs.FS.OpenReadWrite(name, c, opts...))
}

func (fs noSyncFS) OpenDir(name string) (vfs.File, error) {
	return noSyncFile(fs.FS.OpenDir(name))
}

func (fs noSyncFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	return noSyncFile(fs.FS.ReuseForWrite(oldname, newname, c))
}

func (fs noSyncFS) Unwrap() vfs.FS { return fs.FS }

type unsyncedFile struct{ vfs.File }

func (unsyncedFile) Sync() error                             { return nil }
func (unsyncedFile) SyncData() error                         { return nil }
func (unsyncedFile) SyncTo(int64) (fullSync bool, err error) { return true, nil }
