//go:build !slow

package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
)

// Every fixture, published over the wire as JSON and as msgpack, comes
// back as CONTEXT.md says, with the reply in the request's format.
func TestService_FixturesOverTheWire(t *testing.T) {
	a := startApp(t, t.TempDir())
	c := newClient(t, a.URL())
	for i, fc := range loadFixtures(t) {
		for _, asMsgpack := range []bool{false, true} {
			format := map[bool]string{false: "json", true: "msgpack"}[asMsgpack]
			t.Run(format+"/"+fc.Name, func(t *testing.T) {
				session := sessionName(format, i, fc.Name)
				var last uint64
				for _, r := range fc.Records {
					last = c.publishValue(session, r, asMsgpack)
				}
				got := c.fetchSeq(session, last, asMsgpack)
				require.Equal(t, session, got.Session)
				if len(fc.Records) > 0 {
					require.Equal(t, last, got.Seq)
				}
				want := asPublished(t, fc.Expect, asMsgpack).([]any)
				requireMessages(t, want, got.Messages)
			})
		}
	}
}

// A session nobody wrote to is an empty context, not an error; an empty
// body with Accept: application/msgpack gets msgpack.
func TestService_EmptySessionAndFormats(t *testing.T) {
	a := startApp(t, t.TempDir())
	c := newClient(t, a.URL())
	r, serr := c.fetch("nobody", nil, nil)
	require.Nil(t, serr)
	require.Equal(t, uint64(0), r.Seq)
	require.NotNil(t, r.Messages)
	require.Empty(t, r.Messages)

	msg := c.request("ctxd.context.nobody", nil, nil)
	require.Equal(t, `{"session":"nobody","seq":0,"messages":[],"dropped":{"unpaired_calls":[],"orphan_results":[],"images_omitted":0},"digest":"`+emptyDigest+`"}`, string(msg.Data))
	msg = c.request("ctxd.context.nobody", []byte(`{"digest":false}`), nil)
	require.Equal(t, `{"session":"nobody","seq":0,"messages":[],"dropped":{"unpaired_calls":[],"orphan_results":[],"images_omitted":0}}`, string(msg.Data))

	hdr := nats.Header{}
	hdr.Set("Accept", "application/msgpack")
	msg = c.request("ctxd.context.nobody", nil, hdr)
	require.False(t, record.IsJSON(msg.Data))
	require.Equal(t, "nobody", decodeReply(t, msg.Data).Session)

	// Unknown request fields are ignored.
	seq := c.publish("fmt", []byte(`{"role":"user","content":"hi"}`))
	r, serr = c.fetch("fmt", []byte(fmt.Sprintf(`{"min_seq":%d,"future_field":[1,2]}`, seq)), nil)
	require.Nil(t, serr)
	requireMessages(t, []any{mustDecode(t, `{"role":"user","content":"hi"}`)}, r.Messages)
}

