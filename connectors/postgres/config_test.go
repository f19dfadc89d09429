package postgres

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/weirstream/weir/stream"
	"github.com/weirstream/weir/stream/twophase"
)

const planDSN = "postgres://weir:hunter2@db.example:5432/app"

// planSink plans a "postgres" sink of config over eventSchema with
// paths, as a job submission does.
func planSink(config string, paths *stream.PathPolicy) (*stream.PlanContext, error) {
	r := stream.NewRegistry()
	Register(r)
	typ, ok := r.Lookup(TypeName, false)
	if !ok || typ.Kind != stream.KindSink {
		panic("postgres sink not registered")
	}
	p := &stream.PlanContext{UID: "sink", Config: []byte(config), Parallelism: 2, Paths: paths,
		Inputs: []stream.PlanInput{{Schema: eventSchema}}}
	out, err := typ.Plan(p)
	if out != nil {
		panic("a sink planned an output schema")
	}
	return p, err
}

// TestPlanRejectsBadConfig: every bad config fails at planning with a
// config error naming the key, the reason and what is allowed, and never
// quoting the password.
func TestPlanRejectsBadConfig(t *testing.T) {
	policy, err := stream.NewPathPolicy([]string{"/srv/weir"})
	must(t, err)
	for _, tc := range []struct {
		config string
		wants  []string
	}{
		{`{"table": "t"}`, []string{"missing dsn", "dsnFile"}},
		{`{"dsn": "` + planDSN + `", "dsnFile": "/srv/weir/dsn", "table": "t"}`, []string{"dsn and dsnFile are both set"}},
		{`{"dsnFile": "dsn.txt", "table": "t"}`, []string{"dsnFile", "not an absolute path"}},
		{`{"dsnFile": "/etc/weir/dsn", "table": "t"}`, []string{"postgres sink dsnFile /etc/weir/dsn is outside the allowed roots"}},
		{`{"dsn": "` + planDSN + `?sslrootcert=/etc/shadow", "table": "t"}`, []string{`key "sslrootcert" is not allowed`, "certificate and password files"}},
		{`{"dsn": "host=db password=hunter2 passfile=/root/.pgpass", "table": "t"}`, []string{`key "passfile" is not allowed`}},
		{`{"dsn": "postgres://weir:hunter2@db:notaport/app", "table": "t"}`, []string{"not a valid PostgreSQL connection string", "not shown"}},
		{`{"dsn": "` + planDSN + `"}`, []string{"missing table"}},
		{`{"dsn": "` + planDSN + `", "table": "a.b.c"}`, []string{`table "a.b.c"`, "3 dotted parts", "name or schema.name"}},
		{`{"dsn": "` + planDSN + `", "table": "\"open"}`, []string{"unterminated quoted identifier"}},
		{`{"dsn": "` + planDSN + `", "table": "1abc"}`, []string{`unexpected "1"`, "quote other names"}},
		{`{"dsn": "` + planDSN + `", "table": "my table"}`, []string{`unexpected " "`}},
		{`{"dsn": "` + planDSN + `", "table": "s."}`, []string{"empty name"}},
		{`{"dsn": "` + planDSN + `", "table": "t", "mode": "exactly-once"}`, []string{`mode "exactly-once"`, "want exactly_once, upsert or at_least_once"}},
		{`{"dsn": "` + planDSN + `", "table": "t", "mode": "upsert"}`, []string{"mode upsert needs keyColumns"}},
		{`{"dsn": "` + planDSN + `", "table": "t", "keyColumns": ["seq"]}`, []string{"keyColumns is for mode upsert only"}},
		{`{"dsn": "` + planDSN + `", "table": "t", "mode": "upsert", "keyColumns": ["id"]}`, []string{`keyColumns names "id", which is not a written column`, "seq, name, price, ok, ts"}},
		{`{"dsn": "` + planDSN + `", "table": "t", "mode": "upsert", "keyColumns": ["seq", "seq"]}`, []string{`keyColumns names "seq" twice`}},
		{`{"dsn": "` + planDSN + `", "table": "t", "columns": {"nope": "x"}}`, []string{`columns maps field "nope", which the input lacks`, "seq, name, price, ok, ts"}},
		{`{"dsn": "` + planDSN + `", "table": "t", "columns": {"name": "seq"}}`, []string{`fields "seq" and "name" both go to column "seq"`}},
		{`{"dsn": "` + planDSN + `", "table": "t", "columns": {"seq": "", "name": "", "price": "", "ok": "", "ts": ""}}`, []string{"no field is written"}},
		{`{"dsn": "` + planDSN + `", "table": "t", "columns": {"seq": "` + strings.Repeat("x", 64) + `"}}`, []string{"at most 63 bytes"}},
		{`{"dsn": "` + planDSN + `", "table": "t", "batchRows": -1}`, []string{"batchRows -1", "between 1 and 100000"}},
		{`{"dsn": "` + planDSN + `", "table": "t", "batchRows": 100001}`, []string{"batchRows 100001"}},
		{`{"dsn": "` + planDSN + `", "table": "t", "connectTimeout": "soon"}`, []string{`connectTimeout "soon"`, `such as "10s"`}},
		{`{"dsn": "` + planDSN + `", "table": "t", "connectTimeout": "0s"}`, []string{`connectTimeout "0s"`}},
		{`{"dsn": "` + planDSN + `", "table": "t", "connectTimeout": "1h"}`, []string{`connectTimeout "1h"`, "5m0s"}},
		{`{"dsn": "` + planDSN + `", "tabel": "t"}`, []string{`unknown field "tabel"`}},
	} {
		_, err := planSink(tc.config, policy)
		if err == nil {
			t.Errorf("%s: planned; want an error mentioning %q", tc.config, tc.wants)
			continue
		}
		for _, w := range tc.wants {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not mention %q", tc.config, err, w)
			}
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: error quotes the password: %v", tc.config, err)
		}
		if !errors.Is(err, stream.ErrConfig) && !errors.Is(err, stream.ErrPathNotAllowed) {
			t.Errorf("%s: error %v is neither a config error nor a path error", tc.config, err)
		}
	}
}

