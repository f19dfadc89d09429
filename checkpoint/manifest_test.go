package checkpoint

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/weirstream/weir/blobstore"
	"github.com/weirstream/weir/proto/weirpb"
)

func cloneManifest(m *weirpb.Manifest) *weirpb.Manifest { return proto.CloneOf(m) }

func TestManifestVersionCheck(t *testing.T) {
	st := NewStorage(blobstore.NewMem())
	ctx := t.Context()
	tests := []struct {
		name    string
		m       *weirpb.Manifest
		raw     []byte
		wantErr error
		want    string
	}{
		{"future version", &weirpb.Manifest{Version: 2, JobId: "j", CheckpointId: 4}, nil, ErrVersion, "version 2"},
		{"no version", &weirpb.Manifest{JobId: "j", CheckpointId: 4}, nil, ErrCorrupt, "no version"},
		{"other checkpoint", &weirpb.Manifest{Version: 1, JobId: "j", CheckpointId: 5}, nil, ErrCorrupt, "checkpoint 5"},
		{"not protobuf", nil, []byte{0xff, 0xff, 0xff}, ErrCorrupt, "decode"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw := tt.raw
			if raw == nil {
				raw, _ = proto.Marshal(tt.m)
			}
			if err := st.Store().Put(ctx, ManifestKey("j", 4), raw); err != nil {
				t.Fatal(err)
			}
			_, err := st.ReadManifest(ctx, "j", 4)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want one wrapping %v", err, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "j/chk-4/_manifest") {
				t.Fatalf("err = %v, want one naming the object and %q", err, tt.want)
			}
		})
	}
	if _, _, err := st.WriteManifest(ctx, &weirpb.Manifest{Version: 3, JobId: "j", CheckpointId: 1}); err == nil {
		t.Fatal("WriteManifest wrote version 3")
	}
}

func TestReadLatestManifestChecksum(t *testing.T) {
	st := NewStorage(blobstore.NewMem())
	ctx := t.Context()
	key, sha, err := st.WriteManifest(ctx, &weirpb.Manifest{JobId: "j", CheckpointId: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.WritePointer(ctx, "j", &weirpb.CompletedPointer{CheckpointId: 2, ManifestKey: key, ManifestSha256: sha}); err != nil {
		t.Fatal(err)
	}
	// Rewrite the manifest with other content.
	if _, _, err := st.WriteManifest(ctx, &weirpb.Manifest{JobId: "j", CheckpointId: 2, JobName: "changed"}); err != nil {
		t.Fatal(err)
	}
	_, err = st.ReadLatestManifest(ctx, "j")
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "checkpoint 2") || !strings.Contains(err.Error(), "j/chk-2/_manifest") {
		t.Fatalf("err = %v, want ErrCorrupt naming the checkpoint and the manifest", err)
	}
}

func TestFormatManifest(t *testing.T) {
	m := &weirpb.Manifest{
		Version: 1, JobId: "job-1", JobName: "counts", CheckpointId: 41,
		TriggerTimeMs: 1_700_000_000_000, CompleteTimeMs: 1_700_000_001_500,
		Mode: weirpb.CheckpointMode_CHECKPOINT_MODE_AT_LEAST_ONCE, MaxParallelism: 128,
		Operators: []*weirpb.OperatorState{{OperatorUid: "count-2", Parallelism: 2, Handles: []*weirpb.StateHandle{
			{OperatorUid: "count-2", Subtask: 1, Parallelism: 2, Key: "job-1/chk-41/count-2/1-a0", Size: 2048,
				Sha256: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", KeyGroupStart: 64, KeyGroupEnd: 127},
			{OperatorUid: "count-2", Subtask: 0, Parallelism: 2, Key: "job-1/chk-41/count-2/0-a0", Size: 100,
				Sha256: "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210", KeyGroupStart: 0, KeyGroupEnd: 63},
		}}},
	}
	out := FormatManifest(m)
	t.Log("\n" + out)
	for _, want := range []string{
		"job:             job-1 (counts)", "checkpoint:      41", "mode:            at_least_once",
		"triggered:       2023-11-14 22:13:20.000 UTC", "(took 1.5s)", "state:           2.1 KiB in 2 snapshots (0 inline in this manifest)",
		"operator count-2: parallelism 2",
		"subtask 0   key groups 0..63", "100 B  sha256 fedcba987654  job-1/chk-41/count-2/0-a0",
		"subtask 1   key groups 64..127", "2.0 KiB  sha256 0123456789ab  job-1/chk-41/count-2/1-a0",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("FormatManifest output lacks %q", want)
		}
	}
	if strings.Index(out, "subtask 0") > strings.Index(out, "subtask 1") {
		t.Error("handles not in subtask order")
	}
}
