package render_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/record"
	"github.com/ctxd/ctxd/pkg/render"
)

// negatives are bodies each provider refuses, with the error it returns:
// every known error has one, and the validator must trip on it.
var negatives = []struct {
	name   string
	format render.Format
	body   string
	want   string
}{
	// Anthropic
	{"call without its result", render.Anthropic, `{"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"x","input":{}}]},{"role":"user","content":[{"type":"text","text":"hi"}]}]}`, antMissingResult},
	{"text before the results", render.Anthropic, `{"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"x","input":{}}]},{"role":"user","content":[{"type":"text","text":"note"},{"type":"tool_result","tool_use_id":"t1"}]}]}`, antMissingResult},
	{"text after tool_use in one turn", render.Anthropic, `{"messages":[{"role":"user","content":[{"type":"text","text":"go"}]},{"role":"assistant","content":[{"type":"tool_use","id":"call_1","name":"x","input":{}},{"type":"text","text":"done"}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"call_1"}]}]}`, antMissingResult},
	{"orphan result", render.Anthropic, `{"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t9","content":[{"type":"text","text":"r"}]}]}]}`, antOrphanResult},
	{"duplicate result", render.Anthropic, `{"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"x","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1"},{"type":"tool_result","tool_use_id":"t1"}]}]}`, antDuplicateResult},
	{"empty content", render.Anthropic, `{"messages":[{"role":"user","content":[]}]}`, antEmptyContent},
	{"empty text block", render.Anthropic, `{"messages":[{"role":"user","content":[{"type":"text","text":""}]}]}`, antEmptyText},
	{"white-space text block", render.Anthropic, `{"messages":[{"role":"user","content":[{"type":"text","text":" \n"}]}]}`, antBlankText},
	{"thinking last", render.Anthropic, `{"messages":[{"role":"user","content":[{"type":"text","text":"q"}]},{"role":"assistant","content":[{"type":"text","text":"a"},{"type":"thinking","thinking":"t","signature":"s"}]}]}`, antThinkingLast},
	{"unsigned thinking", render.Anthropic, `{"messages":[{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":""},{"type":"text","text":"a"}]}]}`, antInvalidSig},
	{"id outside the pattern", render.Anthropic, `{"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"functions.bash:17","name":"bash","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"functions.bash:17"}]}]}`, antBadID},
	{"id used twice", render.Anthropic, `{"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"x","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t"}]},{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"x","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t"}]}]}`, antUniqueID},
	{"heic image", render.Anthropic, `{"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/heic","data":"AAAA"}}]}]}`, antMediaType},
	{"image data not base64", render.Anthropic, `{"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"u"}}]}]}`, antBase64},
	{"system role in messages", render.Anthropic, `{"messages":[{"role":"system","content":[{"type":"text","text":"be brief"}]}]}`, antSystemRole},
	{"pi-style image block", render.Anthropic, `{"messages":[{"role":"user","content":[{"type":"image","data":"AAAA","mimeType":"image/png"}]}]}`, antShape},
	{"two user messages in a row", render.Anthropic, `{"messages":[{"role":"user","content":[{"type":"text","text":"a"}]},{"role":"user","content":[{"type":"text","text":"b"}]}]}`, alternate},

	// OpenAI Chat
	{"tool_calls without tool messages", render.OpenAIChat, `{"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"user","content":"hi"}]}`, chatMissingResult},
	{"tool message after a user message", render.OpenAIChat, `{"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"a","content":"A"},{"role":"user","content":"hi"},{"role":"tool","tool_call_id":"b","content":"B"}]}`, chatOrphanResult},
	{"two tool messages for one call", render.OpenAIChat, `{"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"a","content":"A"},{"role":"tool","tool_call_id":"a","content":"A"}]}`, chatDuplicate},
	{"id of 53 characters", render.OpenAIChat, `{"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"call_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"call_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","content":"A"}]}`, chatIDTooLong},
	{"image in a tool message", render.OpenAIChat, `{"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"a","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}]}]}`, chatImageNotUser},
	{"data URL not base64", render.OpenAIChat, `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,s2"}}]}]}`, chatImageData},
	{"empty tool_calls", render.OpenAIChat, `{"messages":[{"role":"assistant","content":"hi","tool_calls":[]}]}`, chatEmptyArray},
	{"pi-style toolResult role", render.OpenAIChat, `{"messages":[{"role":"user","content":"hi","toolCallId":"x"}]}`, chatShape},

	// OpenAI Responses
	{"call without output", render.OpenAIResponses, `{"input":[{"type":"function_call","call_id":"call_1","name":"f","arguments":"{}"}]}`, respMissingOutput},
	{"output without call", render.OpenAIResponses, `{"input":[{"type":"function_call_output","call_id":"call_1","output":"x"}]}`, respOrphanOutput},
	{"duplicate call_id", render.OpenAIResponses, `{"input":[{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"x"},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"x"}]}`, respDuplicate},
	{"item id from another API", render.OpenAIResponses, `{"input":[{"type":"function_call","id":"call_Ev2","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"x"}]}`, respItemID},
	{"call_id of 70 characters", render.OpenAIResponses, `{"input":[{"type":"function_call","call_id":"` + strings.Repeat("c", 70) + `","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"` + strings.Repeat("c", 70) + `","output":"x"}]}`, respCallIDLength},
	{"input_text in an assistant message", render.OpenAIResponses, `{"input":[{"type":"message","role":"assistant","content":[{"type":"input_text","text":"hi"}]}]}`, respAssistantText},
	{"empty content list", render.OpenAIResponses, `{"input":[{"type":"message","role":"user","content":[]}]}`, respEmptyArray},
	{"instructions beside input", render.OpenAIResponses, `{"instructions":"x","input":[]}`, respShape},

	// Gemini
	{"call turn first", render.Gemini, `{"contents":[{"role":"model","parts":[{"functionCall":{"name":"f","args":{}}}]},{"role":"user","parts":[{"functionResponse":{"name":"f","response":{"output":"x"}}}]}]}`, gemCallTurn},
	{"response turn after text", render.Gemini, `{"contents":[{"role":"user","parts":[{"text":"q"}]},{"role":"model","parts":[{"text":"a"}]},{"role":"user","parts":[{"functionResponse":{"name":"f","response":{"output":"x"}}}]}]}`, gemResponseTurn},
	{"one response for two calls", render.Gemini, `{"contents":[{"role":"user","parts":[{"text":"q"}]},{"role":"model","parts":[{"functionCall":{"name":"f","args":{}}},{"functionCall":{"name":"g","args":{}}}]},{"role":"user","parts":[{"functionResponse":{"name":"f","response":{"output":"x"}}}]}]}`, gemCount},
	{"empty parts", render.Gemini, `{"contents":[{"role":"user","parts":[]}]}`, gemEmptyParts},
	{"empty text part", render.Gemini, `{"contents":[{"role":"user","parts":[{"text":""}]}]}`, gemOneof},
	{"assistant role", render.Gemini, `{"contents":[{"role":"assistant","parts":[{"text":"a"}]}]}`, gemRole},
	{"signature not base64", render.Gemini, `{"contents":[{"role":"user","parts":[{"text":"q"}]},{"role":"model","parts":[{"functionCall":{"name":"f","args":{}},"thoughtSignature":"not base64!"}]},{"role":"user","parts":[{"functionResponse":{"name":"f","response":{"output":"x"}}}]}]}`, gemSignature},
	{"inline data not base64", render.Gemini, `{"contents":[{"role":"user","parts":[{"inlineData":{"mimeType":"image/png","data":"not base64!"}}]}]}`, gemBase64},
	{"snake_case field", render.Gemini, `{"contents":[{"role":"user","parts":[{"inline_data":{"mime_type":"image/png","data":"AAAA"}}]}]}`, gemShape},
	{"two model turns in a row", render.Gemini, `{"contents":[{"role":"user","parts":[{"text":"q"}]},{"role":"model","parts":[{"text":"a"}]},{"role":"model","parts":[{"text":"b"}]}]}`, alternate},
}

