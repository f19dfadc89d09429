package jobstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/weirstream/weir/stream"
)

// Names in a Dir; see the package documentation for the layout.
const (
	lockName    = "LOCK"
	termName    = "leader-term"
	jobsName    = "jobs"
	graphName   = "graph"
	statusName  = "status"
	latestName  = "latest"
	counterName = "checkpoint-id"
	putName     = "put-job"
	// tmpPrefix starts the names of temporary files and directories. No
	// job id contains '~', so none can be mistaken for a job's directory.
	tmpPrefix = ".tmp~"
)

// maxPutSize bounds a put-job record: a graph and a status of
// MaxValueSize bytes each, in base64, and a little JSON.
const maxPutSize = 3 * MaxValueSize

// Dir is a Store in a local directory of one jobmanager without HA: a
// restarted jobmanager opens the same directory and recovers its jobs from
// it, as an HA leader recovers them from etcd. From OpenDir to Close a Dir
// holds an exclusive advisory lock (flock) on the directory, so two
// jobmanagers never share one. Its methods may be called concurrently;
// they take turns. Every write is synced to disk before it returns (a few
// fsyncs each).
type Dir struct {
	path string
	log  *slog.Logger
	mu   struct {
		sync.Mutex
		// lock is the open LOCK file holding the flock; nil once closed.
		lock *os.File
	}
}

var _ Store = (*Dir)(nil)

// OpenDir opens the job store in directory path, creating it and its
// missing parents with mode 0700. It fails if path exists and is not a
// directory, or if another jobmanager (or another open Dir) holds the
// directory's lock. It then completes a PutJob that a crash interrupted and
// removes the temporary files that crashed writes left behind. log
// receives warnings about leftovers; nil means slog.Default().
func OpenDir(path string, log *slog.Logger) (*Dir, error) {
	if log == nil {
		log = slog.Default()
	}
	if path == "" {
		return nil, errors.New("jobstore: no data directory given; set --data-dir")
	}
	path = filepath.Clean(path)
	fi, err := os.Stat(path)
	switch {
	case err == nil && !fi.IsDir():
		return nil, fmt.Errorf("jobstore: data directory %s exists and is not a directory; give --data-dir a directory", path)
	case err == nil && fi.Mode().Perm()&0o077 != 0:
		log.Warn("the jobmanager's data directory is open to other users, and job graphs may hold credentials; chmod 700 it",
			"component", "jobstore", "dir", path, "mode", fi.Mode().Perm().String())
	case errors.Is(err, fs.ErrNotExist):
		if err := mkdirAll(path); err != nil {
			return nil, fmt.Errorf("jobstore: create data directory: %w", err)
		}
	case err != nil:
		return nil, fmt.Errorf("jobstore: data directory: %w", err)
	}
	lock, err := lockDir(path)
	if err != nil {
		return nil, err
	}
	d := &Dir{path: path, log: log.With("component", "jobstore", "dir", path)}
	d.mu.lock = lock
	if err := d.recover(); err != nil {
		lock.Close()
		return nil, err
	}
	return d, nil
}

// lockDir takes the exclusive lock on dir/LOCK and returns the open file
// that holds it.
func lockDir(dir string) (*os.File, error) {
	name := filepath.Join(dir, lockName)
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("jobstore: open the lock file of the data directory: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder := lockHolder(f)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("jobstore: data directory %s is in use by another jobmanager%s, which holds the lock on %s; "+
				"stop that jobmanager, or give this one another --data-dir", dir, holder, name)
		}
		return nil, fmt.Errorf("jobstore: lock %s: %w", name, err)
	}
	// For the error of the next process that tries; the lock itself is
	// the flock, so a failure here does not matter.
	if f.Truncate(0) == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// lockHolder describes the process that recorded itself in the lock file
// f: " (pid N)", or "" when f names none.
func lockHolder(f *os.File) string {
	b := make([]byte, 24)
	n, _ := f.ReadAt(b, 0)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b[:n])))
	if err != nil || pid <= 0 {
		return ""
	}
	return fmt.Sprintf(" (pid %d)", pid)
}

