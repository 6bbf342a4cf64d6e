package server

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/replytest"
	"github.com/ctxd/ctxd/internal/sessiongen"
	"github.com/ctxd/ctxd/internal/workload"
	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/protocol"
	"github.com/ctxd/ctxd/pkg/record"
	"github.com/ctxd/ctxd/pkg/render"
)

// liveSession serves one session that the test grows between requests.
type liveSession struct {
	mu sync.Mutex // the service's view and the test's Apply take turns
	p  *projection.Session
}

func (l *liveSession) projections() *fakeProjections {
	return &fakeProjections{view: func(_ context.Context, _ string, fn func(*projection.Session)) error {
		l.mu.Lock()
		defer l.mu.Unlock()
		fn(l.p)
		return nil
	}}
}

func (l *liveSession) apply(seq uint64, v any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.p.Apply(seq, v)
}

// threeMessages is a live session of three text messages, at seqs 1 to 3.
func threeMessages(t *testing.T) *liveSession {
	t.Helper()
	live := &liveSession{p: projection.New(projection.Options{})}
	for i, r := range []string{
		`{"role":"user","content":"one"}`,
		`{"role":"assistant","content":"two"}`,
		`{"role":"user","content":"three"}`,
	} {
		v, err := record.DecodeJSON([]byte(r))
		require.NoError(t, err)
		live.apply(uint64(i+1), v)
	}
	return live
}

// deltaBody is a request body in the format and encoding, with the
// fields given.
func deltaBody(t testing.TB, f render.Format, asMsgpack bool, kv ...any) []byte {
	t.Helper()
	kv = append([]any{"format", string(f)}, kv...)
	if asMsgpack {
		return msgpackOf(t, kv...)
	}
	b, err := record.MarshalJSON(record.NewMap(kv...))
	require.NoError(t, err)
	return b
}

// withoutDigest checks a whole reply's digest and returns the reply
// without it (replytest.Plain).
func withoutDigest(t testing.TB, b []byte) []byte {
	t.Helper()
	plain, err := replytest.Plain(b)
	require.NoError(t, err)
	return plain
}

func okReply(t testing.TB, msg *nats.Msg) []byte {
	t.Helper()
	require.Empty(t, errorCode(msg), msg.Header.Get(micro.ErrorHeader))
	return msg.Data
}

// A delta applied to the reply held is the whole reply, byte for byte,
// at every step of generated sessions, in every format and encoding; the
// whole reply is the reply without digest, with its digest.
func TestService_Delta(t *testing.T) {
	url := startNATS(t, 0)
	for fi, f := range render.Formats {
		for _, variant := range []string{"json", "msgpack", "json+budget", "msgpack+budget"} {
			asMsgpack := strings.HasPrefix(variant, "msgpack")
			var extra []any
			if strings.HasSuffix(variant, "+budget") {
				extra = []any{"budget_tokens", int64(2000)}
			}
			deltaBody := func(t testing.TB, f render.Format, asMsgpack bool, kv ...any) []byte {
				return deltaBody(t, f, asMsgpack, append(kv, extra...)...)
			}
			t.Run(string(f)+"/"+variant, func(t *testing.T) {
				live := &liveSession{p: projection.New(projection.Options{})}
				svc, _ := startService(t, url, live.projections())
				nc := connect(t, url)
				g := sessiongen.New(rand.New(rand.NewPCG(uint64(fi), 7)), sessiongen.Rules{Convert: projection.Convert, IsValidCompaction: projection.IsValidCompaction})
				subj := "ctxd.context.s"
				held := okReply(t, request(t, nc, subj, deltaBody(t, f, asMsgpack, "digest", true), nil))
				kept, err := protocol.Hold(held) // as a client holds it, from delta to delta
				require.NoError(t, err)
				deltas, keeps := 0, 0
				for step := 1; step <= 80; step++ {
					live.apply(uint64(step), g.Record())
					h, err := protocol.ReadReply(held)
					require.NoError(t, err)
					ask := func() []byte {
						return okReply(t, request(t, nc, subj, deltaBody(t, f, asMsgpack, "have_seq", h.Seq, "have_digest", h.Digest), nil))
					}
					var full, delta []byte
					if step%2 == 0 { // the delta first, or the whole reply first
						delta = ask()
						full = okReply(t, request(t, nc, subj, deltaBody(t, f, asMsgpack, "digest", true), nil))
					} else {
						full = okReply(t, request(t, nc, subj, deltaBody(t, f, asMsgpack, "digest", true), nil))
						delta = ask()
					}
					plain := okReply(t, request(t, nc, subj, deltaBody(t, f, asMsgpack, "digest", false), nil))
					require.Equal(t, string(plain), string(withoutDigest(t, full)), "step %d: without digest, the reply is as before", step)
					byDefault := okReply(t, request(t, nc, subj, deltaBody(t, f, asMsgpack), nil))
					require.Equal(t, string(full), string(byDefault), "step %d: a request that does not say gets the digest", step)
					d, err := protocol.ComputeDigest(full)
					require.NoError(t, err)
					fr, err := protocol.ReadReply(full)
					require.NoError(t, err)
					require.Equal(t, d, fr.Digest, "step %d", step)
					require.False(t, fr.HasDelta)

					got, err := protocol.ApplyDelta(held, delta)
					require.NoError(t, err, "step %d", step)
					require.Equal(t, string(full), string(got), "step %d: the delta applied to the reply held", step)
					kept, err = kept.Apply(delta)
					require.NoError(t, err, "step %d", step)
					require.Equal(t, string(full), string(kept.Body), "step %d: the delta applied to the reply kept", step)
					require.Equal(t, fr.Items, kept.Reply.Items)
					dr, err := protocol.ReadReply(delta)
					require.NoError(t, err)
					if dr.HasDelta {
						deltas++
						keeps += int(dr.Keep)
						require.Positive(t, dr.Keep)
						require.Less(t, len(delta), len(full)+40)
					}
					held = full
				}
				t.Logf("%d deltas in 80 steps, %d messages kept; %d replies indexed from the one before", deltas, keeps, svc.digests.goneOn.Load())
				require.Greater(t, svc.digests.goneOn.Load(), int64(5), "replies are indexed from the one before")
				require.Zero(t, svc.digests.mismatched.Load(), "what was said to be shared was")
				if f == render.Neutral && extra == nil && asMsgpack {
					// (In JSON the plain requests between make the
					// projection's reply buffers anew.)
					require.Positive(t, svc.digests.appended.Load(), "replies whose messages were appended to")
				}
				require.Greater(t, deltas, 20, "steps are answered with a delta")
			})
		}
	}
}

