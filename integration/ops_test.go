//go:build !slow

package integration

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/app"
)

func TestOps_Metrics(t *testing.T) {
	a := startApp(t, t.TempDir(), func(c *app.Config) {
		c.HTTPAddr = "127.0.0.1:0"
		c.Version = "1.2.3-test"
	})
	addr := a.HTTPListenAddr()
	c := newClient(t, a.URL())

	m := scrape(t, addr)
	for _, name := range []string{"ctxd_records_applied_total", "ctxd_ingest_lag_records", "ctxd_sessions_loaded",
		"ctxd_session_loads_total", "ctxd_session_snapshot_loads_total", "ctxd_evictions_total", "ctxd_nats_connected", "go_goroutines", "process_resident_memory_bytes"} {
		require.NotEqual(t, -1.0, metricValue(t, m, name, ""), "%s missing from the scrape", name)
	}
	require.Equal(t, 0.0, metricValue(t, m, "ctxd_records_applied_total", ""))
	require.Equal(t, 1.0, metricValue(t, m, "ctxd_nats_connected", ""))
	require.Equal(t, 0.0, metricValue(t, m, "ctxd_records_rejected_total", `reason="undecodable"`))

	// Records move the applied counter, a bad one the rejected one.
	var last uint64
	for i := range 3 {
		last = c.publish("m1", []byte(`{"role":"user","content":"hello `+strconv.Itoa(i)+`"}`))
	}
	bad := c.publish("m1", []byte("hello, plain text"))
	// The records counter is the ingest's: the ingest meets them all
	// when no reply read from the stream came first.
	require.NoError(t, a.Wait(context.Background(), bad, 20*time.Second))
	_, err := c.nc.Request("ctxd.context.m1", []byte(`{"min_seq":`+strconv.FormatUint(bad, 10)+`}`), 10*time.Second)
	require.NoError(t, err)
	m = scrape(t, addr)
	require.Equal(t, 3.0, metricValue(t, m, "ctxd_records_applied_total", ""))
	require.Equal(t, 1.0, metricValue(t, m, "ctxd_records_rejected_total", `reason="undecodable"`))
	require.Equal(t, 0.0, metricValue(t, m, "ctxd_ingest_lag_records", ""))
	require.GreaterOrEqual(t, metricValue(t, m, "ctxd_applied_seq", ""), float64(last))

	// Requests by code: a reply, a bad request, a wait that expires (its
	// 504 is sent from the waiting goroutine).
	_, err = c.nc.Request("ctxd.context.m1", nil, 10*time.Second)
	require.NoError(t, err)
	msg, err := c.nc.Request("ctxd.context.m1", []byte(`not json`), 10*time.Second)
	require.NoError(t, err)
	require.Equal(t, "400", msg.Header.Get("Nats-Service-Error-Code"))
	msg, err = c.nc.Request("ctxd.context.m1", []byte(`{"min_seq":999999,"wait_ms":50}`), 10*time.Second)
	require.NoError(t, err)
	require.Equal(t, "504", msg.Header.Get("Nats-Service-Error-Code"))

	m = scrape(t, addr)
	require.Equal(t, 2.0, metricValue(t, m, "ctxd_requests_total", `code="200",endpoint="context"`))
	require.Equal(t, 1.0, metricValue(t, m, "ctxd_requests_total", `code="400",endpoint="context"`))
	require.Equal(t, 1.0, metricValue(t, m, "ctxd_requests_total", `code="504",endpoint="context"`))
	require.Equal(t, 4.0, metricValue(t, m, "ctxd_request_duration_seconds_count", `endpoint="context"`))
	require.Equal(t, 1.0, metricValue(t, m, "ctxd_sessions_loaded", ""))

	// $SRV.STATS: each endpoint its own counters, the 504 included; the
	// projections' counters only under the context endpoint.
	msg, err = c.nc.Request("$SRV.STATS.ctxd", nil, 5*time.Second)
	require.NoError(t, err)
	var stats struct {
		Version   string `json:"version"`
		Endpoints []struct {
			Name string          `json:"name"`
			Data json.RawMessage `json:"data"`
		} `json:"endpoints"`
	}
	require.NoError(t, json.Unmarshal(msg.Data, &stats))
	seen := 0
	for _, ep := range stats.Endpoints {
		var d map[string]any
		require.NoError(t, json.Unmarshal(ep.Data, &d))
		switch ep.Name {
		case "context":
			seen++
			require.Equal(t, map[string]any{"200": 2.0, "400": 1.0, "504": 1.0}, d["replies"], string(ep.Data))
			require.Equal(t, 2.0, d["errors"])
			require.Equal(t, 3.0, d["records"])
			require.Contains(t, d, "sessions")
		case "chunk", "rejected":
			seen++
			require.NotContains(t, d, "records", "%s repeats the service-wide counters", ep.Name)
		}
	}
	require.Equal(t, 3, seen)
	require.Equal(t, "1.2.3-test", stats.Version, "the version is the one the app is given")
}

