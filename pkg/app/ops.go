package app

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/ctxd/ctxd/pkg/ops"
	"github.com/ctxd/ctxd/pkg/store"
)

// openHTTP starts the operators' listener: metrics, probes and the
// mounted handlers.
func (a *App) openHTTP() error {
	a.metrics = ops.NewMetrics(ops.Source{
		Stats: func() store.Stats {
			if !a.serving.Load() {
				return store.Stats{}
			}
			return a.roles.Stats()
		},
		LastSeq: a.lastSeq,
		Conn: func() *nats.Conn {
			if !a.serving.Load() {
				return nil
			}
			return a.nc
		},
	})
	a.ops = ops.New(a.HTTPAddr)
	a.ops.Token = a.HTTPToken
	a.ops.Hosts = a.HTTPHosts
	a.ops.Registry = a.metrics.Registry
	a.ops.Ready = a.Ready
	a.ops.Logger = a.Logger
	if _, taken := a.HTTPHandlers["/ui/"]; !taken {
		// The inspector, behind the same token as /metrics, or a login.
		a.inspector = &inspector{a: a}
		a.ops.Mount("/ui/", a.inspector)
	}
	for p, h := range a.HTTPHandlers {
		a.ops.Mount(p, h)
	}
	if err := a.ops.Open(); err != nil {
		a.ops = nil
		if errors.Is(err, ops.ErrExposed) {
			return fmt.Errorf("--http %s listens beyond loopback: set --http-token (or CTXD_HTTP_TOKEN) to require a bearer token for /metrics and what is mounted, or listen on 127.0.0.1", a.HTTPAddr)
		}
		return fmt.Errorf("--http %s: %w", a.HTTPAddr, err)
	}
	return nil
}

// HTTPListenAddr returns the address the operators' listener serves on, or "".
func (a *App) HTTPListenAddr() string {
	if a.ops == nil {
		return ""
	}
	return a.ops.ListenAddr()
}

// lastSeq reads the stream's last sequence.
func (a *App) lastSeq(ctx context.Context) (uint64, error) {
	if !a.serving.Load() {
		return 0, errors.New("not started")
	}
	last, _, err := a.st.State(ctx)
	return last, err
}

// Ready says why ctxd does not serve as it should, or nil: it is started
// (stream and consumer verified, ingest running), connected, and the
// ingest is at most ReadyMaxLag records behind the stream.
func (a *App) Ready(ctx context.Context) error {
	if err := a.Err(); err != nil {
		return err
	}
	if !a.serving.Load() {
		return errors.New("starting")
	}
	if !a.nc.IsConnected() {
		return fmt.Errorf("NATS connection %s", strings.ToLower(a.nc.Status().String()))
	}
	last, err := a.lastSeq(ctx)
	if err != nil {
		return fmt.Errorf("stream: %w", err)
	}
	if a.roles.Partitioned() {
		return a.roles.PartitionLag(ctx, a.ReadyMaxLag)
	}
	st := a.roles.IngestStore()
	if st == nil {
		// Not ingesting: every request reads the session's tail from the
		// stream, so no lag makes this instance's answers late.
		return nil
	}
	return lagError(last, st.Applied(), a.ReadyMaxLag)
}

// lagError says why an ingest that applied up to applied, of a stream
// whose last sequence is last, is not ready: more than max behind.
func lagError(last, applied, max uint64) error {
	if last > applied && last-applied > max {
		return fmt.Errorf("catching up: %d records behind the stream (more than %d)", last-applied, max)
	}
	return nil
}

// Redact returns a NATS URL list with any password or token replaced, for
// logs and errors: in every URL that carries credentials, with a scheme
// or without (nats.go takes "user:pass@host:4222"), and whether it parses
// or not (a password with a "/" in it does not).
func Redact(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		parts[i] = redactURL(p)
	}
	return strings.Join(parts, ",")
}

// redactURL is Redact of one URL: what stands before its last "@", after
// the scheme, is its credentials; a user's name is kept, a password or a
// token replaced.
func redactURL(p string) string {
	at := strings.LastIndex(p, "@")
	if at < 0 {
		return p
	}
	start := 0
	if i := strings.Index(p, "://"); i >= 0 && i < at {
		start = i + len("://")
	}
	creds := p[start:at]
	if creds == "" {
		return p
	}
	if user, _, has := strings.Cut(creds, ":"); has {
		return p[:start] + user + ":xxxxx" + p[at:]
	}
	return p[:start] + "xxxxx" + p[at:] // a token
}

// RedactError returns err with the credentials of the URLs in urls
// replaced wherever its text shows them (nats.go's errors quote the URL
// they could not parse); errors.Is and errors.As see err.
func RedactError(urls string, err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	secret := false
	for p := range strings.SplitSeq(urls, ",") {
		p = strings.TrimSpace(p)
		if r := redactURL(p); r != p {
			msg = strings.ReplaceAll(msg, p, r)
			secret = true
		}
	}
	// Why a URL does not parse may quote a piece of it (`invalid port
	// ":s3" after host`, of a password with a "/" in it).
	var ue *url.Error
	if secret && errors.As(err, &ue) && ue.Err != nil {
		msg = strings.ReplaceAll(msg, ue.Err.Error(), "not a valid URL")
	}
	if msg == err.Error() {
		return err
	}
	return &redactedError{msg: msg, err: err}
}

type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }
