package join

import (
	"bytes"

	"github.com/weirstream/weir/operators/internal/rowenc"
)

// grouper groups the rows of a batch by key, so that a key's state is read
// and written once per batch however many of its rows the batch holds
// (bids of a hot auction, say). Groups come in order of their first row,
// and a group's rows in batch order. It is reused batch after batch.
type grouper struct {
	byHash map[uint64]int32 // key hash → first group with it
	first  []int32          // per group: its first row
	last   []int32          // per group: its last row
	coll   []int32          // per group: next group with the same hash, -1
	next   []int32          // per row: next row of its group, -1
}

// group groups rows (ascending row numbers of the batch whose keys k
// encoded). Iterate a group g with rows(g).
func (g *grouper) group(k *rowenc.Keys, rows []int32, n int) {
	if g.byHash == nil {
		g.byHash = make(map[uint64]int32)
	}
	clear(g.byHash)
	g.first, g.last, g.coll = g.first[:0], g.last[:0], g.coll[:0]
	if cap(g.next) < n {
		g.next = make([]int32, n)
	}
	g.next = g.next[:n]
	for _, i := range rows {
		g.next[i] = -1
		h := k.Hash(int(i))
		gi, ok := g.byHash[h]
		if ok {
			key, _ := k.Key(int(i))
			for gi >= 0 {
				if fk, _ := k.Key(int(g.first[gi])); bytes.Equal(fk, key) {
					break
				}
				gi = g.coll[gi]
			}
		}
		if !ok || gi < 0 {
			gi = int32(len(g.first))
			g.first = append(g.first, i)
			g.last = append(g.last, i)
			g.coll = append(g.coll, -1)
			if prev, ok := g.byHash[h]; ok {
				g.coll[gi] = prev // a hash collision: chain the groups
			}
			g.byHash[h] = gi
			continue
		}
		g.next[g.last[gi]] = i
		g.last[gi] = i
	}
}

// groups returns the number of groups.
func (g *grouper) groups() int { return len(g.first) }
