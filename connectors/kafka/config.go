package kafka

import (
	"fmt"
	"math"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/weirstream/weir/stream"
)

// Limits on the configs.
const (
	// DefaultMaxMessageBytes is the default size limit of one record (key
	// plus value plus headers), the default of Kafka's message.max.bytes.
	DefaultMaxMessageBytes = 1 << 20
	// MaxMaxMessageBytes is the largest maxMessageBytes accepted.
	MaxMaxMessageBytes = 64 << 20
	// MaxBatchSize is the largest batchSize of the source.
	MaxBatchSize = 1 << 20
	// DefaultDiscoveryInterval is the default partitionDiscoveryInterval.
	DefaultDiscoveryInterval = 30 * time.Second
	// DefaultTransactionTimeout is the default transactionTimeout of the
	// sink: the default of the brokers' transaction.max.timeout.ms, the
	// longest they accept.
	DefaultTransactionTimeout = 15 * time.Minute

	maxServers     = 100
	maxTopics      = 1000
	maxTopicLength = 249
	maxPrefixLen   = 200
)

// SourceConfig is the JSON config of the "kafka" source.
type SourceConfig struct {
	// BootstrapServers are host:port addresses of brokers to connect to
	// first (the client learns the others from them). Required.
	BootstrapServers []string `json:"bootstrapServers"`
	// Topics are the topics to read. Exactly one of Topics and
	// TopicPattern is required. They must exist when a subtask opens.
	Topics []string `json:"topics,omitempty"`
	// TopicPattern is a regular expression (RE2 syntax) that a topic's
	// whole name must match for the topic to be read; topics created later
	// are found by partition discovery.
	TopicPattern string `json:"topicPattern,omitempty"`
	// StartFrom is where a fresh start reads each partition: "earliest"
	// (the default), "latest" (the end of the committed records at the
	// start), "timestamp" (the first record at or after StartTimestamp)
	// or "groupOffsets" (the offsets committed for Group; partitions
	// without one start at ResetTo). A restore ignores it: it resumes
	// from the checkpoint.
	StartFrom string `json:"startFrom,omitempty"`
	// StartTimestamp is the time for startFrom timestamp: RFC 3339 or
	// Unix milliseconds.
	StartTimestamp string `json:"startTimestamp,omitempty"`
	// Group is a consumer group id. When set, the offsets of every
	// completed checkpoint are committed to it (for monitoring and for
	// startFrom groupOffsets of another job); they are never read for
	// recovery. The source does not join the group.
	Group string `json:"group,omitempty"`
	// ResetTo is where startFrom groupOffsets starts a partition that
	// has no committed offset: "earliest" (the default) or "latest".
	ResetTo string `json:"resetTo,omitempty"`
	// Format is "raw" (the default: the columns key, value, topic,
	// partition, offset and timestamp) or "json" (the value is a JSON
	// object decoded into Fields, followed by MetadataColumns).
	Format string `json:"format,omitempty"`
	// Fields are the JSON keys read by format json, each {name, type}
	// with type int64, float64, string, bool or timestamp (RFC 3339 or
	// Unix ms). A missing key or JSON null gives null; other keys are
	// ignored.
	Fields []Field `json:"fields,omitempty"`
	// MetadataColumns appends, with format json, record metadata after
	// the fields, in the order given: any of "key" (string), "topic"
	// (string), "partition" (int64), "offset" (int64) and "timestamp"
	// (timestamp, the record's Kafka timestamp).
	MetadataColumns []string `json:"metadataColumns,omitempty"`
	// PartitionDiscoveryInterval is how often the source looks for new
	// partitions and topics (a duration; default 30s; 0 turns discovery
	// off, and partitions are then found only when a subtask opens).
	PartitionDiscoveryInterval string `json:"partitionDiscoveryInterval,omitempty"`
	// Watermark, when set, makes the source emit per-partition
	// watermarks and set each record's event time.
	Watermark *WatermarkConfig `json:"watermark,omitempty"`
	// BatchSize is the most records per batch (default
	// stream.DefaultBatchSize, at most 1048576).
	BatchSize int `json:"batchSize,omitempty"`
	// MaxMessageBytes is the size limit of one record, key plus value
	// plus headers, in bytes (default 1 MiB, at most 64 MiB). A larger
	// record fails the task.
	MaxMessageBytes int `json:"maxMessageBytes,omitempty"`
	// StopAtEnd makes the source bounded: each partition is read up to
	// the end of its committed records when the job starts, then the
	// source ends. Partition discovery is off.
	StopAtEnd bool `json:"stopAtEnd,omitempty"`
	// EndOffsets "latest" is StopAtEnd; "" (the default) reads forever.
	EndOffsets string `json:"endOffsets,omitempty"`
	// Security configures TLS and SASL.
	Security *SecurityConfig `json:"security,omitempty"`
}

