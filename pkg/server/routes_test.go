package server

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/store"
)

// A partition endpoint is served only while Route says so, before Open
// (remembered) or after; it answers as ctxd.context does, refuses a bad
// session, and is gone after Close.
func TestService_Route(t *testing.T) {
	url := startNATS(t, 0)
	st := store.New()
	st.Advance(20)
	proj := &fakeProjections{
		wait: st.Wait,
		view: viewOf(map[string]*projection.Session{
			"demo": sessionOf(t, []string{`{"role":"user","content":"hi"}`}, 14),
		}),
	}
	svc := New(connect(t, url), proj)
	svc.Partitions = 16
	svc.Route(3, true) // before Open: served once open
	require.NoError(t, svc.Open())
	nc := connect(t, url)

	want := request(t, nc, "ctxd.context.demo", nil, nil)
	require.Empty(t, errorCode(want))
	got := request(t, nc, "ctxd.p.3.demo", nil, nil)
	require.Empty(t, errorCode(got))
	require.Equal(t, string(want.Data), string(got.Data))
	require.Equal(t, "400", errorCode(request(t, nc, "ctxd.p.3.a*b", nil, nil)))

	_, err := nc.Request("ctxd.p.4.demo", nil, 5*time.Second)
	require.True(t, errors.Is(err, nats.ErrNoResponders), "%v", err)
	svc.Route(4, true)
	require.NoError(t, svc.nc.Flush())
	require.Empty(t, errorCode(request(t, nc, "ctxd.p.4.demo", nil, nil)))
	require.ElementsMatch(t, []int{3, 4}, svc.Routed())
	svc.Route(3, false)
	require.NoError(t, svc.nc.Flush())
	_, err = nc.Request("ctxd.p.3.demo", nil, 5*time.Second)
	require.True(t, errors.Is(err, nats.ErrNoResponders), "%v", err)

	require.NoError(t, svc.Close())
	svc.Route(5, true) // after Close: nothing
	require.Empty(t, svc.Routed())
	_, err = nc.Request("ctxd.p.4.demo", nil, 5*time.Second)
	require.True(t, errors.Is(err, nats.ErrNoResponders), "%v", err)
}