// recover prepares a directory just locked: it creates jobs/, removes the
// temporary files of interrupted writes and completes interrupted PutJobs.
func (d *Dir) recover() error {
	jobs := d.jobsDir()
	if err := mkdirAll(jobs); err != nil {
		return fmt.Errorf("jobstore: create the jobs directory: %w", err)
	}
	if err := d.removeTemps(d.path); err != nil {
		return err
	}
	if err := d.removeTemps(jobs); err != nil {
		return err
	}
	entries, err := os.ReadDir(jobs)
	if err != nil {
		return fmt.Errorf("jobstore: list jobs: %w", err)
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue // ListJobs warns about it
		}
		dir := filepath.Join(jobs, e.Name())
		if err := d.removeTemps(dir); err != nil {
			return err
		}
		if err := d.finishPut(dir); err != nil {
			return err
		}
	}
	return nil
}

// removeTemps removes the temporary files and directories in dir.
func (d *Dir) removeTemps(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("jobstore: look for leftovers of interrupted writes: %w", err)
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), tmpPrefix) {
			continue
		}
		name := filepath.Join(dir, e.Name())
		if err := os.RemoveAll(name); err != nil {
			return fmt.Errorf("jobstore: remove the leftover of an interrupted write: %w", err)
		}
		d.log.Info("removed the leftover of an interrupted write", "path", name)
	}
	return nil
}

// Path is the directory, as given to OpenDir (cleaned).
func (d *Dir) Path() string { return d.path }

// Close releases the directory's lock (the LOCK file stays). The Dir's
// methods then fail with an error wrapping ErrClosed, Confirm included.
// Close is idempotent.
func (d *Dir) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.mu.lock == nil {
		return nil
	}
	err := d.mu.lock.Close() // closing the only descriptor releases the flock
	d.mu.lock = nil
	if err != nil {
		return fmt.Errorf("jobstore: release the lock of data directory %s: %w", d.path, err)
	}
	return nil
}

// begin locks d.mu for one operation unless ctx has ended or d is closed.
func (d *Dir) begin(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("jobstore: %w", err)
	}
	d.mu.Lock()
	if d.mu.lock == nil {
		d.mu.Unlock()
		return fmt.Errorf("%w: data directory %s", ErrClosed, d.path)
	}
	return nil
}

// PutJob implements Store. It first records the new graph and status in
// the job's put-job file: from its rename on the new job wins, and a crash
// before both are in place is completed by the next access or OpenDir.
func (d *Dir) PutJob(ctx context.Context, id string, graph, status []byte) error {
	dir, err := d.jobDir(id)
	if err != nil {
		return err
	}
	if err := checkValue(id, "graph", graph); err != nil {
		return err
	}
	if err := checkValue(id, "status", status); err != nil {
		return err
	}
	rec, err := json.Marshal(putRecord{Version: 1, Graph: graph, Status: status})
	if err != nil {
		return fmt.Errorf("jobstore: put job %s: %w", id, err)
	}
	if err := d.begin(ctx); err != nil {
		return err
	}
	defer d.mu.Unlock()
	if err := mkdirAll(dir); err != nil {
		return fmt.Errorf("jobstore: put job %s: %w", id, err)
	}
	if err := writeFile(dir, putName, rec); err != nil {
		return fmt.Errorf("jobstore: put job %s: %w", id, err)
	}
	return d.applyPut(dir, graph, status)
}

// putRecord is the content of a put-job file, version 1.
type putRecord struct {
	Version int    `json:"v"`
	Graph   []byte `json:"graph"`
	Status  []byte `json:"status"`
}

// applyPut writes graph and status into dir and removes its put-job
// record. The status goes first: a new job's directory counts as a job
// only once its graph is there.
func (d *Dir) applyPut(dir string, graph, status []byte) error {
	if err := writeFile(dir, statusName, status); err != nil {
		return fmt.Errorf("jobstore: put job %s: %w", filepath.Base(dir), err)
	}
	if err := writeFile(dir, graphName, graph); err != nil {
		return fmt.Errorf("jobstore: put job %s: %w", filepath.Base(dir), err)
	}
	if err := os.Remove(filepath.Join(dir, putName)); err != nil {
		return fmt.Errorf("jobstore: put job %s: %w", filepath.Base(dir), err)
	}
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("jobstore: put job %s: %w", filepath.Base(dir), err)
	}
	return nil
}