// Field is a declared JSON field of the source's json format.
type Field struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

// WatermarkConfig configures the source's per-partition watermarks.
type WatermarkConfig struct {
	// Field is the timestamp (or int64 milliseconds) column that holds a
	// record's event time; empty means the record's Kafka timestamp.
	Field string `json:"field,omitempty"`
	// MaxOutOfOrderness is how far records may lag the largest event
	// time of their partition (a duration; default 0).
	MaxOutOfOrderness string `json:"maxOutOfOrderness,omitempty"`
	// IdleTimeout marks a partition idle after this much processing time
	// without records (a duration; default 0: never idle).
	IdleTimeout string `json:"idleTimeout,omitempty"`
}

// SecurityConfig holds the TLS and SASL settings of a connection.
type SecurityConfig struct {
	// TLS, when set (even to {}), connects with TLS; {} verifies the
	// brokers against the system's roots.
	TLS *TLSConfig `json:"tls,omitempty"`
	// SASL, when set, authenticates with SASL (over TLS if TLS is set).
	SASL *SASLConfig `json:"sasl,omitempty"`
}

// TLSConfig holds TLS files, PEM-encoded. The paths are absolute and must
// pass the cluster's path policy.
type TLSConfig struct {
	// CAFile verifies the brokers' certificates (default: system roots).
	CAFile string `json:"caFile,omitempty"`
	// CertFile and KeyFile are a client certificate and its key, both or
	// neither.
	CertFile string `json:"certFile,omitempty"`
	KeyFile  string `json:"keyFile,omitempty"`
	// ServerName overrides the name checked in the brokers' certificates.
	ServerName string `json:"serverName,omitempty"`
}

// SASLConfig holds SASL credentials.
type SASLConfig struct {
	// Mechanism is PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.
	Mechanism string `json:"mechanism"`
	Username  string `json:"username"`
	// PasswordFile is a file holding the password (one trailing newline
	// is dropped); Password is the password itself, which then sits in
	// the job's config: prefer PasswordFile. Exactly one is required.
	PasswordFile string `json:"passwordFile,omitempty"`
	Password     string `json:"password,omitempty"`
}

// SinkConfig is the JSON config of the "kafka" sink.
//
// TransactionTimeout must exceed the job's checkpoint interval, with room to
// spare: with exactly_once, a transaction is open from its first row until
// the checkpoint after it completes, that is up to one checkpoint interval
// plus the checkpoint's own duration (several intervals when checkpoints
// abort meanwhile: the transactions then wait for the next one to
// complete), and after a failure until the restored job commits it. The brokers abort a transaction older than its
// timeout; its rows are then lost, and the commit fails the job loudly
// rather than silently. The brokers refuse timeouts above their
// transaction.max.timeout.ms (default 15 minutes).
type SinkConfig struct {
	// BootstrapServers are host:port addresses of brokers. Required.
	BootstrapServers []string `json:"bootstrapServers"`
	// Topic is the topic written; it must exist when a subtask opens.
	// Required.
	Topic string `json:"topic"`
	// KeyField is the column whose value is each record's key (strings
	// as they are, other types as their text: decimal numbers, true or
	// false, RFC 3339 timestamps); a null is no key. Empty: no keys, and
	// records are spread over the partitions.
	KeyField string `json:"keyField,omitempty"`
	// Format is "json" (the default: the value is the row as a JSON
	// object) or "raw" (the value is the string column ValueField; a null
	// is a tombstone, no value).
	Format     string `json:"format,omitempty"`
	ValueField string `json:"valueField,omitempty"`
	// DeliveryGuarantee is "exactly_once" (the default when the job
	// checkpoints: Kafka transactions committed when checkpoints
	// complete), "at_least_once" (the default otherwise: an idempotent
	// producer flushed at every checkpoint and at the end of input;
	// duplicates after a failure) or "none" (flushed only at the end of
	// input). exactly_once in a job without checkpoints writes one
	// transaction committed at the end of input.
	DeliveryGuarantee string `json:"deliveryGuarantee,omitempty"`
	// TransactionTimeout is the transaction timeout (a duration; default
	// 15m); see the type's comment.
	TransactionTimeout string `json:"transactionTimeout,omitempty"`
	// TransactionalIDPrefix starts every transactional id of the sink
	// (default: weir.<job>.<uid>, from the job id and operator uid). Two
	// sinks, or two jobs, must never share it.
	TransactionalIDPrefix string `json:"transactionalIdPrefix,omitempty"`
	// MaxMessageBytes is the size limit of one record, key plus value, in
	// bytes (default 1 MiB, at most 64 MiB). A larger row fails the task.
	MaxMessageBytes int `json:"maxMessageBytes,omitempty"`
	// Security configures TLS and SASL.
	Security *SecurityConfig `json:"security,omitempty"`
}

