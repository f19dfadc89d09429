package kafka

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weirstream/weir/jobspec"
	"github.com/weirstream/weir/operators"
	"github.com/weirstream/weir/stream"
)

func planSourceConfig(config string, paths *stream.PathPolicy) (*stream.Schema, error) {
	return planSource(&stream.PlanContext{UID: "src", Config: []byte(config), Parallelism: 1, Paths: paths})
}

func planSinkConfig(config string, in *stream.Schema) error {
	_, err := planSink(&stream.PlanContext{UID: "sink", Config: []byte(config), Parallelism: 1, Inputs: []stream.PlanInput{{Schema: in}}})
	return err
}

// TestPlanSourceErrors: every bad source config is a config error that
// names the option and what is allowed.
func TestPlanSourceErrors(t *testing.T) {
	paths, err := stream.NewPathPolicy([]string{t.TempDir()})
	must(t, err)
	const bs = `"bootstrapServers": ["k:9092"]`
	for _, tc := range []struct{ config, want string }{
		{`{"topics": ["t"]}`, "missing bootstrapServers"},
		{`{"bootstrapServers": ["k"], "topics": ["t"]}`, "want host:port"},
		{`{"bootstrapServers": ["k:0"], "topics": ["t"]}`, "port"},
		{`{` + bs + `}`, "missing topics"},
		{`{` + bs + `, "topics": ["t"], "topicPattern": "t.*"}`, "exactly one"},
		{`{` + bs + `, "topics": ["bad topic"]}`, "topics[0]"},
		{`{` + bs + `, "topicPattern": "("}`, "topicPattern"},
		{`{` + bs + `, "topics": ["t"], "startFrom": "middle"}`, "startFrom \"middle\""},
		{`{` + bs + `, "topics": ["t"], "startFrom": "timestamp"}`, "needs startTimestamp"},
		{`{` + bs + `, "topics": ["t"], "startFrom": "timestamp", "startTimestamp": "yesterday"}`, "RFC 3339"},
		{`{` + bs + `, "topics": ["t"], "startFrom": "groupOffsets"}`, "needs group"},
		{`{` + bs + `, "topics": ["t"], "resetTo": "latest"}`, "resetTo applies to startFrom groupOffsets"},
		{`{` + bs + `, "topics": ["t"], "format": "avro"}`, "format \"avro\""},
		{`{` + bs + `, "topics": ["t"], "format": "json"}`, "needs fields"},
		{`{` + bs + `, "topics": ["t"], "format": "json", "fields": [{"name": "a", "type": "decimal"}]}`, "field \"a\""},
		{`{` + bs + `, "topics": ["t"], "format": "json", "fields": [{"name": "topic", "type": "string"}], "metadataColumns": ["topic"]}`, "unique"},
		{`{` + bs + `, "topics": ["t"], "format": "json", "fields": [{"name": "a", "type": "string"}], "metadataColumns": ["headers"]}`, "metadataColumns"},
		{`{` + bs + `, "topics": ["t"], "fields": [{"name": "a", "type": "string"}]}`, "need format json"},
		{`{` + bs + `, "topics": ["t"], "partitionDiscoveryInterval": "soon"}`, "partitionDiscoveryInterval"},
		{`{` + bs + `, "topics": ["t"], "stopAtEnd": true, "partitionDiscoveryInterval": "1s"}`, "bounded"},
		{`{` + bs + `, "topics": ["t"], "endOffsets": "committed"}`, "endOffsets"},
		{`{` + bs + `, "topics": ["t"], "batchSize": -1}`, "batchSize"},
		{`{` + bs + `, "topics": ["t"], "maxMessageBytes": 1000000000}`, "maxMessageBytes"},
		{`{` + bs + `, "topics": ["t"], "watermark": {"field": "nope"}}`, "watermark field \"nope\""},
		{`{` + bs + `, "topics": ["t"], "watermark": {"field": "value"}}`, "timestamp or int64"},
		{`{` + bs + `, "topics": ["t"], "watermark": {"maxOutOfOrderness": "-1s"}}`, "negative"},
		{`{` + bs + `, "topics": ["t"], "security": {"sasl": {"mechanism": "GSSAPI", "username": "u", "password": "p"}}}`, "GSSAPI"},
		{`{` + bs + `, "topics": ["t"], "security": {"sasl": {"mechanism": "PLAIN", "username": "u"}}}`, "exactly one of passwordFile"},
		{`{` + bs + `, "topics": ["t"], "security": {"tls": {"certFile": "/c"}}}`, "certFile and keyFile"},
		{`{` + bs + `, "topics": ["t"], "security": {"tls": {"caFile": "/etc/elsewhere/ca.pem"}}}`, "outside the allowed roots"},
		{`{` + bs + `, "topics": ["t"], "security": {"sasl": {"mechanism": "PLAIN", "username": "u", "passwordFile": "/etc/pw"}}}`, "outside the allowed roots"},
		{`{` + bs + `, "topics": ["t"], "groupId": "g"}`, "unknown field"},
	} {
		_, err := planSourceConfig(tc.config, paths)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.config, err, tc.want)
			continue
		}
		if !strings.Contains(err.Error(), "outside the allowed roots") && !errors.Is(err, stream.ErrConfig) {
			t.Errorf("%s: %v is not a config error", tc.config, err)
		}
	}
	for _, ok := range []string{
		`{` + bs + `, "topics": ["t", "t"]}`,
		`{` + bs + `, "topicPattern": "orders-.*", "partitionDiscoveryInterval": "0"}`,
		`{` + bs + `, "topics": ["t"], "startFrom": "timestamp", "startTimestamp": "2024-05-01T12:00:00Z"}`,
		`{` + bs + `, "topics": ["t"], "startFrom": "groupOffsets", "group": "g", "resetTo": "latest"}`,
		`{` + bs + `, "topics": ["t"], "endOffsets": "latest", "watermark": {"idleTimeout": "1s"}}`,
		`{` + bs + `, "topics": ["t"], "security": {"tls": {}, "sasl": {"mechanism": "SCRAM-SHA-512", "username": "u", "passwordFile": "` + filepath.Join(paths.Roots()[0], "pw") + `"}}}`,
	} {
		if _, err := planSourceConfig(ok, paths); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
}

