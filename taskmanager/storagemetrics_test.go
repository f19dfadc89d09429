package taskmanager

import (
	"testing"

	"github.com/weirstream/weir/jobmanager/jobmanagertest"
)

// TestStorageRequestMetrics: the checkpoint storage a taskmanager opens
// counts its requests in weir_storage_requests_total and
// weir_storage_bytes_total, one request and the object's bytes per call.
func TestStorageRequestMetrics(t *testing.T) {
	jm := jobmanagertest.New(t)
	jm.Serve(t)
	h := startTaskManager(t, jm.Addr(), newTestRegistry(newTestState()), nil)
	ctx := t.Context()
	st, err := h.tm.storages.open(ctx, "file://"+t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s := st.Store()
	data := []byte("0123456789")
	if err := s.Put(ctx, "chk-1/a", data); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "chk-1/a"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.List(ctx, "chk-1/"); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "chk-1/a"); err != nil {
		t.Fatal(err)
	}
	mfs, err := h.tm.metrics.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if n := mf.GetName(); n == "weir_storage_requests_total" || n == "weir_storage_bytes_total" {
			for _, m := range mf.GetMetric() {
				got[n+"/"+m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
			}
		}
	}
	want := map[string]float64{
		"weir_storage_requests_total/put": 1, "weir_storage_requests_total/get": 1,
		"weir_storage_requests_total/list": 1, "weir_storage_requests_total/delete": 1,
		"weir_storage_bytes_total/out": 10, "weir_storage_bytes_total/in": 10,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
}
