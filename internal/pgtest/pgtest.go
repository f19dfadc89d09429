// Package pgtest starts private PostgreSQL servers for tests: Debian's
// server binaries (scripts/ensure-postgres.sh installs them), run as
// processes of their own on 127.0.0.1, so that a sink is tested against
// the real database and a test can kill and restart it.
//
// Start starts a server for one test and stops it at the test's cleanup;
// StartMain starts one for a whole package from TestMain. Each server gets
// a fresh cluster (initdb) with a random password for the superuser "weir",
// scram-sha-256 authentication for every connection, and a database
// "weir_test" (DSN). It runs with max_prepared_transactions=64,
// max_connections=100 and without fsync, synchronous commit or full page
// writes: durable against a crash of its processes (Kill), which is what
// the tests need, but not against one of the machine.
//
// The server's directory (data directory, unix socket, logs) is made with
// os.MkdirTemp under os.TempDir() and removed when the server is closed:
// this is the one place a Weir test writes outside its t.TempDir. Two
// reasons: PostgreSQL refuses to run as root, so as root the server runs
// as the "postgres" system user (Debian's package creates it) and its
// directory must belong to that user with every parent traversable, while
// t.TempDir's parents are private to root; and a unix socket's path must
// stay under about 100 bytes, which t.TempDir's long names exceed.
//
// Without the binaries Start fails the test (it does not skip: a missing
// database must not pass silently) with a message that says to run
// scripts/ensure-postgres.sh; with WEIR_SKIP_POSTGRES=1 in the environment
// it skips instead, and StartMain returns ErrSkip.
//
// The server is stopped by the process id that Start started, never by
// name: Stop asks the postmaster for a fast shutdown, Kill sends SIGKILL
// to it and its children (a crash), Restart starts it again on the same
// directory and port. Its processes also get SIGKILL if the test binary
// dies first.
//
// pgtest imports pgx (to wait for the server and create the database)
// and the standard library. It is a test helper: only _test.go files
// import it.
package pgtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

const (
	// User is the superuser of every server; Database the database DSN
	// names.
	User     = "weir"
	Database = "weir_test"

	// SkipEnv, set to 1, makes Start skip and StartMain return ErrSkip.
	SkipEnv = "WEIR_SKIP_POSTGRES"

	// binGlob is where Debian installs the server binaries, one
	// directory per major version.
	binGlob = "/usr/lib/postgresql/*/bin"
	// readyTimeout bounds how long a start waits for the server to accept
	// connections; generous, as a slow machine under -race can take many
	// seconds. stopTimeout bounds a fast shutdown before SIGKILL.
	readyTimeout = 90 * time.Second
	stopTimeout  = 60 * time.Second
	// startAttempts is how often a first start picks another port when
	// the one it picked was taken before the server bound it.
	startAttempts = 5
	// logTail is how much of the server's log an error quotes.
	logTail = 3000
)

// ErrSkip is returned by StartMain when WEIR_SKIP_POSTGRES=1.
var ErrSkip = errors.New("pgtest: " + SkipEnv + "=1: tests that need PostgreSQL are skipped")

// errAddrInUse is a start that failed because its port was taken.
var errAddrInUse = errors.New("address already in use")

// errShmemInUse is a start after a Kill that found processes of the
// killed server still attached to its shared memory.
var errShmemInUse = errors.New("shared memory of the previous server still in use")

// BinDir returns the directory of the PostgreSQL server binaries, as
// scripts/ensure-postgres.sh finds it: the newest /usr/lib/postgresql/*/bin
// holding initdb, postgres and pg_ctl.
func BinDir() (string, error) {
	dirs, _ := filepath.Glob(binGlob)
	slices.SortFunc(dirs, func(a, b string) int { return versionOf(b) - versionOf(a) })
	for _, d := range dirs {
		ok := true
		for _, name := range []string{"initdb", "postgres", "pg_ctl"} {
			if fi, err := os.Stat(filepath.Join(d, name)); err != nil || fi.Mode()&0o111 == 0 {
				ok = false
			}
		}
		if ok {
			return d, nil
		}
	}
	return "", fmt.Errorf("pgtest: no PostgreSQL server binaries (initdb, postgres, pg_ctl) in %s; run scripts/ensure-postgres.sh (as root it installs Debian's postgresql package), or set %s=1 to skip the tests that need PostgreSQL", binGlob, SkipEnv)
}

