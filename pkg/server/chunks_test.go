package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/projection"
)

// bigSession serves "big" as a session held in memory whose reply is
// about 40 KiB.
func bigSession(t *testing.T) *loadedProjections {
	big := `{"role":"user","content":"` + strings.Repeat("x", 40<<10) + `"}`
	p := sessionOf(t, []string{`{"role":"user","content":"small"}`, big})
	return &loadedProjections{
		fakeProjections: &fakeProjections{view: viewOf(map[string]*projection.Session{"big": p})},
		loaded:          func(string) bool { return true },
	}
}

// fetchAll fetches the chunks a first reply names, failing the test on
// an error reply.
func fetchAll(t *testing.T, nc *nats.Conn, first *nats.Msg) []byte {
	t.Helper()
	require.Empty(t, errorCode(first), first.Header.Get(micro.ErrorHeader))
	n, err := strconv.Atoi(first.Header.Get(HeaderChunks))
	require.NoError(t, err)
	prefix := first.Header.Get(HeaderChunkSubject)
	whole := append([]byte(nil), first.Data...)
	for k := 1; k < n; k++ {
		chunk := request(t, nc, prefix+"."+strconv.Itoa(k), nil, nil)
		require.Empty(t, errorCode(chunk), "chunk %d: %s", k, chunk.Header.Get(micro.ErrorHeader))
		whole = append(whole, chunk.Data...)
	}
	require.Equal(t, first.Header.Get(HeaderReplyBytes), strconv.Itoa(len(whole)))
	return whole
}

// neighbours returns ids near id, read as a base-62 number in its last
// ten characters, as a sequential id generator would make them next.
func neighbours(id string, n int) []string {
	const digits = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	if len(id) < 10 {
		return nil
	}
	head, tail := id[:len(id)-10], id[len(id)-10:]
	var seq int64
	for _, c := range tail {
		seq = seq*62 + int64(max(0, strings.IndexRune(digits, c)))
	}
	out := make([]string, 0, n)
	for d := int64(1); d <= int64(n); d++ {
		v := seq + d
		b := make([]byte, 10)
		for i := 9; i >= 0; i-- {
			b[i] = digits[v%62]
			v /= 62
		}
		out = append(out, head+string(b))
	}
	return out
}

// Another client cannot find a chunked reply by guessing its id from one
// of its own: ids are random, not a sequence.
func TestService_ChunkIDsCannotBeGuessed(t *testing.T) {
	url := startNATS(t, 16<<10)
	startService(t, url, bigSession(t))
	attacker, victim := connect(t, url), connect(t, url)

	own := request(t, attacker, "ctxd.context.big", nil, nil)
	ownPrefix := own.Header.Get(HeaderChunkSubject)
	last := own.Header.Get(HeaderChunks)
	n, err := strconv.Atoi(last)
	require.NoError(t, err)
	fetchAll(t, attacker, own)

	first := request(t, victim, "ctxd.context.big", nil, nil)
	require.NotEqual(t, ownPrefix, first.Header.Get(HeaderChunkSubject))

	cut := strings.LastIndexByte(ownPrefix, '.')
	found := 0
	for _, id := range neighbours(ownPrefix[cut+1:], 2000) {
		// The last chunk: fetching it would make the reply forgotten.
		msg, err := attacker.Request(ownPrefix[:cut+1]+id+"."+strconv.Itoa(n-1), nil, 10*time.Second)
		require.NoError(t, err)
		if errorCode(msg) == "" {
			found++
		}
	}
	require.Zero(t, found, "chunks found by guessing")
	fetchAll(t, victim, first)
}

// Chunk ids carry at least 128 random bits.
func TestChunkID(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id := newChunkID()
		require.GreaterOrEqual(t, len(id), 22) // base64: 6 bits a character
		require.NotContains(t, id, ".")
		require.False(t, seen[id])
		seen[id] = true
	}
}

// Chunked replies that nobody fetches, asked for from many reply
// subjects, do not leave another client unable to get its reply.
func TestService_UnreadChunksDoNotStarveOthers(t *testing.T) {
	url := startNATS(t, 16<<10)
	nc0 := connect(t, url)
	svc := New(nc0, bigSession(t))
	svc.ChunkHoldBytes = 10 * 48 << 10 // about ten replies
	require.NoError(t, svc.Open())
	t.Cleanup(func() { svc.Close() })
	nc := connect(t, url)

	// 80 requests whose replies nobody reads: half from one inbox
	// prefix, half each from its own.
	for i := range 80 {
		reply := fmt.Sprintf("_INBOX.flood.%d", i)
		if i%2 == 1 {
			reply = fmt.Sprintf("_INBOX.flood%d.x", i)
		}
		require.NoError(t, nc.PublishRequest("ctxd.context.big", reply, nil))
	}
	// Handled in order, after the flood: the session is in memory.
	for range 3 {
		fetchAll(t, nc, request(t, nc, "ctxd.context.big", nil, nil))
	}
	// And from another connection.
	other := connect(t, url)
	fetchAll(t, other, request(t, other, "ctxd.context.big", nil, nil))
}

