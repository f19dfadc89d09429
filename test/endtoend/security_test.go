package endtoend

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/security"
	"github.com/weirstream/weir/stream"
	"github.com/weirstream/weir/test/clustertest"
	"github.com/weirstream/weir/test/polltest"
)

// TestSecurityAttacks runs the exactly-once workload on a cluster with
// mutual TLS and, while it runs, attacks it the way someone on the network
// would, each attack with the credentials it could plausibly hold: none, a
// certificate from another CA, a taskmanager's certificate, a reader's.
// Each must be refused with a clear error, and the job's output must stay
// exact. It prints
//
//	attacks=<n> rejected=<n> lost=0 duplicated=0
func TestSecurityAttacks(t *testing.T) {
	const maxEnded = 4
	c := clustertest.Start(t, clustertest.Options{TLS: true, TaskManagers: 2, Slots: 2, HeartbeatInterval: 500 * time.Millisecond,
		HeartbeatTimeout: 3 * time.Second, LogLevel: "info", JobManagerArgs: []string{"--max-ended-jobs", fmt.Sprint(maxEnded)}})
	job := clustertest.NewSequenceJob(t, "secured", 15, 4000, 64)
	jobID := job.Submit(t, c)

	// A REST client that connects and never sends a request: the
	// jobmanager closes the connection (its header timeout is 10 s).
	slowloris := make(chan error, 1)
	go func() {
		conn, err := net.Dial("tcp", c.REST)
		if err != nil {
			slowloris <- err
			return
		}
		defer conn.Close()
		if err := conn.SetReadDeadline(time.Now().Add(2 * time.Minute)); err != nil {
			slowloris <- err
			return
		}
		_, err = io.Copy(io.Discard, conn) // returns when the server closes
		slowloris <- err
	}()
	clustertest.WaitCheckpointsSince(t, c, jobID, time.Time{}, 1, "before the attacks")

	// Credentials an attacker might hold.
	other := filepath.Join(t.TempDir(), "other-ca")
	if _, err := security.InitCerts(other, security.CertOptions{TaskManagers: []string{"tm-0", "tm-1"}}); err != nil {
		t.Fatal(err)
	}
	material := func(cfg security.TLSConfig) *security.Material {
		t.Helper()
		m, err := cfg.Load()
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	plain := security.DialOption(nil, security.RoleJobManager)
	foreign := security.DialOption(material(security.Files(other, security.OperatorFile)), security.RoleJobManager)
	foreignTM := security.DialOption(material(security.Files(other, security.TaskManagerFile("tm-0"))), security.RoleJobManager)
	tm0 := security.DialOption(material(c.TLSFiles(security.TaskManagerFile("tm-0"))), security.RoleJobManager)
	reader := security.DialOption(material(c.TLSFiles(security.ReaderFile)), security.RoleJobManager)
	operatorToTM := security.DialOption(material(c.TLSFiles(security.OperatorFile)), security.RoleTaskManager)
	tm0ToTM := security.DialOption(material(c.TLSFiles(security.TaskManagerFile("tm-0"))), security.RoleTaskManager)

	dial := func(addr string, opt grpc.DialOption) *grpc.ClientConn {
		t.Helper()
		cc, err := grpc.NewClient(addr, opt)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return cc
	}
	tmAddr, _ := c.TaskManagerAddr(1)
	ctx := func() context.Context {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		t.Cleanup(cancel)
		return ctx
	}
	register := func(opt grpc.DialOption, id string) error {
		_, err := weirpb.NewClusterServiceClient(dial(c.RPCAddr, opt)).RegisterTaskManager(ctx(),
			&weirpb.RegisterTaskManagerRequest{TaskmanagerId: id, Address: "127.0.0.1:1", Slots: 8, InstanceId: "rogue"})
		return err
	}
	type attack struct {
		name string
		do   func() error
		// want is the gRPC code of the refusal; codes.Unavailable is a
		// failed TLS handshake.
		want codes.Code
		// says is what a PermissionDenied or InvalidArgument refusal
		// must say (default "security:", the authorization layer's).
		says string
	}
	jm := security.DialOption(material(c.TLSFiles(security.JobManagerFile)), security.RoleTaskManager)
	attacks := []attack{
		{"rogue taskmanager, plaintext", func() error { return register(plain, "rogue") }, codes.Unavailable, ""},
		{"rogue taskmanager, certificate from another CA", func() error { return register(foreignTM, "rogue") }, codes.Unavailable, ""},
		{"taskmanager id hijack (tm-0's certificate as tm-1)", func() error { return register(tm0, "tm-1") }, codes.PermissionDenied, ""},
		{"forged checkpoint ack with an empty taskmanager id", func() error {
			_, err := weirpb.NewClusterServiceClient(dial(c.RPCAddr, tm0)).AcknowledgeCheckpoint(ctx(),
				&weirpb.AcknowledgeCheckpointRequest{Id: &weirpb.ExecutionID{JobId: jobID, Attempt: 1}, CheckpointId: 1 << 40})
			return err
		}, codes.PermissionDenied, ""},
		{"epoch poisoning: CancelTask with epoch 2^62 from an operator", func() error {
			_, err := weirpb.NewTaskExecutorServiceClient(dial(tmAddr, operatorToTM)).CancelTask(ctx(),
				&weirpb.CancelTaskRequest{Id: &weirpb.ExecutionID{JobId: jobID}, Epoch: 1 << 62})
			return err
		}, codes.PermissionDenied, ""},
		{"20 MiB message to a taskmanager's control service", func() error {
			_, err := weirpb.NewTaskExecutorServiceClient(dial(tmAddr, operatorToTM)).CancelTask(ctx(),
				&weirpb.CancelTaskRequest{Id: &weirpb.ExecutionID{JobId: strings.Repeat("a", 20<<20)}})
			return err
		}, codes.ResourceExhausted, ""},
		{"epoch poisoning: CancelTask with epoch 2^62 and a jobmanager's certificate", func() error {
			_, err := weirpb.NewTaskExecutorServiceClient(dial(tmAddr, jm)).CancelTask(ctx(),
				&weirpb.CancelTaskRequest{Id: &weirpb.ExecutionID{JobId: jobID}, Epoch: 1 << 62})
			return err
		}, codes.PermissionDenied, "epoch"},
		{"a task whose job id climbs out of the state directory", func() error {
			_, err := weirpb.NewTaskExecutorServiceClient(dial(tmAddr, jm)).SubmitTask(ctx(),
				&weirpb.SubmitTaskRequest{Task: &weirpb.TaskDeployment{TaskName: "escape", Id: &weirpb.ExecutionID{JobId: "../../escape", Attempt: 1}}})
			return err
		}, codes.InvalidArgument, "job id"},
		{"epoch poisoning: CancelTask from another taskmanager", func() error {
			_, err := weirpb.NewTaskExecutorServiceClient(dial(tmAddr, tm0ToTM)).CancelTask(ctx(),
				&weirpb.CancelTaskRequest{Id: &weirpb.ExecutionID{JobId: jobID}, Epoch: 1 << 62})
			return err
		}, codes.PermissionDenied, ""},
		{"job cancel with a reader's certificate", func() error {
			_, err := weirpb.NewJobServiceClient(dial(c.RPCAddr, reader)).CancelJob(ctx(), &weirpb.CancelJobRequest{JobId: jobID})
			return err
		}, codes.PermissionDenied, ""},
		{"job cancel with a taskmanager's certificate", func() error {
			_, err := weirpb.NewJobServiceClient(dial(c.RPCAddr, tm0)).CancelJob(ctx(), &weirpb.CancelJobRequest{JobId: jobID})
			return err
		}, codes.PermissionDenied, ""},
		{"job list, plaintext", func() error {
			_, err := weirpb.NewJobServiceClient(dial(c.RPCAddr, plain)).ListJobs(ctx(), &weirpb.ListJobsRequest{})
			return err
		}, codes.Unavailable, ""},
		{"job list, certificate from another CA", func() error {
			_, err := weirpb.NewJobServiceClient(dial(c.RPCAddr, foreign)).ListJobs(ctx(), &weirpb.ListJobsRequest{})
			return err
		}, codes.Unavailable, ""},
	}
	rejected := 0
	for _, a := range attacks {
		err := a.do()
		if got := status.Code(err); got != a.want {
			t.Errorf("%s: %v (code %v), want %v", a.name, err, got, a.want)
			continue
		}
		if a.says == "" {
			a.says = "security:"
		}
		if (a.want == codes.PermissionDenied || a.want == codes.InvalidArgument) && !strings.Contains(status.Convert(err).Message(), a.says) {
			t.Errorf("%s: refusal %q does not explain itself", a.name, status.Convert(err).Message())
		}
		rejected++
	}

	// REST: no client certificate, then a reader trying to trigger.
	moreAttacks := 0
	noCert := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{}}
	moreAttacks++
	if resp, err := noCert.Get(c.URL(c.REST) + "/v1/jobs"); err == nil {
		resp.Body.Close()
		t.Errorf("REST without a client certificate: %d", resp.StatusCode)
	} else {
		rejected++
	}
	moreAttacks++
	resp, err := c.HTTPClient().Post(c.URL(c.REST)+"/v1/jobs/"+jobID+"/checkpoints", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusForbidden {
		rejected++
	} else {
		t.Errorf("REST checkpoint trigger with a reader's certificate: %d, want 403", resp.StatusCode)
	}
	// A reader may read.
	if resp, err := c.HTTPClient().Get(c.URL(c.REST) + "/v1/jobs/" + jobID); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("REST read with a reader's certificate: %v %v", err, resp)
	} else {
		resp.Body.Close()
	}

	// Files outside the allowed roots (the system temp dir): a source on
	// /etc/passwd, one reaching out through "..", a sink into /etc.
	spec := func(source, sink string) string {
		path := filepath.Join(t.TempDir(), "spec.yaml")
		body := fmt.Sprintf("name: exfiltrate\noperators:\n  - uid: in\n    type: file\n    config: {path: %q, format: lines}\n"+
			"  - uid: out\n    type: file\n    config: {path: %q, format: csv}\n", source, sink)
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	inside := t.TempDir()
	if err := os.WriteFile(filepath.Join(inside, "in.txt"), []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, a := range []struct{ name, source, sink string }{
		{"file source on /etc/passwd", "/etc/passwd", filepath.Join(inside, "out1")},
		{"file source through ..", filepath.Join(inside, strings.Repeat("../", 12), "etc", "passwd"), filepath.Join(inside, "out2")},
		{"file sink into /etc", filepath.Join(inside, "in.txt"), "/etc/weir-exfiltrated"},
	} {
		moreAttacks++
		out, err := c.Weir("submit", spec(a.source, a.sink))
		if err != nil && strings.Contains(out, "outside the allowed roots") {
			rejected++
		} else {
			t.Errorf("%s: submit %v\n%s", a.name, err, out)
		}
	}

	// A 40,000-operator chain (it used to take ~20 GB on a taskmanager)
	// and an 8 MiB request, with an operator's certificate.
	operator := security.DialOption(material(c.TLSFiles(security.OperatorFile)), security.RoleJobManager)
	jobs := weirpb.NewJobServiceClient(dial(c.RPCAddr, operator))
	b := stream.NewBuilder("wide")
	op := b.Source("src", "datagen", nil)
	for i := range 40_000 {
		op = op.Then(fmt.Sprintf("op%d", i), "discard", nil)
	}
	if g, err := b.Build(); err != nil {
		t.Fatal(err)
	} else {
		moreAttacks++
		_, err := jobs.SubmitJob(ctx(), &weirpb.SubmitJobRequest{Graph: weirpb.FromGraph(g)})
		if status.Code(err) == codes.InvalidArgument && strings.Contains(status.Convert(err).Message(), "stream.MaxOperators") {
			rejected++
		} else {
			t.Errorf("40,000-operator job: %v", err)
		}
	}
	moreAttacks++
	huge := &weirpb.SubmitJobRequest{Graph: &weirpb.JobGraph{Name: "huge", Vertices: []*weirpb.Vertex{{Uid: "src", Type: "datagen",
		Config: []byte(`{"x":"` + strings.Repeat("a", 8<<20) + `"}`)}}}}
	if _, err := jobs.SubmitJob(ctx(), huge); status.Code(err) == codes.ResourceExhausted {
		rejected++
	} else {
		t.Errorf("8 MiB submission: %v", err)
	}

	// A second job writing into the running job's output directory fails
	// at start; the first job's output stays exact (checked below).
	moreAttacks++
	intruder := filepath.Join(t.TempDir(), "intruder.yaml")
	body := fmt.Sprintf("name: intruder\ncheckpointing: {interval: 1s}\nrestartStrategy: {type: none}\noperators:\n"+
		"  - uid: in\n    type: datagen\n    config: {rows: 1000, fields: [{name: n, kind: sequence}]}\n"+
		"  - uid: out\n    type: file\n    config: {path: %q, format: csv}\n", job.Out)
	if err := os.WriteFile(intruder, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := c.Weir("submit", intruder)
	if err != nil {
		t.Fatalf("submit the intruder: %v\n%s", err, out)
	}
	fields := strings.Fields(out)
	final := c.WaitJob(fields[len(fields)-1], 2*time.Minute).GetJob()
	if final.GetState() == weirpb.JobState_JOB_STATE_FAILED && strings.Contains(final.GetError(), "claimed") {
		rejected++
	} else {
		t.Errorf("a second job on the running job's sink directory ended %v: %s", final.GetState(), final.GetError())
	}

	// A jobmanager without TLS refuses to listen on every interface.
	moreAttacks++
	// Bounded: should it start serving, the test fails rather than hangs.
	jmCtx, jmCancel := context.WithTimeout(t.Context(), time.Minute)
	defer jmCancel()
	plainOut, err := exec.CommandContext(jmCtx, filepath.Join(clustertest.Binaries(t), "jobmanager"), "--rpc-address", "0.0.0.0:0", "--rest-address", "").CombinedOutput()
	var exit *exec.ExitError
	if errors.As(err, &exit) && strings.Contains(string(plainOut), "tls.ca") {
		rejected++
	} else {
		t.Errorf("plaintext jobmanager on 0.0.0.0: %v\n%s", err, plainOut)
	}

	// Data values never appear in errors: a line the job cannot parse as
	// an integer fails it, and the error names the field, not the value.
	moreAttacks++
	secret := "s3cr3t-" + strings.Repeat("v", 20)
	if err := os.WriteFile(filepath.Join(inside, "secret.txt"), []byte(secret+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	leak := filepath.Join(t.TempDir(), "leak.yaml")
	body = fmt.Sprintf("name: leak\nrestartStrategy: {type: none}\noperators:\n"+
		"  - uid: in\n    type: file\n    config: {path: %q, format: lines}\n"+
		"  - uid: parse\n    type: map\n    config: {set: [{name: n, expr: 'int(line)'}]}\n"+
		"  - uid: out\n    type: discard\n", filepath.Join(inside, "secret.txt"))
	if err := os.WriteFile(leak, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err = c.Weir("submit", leak); err != nil {
		t.Fatalf("submit the leaking job: %v\n%s", err, out)
	}
	fields = strings.Fields(out)
	leakID := fields[len(fields)-1]
	final = c.WaitJob(leakID, 2*time.Minute).GetJob()
	shown, _ := c.Weir("jobs", "status", leakID)
	switch {
	case final.GetState() != weirpb.JobState_JOB_STATE_FAILED:
		t.Errorf("the job parsing a secret ended %v, want FAILED", final.GetState())
	case strings.Contains(final.GetError(), "s3cr3t") || strings.Contains(shown, "s3cr3t"):
		t.Errorf("the job's error shows the data value: %s", final.GetError())
	default:
		rejected++
	}

	// A YAML alias bomb (a few hundred bytes that expand to gigabytes).
	moreAttacks++
	bomb := filepath.Join(t.TempDir(), "bomb.yaml")
	var bb strings.Builder
	bb.WriteString("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < 10; i++ {
		fmt.Fprintf(&bb, "a%d: &a%d [*a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d]\n", i, i, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1)
	}
	bb.WriteString("name: bomb\noperators: []\n")
	if err := os.WriteFile(bomb, []byte(bb.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := c.Weir("submit", bomb); err != nil && strings.Contains(out, "aliases") {
		rejected++
	} else {
		t.Errorf("YAML alias bomb: %v\n%s", err, out)
	}

	// The idle REST connection opened at the start was closed.
	moreAttacks++
	if err := <-slowloris; err == nil {
		rejected++
	} else {
		t.Errorf("an idle REST connection: %v, want it closed by the jobmanager", err)
	}

	lost, duplicated := clustertest.FinishAndVerify(t, c, job)

	// Many short jobs (after the workload ended, which they would evict):
	// the jobmanager keeps only the last maxEnded ended ones
	// (--max-ended-jobs).
	moreAttacks++
	var short []string
	for i := range 3 * maxEnded {
		spec := filepath.Join(t.TempDir(), "short.yaml")
		body := fmt.Sprintf("name: short-%d\noperators:\n  - uid: in\n    type: datagen\n    config: {rows: 10, fields: [{name: n, kind: sequence}]}\n"+
			"  - uid: out\n    type: discard\n", i)
		if err := os.WriteFile(spec, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := c.Weir("submit", spec)
		if err != nil {
			t.Fatalf("submit a short job: %v\n%s", err, out)
		}
		fields := strings.Fields(out)
		short = append(short, fields[len(fields)-1])
		c.WaitJob(short[i], 2*time.Minute)
	}
	var listed map[string]weirpb.JobState
	polltest.Eventually(t, 2*time.Minute, "the jobmanager to forget ended jobs beyond --max-ended-jobs", func() bool {
		lctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		resp, err := c.Client.ListJobs(lctx, &weirpb.ListJobsRequest{})
		if err != nil {
			return false
		}
		listed = map[string]weirpb.JobState{}
		ended := 0
		for _, j := range resp.GetJobs() {
			listed[j.GetJobId()] = j.GetState()
			if j.GetState() != weirpb.JobState_JOB_STATE_RUNNING {
				ended++
			}
		}
		return ended <= maxEnded
	})
	_, oldest := listed[short[0]]
	_, newest := listed[short[len(short)-1]]
	if len(listed) <= maxEnded && !oldest && newest {
		rejected++
	} else {
		t.Errorf("after %d short jobs with --max-ended-jobs %d the jobmanager lists %d jobs (oldest listed %v, newest %v)",
			len(short), maxEnded, len(listed), oldest, newest)
	}

	n := len(attacks) + moreAttacks
	fmt.Printf("attacks=%d rejected=%d lost=%d duplicated=%d\n", n, rejected, lost, duplicated)
	if rejected != n || lost != 0 || duplicated != 0 {
		t.Fatalf("attacks=%d rejected=%d lost=%d duplicated=%d", n, rejected, lost, duplicated)
	}
}
