package render_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/genai"

	"github.com/ctxd/ctxd/internal/spectest"
	"github.com/ctxd/ctxd/pkg/render"
)

// geminiRequest is the part of a generateContent request a gemini body
// fills, in Google's own Go types (google.golang.org/genai): plain structs
// with JSON tags, so a decoder that refuses unknown fields checks each
// part's shape, every field name and type, and that inline data and
// thought signatures are base64.
type geminiRequest struct {
	SystemInstruction *genai.Content   `json:"systemInstruction,omitempty"`
	Contents          []*genai.Content `json:"contents"`
}

func decodeGemini(raw []byte) (geminiRequest, error) {
	var req geminiRequest
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, err
	}
	for i, c := range req.Contents {
		if c.Role != "user" && c.Role != "model" {
			return req, fmt.Errorf("contents[%d]: role %q: genai.Content takes user or model", i, c.Role)
		}
	}
	return req, nil
}

// TestRender_GeminiSDKTypes decodes every gemini body of the spec fixtures
// and of generated sessions into go-genai's request types, refusing
// unknown fields: a structural check, beside the validator's rules, from
// the types Google publishes.
func TestRender_GeminiSDKTypes(t *testing.T) {
	check := func(what string, msgs []any, opt render.Options) {
		body, _ := render.Render(render.Gemini, msgs, opt)
		raw, err := body.AppendJSON(nil)
		require.NoError(t, err)
		req, err := decodeGemini(raw)
		require.NoError(t, err, "%s: %.2000s", what, raw)
		require.Equal(t, countContents(t, raw), len(req.Contents), what)
	}
	for _, c := range spectest.Cases(t) {
		check(c.File+"/"+c.Name, c.Expect, render.Options{})
	}
	n := *genN / 5
	if testing.Short() {
		n = 300
	}
	for seed := uint64(1); seed <= uint64(n); seed++ {
		msgs, opt := generated(seed)
		check(fmt.Sprintf("seed %d", seed), msgs, opt)
	}
}

func countContents(t *testing.T, raw []byte) int {
	var v struct {
		Contents []json.RawMessage `json:"contents"`
	}
	require.NoError(t, json.Unmarshal(raw, &v))
	return len(v.Contents)
}

// TestRender_GeminiSDKTypesRefuse shows the structural check failing on
// the mistakes it is there for.
func TestRender_GeminiSDKTypesRefuse(t *testing.T) {
	for name, body := range map[string]string{
		"unknown part field":     `{"contents":[{"role":"user","parts":[{"txt":"hi"}]}]}`,
		"snake_case inline data": `{"contents":[{"role":"user","parts":[{"inline_data":{"mimeType":"image/png","data":"aGk="}}]}]}`,
		"data not base64":        `{"contents":[{"role":"user","parts":[{"inlineData":{"mimeType":"image/png","data":"not base64!"}}]}]}`,
		"signature not base64":   `{"contents":[{"role":"model","parts":[{"text":"a","thoughtSignature":"%%%"}]}]}`,
		"args not an object":     `{"contents":[{"role":"model","parts":[{"functionCall":{"name":"f","args":"{}"}}]}]}`,
		"assistant role":         `{"contents":[{"role":"assistant","parts":[{"text":"a"}]}]}`,
		"parts not a list":       `{"contents":[{"role":"user","parts":{"text":"a"}}]}`,
	} {
		_, err := decodeGemini([]byte(body))
		require.Error(t, err, name)
	}
	_, err := decodeGemini([]byte(`{"systemInstruction":{"parts":[{"text":"s"}]},"contents":[{"role":"user","parts":[{"text":"hi"},{"inlineData":{"mimeType":"image/png","data":"aGk="}}]},{"role":"model","parts":[{"functionCall":{"id":"c1","name":"f","args":{"a":1}},"thoughtSignature":"aGk="}]},{"role":"user","parts":[{"functionResponse":{"id":"c1","name":"f","response":{"output":"ok"}}}]}]}`))
	require.NoError(t, err)
}
