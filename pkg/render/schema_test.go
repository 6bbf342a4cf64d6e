package render_test

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/spectest"
	"github.com/ctxd/ctxd/pkg/record"
	"github.com/ctxd/ctxd/pkg/render"
)

// The structural check: each message or item of a rendered body against
// the JSON Schema of its provider's request, extracted from OpenAI's
// published OpenAPI document and written from Anthropic's documented
// shapes (testdata/schemas/README.md says where each comes from and what
// was changed). It sees shapes: field names and types, required fields,
// enums, id patterns, lengths, minItems. It does not see the rules the
// validator enforces (pairing, adjacency, order, duplicates).

// formatSchemas are the compiled schemas of one format: item checks each
// element of the body's list (messages or input), system each system
// block (Anthropic only).
type formatSchemas struct {
	item   *jsonschema.Schema
	system *jsonschema.Schema
}

var loadSchemas = sync.OnceValues(func() (map[render.Format]formatSchemas, error) {
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	// Anthropic's image data is "format: byte" (OpenAPI's base64), which
	// JSON Schema does not define.
	c.RegisterFormat(&jsonschema.Format{Name: "byte", Validate: func(v any) error {
		s, ok := v.(string)
		if !ok {
			return nil
		}
		_, err := base64.StdEncoding.Strict().DecodeString(s)
		return err
	}})
	for _, name := range []string{"openai-chat", "openai-responses", "anthropic"} {
		f, err := os.Open(filepath.Join("testdata", "schemas", name+".json"))
		if err != nil {
			return nil, err
		}
		doc, err := jsonschema.UnmarshalJSON(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if err := c.AddResource(schemaURL(name), doc); err != nil {
			return nil, err
		}
	}
	compile := func(name, def string) (*jsonschema.Schema, error) {
		return c.Compile(schemaURL(name) + "#/$defs/" + def)
	}
	out := map[render.Format]formatSchemas{}
	var err error
	var s formatSchemas
	if s.item, err = compile("openai-chat", "ChatCompletionRequestMessage"); err != nil {
		return nil, err
	}
	out[render.OpenAIChat] = s
	s = formatSchemas{}
	if s.item, err = compile("openai-responses", "InputItem"); err != nil {
		return nil, err
	}
	out[render.OpenAIResponses] = s
	s = formatSchemas{}
	if s.item, err = compile("anthropic", "InputMessage"); err != nil {
		return nil, err
	}
	if s.system, err = compile("anthropic", "RequestTextBlock"); err != nil {
		return nil, err
	}
	out[render.Anthropic] = s
	return out, nil
})

func schemaURL(name string) string { return "https://ctxd.invalid/schemas/" + name + ".json" }

// checkSchema validates a rendered body of format f: every element of
// its list, and for Anthropic every system block. With a breakpoint, the
// Anthropic block it names is checked again carrying the cache_control a
// runtime sets there (RENDER.md section 2): a block that cannot carry one
// fails.
func checkSchema(t testing.TB, f render.Format, raw []byte, bp *render.Breakpoint) error {
	t.Helper()
	all, err := loadSchemas()
	require.NoError(t, err)
	s := all[f]
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return err
	}
	body, ok := v.(map[string]any)
	if !ok {
		return errors.New("body is not an object")
	}
	key := "messages"
	if f == render.OpenAIResponses {
		key = "input"
	}
	list, ok := body[key].([]any)
	if !ok {
		return fmt.Errorf("%s is not a list", key)
	}
	var errs []error
	for i, e := range list {
		if err := s.item.Validate(e); err != nil {
			errs = append(errs, fmt.Errorf("%s[%d]: %w", key, i, err))
		}
	}
	if f == render.Anthropic {
		if sys, ok := body["system"]; ok {
			blocks, ok := sys.([]any)
			if !ok || len(blocks) == 0 {
				errs = append(errs, errors.New("system: not a list of blocks"))
			}
			for i, b := range blocks {
				if err := s.system.Validate(b); err != nil {
					errs = append(errs, fmt.Errorf("system[%d]: %w", i, err))
				}
			}
		}
		if bp != nil {
			if err := checkBreakpoint(s.item, list, *bp); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

func checkBreakpoint(item *jsonschema.Schema, list []any, bp render.Breakpoint) error {
	if bp.Message >= len(list) {
		return fmt.Errorf("cache breakpoint %+v: no such message", bp)
	}
	m, _ := list[bp.Message].(map[string]any)
	content, _ := m["content"].([]any)
	if bp.Block >= len(content) {
		return fmt.Errorf("cache breakpoint %+v: no such block", bp)
	}
	block, _ := content[bp.Block].(map[string]any)
	marked := map[string]any{}
	for k, v := range block {
		marked[k] = v
	}
	marked["cache_control"] = map[string]any{"type": "ephemeral"}
	c := append([]any(nil), content...)
	c[bp.Block] = marked
	if err := item.Validate(map[string]any{"role": m["role"], "content": c}); err != nil {
		return fmt.Errorf("messages[%d] with cache_control on block %d: %w", bp.Message, bp.Block, err)
	}
	return nil
}

// schemaFormats are the formats with a schema here; gemini is checked
// against go-genai's types (sdk_test.go).
var schemaFormats = []render.Format{render.Anthropic, render.OpenAIChat, render.OpenAIResponses}

// TestRender_Schemas checks every body of the spec fixtures, of the
// real transcripts in the importer's testdata and of generated sessions
// against the published request schema of its format.
func TestRender_Schemas(t *testing.T) {
	check := func(what string, f render.Format, msgs []any, opt render.Options) {
		body, rep := render.Render(f, msgs, opt)
		raw, err := body.AppendJSON(nil)
		require.NoError(t, err)
		if err := checkSchema(t, f, raw, rep.CacheBreakpoint); err != nil {
			t.Fatalf("%s: %s body fails the schema:\n%v\nbody: %.3000s", what, f, err, raw)
		}
	}
	for _, c := range spectest.Cases(t) {
		for _, f := range schemaFormats {
			check(c.File+"/"+c.Name, f, c.Expect, render.Options{})
			check(c.File+"/"+c.Name+" (base64 images)", f, base64Images(c.Expect).([]any), render.Options{})
		}
	}
	for name, msgs := range sampleContexts(t) {
		for _, f := range schemaFormats {
			check(name, f, msgs, render.Options{})
		}
	}
	n := *genN / 5
	if testing.Short() {
		n = 300
	}
	for seed := uint64(1); seed <= uint64(n); seed++ {
		msgs, opt := generated(seed)
		for _, f := range schemaFormats {
			check(fmt.Sprintf("seed %d", seed), f, msgs, opt)
		}
	}
}

// TestRender_SchemasRefuse shows the schemas refusing the mistakes they
// are there for, each body otherwise valid.
func TestRender_SchemasRefuse(t *testing.T) {
	long := strings.Repeat("c", 70)
	for _, tc := range []struct {
		name string
		f    render.Format
		body string
		want string // in the error
	}{
		{"chat: image part in a tool message", render.OpenAIChat,
			`{"messages":[{"role":"tool","tool_call_id":"c1","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,aGk="}}]}]}`, "messages[0]"},
		{"chat: empty content list", render.OpenAIChat,
			`{"messages":[{"role":"user","content":[]}]}`, "minItems"},
		{"chat: arguments as an object", render.OpenAIChat,
			`{"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":{}}}]}]}`, "messages[0]"},
		{"chat: tool message without its call id", render.OpenAIChat,
			`{"messages":[{"role":"tool","content":"ok"}]}`, "tool_call_id"},
		{"chat: relative image url", render.OpenAIChat,
			`{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"shot.png"}}]}]}`, "messages[0]"},
		{"chat: unknown role", render.OpenAIChat,
			`{"messages":[{"role":"model","content":"hi"}]}`, "messages[0]"},
		{"responses: call_id of 70 characters", render.OpenAIResponses,
			`{"input":[{"type":"function_call_output","call_id":"` + long + `","output":"ok"}]}`, "maxLength"},
		{"responses: function_call without arguments", render.OpenAIResponses,
			`{"input":[{"type":"function_call","call_id":"c1","name":"f"}]}`, "input[0]"},
		{"responses: image without detail", render.OpenAIResponses,
			`{"input":[{"type":"message","role":"user","content":[{"type":"input_image","image_url":"data:image/png;base64,aGk="}]}]}`, "input[0]"},
		{"responses: chat-style text part", render.OpenAIResponses,
			`{"input":[{"type":"message","role":"user","content":[{"type":"text","text":"hi"}]}]}`, "input[0]"},
		{"responses: tool role", render.OpenAIResponses,
			`{"input":[{"type":"message","role":"tool","content":"ok"}]}`, "input[0]"},
		{"anthropic: tool_use id with a colon", render.Anthropic,
			`{"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"functions.bash:17","name":"bash","input":{}}]}]}`, "pattern"},
		{"anthropic: tool_result id with a colon", render.Anthropic,
			`{"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"functions.bash:17"}]}]}`, "pattern"},
		{"anthropic: image/heic", render.Anthropic,
			`{"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/heic","data":"aGk="}}]}]}`, "messages[0]"},
		{"anthropic: image data not base64", render.Anthropic,
			`{"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"not base64!"}}]}]}`, "messages[0]"},
		{"anthropic: empty text block", render.Anthropic,
			`{"messages":[{"role":"user","content":[{"type":"text","text":""}]}]}`, "messages[0]"},
		{"anthropic: empty system block", render.Anthropic,
			`{"system":[{"type":"text","text":""}],"messages":[{"role":"user","content":"hi"}]}`, "system[0]"},
		{"anthropic: system role", render.Anthropic,
			`{"messages":[{"role":"system","content":"hi"}]}`, "messages[0]"},
		{"anthropic: tool name with a dot", render.Anthropic,
			`{"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"c1","name":"fs.read","input":{}}]}]}`, "pattern"},
		{"anthropic: input as a string", render.Anthropic,
			`{"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"c1","name":"f","input":"{}"}]}]}`, "messages[0]"},
		{"anthropic: unknown block field", render.Anthropic,
			`{"messages":[{"role":"user","content":[{"type":"text","text":"hi","mimeType":"x"}]}]}`, "messages[0]"},
		{"anthropic: thinking without a signature", render.Anthropic,
			`{"messages":[{"role":"assistant","content":[{"type":"thinking","thinking":"hm"},{"type":"text","text":"a"}]}]}`, "messages[0]"},
	} {
		err := checkSchema(t, tc.f, []byte(tc.body), nil)
		require.Error(t, err, tc.name)
		require.Contains(t, err.Error(), tc.want, tc.name)
	}

	// A runtime's cache_control cannot sit on a thinking block.
	err := checkSchema(t, render.Anthropic,
		[]byte(`{"messages":[{"role":"assistant","content":[{"type":"thinking","thinking":"hm","signature":"s"},{"type":"text","text":"a"}]}]}`),
		&render.Breakpoint{Message: 0, Block: 0})
	require.ErrorContains(t, err, "cache_control")
	require.NoError(t, checkSchema(t, render.Anthropic,
		[]byte(`{"messages":[{"role":"assistant","content":[{"type":"thinking","thinking":"hm","signature":"s"},{"type":"text","text":"a"}]}]}`),
		&render.Breakpoint{Message: 0, Block: 1}))
}

// TestRender_SchemasBlind records what the schemas cannot see: bodies
// each provider refuses that pass its schema, and that the validator
// refuses. The schema check stands beside the validator, not in its
// place.
func TestRender_SchemasBlind(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    render.Format
		body string
	}{
		{"chat: tool message with no call before it", render.OpenAIChat,
			`{"messages":[{"role":"user","content":"hi"},{"role":"tool","tool_call_id":"c1","content":"ok"}]}`},
		{"chat: empty tool_calls", render.OpenAIChat,
			`{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"a","tool_calls":[]}]}`},
		{"responses: assistant text as input_text", render.OpenAIResponses,
			`{"input":[{"type":"message","role":"user","content":"hi"},{"type":"message","role":"assistant","content":[{"type":"input_text","text":"a"}]}]}`},
		{"responses: call without its output", render.OpenAIResponses,
			`{"input":[{"type":"message","role":"user","content":"hi"},{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"}]}`},
		{"anthropic: two results for one call", render.Anthropic,
			`{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"tool_use","id":"c1","name":"f","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"c1"},{"type":"tool_result","tool_use_id":"c1"}]}]}`},
		{"anthropic: white-space text", render.Anthropic,
			`{"messages":[{"role":"user","content":[{"type":"text","text":" "}]}]}`},
	} {
		require.NoError(t, checkSchema(t, tc.f, []byte(tc.body), nil), tc.name)
		v, err := record.DecodeJSON([]byte(tc.body))
		require.NoError(t, err)
		require.NotEmpty(t, validate(tc.f, v.(*record.Map)), "%s: the validator refuses it", tc.name)
	}
}

// TestRender_SchemasImageURL renders images by URLs that are not URLs a
// provider can fetch (OpenAI's schema wants a URI; none has a host to
// fetch from): each is removed and reported, in every format, and the
// valid one beside them is kept.
func TestRender_SchemasImageURL(t *testing.T) {
	bad := []string{"https://exa mple.com/a.png", "http://[::1/a.png", "http://x/%zz", "https://", "https:///a.png"}
	content := []any{record.NewMap("type", "text", "text", "look")}
	for _, u := range bad {
		content = append(content, record.NewMap("type", "image_url", "image_url", record.NewMap("url", u)))
	}
	content = append(content, record.NewMap("type", "image", "source", record.NewMap("type", "url", "url", "https://example.com/a.png")))
	msgs := []any{record.NewMap("role", "user", "content", content)}
	for _, f := range schemaFormats {
		body, rep := render.Render(f, msgs, render.Options{})
		raw, err := body.AppendJSON(nil)
		require.NoError(t, err)
		require.NoError(t, checkSchema(t, f, raw, rep.CacheBreakpoint), "%s: %s", f, raw)
		var removed []int
		for _, c := range rep.Changes {
			if c.Kind == render.BlockRemoved {
				removed = append(removed, c.Block)
			}
		}
		require.Equal(t, []int{1, 2, 3, 4, 5}, removed, "%s: every bad URL reported", f)
		require.Contains(t, string(raw), "https://example.com/a.png", f)
		for _, u := range bad {
			require.NotContains(t, string(raw), `"`+u+`"`, f)
		}
	}
}
