// Package jobstore owns the job-store seam of the jobmanager: the Store
// interface through which it keeps the metadata that lets a restarted or
// newly elected jobmanager recover its jobs — each job's graph and status,
// the pointer to its latest completed checkpoint (a Pointer) and its
// checkpoint-id counter — and the cluster's leader-term counter. Checkpoint
// data itself (manifests, snapshots) stays in checkpoint storage; a Store
// holds small values and pointers into it.
//
// There are two implementations. *ha.Store keeps the metadata in etcd for
// an HA leader, every write fenced on its leadership. Dir keeps it in a
// local directory of one jobmanager (--data-dir), which it locks so that no
// second jobmanager can use it at the same time. Both pass one conformance
// suite (conformance_test.go), so that a restarted jobmanager without HA
// recovers its jobs exactly as an HA leader does after a takeover.
//
// # Dir layout
//
//	LOCK                      the advisory lock (flock) of the open Dir; holds the owner's pid
//	leader-term               the last allocated leader term, decimal
//	jobs/<id>/graph           the job graph (opaque bytes); its presence makes the job exist
//	jobs/<id>/status          the job status (opaque bytes)
//	jobs/<id>/latest          the latest completed checkpoint: the Pointer encoding etcd holds too
//	jobs/<id>/checkpoint-id   the last allocated checkpoint id, decimal
//	jobs/<id>/put-job         a PutJob in progress: the new graph and status, applied by the next access
//	.tmp~*                    temporary files of writes in progress (in any of these directories)
//
// Every file is replaced atomically and durably (a synced temporary file
// renamed over it, then its directory synced). Directories are created
// with mode 0700 and files with mode 0600: a job graph may hold
// credentials of its sources and sinks.
//
// jobstore imports the standard library and package stream (for job ids).
// It must not import package jobmanager nor ha: ha imports it.
package jobstore