// Delivery guarantees of the sink.
const (
	ExactlyOnce = "exactly_once"
	AtLeastOnce = "at_least_once"
	NoGuarantee = "none"
)

// Start positions of the source.
const (
	StartEarliest     = "earliest"
	StartLatest       = "latest"
	StartTimestamp    = "timestamp"
	StartGroupOffsets = "groupOffsets"
)

// Metadata columns of the source.
const (
	ColKey       = "key"
	ColValue     = "value"
	ColTopic     = "topic"
	ColPartition = "partition"
	ColOffset    = "offset"
	ColTimestamp = "timestamp"
)

var metadataTypes = map[string]stream.Type{
	ColKey:       stream.TypeString,
	ColTopic:     stream.TypeString,
	ColPartition: stream.TypeInt64,
	ColOffset:    stream.TypeInt64,
	ColTimestamp: stream.TypeTimestamp,
}

// RawSchema is the source's schema for format raw.
var RawSchema = stream.MustSchema(
	stream.Field{Name: ColKey, Type: stream.TypeString},
	stream.Field{Name: ColValue, Type: stream.TypeString},
	stream.Field{Name: ColTopic, Type: stream.TypeString},
	stream.Field{Name: ColPartition, Type: stream.TypeInt64},
	stream.Field{Name: ColOffset, Type: stream.TypeInt64},
	stream.Field{Name: ColTimestamp, Type: stream.TypeTimestamp},
)

// Validate reports the first invalid setting of c, as the source's Plan
// does; it reads no file and contacts no broker.
func (c SourceConfig) Validate() error {
	_, err := c.spec()
	return err
}

// Validate reports the first invalid setting of c that does not depend on
// the input schema, as the sink's Plan does; it reads no file and contacts
// no broker.
func (c SinkConfig) Validate() error {
	_, err := c.spec()
	return err
}

// sourceSpec is a validated SourceConfig.
type sourceSpec struct {
	cfg       SourceConfig
	servers   []string
	topics    []string       // explicit topics, sorted; nil with a pattern
	pattern   *regexp.Regexp // anchored; nil with explicit topics
	startFrom string
	startTs   int64 // startFrom timestamp, Unix ms
	resetTo   string
	schema    *stream.Schema
	json      bool
	nfields   int      // JSON fields, the first columns
	meta      []string // metadata columns after them (json)
	discovery time.Duration
	bounded   bool
	batch     int
	maxBytes  int
	// watermarks: wmCol is the event-time column, -1 for the record
	// timestamp; ooo and idle are milliseconds.
	watermarks bool
	wmCol      int
	ooo, idle  int64
}

// errSource returns a config error of the source.
func errSource(format string, args ...any) error {
	return stream.ConfigErrorf("kafka source: "+format, args...)
}

func errSink(format string, args ...any) error {
	return stream.ConfigErrorf("kafka sink: "+format, args...)
}

// parseSourceConfig decodes and validates a source config. It touches no
// file and no network.
func parseSourceConfig(config []byte) (*sourceSpec, error) {
	var cfg SourceConfig
	if err := stream.DecodeOperatorConfig("kafka source", config, &cfg); err != nil {
		return nil, err
	}
	return cfg.spec()
}

