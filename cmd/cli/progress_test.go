package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/weirstream/weir/builtin"
	"github.com/weirstream/weir/jobmanager"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/taskmanager"
)

// terminalBuffer is a command output that says it is a terminal.
type terminalBuffer struct{ bytes.Buffer }

func (*terminalBuffer) IsTerminal() bool { return true }

// screen is what a terminal shows after printing s: a carriage return
// goes back to the start of the line, later characters overwrite earlier
// ones; trailing blanks are dropped.
func screen(s string) string {
	var lines [][]rune
	line, col := []rune{}, 0
	for _, r := range s {
		switch r {
		case '\n':
			lines = append(lines, line)
			line, col = []rune{}, 0
		case '\r':
			col = 0
		default:
			if col < len(line) {
				line[col] = r
			} else {
				line = append(line, r)
			}
			col++
		}
	}
	lines = append(lines, line)
	var out []string
	for _, l := range lines {
		out = append(out, strings.TrimRight(string(l), " "))
	}
	return strings.Join(out, "\n")
}

func TestScreen(t *testing.T) {
	for in, want := range map[string]string{
		"a\n":                                   "a\n",
		"x: 1%\rx: 100%\r       \rdone\n":       "done\n",
		"submitted\nrestoring 5\r           \r": "submitted\n",
	} {
		if got := screen(in); got != want {
			t.Errorf("screen(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestNotATerminalWritesNothingExtra: progress is drawn only on a
// terminal and only with table output.
func TestNotATerminalWritesNothingExtra(t *testing.T) {
	var buf bytes.Buffer
	for _, tc := range []struct {
		w      io.Writer
		output string
		on     bool
	}{{&buf, "table", false}, {&terminalBuffer{}, "table", true}, {&terminalBuffer{}, "json", false}, {os.Stdout, "json", false}} {
		line := newProgressLine(tc.w, tc.output)
		if line.on() != tc.on {
			t.Errorf("%T with -o %s: progress drawn %v, want %v", tc.w, tc.output, line.on(), tc.on)
		}
		line.show("progress")
		line.clear()
	}
	if buf.Len() != 0 {
		t.Fatalf("progress written to a buffer: %q", buf.String())
	}
	if f, err := os.CreateTemp(t.TempDir(), "out"); err == nil {
		if isTerminal(f) {
			t.Error("a regular file is taken for a terminal")
		}
		f.Close()
	}
}

// progressCluster is a jobmanager and a taskmanager in this process.
type progressCluster struct {
	addr, dir string
	rest      string // the REST address
	api       weirpb.JobServiceClient
}

func startProgressCluster(t *testing.T) *progressCluster {
	t.Helper()
	dir := t.TempDir()
	jcfg := jobmanager.DefaultConfig()
	jcfg.RPCAddress, jcfg.RESTAddress, jcfg.DataDir = "127.0.0.1:0", "127.0.0.1:0", ""
	jcfg.HeartbeatInterval, jcfg.HeartbeatTimeout = 100*time.Millisecond, 10*time.Second
	jcfg.AllowedPaths = []string{dir}
	jcfg.Logger = slog.New(slog.DiscardHandler)
	jm, err := jobmanager.New(jcfg, builtin.Registry())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	jmDone := make(chan error, 1)
	go func() { jmDone <- jm.Run(ctx) }()
	<-jm.Ready()

	tcfg := taskmanager.DefaultConfig()
	tcfg.ID, tcfg.JobManagerAddress = "tm-progress", jm.RPCAddr()
	tcfg.RPCAddress, tcfg.ExchangeAddress = "127.0.0.1:0", ""
	tcfg.Slots, tcfg.RegisterRetry = 4, 50*time.Millisecond
	tcfg.StateDir, tcfg.AllowedPaths = filepath.Join(dir, "state"), []string{dir}
	tcfg.Logger = slog.New(slog.DiscardHandler)
	tm, err := taskmanager.New(tcfg, builtin.Registry())
	if err != nil {
		t.Fatal(err)
	}
	tmDone := make(chan error, 1)
	go func() { tmDone <- tm.Run(ctx) }()
	conn, err := grpc.NewClient(jm.RPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		cancel()
		<-tmDone
		<-jmDone
	})
	c := &progressCluster{addr: jm.RPCAddr(), dir: dir, rest: jm.RESTAddr(), api: weirpb.NewJobServiceClient(conn)}
	eventually(t, "the taskmanager to register", func() bool {
		resp, err := c.api.ListTaskManagers(t.Context(), &weirpb.ListTaskManagersRequest{})
		return err == nil && len(resp.GetTaskmanagers()) == 1
	})
	return c
}

// weir runs the weir CLI against the cluster, writing to out.
func (c *progressCluster) weir(t *testing.T, out io.Writer, args ...string) error {
	t.Helper()
	cmd := NewWeirCommand(builtin.Registry())
	cmd.SetOut(out)
	cmd.SetErr(io.Discard)
	cmd.SetArgs(append(args, "--jobmanager", c.addr, "--timeout", "30s"))
	return cmd.ExecuteContext(t.Context())
}

// spec writes a job with keyed state: an unbounded, rate-limited datagen
// into a running count per key, checkpointed every 500ms. (Triggers sent
// close together may reach a source out of order, which declines the
// older: the interval keeps periodic checkpoints apart from the
// savepoints', and declined ones are tolerated.)
func (c *progressCluster) spec(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "job.yaml")
	body := fmt.Sprintf(`name: progress
parallelism: 2
checkpointing: {interval: 500ms, tolerableFailures: 10, storage: "file://%s"}
operators:
  - uid: events
    type: datagen
    config: {ratePerSecond: 20000, seed: 1, fields: [{name: key, kind: key, cardinality: 5000, prefix: k}]}
  - uid: counts
    type: running_count
    keyBy: [key]
  - uid: out
    type: discard
`, filepath.Join(c.dir, "ckpt"))
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// submit submits spec (with extra args) and waits until a checkpoint of
// the job completed; it returns the job's id and the command's output.
func (c *progressCluster) submit(t *testing.T, out io.Writer, spec string, args ...string) string {
	t.Helper()
	var buf bytes.Buffer
	if out == nil {
		out = &buf
	}
	if err := c.weir(t, out, append([]string{"submit", spec}, args...)...); err != nil {
		t.Fatalf("submit: %v", err)
	}
	m := regexp.MustCompile(`submitted job "progress" as (\S+)\n`).FindStringSubmatch(screen(fmt.Sprint(out)))
	if m == nil {
		t.Fatalf("submit printed %q", fmt.Sprint(out))
	}
	eventually(t, "a checkpoint of job "+m[1], func() bool {
		resp, err := c.api.ListCheckpoints(t.Context(), &weirpb.ListCheckpointsRequest{JobId: m[1]})
		return err == nil && resp.GetCompleted() > 0
	})
	return m[1]
}

// TestProgressOnTerminalOnly runs weir savepoint, weir jobs stop and weir
// submit --from against a real jobmanager and taskmanager, once writing
// to a buffer (a script's pipe) and once to a terminal: without a
// terminal the output is exactly the lines it always was; on a terminal
// progress lines come and go (carriage returns) and the screen is left
// with the same lines. The jobmanager's savepoint progress grows to its
// total, and the restored job's restore progress reaches its total.
func TestProgressOnTerminalOnly(t *testing.T) {
	c := startProgressCluster(t)
	spec := c.spec(t)
	spDir := "file://" + filepath.Join(c.dir, "savepoints")
	id := c.submit(t, nil, spec)
	located := `at checkpoint \d+ \([0-9.]+ [KMG]?i?B\): (` + regexp.QuoteMeta(spDir) + `/savepoint-` + id + `-\d+)\n$`

	// weir savepoint, to a pipe and to a terminal.
	var plain bytes.Buffer
	if err := c.weir(t, &plain, "savepoint", id, "--dir", spDir); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^savepoint of job ` + id + ` ` + located).MatchString(plain.String()) {
		t.Fatalf("weir savepoint without a terminal printed %q", plain.String())
	}
	var term terminalBuffer
	if err := c.weir(t, &term, "savepoint", id, "--dir", spDir); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(term.String(), "\rsavepoint of job "+id+": ") {
		t.Fatalf("weir savepoint on a terminal showed no progress: %q", term.String())
	}
	if s := screen(term.String()); !regexp.MustCompile(`^savepoint of job ` + id + ` ` + located).MatchString(s) {
		t.Fatalf("weir savepoint on a terminal left %q on the screen", s)
	}

	// The progress the CLI polls: it grows to its total.
	rid := newRequestID()
	done := make(chan error, 1)
	go func() {
		_, err := c.api.TriggerSavepoint(t.Context(), &weirpb.TriggerSavepointRequest{JobId: id, Dir: spDir, RequestId: rid})
		done <- err
	}()
	var last *weirpb.SavepointProgress
	eventually(t, "the savepoint request to end", func() bool {
		p, err := c.api.GetSavepointProgress(t.Context(), &weirpb.GetSavepointProgressRequest{RequestId: rid})
		if err != nil {
			return false
		}
		if last != nil && (p.GetBytesCopied() < last.GetBytesCopied() || last.GetBytesTotal() > 0 && p.GetBytesTotal() != last.GetBytesTotal()) {
			t.Fatalf("savepoint progress went from %v to %v", last, p)
		}
		last = p
		return p.GetStatus() != "IN_PROGRESS"
	})
	if err := <-done; err != nil || last.GetStatus() != "COMPLETED" || last.GetBytesTotal() == 0 || last.GetBytesCopied() != last.GetBytesTotal() ||
		last.GetResult().GetLocation() == "" {
		t.Fatalf("savepoint ended with %v, progress %v; want COMPLETED with every byte of state copied", err, last)
	}

	// weir jobs stop, to a pipe: the location of the savepoint to restore.
	plain.Reset()
	if err := c.weir(t, &plain, "jobs", "stop", id, "--savepoint-dir", spDir); err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`^job ` + id + ` stopped with a savepoint ` + located).FindStringSubmatch(plain.String())
	if m == nil {
		t.Fatalf("weir jobs stop printed %q", plain.String())
	}
	from := m[1]

	// weir submit --from, to a pipe and to a terminal.
	plain.Reset()
	resumed := c.submit(t, &plain, spec, "--from", from)
	if want := fmt.Sprintf("submitted job %q as %s\n", "progress", resumed); plain.String() != want {
		t.Fatalf("submit --from without a terminal printed %q, want %q", plain.String(), want)
	}
	term.Reset()
	resumed = c.submit(t, &term, spec, "--from", from)
	if s, want := screen(term.String()), fmt.Sprintf("submitted job %q as %s\n", "progress", resumed); s != want {
		t.Fatalf("submit --from on a terminal left %q on the screen, want %q", s, want)
	}
	// It returned once every task ran: the restore is complete.
	job, err := c.api.GetJob(t.Context(), &weirpb.GetJobRequest{JobId: resumed})
	if err != nil {
		t.Fatal(err)
	}
	r := job.GetRestore()
	if r.GetTasksRestoring() != 0 || r.GetBytesTotal() == 0 || r.GetBytesRestored() != r.GetBytesTotal() {
		t.Fatalf("restore of the resumed job: %v; want every byte restored and no task restoring", r)
	}
	var perTask int64
	for _, task := range job.GetTasks() {
		if task.GetRestoring() || task.GetRestoredBytes() != task.GetRestoreBytes() {
			t.Fatalf("task %s: %v", task.GetName(), task)
		}
		perTask += task.GetRestoreBytes()
	}
	if perTask != r.GetBytesTotal() {
		t.Fatalf("tasks restore %d bytes, the job %d", perTask, r.GetBytesTotal())
	}
}
