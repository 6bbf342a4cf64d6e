// Package natstest runs the embedded NATS server for tests: on a free
// port, storing in the test's temporary directory, stopped when the test
// ends; alone (Start) or as a JetStream cluster in the test's process
// (StartCluster), whose nodes a test can stop and start again.
package natstest

import (
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/natsd"
)

// Start runs a server with the options set by configure, if any, and
// returns its client URL.
func Start(t testing.TB, configure ...func(*natsd.Server)) string {
	t.Helper()
	srv := natsd.New(t.TempDir())
	srv.Port = -1
	for _, c := range configure {
		c(srv)
	}
	require.NoError(t, srv.Open())
	t.Cleanup(func() { srv.Close() })
	return srv.ClientURL()
}

// Connect connects to url for the test's duration.
func Connect(t testing.TB, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc
}

// JetStream starts a server and returns a JetStream client of it.
func JetStream(t testing.TB) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(Connect(t, Start(t)))
	require.NoError(t, err)
	return js
}