// versionOf is the major version in /usr/lib/postgresql/<version>/bin.
func versionOf(dir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return v
}

// Server is a running (or stopped) private PostgreSQL server. Its methods
// may be called from any goroutine.
type Server struct {
	bin      string
	dir      string // the server's directory: data, socket, logs
	data     string
	logPath  string
	password string
	cred     *syscall.Credential // the postgres user's, when run as root

	mu struct {
		sync.Mutex
		port   int
		proc   *process // nil while stopped
		closed bool
	}
}

// process is one run of the postmaster.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once it exited
	err  error         // what Wait returned, set before done is closed
}

// Start starts a server for t and closes it (stops it and removes its
// directory) at t's cleanup. It fails t if the server cannot start, and
// skips t when WEIR_SKIP_POSTGRES=1.
func Start(t testing.TB) *Server {
	t.Helper()
	if os.Getenv(SkipEnv) == "1" {
		t.Skip(ErrSkip.Error())
	}
	s, err := start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("pgtest: %v", err)
		}
	})
	return s
}

// StartMain starts a server for a package's tests, for TestMain: close
// it with the returned function after m.Run. With WEIR_SKIP_POSTGRES=1 it
// returns ErrSkip (and a no-op close); the tests should then skip.
func StartMain() (*Server, func(), error) {
	if os.Getenv(SkipEnv) == "1" {
		return nil, func() {}, ErrSkip
	}
	s, err := start()
	if err != nil {
		return nil, func() {}, err
	}
	return s, func() {
		if err := s.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "pgtest:", err)
		}
	}, nil
}

func start() (*Server, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	s := &Server{bin: bin}
	if os.Geteuid() == 0 {
		if s.cred, err = postgresUser(); err != nil {
			return nil, err
		}
	}
	if s.dir, err = os.MkdirTemp(os.TempDir(), "weir-pgtest-"); err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			_ = s.Close()
		}
	}()
	s.data, s.logPath = filepath.Join(s.dir, "data"), filepath.Join(s.dir, "postgres.log")
	if err := s.prepareDir(); err != nil {
		return nil, err
	}
	if err := s.initdb(); err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		err = s.launch(port)
		if err == nil {
			break
		}
		if !errors.Is(err, errAddrInUse) || attempt == startAttempts {
			return nil, err
		}
	}
	if err := s.createDatabase(Database); err != nil {
		return nil, err
	}
	ok = true
	return s, nil
}

// postgresUser returns the credential of the postgres system user.
func postgresUser() (*syscall.Credential, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pgtest: running as root, and PostgreSQL refuses to run as root, but there is no postgres user to run it as (%v); run scripts/ensure-postgres.sh, whose postgresql package creates it", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("pgtest: the postgres user has uid %q and gid %q; want numbers", u.Uid, u.Gid)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// prepareDir gives the server's directory to the user the server runs
// as, after checking that user can reach it.
func (s *Server) prepareDir() error {
	if s.cred == nil {
		return nil
	}
	for d := filepath.Dir(s.dir); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("pgtest: %w", err)
		}
		if fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("pgtest: %s (mode %o) cannot be traversed by the postgres user that runs the server; point TMPDIR at a directory whose parents all can be (such as /tmp)", d, fi.Mode().Perm())
		}
		if d == filepath.Dir(d) {
			break
		}
	}
	if err := os.Chown(s.dir, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
		return fmt.Errorf("pgtest: give %s to the postgres user: %w", s.dir, err)
	}
	return nil
}

// sysProcAttr returns the attributes of a server process: its own
// process group, the postgres user when run as root, and SIGKILL when
// the thread that started it dies (see launch).
func (s *Server) sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Credential: s.cred, Pdeathsig: syscall.SIGKILL}
}

// env is the environment of the server's processes.
func env() []string { return []string{"PATH=/usr/bin:/bin", "LC_ALL=C", "LANG=C", "TZ=UTC"} }

