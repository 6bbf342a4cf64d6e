package render_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/record"
	"github.com/ctxd/ctxd/pkg/render"
)

// decodeMessages decodes JSON records that are already neutral messages.
func decodeMessages(t *testing.T, lines ...string) []any {
	t.Helper()
	msgs := make([]any, len(lines))
	for i, l := range lines {
		v, err := record.DecodeJSON([]byte(l))
		require.NoError(t, err, l)
		msgs[i] = v
	}
	return msgs
}

// A user message whose only content is an image the format does not take
// precedes nothing of the user's once the image is removed: a call right
// after it cannot be sent to Gemini, which wants a user turn before a
// function call turn. The other formats keep the call.
func TestRender_OpeningUserImageRefused(t *testing.T) {
	images := map[string]string{
		"image_url by URL":   `{"type":"image_url","image_url":{"url":"https://example.com/a.png"}}`,
		"source by URL":      `{"type":"image","source":{"type":"url","url":"https://example.com/a.png"}}`,
		"inline image/bmp":   `{"type":"image","data":"Qk0=","mimeType":"image/bmp"}`,
		"data URL image/bmp": `{"type":"image_url","image_url":{"url":"data:image/bmp;base64,Qk0="}}`,
	}
	for name, img := range images {
		msgs := decodeMessages(t,
			`{"role":"user","content":[`+img+`]}`,
			`{"role":"assistant","content":[{"type":"toolCall","id":"c1","name":"read","arguments":{}}]}`,
			`{"role":"toolResult","toolCallId":"c1","content":"r"}`,
			`{"role":"user","content":"next"}`,
		)
		for _, f := range providers {
			t.Run(name+"/"+string(f), func(t *testing.T) {
				raw, body, rep := rendered(t, f, msgs, render.Options{})
				requireValid(t, f, body, raw, name)
				require.NoError(t, conserved(f, msgs, body, rep))
				if f == render.Gemini {
					require.Contains(t, rep.Changes, render.Change{Kind: render.CallRemoved, Message: 1, Block: 0, ID: "c1", Reason: "a function call turn must follow a user turn"})
				}
			})
		}
	}
	// An image Gemini takes is a user turn: the call stays.
	msgs := decodeMessages(t,
		`{"role":"user","content":[{"type":"image","data":"iVBORw0K","mimeType":"image/png"}]}`,
		`{"role":"assistant","content":[{"type":"toolCall","id":"c1","name":"read","arguments":{}}]}`,
		`{"role":"toolResult","toolCallId":"c1","content":"r"}`,
	)
	raw, body, rep := rendered(t, render.Gemini, msgs, render.Options{})
	requireValid(t, render.Gemini, body, raw, "png")
	require.Empty(t, rep.Changes)
	require.Contains(t, string(raw), `"functionCall"`)
}

// A block removed from a tool result is reported at its own index in the
// message's content: without one the report would say the whole message
// went (RENDER.md section 6). A result that is a tool_result block is
// one block of its user message, reported at that block's index.
func TestRender_ResultBlocksReported(t *testing.T) {
	msgs := decodeMessages(t,
		`{"role":"user","content":"go"}`,
		`{"role":"assistant","content":[{"type":"toolCall","id":"c1","name":"read","arguments":{}},{"type":"toolCall","id":"c2","name":"read","arguments":{}}]}`,
		`{"role":"toolResult","toolCallId":"c1","content":[{"type":"text","text":"kept"},"stray",{"type":"text","text":" "},{"type":"video"},{"type":"image","data":"Qk0=","mimeType":"image/bmp"},{"type":"image"}]}`,
		`{"role":"user","content":[{"type":"text","text":"and"},{"type":"tool_result","tool_use_id":"c2","content":[{"type":"text","text":"two"},{"type":"image","data":"Qk0=","mimeType":"image/bmp"},{"type":"text","text":""}]}]}`,
	)
	want := []render.Change{
		{Kind: render.BlockRemoved, Message: 2, Block: 1, Seq: 3, Reason: "not a block in a tool result"},
		{Kind: render.BlockRemoved, Message: 2, Block: 2, Seq: 3, Reason: "empty text in a tool result"},
		{Kind: render.BlockRemoved, Message: 2, Block: 3, Seq: 3, Reason: `unsupported block type "video" in a tool result`},
		{Kind: render.BlockRemoved, Message: 2, Block: 5, Seq: 3, Reason: "image without data in a tool result"},
		{Kind: render.BlockRemoved, Message: 2, Block: 4, Seq: 3, Reason: `image of type "image/bmp"`},
		{Kind: render.BlockRemoved, Message: 3, Block: 1, Seq: 4, Reason: "empty text in a tool result"},
		{Kind: render.BlockRemoved, Message: 3, Block: 1, Seq: 4, Reason: `image of type "image/bmp"`},
	}
	for _, f := range providers {
		t.Run(string(f), func(t *testing.T) {
			raw, body, rep := rendered(t, f, msgs, render.Options{Seqs: []uint64{1, 2, 3, 4}})
			requireValid(t, f, body, raw, "results")
			var got []render.Change
			for _, c := range rep.Changes {
				if c.Kind == render.BlockRemoved {
					got = append(got, c)
				}
			}
			require.Equal(t, want, got)
			for _, c := range got {
				require.Contains(t, c.Map().Members, record.Member{Key: "block", Value: int64(c.Block)})
			}
		})
	}
}

// Image data that is not base64 is refused by every provider: the image
// is removed and reported, whatever its place, and nothing else changes.
func TestRender_ImageDataNotBase64(t *testing.T) {
	msgs := decodeMessages(t,
		`{"role":"user","content":[{"type":"text","text":"look"},{"type":"image","data":"iVBOR","mimeType":"image/png"},{"type":"image","data":"iVBORw0K","mimeType":"image/png"}]}`,
		`{"role":"assistant","content":[{"type":"toolCall","id":"c1","name":"read","arguments":{}}]}`,
		`{"role":"toolResult","toolCallId":"c1","content":[{"type":"text","text":"r"},{"type":"image","data":"not base64!","mimeType":"image/png"}]}`,
		`{"role":"user","content":"next"}`,
	)
	for _, f := range providers {
		t.Run(string(f), func(t *testing.T) {
			raw, body, rep := rendered(t, f, msgs, render.Options{})
			requireValid(t, f, body, raw, "not base64")
			require.NoError(t, conserved(f, msgs, body, rep))
			require.NotContains(t, string(raw), "iVBOR\"")
			require.NotContains(t, string(raw), "not base64!")
			require.Contains(t, string(raw), "iVBORw0K")
			reasons := map[string]int{}
			for _, c := range rep.Changes {
				if c.Kind == render.BlockRemoved {
					reasons[c.Reason]++
				}
			}
			require.Equal(t, 1, reasons["image data not base64"], "%+v", rep.Changes)
			require.Equal(t, 1, reasons["image data not base64 in a tool result"], "%+v", rep.Changes)
		})
	}
}
