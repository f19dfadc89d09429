package nexmark_test

import (
	"math"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/connectors/nexmark"
)

// TestCanonicalStrings checks the canonical generator's strings against the
// reference generator's formats and sizes over 60,000 events: alphabets,
// length ranges, the credit-card format, the lists names, cities and states
// come from, that strings are made per event (almost all distinct, unlike
// the fast mode's pools), and that each kind's average size (8 bytes per
// number plus the strings, as the reference counts it) is the configured
// average within 2%.
func TestCanonicalStrings(t *testing.T) {
	const events = 60_000
	g := nexmark.NewGenerator(nexmark.Config{Seed: 3})
	var (
		word = regexp.MustCompile(`^([a-z]([a-z ]*[a-z])?)?$`)
		// nextString trims spaces, so a part may come out empty, as in
		// the reference.
		email = regexp.MustCompile(`^([a-z]([a-z ]*[a-z])?)?@([a-z]([a-z ]*[a-z])?)?\.com$`)
		card  = regexp.MustCompile(`^[0-9]{4} [0-9]{4} [0-9]{4} [0-9]{4}$`)
		extra = regexp.MustCompile(`^[a-z]*$`)
	)
	cities := []string{"Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland", "Bend", "Redmond", "Seattle", "Kent", "Cheyenne"}
	states := []string{"AZ", "CA", "ID", "OR", "WA", "WY"}
	var size, count [4]float64
	extras := map[string]bool{}
	check := func(n int64, what, s string, re *regexp.Regexp, minLen, maxLen int) {
		t.Helper()
		if !re.MatchString(s) || len(s) < minLen || len(s) > maxLen {
			t.Fatalf("event %d: %s %q: want %v, %d to %d bytes", n, what, s, re, minLen, maxLen)
		}
	}
	for n := int64(0); n < events; n++ {
		e := g.At(n)
		k := int(e.Kind)
		count[k]++
		switch e.Kind {
		case nexmark.KindPerson:
			p := e.Person
			first, last, ok := strings.Cut(p.Name, " ")
			if !ok || first == "" || last == "" {
				t.Fatalf("event %d: name %q: want a first and a last name", n, p.Name)
			}
			check(n, "email", p.EmailAddress, email, 1+4, 6+1+4+4)
			check(n, "credit card", p.CreditCard, card, 19, 19)
			if !slices.Contains(cities, p.City) || !slices.Contains(states, p.State) {
				t.Fatalf("event %d: city %q state %q not from the lists", n, p.City, p.State)
			}
			check(n, "extra", p.Extra, extra, 0, 1000)
			size[k] += float64(8 + len(p.Name) + len(p.EmailAddress) + len(p.CreditCard) + len(p.City) + len(p.State) + len(p.Extra))
		case nexmark.KindAuction:
			a := e.Auction
			check(n, "item name", a.ItemName, word, 0, 19)
			check(n, "description", a.Description, word, 0, 99)
			check(n, "extra", a.Extra, extra, 0, 1000)
			size[k] += float64(8 + len(a.ItemName) + len(a.Description) + 5*8 + len(a.Extra))
		case nexmark.KindBid:
			b := e.Bid
			check(n, "extra", b.Extra, extra, 54, 82)
			extras[b.Extra] = true
			size[k] += float64(4*8 + len(b.Extra))
		}
	}
	for k, want := range map[nexmark.Kind]float64{nexmark.KindPerson: nexmark.AvgPersonBytes, nexmark.KindAuction: nexmark.AvgAuctionBytes, nexmark.KindBid: nexmark.AvgBidBytes} {
		got := size[k] / count[k]
		if math.Abs(got-want)/want > 0.02 {
			t.Errorf("%v: average size %.1f bytes, want %.0f ± 2%%", k, got, want)
		}
		t.Logf("%v: %.0f events, average size %.1f bytes (configured %.0f)", k, count[k], got, want)
	}
	if d := float64(len(extras)) / count[nexmark.KindBid]; d < 0.99 {
		t.Errorf("only %.3f of the bids' extras are distinct: strings are not made per event", d)
	}
}

// TestModesAgreeOnNumbers: the canonical and fast modes differ in strings
// only; every number, id, time, channel and URL is the same.
func TestModesAgreeOnNumbers(t *testing.T) {
	c := nexmark.NewGenerator(nexmark.Config{Seed: 5})
	f := nexmark.NewGenerator(nexmark.Config{Seed: 5, Generator: nexmark.GeneratorFast})
	for n := int64(0); n < 20_000; n++ {
		a, b := c.At(n), f.At(n)
		a.Person.Name, a.Person.EmailAddress, a.Person.CreditCard, a.Person.City, a.Person.State, a.Person.Extra = "", "", "", "", "", ""
		b.Person.Name, b.Person.EmailAddress, b.Person.CreditCard, b.Person.City, b.Person.State, b.Person.Extra = "", "", "", "", "", ""
		a.Auction.ItemName, a.Auction.Description, a.Auction.Extra = "", "", ""
		b.Auction.ItemName, b.Auction.Description, b.Auction.Extra = "", "", ""
		a.Bid.Extra, b.Bid.Extra = "", ""
		if a != b {
			t.Fatalf("event %d: canonical %+v, fast %+v", n, a, b)
		}
	}
}

// TestAtIntoAgreesWithAt: the allocation-free AtInto builds the same events
// as At, and the same whatever came before (no state leaks between calls).
func TestAtIntoAgreesWithAt(t *testing.T) {
	g := nexmark.NewGenerator(nexmark.Config{Seed: 8})
	var s nexmark.Scratch
	for n := int64(0); n < 5_000; n++ {
		got, want := g.AtInto(n, &s), g.At(n)
		if got != want {
			t.Fatalf("event %d: AtInto %+v, At %+v", n, got, want)
		}
	}
}

func TestGeneratorModeValidated(t *testing.T) {
	err := nexmark.Config{Generator: "pooled"}.Validate("nexmark_bid")
	if err == nil || !strings.Contains(err.Error(), "generator") || !strings.Contains(err.Error(), "fast") {
		t.Fatalf("Validate(generator pooled) = %v, want an error naming the field and the modes", err)
	}
}

// TestSourceRateLimit: with maxEventsPerSecond a source goes through its
// event numbers no faster than the limit (a lower bound on the time taken,
// which a loaded machine cannot break) and emits the same rows as without.
func TestSourceRateLimit(t *testing.T) {
	cfg := nexmark.Config{Events: 20_000, Seed: 4, BatchSize: 100}
	want := drain(t, nexmark.KindBid, cfg, 0, 1)
	cfg.MaxEventsPerSecond = 100_000 // 20,000 events: at least 0.2 s
	start := time.Now()
	got := drain(t, nexmark.KindBid, cfg, 0, 1)
	if el := time.Since(start); el < 180*time.Millisecond {
		t.Fatalf("20,000 events at most 100,000/s took %v", el)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("rate-limited source emitted %d rows, unlimited %d, or they differ", len(got), len(want))
	}
}