// A request with Ctxd-Accept-Chunks: push gets every chunk on its reply
// subject, in order; nothing is held.
func TestService_PushedChunks(t *testing.T) {
	url := startNATS(t, 16<<10)
	svc, _ := startService(t, url, bigSession(t))
	nc := connect(t, url)
	want := fetchAll(t, nc, request(t, nc, "ctxd.context.big", nil, nil))

	inbox := nats.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	require.NoError(t, err)
	defer sub.Unsubscribe()
	req := &nats.Msg{Subject: "ctxd.context.big", Reply: inbox, Header: nats.Header{HeaderAcceptChunks: []string{"push"}}}
	require.NoError(t, nc.PublishMsg(req))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	first, err := sub.NextMsgWithContext(ctx)
	require.NoError(t, err)
	require.Empty(t, errorCode(first))
	require.Empty(t, first.Header.Get(HeaderChunkSubject), "nothing to fetch")
	require.Equal(t, "0", first.Header.Get(HeaderChunk))
	require.Equal(t, strconv.Itoa(len(want)), first.Header.Get(HeaderReplyBytes))
	n, err := strconv.Atoi(first.Header.Get(HeaderChunks))
	require.NoError(t, err)
	require.GreaterOrEqual(t, n, 3)
	got := append([]byte(nil), first.Data...)
	for k := 1; k < n; k++ {
		m, err := sub.NextMsgWithContext(ctx)
		require.NoError(t, err)
		require.Equal(t, strconv.Itoa(k), m.Header.Get(HeaderChunk))
		require.Equal(t, strconv.Itoa(n), m.Header.Get(HeaderChunks))
		got = append(got, m.Data...)
	}
	require.Equal(t, want, got)
	svc.chunks.mu.Lock()
	defer svc.chunks.mu.Unlock()
	require.Zero(t, svc.chunks.bytes, "a pushed reply is not held")
}

func TestChunked_Hold(t *testing.T) {
	chunks := func(n int) [][]byte { return [][]byte{make([]byte, n/2), make([]byte, n-n/2)} }
	t.Run("a requester past its share loses its own oldest", func(t *testing.T) {
		c := chunked{max: 8000} // shares of 1000
		a1 := c.hold(chunks(400), "a")
		b1 := c.hold(chunks(400), "b")
		a2 := c.hold(chunks(400), "a")
		a3 := c.hold(chunks(400), "a") // a: 1200 > 1000: a1 goes
		require.NotContains(t, c.replies, a1)
		require.Contains(t, c.replies, a2)
		require.Contains(t, c.replies, a3)
		require.Contains(t, c.replies, b1)
		require.Equal(t, 800, c.owners["a"])
		require.Equal(t, 1200, c.bytes)
		require.Empty(t, c.hold(chunks(1001), "c"), "larger than a share")
	})
	t.Run("a full budget makes room, unread replies first", func(t *testing.T) {
		c := chunked{max: 4000} // shares of 500
		read := c.hold(chunks(500), "reader")
		_, _, ok := c.get(read, 0) // chunk 0 is never fetched
		require.False(t, ok)
		c.replies[read].fetched = c.replies[read].made // read from, long ago
		var unread []string
		for i := range 7 {
			unread = append(unread, c.hold(chunks(500), fmt.Sprint("x", i)))
		}
		require.Equal(t, 4000, c.bytes)
		fresh := c.hold(chunks(500), "new")
		require.NotEmpty(t, fresh)
		require.Contains(t, c.replies, read, "a reply being read stays while unread ones are held")
		require.NotContains(t, c.replies, unread[0], "the oldest unread goes")
		require.Equal(t, 4000, c.bytes)
	})
	t.Run("one reply up to the largest is held past a requester's share", func(t *testing.T) {
		c := chunked{max: 8000, one: 4000} // shares of 1000
		a1 := c.hold(chunks(400), "a")
		b1 := c.hold(chunks(3000), "b")
		require.NotEmpty(t, b1, "a reply over a share, within the largest")
		a2 := c.hold(chunks(4000), "a") // its newest; a1 goes
		require.NotEmpty(t, a2)
		require.NotContains(t, c.replies, a1)
		require.Contains(t, c.replies, b1)
		require.Equal(t, 4000, c.owners["a"])
		require.Empty(t, c.hold(chunks(4001), "c"), "larger than the largest")
		b2 := c.hold(chunks(2000), "b") // b: 5000 > its share: b1 goes
		require.NotContains(t, c.replies, b1)
		require.Equal(t, 6000, c.bytes)
		for _, id := range []string{a2, b2} {
			n := len(c.replies[id].chunks)
			_, last, ok := c.get(id, n-1)
			require.True(t, ok)
			require.True(t, last)
			c.sent(id)
		}
		require.Zero(t, c.bytes)
	})
	t.Run("the last chunk sent forgets the reply", func(t *testing.T) {
		c := chunked{max: 8000}
		id := c.hold(chunks(400), "a")
		b, last, ok := c.get(id, 1)
		require.True(t, ok)
		require.True(t, last)
		require.Len(t, b, 200)
		// Asked for, not sent (refused for room): asked again, it is there.
		_, _, ok = c.get(id, 1)
		require.True(t, ok)
		c.sent(id)
		_, _, ok = c.get(id, 1)
		require.False(t, ok)
		require.Zero(t, c.bytes)
		require.Empty(t, c.owners)
	})
}