func (cfg SourceConfig) spec() (*sourceSpec, error) {
	s := &sourceSpec{cfg: cfg, wmCol: -1}
	var err error
	if s.servers, err = checkServers(cfg.BootstrapServers, errSource); err != nil {
		return nil, err
	}
	switch {
	case len(cfg.Topics) > 0 && cfg.TopicPattern != "":
		return nil, errSource("both topics and topicPattern are set; set exactly one: topics lists the topics to read, topicPattern matches their names")
	case len(cfg.Topics) == 0 && cfg.TopicPattern == "":
		return nil, errSource("missing topics; set topics (a list of topic names) or topicPattern (a regular expression matching whole topic names)")
	case len(cfg.Topics) > maxTopics:
		return nil, errSource("topics lists %d topics; the limit is %d (use topicPattern for more)", len(cfg.Topics), maxTopics)
	case len(cfg.Topics) > 0:
		seen := make(map[string]bool)
		for i, t := range cfg.Topics {
			if err := checkTopic(t); err != nil {
				return nil, errSource("topics[%d]: %v", i, err)
			}
			if !seen[t] {
				seen[t] = true
				s.topics = append(s.topics, t)
			}
		}
		slices.Sort(s.topics)
	default:
		if len(cfg.TopicPattern) > 1000 {
			return nil, errSource("topicPattern is %d bytes; the limit is 1000", len(cfg.TopicPattern))
		}
		re, err := regexp.Compile("^(?:" + cfg.TopicPattern + ")$")
		if err != nil {
			return nil, errSource("topicPattern %q: %v; give a regular expression in RE2 syntax matching whole topic names, such as orders-.*", cfg.TopicPattern, err)
		}
		s.pattern = re
	}

	switch cfg.EndOffsets {
	case "":
	case "latest":
		s.bounded = true
	default:
		return nil, errSource("endOffsets %q: unknown (want latest, or leave it unset to read forever)", cfg.EndOffsets)
	}
	s.bounded = s.bounded || cfg.StopAtEnd

	s.startFrom = cfg.StartFrom
	if s.startFrom == "" {
		s.startFrom = StartEarliest
	}
	switch s.startFrom {
	case StartEarliest, StartLatest:
	case StartTimestamp:
		if cfg.StartTimestamp == "" {
			return nil, errSource("startFrom timestamp needs startTimestamp, an RFC 3339 time such as 2024-05-01T12:00:00Z or Unix milliseconds")
		}
		if s.startTs, err = parseTimestamp(cfg.StartTimestamp); err != nil {
			return nil, errSource("startTimestamp %q: %v", cfg.StartTimestamp, err)
		}
	case StartGroupOffsets:
		if cfg.Group == "" {
			return nil, errSource("startFrom groupOffsets needs group, the consumer group whose committed offsets to start from")
		}
	default:
		return nil, errSource("startFrom %q: unknown (want earliest, latest, timestamp or groupOffsets)", cfg.StartFrom)
	}
	if cfg.StartTimestamp != "" && s.startFrom != StartTimestamp {
		return nil, errSource("startTimestamp is set but startFrom is %s; set startFrom: timestamp to use it", s.startFrom)
	}
	s.resetTo = cfg.ResetTo
	switch {
	case s.resetTo != "" && s.startFrom != StartGroupOffsets:
		return nil, errSource("resetTo is set but startFrom is %s; resetTo applies to startFrom groupOffsets only", s.startFrom)
	case s.resetTo == "":
		s.resetTo = StartEarliest
	case s.resetTo != StartEarliest && s.resetTo != StartLatest:
		return nil, errSource("resetTo %q: unknown (want earliest or latest)", cfg.ResetTo)
	}
	if err := checkGroup(cfg.Group); err != nil {
		return nil, errSource("group: %v", err)
	}

	if s.schema, err = cfg.schema(s); err != nil {
		return nil, err
	}

	s.discovery = DefaultDiscoveryInterval
	if cfg.PartitionDiscoveryInterval != "" {
		if s.discovery, err = parseDuration(cfg.PartitionDiscoveryInterval); err != nil {
			return nil, errSource("partitionDiscoveryInterval: %v (0 turns discovery off)", err)
		}
		if s.discovery > 0 && s.discovery < 10*time.Millisecond {
			return nil, errSource("partitionDiscoveryInterval %s: must be at least 10ms, or 0 to turn discovery off", cfg.PartitionDiscoveryInterval)
		}
	}
	if s.bounded {
		if cfg.PartitionDiscoveryInterval != "" && s.discovery > 0 {
			return nil, errSource("partitionDiscoveryInterval is set, but a bounded source (stopAtEnd or endOffsets latest) reads only the partitions that exist when it starts; remove one of them")
		}
		s.discovery = 0
	}

	switch {
	case cfg.BatchSize < 0 || cfg.BatchSize > MaxBatchSize:
		return nil, errSource("batchSize %d: must be between 1 and %d (0 or unset means %d)", cfg.BatchSize, MaxBatchSize, stream.DefaultBatchSize)
	case cfg.BatchSize == 0:
		s.batch = stream.DefaultBatchSize
	default:
		s.batch = cfg.BatchSize
	}
	if s.maxBytes, err = checkMaxBytes(cfg.MaxMessageBytes, errSource); err != nil {
		return nil, err
	}
	if err := cfg.Security.check(errSource); err != nil {
		return nil, err
	}

	if w := cfg.Watermark; w != nil {
		s.watermarks = true
		if w.Field != "" {
			s.wmCol = s.schema.Index(w.Field)
			if s.wmCol < 0 {
				return nil, errSource("watermark field %q: no such column (the source has %s); leave it empty to use the record timestamp", w.Field, strings.Join(s.schema.Names(), ", "))
			}
			if t := s.schema.Fields[s.wmCol].Type; t != stream.TypeTimestamp && t != stream.TypeInt64 {
				return nil, errSource("watermark field %q is %s; an event time must be a timestamp or int64 milliseconds", w.Field, t)
			}
		}
		if w.MaxOutOfOrderness != "" {
			d, err := parseDuration(w.MaxOutOfOrderness)
			if err != nil {
				return nil, errSource("watermark maxOutOfOrderness: %v", err)
			}
			s.ooo = d.Milliseconds()
		}
		if w.IdleTimeout != "" {
			d, err := parseDuration(w.IdleTimeout)
			if err != nil {
				return nil, errSource("watermark idleTimeout: %v (0 means never idle)", err)
			}
			s.idle = d.Milliseconds()
		}
	}
	return s, nil
}

