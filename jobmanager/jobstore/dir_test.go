package jobstore_test

import (
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weirstream/weir/internal/syncbuf"
	"github.com/weirstream/weir/jobmanager/jobstore"
	"github.com/weirstream/weir/stream"
)

// openDir opens a Dir at path and closes it at the end of the test; logs
// go to logs when it is not nil.
func openDir(t *testing.T, path string, logs *syncbuf.Buffer) *jobstore.Dir {
	t.Helper()
	d, err := jobstore.OpenDir(path, testLogger(logs))
	if err != nil {
		t.Fatalf("OpenDir: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func testLogger(logs *syncbuf.Buffer) *slog.Logger {
	if logs == nil {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(logs, nil))
}

func writeTestFile(t *testing.T, name, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(name), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

func exists(t *testing.T, name string) bool {
	t.Helper()
	_, err := os.Lstat(name)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	return err == nil
}

func TestDirLocked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "data")
	d := openDir(t, path, nil)
	_, err := jobstore.OpenDir(path, nil)
	if err == nil {
		t.Fatal("a second OpenDir of a locked directory succeeded")
	}
	for _, want := range []string{path, "in use by another jobmanager", "pid", "stop that jobmanager", "another --data-dir"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	// The first Dir is unaffected.
	if err := d.Confirm(t.Context(), "test"); err != nil {
		t.Fatalf("Confirm of the first Dir: %v", err)
	}

	if err := d.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if !exists(t, filepath.Join(path, "LOCK")) {
		t.Errorf("Close removed the LOCK file")
	}
	openDir(t, path, nil) // the lock is free again
}

func TestDirClosed(t *testing.T) {
	d := openDir(t, t.TempDir(), nil)
	ctx := t.Context()
	putJob(t, d, "job", "g", "s")
	if err := d.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := d.Close(); err != nil {
		t.Fatalf("Close twice: %v", err)
	}
	for name, err := range map[string]error{
		"PutJob":              d.PutJob(ctx, "job", nil, nil),
		"PutJobStatus":        d.PutJobStatus(ctx, "job", nil),
		"DeleteJob":           d.DeleteJob(ctx, "job"),
		"ListJobs":            func() error { _, err := d.ListJobs(ctx); return err }(),
		"PutLatestCheckpoint": d.PutLatestCheckpoint(ctx, "job", ptr(1)),
		"LatestCheckpoint":    func() error { _, err := d.LatestCheckpoint(ctx, "job"); return err }(),
		"NextCheckpointID":    func() error { _, err := d.NextCheckpointID(ctx, "job"); return err }(),
		"NextTerm":            func() error { _, err := d.NextTerm(ctx); return err }(),
		"Confirm":             d.Confirm(ctx, "delete checkpoint files"),
	} {
		if !errors.Is(err, jobstore.ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed", name, err)
		}
	}
}

func TestDirNotADirectory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "file")
	writeTestFile(t, path, "x")
	_, err := jobstore.OpenDir(path, nil)
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("OpenDir of a file = %v; want an error naming it, not a directory", err)
	}
	if _, err := jobstore.OpenDir("", nil); err == nil || !strings.Contains(err.Error(), "--data-dir") {
		t.Fatalf("OpenDir of \"\" = %v; want an error about --data-dir", err)
	}
}

