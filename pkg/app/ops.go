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
// logs and errors.
func Redact(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		u, err := url.Parse(strings.TrimSpace(p))
		if err != nil || u.User == nil {
			continue
		}
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		} else {
			u.User = url.User("xxxxx") // a token
		}
		parts[i] = u.String()
	}
	return strings.Join(parts, ",")
}
