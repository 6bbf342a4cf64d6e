package edits_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/edits"
	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
	"github.com/ctxd/ctxd/pkg/render"
)

// FuzzApply: the first line is the edits, the others records, JSON
// lines. Whatever they hold, Apply does not panic, leaves the messages
// given as they were, keeps every call and result, and gives the same
// result twice.
//
//	go test ./pkg/edits -run '^$' -fuzz '^FuzzApply$' -fuzztime 1m -parallel 1
func FuzzApply(f *testing.F) {
	f.Add([]byte(`{"tool_results":{"trigger_tokens":0,"keep":0,"clear_inputs":true},"thinking":{"keep_turns":0},"images":{"keep":0,"batch":1}}
{"role":"user","content":"go"}
{"role":"assistant","content":[{"type":"thinking","thinking":"x"},{"type":"toolCall","id":"a","name":"bash","arguments":{"c":1}}]}
{"role":"toolResult","toolCallId":"a","content":[{"type":"text","text":"a long enough output to be worth clearing, surely"},{"type":"image","data":"iVBORw0KGgo=","mimeType":"image/png"}]}
{"role":"assistant","content":"","tool_calls":[{"id":"b","function":{"name":"grep","arguments":"{\"q\":1}"}}]}
{"role":"tool","tool_call_id":"b","content":"another long enough output to be worth clearing"}
{"role":"assistant","content":[{"type":"tool_use","id":"c","name":"read","input":{}}]}
{"role":"user","content":[{"type":"tool_result","tool_use_id":"c","content":[{"type":"image","data":"iVBORw0KGgo="}]},{"type":"image","data":"x"}]}`))
	f.Add([]byte("{\"tool_results\":{\"trigger_tokens\":5,\"keep\":1,\"clear_at_least_tokens\":3}}\n{\"role\":\"assistant\",\"content\":[{\"type\":\"toolCall\",\"id\":\"a\"},7,null]}\n{\"role\":\"toolResult\",\"toolCallId\":\"a\",\"content\":{\"x\":[1,2]}}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		lines := bytes.Split(data, []byte("\n"))
		if len(lines) > 64 {
			return
		}
		cfg, err := edits.ParseJSON(lines[0])
		if err != nil {
			return
		}
		var recs []projection.Record
		for i, l := range lines[1:] {
			if v, err := record.DecodeJSON(l); err == nil {
				recs = append(recs, projection.Record{Seq: uint64(i + 1), Value: v})
			}
		}
		msgs := projection.Build(recs, projection.Options{}).Messages
		before, err := record.MarshalJSON(msgs)
		if err != nil {
			return // a value JSON cannot carry
		}
		for _, f := range render.Formats {
			opt := options(f, nil)
			opt.HasBudget = true
			out, seqs, _ := edits.Apply(msgs, cfg, opt)
			require.Len(t, seqs, len(out))
			after, _ := record.MarshalJSON(msgs)
			require.Equal(t, string(before), string(after), "the messages given are not modified")
			c0, r0 := pairs(msgs)
			c1, r1 := pairs(out)
			require.Equal(t, c0, c1)
			require.Equal(t, r0, r1)
			again, _, _ := edits.Apply(msgs, cfg, opt)
			require.Equal(t, mustJSON(t, out), mustJSON(t, again))
		}
	})
}