// TestPlanSinkErrors: every bad sink config is a config error that names
// the option and what is allowed.
func TestPlanSinkErrors(t *testing.T) {
	in := stream.MustSchema(stream.Field{Name: "id", Type: stream.TypeInt64}, stream.Field{Name: "s", Type: stream.TypeString})
	const bs = `"bootstrapServers": ["k:9092"]`
	for _, tc := range []struct{ config, want string }{
		{`{"topic": "t"}`, "missing bootstrapServers"},
		{`{` + bs + `}`, "missing topic"},
		{`{` + bs + `, "topic": "a/b"}`, "topic"},
		{`{` + bs + `, "topic": "t", "keyField": "nope"}`, "keyField \"nope\""},
		{`{` + bs + `, "topic": "t", "format": "raw"}`, "needs valueField"},
		{`{` + bs + `, "topic": "t", "format": "raw", "valueField": "id"}`, "string column"},
		{`{` + bs + `, "topic": "t", "valueField": "s"}`, "format: raw"},
		{`{` + bs + `, "topic": "t", "format": "csv"}`, "format \"csv\""},
		{`{` + bs + `, "topic": "t", "deliveryGuarantee": "maybe"}`, "deliveryGuarantee"},
		{`{` + bs + `, "topic": "t", "transactionTimeout": "10ms"}`, "transactionTimeout"},
		{`{` + bs + `, "topic": "t", "transactionalIdPrefix": "a b"}`, "transactionalIdPrefix"},
		{`{` + bs + `, "topic": "t", "maxMessageBytes": -5}`, "maxMessageBytes"},
	} {
		err := planSinkConfig(tc.config, in)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, stream.ErrConfig) {
			t.Errorf("%s: error %v, want a config error containing %q", tc.config, err, tc.want)
		}
	}
	if err := planSinkConfig(`{`+bs+`, "topic": "t", "keyField": "id", "format": "raw", "valueField": "s", "deliveryGuarantee": "at_least_once", "transactionTimeout": "5m", "transactionalIdPrefix": "app-1"}`, in); err != nil {
		t.Fatal(err)
	}
}

// TestTransactionalIDs checks the transactional id scheme and its parser.
func TestTransactionalIDs(t *testing.T) {
	p := defaultPrefix("job-1", "out")
	if p != "weir.job-1.out" {
		t.Fatalf("prefix %q", p)
	}
	id := transactionalID(p, 3, 41)
	if id != "weir.job-1.out.3.41" {
		t.Fatalf("id %q", id)
	}
	if st, ck, ok := parseTransactionalID(id, p); !ok || st != 3 || ck != 41 {
		t.Fatalf("parse: %d %d %v", st, ck, ok)
	}
	for _, bad := range []string{"weir.job-1.out.3", "weir.job-1.out.3.41.1", "weir.job-1.other.3.41", "weir.job-1.out.03.41", "weir.job-1.out.-3.41", "weir.job-1.out3.41"} {
		if _, _, ok := parseTransactionalID(bad, p); ok {
			t.Errorf("%q parsed", bad)
		}
	}
	h := handle{txnID: id, pid: 1 << 40, epoch: 7}
	got, err := decodeHandle(h.encode())
	if err != nil || got != h {
		t.Fatalf("handle %+v, %v", got, err)
	}
	if _, err := decodeHandle(h.encode()[:5]); err == nil {
		t.Fatal("a truncated handle decoded")
	}
}

// TestExampleSpec checks that examples/kafka-to-kafka.yaml plans with the
// real operator types.
func TestExampleSpec(t *testing.T) {
	r := stream.NewRegistry()
	Register(r)
	operators.Register(r)
	g, err := jobspec.Load(filepath.Join("..", "..", "examples", "kafka-to-kafka.yaml"), r)
	must(t, err)
	if !g.Checkpoint.Enabled() || len(g.Vertices) != 4 {
		t.Fatalf("checkpointing %v, %d vertices", g.Checkpoint.Enabled(), len(g.Vertices))
	}
}