// initdb creates the cluster with a random superuser password.
func (s *Server) initdb() error {
	var pw [16]byte
	if _, err := rand.Read(pw[:]); err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	s.password = hex.EncodeToString(pw[:])
	pwfile := filepath.Join(s.dir, "pwfile")
	if err := os.WriteFile(pwfile, []byte(s.password+"\n"), 0o600); err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	defer os.Remove(pwfile)
	if s.cred != nil {
		if err := os.Chown(pwfile, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			return fmt.Errorf("pgtest: %w", err)
		}
	}
	logPath := filepath.Join(s.dir, "initdb.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	defer logf.Close()
	cmd := exec.Command(filepath.Join(s.bin, "initdb"),
		"-D", s.data, "-U", User, "--pwfile="+pwfile, "--auth=scram-sha-256",
		"-E", "UTF8", "--locale=C", "--no-sync")
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = s.dir, env(), logf, logf
	cmd.SysProcAttr = s.sysProcAttr()
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("pgtest: initdb -D %s: %v; its log ends:\n%s", s.data, err, tail(logPath, 0))
	}
	return nil
}

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgtest: pick a port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	return port, l.Close()
}

// launch starts the postmaster on port and waits until it accepts
// connections. The error wraps errAddrInUse or errShmemInUse when that is
// why the server did not start.
func (s *Server) launch(port int) error {
	logf, err := os.OpenFile(s.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	offset, _ := logf.Seek(0, io.SeekEnd)
	cmd := exec.Command(filepath.Join(s.bin, "postgres"),
		"-D", s.data,
		"-p", strconv.Itoa(port),
		"-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories="+s.dir,
		"-c", "max_prepared_transactions=64",
		"-c", "max_connections=100",
		"-c", "fsync=off",
		"-c", "synchronous_commit=off",
		"-c", "full_page_writes=off",
		"-c", "logging_collector=off",
		"-c", "log_min_messages=warning")
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = s.dir, env(), logf, logf
	cmd.SysProcAttr = s.sysProcAttr()
	p := &process{cmd: cmd, done: make(chan struct{})}
	started := make(chan error, 1)
	// The process gets SIGKILL when the thread that started it exits
	// (Pdeathsig), so it is started from a locked thread that lives as
	// long as the process: a dying test binary takes the server with it,
	// and nothing else does.
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		err := cmd.Start()
		started <- err
		if err != nil {
			return
		}
		p.err = cmd.Wait()
		close(p.done)
	}()
	err = <-started
	logf.Close()
	if err != nil {
		return fmt.Errorf("pgtest: start %s: %w", cmd.Path, err)
	}
	s.mu.Lock()
	s.mu.port, s.mu.proc = port, p
	s.mu.Unlock()
	if err := s.waitReady(p, port, offset); err != nil {
		s.kill(p)
		s.mu.Lock()
		if s.mu.proc == p {
			s.mu.proc = nil
		}
		s.mu.Unlock()
		return err
	}
	return nil
}

// waitReady polls until the server of p accepts a connection on port.
func (s *Server) waitReady(p *process, port int, logOffset int64) error {
	deadline := time.Now().Add(readyTimeout)
	var last error
	for interval := time.Millisecond; ; interval = min(2*interval, 50*time.Millisecond) {
		select {
		case <-p.done:
			log := tail(s.logPath, logOffset)
			err := fmt.Errorf("pgtest: postgres on port %d exited at start (%v); its log ends:\n%s", port, p.err, log)
			switch {
			case strings.Contains(log, "Address already in use"):
				err = fmt.Errorf("%w: %w", err, errAddrInUse)
			case strings.Contains(log, "pre-existing shared memory block"):
				err = fmt.Errorf("%w: %w", err, errShmemInUse)
			}
			return err
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		conn, err := pgx.Connect(ctx, s.dsn(port, "postgres"))
		if err == nil {
			err = conn.Close(ctx)
		}
		cancel()
		if err == nil {
			return nil
		}
		last = err
		if time.Now().After(deadline) {
			return fmt.Errorf("pgtest: postgres on port %d did not accept connections within %v (last: %v); its log ends:\n%s", port, readyTimeout, last, tail(s.logPath, logOffset))
		}
		time.Sleep(interval) // polling interval, not synchronisation
	}
}

// createDatabase creates database name.
func (s *Server) createDatabase(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.DSNFor("postgres"))
	if err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("pgtest: create database %s: %w", name, err)
	}
	return nil
}

// CreateDatabase creates database name and returns its DSN.
func (s *Server) CreateDatabase(name string) (string, error) {
	if err := s.createDatabase(name); err != nil {
		return "", err
	}
	return s.DSNFor(name), nil
}

// DSN returns the URL of the database "weir_test" as the superuser, with
// its password: postgres://weir:<password>@127.0.0.1:<port>/weir_test.
func (s *Server) DSN() string { return s.DSNFor(Database) }

// DSNFor is DSN for database db.
func (s *Server) DSNFor(db string) string { return s.dsn(s.Port(), db) }