// finishPut applies the PutJob recorded in dir, if a crash or an error
// interrupted it.
func (d *Dir) finishPut(dir string) error {
	file := filepath.Join(dir, putName)
	b, ok, err := d.readFile(file, maxPutSize)
	if err != nil || !ok {
		return err
	}
	var rec putRecord
	why := ""
	if err := json.Unmarshal(b, &rec); err != nil {
		why = describeJSONError(err)
	} else if rec.Version != 1 {
		why = fmt.Sprintf("version %d unknown (this build reads version 1)", rec.Version)
	}
	if why != "" {
		return fmt.Errorf("jobstore: %s, the record of an interrupted PutJob, holds %d bytes that do not decode: %s; %s",
			file, len(b), why, d.fix(file, false))
	}
	d.log.Info("completing an interrupted PutJob", "job", filepath.Base(dir))
	return d.applyPut(dir, rec.Graph, rec.Status)
}

// PutJobStatus implements Store.
func (d *Dir) PutJobStatus(ctx context.Context, id string, status []byte) error {
	dir, err := d.jobDir(id)
	if err != nil {
		return err
	}
	if err := checkValue(id, "status", status); err != nil {
		return err
	}
	if err := d.begin(ctx); err != nil {
		return err
	}
	defer d.mu.Unlock()
	if err := d.mustExist(id, dir); err != nil {
		return err
	}
	if err := writeFile(dir, statusName, status); err != nil {
		return fmt.Errorf("jobstore: put status of job %s: %w", id, err)
	}
	return nil
}

// DeleteJob implements Store. The job's directory is renamed to a
// temporary name, which deletes the job at once, and then removed.
func (d *Dir) DeleteJob(ctx context.Context, id string) error {
	dir, err := d.jobDir(id)
	if err != nil {
		return err
	}
	if err := d.begin(ctx); err != nil {
		return err
	}
	defer d.mu.Unlock()
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return fmt.Errorf("jobstore: delete job %s: %w", id, err)
	}
	trash := filepath.Join(d.jobsDir(), tmpPrefix+"deleted-"+id)
	if err := os.RemoveAll(trash); err != nil {
		return fmt.Errorf("jobstore: delete job %s: %w", id, err)
	}
	if err := os.Rename(dir, trash); err != nil {
		return fmt.Errorf("jobstore: delete job %s: %w", id, err)
	}
	if err := syncDir(d.jobsDir()); err != nil {
		return fmt.Errorf("jobstore: delete job %s: %w", id, err)
	}
	if err := os.RemoveAll(trash); err != nil {
		// The job is gone already; the next OpenDir retries.
		d.log.Warn("removing a deleted job's files failed", "job", id, "path", trash, "err", err)
	}
	return nil
}

// ListJobs implements Store.
func (d *Dir) ListJobs(ctx context.Context) ([]JobRecord, error) {
	if err := d.begin(ctx); err != nil {
		return nil, err
	}
	defer d.mu.Unlock()
	entries, err := os.ReadDir(d.jobsDir()) // sorted by name, that is by id
	if err != nil {
		return nil, fmt.Errorf("jobstore: list jobs: %w", err)
	}
	var jobs []JobRecord
	for _, e := range entries {
		id, dir := e.Name(), filepath.Join(d.jobsDir(), e.Name())
		if strings.HasPrefix(id, tmpPrefix) {
			continue
		}
		if !e.IsDir() || stream.ValidateJobID(id) != nil {
			d.log.Warn("not a job's directory; ignored", "path", dir)
			continue
		}
		r, ok, err := d.readJob(id, dir)
		if err != nil {
			return nil, err
		}
		if !ok {
			d.log.Warn("job directory without a graph; ignored", "job", id, "path", dir)
			continue
		}
		jobs = append(jobs, r)
	}
	return jobs, nil
}