// A base the service cannot be sure of gets the whole reply; a malformed
// one is a 400 naming the field.
func TestService_DeltaRefused(t *testing.T) {
	url := startNATS(t, 0)
	live := threeMessages(t)
	startService(t, url, live.projections())
	nc := connect(t, url)
	subj := "ctxd.context.s"
	base := okReply(t, request(t, nc, subj, []byte(`{"digest":true}`), nil))
	b, err := protocol.ReadReply(base)
	require.NoError(t, err)
	v, err := record.DecodeJSON([]byte(`{"role":"assistant","content":"four"}`))
	require.NoError(t, err)
	live.apply(4, v)
	whole := okReply(t, request(t, nc, subj, []byte(`{"digest":true}`), nil))

	ask := func(seq uint64, digest string) []byte {
		return okReply(t, request(t, nc, subj, fmt.Appendf(nil, `{"have_seq":%d,"have_digest":%q}`, seq, digest), nil))
	}
	// The base held: a delta of one message.
	d := ask(b.Seq, b.Digest)
	require.Contains(t, string(d), `"delta":{"keep":3}`)
	got, err := protocol.ApplyDelta(base, d)
	require.NoError(t, err)
	require.Equal(t, string(whole), string(got))

	tampered := []byte(b.Digest)
	tampered[0] ^= 1
	for name, reply := range map[string][]byte{
		"tampered digest":  ask(b.Seq, string(tampered)),
		"seq beyond":       ask(b.Seq+100, b.Digest),
		"seq before":       ask(b.Seq-1, b.Digest),
		"unknown digest":   ask(3, strings.Repeat("0", 64)),
		"another encoding": okReply(t, request(t, nc, subj, msgpackOf(t, "have_seq", b.Seq, "have_digest", b.Digest), nil)),
	} {
		if name == "another encoding" {
			r, err := protocol.ReadReply(reply)
			require.NoError(t, err)
			require.False(t, r.HasDelta, name)
			continue
		}
		require.Equal(t, string(whole), string(reply), "%s: the whole reply", name)
	}

	// A compaction since: the messages held are gone, the whole reply.
	cur, err := protocol.ReadReply(whole)
	require.NoError(t, err)
	v, err = record.DecodeJSON([]byte(`{"type":"compaction","summary":"all of it","firstKeptEntryId":"x","tokensBefore":10}`))
	require.NoError(t, err)
	live.apply(5, v)
	after := ask(cur.Seq, cur.Digest)
	ar, err := protocol.ReadReply(after)
	require.NoError(t, err)
	require.False(t, ar.HasDelta, "after a compaction: %s", after)

	for body, field := range map[string]string{
		`{"have_seq":-1,"have_digest":"` + b.Digest + `"}`:                 "have_seq must be a non-negative integer",
		`{"have_seq":"4","have_digest":"` + b.Digest + `"}`:                "have_seq must be a non-negative integer",
		`{"have_seq":4,"have_digest":"abc"}`:                               "have_digest must be a digest of 64 lowercase hex digits",
		`{"have_seq":4,"have_digest":7}`:                                   "have_digest must be a digest",
		`{"have_seq":4,"have_digest":"` + strings.ToUpper(b.Digest) + `"}`: "have_digest must be",
		`{"have_seq":4}`:                     "have_seq without have_digest",
		`{"have_digest":"` + b.Digest + `"}`: "have_digest without have_seq",
		`{"digest":1}`:                       "digest must be true or false",
	} {
		msg := request(t, nc, subj, []byte(body), nil)
		require.Equal(t, CodeBadRequest, errorCode(msg), body)
		require.Contains(t, msg.Header.Get(micro.ErrorHeader), field, body)
	}
}