// schema returns the output schema and records the json layout in s.
func (cfg SourceConfig) schema(s *sourceSpec) (*stream.Schema, error) {
	switch cfg.Format {
	case "", "raw":
		if len(cfg.Fields) > 0 || len(cfg.MetadataColumns) > 0 {
			return nil, errSource("fields and metadataColumns need format json; format raw has the fixed columns key, value, topic, partition, offset and timestamp")
		}
		return RawSchema, nil
	case "json":
	default:
		return nil, errSource("format %q: unknown (want raw or json)", cfg.Format)
	}
	s.json = true
	if len(cfg.Fields) == 0 {
		return nil, errSource("format json needs fields, a list of {name, type} naming the JSON keys to read")
	}
	var fields []stream.Field
	for i, f := range cfg.Fields {
		if f.Name == "" {
			return nil, errSource("fields[%d]: missing name", i)
		}
		if f.Type == "" {
			return nil, errSource("field %q: missing type (want int64, float64, string, bool or timestamp)", f.Name)
		}
		t, err := stream.ParseType(f.Type)
		if err != nil {
			return nil, errSource("field %q: %v", f.Name, err)
		}
		fields = append(fields, stream.Field{Name: f.Name, Type: t})
	}
	s.nfields = len(fields)
	for _, m := range cfg.MetadataColumns {
		t, ok := metadataTypes[m]
		if !ok {
			return nil, errSource("metadataColumns: unknown column %q (want key, topic, partition, offset or timestamp)", m)
		}
		fields = append(fields, stream.Field{Name: m, Type: t})
		s.meta = append(s.meta, m)
	}
	schema, err := stream.NewSchema(fields...)
	if err != nil {
		return nil, errSource("fields and metadataColumns: %v; column names must be unique", err)
	}
	return schema, nil
}