// readJob reads the job in dir, and false when it has no graph.
func (d *Dir) readJob(id, dir string) (JobRecord, bool, error) {
	if err := d.finishPut(dir); err != nil {
		return JobRecord{}, false, err
	}
	graph, ok, err := d.readFile(filepath.Join(dir, graphName), MaxValueSize)
	if err != nil || !ok {
		return JobRecord{}, false, err
	}
	r := JobRecord{ID: id, Graph: graph}
	if r.Status, _, err = d.readFile(filepath.Join(dir, statusName), MaxValueSize); err != nil {
		return JobRecord{}, false, err
	}
	p, ok, err := d.readPointer(dir)
	if err != nil {
		return JobRecord{}, false, err
	}
	if ok {
		r.Latest = &p
	}
	if r.LastCheckpointID, err = d.readCounter(filepath.Join(dir, counterName)); err != nil {
		return JobRecord{}, false, err
	}
	return r, true, nil
}

// PutLatestCheckpoint implements Store.
func (d *Dir) PutLatestCheckpoint(ctx context.Context, job string, p Pointer) error {
	dir, err := d.jobDir(job)
	if err != nil {
		return err
	}
	if err := p.Validate(); err != nil {
		return fmt.Errorf("job %s: %w", job, err)
	}
	if err := d.begin(ctx); err != nil {
		return err
	}
	defer d.mu.Unlock()
	if err := d.mustExist(job, dir); err != nil {
		return err
	}
	cur, ok, err := d.readPointer(dir)
	if err != nil {
		return err
	}
	switch {
	case ok && bytes.Equal(EncodePointer(cur), EncodePointer(p)):
		return nil
	case ok && cur.ID >= p.ID:
		return fmt.Errorf("jobstore: job %s: checkpoint %d (%s) does not follow the stored checkpoint %d (%s): %w",
			job, p.ID, p.ManifestKey, cur.ID, cur.ManifestKey, ErrStaleCheckpoint)
	}
	if err := writeFile(dir, latestName, EncodePointer(p)); err != nil {
		return fmt.Errorf("jobstore: put checkpoint %d of job %s: %w", p.ID, job, err)
	}
	return nil
}

// LatestCheckpoint implements Store.
func (d *Dir) LatestCheckpoint(ctx context.Context, job string) (Pointer, error) {
	dir, err := d.jobDir(job)
	if err != nil {
		return Pointer{}, err
	}
	if err := d.begin(ctx); err != nil {
		return Pointer{}, err
	}
	defer d.mu.Unlock()
	if err := d.mustExist(job, dir); err != nil {
		return Pointer{}, err
	}
	p, ok, err := d.readPointer(dir)
	if err != nil {
		return Pointer{}, err
	}
	if !ok {
		return Pointer{}, fmt.Errorf("jobstore: job %s has no completed checkpoint in %s: %w", job, dir, ErrNotFound)
	}
	return p, nil
}

// NextCheckpointID implements Store.
func (d *Dir) NextCheckpointID(ctx context.Context, job string) (int64, error) {
	dir, err := d.jobDir(job)
	if err != nil {
		return 0, err
	}
	if err := d.begin(ctx); err != nil {
		return 0, err
	}
	defer d.mu.Unlock()
	if err := d.mustExist(job, dir); err != nil {
		return 0, err
	}
	return d.increment(dir, counterName, "checkpoint id of job "+job)
}

// NextTerm implements Store.
func (d *Dir) NextTerm(ctx context.Context) (int64, error) {
	if err := d.begin(ctx); err != nil {
		return 0, err
	}
	defer d.mu.Unlock()
	return d.increment(d.path, termName, "leader term")
}

// Confirm implements Store: it returns nil until Close.
func (d *Dir) Confirm(ctx context.Context, what string) error {
	if err := d.begin(ctx); err != nil {
		return fmt.Errorf("jobstore: %s refused: %w", what, err)
	}
	d.mu.Unlock()
	return nil
}

// increment adds one to the counter in dir/name (absent: 0) and returns
// the new value.
func (d *Dir) increment(dir, name, what string) (int64, error) {
	n, err := d.readCounter(filepath.Join(dir, name))
	if err != nil {
		return 0, err
	}
	n++
	if err := writeFile(dir, name, []byte(strconv.FormatInt(n, 10)+"\n")); err != nil {
		return 0, fmt.Errorf("jobstore: allocate %s %d: %w", what, n, err)
	}
	return n, nil
}