// TestPlanDeclaresState: exactly_once (and the default, which is
// exactly_once when the job checkpoints) declares the two-phase-commit
// state; the other modes keep no state.
func TestPlanDeclaresState(t *testing.T) {
	policy, err := stream.NewPathPolicy([]string{"/srv/weir"})
	must(t, err)
	for _, tc := range []struct {
		config string
		state  bool
	}{
		{`{"dsn": "` + planDSN + `", "table": "t"}`, true},
		{`{"dsnFile": "/srv/weir/pg.dsn", "table": "public.t", "mode": "exactly_once", "batchRows": 5000, "connectTimeout": "3s"}`, true},
		{`{"dsn": "host=db user=weir dbname=app sslmode=require", "table": "\"My\"\"Table\"", "mode": "at_least_once", "columns": {"ts": "event_time", "ok": ""}}`, false},
		{`{"dsn": "` + planDSN + `?sslmode=verify-full&application_name=x", "table": "t", "mode": "upsert", "keyColumns": ["seq", "name"]}`, false},
	} {
		p, err := planSink(tc.config, policy)
		if err != nil {
			t.Errorf("%s: %v", tc.config, err)
			continue
		}
		var got []string
		for _, d := range p.States() {
			got = append(got, d.String())
		}
		var want []string
		if tc.state {
			want = []string{twophase.PendingState + " (operator-list)", twophase.WritersState + " (union)"}
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: declares %v, want %v", tc.config, got, want)
		}
	}
}

func TestParseTable(t *testing.T) {
	for in, want := range map[string]pgx.Identifier{
		"events":               {"events"},
		"Events":               {"events"},
		"public.Events":        {"public", "events"},
		`"Events"`:             {"Events"},
		`"my schema"."a.b"`:    {"my schema", "a.b"},
		`s."say ""hi"""`:       {"s", `say "hi"`},
		"_t$1":                 {"_t$1"},
		"été":                  {"été"},
		`"Mixed".lower_Folded`: {"Mixed", "lower_folded"},
	} {
		got, err := parseTable(in)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("parseTable(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", ".", "a.", ".a", `""`, "a.b.c", "a-b", `"a"b`, "$a", strings.Repeat("a", 64)} {
		if got, err := parseTable(in); err == nil {
			t.Errorf("parseTable(%q) = %q; want an error", in, got)
		}
	}
}

func TestSessionName(t *testing.T) {
	p := twophase.SubtaskPrefix(strings.Repeat("j", 40), strings.Repeat("u", 40), 32767)
	name := sessionName(p, 1<<62)
	if len(name) > 63 {
		t.Fatalf("session name %q is %d bytes; application_name keeps 63", name, len(name))
	}
	hash, attempt, ok := parseSessionName(name)
	if !ok || hash != prefixHash(p) || attempt != 1<<62 {
		t.Fatalf("parseSessionName(%q) = %q, %d, %v", name, hash, attempt, ok)
	}
	for _, bad := range []string{"", "weir:", "weir:abc:1", "psql", "weir:0123456789abcdef:x"} {
		if _, _, ok := parseSessionName(bad); ok {
			t.Errorf("parseSessionName(%q) ok", bad)
		}
	}
}

func TestCheckGID(t *testing.T) {
	id := twophase.TxnID{JobID: strings.Repeat("j", 300), OperatorUID: "sink", Subtask: 1 << 20, Attempt: 1 << 62, Checkpoint: 1 << 62, Seq: 1 << 62}
	if err := checkGID(id.Name()); err != nil {
		t.Fatalf("the longest name: %v", err)
	}
	for _, bad := range []string{"", "it's", strings.Repeat("a", 200), "a b"} {
		if checkGID(bad) == nil {
			t.Errorf("checkGID(%q) passed", bad)
		}
	}
}
