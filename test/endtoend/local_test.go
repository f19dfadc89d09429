package endtoend

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weirstream/weir/internal/syncbuf"
	"github.com/weirstream/weir/test/clustertest"

	"github.com/weirstream/weir/test/polltest"
)

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// `weir local` starts a jobmanager and taskmanagers as child processes and
// starts a taskmanager again when it dies.
func TestWeirLocalRestartsTaskManagers(t *testing.T) {
	bin := clustertest.Binaries(t)
	rpc := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	rest := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	var out syncbuf.Buffer
	local := exec.Command(filepath.Join(bin, "weir"), "local", "--taskmanagers", "2", "--slots", "1",
		"--rpc-address", rpc, "--rest-address", rest, "--log-level", "info")
	local.Stdout, local.Stderr = &out, &out
	local.Dir = t.TempDir() // weir local keeps its data in ./weir-data
	if err := local.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = local.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = local.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = local.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("weir local output:\n%s", out.String())
		}
	})
	live := func() int {
		cmd := exec.Command(filepath.Join(bin, "weir"), "--jobmanager", rpc, "taskmanagers", "list")
		text, err := cmd.CombinedOutput()
		if err != nil {
			return -1
		}
		return strings.Count(string(text), " live ")
	}
	polltest.Eventually(t, time.Minute, "two live taskmanagers", func() bool { return live() == 2 })

	// SIGKILL taskmanager 1: the child of this `weir local` with its id on
	// its command line (another cluster on the machine may run one too).
	pid := childPID(t, local.Process.Pid, "local-tm-1")
	if pid == 0 {
		t.Fatal("no child process of weir local runs taskmanager local-tm-1")
	}
	// Each of the two runs on half of the CPUs (at least one).
	cmdline, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "\x00--cpu-cores\x00" + strconv.Itoa(max(1, runtime.NumCPU()/2)) + "\x00"; !strings.Contains(string(cmdline), want) {
		t.Errorf("taskmanager local-tm-1 runs as %q, want --cpu-cores %d", strings.ReplaceAll(string(cmdline), "\x00", " "), max(1, runtime.NumCPU()/2))
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	polltest.Eventually(t, time.Minute, "weir local to restart the taskmanager", func() bool {
		return strings.Contains(out.String(), "taskmanager-1 exited") && childPID(t, local.Process.Pid, "local-tm-1") != pid
	})
	polltest.Eventually(t, time.Minute, "two live taskmanagers again", func() bool { return live() == 2 })
}

// childPID returns the pid of the child of process parent that runs
// taskmanager id (0 if none).
func childPID(t *testing.T, parent int, id string) int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if parentOf(pid) != parent {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if len(args) > 1 && args[1] == "taskmanager" && strings.Contains(string(cmdline), "\x00"+id+"\x00") {
			return pid
		}
	}
	return 0
}

// parentOf returns the parent pid of process pid (0 if it cannot be read).
func parentOf(pid int) int {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	// pid (comm) state ppid ...; comm may contain spaces and parentheses.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0
	}
	fields := strings.Fields(string(stat[i+1:]))
	if len(fields) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(fields[1])
	return ppid
}
