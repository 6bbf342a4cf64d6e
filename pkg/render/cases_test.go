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
		`{"role":"user","content":[{"type":"image","data":"iVBOR","mimeType":"image/png"}]}`,
		`{"role":"assistant","content":[{"type":"toolCall","id":"c1","name":"read","arguments":{}}]}`,
		`{"role":"toolResult","toolCallId":"c1","content":"r"}`,
	)
	raw, body, rep := rendered(t, render.Gemini, msgs, render.Options{})
	requireValid(t, render.Gemini, body, raw, "png")
	require.Empty(t, rep.Changes)
	require.Contains(t, string(raw), `"functionCall"`)
}
