package jobmanager

import (
	"testing"
	"time"

	"github.com/weirstream/weir/blobstore"
)

func TestGarbageKeepsReferencedAndYoungObjects(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	old, young := now.Add(-2*time.Hour), now.Add(-time.Minute)
	objs := []blobstore.ObjectInfo{
		{Key: "job/_completed", ModTime: old},
		{Key: "job/chk-3/_manifest", ModTime: old},
		{Key: "job/chk-3/op/0-a1", Size: 10, ModTime: old},   // retained
		{Key: "job/chk-4/op/0-a1", Size: 20, ModTime: old},   // aborted: garbage
		{Key: "job/chk-5/op/1-a2", Size: 30, ModTime: young}, // unreferenced but young
		{Key: "job/chk-6/op/0-a2", Size: 40, ModTime: old},   // in progress
		{Key: "job/chk-7/op/0-a2", Size: 50, ModTime: old},   // newer than any known id
		{Key: "job/chk-x/op", Size: 60, ModTime: old},        // not a checkpoint directory
		{Key: "job/chk-40/op/0-a1", Size: 70, ModTime: old},  // 40 > 6 but garbage? no: kept as newer
		{Key: "other/chk-4/op/0-a1", Size: 80, ModTime: old}, // another job's
	}
	keep := func(id int64) bool { return id == 3 || id == 6 || id > 6 }
	got := garbage(objs, "job", keep, now, time.Hour)
	if len(got) != 1 || got[0].Key != "job/chk-4/op/0-a1" {
		t.Fatalf("garbage = %v, want only job/chk-4/op/0-a1", got)
	}
	if got := garbage(objs, "job", keep, now, 0); len(got) != 2 {
		t.Fatalf("with no minimum age garbage = %v, want chk-4 and chk-5", got)
	}
}
