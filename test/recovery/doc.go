// Package recovery holds the process-level tests of restoring jobs: a
// jobmanager restarted without HA resumes its jobs from their latest
// checkpoints; a job whose checkpoints were corrupted fails at once with
// an error naming the checkpoint (with and without HA), or with
// onCorruption: fallback restarts from an older retained one; savepoints
// taken over REST and by weir jobs stop (with and without --drain),
// moved, and resumed on another state backend and at other parallelisms;
// and a job submitted again from a retained checkpoint. Each counts lost
// and duplicated rows against the job's known output.
//
// The process tests are split into packages of similar duration, so that
// `go test ./...` runs them side by side.
package recovery
