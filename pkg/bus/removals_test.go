package bus_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
	"github.com/ctxd/ctxd/pkg/bus"
	"github.com/ctxd/ctxd/streams"
)

// The server's API audit advisories of purges and deletions, made
// through the API the nats CLI uses, read as the removals they are;
// those of other requests, of another stream, or that removed nothing,
// are none. Removed counts what left the stream.
func TestParseRemoval_Server(t *testing.T) {
	url := natstest.Start(t)
	nc := natstest.Connect(t, url)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	advisories := make(chan *nats.Msg, 64)
	_, err = nc.ChanSubscribe(bus.AuditAdvisory, advisories)
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "TRANSCRIPTS", Subjects: []string{"transcripts.>"}})
	require.NoError(t, err)
	other, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "OTHER", Subjects: []string{"other.>"}})
	require.NoError(t, err)
	for range 5 {
		for _, s := range []string{"transcripts.s1", "transcripts.s2", "other.x"} {
			_, err := js.Publish(ctx, s, []byte("{}"))
			require.NoError(t, err)
		}
	}
	// next returns the removal told by the advisory of the action's
	// request, on api: every request answered has one, in no order with
	// the others'.
	next := func(api string, action func() error) (bus.Removal, bool) {
		t.Helper()
		require.NoError(t, action())
		for {
			select {
			case m := <-advisories:
				var adv struct{ Subject string }
				require.NoError(t, json.Unmarshal(m.Data, &adv))
				if adv.Subject != api {
					continue
				}
				r, ok, err := bus.ParseRemoval(m.Data, "TRANSCRIPTS")
				require.NoError(t, err)
				return r, ok
			case <-ctx.Done():
				t.Fatal("no advisory")
			}
		}
	}
	const purge, del = "$JS.API.STREAM.PURGE.TRANSCRIPTS", "$JS.API.STREAM.MSG.DELETE.TRANSCRIPTS"
	removed, _, err := bus.Removed(ctx, nc, "TRANSCRIPTS")
	require.NoError(t, err)
	require.Zero(t, removed)

	r, ok := next(purge, func() error {
		return st.Purge(ctx, jetstream.WithPurgeSubject("transcripts.s1"), jetstream.WithPurgeKeep(3))
	})
	require.True(t, ok)
	require.Equal(t, bus.Removal{Session: "s1", Count: 2}, r)
	r, ok = next(del, func() error { return st.DeleteMsg(ctx, 2) })
	require.True(t, ok)
	require.Equal(t, bus.Removal{Seq: 2, Count: 1}, r)
	r, ok = next(del, func() error { return st.SecureDeleteMsg(ctx, 5) })
	require.True(t, ok)
	require.Equal(t, bus.Removal{Seq: 5, Count: 1}, r)
	r, ok = next(purge, func() error {
		return st.Purge(ctx, jetstream.WithPurgeSubject("transcripts.*"), jetstream.WithPurgeSequence(9))
	})
	require.True(t, ok)
	require.Equal(t, bus.Removal{All: true, Count: 4}, r, "7 of s1; 4, 6, 8 of s2")
	removed, _, err = bus.Removed(ctx, nc, "TRANSCRIPTS")
	require.NoError(t, err)
	require.Equal(t, uint64(8), removed)

	_, ok = next(del, func() error {
		require.ErrorIs(t, st.DeleteMsg(ctx, 2), jetstream.ErrMsgDeleteUnsuccessful)
		return nil
	})
	require.False(t, ok, "a deletion that failed removed nothing")
	_, ok = next(purge, func() error { return st.Purge(ctx, jetstream.WithPurgeSubject("transcripts.none")) })
	require.False(t, ok, "a purge of nothing removed nothing")
	_, ok = next("$JS.API.STREAM.PURGE.OTHER", func() error { return other.Purge(ctx) })
	require.False(t, ok, "another stream's")

	r, ok = next(purge, func() error { return st.Purge(ctx) })
	require.True(t, ok)
	require.Equal(t, bus.Removal{All: true, Count: 2}, r)
	removed, last, err := bus.Removed(ctx, nc, "TRANSCRIPTS")
	require.NoError(t, err)
	require.Equal(t, last, removed, "nothing left")
}

