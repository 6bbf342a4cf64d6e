package ops

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:9090": true,
		"localhost:9090": true,
		"[::1]:9090":     true,
		"127.0.0.2:1":    true,
		":9090":          false,
		"0.0.0.0:9090":   false,
		"[::]:9090":      false,
		"10.0.0.5:9090":  false,
		"example.com:80": false,
	} {
		require.Equal(t, want, Loopback(addr), addr)
	}
}

func TestServer_RefusesExposedWithoutToken(t *testing.T) {
	s := New("0.0.0.0:0")
	require.ErrorIs(t, s.Open(), ErrExposed)
	s.Token = "t"
	require.NoError(t, s.Open())
	require.NoError(t, s.Close())
}

func TestServer_Readyz(t *testing.T) {
	s := New("127.0.0.1:0")
	var why atomic.Pointer[error]
	s.Ready = func(context.Context) error {
		if p := why.Load(); p != nil {
			return *p
		}
		return nil
	}
	require.NoError(t, s.Open())
	defer s.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + s.ListenAddr() + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(body)
	}
	code, body := get("/readyz")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "ok\n", body)
	err := errors.New("catching up")
	why.Store(&err)
	code, body = get("/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "not ready: catching up\n", body)
	code, _ = get("/healthz")
	require.Equal(t, http.StatusOK, code)
	code, _ = get("/metrics")
	require.Equal(t, http.StatusNotFound, code, "no registry, no metrics")
}
