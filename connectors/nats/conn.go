package nats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirstream/weir/internal/clienttls"
	"github.com/weirstream/weir/internal/limitedfile"
	"github.com/weirstream/weir/stream"
)

// ConnConfig says how a connector reaches NATS. The source and sink
// configs embed it, so its keys sit at the top level of their JSON.
//
// At most one way to authenticate may be given: credsFile, nkeyFile,
// token (or tokenFile), user with password (or passwordFile), or a user
// and password in the URL. Every file is checked against the path policy
// (OperatorContext.Paths) at planning and again in the taskmanager.
type ConnConfig struct {
	// URL is the server, or several separated by commas:
	// nats://host:4222 (the scheme defaults to nats://; tls:// asks for
	// TLS; ws:// and wss:// use WebSockets). Give URL or URLs, not both.
	URL string `json:"url,omitempty"`
	// URLs are the servers as a list; the client connects to one and
	// fails over to the others.
	URLs []string `json:"urls,omitempty"`
	// CredsFile is a NATS credentials file (a user JWT and its nkey seed).
	CredsFile string `json:"credsFile,omitempty"`
	// NkeyFile is a file holding a user nkey seed.
	NkeyFile string `json:"nkeyFile,omitempty"`
	// Token is an authentication token. Anyone who can read the job's
	// config can read it: prefer TokenFile.
	Token string `json:"token,omitempty"`
	// TokenFile is a file holding the token (one trailing newline is
	// dropped).
	TokenFile string `json:"tokenFile,omitempty"`
	// User and Password authenticate with a user name and password.
	// Prefer PasswordFile to Password, which the job's config shows.
	User     string `json:"user,omitempty"`
	Password string `json:"password,omitempty"`
	// PasswordFile is a file holding the password (one trailing newline
	// is dropped).
	PasswordFile string `json:"passwordFile,omitempty"`
	// TLS, when set, makes the connection use TLS.
	TLS *TLSConfig `json:"tls,omitempty"`
	// ConnectTimeout bounds the dial and handshake with one server, as a
	// duration string; default "5s".
	ConnectTimeout string `json:"connectTimeout,omitempty"`
}

// TLSConfig configures TLS to the servers. Without CAFile the system's
// roots verify the server; CertFile and KeyFile, given together, are the
// client certificate.
type TLSConfig struct {
	CAFile   string `json:"caFile,omitempty"`
	CertFile string `json:"certFile,omitempty"`
	KeyFile  string `json:"keyFile,omitempty"`
}

const (
	defaultConnectTimeout = 5 * time.Second
	// reconnectWait and maxReconnects bound how long a connection that
	// dropped keeps trying before it closes and the connector fails its
	// task: about maxReconnects × reconnectWait per server.
	reconnectWait = 500 * time.Millisecond
	maxReconnects = 60
	// maxSecretFileBytes bounds a token or password file.
	maxSecretFileBytes = 64 << 10
	// requestTimeout bounds one JetStream API request (stream info,
	// consumer creation).
	requestTimeout = 10 * time.Second
)

// connSpec is a checked ConnConfig.
type connSpec struct {
	servers        []string // as given, a scheme added where missing
	redacted       string   // the servers without passwords, for messages
	urlAuth        bool     // a URL carries a user
	connectTimeout time.Duration
	maxReconnects  int // tests lower it
}

