// Package taskmanager is the worker process: it registers its slots with the
// jobmanager, heartbeats, runs the tasks the jobmanager deploys (through
// package dataflow) and serves the data exchange that carries records between
// taskmanagers.
//
// It imports dataflow, stream and the generated protobuf package; it never
// imports jobmanager.
package taskmanager
