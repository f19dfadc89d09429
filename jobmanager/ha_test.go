package jobmanager

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/weirstream/weir/builtin"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/ha"
	"github.com/weirstream/weir/ha/etcdtest"
	"github.com/weirstream/weir/jobmanager/scheduler"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/stream"
)

// TestHAStandbyRedirects runs two jobmanagers on a real etcd: one leads
// and answers, the other refuses with Unavailable naming the leader; when
// the leader stops, the standby takes over and answers.
func TestHAStandbyRedirects(t *testing.T) {
	etcd := etcdtest.Start(t)
	start := func() (*JobManager, context.CancelFunc, chan error) {
		cfg := DefaultConfig()
		cfg.RPCAddress, cfg.RESTAddress = "127.0.0.1:0", ""
		cfg.HA = HAConfig{Mode: "etcd", Endpoints: etcd.Endpoints(), Prefix: "/weir-test", LeaseTTL: 2 * time.Second}
		jm, err := New(cfg, builtin.Registry())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- jm.Run(ctx) }()
		<-jm.Ready()
		return jm, cancel, done
	}
	// list calls ListJobs at addr and returns the error and the leader
	// address of its trailer.
	list := func(addr string) (leader string, err error) {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var trailer metadata.MD
		_, err = weirpb.NewJobServiceClient(conn).ListJobs(ctx, &weirpb.ListJobsRequest{}, grpc.Trailer(&trailer))
		if v := trailer.Get(LeaderMetadataKey); len(v) > 0 {
			leader = v[0]
		}
		return leader, err
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	a, stopA, doneA := start()
	waitFor("a leads", func() bool { return a.lead.Load() != nil })
	b, stopB, doneB := start()
	defer func() { stopB(); <-doneB }()
	if _, err := list(a.RPCAddr()); err != nil {
		t.Fatalf("leader refused ListJobs: %v", err)
	}
	// The refusal names the leader in the trailer and, for clients that
	// get no trailer, in the message, in the form the client package
	// parses (leaderInMessage).
	waitFor("b redirects to a", func() bool {
		leader, err := list(b.RPCAddr())
		return status.Code(err) == codes.Unavailable && leader == a.RPCAddr() &&
			strings.Contains(status.Convert(err).Message(), "the leader is "+a.RPCAddr())
	})
	stopA()
	<-doneA
	waitFor("b takes over", func() bool { return b.lead.Load() != nil })
	if _, err := list(b.RPCAddr()); err != nil {
		t.Fatalf("new leader refused ListJobs: %v", err)
	}
	if b.epoch() <= 0 {
		t.Fatalf("new leader's epoch %d, want > 0", b.epoch())
	}
}