// A delta is by the bytes: a compaction that keeps the first message as
// it was still gets one (keep 1), and so does a base got in another
// format whose elements are the same bytes (a neutral reply of plain
// text and the openai-chat one); put back together, each is the whole
// reply.
func TestService_DeltaIsByBytes(t *testing.T) {
	url := startNATS(t, 0)
	live := threeMessages(t)
	startService(t, url, live.projections())
	nc := connect(t, url)
	subj := "ctxd.context.s"
	held := map[render.Format][]byte{}
	for _, f := range []render.Format{render.Neutral, render.OpenAIChat} {
		held[f] = okReply(t, request(t, nc, subj, deltaBody(t, f, false, "digest", true), nil))
	}
	nb, err := protocol.ReadReply(held[render.Neutral])
	require.NoError(t, err)
	ob, err := protocol.ReadReply(held[render.OpenAIChat])
	require.NoError(t, err)
	require.Equal(t, nb.Digest, ob.Digest, "the same elements, the same bytes")

	v, err := record.DecodeJSON([]byte(`{"type":"compaction","at":"2025-01-01T00:00:00Z","baseSeq":3,"plannerVersion":1,` +
		`"summaryModelRef":"m","summary":"s","qualityAudit":"passed","firstKeptIndex":0,"tokensBefore":10,"tokensAfter":5,` +
		`"messages":[{"role":"user","content":"one"},{"role":"user","content":"summary of two and three"}]}`))
	require.NoError(t, err)
	live.apply(4, v)
	for _, c := range []struct {
		f    render.Format
		base []byte
	}{
		{render.Neutral, held[render.Neutral]},
		{render.OpenAIChat, held[render.OpenAIChat]},
		{render.OpenAIChat, held[render.Neutral]},
	} {
		b, err := protocol.ReadReply(c.base)
		require.NoError(t, err)
		whole := okReply(t, request(t, nc, subj, deltaBody(t, c.f, false, "digest", true), nil))
		d := okReply(t, request(t, nc, subj, deltaBody(t, c.f, false, "have_seq", b.Seq, "have_digest", b.Digest), nil))
		dr, err := protocol.ReadReply(d)
		require.NoError(t, err)
		require.True(t, dr.HasDelta, "%s: %s", c.f, d)
		require.Equal(t, uint64(1), dr.Keep, "%s: the first message kept", c.f)
		got, err := protocol.ApplyDelta(c.base, d)
		require.NoError(t, err)
		require.Equal(t, string(whole), string(got), c.f)
	}
}

