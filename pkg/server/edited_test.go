package server

import (
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/edits"
	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/protocol"
	"github.com/ctxd/ctxd/pkg/record"
	"github.com/ctxd/ctxd/pkg/render"
)

// toolSession has a prompt, then n calls each answered by a result of
// about size bytes, and a screenshot.
func toolSession(t testing.TB, n, size int) *projection.Session {
	recs := []string{`{"role":"user","content":"fix the build"}`}
	for i := range n {
		recs = append(recs,
			fmt.Sprintf(`{"role":"assistant","content":[{"type":"thinking","thinking":"t%d","signature":"s"},{"type":"toolCall","id":"c%d","name":"read","arguments":{"path":"f%d"}}]}`, i, i, i),
			fmt.Sprintf(`{"role":"toolResult","toolCallId":"c%d","toolName":"read","content":[{"type":"text","text":%q}]}`, i, strings.Repeat("x", size)))
	}
	return sessionOf(t, recs)
}

// A request with edits gets the context those edits leave, in every
// format and encoding, with their report; the same request without them
// gets the reply it always had.
func TestService_Edits(t *testing.T) {
	url := startNATS(t, 0)
	p := toolSession(t, 8, 4000)
	proj := &fakeProjections{view: viewOf(map[string]*projection.Session{"s1": p})}
	startService(t, url, proj)
	nc := connect(t, url)

	want := string(replyJSON("s1", p))
	msg := request(t, nc, "ctxd.context.s1", []byte(`{}`), nil)
	require.Equal(t, want, string(withoutDigest(t, msg.Data)), "no edits: the reply of today, with its digest")

	for _, f := range render.Formats {
		for _, asMsgpack := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/msgpack=%v", f, asMsgpack), func(t *testing.T) {
				before := render.Tokens(f, p.Messages(), render.Options{})
				edited := fmt.Sprintf(`{"tool_results":{"trigger_tokens":%d,"keep":2},"thinking":{"keep_turns":1}}`, before-1500)
				body := []byte(fmt.Sprintf(`{"format":%q,"edits":%s}`, f, edited))
				if asMsgpack {
					v, err := record.DecodeJSON(body)
					require.NoError(t, err)
					body, err = record.MarshalMsgpack(v)
					require.NoError(t, err)
				}
				msg := request(t, nc, "ctxd.context.s1", body, nil)
				require.Empty(t, errorCode(msg), msg.Header.Get(micro.ErrorHeader))
				var v any
				var err error
				plain := withoutDigest(t, msg.Data)
				if asMsgpack {
					v, err = record.DecodeMsgpack(plain)
				} else {
					v, err = record.DecodeJSON(plain)
				}
				require.NoError(t, err)
				m := v.(*record.Map)
				keys := []string{}
				for _, mem := range m.Members {
					keys = append(keys, mem.Key)
				}
				require.Equal(t, "edits", keys[len(keys)-1])
				require.Contains(t, keys, "usage")

				c, err := edits.ParseJSON([]byte(edited))
				require.NoError(t, err)
				msgs, seqs, rep := edits.Apply(p.Messages(), c, edits.Options{
					Seqs:        p.MessageSeqs(nil),
					Tokens:      func(m []any) int { return render.Tokens(f, m, render.Options{}) },
					ValueTokens: func(v any) int { return render.ValueTokens(f, v) },
				})
				require.Len(t, rep.Cleared, 2, "1500 over: two results of about 1000 tokens")
				require.Len(t, rep.ThinkingRemoved, 7)
				wantBody, _ := render.Render(f, msgs, render.Options{Seqs: seqs})
				for _, mem := range wantBody.Fields.Members {
					requireEqualValues(t, mem.Value, field(m, mem.Key), mem.Key)
				}
				requireEqualValues(t, rep.Map(), field(m, "edits"), "edits")
				u := field(m, "usage").(*record.Map)
				n, _ := record.IntegerString(field(u, "input_tokens"))
				require.Equal(t, fmt.Sprint(rep.TokensAfter), n, "usage is the edited body's")
				require.Less(t, rep.TokensAfter, rep.TokensBefore)
			})
		}
	}

	t.Run("budget as trigger", func(t *testing.T) {
		msg := request(t, nc, "ctxd.context.s1", []byte(`{"format":"anthropic","budget_tokens":100,"edits":{"tool_results":{"keep":1}}}`), nil)
		require.Empty(t, errorCode(msg), msg.Header.Get(micro.ErrorHeader))
		v, err := record.DecodeJSON(msg.Data)
		require.NoError(t, err)
		cleared := field(field(v.(*record.Map), "edits").(*record.Map), "tool_results_cleared").([]any)
		require.Len(t, cleared, 7, "all but the latest")
		require.Contains(t, string(msg.Data), `"budget":{`)
	})
	t.Run("refused", func(t *testing.T) {
		for body, has := range map[string]string{
			`{"edits":{"tool_results":{}}}`:             "edits.tool_results.trigger_tokens is required",
			`{"edits":{"images":{"keep":-1}}}`:          "edits.images.keep must be a non-negative integer",
			`{"edits":{"pictures":{}}}`:                 "edits.pictures: unknown kind",
			`{"edits":{"thinking":{"keep_turns":1.5}}}`: "edits.thinking.keep_turns must be a non-negative integer",
		} {
			msg := request(t, nc, "ctxd.context.s1", []byte(body), nil)
			require.Equal(t, CodeBadRequest, errorCode(msg), body)
			require.Contains(t, msg.Header.Get(micro.ErrorHeader), has, body)
		}
	})
	t.Run("unknown session", func(t *testing.T) {
		msg := request(t, nc, "ctxd.context.nobody", []byte(`{"wait_ms":0,"edits":{"thinking":{}}}`), nil)
		require.Empty(t, errorCode(msg), msg.Header.Get(micro.ErrorHeader))
		require.Contains(t, string(msg.Data), `"messages":[]`)
		require.Contains(t, string(msg.Data), `"edits":{"tool_results_cleared":[]`)
	})
	// The cached replies are the unedited ones still.
	msg = request(t, nc, "ctxd.context.s1", []byte(`{}`), nil)
	require.Equal(t, want, string(withoutDigest(t, msg.Data)))
	got := request(t, nc, "ctxd.context.s1", []byte(`{"format":"anthropic"}`), nil)
	require.NotContains(t, string(got.Data), "tool result cleared")
}

