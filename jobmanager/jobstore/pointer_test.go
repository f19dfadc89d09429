package jobstore_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/weirstream/weir/jobmanager/jobstore"
)

func TestPointerEncoding(t *testing.T) {
	p := ptr(42)
	got, err := jobstore.DecodePointer("k", jobstore.EncodePointer(p))
	if err != nil || got != p {
		t.Fatalf("round trip = %+v, %v; want %+v", got, err, p)
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
