package nats

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/weirstream/weir/connectors/nats/natstest"
	"github.com/weirstream/weir/stream"
)

func planSourceConfig(config string, paths *stream.PathPolicy) (*stream.Schema, error) {
	r := stream.NewRegistry()
	Register(r)
	t, _ := r.Lookup("nats", true)
	p := &stream.PlanContext{UID: "src", Config: []byte(config), Parallelism: 1, Paths: paths}
	schema, err := t.Plan(p)
	if err == nil && len(p.States()) != 2 {
		err = fmt.Errorf("declared states %v", p.States())
	}
	return schema, err
}

func planSinkConfig(config string, in *stream.Schema) error {
	r := stream.NewRegistry()
	Register(r)
	t, _ := r.Lookup("nats", false)
	_, err := t.Plan(&stream.PlanContext{UID: "sink", Config: []byte(config), Parallelism: 1, Inputs: []stream.PlanInput{{Schema: in}}})
	return err
}

func TestPlanSource(t *testing.T) {
	schema, err := planSourceConfig(`{"url":"nats://h:4222","stream":"s"}`, nil)
	if err != nil || !schema.Equal(RawSchema) {
		t.Fatalf("raw: schema %v, error %v", schema, err)
	}
	schema, err = planSourceConfig(`{"urls":["h1:4222","tls://h2:4222"],"stream":"s","format":"json","fields":`+eventFields+
		`,"subjects":["a.*","b.>"],"startFrom":"time","startTime":"2024-05-01T00:00:00Z","watermark":{"field":"ts","maxOutOfOrderness":"2s"},"stopAtEnd":true}`, nil)
	if err != nil || schema.String() != "(id int64, k string, ts timestamp)" {
		t.Fatalf("json: schema %v, error %v", schema, err)
	}

	dir := t.TempDir()
	policy, err := stream.NewPathPolicy([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ config, want string }{
		{`{"stream":"s"}`, "missing url"},
		{`{"url":"a:1","urls":["b:1"],"stream":"s"}`, "url or urls, not both"},
		{`{"url":"http://a:1","stream":"s"}`, `unknown scheme "http"`},
		{`{"url":"nats://u:pw@a:1/path","stream":"s"}`, "nothing else"},
		{`{"url":"a:1"}`, "missing stream"},
		{`{"url":"a:1","stream":"a.b"}`, "a stream name is"},
		{`{"url":"a:1","stream":"s","bogus":1}`, "unknown field"},
		{`{"url":"a:1","stream":"s","subjects":["a..b"]}`, "empty token"},
		{`{"url":"a:1","stream":"s","subjects":["a.>.b"]}`, "'>' may only be the last"},
		{`{"url":"a:1","stream":"s","subjects":["a.b*"]}`, "whole token"},
		{`{"url":"a:1","stream":"s","subjects":["a","a"]}`, "given twice"},
		{`{"url":"a:1","stream":"s","startFrom":"latest"}`, `unknown startFrom "latest" (want first, new, sequence or time)`},
		{`{"url":"a:1","stream":"s","startFrom":"sequence"}`, "needs startSequence"},
		{`{"url":"a:1","stream":"s","startFrom":"time","startTime":"yesterday"}`, "RFC 3339"},
		{`{"url":"a:1","stream":"s","startSequence":5}`, "go with startFrom sequence and time only"},
		{`{"url":"a:1","stream":"s","format":"avro"}`, `unknown format "avro"`},
		{`{"url":"a:1","stream":"s","format":"json"}`, "needs fields"},
		{`{"url":"a:1","stream":"s","fields":[{"name":"x","type":"int64"}]}`, "not allowed with format raw"},
		{`{"url":"a:1","stream":"s","format":"json","fields":[{"name":"x","type":"decimal"}]}`, `unknown type "decimal"`},
		{`{"url":"a:1","stream":"s","batchSize":-1}`, "batchSize -1"},
		{`{"url":"a:1","stream":"s","maxMessageBytes":1000000000}`, "maxMessageBytes 1000000000"},
		{`{"url":"a:1","stream":"s","onDecodeError":"ignore"}`, "want fail or skip"},
		{`{"url":"a:1","stream":"s","watermark":{"field":"data"}}`, `field "data" is string`},
		{`{"url":"a:1","stream":"s","watermark":{"field":"nope"}}`, `field "nope" is not in the output`},
		{`{"url":"a:1","stream":"s","watermark":{"field":"timestamp","maxOutOfOrderness":"-1s"}}`, "maxOutOfOrderness"},
		{`{"url":"a:1","stream":"s","token":"t","user":"u"}`, "one way to authenticate"},
		{`{"url":"nats://u:p@a:1","stream":"s","credsFile":"/x"}`, "one way to authenticate"},
		{`{"url":"a:1","stream":"s","password":"p"}`, "a password needs a user"},
		{`{"url":"a:1","stream":"s","user":"u","password":"p","passwordFile":"/p"}`, "password or passwordFile"},
		{`{"url":"a:1","stream":"s","tls":{"certFile":"/c"}}`, "certFile and keyFile together"},
		{`{"url":"a:1","stream":"s","connectTimeout":"soon"}`, "connectTimeout"},
		{`{"url":"a:1","stream":"s","credsFile":"/etc/weir.creds"}`, "credsFile /etc/weir.creds is outside the allowed roots"},
		{`{"url":"a:1","stream":"s","tls":{"caFile":"/etc/ca.pem"}}`, "tls caFile /etc/ca.pem is outside"},
	} {
		_, err := planSourceConfig(tc.config, policy)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one saying %q", tc.config, err, tc.want)
			continue
		}
		if !errors.Is(err, stream.ErrConfig) && !errors.Is(err, stream.ErrPathNotAllowed) {
			t.Errorf("%s: error %v is not a config error", tc.config, err)
		}
		if strings.Contains(err.Error(), ":pw@") || strings.Contains(err.Error(), ":p@") {
			t.Errorf("%s: error %v shows the password", tc.config, err)
		}
	}
	if _, err := planSourceConfig(fmt.Sprintf(`{"url":"a:1","stream":"s","credsFile":%q}`, filepath.Join(dir, "weir.creds")), policy); err != nil {
		t.Fatalf("a credsFile under the allowed root: %v", err)
	}
}

