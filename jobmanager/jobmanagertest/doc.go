// Package jobmanagertest provides a fake jobmanager for tests of the
// taskmanager and of programs that talk to one.
//
// A Fake is a real gRPC ClusterService on a loopback port. It accepts
// every registration, answers heartbeats with the active jobs the test
// sets and records what taskmanagers tell it (registrations, heartbeats
// and task state updates) for the test to read and wait on. It can ask
// taskmanagers to register again, and it can be created without serving,
// stopped and served again on the same address, so that tests can watch a
// taskmanager find, lose and find again its jobmanager.
//
// The package does not import package jobmanager, so the jobmanager's own
// tests may use it too. Only tests should import it: every Fake stops when
// its test ends and leaves no goroutines behind.
package jobmanagertest