func (s *Server) dsn(port int, db string) string {
	return fmt.Sprintf("postgres://%s:%s@127.0.0.1:%d/%s?sslmode=disable", User, s.password, port, db)
}

// Password returns the superuser's password.
func (s *Server) Password() string { return s.password }

// Port returns the server's TCP port on 127.0.0.1; it stays the same
// across Restart.
func (s *Server) Port() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.port
}

// LogPath returns the server's log file.
func (s *Server) LogPath() string { return s.logPath }

// Running reports whether the server's postmaster runs.
func (s *Server) Running() bool {
	s.mu.Lock()
	p := s.mu.proc
	s.mu.Unlock()
	if p == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Stop shuts the server down as SIGINT does (a fast shutdown: open
// transactions are rolled back, prepared ones stay, clients are
// disconnected) and waits for it to exit, killing it if it takes longer
// than a minute. A stopped server does nothing.
func (s *Server) Stop() error {
	s.mu.Lock()
	p := s.mu.proc
	s.mu.proc = nil
	s.mu.Unlock()
	if p == nil {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-p.done:
		return nil
	case <-time.After(stopTimeout):
		s.kill(p)
		return fmt.Errorf("postgres (pid %d) did not shut down within %v and was killed", p.cmd.Process.Pid, stopTimeout)
	}
}

// Kill crashes the server: SIGKILL to the postmaster and to every process
// it started, as a power cut would stop them (the data survives, since
// nothing was lost from the page cache). It waits for the postmaster to
// exit. Restart starts it again; committed and prepared transactions are
// recovered.
func (s *Server) Kill() {
	s.mu.Lock()
	p := s.mu.proc
	s.mu.proc = nil
	s.mu.Unlock()
	if p != nil {
		s.kill(p)
	}
}

// kill stops p's postmaster (so that it forks no more), kills its
// children, found by their parent's pid, then the postmaster, and waits
// for it.
func (s *Server) kill(p *process) {
	pid := p.cmd.Process.Pid
	select {
	case <-p.done:
		return
	default:
	}
	_ = syscall.Kill(pid, syscall.SIGSTOP)
	// Once stopped it forks no child that the scan below could miss.
	for deadline := time.Now().Add(5 * time.Second); !stopped(pid) && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond) // polling /proc, not synchronisation
	}
	for _, child := range children(pid) {
		_ = syscall.Kill(child, syscall.SIGKILL)
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL) // its process group: the postmaster
	<-p.done
}

// stopped reports whether process pid is stopped (or gone), from /proc.
func stopped(pid int) bool {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 || i+2 >= len(stat) {
		return true
	}
	state := stat[i+2]
	return state == 'T' || state == 't' || state == 'Z' || state == 'X'
}

// children returns the pids whose parent is pid, from /proc.
func children(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...; comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(string(stat[i+1:]))
		if len(fields) >= 2 && fields[1] == strconv.Itoa(pid) {
			out = append(out, child)
		}
	}
	return out
}

// Restart stops the server if it runs (as Stop does) and starts it again
// on the same directory and port, waiting until it accepts connections.
// After a Kill, it retries while the killed server's processes are still
// going away or its port is still taken.
func (s *Server) Restart() error {
	if err := s.Stop(); err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	s.mu.Lock()
	closed, port := s.mu.closed, s.mu.port
	s.mu.Unlock()
	if closed {
		return errors.New("pgtest: Restart of a closed server")
	}
	deadline := time.Now().Add(readyTimeout)
	for interval := 10 * time.Millisecond; ; interval = min(2*interval, 500*time.Millisecond) {
		err := s.launch(port)
		if err == nil {
			return nil
		}
		if !errors.Is(err, errAddrInUse) && !errors.Is(err, errShmemInUse) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(interval) // retry backoff, not synchronisation
	}
}

// Close stops the server and removes its directory. It is idempotent.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		return nil
	}
	s.mu.closed = true
	s.mu.Unlock()
	err := s.Stop()
	if s.dir != "" {
		if rerr := os.RemoveAll(s.dir); err == nil {
			err = rerr
		}
	}
	return err
}

// tail returns the end of the file at path from offset on, at most
// logTail bytes.
func tail(path string, offset int64) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	if offset > 0 && offset <= int64(len(b)) {
		b = b[offset:]
	}
	if len(b) > logTail {
		b = b[len(b)-logTail:]
	}
	return string(b)
}
