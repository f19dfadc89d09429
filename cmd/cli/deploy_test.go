package cli

import (
	"path/filepath"
	"slices"
	"testing"
)

// TestDeployConfigsLoad loads every example config under deploy/ the way
// the binaries do (unknown keys are errors) and checks what they promise:
// the jobmanager configs validate, and the ha/ examples really configure
// ha: etcd with the same prefix and endpoints everywhere.
func TestDeployConfigsLoad(t *testing.T) {
	root := filepath.Join("..", "..", "deploy")
	jms, _ := filepath.Glob(filepath.Join(root, "*", "jobmanager*.yaml"))
	top, _ := filepath.Glob(filepath.Join(root, "jobmanager*.yaml"))
	jms = append(jms, top...)
	tms, _ := filepath.Glob(filepath.Join(root, "*", "taskmanager*.yaml"))
	top, _ = filepath.Glob(filepath.Join(root, "taskmanager*.yaml"))
	tms = append(tms, top...)
	if len(jms) < 3 || len(tms) < 2 {
		t.Fatalf("found %d jobmanager and %d taskmanager configs under %s; want the plain and the ha/ examples", len(jms), len(tms), root)
	}
	type haSetting struct {
		prefix    string
		endpoints []string
	}
	var ha []haSetting
	for _, path := range jms {
		cfg, err := loadJobManagerConfig(path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if cfg.TLS.CAFile == "" || cfg.TLS.CertFile == "" || cfg.TLS.KeyFile == "" {
			t.Fatalf("%s: TLS is off; the shipped configs are secure by default", path)
		}
		if filepath.Base(filepath.Dir(path)) == "ha" {
			if cfg.HA.Mode != "etcd" || cfg.HA.AdvertisedAddress == "" {
				t.Fatalf("%s: ha mode %q, advertised address %q; the HA example must set mode etcd and an advertised address", path, cfg.HA.Mode, cfg.HA.AdvertisedAddress)
			}
			ha = append(ha, haSetting{cfg.HA.Prefix, cfg.HA.Endpoints})
		}
	}
	for _, path := range tms {
		cfg, err := loadTaskManagerConfig(path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if cfg.TLS.CAFile == "" || cfg.TLS.CertFile == "" || cfg.TLS.KeyFile == "" {
			t.Fatalf("%s: TLS is off; the shipped configs are secure by default", path)
		}
		if filepath.Base(filepath.Dir(path)) == "ha" {
			if cfg.HA.Mode != "etcd" {
				t.Fatalf("%s: ha mode %q; the HA example must find the leader through etcd", path, cfg.HA.Mode)
			}
			ha = append(ha, haSetting{cfg.HA.Prefix, cfg.HA.Endpoints})
		}
	}
	if len(ha) < 3 {
		t.Fatalf("%d ha: etcd configs under %s/ha; want two jobmanagers and a taskmanager", len(ha), root)
	}
	for _, h := range ha[1:] {
		if h.prefix != ha[0].prefix || !slices.Equal(h.endpoints, ha[0].endpoints) {
			t.Fatalf("ha examples disagree: prefix %q endpoints %v vs prefix %q endpoints %v", h.prefix, h.endpoints, ha[0].prefix, ha[0].endpoints)
		}
	}
	if len(ha[0].endpoints) != 3 {
		t.Fatalf("the ha examples name %d etcd endpoints; the example cluster has 3", len(ha[0].endpoints))
	}
}