func TestRequester(t *testing.T) {
	for subj, want := range map[string]string{
		"_INBOX.conn.req1": "_INBOX.conn",
		"_INBOX.abc":       "_INBOX.abc",
		"reply":            "reply",
		"a.b.c.d":          "a.b.c",
	} {
		require.Equal(t, want, requester(subj), subj)
	}
}

// A reply of at least LargeReplyBytes goes out on the connection of large
// replies, answered on the endpoint's goroutine or off it.
func TestService_LargeRepliesOwnConnection(t *testing.T) {
	url := startNATS(t, 0)
	nc0 := connect(t, url)
	proj := bigSession(t)
	proj.loaded = func(s string) bool { return s == "big" } // "cold" takes the load lane
	cold := proj.fakeProjections.view
	proj.fakeProjections.view = func(ctx context.Context, session string, fn func(*projection.Session)) error {
		if session == "cold" {
			session = "big"
		}
		return cold(ctx, session, fn)
	}
	svc := New(nc0, proj)
	svc.LargeReplyBytes = 32 << 10
	require.NoError(t, svc.Open())
	t.Cleanup(func() { svc.Close() })
	nc := connect(t, url)

	for _, session := range []string{"big", "cold"} {
		before, beforeLarge := nc0.Stats().OutBytes, svc.largeNC.Stats().OutBytes
		msg := request(t, nc, "ctxd.context."+session, nil, nil)
		require.Empty(t, errorCode(msg))
		require.Greater(t, len(msg.Data), 40<<10)
		require.Less(t, nc0.Stats().OutBytes-before, uint64(8<<10), session)
		require.GreaterOrEqual(t, svc.largeNC.Stats().OutBytes-beforeLarge, uint64(len(msg.Data)), session)
	}
	require.NoError(t, svc.Close())
	require.Nil(t, svc.largeNC)
}

// A large reply in chunks, pushed or fetched, from the endpoint's
// goroutine or off it, arrives whole and in order on the connection of
// large replies.
func TestService_LargeChunkedReplies(t *testing.T) {
	url := startNATS(t, 16<<10)
	proj := bigSession(t)
	proj.loaded = func(s string) bool { return s == "big" }
	view := proj.fakeProjections.view
	proj.fakeProjections.view = func(ctx context.Context, session string, fn func(*projection.Session)) error {
		return view(ctx, "big", fn)
	}
	svc := New(connect(t, url), proj)
	svc.LargeReplyBytes = 32 << 10
	require.NoError(t, svc.Open())
	t.Cleanup(func() { svc.Close() })
	nc := connect(t, url)

	want := fetchAll(t, nc, request(t, nc, "ctxd.context.big", nil, nil))
	for _, session := range []string{"big", "cold"} {
		// "cold" is answered from big's projection, as another name.
		want := bytes.Replace(want, []byte(`{"session":"big"`), []byte(`{"session":"`+session+`"`), 1)
		require.Equal(t, want, fetchAll(t, nc, request(t, nc, "ctxd.context."+session, nil, nil)), session)

		inbox := nats.NewInbox()
		sub, err := nc.SubscribeSync(inbox)
		require.NoError(t, err)
		require.NoError(t, nc.PublishMsg(&nats.Msg{Subject: "ctxd.context." + session, Reply: inbox, Header: nats.Header{HeaderAcceptChunks: []string{"push"}}}))
		var got []byte
		for k := 0; ; k++ {
			m, err := sub.NextMsg(20 * time.Second)
			require.NoError(t, err)
			require.Equal(t, strconv.Itoa(k), m.Header.Get(HeaderChunk))
			got = append(got, m.Data...)
			if n, _ := strconv.Atoi(m.Header.Get(HeaderChunks)); k == n-1 {
				break
			}
		}
		require.Equal(t, want, got, session)
		sub.Unsubscribe()
	}
}