// Advisories that do not decode, or decode to something else, are an
// error or no removal, never a removal of the wrong session.
func TestParseRemoval_Hostile(t *testing.T) {
	cases := []struct {
		name string
		data string
		want bus.Removal
		ok   bool
		err  bool
	}{
		{"empty", ``, bus.Removal{}, false, false},
		{"other request", `{"subject":"$JS.API.STREAM.INFO.TRANSCRIPTS","response":"{}"}`, bus.Removal{}, false, false},
		{"garbage naming the API", `not json API.STREAM.PURGE.TRANSCRIPTS`, bus.Removal{}, false, true},
		{"response garbage", `{"subject":"$JS.API.STREAM.PURGE.TRANSCRIPTS","response":"{{"}`, bus.Removal{}, false, true},
		{"failed", `{"subject":"$JS.API.STREAM.PURGE.TRANSCRIPTS","response":"{\"error\":{\"code\":500},\"success\":false}"}`, bus.Removal{}, false, false},
		{"request garbage", `{"subject":"$JS.API.STREAM.PURGE.TRANSCRIPTS","request":"{{","response":"{\"success\":true,\"purged\":3}"}`, bus.Removal{All: true, Count: 3}, true, false},
		{"request typed wrong", `{"subject":"$JS.API.STREAM.PURGE.TRANSCRIPTS","request":"{\"filter\":5}","response":"{\"success\":true,\"purged\":3}"}`, bus.Removal{All: true, Count: 3}, true, false},
		{"filter of no session", `{"subject":"$JS.API.STREAM.PURGE.TRANSCRIPTS","request":"{\"filter\":\"transcripts.a.b\"}","response":"{\"success\":true,\"purged\":3}"}`, bus.Removal{All: true, Count: 3}, true, false},
		{"filter of another subject", `{"subject":"$JS.API.STREAM.PURGE.TRANSCRIPTS","request":"{\"filter\":\"x.s1\"}","response":"{\"success\":true,\"purged\":1}"}`, bus.Removal{All: true, Count: 1}, true, false},
		{"clustered purge", `{"subject":"$JS.API.STREAM.PURGE.TRANSCRIPTS","response":"{\"success\":true,\"purged\":7}"}`, bus.Removal{All: true, Count: 7}, true, false},
		{"delete without request", `{"subject":"$JS.API.STREAM.MSG.DELETE.TRANSCRIPTS","response":"{\"success\":true}"}`, bus.Removal{All: true, Count: 1}, true, false},
		{"stream name a prefix", `{"subject":"$JS.API.STREAM.PURGE.TRANSCRIPTS2","response":"{\"success\":true,\"purged\":7}"}`, bus.Removal{}, false, false},
		{"request names the API only", `{"subject":"$JS.API.STREAM.INFO.X","request":"API.STREAM.PURGE.TRANSCRIPTS","response":"{}"}`, bus.Removal{}, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, ok, err := bus.ParseRemoval([]byte(c.data), "TRANSCRIPTS")
			if c.err {
				require.ErrorIs(t, err, bus.ErrBadAdvisory)
				return
			}
			require.NoError(t, err)
			require.Equal(t, c.ok, ok)
			require.Equal(t, c.want, r)
		})
	}
}

