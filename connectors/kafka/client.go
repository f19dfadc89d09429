package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/weirstream/weir/internal/clienttls"
	"github.com/weirstream/weir/internal/limitedfile"
	"github.com/weirstream/weir/stream"
)

// Errors of the connector. They are wrapped with %w in errors that say
// which topic, partition or transaction they concern.
var (
	// ErrUnreachable: no broker of the cluster answered.
	ErrUnreachable = errors.New("kafka: cluster unreachable")
	// ErrTopicNotFound: a configured topic does not exist.
	ErrTopicNotFound = errors.New("kafka: topic not found")
	// ErrRecordTooLarge: a record is over maxMessageBytes.
	ErrRecordTooLarge = errors.New("kafka: record too large")
	// ErrTransactionLost: a pre-committed transaction can no longer be
	// committed; its records are lost.
	ErrTransactionLost = errors.New("kafka: pre-committed transaction lost")
)

// connectTimeout bounds how long Open waits for the cluster to answer
// before it fails the task.
const connectTimeout = 20 * time.Second

// maxPasswordFile bounds the password file read.
const maxPasswordFile = 64 << 10

// commonOpts returns the client options shared by every client of the
// connector: the seed brokers, TLS, SASL, a logger and hook, which keeps
// the last connection error. It reads the TLS and password files, which
// must pass paths.
func commonOpts(op string, servers []string, sec *SecurityConfig, paths *stream.PathPolicy, logger *slog.Logger, hook *connHook) ([]kgo.Opt, error) {
	opts := []kgo.Opt{
		kgo.SeedBrokers(servers...),
		kgo.ClientID("weir"),
		kgo.WithLogger(kgoLogger{logger}),
		kgo.WithHooks(hook),
	}
	if sec == nil {
		return opts, nil
	}
	if err := sec.checkPaths(op, paths); err != nil {
		return nil, err
	}
	if t := sec.TLS; t != nil {
		cfg, err := clienttls.FromFiles(t.CAFile, t.CertFile, t.KeyFile, t.ServerName)
		if err != nil {
			return nil, fmt.Errorf("%s: tls %w", op, err) // "tls caFile ...": the error names the config key
		}
		opts = append(opts, kgo.DialTLSConfig(cfg))
	}
	if s := sec.SASL; s != nil {
		pass := s.Password
		if s.PasswordFile != "" {
			b, err := limitedfile.Read(s.PasswordFile, maxPasswordFile)
			if err != nil {
				return nil, fmt.Errorf("%s: sasl passwordFile: %w", op, err)
			}
			pass = strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
		}
		switch s.Mechanism {
		case "PLAIN":
			opts = append(opts, kgo.SASL(plain.Auth{User: s.Username, Pass: pass}.AsMechanism()))
		case "SCRAM-SHA-256":
			opts = append(opts, kgo.SASL(scram.Auth{User: s.Username, Pass: pass}.AsSha256Mechanism()))
		case "SCRAM-SHA-512":
			opts = append(opts, kgo.SASL(scram.Auth{User: s.Username, Pass: pass}.AsSha512Mechanism()))
		}
		if sec.TLS == nil {
			logger.Warn(op + ": SASL without TLS sends credentials over plain TCP; set security.tls unless the network is trusted")
		}
	}
	return opts, nil
}

// unreachable is the error of a task whose cluster does not answer: err
// is the request's error, and the last connection error, if any, says why.
func unreachable(op string, servers []string, err error, hook *connHook) error {
	why := err.Error()
	if last := hook.last(); last != nil && last.Error() != why {
		why += "; last connection error: " + last.Error()
	}
	return fmt.Errorf("%s: cannot reach the Kafka cluster at %s: %w (%s); check bootstrapServers, that the brokers run and are reachable from this taskmanager, and the security settings",
		op, strings.Join(servers, ","), ErrUnreachable, why)
}

// connHook remembers the last error of a client's connection attempts
// (a refused dial, a TLS or SASL failure), which a request that merely
// timed out does not tell.
type connHook struct {
	mu  sync.Mutex
	err error
}

var _ kgo.HookBrokerConnect = (*connHook)(nil)

func (h *connHook) OnBrokerConnect(_ kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.err = err
}

func (h *connHook) last() error {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

// kgoLogger passes the Kafka client's warnings and errors to the task's
// logger. The client never logs record contents or passwords.
type kgoLogger struct{ l *slog.Logger }

func (k kgoLogger) Level() kgo.LogLevel {
	if k.l == nil {
		return kgo.LogLevelNone
	}
	return kgo.LogLevelWarn
}

func (k kgoLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	l := slog.LevelWarn
	if level == kgo.LogLevelError {
		l = slog.LevelError
	}
	k.l.Log(context.Background(), l, "kafka client: "+msg, keyvals...)
}

// taskLogger returns octx's logger, or a discarding one.
func taskLogger(octx *stream.OperatorContext) *slog.Logger {
	if octx != nil && octx.Logger != nil {
		return octx.Logger
	}
	return slog.New(slog.DiscardHandler)
}
