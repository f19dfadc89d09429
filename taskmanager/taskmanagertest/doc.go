// Package taskmanagertest provides a fake taskmanager for tests of the
// jobmanager and of programs that talk to one.
//
// A Fake is a real gRPC TaskExecutorService on a loopback port that
// registers with a jobmanager, heartbeats on the interval the jobmanager
// gives it and reports the state of each task it is given. It runs no
// operators: a deployed task reports RUNNING at once and then stays live
// until the jobmanager cancels it or the test finishes or fails it.
// Everything the jobmanager asks of it (deployments, cancellations,
// checkpoint triggers and notifications) is recorded for the test to read.
// A Fake can refuse deployments, stop heartbeating, be killed like a
// crashed process and be restarted on the same address, and it can
// acknowledge checkpoints with made-up state handles.
//
// The package does not import package taskmanager, so the taskmanager's
// own tests may use it too. Only tests should import it: every Fake stops
// when its test ends and leaves no goroutines behind.
package taskmanagertest