// Removed reads what the stream's own info says, on a stream laid out as
// ctxd lays it out (16 partitions, metadata, a description), through
// purges and deletions; a stream that does not exist is
// jetstream.ErrStreamNotFound, not a count.
func TestRemoved_AgreesWithStreamInfo(t *testing.T) {
	url := natstest.Start(t)
	nc := natstest.Connect(t, url)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg, err := streams.Transcripts()
	require.NoError(t, err)
	cfg.SubjectTransform = streams.PartitionTransform(16)
	// Text in the configuration that reads like the state it is not.
	cfg.Description = `"state":{"messages":0,"last_seq":0}`
	cfg.Metadata = map[string]string{"state": `{"messages":0,"last_seq":0}`}
	st, err := js.CreateStream(ctx, cfg)
	require.NoError(t, err)
	agree := func(wantRemoved uint64) {
		t.Helper()
		removed, last, err := bus.Removed(ctx, nc, cfg.Name)
		require.NoError(t, err)
		info, err := st.Info(ctx)
		require.NoError(t, err)
		require.Equal(t, info.State.LastSeq, last)
		require.Equal(t, info.State.LastSeq-info.State.Msgs, removed)
		require.Equal(t, wantRemoved, removed)
	}
	agree(0)
	for i := range 40 {
		_, err := js.Publish(ctx, fmt.Sprintf("transcripts.s%d", i%7), []byte("{}"))
		require.NoError(t, err)
	}
	agree(0)
	require.NoError(t, st.DeleteMsg(ctx, 5))
	require.NoError(t, st.DeleteMsg(ctx, 1))
	agree(2)
	require.NoError(t, st.Purge(ctx, jetstream.WithPurgeSubject("transcripts.>"), jetstream.WithPurgeSequence(10)))
	agree(9)
	require.NoError(t, st.Purge(ctx))
	agree(40)

	_, _, err = bus.Removed(ctx, nc, "NOSUCH")
	require.ErrorIs(t, err, jetstream.ErrStreamNotFound)

	// StreamState: the identity as StreamIdentity says it, another once
	// the stream is made again.
	identity, removed, err := bus.StreamState(ctx, nc, cfg.Name)
	require.NoError(t, err)
	info, err := st.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, bus.StreamIdentity(info), identity)
	require.Equal(t, uint64(40), removed)
	require.NoError(t, js.DeleteStream(ctx, cfg.Name))
	time.Sleep(2 * time.Millisecond) // another creation time
	st, err = js.CreateStream(ctx, cfg)
	require.NoError(t, err)
	again, removed, err := bus.StreamState(ctx, nc, cfg.Name)
	require.NoError(t, err)
	require.NotEqual(t, identity, again)
	require.Equal(t, bus.StreamIdentity(st.CachedInfo()), again)
	require.Zero(t, removed)
	_, _, err = bus.StreamState(ctx, nc, "NOSUCH")
	require.ErrorIs(t, err, jetstream.ErrStreamNotFound)
}

// BenchmarkRemoved compares reading the stream's state with bus.Removed
// to reading the whole jetstream.StreamInfo, on a stream laid out as
// ctxd's (16 partitions, R1, embedded server: the server's side of the
// request is in the figures too, the same for both).
func BenchmarkRemoved(b *testing.B) {
	url := natstest.Start(b)
	nc := natstest.Connect(b, url)
	js, err := jetstream.New(nc)
	require.NoError(b, err)
	ctx := context.Background()
	cfg, err := streams.Transcripts()
	require.NoError(b, err)
	cfg.SubjectTransform = streams.PartitionTransform(16)
	st, err := js.CreateStream(ctx, cfg)
	require.NoError(b, err)
	for i := range 100 {
		_, err := js.Publish(ctx, fmt.Sprintf("transcripts.s%d", i), []byte("{}"))
		require.NoError(b, err)
	}
	b.Run("stream info", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			info, err := st.Info(ctx)
			if err != nil {
				b.Fatal(err)
			}
			_ = info.State.LastSeq - info.State.Msgs
		}
	})
	b.Run("state only", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			if _, _, err := bus.Removed(rctx, nc, cfg.Name); err != nil {
				b.Fatal(err)
			}
			cancel()
		}
	})
}