func TestSubjectsCollide(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"a.b", "a.b", true},
		{"a.b", "a.c", false},
		{"a.*", "a.b", true},
		{"a.*", "a.b.c", false},
		{"a.>", "a.b.c", true},
		{"a.>", "a", false},
		{">", "x.y", true},
		{"*.b", "a.*", true},
		{"a.b.c", "a.b", false},
		{"orders.>", "orders.new", true},
	} {
		if got := subjectsCollide(tc.a, tc.b); got != tc.want {
			t.Errorf("subjectsCollide(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
		if got := subjectsCollide(tc.b, tc.a); got != tc.want {
			t.Errorf("subjectsCollide(%q, %q) = %v, want %v", tc.b, tc.a, got, tc.want)
		}
	}
}

func TestPlanSink(t *testing.T) {
	if err := planSinkConfig(`{"url":"a:1","subject":"out.x"}`, rowSchema); err != nil {
		t.Fatal(err)
	}
	if err := planSinkConfig(`{"url":"a:1","stream":"s","subjectField":"k","format":"raw","valueField":"k","maxPending":10,"ackTimeout":"5s","deduplicate":false}`, rowSchema); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ config, want string }{
		{`{"subject":"x"}`, "missing url"},
		{`{"url":"a:1"}`, "missing subject"},
		{`{"url":"a:1","subject":"x","subjectField":"k"}`, "subject or subjectField, not both"},
		{`{"url":"a:1","subject":"x.*"}`, "wildcard"},
		{`{"url":"a:1","subjectField":"k"}`, "subjectField needs stream"},
		{`{"url":"a:1","stream":"s","subjectField":"id"}`, `subjectField "id" is int64`},
		{`{"url":"a:1","stream":"s","subjectField":"nope"}`, `subjectField "nope" is not in the input`},
		{`{"url":"a:1","subject":"x","format":"raw"}`, "needs valueField"},
		{`{"url":"a:1","subject":"x","format":"raw","valueField":"v"}`, `valueField "v" is float64`},
		{`{"url":"a:1","subject":"x","valueField":"k"}`, "valueField goes with format raw only"},
		{`{"url":"a:1","subject":"x","format":"csv"}`, `unknown format "csv"`},
		{`{"url":"a:1","subject":"x","maxPending":-3}`, "maxPending -3"},
		{`{"url":"a:1","subject":"x","ackTimeout":"0s"}`, "ackTimeout"},
		{`{"url":"a:1","subject":"x","maxMessageBytes":-1}`, "maxMessageBytes -1"},
		{`{"url":"a:1","subject":"x","deduplicate":"yes"}`, "deduplicate"},
	} {
		err := planSinkConfig(tc.config, rowSchema)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, stream.ErrConfig) {
			t.Errorf("%s: error %v, want a config error saying %q", tc.config, err, tc.want)
		}
	}
}

// TestCredentials connects with a user and a password file, and with a
// token file, to servers that require them; a wrong password fails Open
// without showing it.
func TestCredentials(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	userSrv := natstest.StartServer(t, func(o *server.Options) { o.Username, o.Password = "weir", "s3cret-pw" })
	tokenSrv := natstest.StartServer(t, func(o *server.Options) { o.Authorization = "tok-123" })
	for _, srv := range []*server.Server{userSrv, tokenSrv} {
		nc := client(t, strings.Replace(srv.ClientURL(), "nats://", map[*server.Server]string{userSrv: "nats://weir:s3cret-pw@", tokenSrv: "nats://tok-123@"}[srv], 1))
		createStream(t, nc, "events", "ev.>")
		publishEvents(t, nc, "ev.a", 0, 5)
	}
	for _, tc := range []struct {
		name, url, auth string
		ok              bool
	}{
		{"password file", userSrv.ClientURL(), fmt.Sprintf(`"user":"weir","passwordFile":%q`, write("pw", "s3cret-pw\n")), true},
		{"password", userSrv.ClientURL(), `"user":"weir","password":"s3cret-pw"`, true},
		{"token file", tokenSrv.ClientURL(), fmt.Sprintf(`"tokenFile":%q`, write("tok", "tok-123\n")), true},
		{"wrong password", userSrv.ClientURL(), `"user":"weir","password":"wrong-pw"`, false},
		{"no credentials", userSrv.ClientURL(), `"connectTimeout":"5s"`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := jsonSource(t, tc.url, tc.auth+`,"stopAtEnd":true`)
			err := src.Open(context.Background(), octxFor(0, 1))
			defer src.Close()
			if !tc.ok {
				if err == nil || !strings.Contains(err.Error(), "cannot connect") || strings.Contains(err.Error(), "wrong-pw") {
					t.Fatalf("Open error %v, want a connection error that does not show the password", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var c collector
			drain(t, src, &c)
			checkExactlyOnce(t, ids(c.rows(), 0), 5)
		})
	}
}
