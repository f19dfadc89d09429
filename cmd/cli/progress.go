package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/proto/weirpb"
)

// Progress on a terminal: weir savepoint, weir jobs stop and weir submit
// --from show how far the copy or the restore got on one line that is
// rewritten in place and erased when done, so that what stays on the
// screen is the output of a run without a terminal. On anything else
// (a pipe, a file) and with -o json nothing extra is written: scripts parse
// that output.

// progressInterval is how often progress is polled and redrawn.
const progressInterval = 250 * time.Millisecond

// terminalWriter is an optional capability of a command's output: a
// writer that says itself whether it is a terminal (tests use it; an
// *os.File is asked the operating system).
type terminalWriter interface {
	IsTerminal() bool
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	if t, ok := w.(terminalWriter); ok {
		return t.IsTerminal()
	}
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// progressLine is one line of progress, rewritten with a carriage return.
// A zero progressLine (w nil) draws nothing.
type progressLine struct {
	w     io.Writer
	width int // of the line on screen
}

// newProgressLine returns the progress line of a command writing to w in
// output format output: drawing only on a terminal with table output.
func newProgressLine(w io.Writer, output string) *progressLine {
	if output != "table" || !isTerminal(w) {
		return &progressLine{}
	}
	return &progressLine{w: w}
}

// on reports whether the line is drawn.
func (p *progressLine) on() bool { return p.w != nil }

// show replaces the line with s.
func (p *progressLine) show(s string) {
	if p.w == nil {
		return
	}
	pad := max(p.width-len(s), 0)
	fmt.Fprintf(p.w, "\r%s%s", s, strings.Repeat(" ", pad))
	p.width = len(s)
}

// clear erases the line, leaving the cursor at its start.
func (p *progressLine) clear() {
	if p.w == nil || p.width == 0 {
		return
	}
	fmt.Fprintf(p.w, "\r%s\r", strings.Repeat(" ", p.width))
	p.width = 0
}

// newRequestID returns a random savepoint request id.
func newRequestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails
	return "cli-" + hex.EncodeToString(b[:])
}

// bytesOf formats done of total bytes, with the percentage.
func bytesOf(done, total int64) string {
	pct := 100.0
	if total > 0 {
		pct = 100 * float64(done) / float64(total)
	}
	return fmt.Sprintf("%s / %s (%.0f%%)", checkpoint.FormatBytes(done), checkpoint.FormatBytes(total), pct)
}

// savepointProgressText is the progress line of a savepoint (what names
// it: "savepoint of job J", "stop job J").
func savepointProgressText(what string, p *weirpb.SavepointProgress) string {
	switch {
	case p.GetCopying():
		return fmt.Sprintf("%s: copying checkpoint %d: %s", what, p.GetCheckpointId(), bytesOf(p.GetBytesCopied(), p.GetBytesTotal()))
	case p.GetCheckpointId() > 0:
		return fmt.Sprintf("%s: taking checkpoint %d", what, p.GetCheckpointId())
	}
	return what + ": starting"
}

// watchSavepoint draws the progress of savepoint request rid until ctx is
// done. Progress that cannot be read (the request is not registered yet,
// a call fails) leaves the line as it is.
func watchSavepoint(ctx context.Context, cc *clientConfig, client weirpb.JobServiceClient, line *progressLine, what, rid string) {
	t := time.NewTicker(progressInterval)
	defer t.Stop()
	line.show(what + ": starting")
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cctx, cancel := cc.ctx(ctx)
		p, err := client.GetSavepointProgress(cctx, &weirpb.GetSavepointProgressRequest{RequestId: rid})
		cancel()
		if err != nil || ctx.Err() != nil {
			continue
		}
		line.show(savepointProgressText(what, p))
	}
}

// restoreProgressText is the progress line of a job's restore.
func restoreProgressText(r *weirpb.RestoreProgress) string {
	return fmt.Sprintf("restoring: %s, %d task(s) not running yet", bytesOf(r.GetBytesRestored(), r.GetBytesTotal()), r.GetTasksRestoring())
}

// restored reports whether job resp is done restoring: every task runs
// (none restores any more), or the job ended.
func restored(resp *weirpb.GetJobResponse) bool {
	s := resp.GetJob().GetState()
	return terminalJob(s) || s == weirpb.JobState_JOB_STATE_RUNNING && resp.GetRestore().GetTasksRestoring() == 0
}

// watchRestore draws the restore progress of job id until every task runs
// or the job ended, then erases the line. It gives up quietly when the
// job cannot be read (for 10s when the jobmanager is unavailable): the
// submission succeeded, and weir jobs status tells the rest.
func watchRestore(ctx context.Context, cc *clientConfig, client weirpb.JobServiceClient, line *progressLine, id string) {
	defer line.clear()
	t := time.NewTicker(progressInterval)
	defer t.Stop()
	unavailable := 0
	for {
		cctx, cancel := cc.ctx(ctx)
		resp, err := client.GetJob(cctx, &weirpb.GetJobRequest{JobId: id})
		cancel()
		switch {
		case err == nil:
			unavailable = 0
		case status.Code(err) == codes.Unavailable && unavailable < 40: // a leader change, say
			unavailable++
		default:
			return
		}
		if err == nil {
			if restored(resp) {
				return
			}
			line.show(restoreProgressText(resp.GetRestore()))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