// TestDirPrivate: the directories are 0700 and the files 0600, since job
// graphs may hold credentials.
func TestDirPrivate(t *testing.T) {
	root := t.TempDir()
	path := filepath.Join(root, "a", "b", "data")
	d := openDir(t, path, nil)
	putJob(t, d, "job", "g", "s")
	putPointer(t, d, "job", ptr(1))
	nextID(t, d, "job")
	nextTerm(t, d)
	err := filepath.WalkDir(filepath.Join(root, "a"), func(name string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := e.Info()
		if err != nil {
			return err
		}
		want := fs.FileMode(0o600)
		if e.IsDir() {
			want = fs.ModeDir | 0o700
		}
		if fi.Mode() != want {
			t.Errorf("%s has mode %v, want %v", name, fi.Mode(), want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"LOCK", "leader-term", "jobs/job/graph", "jobs/job/status", "jobs/job/latest", "jobs/job/checkpoint-id"} {
		if !exists(t, filepath.Join(path, name)) {
			t.Errorf("%s is missing", name)
		}
	}
}

// TestDirLeftovers: temporary files of writes a crash interrupted are
// ignored while the Dir is open and removed by the next OpenDir.
func TestDirLeftovers(t *testing.T) {
	path := t.TempDir()
	d := openDir(t, path, nil)
	putJob(t, d, "job", "g", "s")
	nextTerm(t, d)
	leftovers := []string{
		filepath.Join(path, ".tmp~leader-term-123"),
		filepath.Join(path, "jobs", ".tmp~deleted-old", "graph"),
		filepath.Join(path, "jobs", "job", ".tmp~graph-456"),
		filepath.Join(path, "jobs", "job", ".tmp~put-job-789"),
	}
	for _, name := range leftovers {
		writeTestFile(t, name, "half-written")
	}
	m := model{}
	m.put("job", "g", "s")
	m.check(t, d)

	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	d = openDir(t, path, nil)
	for _, name := range append(leftovers, filepath.Join(path, "jobs", ".tmp~deleted-old")) {
		if exists(t, name) {
			t.Errorf("OpenDir left %s in place", name)
		}
	}
	m.check(t, d)
	if got := nextTerm(t, d); got != 2 {
		t.Errorf("NextTerm = %d, want 2", got)
	}
}

// TestDirInterruptedPutJob: a PutJob whose record was written is
// completed, one whose record was not leaves the old job.
func TestDirInterruptedPutJob(t *testing.T) {
	path := t.TempDir()
	d := openDir(t, path, nil)
	putJob(t, d, "job", "old graph", "old status")
	putPointer(t, d, "job", ptr(2))
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	// A crash after the record and the new status were written.
	rec, err := json.Marshal(map[string]any{"v": 1, "graph": []byte("new graph"), "status": []byte("new status")})
	if err != nil {
		t.Fatal(err)
	}
	writeTestFile(t, filepath.Join(path, "jobs", "job", "put-job"), string(rec))
	writeTestFile(t, filepath.Join(path, "jobs", "job", "status"), "new status")
	// A crash while writing a new job's record: no job.
	writeTestFile(t, filepath.Join(path, "jobs", "new", ".tmp~put-job-1"), string(rec[:10]))

	d = openDir(t, path, nil)
	m := model{}
	m.put("job", "new graph", "new status")
	p2 := ptr(2)
	m["job"].Latest = &p2
	m.check(t, d)
	if exists(t, filepath.Join(path, "jobs", "job", "put-job")) {
		t.Errorf("the completed record is still there")
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}

	// A damaged record stops OpenDir with an error naming it.
	writeTestFile(t, filepath.Join(path, "jobs", "job", "put-job"), "s3cret")
	_, err = jobstore.OpenDir(path, testLogger(nil))
	if err == nil || !strings.Contains(err.Error(), filepath.Join(path, "jobs", "job", "put-job")) ||
		!strings.Contains(err.Error(), "restore it from a backup") || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("OpenDir with a damaged put-job record = %v; want an error naming it and the fix, without its bytes", err)
	}
}

// TestDirDamagedFiles: a damaged file gives an error that names it, says
// what is wrong and how to fix it, and does not repeat its bytes.
func TestDirDamagedFiles(t *testing.T) {
	tests := []struct {
		name, file, data, want string
		op                     func(t *testing.T, d *jobstore.Dir) error
	}{
		{"pointer garbage", "jobs/job/latest", "s3cret", "not a checkpoint pointer", latest},
		{"pointer listed", "jobs/job/latest", `{"v":1,"id":"s3cret"}`, "not a checkpoint pointer", list},
		{"pointer written over", "jobs/job/latest", "{s3cret", "not a checkpoint pointer",
			func(t *testing.T, d *jobstore.Dir) error { return d.PutLatestCheckpoint(t.Context(), "job", ptr(9)) }},
		{"pointer of a newer version", "jobs/job/latest", `{"v":2,"id":1,"manifestKey":"s3cret"}`, "upgrade the jobmanager", latest},
		{"checkpoint id", "jobs/job/checkpoint-id", "12s3cret", "not a decimal count",
			func(t *testing.T, d *jobstore.Dir) error {
				_, err := d.NextCheckpointID(t.Context(), "job")
				return err
			}},
		{"checkpoint id listed", "jobs/job/checkpoint-id", "-1", "not a decimal count", list},
		{"huge checkpoint id", "jobs/job/checkpoint-id", strings.Repeat("9", 100), "larger than", list},
		{"leader term", "leader-term", "s3cret", "not a decimal count",
			func(t *testing.T, d *jobstore.Dir) error { _, err := d.NextTerm(t.Context()); return err }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := t.TempDir()
			d := openDir(t, path, nil)
			putJob(t, d, "job", "g", "s")
			file := filepath.Join(path, filepath.FromSlash(tt.file))
			writeTestFile(t, file, tt.data)
			err := tt.op(t, d)
			if err == nil {
				t.Fatalf("succeeded with a damaged %s", tt.file)
			}
			fix := "delete the job's directory " + filepath.Join(path, "jobs", "job")
			if tt.file == "leader-term" {
				fix = "restore it from a backup"
			}
			for _, want := range []string{file, tt.want, fix} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("error %q repeats the file's bytes", err)
			}
		})
	}
}

