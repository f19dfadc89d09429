package join

// SetClock sets the processing-time clock (Unix ms) of o's ttl; call it
// before Open.
func SetClock(o *StreamJoin, clock func() int64) { o.clock = clock }

// Names of the state tables: the rows of each key (RowsTable), or with a
// ttl the rows of each input (LeftTable, RightTable).
const (
	RowsTable  = rowsTable
	LeftTable  = leftTable
	RightTable = rightTable
)
