// Package nexmarkcluster holds the process-level tests of the Nexmark
// queries: q4 and q7 in their canonical formulations on a real cluster
// through a taskmanager SIGKILL, their committed output compared with the
// oracle row by row (lost and duplicated rows counted).
//
// The tests live in their own package, like each group of process tests
// under test/, so that `go test ./...` runs the groups side by side.
package nexmarkcluster
