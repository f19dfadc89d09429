package checkpoint

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/weirstream/weir/blobstore"
	"github.com/weirstream/weir/proto/weirpb"
)

// BenchmarkManifestEncode encodes the manifest of a checkpoint of 10,000
// subtasks, each with a handle of three files (two shared), with the
// generic marshaller and with the manifest encoder, and writes it with
// WriteManifest (encoding, storing in memory, hashing). It prints the
// time per manifest of each and its size, and checks that both encodings
// are the same bytes and that the stored manifest reads back whole.
//
//	go test -run '^$' -bench ManifestEncode -benchtime 1x ./checkpoint/
func BenchmarkManifestEncode(b *testing.B) {
	const handles, rounds = 10_000, 20
	m := wideManifest(handles)
	want, err := marshal.Marshal(m)
	if err != nil {
		b.Fatal(err)
	}
	var e manifestEncoder
	got, err := e.marshalManifest(m)
	if err != nil || !bytes.Equal(got, want) {
		b.Fatalf("the encoder writes other bytes than proto.Marshal (%v)", err)
	}
	st := NewStorage(blobstore.NewMem())
	ctx := context.Background()
	// CPU time per call, over rounds calls (the machine may be busy).
	per := func(f func()) time.Duration {
		f() // warm up
		start := processCPU(b)
		for range rounds {
			f()
		}
		return (processCPU(b) - start) / rounds
	}
	var protoT, encT, writeT time.Duration
	for range b.N {
		protoT = per(func() {
			if _, err := marshal.Marshal(m); err != nil {
				b.Fatal(err)
			}
		})
		encT = per(func() {
			if _, err := e.marshalManifest(m); err != nil {
				b.Fatal(err)
			}
		})
		writeT = per(func() {
			if _, _, err := st.WriteManifest(ctx, m); err != nil {
				b.Fatal(err)
			}
		})
	}
	back, err := st.ReadManifest(ctx, m.JobId, m.CheckpointId)
	if err != nil || len(back.GetOperators()[0].GetHandles()) != handles {
		b.Fatalf("the written manifest does not read back with %d handles (%v)", handles, err)
	}
	fmt.Printf("manifest_bytes_10k_handles=%d\n", len(want))
	fmt.Printf("manifest_proto_marshal_cpu_ms_10k_handles=%.2f\n", ms(protoT))
	fmt.Printf("manifest_encode_cpu_ms_10k_handles=%.2f\n", ms(encT))
	fmt.Printf("manifest_write_cpu_ms_10k_handles=%.2f\n", ms(writeT))
}

// processCPU is the CPU time the process has used, user and system.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// wideManifest is the manifest of one operator at parallelism n whose
// subtasks each wrote an incremental snapshot of three files.
func wideManifest(n int) *weirpb.Manifest {
	const job = "wide"
	sum := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	op := &weirpb.OperatorState{OperatorUid: "window", Parallelism: int32(n), OperatorType: "count",
		States: []*weirpb.StateInfo{{Name: "count", Kind: "value", Type: "int64"}}}
	for i := range n {
		key := SnapshotKey(job, 9, "window", i, 1)
		h := &weirpb.StateHandle{OperatorUid: "window", Subtask: int32(i), Parallelism: int32(n), Key: key, Size: 4096,
			Sha256: sum(key), KeyGroupStart: int32(i), KeyGroupEnd: int32(i)}
		for f := range 3 {
			name := "00000" + strconv.Itoa(f+1) + ".sst"
			sf := &weirpb.StateFile{Name: name, Size: 1 << 20, Sha256: sum(key + name), Shared: f < 2}
			if sf.Shared {
				sf.Key = SharedKey(job, sf.Sha256)
			} else {
				sf.Key = key + ".files/" + name
			}
			h.Files = append(h.Files, sf)
		}
		op.Handles = append(op.Handles, h)
	}
	return &weirpb.Manifest{Version: ManifestVersion, JobId: job, JobName: "wide", CheckpointId: 9, TriggerTimeMs: 1,
		CompleteTimeMs: 2, Mode: weirpb.CheckpointMode_CHECKPOINT_MODE_EXACTLY_ONCE, MaxParallelism: int32(n),
		Operators: []*weirpb.OperatorState{op}}
}