func TestValidate_Negative(t *testing.T) {
	covered := map[string]bool{}
	for _, tt := range negatives {
		t.Run(string(tt.format)+"/"+tt.name, func(t *testing.T) {
			v, err := record.DecodeJSON([]byte(tt.body))
			require.NoError(t, err)
			vs := validate(tt.format, v.(*record.Map))
			var errs []string
			for _, x := range vs {
				errs = append(errs, x.err)
			}
			require.Contains(t, errs, tt.want, "violations: %v", vs)
			covered[tt.want] = true
		})
	}
	// Every known provider error has a body that trips it.
	for _, e := range []string{
		antMissingResult, antOrphanResult, antDuplicateResult, antEmptyContent, antEmptyText, antBlankText,
		antThinkingLast, antBadID, antUniqueID, antMediaType, antSystemRole, antShape, antInvalidSig,
		chatMissingResult, chatOrphanResult, chatDuplicate, chatIDTooLong, chatImageNotUser, chatEmptyArray, chatShape,
		respMissingOutput, respOrphanOutput, respDuplicate, respItemID, respCallIDLength, respAssistantText, respEmptyArray, respShape,
		gemCallTurn, gemResponseTurn, gemCount, gemEmptyParts, gemOneof, gemRole, gemSignature, gemShape, alternate,
	} {
		require.True(t, covered[e], "no negative case for %q", e)
	}
}

// The bodies the providers are documented (or recorded) to accept pass.
func TestValidate_Positive(t *testing.T) {
	bodies := []struct {
		format render.Format
		body   string
	}{
		{render.Anthropic, `{"system":[{"type":"text","text":"be brief"}],"messages":[{"role":"user","content":[{"type":"text","text":"go"}]},{"role":"assistant","content":[{"type":"text","text":"calling"},{"type":"tool_use","id":"toolu_1","name":"read","input":{"p":1}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"r"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AAAA"}}]},{"type":"text","text":"thanks"}]}]}`},
		{render.OpenAIChat, `{"messages":[{"role":"system","content":"s"},{"role":"user","content":"q"},{"role":"assistant","content":null,"tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{}"}},{"id":"b","type":"function","function":{"name":"g","arguments":"{}"}}]},{"role":"tool","tool_call_id":"b","content":"B"},{"role":"tool","tool_call_id":"a","content":[{"type":"text","text":"A"}]},{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}]}]}`},
		{render.OpenAIResponses, `{"input":[{"type":"message","role":"user","content":"q"},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":[{"type":"input_text","text":"r"},{"type":"input_image","image_url":"data:image/png;base64,AAAA","detail":"auto"}]},{"type":"message","role":"assistant","content":"done"}]}`},
		{render.Gemini, `{"systemInstruction":{"parts":[{"text":"s"}]},"contents":[{"role":"user","parts":[{"text":"q"}]},{"role":"model","parts":[{"functionCall":{"id":"tool_0","name":"f","args":{}},"thoughtSignature":"AAAA"}]},{"role":"user","parts":[{"functionResponse":{"id":"tool_0","name":"f","response":{"output":"x"}}},{"inlineData":{"mimeType":"image/png","data":"AAAA"}}]}]}`},
	}
	for _, b := range bodies {
		v, err := record.DecodeJSON([]byte(b.body))
		require.NoError(t, err)
		require.Empty(t, validate(b.format, v.(*record.Map)), "%s", b.format)
	}
}
