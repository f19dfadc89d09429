// Package endtoend holds the process-level tests of Weir as a user meets
// it: a keyed window job across two taskmanagers checked against an
// independent computation and seen through the CLI and the REST API, bad
// job specs each refused with one clear error, `weir local` restarting a
// taskmanager that died, and a cluster with mutual TLS attacked the ways
// someone on the network could while the sequence workload runs.
//
// The process tests are split into packages of similar duration, so that
// `go test ./...` runs them side by side.
package endtoend
