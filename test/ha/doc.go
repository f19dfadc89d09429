// Package ha holds the process-level tests of jobmanager high
// availability: two jobmanagers in ha: etcd mode against a real etcd, the
// leader SIGKILLed, paused past its lease, cut off from etcd, etcd
// restarted, and an etcd of three members losing its raft leader, a member
// and quorum, while the sequence workload (clustertest.SequenceJob) runs;
// its output must stay exactly once. `make chaos` runs TestHAKillLeader
// long (WEIR_HA_KILLS).
//
// The process tests are split into packages of similar duration, so that
// `go test ./...` runs them side by side.
package ha