func TestOps_Token(t *testing.T) {
	a := startApp(t, t.TempDir(), func(c *app.Config) {
		c.HTTPAddr = "127.0.0.1:0"
		c.HTTPToken = "s3cret"
		c.HTTPHandlers = map[string]http.Handler{"/ui/": http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			io.WriteString(w, "inspector")
		})}
	})
	addr := a.HTTPListenAddr()
	for _, p := range []string{"/metrics", "/ui/"} {
		code, _ := httpGet(t, addr, p)
		require.Equal(t, http.StatusUnauthorized, code, p)
		code, _ = httpGet(t, addr, p, "Authorization", "Bearer wrong")
		require.Equal(t, http.StatusUnauthorized, code, p)
		code, _ = httpGet(t, addr, p, "Authorization", "Bearer s3cret")
		require.Equal(t, http.StatusOK, code, p)
	}
	code, body := httpGet(t, addr, "/ui/x", "Authorization", "Bearer s3cret")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "inspector", body)
	// The probes answer anyone: kubelets carry no token.
	code, _ = httpGet(t, addr, "/healthz")
	require.Equal(t, http.StatusOK, code)
	code, _ = httpGet(t, addr, "/readyz")
	require.Equal(t, http.StatusOK, code)
}

func TestOps_ExposedWithoutToken(t *testing.T) {
	cfg := app.DefaultConfig()
	cfg.DataDir, cfg.Port = t.TempDir(), -1
	cfg.HTTPAddr = "0.0.0.0:0"
	a := app.New(cfg)
	err := a.Open(context.Background())
	require.ErrorContains(t, err, "--http-token")
	a.Close()
}

func TestOps_HTTPPortInUse(t *testing.T) {
	a := startApp(t, t.TempDir(), func(c *app.Config) { c.HTTPAddr = "127.0.0.1:0" })
	cfg := app.DefaultConfig()
	cfg.DataDir, cfg.Port = t.TempDir(), -1
	cfg.HTTPAddr = a.HTTPListenAddr()
	b := app.New(cfg)
	err := b.Open(context.Background())
	require.ErrorContains(t, err, "address already in use")
	b.Close()
}

// TestOps_Lifecycle: not ready before Open has finished; the listener is
// gone after Close.
func TestOps_Lifecycle(t *testing.T) {
	cfg := app.DefaultConfig()
	cfg.DataDir, cfg.Port = t.TempDir(), -1
	cfg.HTTPAddr = "127.0.0.1:0"
	a := app.New(cfg)
	require.ErrorContains(t, a.Ready(context.Background()), "starting")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, a.Open(ctx))
	require.NoError(t, a.Ready(ctx))
	addr := a.HTTPListenAddr()
	require.NoError(t, a.Close())
	require.ErrorContains(t, a.Ready(ctx), "starting")
	_, err := http.Get("http://" + addr + "/healthz")
	require.Error(t, err)
}