// sinkSpec is a validated SinkConfig.
type sinkSpec struct {
	cfg       SinkConfig
	servers   []string
	raw       bool
	guarantee string // "" means: by checkpointing
	txTimeout time.Duration
	maxBytes  int
}

func parseSinkConfig(config []byte) (*sinkSpec, error) {
	var cfg SinkConfig
	if err := stream.DecodeOperatorConfig("kafka sink", config, &cfg); err != nil {
		return nil, err
	}
	return cfg.spec()
}

func (cfg SinkConfig) spec() (*sinkSpec, error) {
	s := &sinkSpec{cfg: cfg}
	var err error
	if s.servers, err = checkServers(cfg.BootstrapServers, errSink); err != nil {
		return nil, err
	}
	if cfg.Topic == "" {
		return nil, errSink("missing topic; set topic to the name of an existing topic")
	}
	if err := checkTopic(cfg.Topic); err != nil {
		return nil, errSink("topic: %v", err)
	}
	switch cfg.Format {
	case "", "json":
		if cfg.ValueField != "" {
			return nil, errSink("valueField is set but format is json, which writes the whole row; set format: raw to write one string column as the value")
		}
	case "raw":
		s.raw = true
		if cfg.ValueField == "" {
			return nil, errSink("format raw needs valueField, the string column written as each record's value")
		}
	default:
		return nil, errSink("format %q: unknown (want json or raw)", cfg.Format)
	}
	switch cfg.DeliveryGuarantee {
	case "", ExactlyOnce, AtLeastOnce, NoGuarantee:
		s.guarantee = cfg.DeliveryGuarantee
	default:
		return nil, errSink("deliveryGuarantee %q: unknown (want exactly_once, at_least_once or none)", cfg.DeliveryGuarantee)
	}
	s.txTimeout = DefaultTransactionTimeout
	if cfg.TransactionTimeout != "" {
		if s.txTimeout, err = parseDuration(cfg.TransactionTimeout); err != nil {
			return nil, errSink("transactionTimeout: %v", err)
		}
		if s.txTimeout < time.Second || s.txTimeout > 24*time.Hour {
			return nil, errSink("transactionTimeout %s: must be between 1s and 24h, and more than the job's checkpoint interval", cfg.TransactionTimeout)
		}
	}
	if p := cfg.TransactionalIDPrefix; p != "" {
		if len(p) > maxPrefixLen || !validName(p) {
			return nil, errSink("transactionalIdPrefix %q: want 1 to %d ASCII letters, digits, '.', '_' or '-'", p, maxPrefixLen)
		}
	}
	if s.maxBytes, err = checkMaxBytes(cfg.MaxMessageBytes, errSink); err != nil {
		return nil, err
	}
	if err := cfg.Security.check(errSink); err != nil {
		return nil, err
	}
	return s, nil
}

// resolve checks the sink config against its input schema.
func (s *sinkSpec) resolve(in *stream.Schema) (keyCol, valueCol int, err error) {
	keyCol, valueCol = -1, -1
	if s.cfg.KeyField != "" {
		if keyCol = in.Index(s.cfg.KeyField); keyCol < 0 {
			return 0, 0, errSink("keyField %q: no such column (the input has %s)", s.cfg.KeyField, strings.Join(in.Names(), ", "))
		}
	}
	if s.raw {
		if valueCol = in.Index(s.cfg.ValueField); valueCol < 0 {
			return 0, 0, errSink("valueField %q: no such column (the input has %s)", s.cfg.ValueField, strings.Join(in.Names(), ", "))
		}
		if t := in.Fields[valueCol].Type; t != stream.TypeString {
			return 0, 0, errSink("valueField %q is %s; format raw writes a string column (use format json, or convert it with a map)", s.cfg.ValueField, t)
		}
	}
	return keyCol, valueCol, nil
}

func checkServers(servers []string, errf func(string, ...any) error) ([]string, error) {
	if len(servers) == 0 {
		return nil, errf("missing bootstrapServers; set it to a list of broker addresses such as [\"kafka-1:9092\", \"kafka-2:9092\"]")
	}
	if len(servers) > maxServers {
		return nil, errf("bootstrapServers lists %d addresses; the limit is %d", len(servers), maxServers)
	}
	for i, s := range servers {
		host, port, err := net.SplitHostPort(s)
		if err == nil && host == "" {
			err = fmt.Errorf("missing host")
		}
		if err == nil {
			if n, perr := strconv.Atoi(port); perr != nil || n < 1 || n > 65535 {
				err = fmt.Errorf("port %q is not a number between 1 and 65535", port)
			}
		}
		if err != nil {
			return nil, errf("bootstrapServers[%d] %q: %v; want host:port, such as kafka-1:9092", i, s, err)
		}
	}
	return append([]string(nil), servers...), nil
}

