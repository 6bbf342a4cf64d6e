package store

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/ctxd/ctxd/internal/sessiongen"
	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
	"github.com/stretchr/testify/require"
)

// TestStore_ApplyCanonicalRecords: a record written as its canonical JSON
// is held as that JSON, decoded only as far as the passes read
// (projection.Session.ApplyShaped), or copied into its session's JSON
// rendering rather than encoded again (projection.Session.ApplyJSON). Over generated sessions whose records
// come as canonical JSON, as JSON with white space or escapes the encoder
// does not write, or as msgpack, each in a buffer of its own as the
// ingest gets them, the store's view equals Build over the records after
// every few records, in JSON, msgpack and as messages, and the buffers
// are never written. Now and then the
// session is evicted, so that it loads again (and is fitted) before the
// records after.
func TestStore_ApplyCanonicalRecords(t *testing.T) {
	sessions := 200
	if testing.Short() {
		sessions = 40
	}
	for seed := range uint64(sessions) {
		r := rand.New(rand.NewPCG(seed, 7))
		g := sessiongen.New(r, sessiongen.Rules{Convert: projection.Convert, IsValidCompaction: projection.IsValidCompaction})
		opt := projection.Options{BrowserTools: g.BrowserTools()}
		values := g.Session(20 + r.IntN(80))
		if seed%3 == 0 {
			values = g.Browsing(20 + r.IntN(40))
		}
		l := newFakeLoader()
		s := newStore(t)
		s.Loader = l
		s.Decoder = record.Decoder{ShareInput: true, ShareShort: true} // as the app's store
		s.Options = opt
		var recs []projection.Record
		var sent, kept [][]byte
		for i, v := range values {
			data, ok := encodeAs(t, v, r.IntN(4))
			if !ok {
				continue
			}
			seq := l.publish("s", data)
			s.Apply("s", seq, data)
			if r.IntN(10) == 0 {
				s.Evict("s")
			}
			sent, kept = append(sent, data), append(kept, bytes.Clone(data))
			if m, err := record.Decode(data); err == nil {
				recs = append(recs, projection.Record{Seq: seq, Value: m})
			}
			if r.IntN(5) > 0 && i < len(values)-1 {
				continue
			}
			built := projection.Build(recs, opt).Messages
			want, err := record.AppendJSON(nil, built)
			require.NoError(t, err)
			wantMsgpack, mpErr := record.AppendMsgpack(nil, built)
			// Each rendering first now and then: a message held as its
			// record's JSON is decoded for the msgpack and list renderings.
			checks := []func(p *projection.Session){
				func(p *projection.Session) {
					require.Equal(t, string(want), string(p.AppendJSON(nil)), "seed %d, after seq %d", seed, seq)
				},
				func(p *projection.Session) {
					if mpErr == nil {
						require.Equal(t, wantMsgpack, p.AppendMsgpack(nil), "seed %d, after seq %d: msgpack", seed, seq)
					}
				},
				func(p *projection.Session) {
					require.True(t, record.Equal(built, p.Messages()), "seed %d, after seq %d: messages", seed, seq)
				},
			}
			r.Shuffle(len(checks), func(i, j int) { checks[i], checks[j] = checks[j], checks[i] })
			require.NoError(t, s.View(context.Background(), "s", func(p *projection.Session) {
				for _, check := range checks {
					check(p)
				}
			}))
		}
		for i := range sent {
			require.Equal(t, kept[i], sent[i], "seed %d: a record's buffer was written", seed)
		}
	}
}

// encodeAs encodes a record value: 0 and 1 as its canonical JSON, 2 as
// indented JSON, 3 as msgpack; ok is false for a value with no such form.
func encodeAs(t *testing.T, v any, how int) (data []byte, ok bool) {
	js, err := record.MarshalJSON(v)
	if err != nil {
		return nil, false
	}
	switch how {
	case 2:
		var b bytes.Buffer
		require.NoError(t, json.Indent(&b, js, "", " "))
		return b.Bytes(), true
	case 3:
		mp, err := record.MarshalMsgpack(v)
		if err != nil {
			return nil, false
		}
		return mp, true
	}
	if _, canonical, err := (record.Decoder{}).DecodeCanonical(js); err == nil && !canonical {
		panic(fmt.Sprintf("the encoding %s is not canonical", js))
	}
	return js, true
}