// check validates cfg for operator op ("nats source", "nats sink") and
// checks its files against paths.
func (cfg *ConnConfig) check(op string, paths *stream.PathPolicy) (*connSpec, error) {
	raw := cfg.URLs
	switch {
	case cfg.URL != "" && len(cfg.URLs) > 0:
		return nil, stream.ConfigErrorf("%s: give url or urls, not both", op)
	case cfg.URL != "":
		raw = strings.Split(cfg.URL, ",")
	case len(cfg.URLs) == 0:
		return nil, stream.ConfigErrorf("%s: missing url; set url to the NATS server, such as nats://127.0.0.1:4222 (or urls to a list of servers)", op)
	}
	if len(raw) > 64 {
		return nil, stream.ConfigErrorf("%s: %d server URLs; at most 64 are allowed", op, len(raw))
	}
	spec := &connSpec{connectTimeout: defaultConnectTimeout, maxReconnects: maxReconnects}
	var shown []string
	for i, s := range raw {
		s = strings.TrimSpace(s)
		if s == "" {
			return nil, stream.ConfigErrorf("%s: url %d is empty; give nats://host:port", op, i+1)
		}
		if !strings.Contains(s, "://") {
			s = "nats://" + s
		}
		u, err := url.Parse(s)
		if err != nil {
			return nil, stream.ConfigErrorf("%s: url %d is not a URL; give nats://host:port", op, i+1)
		}
		switch u.Scheme {
		case "nats", "tls", "ws", "wss":
		default:
			return nil, stream.ConfigErrorf("%s: url %s: unknown scheme %q (want nats, tls, ws or wss)", op, u.Redacted(), u.Scheme)
		}
		if u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
			return nil, stream.ConfigErrorf("%s: url %s: want scheme://host:port and nothing else", op, u.Redacted())
		}
		if u.User != nil {
			spec.urlAuth = true
		}
		spec.servers = append(spec.servers, s)
		shown = append(shown, u.Redacted())
	}
	spec.redacted = strings.Join(shown, ",")

	ways := 0
	for _, set := range []bool{cfg.CredsFile != "", cfg.NkeyFile != "", cfg.Token != "" || cfg.TokenFile != "", cfg.User != "", spec.urlAuth} {
		if set {
			ways++
		}
	}
	switch {
	case ways > 1:
		return nil, stream.ConfigErrorf("%s: give one way to authenticate: credsFile, nkeyFile, token (or tokenFile), user with password (or passwordFile), or a user in the url", op)
	case cfg.Token != "" && cfg.TokenFile != "":
		return nil, stream.ConfigErrorf("%s: give token or tokenFile, not both", op)
	case cfg.Password != "" && cfg.PasswordFile != "":
		return nil, stream.ConfigErrorf("%s: give password or passwordFile, not both", op)
	case (cfg.Password != "" || cfg.PasswordFile != "") && cfg.User == "":
		return nil, stream.ConfigErrorf("%s: a password needs a user; set user", op)
	}
	if cfg.ConnectTimeout != "" {
		d, err := time.ParseDuration(cfg.ConnectTimeout)
		if err != nil || d <= 0 || d > 10*time.Minute {
			return nil, stream.ConfigErrorf("%s: connectTimeout %q: want a duration between 1ms and 10m, such as \"5s\"", op, cfg.ConnectTimeout)
		}
		spec.connectTimeout = d
	}
	if t := cfg.TLS; t != nil && (t.CertFile == "") != (t.KeyFile == "") {
		return nil, stream.ConfigErrorf("%s: tls: give certFile and keyFile together (the client certificate and its key), or neither", op)
	}
	for _, f := range cfg.files() {
		if err := paths.Check(op+" "+f.what, f.path); err != nil {
			return nil, err
		}
	}
	return spec, nil
}

type namedFile struct{ what, path string }

// files returns the files cfg names, with their option names.
func (cfg *ConnConfig) files() []namedFile {
	var out []namedFile
	add := func(what, path string) {
		if path != "" {
			out = append(out, namedFile{what, path})
		}
	}
	add("credsFile", cfg.CredsFile)
	add("nkeyFile", cfg.NkeyFile)
	add("tokenFile", cfg.TokenFile)
	add("passwordFile", cfg.PasswordFile)
	if t := cfg.TLS; t != nil {
		add("tls caFile", t.CAFile)
		add("tls certFile", t.CertFile)
		add("tls keyFile", t.KeyFile)
	}
	return out
}

// connection is an open NATS connection with its JetStream context.
type connection struct {
	nc    *natsgo.Conn
	js    jetstream.JetStream
	where string // the servers, without passwords
}

// dial connects to NATS for the operator op of the task octx. jsOpts
// configure the JetStream context (the sink's asynchronous publishing).
// It fails with one error naming the servers and the fix when no server
// can be reached.
func dial(op string, cfg *ConnConfig, spec *connSpec, octx *stream.OperatorContext, log *slog.Logger, jsOpts ...jetstream.JetStreamOpt) (*connection, error) {
	for _, f := range cfg.files() {
		if err := octx.Paths.Check(op+" "+f.what, f.path); err != nil {
			return nil, err
		}
		if _, err := os.Stat(f.path); err != nil {
			return nil, fmt.Errorf("%s: %s: %w; give a readable file", op, f.what, err)
		}
	}
	opts := []natsgo.Option{
		natsgo.Name(fmt.Sprintf("weir %s %s/%s subtask %d", op, octx.JobID, octx.OperatorUID, octx.Subtask)),
		natsgo.Timeout(spec.connectTimeout),
		natsgo.ReconnectWait(reconnectWait),
		natsgo.MaxReconnects(spec.maxReconnects),
		natsgo.NoCallbacksAfterClientClose(),
		natsgo.ErrorHandler(func(_ *natsgo.Conn, _ *natsgo.Subscription, err error) {
			log.Warn(op+": asynchronous NATS error", "error", err)
		}),
	}
	switch {
	case cfg.CredsFile != "":
		opts = append(opts, natsgo.UserCredentials(cfg.CredsFile))
	case cfg.NkeyFile != "":
		o, err := natsgo.NkeyOptionFromSeed(cfg.NkeyFile)
		if err != nil {
			return nil, fmt.Errorf("%s: nkeyFile %s: %w; give a file holding a user nkey seed", op, cfg.NkeyFile, err)
		}
		opts = append(opts, o)
	case cfg.Token != "":
		opts = append(opts, natsgo.Token(cfg.Token))
	case cfg.TokenFile != "":
		tok, err := readSecret(cfg.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("%s: tokenFile: %w", op, err)
		}
		opts = append(opts, natsgo.Token(tok))
	case cfg.User != "":
		pw := cfg.Password
		if cfg.PasswordFile != "" {
			var err error
			if pw, err = readSecret(cfg.PasswordFile); err != nil {
				return nil, fmt.Errorf("%s: passwordFile: %w", op, err)
			}
		}
		opts = append(opts, natsgo.UserInfo(cfg.User, pw))
	}
	if cfg.TLS != nil {
		tc, err := clienttls.FromFiles(cfg.TLS.CAFile, cfg.TLS.CertFile, cfg.TLS.KeyFile, "")
		if err != nil {
			return nil, fmt.Errorf("%s: tls: %w", op, err)
		}
		opts = append(opts, natsgo.Secure(tc))
	}
	nc, err := natsgo.Connect(strings.Join(spec.servers, ","), opts...)
	if err != nil {
		return nil, fmt.Errorf("%s: cannot connect to NATS at %s: %w; check that the server runs there and that url, credentials and tls are right (the job restarts by its restart strategy)",
			op, spec.redacted, err)
	}
	js, err := jetstream.New(nc, jsOpts...)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	return &connection{nc: nc, js: js, where: spec.redacted}, nil
}