// checkTopic checks a topic name as the brokers do.
func checkTopic(t string) error {
	switch {
	case t == "":
		return fmt.Errorf("empty topic name")
	case len(t) > maxTopicLength:
		return fmt.Errorf("topic name of %d bytes; the limit is %d", len(t), maxTopicLength)
	case t == "." || t == "..":
		return fmt.Errorf("topic %q is not a valid name", t)
	case !validName(t):
		return fmt.Errorf("topic %q: a topic name has only ASCII letters, digits, '.', '_' and '-'", t)
	}
	return nil
}

func checkGroup(g string) error {
	if len(g) > maxTopicLength {
		return fmt.Errorf("%d bytes; the limit is %d", len(g), maxTopicLength)
	}
	for i := 0; i < len(g); i++ {
		if g[i] < 0x20 || g[i] > 0x7e {
			return fmt.Errorf("%q holds a character that is not printable ASCII", g)
		}
	}
	return nil
}

func validName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return s != ""
}

func checkMaxBytes(n int, errf func(string, ...any) error) (int, error) {
	switch {
	case n < 0 || n > MaxMaxMessageBytes:
		return 0, errf("maxMessageBytes %d: must be between 1 and %d (0 or unset means %d)", n, MaxMaxMessageBytes, DefaultMaxMessageBytes)
	case n == 0:
		return DefaultMaxMessageBytes, nil
	}
	return n, nil
}

func (c *SecurityConfig) check(errf func(string, ...any) error) error {
	if c == nil {
		return nil
	}
	if t := c.TLS; t != nil {
		if (t.CertFile == "") != (t.KeyFile == "") {
			return errf("security tls: certFile and keyFile go together; set both for a client certificate, or neither")
		}
	}
	if s := c.SASL; s != nil {
		switch s.Mechanism {
		case "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512":
		case "":
			return errf("security sasl: missing mechanism (want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)")
		default:
			return errf("security sasl: mechanism %q: unknown (want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)", s.Mechanism)
		}
		if s.Username == "" {
			return errf("security sasl: missing username")
		}
		if (s.Password == "") == (s.PasswordFile == "") {
			return errf("security sasl: set exactly one of passwordFile (a file holding the password; preferred) and password")
		}
	}
	return nil
}

// checkPaths checks the files of c against the path policy.
func (c *SecurityConfig) checkPaths(op string, paths *stream.PathPolicy) error {
	if c == nil {
		return nil
	}
	check := func(what, path string) error {
		if path == "" {
			return nil
		}
		return paths.Check(op+" "+what, path)
	}
	if t := c.TLS; t != nil {
		for _, f := range []struct{ what, path string }{{"tls caFile", t.CAFile}, {"tls certFile", t.CertFile}, {"tls keyFile", t.KeyFile}} {
			if err := check(f.what, f.path); err != nil {
				return err
			}
		}
	}
	if s := c.SASL; s != nil {
		if err := check("sasl passwordFile", s.PasswordFile); err != nil {
			return err
		}
	}
	return nil
}

func parseDuration(s string) (time.Duration, error) {
	if s == "0" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration such as 500ms, 30s or 5m", s)
	}
	if d < 0 {
		return 0, fmt.Errorf("%s: must not be negative", s)
	}
	return d, nil
}

// parseTimestamp parses RFC 3339 or Unix milliseconds.
func parseTimestamp(s string) (int64, error) {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n < 0 {
			return 0, fmt.Errorf("Unix milliseconds must not be negative")
		}
		return n, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return 0, fmt.Errorf("want an RFC 3339 time such as 2024-05-01T12:00:00Z or Unix milliseconds")
	}
	ms := t.UnixMilli()
	if ms < 0 || ms == math.MaxInt64 {
		return 0, fmt.Errorf("time before 1970 or out of range")
	}
	return ms, nil
}
