// Package statebackend will define keyed and operator state (value, list,
// map, reducing and aggregating state, timers) partitioned into key groups
// (see stream.KeyGroupRangeFor), with a heap backend and a Pebble backend
// behind one interface and one conformance suite.
//
// It arrives with the checkpoint milestone; today the window operators keep
// their accumulators in memory per key and window. The interfaces here may
// import the standard library and package stream only.
package statebackend
