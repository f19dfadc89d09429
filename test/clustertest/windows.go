package clustertest

// The output of the process tests' keyed window jobs (a tumbling or
// sliding window with count, sum and max aggregates), shared by the
// process-test packages under test/.

import (
	"strconv"
	"testing"
)

// WindowKey names one window of a keyed window job's output: its key and
// its start (Unix milliseconds).
type WindowKey struct {
	Key   string
	Start int64
}

// WindowAgg is one window's aggregates: its count N, the sum Total and
// the maximum Top of its values.
type WindowAgg struct{ N, Total, Top int64 }

// CommittedWindows reads the windows the file sink committed in dir (rows
// key, window_start, window_end, n, total, top), counting those committed
// more than once; the first of each is kept.
func CommittedWindows(t *testing.T, dir string) (got map[WindowKey]WindowAgg, duplicated int) {
	t.Helper()
	_, rows := CommittedRows(t, dir)
	got = make(map[WindowKey]WindowAgg)
	for _, r := range rows {
		k := WindowKey{r[0], ParseTime(t, r[1])}
		n, _ := strconv.ParseInt(r[3], 10, 64)
		total, _ := strconv.ParseInt(r[4], 10, 64)
		top, _ := strconv.ParseInt(r[5], 10, 64)
		if _, dup := got[k]; dup {
			duplicated++
			continue
		}
		got[k] = WindowAgg{n, total, top}
	}
	return got, duplicated
}