func (d *Dir) jobsDir() string { return filepath.Join(d.path, jobsName) }

// jobDir checks id and returns its job's directory.
func (d *Dir) jobDir(id string) (string, error) {
	if err := stream.ValidateJobID(id); err != nil {
		return "", fmt.Errorf("jobstore: %w", err)
	}
	return filepath.Join(d.path, jobsName, id), nil
}

// mustExist completes an interrupted PutJob of the job in dir and returns
// an error wrapping ErrNotFound if the job (its graph) is not stored.
func (d *Dir) mustExist(id, dir string) error {
	if err := d.finishPut(dir); err != nil {
		return err
	}
	_, err := os.Lstat(filepath.Join(dir, graphName))
	switch {
	case err == nil:
		return nil
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("jobstore: job %s is not stored in %s (PutJob first, or it was deleted): %w", id, d.jobsDir(), ErrNotFound)
	}
	return fmt.Errorf("jobstore: job %s: %w", id, err)
}

// readPointer reads the job's pointer from dir/latest, and false when it
// has none.
func (d *Dir) readPointer(dir string) (Pointer, bool, error) {
	file := filepath.Join(dir, latestName)
	b, ok, err := d.readFile(file, MaxValueSize)
	if err != nil || !ok {
		return Pointer{}, false, err
	}
	p, err := DecodePointer(file, b)
	if err != nil {
		return Pointer{}, false, fmt.Errorf("%w; %s", err, d.fix(file, false))
	}
	return p, true, nil
}

// readCounter reads the decimal counter in file (absent: 0).
func (d *Dir) readCounter(file string) (int64, error) {
	b, ok, err := d.readFile(file, 64)
	if err != nil || !ok {
		return 0, err
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("jobstore: %s holds %d bytes that are not a decimal count; %s", file, len(b), d.fix(file, false))
	}
	return n, nil
}

// readFile returns the contents of file, or false when it does not exist.
// A file above limit bytes is an error.
func (d *Dir) readFile(file string, limit int64) ([]byte, bool, error) {
	f, err := os.Open(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("jobstore: %s: cannot open it: %w; %s", file, unwrapPath(err), d.fix(file, true))
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, false, fmt.Errorf("jobstore: %s: cannot read it: %w; %s", file, unwrapPath(err), d.fix(file, true))
	}
	if int64(len(b)) > limit {
		return nil, false, fmt.Errorf("jobstore: %s is larger than %d bytes, which this store never writes there; %s", file, limit, d.fix(file, false))
	}
	return b, true, nil
}

// fix says how to repair file, which is damaged or, when unreadable,
// cannot be read.
func (d *Dir) fix(file string, unreadable bool) string {
	fix := "restore it from a backup (deleting it would start leader terms at 1 again, and execution attempt ids would repeat)"
	if job := filepath.Dir(file); filepath.Dir(job) == d.jobsDir() {
		fix = "restore it from a backup, or delete the job's directory " + job + " to forget the job"
	}
	if unreadable {
		fix = "check its permissions and the disk, or " + fix
	}
	return fix
}

// unwrapPath drops the path of a *fs.PathError, which the caller names.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

func checkValue(job, what string, b []byte) error {
	if len(b) > MaxValueSize {
		return fmt.Errorf("jobstore: job %s: %s of %d bytes exceeds %d; store it in checkpoint storage and put a pointer to it here", job, what, len(b), MaxValueSize)
	}
	return nil
}

// writeFile replaces dir/name with data atomically and durably: a synced
// temporary file in dir, renamed over dir/name, then dir synced. The file
// has mode 0600.
func writeFile(dir, name string, data []byte) error {
	f, err := os.CreateTemp(dir, tmpPrefix+name+"-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, name))
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return syncDir(dir)
}

// mkdirAll creates dir and its missing parents with mode 0700, syncing
// each parent that gained an entry so that the new directories survive a
// crash.
func mkdirAll(dir string) error {
	if _, err := os.Lstat(dir); err == nil {
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	parent := filepath.Dir(dir)
	if parent != dir {
		if err := mkdirAll(parent); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return syncDir(parent)
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
