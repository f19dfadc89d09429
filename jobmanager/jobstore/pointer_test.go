package jobstore_test

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"github.com/weirstream/weir/jobmanager/jobstore"
)

func TestPointerEncoding(t *testing.T) {
	p := ptr(42)
	got, err := jobstore.DecodePointer("k", jobstore.EncodePointer(p))
	if err != nil || !reflect.DeepEqual(got, p) {
		t.Fatalf("round trip = %+v, %v; want %+v", got, err, p)
	}
	if old, err := jobstore.DecodePointer("k", []byte(`{"v":1,"id":3,"manifestKey":"k","manifestSha256":"`+sum("k")+`"}`)); err != nil ||
		!reflect.DeepEqual(old.RetainedIDs(), []int64{3}) {
		t.Errorf("a pointer without retained checkpoints = %+v, %v; want it to retain itself", old, err)
	}
	if !bytes.Contains(jobstore.EncodePointer(p), []byte(`"v":1`)) {
		t.Errorf("encoded pointer %s lacks its version", jobstore.EncodePointer(p))
	}
	tests := []struct{ name, in, want string }{
		{"empty", "", "not a checkpoint pointer"},
		{"truncated", `{"v":1,"id":`, "not a checkpoint pointer"},
		{"garbage", "s3cret-token", "invalid JSON at byte"},
		{"wrong type", `{"v":1,"id":"s3cret"}`, `field "id" holds a JSON string`},
		{"no version", `{"id":1}`, "no version"},
		{"newer version", `{"v":2,"id":1}`, "upgrade the jobmanager"},
		{"zero id", `{"v":1,"id":0,"manifestKey":"k","manifestSha256":"` + sum("k") + `"}`, "not positive"},
		{"retained not ascending", `{"v":1,"id":3,"manifestKey":"k","manifestSha256":"` + sum("k") + `","retained":[2,1,3]}`, "not positive and ascending"},
		{"retained not ending with id", `{"v":1,"id":3,"manifestKey":"k","manifestSha256":"` + sum("k") + `","retained":[1,2]}`, "do not end with it"},
		{"long sha", `{"v":1,"id":1,"manifestKey":"k","manifestSha256":"s3cret` + sum("k") + `"}`, "sha256 of 70 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := jobstore.DecodePointer("where", []byte(tt.in))
			if err == nil {
				t.Fatalf("DecodePointer(%q) succeeded", tt.in)
			}
			if msg := err.Error(); !strings.Contains(msg, tt.want) || !strings.Contains(msg, "where") {
				t.Errorf("error %q: want one naming where and containing %q", msg, tt.want)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("error %q repeats the stored bytes", err)
			}
		})
	}
}
