package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/weirstream/weir/proto/weirpb"
)

type localConfig struct {
	taskManagers int
	slots        int
	rpcAddress   string
	restAddress  string
	logLevel     string
}

func newLocalCommand() *cobra.Command {
	cfg := localConfig{taskManagers: 2, slots: 2, rpcAddress: "127.0.0.1:6123", restAddress: "127.0.0.1:8081", logLevel: "warn"}
	cmd := &cobra.Command{
		Use:   "local",
		Short: "Run a jobmanager and N taskmanagers on this machine (no external services)",
		Long: "local starts a jobmanager and N taskmanagers as child processes of this one and keeps them\n" +
			"running: a taskmanager that exits is started again. Ctrl-C stops them all. Each taskmanager\n" +
			"runs on an equal share of this machine's CPUs (--cpu-cores), at least one.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.taskManagers < 1 || cfg.slots < 1 {
				return fmt.Errorf("--taskmanagers and --slots must be at least 1")
			}
			return runLocal(cmd.Context(), cmd.OutOrStdout(), cfg)
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.taskManagers, "taskmanagers", cfg.taskManagers, "number of taskmanagers")
	f.IntVar(&cfg.slots, "slots", cfg.slots, "slots per taskmanager")
	f.StringVar(&cfg.rpcAddress, "rpc-address", cfg.rpcAddress, "jobmanager gRPC address")
	f.StringVar(&cfg.restAddress, "rest-address", cfg.restAddress, "jobmanager REST address")
	f.StringVar(&cfg.logLevel, "log-level", cfg.logLevel, "log level of the processes")
	return cmd
}

// child is one supervised process of the local cluster.
type child struct {
	name string
	args []string
}

func runLocal(ctx context.Context, out io.Writer, cfg localConfig) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("local: cannot find this program's path: %w", err)
	}
	children := []child{{name: "jobmanager", args: []string{"jobmanager",
		"--rpc-address", cfg.rpcAddress, "--rest-address", cfg.restAddress, "--log-level", cfg.logLevel}}}
	// The taskmanagers share the machine's CPUs rather than each
	// scheduling for all of them (taskmanager.Config.CPUCores).
	cores := strconv.Itoa(max(1, runtime.NumCPU()/cfg.taskManagers))
	for i := 1; i <= cfg.taskManagers; i++ {
		children = append(children, child{name: "taskmanager-" + strconv.Itoa(i), args: []string{"taskmanager",
			"--id", "local-tm-" + strconv.Itoa(i), "--jobmanager", cfg.rpcAddress, "--slots", strconv.Itoa(cfg.slots),
			"--cpu-cores", cores, "--log-level", cfg.logLevel}})
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex // serialises output lines
	var wg sync.WaitGroup
	errc := make(chan error, len(children))
	for _, c := range children {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := supervise(ctx, exe, c, out, &mu); err != nil {
				errc <- err
				cancel()
			}
		}()
	}
	if err := waitLocalReady(ctx, cfg); err != nil {
		cancel()
		wg.Wait()
		select {
		case e := <-errc:
			return e
		default:
		}
		return err
	}
	mu.Lock()
	fmt.Fprintf(out, "weir local: jobmanager at %s (REST http://%s), %d taskmanagers with %d slots each. Ctrl-C stops.\n",
		cfg.rpcAddress, cfg.restAddress, cfg.taskManagers, cfg.slots)
	mu.Unlock()
	<-ctx.Done()
	wg.Wait()
	select {
	case e := <-errc:
		return e
	default:
	}
	return nil
}

// supervise runs c until ctx ends, restarting it when it exits. The
// jobmanager is not restarted: its exit ends the local cluster.
func supervise(ctx context.Context, exe string, c child, out io.Writer, mu *sync.Mutex) error {
	backoff := 500 * time.Millisecond
	for {
		cmd := exec.Command(exe, c.args...)
		cmd.Env = os.Environ()
		stdout, _ := cmd.StdoutPipe()
		stderr, _ := cmd.StderrPipe()
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("local: start %s: %w", c.name, err)
		}
		var pipes sync.WaitGroup
		for _, r := range []io.Reader{stdout, stderr} {
			pipes.Add(1)
			go func() {
				defer pipes.Done()
				s := bufio.NewScanner(r)
				s.Buffer(make([]byte, 64*1024), 1024*1024)
				for s.Scan() {
					mu.Lock()
					fmt.Fprintf(out, "[%s] %s\n", c.name, s.Text())
					mu.Unlock()
				}
			}()
		}
		done := make(chan error, 1)
		go func() { pipes.Wait(); done <- cmd.Wait() }()
		select {
		case <-ctx.Done():
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
			return nil
		case err := <-done:
			if ctx.Err() != nil {
				return nil
			}
			if c.name == "jobmanager" {
				return fmt.Errorf("local: jobmanager exited: %v", err)
			}
			mu.Lock()
			fmt.Fprintf(out, "weir local: %s exited (%v); restarting in %v\n", c.name, err, backoff)
			mu.Unlock()
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 10*time.Second)
		}
	}
}

// waitLocalReady polls the jobmanager until every taskmanager registered.
func waitLocalReady(ctx context.Context, cfg localConfig) error {
	conn, err := grpc.NewClient(cfg.rpcAddress, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	client := weirpb.NewJobServiceClient(conn)
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		resp, err := client.ListTaskManagers(cctx, &weirpb.ListTaskManagersRequest{})
		cancel()
		if err == nil {
			live := 0
			for _, t := range resp.GetTaskmanagers() {
				if t.GetLive() {
					live++
				}
			}
			if live >= cfg.taskManagers {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return errors.New("local: the cluster did not come up within 60s; see the log lines above")
}