// TestReadVerifiedManifest: on takeover the manifest an etcd pointer names
// must have the pointer's SHA-256; a modified manifest is refused with an
// error naming the job, the checkpoint, the key and both sums.
func TestReadVerifiedManifest(t *testing.T) {
	ctx := t.Context()
	st, err := checkpoint.OpenStorage(ctx, "file://"+t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	key, sum, err := st.WriteManifest(ctx, &weirpb.Manifest{JobId: "job", CheckpointId: 4})
	if err != nil {
		t.Fatal(err)
	}
	good := ha.Pointer{ID: 4, ManifestKey: key, ManifestSHA256: sum}
	if m, err := readVerifiedManifest(ctx, st, "job", good); err != nil || m.GetCheckpointId() != 4 {
		t.Fatalf("intact manifest: %v, %v", m, err)
	}
	// Rewrite the object with other (valid) content: same key, other sum.
	if _, _, err := st.WriteManifest(ctx, &weirpb.Manifest{JobId: "job", CheckpointId: 4, Operators: []*weirpb.OperatorState{{OperatorUid: "x"}}}); err != nil {
		t.Fatal(err)
	}
	_, err = readVerifiedManifest(ctx, st, "job", good)
	if !errors.Is(err, checkpoint.ErrCorrupt) {
		t.Fatalf("a modified manifest: %v, want checkpoint.ErrCorrupt", err)
	}
	for _, want := range []string{"job job", "checkpoint 4", key, sum} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
}

// TestFencedLeaderCompletesNoCheckpoint: once its leadership has ended, a
// jobmanager's checkpoint write fails with ErrFenced before anything marks
// the checkpoint complete: the etcd reservation (nothing is written) or,
// when the id was reserved earlier, the etcd pointer (the storage pointer,
// written after it, stays unwritten). perform hands that error to
// manifestWritten, so no NotifyCheckpoint (no sink commit) follows.
func TestFencedLeaderCompletesNoCheckpoint(t *testing.T) {
	for _, tc := range []struct {
		name         string
		reserved     bool // the id was reserved while still leading
		wantManifest bool
	}{
		{name: "reservation fenced", reserved: false, wantManifest: false},
		{name: "pointer fenced", reserved: true, wantManifest: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			jm, l, st := leadingWithStorage(t, "/weir-fence")
			if tc.reserved {
				jm.reserved.Lock()
				jm.reserved.m["job"] = 7
				jm.reserved.Unlock()
			}
			if err := l.Resign(t.Context()); err != nil {
				t.Fatal(err)
			}
			<-l.Lost()
			err := jm.writeManifest(t.Context(), "job", &weirpb.Manifest{JobId: "job", CheckpointId: 7}, nil)
			if !errors.Is(err, ha.ErrFenced) {
				t.Fatalf("writeManifest after the leadership ended: %v, want ErrFenced", err)
			}
			if _, err := st.ReadManifest(t.Context(), "job", 7); (err == nil) != tc.wantManifest {
				t.Fatalf("manifest written: %v, want %v", err == nil, tc.wantManifest)
			}
			if _, err := st.ReadPointer(t.Context(), "job"); err == nil {
				t.Fatal("the storage pointer was written by a fenced leader")
			}
			if n := jm.haClient.Load().FencedWrites(); n != 1 {
				t.Fatalf("%d fenced writes counted, want 1", n)
			}
		})
	}
}

// The jobmanager's attempt layout is the one stream.DeploymentOf reads.
func TestAttemptTermShiftMatchesStream(t *testing.T) {
	if 1<<attemptTermShift != stream.AttemptsPerTerm {
		t.Fatalf("attemptTermShift %d does not match stream.AttemptsPerTerm %d", attemptTermShift, stream.AttemptsPerTerm)
	}
}

// TestFencedLeaderDeletesNothing: a jobmanager whose leadership ended
// deletes no checkpoint files: its new leader may rely on them.
func TestFencedLeaderDeletesNothing(t *testing.T) {
	jm, l, st := leadingWithStorage(t, "/weir-fence-delete")
	if _, _, err := st.WriteManifest(t.Context(), &weirpb.Manifest{JobId: "job", CheckpointId: 3}); err != nil {
		t.Fatal(err)
	}
	if err := l.Resign(t.Context()); err != nil {
		t.Fatal(err)
	}
	<-l.Lost()
	jm.perform(t.Context(), nil, scheduler.DeleteCheckpointsAction{JobID: "job", IDs: []int64{3}})
	if _, err := st.ReadManifest(t.Context(), "job", 3); err != nil {
		t.Fatalf("a fenced leader deleted checkpoint 3: %v", err)
	}
}

// leadingWithStorage starts an etcd and a jobmanager that leads under
// prefix, campaigned without Run so that its etcd client stays open after
// the leadership ends (closed by the test's cleanup), with a file://
// checkpoint storage registered for job "job".
func leadingWithStorage(t *testing.T, prefix string) (*JobManager, *ha.Leadership, *checkpoint.Storage) {
	t.Helper()
	etcd := etcdtest.Start(t)
	cfg := DefaultConfig()
	cfg.RPCAddress, cfg.RESTAddress = "127.0.0.1:0", ""
	cfg.HA = HAConfig{Mode: "etcd", Endpoints: etcd.Endpoints(), Prefix: prefix, LeaseTTL: 2 * time.Second,
		AdvertisedAddress: "127.0.0.1:1"}
	jm, err := New(cfg, builtin.Registry())
	if err != nil {
		t.Fatal(err)
	}
	l, err := jm.campaign(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { jm.haClient.Load().Close() })
	st, err := checkpoint.OpenStorage(t.Context(), "file://"+t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	jm.storages.Lock()
	jm.storages.m["job"] = st
	jm.storages.Unlock()
	return jm, l, st
}
