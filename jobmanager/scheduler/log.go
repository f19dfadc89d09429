package scheduler

// Level is how much a LogEntry matters. The values are log/slog's, so the
// shell converts with slog.Level(l).
type Level int

const (
	LevelDebug Level = -4
	LevelInfo  Level = 0
	LevelWarn  Level = 4
)

// LogEntry is something the scheduler noted for the log: a message and
// its attributes as alternating keys and values (slog's convention).
type LogEntry struct {
	Level Level
	Msg   string
	Attrs []any
}

// maxNotes bounds the entries kept between two calls of Logs; beyond it,
// debug entries are dropped (and counted), so that a shell that never
// drains cannot make the scheduler grow without bound.
const maxNotes = 4096

// notes collects the scheduler's log entries until Logs takes them.
type notes struct {
	entries []LogEntry
	dropped int
}

func (n *notes) Debug(msg string, attrs ...any) { n.add(LevelDebug, msg, attrs) }
func (n *notes) Info(msg string, attrs ...any)  { n.add(LevelInfo, msg, attrs) }
func (n *notes) Warn(msg string, attrs ...any)  { n.add(LevelWarn, msg, attrs) }

func (n *notes) add(l Level, msg string, attrs []any) {
	if len(n.entries) >= maxNotes && l == LevelDebug {
		n.dropped++
		return
	}
	n.entries = append(n.entries, LogEntry{Level: l, Msg: msg, Attrs: attrs})
}

// Logs returns what the scheduler noted since the last call, oldest
// first, and forgets it. The shell calls it after every event it applies.
// When debug entries had to be dropped, a warning at the end says how many.
func (c *Scheduler) Logs() []LogEntry {
	out := c.log.entries
	if c.log.dropped > 0 {
		out = append(out, LogEntry{Level: LevelWarn, Msg: "scheduler debug log entries dropped", Attrs: []any{"dropped", c.log.dropped}})
	}
	c.log = notes{}
	return out
}