// A reply larger than PushBytes is held for fetching even when the
// request asks for push: pushed at once, it would wait at the NATS server
// for the client, which closes a connection that falls too far behind.
// One larger than MaxReplyBytes is refused, with an error that says so.
func TestService_LargeRepliesAreFetched(t *testing.T) {
	url := startNATS(t, 16<<10)
	nc := connect(t, url)
	open := func(pushBytes, maxReplyBytes int) *Service {
		svc := New(connect(t, url), bigSession(t))
		svc.LargeReplyBytes = 8 << 10
		svc.PushBytes, svc.MaxReplyBytes = pushBytes, maxReplyBytes
		svc.ChunkHoldBytes = 8 * (16 << 10) // a requester's share is smaller than the reply
		require.NoError(t, svc.Open())
		t.Cleanup(func() { svc.Close() })
		return svc
	}
	svc := open(DefaultPushBytes, DefaultMaxReplyBytes)
	want := fetchAll(t, nc, request(t, nc, "ctxd.context.big", nil, nil))
	require.Greater(t, len(want), 32<<10)
	svc.Close()
	push := nats.Header{HeaderAcceptChunks: []string{"push"}}

	svc = open(len(want), DefaultMaxReplyBytes) // pushed whole
	first := request(t, nc, "ctxd.context.big", nil, push)
	require.Empty(t, first.Header.Get(HeaderChunkSubject))
	require.Equal(t, "0", first.Header.Get(HeaderChunk))
	svc.Close()

	svc = open(len(want)-1, DefaultMaxReplyBytes) // held, fetched a chunk at a time
	held := request(t, nc, "ctxd.context.big", nil, push)
	require.NotEmpty(t, held.Header.Get(HeaderChunkSubject), "a reply over PushBytes is fetched")
	require.Empty(t, held.Header.Get(HeaderChunk))
	before := svc.nc.Stats().OutBytes
	require.Equal(t, want, fetchAll(t, nc, held))
	require.Less(t, svc.nc.Stats().OutBytes-before, uint64(8<<10), "the chunks go out on the connection of large replies")
	svc.Close()

	open(DefaultPushBytes, len(want)-1)
	for _, hdr := range []nats.Header{nil, push} {
		msg := request(t, nc, "ctxd.context.big", nil, hdr)
		require.Equal(t, CodeInternal, errorCode(msg))
		require.Equal(t, fmt.Sprintf("context reply of %d bytes is larger than the largest this service sends, %d bytes (twice ctxd serve --max-session-bytes, at least 512 MiB)", len(want), len(want)-1),
			msg.Header.Get(micro.ErrorHeader))
	}
}

// Anything but "push" in Ctxd-Accept-Chunks gets the chunks held for
// fetching; malformed chunk subjects are a 404 and take nothing.
func TestService_HostileChunkRequests(t *testing.T) {
	url := startNATS(t, 16<<10)
	svc, _ := startService(t, url, bigSession(t))
	nc := connect(t, url)
	for _, v := range []string{"", "PUSH", "push,push", "pushed", strings.Repeat("p", 2000)} {
		msg := request(t, nc, "ctxd.context.big", nil, nats.Header{HeaderAcceptChunks: []string{v}})
		require.NotEmpty(t, msg.Header.Get(HeaderChunkSubject), "%.20q", v)
		fetchAll(t, nc, msg)
	}

	held := request(t, nc, "ctxd.context.big", nil, nil)
	prefix := held.Header.Get(HeaderChunkSubject)
	id := prefix[strings.LastIndexByte(prefix, '.')+1:]
	for _, subj := range []string{
		prefix,                        // no chunk number
		prefix + ".1.1",               // one token too many
		prefix + "x.1",                // another id
		prefix[:len(prefix)-1] + ".1", // a prefix of the id
		svc.chunkPrefix + "..1",       // empty id
		svc.chunkPrefix + "." + strings.Repeat("a", 3000) + ".1",
		"ctxd.chunk.other." + id + ".1", // another instance
		prefix + ".99999999999999999999999",
	} {
		msg, err := nc.Request(subj, nil, 2*time.Second)
		if errors.Is(err, nats.ErrNoResponders) {
			continue // no instance of that name
		}
		require.NoError(t, err, subj)
		require.Equal(t, CodeNotFound, errorCode(msg), "%.60s", subj)
	}
	require.Equal(t, fetchAll(t, nc, request(t, nc, "ctxd.context.big", nil, nil)), fetchAll(t, nc, held), "the held reply is intact")
}