// close closes the connection; it is idempotent.
func (c *connection) close() {
	if c != nil && c.nc != nil {
		c.nc.Close()
	}
}

// streamInfo returns the info of the stream called name, or an error
// that says what is wrong and how to fix it.
func (c *connection) streamInfo(ctx context.Context, op, name string) (*jetstream.StreamInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	s, err := c.js.Stream(ctx, name)
	if err != nil {
		return nil, c.explain(op, fmt.Sprintf("stream %q", name), err)
	}
	return s.CachedInfo(), nil
}

// explain turns an error of a JetStream request about what into one that
// names the server and the fix.
func (c *connection) explain(op, what string, err error) error {
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return fmt.Errorf("%s: %s not found on %s: %w; create the stream (for example with `nats stream add`) or fix the config", op, what, c.where, ErrNoStream)
	case errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount):
		return fmt.Errorf("%s: JetStream is not enabled on %s (%v); start nats-server with -js, or enable JetStream for the account", op, c.where, err)
	case errors.Is(err, natsgo.ErrConnectionClosed), errors.Is(err, natsgo.ErrDisconnected), errors.Is(err, natsgo.ErrConnectionReconnecting):
		return fmt.Errorf("%s: %s: lost the connection to NATS at %s and could not reconnect (%v); check that the server runs and is reachable (the job restarts by its restart strategy)", op, what, c.where, err)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, natsgo.ErrTimeout), errors.Is(err, natsgo.ErrNoResponders):
		return fmt.Errorf("%s: %s: NATS at %s did not answer (%v); check that JetStream runs there and is reachable", op, what, c.where, err)
	}
	return fmt.Errorf("%s: %s on %s: %w", op, what, c.where, err)
}

// readSecret reads a token or password file, dropping one trailing
// newline.
func readSecret(path string) (string, error) {
	b, err := limitedfile.Read(path, maxSecretFileBytes)
	if errors.Is(err, limitedfile.ErrTooLarge) {
		return "", fmt.Errorf("%w; it should hold one secret", err)
	}
	if err != nil {
		return "", err
	}
	s := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if s == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return s, nil
}

// checkName validates a stream name: what the server allows in one.
func checkName(op, key, name string) error {
	if name == "" {
		return stream.ConfigErrorf("%s: missing %s; name the JetStream stream", op, key)
	}
	if len(name) > 255 || strings.ContainsAny(name, " \t\r\n.*>/\\") {
		return stream.ConfigErrorf("%s: %s %q: a stream name is 1 to 255 characters without whitespace, '.', '*', '>', '/' or '\\'", op, key, name)
	}
	return nil
}

// checkSubject validates a subject (wildcards false) or a subject filter
// (wildcards true) and returns a reason when it is not one.
func checkSubject(s string, wildcards bool) string {
	if s == "" {
		return "it is empty"
	}
	if len(s) > 4096 {
		return "it is longer than 4096 bytes"
	}
	tokens := strings.Split(s, ".")
	for i, tok := range tokens {
		switch {
		case tok == "":
			return "it has an empty token (a leading, trailing or double '.')"
		case strings.ContainsAny(tok, " \t\r\n"):
			return "it contains whitespace"
		case tok == "*" || tok == ">":
			if !wildcards {
				return "it contains a wildcard ('*' or '>'); messages are published to a concrete subject"
			}
			if tok == ">" && i != len(tokens)-1 {
				return "'>' may only be the last token"
			}
		case strings.ContainsAny(tok, "*>"):
			return "a wildcard ('*' or '>') must be a whole token"
		}
	}
	return ""
}

// ErrNoStream marks the error of a connector whose JetStream stream does
// not exist (or, for the sink, of a subject that no stream captures).
var ErrNoStream = errors.New("nats: no such stream")