// TestOps_Inspector: --http serves the inspector at /ui/ behind the same
// token as /metrics, over the running app, and a follower of a session's
// events does not hold the shutdown.
func TestOps_Inspector(t *testing.T) {
	a := startApp(t, t.TempDir(), func(c *app.Config) {
		c.HTTPAddr = "127.0.0.1:0"
		c.HTTPToken = "s3cret"
	})
	c := newClient(t, a.URL())
	c.publish("insp1", []byte(`{"role":"user","content":"<b>hello</b>"}`))
	seq := c.publish("insp1", []byte(`{"role":"assistant","content":[{"type":"toolCall","id":"c1","name":"read","arguments":{}}]}`))
	addr := a.HTTPListenAddr()
	auth := []string{"Authorization", "Bearer s3cret"}

	code, _ := httpGet(t, addr, "/ui/sessions/insp1")
	require.Equal(t, http.StatusUnauthorized, code)
	require.Eventually(t, func() bool {
		code, body := httpGet(t, addr, "/ui/", auth...)
		return code == http.StatusOK && strings.Contains(body, "insp1")
	}, 10*time.Second, 20*time.Millisecond)
	code, body := httpGet(t, addr, "/ui/sessions/insp1", auth...)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "&lt;b&gt;hello&lt;/b&gt;")
	require.NotContains(t, body, "<b>hello</b>")
	require.Contains(t, body, strconv.FormatUint(seq, 10))

	// A follower of the session's events: Close must end it.
	req, err := http.NewRequest("GET", "http://"+addr+"/ui/sessions/insp1/events", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	// The listener's shutdown fails (after its grace period) if a
	// connection is still held.
	require.NoError(t, a.Close())
}

// TestOps_InspectorLogin: on ctxd's listener a browser logs in to the
// inspector with the token once, and its cookie opens /ui/ (with a log
// out button) but not /metrics; a host name the listener does not serve
// reads nothing.
func TestOps_InspectorLogin(t *testing.T) {
	a := startApp(t, t.TempDir(), func(c *app.Config) {
		c.HTTPAddr = "127.0.0.1:0"
		c.HTTPToken = "s3cret"
		c.HTTPHosts = []string{"ctxd.example.com"}
	})
	c := newClient(t, a.URL())
	seq := c.publish("insp2", []byte(`{"role":"user","content":"hello"}`))
	require.NoError(t, a.Wait(context.Background(), seq, 20*time.Second))
	addr := a.HTTPListenAddr()
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

	req, err := http.NewRequest("POST", "http://"+addr+"/login?next=%2Fui%2Fsessions%2Finsp2", strings.NewReader(url.Values{"token": {"s3cret"}}.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "http://"+addr)
	resp, err := hc.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/ui/sessions/insp2", resp.Header.Get("Location"))
	require.Len(t, resp.Cookies(), 1)
	cookie := resp.Cookies()[0].Name + "=" + resp.Cookies()[0].Value

	code, body := httpGet(t, addr, "/ui/sessions/insp2", "Cookie", cookie)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `id="seq-`+strconv.FormatUint(seq, 10)+`"`)
	require.Contains(t, body, `<form method="post" action="/logout" class="logout">`)
	code, _ = httpGet(t, addr, "/metrics", "Cookie", cookie)
	require.Equal(t, http.StatusUnauthorized, code)

	for _, host := range []string{"attacker.example", "ctxd.example.com"} {
		req, err := http.NewRequest("GET", "http://"+addr+"/ui/sessions/insp2", nil)
		require.NoError(t, err)
		req.Host = host
		req.Header.Set("Cookie", cookie)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		if host == "attacker.example" {
			require.Equal(t, http.StatusMisdirectedRequest, resp.StatusCode)
		} else {
			require.Equal(t, http.StatusOK, resp.StatusCode)
		}
	}
}
