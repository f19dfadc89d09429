package dataflow

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"runtime/debug"
	"strings"
	"unicode/utf8"

	"github.com/weirstream/weir/internal/errkind"
	"github.com/weirstream/weir/stream"
)

// This file keeps a panic in one task from ending the process. An
// unrecovered panic kills the whole taskmanager, with every task on it, and
// Go recovers a panic only in the goroutine that raised it. So every call
// from the task runtime into operator or source code (they all run on the
// task goroutine) goes through one of the methods below, which recover a
// panic there into an error of that call; the error then fails the task
// through the ordinary path (Run returns it, the taskmanager reports the
// task FAILED and the jobmanager restarts it). A panic in the runtime's own
// code on the task goroutine is recovered once more in Run, and a panic in
// the exchange's goroutines fails their network stream (remote.go), so that
// such bugs fail the tasks they touch, loudly, with the stack logged. The
// other goroutine a task has, the wake-up of its processing-time timer,
// runs no operator code: it only signals the task goroutine.

// ErrOperatorPanic marks the error a task fails with when the code of one of
// its operators or its source panicked (errors.Is). The message names the
// task, the operator, the subtask, the method that panicked and the panic
// value's type and text; the task's log has a stack excerpt. Nothing of the
// records being processed is added to either.
var ErrOperatorPanic = errors.New("dataflow: operator panicked")

const (
	// maxPanicText bounds the panic value's text in an error, which travels
	// to the jobmanager and its UI.
	maxPanicText = 512
	// panicFrames is how many frames of the panicking stack the log gets.
	panicFrames = 12
)

// recoverOperator, deferred by a method that calls into the code of
// operator l, turns a panic there into *err. call names the operator's
// method, for the message.
func (t *Task) recoverOperator(l *chainLink, call string, err *error) {
	if p := recover(); p != nil {
		*err = t.operatorPanic(l, call, p)
	}
}

// guard calls f, which calls into the code of operator l, and returns f's
// error or that of a panic in it. It is for the calls made once per run or
// per checkpoint; the per-batch calls have methods of their own below, so
// that no closure is built on the data path.
func (t *Task) guard(l *chainLink, call string, f func() error) (err error) {
	defer t.recoverOperator(l, call, &err)
	return f()
}

// processBatch calls l's ProcessBatch.
func (t *Task) processBatch(l *chainLink, input int, b *stream.Batch, out stream.Collector) (err error) {
	defer t.recoverOperator(l, "ProcessBatch", &err)
	return l.op.ProcessBatch(input, b, out)
}

// processWatermark calls l's ProcessWatermark.
func (t *Task) processWatermark(l *chainLink, wm int64, out stream.Collector) (err error) {
	defer t.recoverOperator(l, "ProcessWatermark", &err)
	return l.op.ProcessWatermark(wm, out)
}

// poll calls the Poll of l, the task's source.
func (t *Task) poll(ctx context.Context, l *chainLink, out stream.Collector) (st stream.PollStatus, err error) {
	defer t.recoverOperator(l, "Poll", &err)
	return l.src.Poll(ctx, out)
}

// operatorPanic logs the panic p raised by operator l in call, with a stack
// excerpt, and returns the error the task fails with. The caller names the
// task and operator uid (Task.opErr), as for any error of the operator.
func (t *Task) operatorPanic(l *chainLink, call string, p any) error {
	where, stack := panicStack()
	text := panicText(p)
	who := ""
	if l.v != nil && l.v.Name != "" && l.v.Name != l.uid {
		who = fmt.Sprintf("(named %q) ", l.v.Name)
	}
	t.log.Error("operator panicked; the task fails", "operator", l.uid, "subtask", fmt.Sprintf("%d/%d", t.spec.Subtask+1, t.spec.Parallelism),
		"call", call, "panic_type", fmt.Sprintf("%T", p), "panic", text, "stack", stack)
	return errkind.Mark(fmt.Errorf("%ssubtask %d of %d panicked in %s: %s (panic value of type %T%s); the stack is in the taskmanager's log",
		who, t.spec.Subtask+1, t.spec.Parallelism, call, text, p, where), ErrOperatorPanic)
}

// recoverRuntime, deferred on the task goroutine, turns a panic of the task
// runtime itself (not of an operator: recoverOperator catches those where
// they are called) into *err, logged with the whole stack: it is a bug of
// the runtime, and it fails this task only, not the process.
func (t *Task) recoverRuntime(err *error) {
	if p := recover(); p != nil {
		*err = runtimePanic(t.log, "task "+t.name, p)
	}
}

// runtimePanic logs p, a panic in dataflow's own code (or in code it calls
// that is not an operator's, such as a state backend or the taskmanager's
// hooks), with the whole stack, and returns the error of what (the task or
// the exchange stream) it ends.
func runtimePanic(log *slog.Logger, what string, p any) error {
	where, _ := panicStack()
	text := panicText(p)
	log.Error("internal error: panic in the task runtime; "+what+" fails", "panic_type", fmt.Sprintf("%T", p),
		"panic", text, "stack", string(debug.Stack()))
	return errkind.Mark(fmt.Errorf("%s: internal error: the task runtime panicked: %s (panic value of type %T%s); this is a bug in weir, and the stack is in the taskmanager's log",
		what, text, p, where), errRuntimePanic)
}

// panicText is the text of a panic value, cut to maxPanicText bytes.
func panicText(p any) string {
	s := fmt.Sprint(p) // fmt recovers a panic of the value's own Error or String method
	if len(s) > maxPanicText {
		cut := maxPanicText
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

// panicStack describes the stack of the panic being recovered; it must be
// called by the deferred function that recovered it. where is ", raised in
// <function> at <file>:<line>" for the frame that panicked (the message
// names that frame only, not the runtime's helpers that raise runtime
// errors), and excerpt lists up to panicFrames frames from it, one per line.
func panicStack() (where, excerpt string) {
	pcs := make([]uintptr, 64)
	n := runtime.Callers(2, pcs)
	frames := runtime.CallersFrames(pcs[:n])
	var b strings.Builder
	inPanic, count := false, 0
	for {
		f, more := frames.Next()
		switch {
		case !inPanic:
			// The frames above runtime.gopanic are the recovering
			// function's; the panicking code is below.
			inPanic = f.Function == "runtime.gopanic"
		case count == 0 && strings.HasPrefix(f.Function, "runtime."):
			// runtime.panicIndex, runtime.sigpanic and the like raised a
			// runtime error for the frame below them.
		default:
			if count == 0 {
				where = fmt.Sprintf(", raised in %s at %s:%d", f.Function, shortFile(f.File), f.Line)
			}
			fmt.Fprintf(&b, "%s\n\t%s:%d\n", f.Function, f.File, f.Line)
			count++
		}
		if !more || count == panicFrames {
			break
		}
	}
	return where, b.String()
}

// shortFile is the last directory and the name of a source file.
func shortFile(path string) string {
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		if j := strings.LastIndexByte(path[:i], '/'); j >= 0 {
			return path[j+1:]
		}
	}
	return path
}
