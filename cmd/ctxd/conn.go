package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"

	"github.com/ctxd/ctxd/pkg/app"
	"github.com/ctxd/ctxd/pkg/client"
	"github.com/ctxd/ctxd/streams"
)

// connFlags are how a command connects to NATS, named as natscli names
// them.
type connFlags struct {
	url, context                string
	creds, nkey, user, password string
	token                       string
	tlsCert, tlsKey, tlsCA      string
	inbox                       string
	urlDefault                  string
}

// addConnFlags adds the connection flags to fs; --nats defaults to
// $NATS_URL, else the local default when local is set (serve's default is
// the embedded server: no URL).
func addConnFlags(fs *flag.FlagSet, e *env, local bool) *connFlags {
	c := &connFlags{}
	def := e.getenv("NATS_URL")
	if def == "" && local {
		def = "nats://127.0.0.1:4222"
	}
	c.urlDefault = def
	usage := "NATS server URL (several: comma-separated); also $NATS_URL"
	if !local {
		usage = "use the NATS server or cluster at this URL instead of the embedded one; also $NATS_URL"
	}
	fs.StringVar(&c.url, "nats", def, usage)
	fs.StringVar(&c.context, "context", "", "natscli context `NAME` (~/.config/nats/context/NAME.json): URL, credentials and TLS; flags given win")
	fs.StringVar(&c.creds, "creds", "", "user credentials `FILE` (JWT and NKey seed)")
	fs.StringVar(&c.nkey, "nkey", "", "NKey seed `FILE`")
	fs.StringVar(&c.user, "user", "", "user name")
	fs.StringVar(&c.password, "password", "", "password (prefer CTXD_PASSWORD: a command line is visible to other users)")
	fs.StringVar(&c.token, "token", "", "authentication token")
	fs.StringVar(&c.tlsCert, "tls-cert", "", "TLS client certificate `FILE`")
	fs.StringVar(&c.tlsKey, "tls-key", "", "TLS client key `FILE`")
	fs.StringVar(&c.tlsCA, "tls-ca", "", "TLS certificate authority `FILE` that signed the server's certificate")
	fs.StringVar(&c.inbox, "inbox-prefix", "", "subject `PREFIX` of the connection's inboxes, where every reply comes (nats.go's default: _INBOX); give the one the server lets your user subscribe to, PREFIX.>, when each user has a private inbox (deployments/tenants)")
	return c
}

// natsContext is the part of a natscli context file ctxd reads.
type natsContext struct {
	URL      string `json:"url"`
	Token    string `json:"token"`
	User     string `json:"user"`
	Password string `json:"password"`
	Creds    string `json:"creds"`
	NKey     string `json:"nkey"`
	Cert     string `json:"cert"`
	Key      string `json:"key"`
	CA       string `json:"ca"`
	TLSFirst bool   `json:"tls_first"`
	Inbox    string `json:"inbox_prefix"`
}

// contextDir is where natscli keeps its contexts.
func contextDir(e *env) string {
	if d := e.getenv("XDG_CONFIG_HOME"); d != "" {
		return filepath.Join(d, "nats", "context")
	}
	home := e.getenv("HOME")
	if home == "" {
		home, _ = os.UserHomeDir()
	}
	return filepath.Join(home, ".config", "nats", "context")
}

