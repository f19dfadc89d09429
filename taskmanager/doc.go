// Package taskmanager is the worker process: it registers its slots with the
// jobmanager, heartbeats, runs the tasks the jobmanager deploys (through
// package dataflow) and serves the data exchange that carries records between
// taskmanagers.
//
// Every process registers with a random instance id (new at each start);
// the jobmanager's deployments name the instance they are for, and it
// probes a taskmanager it suspects with Ping, answered with that id.
//
// It imports dataflow, stream, checkpoint (state uploads and downloads),
// statebackend/backends (opening keyed-state backends, the shared block
// cache), ha (finding the
// leading jobmanager through etcd) and the generated protobuf package; it
// never imports jobmanager.
package taskmanager
