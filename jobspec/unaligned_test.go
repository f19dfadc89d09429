package jobspec

import "testing"

func TestCheckpointingUnaligned(t *testing.T) {
	for _, tc := range []struct {
		body string
		want bool
	}{
		{"", false},
		{"checkpointing: {interval: 1s}\n", false},
		{"checkpointing: {interval: 1s, unaligned: false}\n", false},
		{"checkpointing: {interval: 1s, mode: exactly_once, unaligned: true}\n", true},
	} {
		spec := "name: j\n" + tc.body + "operators:\n  - {uid: g, type: gen}\n"
		g, err := Parse("job.yaml", []byte(spec), testRegistry())
		if err != nil {
			t.Fatalf("%q: %v", tc.body, err)
		}
		if got := g.Checkpoint.Unaligned; got != tc.want {
			t.Errorf("%q: unaligned %v, want %v", tc.body, got, tc.want)
		}
	}
}

func TestCheckpointingUnalignedErrors(t *testing.T) {
	// Every problem is on line 2; the message names the setting and what
	// to do.
	for _, tc := range []struct {
		body  string
		names []string
	}{
		{"checkpointing: {unaligned: yes please}", []string{"checkpointing", "unaligned", "true or false"}},
		{"checkpointing: {unaligned: 1}", []string{"checkpointing", "unaligned", "true or false"}},
		{"checkpointing: {interval: 1s, mode: at_least_once, unaligned: true}", []string{"unaligned", "exactly_once"}},
		{"checkpointing: {unalinged: true}", []string{"checkpointing", `"unalinged"`, `did you mean "unaligned"`}},
	} {
		t.Run(tc.body, func(t *testing.T) {
			spec := "name: j\n" + tc.body + "\noperators:\n  - {uid: g, type: gen}\n"
			_, err := Parse("job.yaml", []byte(spec), testRegistry())
			checkSpecError(t, err, "job.yaml", 2, tc.names...)
		})
	}
}