// resolve applies the context, then the flags, and returns the URL and
// the options to connect with.
func (c *connFlags) resolve(e *env, fs *flag.FlagSet) (string, []nats.Option, error) {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	url := c.url
	set := func(flagName string, dst *string, v string) {
		if v != "" && !given[flagName] && *dst == "" {
			*dst = v
		}
	}
	var tlsFirst bool
	if c.context != "" {
		if strings.ContainsAny(c.context, `/\`) || c.context == "." || c.context == ".." {
			return "", nil, fmt.Errorf("--context %q: a context name, not a path", c.context)
		}
		path := filepath.Join(contextDir(e), c.context+".json")
		data, err := os.ReadFile(path)
		if err != nil {
			return "", nil, fmt.Errorf("--context %s: %w", c.context, err)
		}
		var nc natsContext
		if err := json.Unmarshal(data, &nc); err != nil {
			return "", nil, fmt.Errorf("--context %s: %s: %w", c.context, path, err)
		}
		if nc.URL != "" && !given["nats"] {
			url = nc.URL
		}
		set("creds", &c.creds, nc.Creds)
		set("nkey", &c.nkey, nc.NKey)
		set("user", &c.user, nc.User)
		set("password", &c.password, nc.Password)
		set("token", &c.token, nc.Token)
		set("tls-cert", &c.tlsCert, nc.Cert)
		set("tls-key", &c.tlsKey, nc.Key)
		set("tls-ca", &c.tlsCA, nc.CA)
		set("inbox-prefix", &c.inbox, nc.Inbox)
		tlsFirst = nc.TLSFirst
	}
	if err := checkInboxPrefix(c.inbox); err != nil {
		return "", nil, err
	}
	var opts []nats.Option
	n := 0
	for _, v := range []string{c.creds, c.nkey, c.token} {
		if v != "" {
			n++
		}
	}
	if c.user != "" {
		n++
	}
	if n > 1 {
		return "", nil, errors.New("give one of --creds, --nkey, --user/--password and --token")
	}
	if c.password != "" && c.user == "" {
		return "", nil, errors.New("--password needs --user")
	}
	switch {
	case c.creds != "":
		opts = append(opts, nats.UserCredentials(c.creds))
	case c.nkey != "":
		o, err := nats.NkeyOptionFromSeed(c.nkey)
		if err != nil {
			return "", nil, fmt.Errorf("--nkey: %w", err)
		}
		opts = append(opts, o)
	case c.user != "":
		opts = append(opts, nats.UserInfo(c.user, c.password))
	case c.token != "":
		opts = append(opts, nats.Token(c.token))
	}
	if (c.tlsCert == "") != (c.tlsKey == "") {
		return "", nil, errors.New("--tls-cert and --tls-key go together")
	}
	if c.tlsCert != "" {
		opts = append(opts, nats.ClientCert(c.tlsCert, c.tlsKey))
	}
	if c.tlsCA != "" {
		opts = append(opts, nats.RootCAs(c.tlsCA))
	}
	if tlsFirst {
		opts = append(opts, nats.TLSHandshakeFirst())
	}
	if c.inbox != "" {
		opts = append(opts, nats.CustomInboxPrefix(c.inbox))
	}
	return url, opts, nil
}

// checkInboxPrefix refuses an inbox prefix that is not a subject of
// literal tokens ("" is nats.go's default).
func checkInboxPrefix(p string) error {
	if p == "" {
		return nil
	}
	for _, tok := range strings.Split(p, ".") {
		if tok == "" || tok == "*" || tok == ">" || strings.ContainsAny(tok, "*> \t\r\n") || !utf8.ValidString(tok) {
			return fmt.Errorf("--inbox-prefix %q: want a subject of tokens joined by '.', none empty, without wildcards (*, >) or white space, such as _INBOX_app-a", p)
		}
	}
	return nil
}

// connectStream connects with the command's connection flags and names
// the transcripts stream the commands that read it work on.
func (c *connFlags) connectStream(e *env, fs *flag.FlagSet) (nc *nats.Conn, stream string, err error) {
	def, err := streams.Transcripts()
	if err != nil {
		return nil, "", err
	}
	nc, err = c.connect(e, fs)
	if err != nil {
		return nil, "", err
	}
	return nc, def.Name, nil
}

// connect connects with the command's connection flags.
func (c *connFlags) connect(e *env, fs *flag.FlagSet, extra ...nats.Option) (*nats.Conn, error) {
	url, opts, err := c.resolve(e, fs)
	opts = append(opts, extra...)
	if err != nil {
		return nil, usageError(e, fs.Name(), err)
	}
	if url == "" {
		url = "nats://127.0.0.1:4222"
	}
	nc, err := nats.Connect(url, append([]nats.Option{nats.Name("ctxd-cli"), nats.ErrorHandler(e.asyncError)}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", app.Redact(url), app.RedactError(url, err))
	}
	// Told now rather than as a request's timeout.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := client.CheckInbox(ctx, nc); err != nil {
		nc.Close()
		if errors.Is(err, client.ErrInboxRefused) {
			return nil, fmt.Errorf("connect to %s: %w; --inbox-prefix sets it", app.Redact(url), app.RedactError(url, err))
		}
		return nil, fmt.Errorf("connect to %s: %w", app.Redact(url), app.RedactError(url, err))
	}
	return nc, nil
}

// PermissionError is a permissions violation the server reported: the
// connection's user may not publish to, or subscribe to, Subject.
type PermissionError struct {
	Op      string // "publish" or "subscribe to"
	Subject string
	Err     error // nats.ErrPermissionViolation, as nats.go reported it
}

func (e *PermissionError) Error() string {
	if e.Subject == "" {
		return fmt.Sprintf("permission denied: %v (the user's permissions in the server configuration: docs/OPERATING.md, Authentication, TLS and tenants)", e.Err)
	}
	return fmt.Sprintf("permission denied: this user may not %s %q (the user's permissions in the server configuration: docs/OPERATING.md, Authentication, TLS and tenants)", e.Op, e.Subject)
}

func (e *PermissionError) Unwrap() error { return e.Err }

// violation is how nats-server words a permissions violation.
var violation = regexp.MustCompile(`Permissions Violation for (Publish|Subscription) to "([^"]*)"`)

// newPermissionError names the subject and the operation of a permissions
// violation.
func newPermissionError(err error) *PermissionError {
	pe := &PermissionError{Err: err}
	if m := violation.FindStringSubmatch(err.Error()); m != nil {
		pe.Op, pe.Subject = "publish to", m[2]
		if m[1] == "Subscription" {
			pe.Op = "subscribe to"
		}
	}
	return pe
}

// asyncError is the error handler of the commands' connections. A
// permissions violation ends the command at once (a request to a subject
// the user may not publish to gets no answer, only this error); others
// are printed.
func (e *env) asyncError(_ *nats.Conn, _ *nats.Subscription, err error) {
	if errors.Is(err, nats.ErrPermissionViolation) {
		if e.abort != nil {
			e.abort(newPermissionError(err))
		}
		return
	}
	fmt.Fprintf(e.stderr, "ctxd: %v\n", err)
}
