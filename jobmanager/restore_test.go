package jobmanager

import (
	"errors"
	"strings"
	"testing"

	"github.com/weirstream/weir/jobmanager/scheduler"
	"github.com/weirstream/weir/proto/weirpb"
	"github.com/weirstream/weir/stream"
)

func TestParseRestoreFrom(t *testing.T) {
	const storage = "s3://bucket/ckpt"
	for _, tc := range []struct {
		from string
		want restoreSource
		err  string // substring of the error; "" for none
	}{
		{from: "abc123@7", want: restoreSource{"abc123", 7}},
		{from: "s3://bucket/ckpt/abc123/chk-7", want: restoreSource{"abc123", 7}},
		{from: "s3://bucket/ckpt/abc123/chk-7/", want: restoreSource{"abc123", 7}},
		{from: "abc123@0", err: "not a positive integer"},
		{from: "abc123@x", err: "not a positive integer"},
		{from: "../x@3", err: "job id"},
		{from: "abc123", err: "neither JOB_ID@N nor a URI"},
		{from: "s3://bucket/ckpt/abc123/chk-x", err: "chk-N"},
		{from: "s3://bucket/ckpt/abc123/7", err: "chk-N"},
		{from: "s3://other/ckpt/abc123/chk-7", err: "not in the job's checkpoint storage"},
		{from: "file:///tmp/x/abc123/chk-7", err: "not in the job's checkpoint storage"},
	} {
		got, err := parseRestoreFrom(tc.from, storage)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%q: %v", tc.from, err)
		case tc.err == "" && got != tc.want:
			t.Errorf("%q: got %+v, want %+v", tc.from, got, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err) || !errors.Is(err, scheduler.ErrInvalidArgument)):
			t.Errorf("%q: error %v, want an invalid-argument error containing %q", tc.from, err, tc.err)
		}
	}
}

func TestCheckRestore(t *testing.T) {
	g := &stream.JobGraph{MaxParallelism: 128, Vertices: []*stream.Vertex{{UID: "src", Parallelism: 2}, {UID: "count", Parallelism: 4}}}
	handle := []*weirpb.StateHandle{{Key: "k"}}
	manifest := func(maxPar int32, ops ...*weirpb.OperatorState) *weirpb.Manifest {
		return &weirpb.Manifest{MaxParallelism: maxPar, Operators: ops}
	}
	for _, tc := range []struct {
		name  string
		m     *weirpb.Manifest
		allow bool
		err   string
	}{
		{"same operators", manifest(128, &weirpb.OperatorState{OperatorUid: "src", Parallelism: 2, Handles: handle},
			&weirpb.OperatorState{OperatorUid: "count", Parallelism: 4, Handles: handle}), false, ""},
		{"maxParallelism changed", manifest(256), false, "maxParallelism 256"},
		{"parallelism changed", manifest(128, &weirpb.OperatorState{OperatorUid: "count", Parallelism: 2, Handles: handle}), false, ""},
		{"incremental files into heap", manifest(128, &weirpb.OperatorState{OperatorUid: "count", Parallelism: 4,
			Handles: []*weirpb.StateHandle{{Key: "k", Files: []*weirpb.StateFile{{Name: "000001.sst"}}}}}), false, "backend: pebble"},
		{"state dropped", manifest(128, &weirpb.OperatorState{OperatorUid: "gone", Parallelism: 1, Handles: handle}), false, "allow-non-restored-state"},
		{"state dropped, allowed", manifest(128, &weirpb.OperatorState{OperatorUid: "gone", Parallelism: 1, Handles: handle}), true, ""},
		{"stateless operator gone", manifest(128, &weirpb.OperatorState{OperatorUid: "gone", Parallelism: 1}), false, ""},
	} {
		err := checkRestore(tc.m, g, tc.allow)
		if (tc.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: %v, want error containing %q", tc.name, err, tc.err)
		}
	}
}
