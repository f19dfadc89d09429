package nexmark

import (
	"embed"
	"fmt"
	"slices"
)

// The Nexmark queries as job specs, run by the benchmark and the tests:
// the sources use the canonical generator and event-time watermarks lag by
// 4 s. q4 and q7 are the canonical formulations (q4 needs the lifetime_max
// and running_avg operators of package operators/lifetime, q9 lifetime_max
// with winner fields); q11 counts each bidder's bids per session
// (session_window, 10 s gap); q12 counts each bidder's bids per 10 s
// window of processing time (tumbling_window with time: processing), so
// its output depends on timing and its digest is weighted (DigestWeight).
//
//go:embed queries/*.yaml
var queryFS embed.FS

// Queries are the names of the query specs, in order.
var Queries = []string{"q0", "q1", "q2", "q3", "q4", "q5", "q7", "q8", "q9", "q11", "q12"}

// QuerySpec returns the YAML job spec of query q (one of Queries), to be
// parsed with jobspec.Parse.
func QuerySpec(q string) ([]byte, error) {
	if !slices.Contains(Queries, q) {
		return nil, fmt.Errorf("nexmark: no query %q; the queries are %v", q, Queries)
	}
	return queryFS.ReadFile("queries/" + q + ".yaml")
}