// Many publishers over many sessions, a fetch with min_seq after every
// publish: every answer reflects exactly the records published so far.
func TestService_ConcurrentPublishersReadTheirWrites(t *testing.T) {
	a := startApp(t, t.TempDir())
	const writers, sessionsPer = 6, 4
	perSession := 40
	if testing.Short() {
		perSession = 10
	}
	fixtures := loadFixtures(t)
	var pool []any
	for _, f := range fixtures {
		pool = append(pool, f.Records...)
	}
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			c := newClient(t, a.URL())
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			published := map[string][]projection.Record{}
			for n := 0; n < perSession*sessionsPer; n++ {
				session := fmt.Sprintf("w%d-s%d", w, rng.IntN(sessionsPer))
				asMsgpack := rng.IntN(2) == 0
				rec := asPublished(t, pool[rng.IntN(len(pool))], asMsgpack)
				seq := c.publishValue(session, rec, asMsgpack)
				published[session] = append(published[session], projection.Record{Seq: seq, Value: rec})
				replyMsgpack := rng.IntN(2) == 0
				got := c.fetchSeq(session, seq, replyMsgpack)
				if got.Seq != seq {
					errs <- fmt.Errorf("%s: published seq %d, reply seq %d", session, seq, got.Seq)
					return
				}
				want := projection.Build(published[session], projection.Options{})
				want.Messages = asReplied(t, want.Messages, replyMsgpack).([]any)
				if !record.Equal(want.Messages, got.Messages) {
					wj, _ := record.MarshalJSON(want.Messages)
					gj, _ := record.MarshalJSON(got.Messages)
					var recs []any
					for _, r := range published[session] {
						recs = append(recs, r.Value)
					}
					rj, _ := record.MarshalJSON(recs)
					errs <- fmt.Errorf("%s after seq %d: stale or wrong context at %s\nwant %s\n got %s\nrecords %s", session, seq, diffPath("", want.Messages, got.Messages), wj, gj, rj)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// Garbage in one session is skipped, reported and listed; it changes
// nothing elsewhere, and its session's later records still apply.
func TestService_MalformedRecords(t *testing.T) {
	a := startApp(t, t.TempDir())
	c := newClient(t, a.URL())
	good := []byte(`{"role":"user","content":"fine"}`)
	c.publish("clean", good)
	bad := map[string][]byte{
		"garbage":     {0xc1, 0xff, 0x00},
		"not a map":   []byte(`[1,2,3]`),
		"truncated":   []byte(`{"role":"user","content":`),
		"bad utf8":    []byte("{\"role\":\"user\",\"content\":\"\xff\"}"),
		"msgpack ext": {0x81, 0xa1, 'x', 0xd4, 0x05, 0x01},
		"empty":       {},
		"bom":         []byte("\xef\xbb\xbf{\"role\":\"user\",\"content\":\"after a mark\"}"),
	}
	var lastBad uint64
	seqs := map[string]uint64{}
	for name, data := range bad {
		lastBad = c.publish("dirty", data)
		seqs[name] = lastBad
	}
	seqBadSubject := c.publish("dirty.nested", good)
	last := c.publish("dirty", good)
	require.Greater(t, last, lastBad)

	r := c.fetchSeq("dirty", last, false)
	require.Equal(t, last, r.Seq)
	requireMessages(t, []any{mustDecode(t, string(good))}, r.Messages)
	r = c.fetchSeq("clean", last, true)
	requireMessages(t, []any{mustDecode(t, string(good))}, r.Messages)

	// A reply may come from the stream before the ingest meets the
	// records; the misaddressed one only the ingest meets.
	require.NoError(t, a.Wait(context.Background(), last, 20*time.Second))
	msg := c.request("ctxd.rejected", nil, nil)
	v := mustDecode(t, string(msg.Data))
	list := v.([]any)
	require.Len(t, list, len(bad)+1)
	subjects := map[string]int{}
	for _, e := range list {
		m := e.(*record.Map)
		s, _ := m.String("subject")
		subjects[s]++
		reason, _ := m.String("reason")
		require.NotEmpty(t, reason)
		if seq, _ := m.Get("seq"); seq == int64(seqs["bom"]) {
			require.Contains(t, reason, "byte order mark before the JSON text: UTF-8's EF BB BF", "the reason names the mark")
		}
		if s == "transcripts.dirty.nested" {
			seq, _ := m.Get("seq")
			require.Equal(t, int64(seqBadSubject), seq, "the listed sequence is the misaddressed record's")
		}
	}
	require.Equal(t, len(bad), subjects["transcripts.dirty"])
	require.Equal(t, 1, subjects["transcripts.dirty.nested"])
	require.Equal(t, uint64(len(bad)+1), a.Store().Stats().Rejected)
}

// Bad requests get 400 with a description; an expired wait 504.
func TestService_BadRequests(t *testing.T) {
	a := startApp(t, t.TempDir())
	c := newClient(t, a.URL())
	msgpackArray, _ := record.MarshalMsgpack([]any{int64(1)})
	cases := map[string][]byte{
		"array":            []byte(`[1]`),
		"string":           []byte(`"x"`),
		"garbage":          {0xc1},
		"truncated":        []byte(`{"min_seq":`),
		"msgpack array":    msgpackArray,
		"negative min_seq": []byte(`{"min_seq":-1}`),
		"fraction min_seq": []byte(`{"min_seq":1.5}`),
		"string min_seq":   []byte(`{"min_seq":"5"}`),
		"null wait_ms":     []byte(`{"wait_ms":null}`),
		"negative wait_ms": []byte(`{"wait_ms":-5}`),
		"oversized":        []byte(`{"pad":"` + strings.Repeat("x", 70<<10) + `"}`),
		"byte order mark":  []byte("\xef\xbb\xbf{\"min_seq\":1}"),
		"min_seq 2^64":     []byte(`{"min_seq":18446744073709551616}`),
		"wait_ms 2^64":     []byte(`{"wait_ms":18446744073709551616}`),
		"deep":             []byte(strings.Repeat(`{"a":`, 100) + "1" + strings.Repeat("}", 100)),
	}
	for name, body := range cases {
		t.Run(name, func(t *testing.T) {
			_, serr := c.fetch("s1", body, nil)
			require.NotNil(t, serr)
			require.Equal(t, "400", serr.code)
			require.NotEmpty(t, serr.desc)
		})
	}
	for _, id := range []string{strings.Repeat("x", 129), "caf\u00e9", "a+b"} {
		_, serr := c.fetch(id, nil, nil)
		require.NotNil(t, serr, id)
		require.Equal(t, "400", serr.code, id)
	}
	_, serr := c.fetch("caf\u00e9", nil, nil)
	require.Equal(t, `invalid session id: "café" has 'é' (U+00E9) at character 4; use only A-Z a-z 0-9 _ -`, serr.desc)
	_, serr = c.fetch("s1", []byte("\xef\xbb\xbf{}"), nil)
	require.Equal(t, "bad request body: byte order mark before the JSON text: UTF-8's EF BB BF; remove it", serr.desc)

	// 2.0 is an integer; a min_seq past the stream's end waits: 504.
	_, serr = c.fetch("s1", []byte(`{"min_seq":2.0,"wait_ms":0}`), nil)
	require.NotNil(t, serr)
	require.Equal(t, "504", serr.code)
	_, serr = c.fetch("s1", []byte(`{"min_seq":18446744073709551615,"wait_ms":50}`), nil)
	require.NotNil(t, serr)
	require.Equal(t, "504", serr.code)
	require.Equal(t, "min_seq not reached within wait_ms", serr.desc)
	// One no 64-bit sequence holds is refused at once, whatever wait_ms
	// says.
	_, serr = c.fetch("s1", []byte(`{"min_seq":99999999999999999999999,"wait_ms":30000}`), nil)
	require.NotNil(t, serr)
	require.Equal(t, "400", serr.code)
	require.Equal(t, "bad request body: min_seq must be at most 18446744073709551615, got 99999999999999999999999", serr.desc)
}

// A request waiting for min_seq delays neither other sessions nor
// requests that need no wait, and is answered once the record lands.
func TestService_WaitingRequestBlocksNobody(t *testing.T) {
	a := startApp(t, t.TempDir())
	c := newClient(t, a.URL())
	seq := c.publish("other", []byte(`{"role":"user","content":"x"}`))

	waiting := make(chan *reply, 1)
	go func() {
		r, _ := c.fetch("later", []byte(fmt.Sprintf(`{"min_seq":%d,"wait_ms":30000}`, seq+1)), nil)
		waiting <- r
	}()
	// While it waits, other requests are answered.
	for i := 0; i < 20; i++ {
		r := c.fetchSeq("other", seq, i%2 == 0)
		require.Equal(t, seq, r.Seq)
	}
	select {
	case <-waiting:
		t.Fatal("the waiting request was answered before its record existed")
	default:
	}
	next := c.publish("later", []byte(`{"role":"user","content":"now"}`))
	require.Equal(t, seq+1, next)
	select {
	case r := <-waiting:
		require.NotNil(t, r)
		require.Equal(t, next, r.Seq)
		require.Len(t, r.Messages, 1)
	case <-time.After(20 * time.Second):
		t.Fatal("the waiting request was not answered after its record landed")
	}
}

// ctxd is a NATS service: $SRV.PING, INFO and STATS answer.
func TestService_Discovery(t *testing.T) {
	a := startApp(t, t.TempDir())
	c := newClient(t, a.URL())
	for _, verb := range []string{"PING", "INFO", "STATS"} {
		msg := c.request("$SRV."+verb+".ctxd", nil, nil)
		v := mustDecode(t, string(msg.Data)).(*record.Map)
		name, _ := v.String("name")
		require.Equal(t, "ctxd", name, verb)
	}
	msg := c.request("$SRV.INFO.ctxd", nil, nil)
	require.Contains(t, string(msg.Data), "ctxd.context.*")
}

// A restarted service on the same store serves exactly what it served.
func TestService_RestartGivesIdenticalContexts(t *testing.T) {
	dir := t.TempDir()
	a := startApp(t, dir)
	c := newClient(t, a.URL())
	sessions := map[string]uint64{}
	for i, fc := range loadFixtures(t) {
		s := sessionName("r", i, fc.Name)
		for _, r := range fc.Records {
			sessions[s] = c.publishValue(s, r, i%2 == 0)
		}
	}
	before := map[string][]byte{}
	for s, seq := range sessions {
		msg := c.request("ctxd.context."+s, []byte(fmt.Sprintf(`{"min_seq":%d}`, seq)), nil)
		before[s] = msg.Data
	}
	require.NoError(t, a.Close())

	b := startApp(t, dir)
	c2 := newClient(t, b.URL())
	for s := range sessions {
		msg := c2.request("ctxd.context."+s, nil, nil)
		require.Equal(t, string(before[s]), string(msg.Data), s)
	}
	// And it keeps ingesting after the restart.
	s := "after-restart"
	seq := c2.publish(s, []byte(`{"role":"user","content":"again"}`))
	r := c2.fetchSeq(s, seq, false)
	require.Len(t, r.Messages, 1)
}

// emptyDigest is the digest of an empty message array in the neutral
// format: SHA-256 of the 32 zero bytes of c_0 (PROTOCOL.md, "Delta
// replies").
const emptyDigest = "66687aadf862bd776c8fc18b8e9f8e20089714856ee233b3902a591d0d5f2925"