func latest(t *testing.T, d *jobstore.Dir) error {
	_, err := d.LatestCheckpoint(t.Context(), "job")
	return err
}

func list(t *testing.T, d *jobstore.Dir) error {
	_, err := d.ListJobs(t.Context())
	return err
}

// TestDirUnreadableFile: a file that cannot be read gives an error that
// names it, the reason and the fix.
func TestDirUnreadableFile(t *testing.T) {
	tests := []struct {
		name    string
		spoil   func(t *testing.T, file string)
		errKind error
	}{
		{"directory in its place", func(t *testing.T, file string) {
			if err := os.Remove(file); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(file, 0o700); err != nil {
				t.Fatal(err)
			}
		}, nil},
		{"no permission", func(t *testing.T, file string) {
			if os.Geteuid() == 0 {
				t.Skip("root reads files whatever their mode")
			}
			if err := os.Chmod(file, 0); err != nil {
				t.Fatal(err)
			}
		}, fs.ErrPermission},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := t.TempDir()
			d := openDir(t, path, nil)
			putJob(t, d, "job", "g", "s")
			status := filepath.Join(path, "jobs", "job", "status")
			tt.spoil(t, status)
			_, err := d.ListJobs(t.Context())
			if err == nil || !strings.Contains(err.Error(), status) || !strings.Contains(err.Error(), "check its permissions and the disk") {
				t.Fatalf("ListJobs with an unreadable status = %v; want an error naming the file and the fix", err)
			}
			if tt.errKind != nil && !errors.Is(err, tt.errKind) {
				t.Fatalf("ListJobs with an unreadable status = %v; want an error wrapping %v", err, tt.errKind)
			}
		})
	}
}

// TestDirStrayEntries: a job directory without a graph, and what is not a
// job directory at all, are skipped with a warning.
func TestDirStrayEntries(t *testing.T) {
	path := t.TempDir()
	logs := &syncbuf.Buffer{}
	d := openDir(t, path, logs)
	putJob(t, d, "job", "g", "s")
	writeTestFile(t, filepath.Join(path, "jobs", "ghost", "status"), "RUNNING")
	writeTestFile(t, filepath.Join(path, "jobs", "stray-file"), "x")
	writeTestFile(t, filepath.Join(path, "jobs", "bad:id", "graph"), "x")

	m := model{}
	m.put("job", "g", "s")
	m.check(t, d)
	for _, want := range []string{"job directory without a graph", "job=ghost", "stray-file", "bad:id"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("logs lack %q:\n%s", want, logs)
		}
	}
	if err := d.PutJobStatus(t.Context(), "ghost", []byte("x")); !errors.Is(err, jobstore.ErrNotFound) {
		t.Errorf("PutJobStatus of a job without a graph = %v, want ErrNotFound", err)
	}
	if err := d.DeleteJob(t.Context(), "ghost"); err != nil || exists(t, filepath.Join(path, "jobs", "ghost")) {
		t.Errorf("DeleteJob of a job without a graph = %v; want its directory removed", err)
	}
}

// TestDirJobIDs: ids become directory names, so the Dir takes only what
// stream.ValidateJobID accepts.
func TestDirJobIDs(t *testing.T) {
	d := openDir(t, t.TempDir(), nil)
	for _, id := range []string{".", "..", "a:b", `a\b`, strings.Repeat("x", stream.MaxJobIDLength+1)} {
		if err := d.PutJob(t.Context(), id, nil, nil); !errors.Is(err, stream.ErrInvalidJobID) {
			t.Errorf("PutJob(%.20q) = %v, want ErrInvalidJobID", id, err)
		}
		if err := d.DeleteJob(t.Context(), id); !errors.Is(err, stream.ErrInvalidJobID) {
			t.Errorf("DeleteJob(%.20q) = %v, want ErrInvalidJobID", id, err)
		}
	}
}