// A request with edits that also asks for a digest, or names a reply it
// holds, gets the edited context: the digest is of the edited messages,
// and a delta against an edited reply puts the next edited one back
// together.
func TestService_EditsWithDigest(t *testing.T) {
	url := startNATS(t, 0)
	p := toolSession(t, 8, 4000)
	proj := &fakeProjections{view: viewOf(map[string]*projection.Session{"s1": p})}
	startService(t, url, proj)
	nc := connect(t, url)

	for _, f := range render.Formats {
		t.Run(string(f), func(t *testing.T) {
			edited := `{"thinking":{"keep_turns":1},"images":{"keep":0,"batch":1}}`
			plain := request(t, nc, "ctxd.context.s1", []byte(fmt.Sprintf(`{"format":%q,"edits":%s}`, f, edited)), nil)
			require.Empty(t, errorCode(plain), plain.Header.Get(micro.ErrorHeader))
			require.Contains(t, string(plain.Data), `"edits":{`)

			msg := request(t, nc, "ctxd.context.s1", []byte(fmt.Sprintf(`{"format":%q,"digest":true,"edits":%s}`, f, edited)), nil)
			require.Empty(t, errorCode(msg), msg.Header.Get(micro.ErrorHeader))
			v, err := record.DecodeJSON(msg.Data)
			require.NoError(t, err)
			m := v.(*record.Map)
			require.NotNil(t, field(m, "edits"), "the edits' report")
			d, ok := field(m, "digest").(string)
			require.True(t, ok, "a digest: %s", msg.Data)
			pv, err := record.DecodeJSON(plain.Data)
			require.NoError(t, err)
			for _, mem := range pv.(*record.Map).Members {
				requireEqualValues(t, mem.Value, field(m, mem.Key), mem.Key)
			}

			seq, _ := record.IntegerString(field(m, "seq"))
			again := request(t, nc, "ctxd.context.s1", []byte(fmt.Sprintf(`{"format":%q,"have_seq":%s,"have_digest":%q,"edits":%s}`, f, seq, d, edited)), nil)
			require.Empty(t, errorCode(again), again.Header.Get(micro.ErrorHeader))
			require.Contains(t, string(again.Data), `"edits":{`)
			require.Contains(t, string(again.Data), d, "the same context, the same digest")
		})
	}
}

// An edited reply asked after the unedited one of the same context, and
// the unedited one after it, each carry their own messages' digest: an
// edited reply's chain is its own, never taken for the unedited reply's.
func TestService_EditedAndPlainDigests(t *testing.T) {
	url := startNATS(t, 0)
	p := toolSession(t, 8, 4000)
	proj := &fakeProjections{view: viewOf(map[string]*projection.Session{"s1": p})}
	startService(t, url, proj)
	nc := connect(t, url)

	edited := `{"thinking":{"keep_turns":1},"images":{"keep":0,"batch":1},"tool_results":{"trigger_tokens":1,"keep":1}}`
	for _, f := range render.Formats {
		for _, asMsgpack := range []bool{false, true} {
			var hdr nats.Header
			if asMsgpack {
				hdr = nats.Header{"Accept": []string{"application/msgpack"}}
			}
			ask := func(body string) []byte {
				if asMsgpack {
					v, err := record.DecodeJSON([]byte(body))
					require.NoError(t, err)
					mp, err := record.AppendMsgpack(nil, v)
					require.NoError(t, err)
					return okReply(t, request(t, nc, "ctxd.context.s1", mp, hdr))
				}
				return okReply(t, request(t, nc, "ctxd.context.s1", []byte(body), nil))
			}
			var digests []string
			for _, body := range []string{
				fmt.Sprintf(`{"format":%q}`, f),
				fmt.Sprintf(`{"format":%q,"edits":%s}`, f, edited),
				fmt.Sprintf(`{"format":%q}`, f),
			} {
				reply := ask(body)
				want, err := protocol.ComputeDigest(reply)
				require.NoError(t, err, "%s msgpack=%v %s", f, asMsgpack, body)
				r, err := protocol.ReadReply(reply)
				require.NoError(t, err)
				require.Equal(t, want, r.Digest, "%s msgpack=%v %s: the digest of its own messages", f, asMsgpack, body)
				digests = append(digests, r.Digest)
			}
			require.NotEqual(t, digests[0], digests[1], "%s: the edits changed the context", f)
			require.Equal(t, digests[0], digests[2], f)
		}
	}
}
