// Package nexmark owns Weir's Nexmark benchmark: a deterministic generator
// of the Nexmark auction-site event stream (people, auctions and bids)
// after the reference generator of the Nexmark suite, the three source
// types "nexmark_person", "nexmark_auction" and "nexmark_bid" that emit one
// stream each from the same event sequence, plain Go access to the events
// (EventAt, Generator) for tests and baselines, the queries as job specs
// (QuerySpec, the files in queries/), their oracles (Oracle) and the
// "nexmark_digest" sink that reduces a query's output to a Digest (row
// count and order-independent hash) to compare with them, and the
// single-goroutine baselines BaselineQ1 and BaselineQ5 that the engine is
// measured against.
//
// # Generator modes
//
// Config.Generator chooses how events are made. "canonical" (the default)
// does the reference generator's work per event: names, e-mails, credit
// cards, item names, descriptions and the "extra" padding are written
// afresh for every event with the reference's lengths and alphabets
// (extra pads each kind to AvgPersonBytes, AvgAuctionBytes, AvgBidBytes on
// average), and a source builds every event of its split, of all kinds,
// emitting those of its own kind, as a reference source that generates
// the whole stream and filters it does. "fast" picks the strings from
// fixed pools and builds only the source's kind: a much cheaper stream of
// the same shape, whose figures must be labelled as such. Numbers, ids,
// times and channels are the same in both modes.
//
// # The event sequence
//
// Events are numbered 0, 1, 2, ... Event n is a pure function of the Config
// (seed and rate) and n, so any subtask can generate any event and runs are
// repeatable. As in the reference generator, every block of 50 consecutive
// event numbers holds 1 person (n%50 == 0), 3 auctions (n%50 in 1..3) and 46
// bids; person ids and auction ids count up from 1000 in event order; a new
// auction's seller and a bid's bidder are usually (3 in 4) a "hot" person
// (the latest multiple of 100, plus one for bidders) and otherwise one of the
// 1,000 most recent people (or up to 10 ahead); a bid's auction is half the
// time a hot auction (the latest multiple of 100) and otherwise one of the
// 100 auctions in flight (or up to 10 ahead). Prices are 100·10^(6u) cents-ish
// units rounded (u uniform), categories 10..14, US states AZ CA ID OR WA WY.
// An auction expires a random time up to twice the event-time span of the
// next 100 auctions after it starts.
//
// Event time: event n happens at StartMillis + n·1000/EventsPerSecond
// (milliseconds, rounded down), so the stream's event time advances at the
// configured rate whatever the real speed. Random draws hash (seed, field, n)
// with splitmix64 instead of seeding java.util.Random per event (in the
// canonical mode one splitmix64 stream per event draws its strings), so the
// values differ from the Java generator's while the shape, proportions and
// sizes match.
//
// # Parallel sources
//
// Subtask i of p takes the event numbers n ≡ i (mod p) below Events (its
// split) and keeps those of its source's kind, so the subtasks of one source
// partition its events, and the person, auction and bid sources of one
// config see the same sequence (a join of persons and auctions lines up
// however the sources are parallelised). Each subtask emits in increasing
// event time.
//
// The sources implement stream.Checkpointed: each subtask stores the next
// event number of each split it owns as operator list state "positions". A
// restore may change the parallelism: the splits are handed out anew, a
// subtask merges the splits it received (still in increasing event time)
// and one that received none ends at once. The splits stay those of the
// parallelism the job was first started with, so a restore with a higher
// parallelism leaves the extra subtasks idle.
//
// nexmark imports the standard library and package stream only.
package nexmark
