//go:build slow

package integration

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/app"
	"github.com/ctxd/ctxd/pkg/natsd"
)

// TestOps_Probes: /healthz says alive, /readyz ready only while ctxd is
// connected and serving.
func TestOps_Probes(t *testing.T) {
	dir := t.TempDir()
	srv := natsd.New(dir)
	srv.Port = -1
	require.NoError(t, srv.Open())
	u, err := url.Parse(srv.ClientURL())
	require.NoError(t, err)
	port, _ := strconv.Atoi(u.Port())
	t.Cleanup(func() { srv.Close() })

	a := startApp(t, t.TempDir(), func(c *app.Config) {
		c.NATSURL = srv.ClientURL()
		c.HTTPAddr = "127.0.0.1:0"
	})
	addr := a.HTTPListenAddr()
	code, _ := httpGet(t, addr, "/readyz")
	require.Equal(t, http.StatusOK, code)

	// The server goes away: alive, not ready.
	require.NoError(t, srv.Close())
	require.Eventually(t, func() bool {
		code, body := httpGet(t, addr, "/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "NATS connection")
	}, 20*time.Second, 20*time.Millisecond)
	code, _ = httpGet(t, addr, "/healthz")
	require.Equal(t, http.StatusOK, code)
	m := scrape(t, addr)
	require.Equal(t, 0.0, metricValue(t, m, "ctxd_nats_connected", ""))

	// It comes back: ready again.
	srv2 := natsd.New(dir)
	srv2.Port = port
	require.NoError(t, srv2.Open())
	t.Cleanup(func() { srv2.Close() })
	require.Eventually(t, func() bool {
		code, _ := httpGet(t, addr, "/readyz")
		return code == http.StatusOK
	}, 20*time.Second, 20*time.Millisecond)
}