// A reply, whole or a delta, larger than the max payload comes in chunks
// like any; a delta of a large message too.
func TestService_DeltaChunked(t *testing.T) {
	url := startNATS(t, 8<<10)
	live := &liveSession{p: projection.New(projection.Options{})}
	big := strings.Repeat("x", 20<<10)
	for i := range 4 {
		live.apply(uint64(i+1), record.NewMap("role", "user", "content", fmt.Sprintf("%d %s", i, big)))
	}
	startService(t, url, live.projections())
	nc := connect(t, url)
	for _, asMsgpack := range []bool{false, true} {
		body := func(kv ...any) []byte { return deltaBody(t, render.Neutral, asMsgpack, kv...) }
		held := fetchAll(t, nc, request(t, nc, "ctxd.context.s", body("digest", true), nil))
		h, err := protocol.Hold(held)
		require.NoError(t, err)
		seq := live.p.Seq()
		live.apply(seq+1, record.NewMap("role", "assistant", "content", "a large answer "+big))
		first := request(t, nc, "ctxd.context.s", body("have_seq", h.Reply.Seq, "have_digest", h.Reply.Digest), nil)
		require.NotEmpty(t, first.Header.Get(HeaderChunks), "the delta comes in chunks")
		delta := fetchAll(t, nc, first)
		d, err := protocol.ReadReply(delta)
		require.NoError(t, err)
		require.True(t, d.HasDelta)
		require.Len(t, d.Items, 1)
		full := fetchAll(t, nc, request(t, nc, "ctxd.context.s", body("digest", true), nil))
		next, err := h.Apply(delta)
		require.NoError(t, err)
		require.Equal(t, string(full), string(next.Body))
	}
}

// neutralDelta asks for session s's neutral context against h (with a
// digest when h is nil) and returns the reply put back together.
func neutralDelta(t *testing.T, nc *nats.Conn, h *protocol.Held, asMsgpack bool) *protocol.Held {
	t.Helper()
	kv := []any{"digest", true}
	if h != nil {
		kv = []any{"have_seq", h.Reply.Seq, "have_digest", h.Reply.Digest}
	}
	reply := okReply(t, request(t, nc, "ctxd.context.s", deltaBody(t, render.Neutral, asMsgpack, kv...), nil))
	var next *protocol.Held
	var err error
	if h == nil {
		next, err = protocol.Hold(reply)
	} else {
		next, err = h.Apply(reply)
	}
	require.NoError(t, err)
	return next
}

// A session only appended to is indexed from the projection's buffer,
// as JSON and as msgpack, without a walk of its messages.
func TestService_DeltaAppended(t *testing.T) {
	url := startNATS(t, 0)
	for _, asMsgpack := range []bool{false, true} {
		live := &liveSession{p: projection.New(projection.Options{})}
		svc, _ := startService(t, url, live.projections())
		nc := connect(t, url)
		var h *protocol.Held
		for i := range 20 {
			live.apply(uint64(i+1), record.NewMap("role", "user", "content", fmt.Sprintf("turn %d", i)))
			h = neutralDelta(t, nc, h, asMsgpack)
			full := okReply(t, request(t, nc, "ctxd.context.s", deltaBody(t, render.Neutral, asMsgpack, "digest", true), nil))
			require.Equal(t, string(full), string(h.Body))
		}
		require.GreaterOrEqual(t, svc.digests.appended.Load(), int64(19), "msgpack %v", asMsgpack)
		require.NoError(t, svc.Close()) // the next one answers alone
	}
}

// A neutral reply with its digest costs the session no memory: it is
// indexed from the bytes of the reply, never from the messages decoded
// (a session applied as it comes holds the JSON of its context, and
// would hold every message again as a value). Also when the reply before
// is not a prefix of the buffer (a screenshot's image trimmed since),
// where what it shares is compared byte for byte.
func TestService_DeltaHoldsNoMessages(t *testing.T) {
	url := startNATS(t, 0)
	for _, asMsgpack := range []bool{false, true} {
		live := &liveSession{p: projection.New(projection.Options{BrowserTools: projection.DefaultBrowserTools})}
		svc, _ := startService(t, url, live.projections())
		nc := connect(t, url)
		g := workload.New(7, workload.Profile{ScreenshotBytes: 2000, ScreenshotEvery: 1, Screenshots: 3})
		seq := uint64(0)
		var h *protocol.Held
		for i := range 30 {
			recs := g.CallPair()
			if i%5 == 4 {
				recs = g.BrowserTurn()
			}
			for _, r := range recs {
				seq++
				live.apply(seq, r)
			}
			// A plain reply first: what any reply costs the session (its
			// encoded messages brought up to date).
			okReply(t, request(t, nc, "ctxd.context.s", deltaBody(t, render.Neutral, asMsgpack), nil))
			live.mu.Lock()
			before := live.p.Size()
			live.mu.Unlock()
			h = neutralDelta(t, nc, h, asMsgpack)
			live.mu.Lock()
			after := live.p.Size()
			live.mu.Unlock()
			require.Equal(t, before, after, "the session's size after a digest at turn %d (msgpack %v)", i, asMsgpack)
		}
		require.Zero(t, svc.digests.mismatched.Load())
		require.Positive(t, svc.digests.goneOn.Load())
		require.NoError(t, svc.Close())
	}
}
