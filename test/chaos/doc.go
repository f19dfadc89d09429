// Package chaos holds the process-level tests of taskmanager and network
// faults: taskmanagers SIGKILLed (restarted on a new or the same port) and
// SIGSTOPped past the heartbeat timeout while a job runs, same-port
// restarts with every slot in use, and reset and silent partitions between
// the jobmanager and a taskmanager and between taskmanagers, through the
// harness's fault proxies. Each runs the sequence workload
// (clustertest.SequenceJob) on a real cluster and counts lost and
// duplicated rows. `make test` runs them short; `make chaos` runs them
// long (WEIR_CHAOS_KILLS), together with the HA tests (package ha).
//
// The process tests are split into packages of similar duration, so that
// `go test ./...` runs them side by side.
package chaos
