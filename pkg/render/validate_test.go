package render_test

import (
	"encoding/base64"
	"fmt"
	"regexp"
	"strings"
	"unicode"

	"github.com/ctxd/ctxd/pkg/record"
	"github.com/ctxd/ctxd/pkg/render"
)

// The validators check a body as the provider would, written from the
// providers' documented rules and the errors they are known to return
// (docs/RENDER.md), and from nothing of the renderer. Each violation
// carries the provider's error message that the rule stands for, so that
// a negative case proves the rule trips on the body the provider refuses.

// violation is a rule a body breaks.
type violation struct {
	where string // a path in the body
	err   string // the provider's error message (or the rule, when the provider's is not known)
}

func (v violation) String() string { return v.where + ": " + v.err }

// Known provider errors (docs/RENDER.md cites where each was seen).
const (
	antMissingResult   = "tool_use ids were found without tool_result blocks immediately after"
	antOrphanResult    = "unexpected tool_use_id found in tool_result blocks"
	antDuplicateResult = "each tool_use must have a single result"
	antEmptyContent    = "all messages must have non-empty content except for the optional final assistant message"
	antEmptyText       = "text content blocks must be non-empty"
	antBlankText       = "text content blocks must contain non-whitespace text"
	antThinkingLast    = "The final block in an assistant message cannot be `thinking`."
	antBadID           = "tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$'"
	antUniqueID        = "tool_use ids must be unique"
	antMediaType       = "image.source.media_type: Input should be 'image/jpeg', 'image/png', 'image/gif' or 'image/webp'"
	antSystemRole      = "Unexpected role \"system\". The Messages API accepts a top-level `system` parameter"
	antShape           = "Extra inputs are not permitted" // additionalProperties: false in the request schema
	antInvalidSig      = "Invalid signature in thinking block"
	antBase64          = "image.source.base64.data: invalid base64 data" // the condition; the wording is ours

	chatMissingResult = "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'."
	chatOrphanResult  = "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'."
	chatDuplicate     = "Invalid parameter: Duplicate value for 'tool_call_id'"
	chatIDTooLong     = "string too long. Expected a string with maximum length 40"
	chatImageNotUser  = "Image URLs are only allowed for messages with role 'user'"
	chatEmptyArray    = "empty array. Expected an array with minimum length 1"
	chatShape         = "Additional properties are not allowed"
	chatImageData     = "Invalid image URL: unsupported image type or data"

	respMissingOutput = "No tool output found for function call"
	respOrphanOutput  = "No tool call found for function call output with call_id"
	respDuplicate     = "Duplicate 'call_id'"
	respItemID        = "Expected an ID that begins with 'fc'."
	respCallIDLength  = "call_id: string too long. Expected a string with maximum length 64"
	respAssistantText = "Invalid value: 'input_text'. Supported values are: 'output_text' and 'refusal'."
	respEmptyArray    = "empty array. Expected an array with minimum length 1"
	respShape         = "Unknown parameter"

	gemCallTurn     = "Please ensure that function call turn comes immediately after a user turn or after a function response turn."
	gemResponseTurn = "Please ensure that function response turn comes immediately after a function call turn."
	gemCount        = "Please ensure that the number of function response parts is equal to the number of function call parts of the function call turn."
	gemEmptyParts   = "contents.parts must not be empty"
	gemOneof        = "required oneof field 'data' must have one initialized field"
	gemRole         = "Please use a valid role: user, model."
	gemSignature    = "thoughtSignature: illegal base64 data"
	gemSystemLate   = "system messages are only supported at the beginning of the conversation"
	gemShape        = "Unknown name"
	gemBase64       = "(TYPE_BYTES), Base64 decoding failed"

	alternate = "consecutive messages of one role (merged by ctxd so that every rule above is checkable)"
)

var (
	antIDPattern  = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)
	namePattern   = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)
	gemNamePatter = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_-]{0,63}$`)
)

type checker struct{ vs []violation }

func (c *checker) fail(where, err string, args ...any) {
	if len(args) > 0 {
		where = fmt.Sprintf(where, args...)
	}
	c.vs = append(c.vs, violation{where, err})
}

// keys checks that m has only the allowed keys and every required one.
func (c *checker) keys(m *record.Map, where, shapeErr string, required []string, optional ...string) {
	allowed := map[string]bool{}
	for _, k := range append(required, optional...) {
		allowed[k] = true
	}
	for _, mem := range m.Members {
		if !allowed[mem.Key] {
			c.fail(where+"."+mem.Key, shapeErr)
		}
	}
	for _, k := range required {
		if _, ok := m.Get(k); !ok {
			c.fail(where+"."+k, "Field required")
		}
	}
}

func str(m *record.Map, k string) string { s, _ := m.String(k); return s }
func mapOf(v any) *record.Map            { m, _ := v.(*record.Map); return m }
func arrOf(v any) ([]any, bool)          { a, ok := v.([]any); return a, ok }
func field(m *record.Map, k string) any  { v, _ := m.Get(k); return v }

func blank(s string) bool { return strings.TrimFunc(s, unicode.IsSpace) == "" }

func (c *checker) text(s any, where, emptyErr, blankErr string) {
	t, ok := s.(string)
	switch {
	case !ok:
		c.fail(where, "text: Input should be a valid string")
	case t == "":
		c.fail(where, emptyErr)
	case blank(t):
		c.fail(where, blankErr)
	}
}

var imageTypes = map[string]bool{"image/jpeg": true, "image/png": true, "image/gif": true, "image/webp": true}

// validate checks a body of format f.
func validate(f render.Format, body *record.Map) []violation {
	c := &checker{}
	switch f {
	case render.Anthropic:
		c.anthropic(body)
	case render.OpenAIChat:
		c.chat(body)
	case render.OpenAIResponses:
		c.responses(body)
	case render.Gemini:
		c.gemini(body)
	}
	return c.vs
}

// ---- Anthropic Messages

func (c *checker) anthropic(body *record.Map) {
	c.keys(body, "body", antShape, []string{"messages"}, "system")
	if sys, ok := body.Get("system"); ok {
		arr, _ := arrOf(sys)
		if len(arr) == 0 {
			c.fail("system", antEmptyContent)
		}
		for i, b := range arr {
			bm := mapOf(b)
			if bm == nil || str(bm, "type") != "text" {
				c.fail("system.%d", antShape, i)
				continue
			}
			c.keys(bm, fmt.Sprintf("system.%d", i), antShape, []string{"type", "text"}, "cache_control")
			c.text(field(bm, "text"), fmt.Sprintf("system.%d", i), antEmptyText, antBlankText)
		}
	}
	msgs, ok := arrOf(field(body, "messages"))
	if !ok {
		c.fail("messages", "messages: Input should be a valid list")
		return
	}
	ids := map[string]bool{}
	for i, v := range msgs {
		where := fmt.Sprintf("messages.%d", i)
		m := mapOf(v)
		if m == nil {
			c.fail(where, antShape)
			continue
		}
		c.keys(m, where, antShape, []string{"role", "content"})
		role := str(m, "role")
		switch role {
		case "user", "assistant":
		case "system":
			c.fail(where, antSystemRole)
		default:
			c.fail(where+".role", "Input should be 'user' or 'assistant'")
		}
		if i > 0 && str(mapOf(msgs[i-1]), "role") == role {
			c.fail(where, alternate)
		}
		content, _ := arrOf(field(m, "content"))
		if len(content) == 0 {
			c.fail(where, antEmptyContent)
		}
		c.anthropicBlocks(where, role, content, ids)
		// Pairing with the next message.
		var uses []string
		for _, b := range content {
			if bm := mapOf(b); bm != nil && str(bm, "type") == "tool_use" {
				uses = append(uses, str(bm, "id"))
			}
		}
		var next []any
		if i+1 < len(msgs) {
			if nm := mapOf(msgs[i+1]); nm != nil && str(nm, "role") == "user" {
				next, _ = arrOf(field(nm, "content"))
			}
		}
		if role == "assistant" && len(uses) > 0 {
			// The tool_result blocks must lead the next user message.
			leading := map[string]int{}
			for _, b := range next {
				bm := mapOf(b)
				if bm == nil || str(bm, "type") != "tool_result" {
					break
				}
				leading[str(bm, "tool_use_id")]++
			}
			for _, id := range uses {
				if leading[id] == 0 {
					c.fail(where, antMissingResult)
				}
			}
		}
		if role == "user" {
			var prevUses map[string]bool
			if i > 0 {
				if pm := mapOf(msgs[i-1]); pm != nil && str(pm, "role") == "assistant" {
					prevUses = map[string]bool{}
					pc, _ := arrOf(field(pm, "content"))
					for _, b := range pc {
						if bm := mapOf(b); bm != nil && str(bm, "type") == "tool_use" {
							prevUses[str(bm, "id")] = true
						}
					}
				}
			}
			seen := map[string]bool{}
			for k, b := range content {
				bm := mapOf(b)
				if bm == nil || str(bm, "type") != "tool_result" {
					continue
				}
				id := str(bm, "tool_use_id")
				if !prevUses[id] {
					c.fail("%s.content.%d", antOrphanResult, where, k)
				}
				if seen[id] {
					c.fail("%s.content.%d", antDuplicateResult, where, k)
				}
				seen[id] = true
				if k > 0 && str(mapOf(content[k-1]), "type") != "tool_result" {
					// Text before a tool_result: the results are not
					// "immediately after" the tool_use.
					c.fail("%s.content.%d", antMissingResult, where, k)
				}
			}
		}
	}
}

func (c *checker) anthropicBlocks(where, role string, content []any, ids map[string]bool) {
	afterUse := false
	for k, b := range content {
		bw := fmt.Sprintf("%s.content.%d", where, k)
		bm := mapOf(b)
		if bm == nil {
			c.fail(bw, antShape)
			continue
		}
		typ := str(bm, "type")
		switch typ {
		case "text":
			c.keys(bm, bw, antShape, []string{"type", "text"}, "cache_control")
			c.text(field(bm, "text"), bw, antEmptyText, antBlankText)
			if afterUse {
				// Text after a tool_use in one turn: the provider does not
				// see the result as immediately after the call.
				c.fail(bw, antMissingResult)
			}
		case "image":
			if role != "user" {
				c.fail(bw, "Image blocks are only allowed in user messages")
			}
			c.anthropicImage(bm, bw)
		case "tool_use":
			if role != "assistant" {
				c.fail(bw, "tool_use blocks are only allowed in assistant messages")
			}
			c.keys(bm, bw, antShape, []string{"type", "id", "name", "input"}, "cache_control")
			id := str(bm, "id")
			if !antIDPattern.MatchString(id) {
				c.fail(bw+".id", antBadID)
			}
			if ids[id] {
				c.fail(bw+".id", antUniqueID)
			}
			ids[id] = true
			if !namePattern.MatchString(str(bm, "name")) {
				c.fail(bw+".name", "tool_use.name: String should match pattern '^[a-zA-Z0-9_-]{1,64}$'")
			}
			if mapOf(field(bm, "input")) == nil {
				c.fail(bw+".input", "tool_use.input: Input should be a valid dictionary")
			}
			afterUse = true
		case "tool_result":
			if role != "user" {
				c.fail(bw, "tool_result blocks are only allowed in user messages")
			}
			c.keys(bm, bw, antShape, []string{"type", "tool_use_id"}, "content", "is_error", "cache_control")
			if v, ok := bm.Get("content"); ok {
				inner, ok := arrOf(v)
				if !ok || len(inner) == 0 {
					c.fail(bw+".content", antEmptyContent)
				}
				for j, e := range inner {
					ew := fmt.Sprintf("%s.content.%d", bw, j)
					em := mapOf(e)
					switch str(em, "type") {
					case "text":
						c.keys(em, ew, antShape, []string{"type", "text"})
						c.text(field(em, "text"), ew, antEmptyText, antBlankText)
					case "image":
						c.anthropicImage(em, ew)
					default:
						c.fail(ew, antShape)
					}
				}
			}
			if v, ok := bm.Get("is_error"); ok {
				if _, isBool := v.(bool); !isBool {
					c.fail(bw+".is_error", "Input should be a valid boolean")
				}
			}
		case "thinking", "redacted_thinking":
			if role != "assistant" {
				c.fail(bw, "thinking blocks are only allowed in assistant messages")
			}
			if typ == "thinking" {
				c.keys(bm, bw, antShape, []string{"type", "thinking", "signature"})
				if str(bm, "signature") == "" {
					c.fail(bw, antInvalidSig)
				}
			} else {
				c.keys(bm, bw, antShape, []string{"type", "data"})
				if str(bm, "data") == "" {
					c.fail(bw, antInvalidSig)
				}
			}
			if k == len(content)-1 {
				c.fail(bw, antThinkingLast)
			}
			afterUse = false // a new segment
		default:
			c.fail(bw, antShape)
		}
	}
}

func (c *checker) anthropicImage(bm *record.Map, where string) {
	c.keys(bm, where, antShape, []string{"type", "source"}, "cache_control")
	src := mapOf(field(bm, "source"))
	if src == nil {
		c.fail(where, "image.source: Field required")
		return
	}
	switch str(src, "type") {
	case "base64":
		c.keys(src, where+".source", antShape, []string{"type", "media_type", "data"})
		if !imageTypes[str(src, "media_type")] {
			c.fail(where, antMediaType)
		}
		if str(src, "data") == "" {
			c.fail(where, "image.source.data: String should have at least 1 character")
		} else if !isBase64(str(src, "data")) {
			c.fail(where, antBase64)
		}
	case "url":
		c.keys(src, where+".source", antShape, []string{"type", "url"})
	default:
		c.fail(where, antShape)
	}
}

// ---- OpenAI Chat Completions

func (c *checker) chat(body *record.Map) {
	c.keys(body, "body", chatShape, []string{"messages"})
	msgs, ok := arrOf(field(body, "messages"))
	if !ok {
		c.fail("messages", "messages: expected an array")
		return
	}
	seenResult := map[string]int{}
	allIDs := map[string]bool{}
	for i := 0; i < len(msgs); i++ {
		where := fmt.Sprintf("messages[%d]", i)
		m := mapOf(msgs[i])
		if m == nil {
			c.fail(where, chatShape)
			continue
		}
		switch role := str(m, "role"); role {
		case "system", "developer", "user":
			c.keys(m, where, chatShape, []string{"role", "content"}, "name")
			c.chatContent(m, where, role == "user")
		case "assistant":
			c.keys(m, where, chatShape, []string{"role"}, "content", "tool_calls", "name", "refusal")
			content, hasContent := m.Get("content")
			tc, hasCalls := m.Get("tool_calls")
			calls, _ := arrOf(tc)
			if hasCalls && len(calls) == 0 {
				c.fail(where+".tool_calls", chatEmptyArray)
			}
			if (!hasContent || content == nil) && len(calls) == 0 {
				c.fail(where+".content", "Invalid value for 'content': expected a string, got null.")
			}
			if hasContent && content != nil {
				switch x := content.(type) {
				case string:
				case []any:
					if len(x) == 0 {
						c.fail(where+".content", chatEmptyArray)
					}
					for k, p := range x {
						pm := mapOf(p)
						if str(pm, "type") == "image_url" {
							c.fail(fmt.Sprintf("%s.content[%d]", where, k), chatImageNotUser)
						} else if str(pm, "type") != "text" {
							c.fail(fmt.Sprintf("%s.content[%d]", where, k), chatShape)
						}
					}
				default:
					c.fail(where+".content", "Invalid type for 'content'")
				}
			}
			want := map[string]bool{}
			for k, e := range calls {
				em := mapOf(e)
				ew := fmt.Sprintf("%s.tool_calls[%d]", where, k)
				c.keys(em, ew, chatShape, []string{"id", "type", "function"})
				id := str(em, "id")
				if len(id) > 40 {
					c.fail(ew+".id", chatIDTooLong)
				}
				if id == "" {
					c.fail(ew+".id", "string too short")
				}
				if allIDs[id] {
					c.fail(ew+".id", chatDuplicate)
				}
				allIDs[id] = true
				fm := mapOf(field(em, "function"))
				c.keys(fm, ew+".function", chatShape, []string{"name", "arguments"})
				if !namePattern.MatchString(str(fm, "name")) {
					c.fail(ew+".function.name", "string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'.")
				}
				if _, ok := field(fm, "arguments").(string); !ok {
					c.fail(ew+".function.arguments", "Invalid type for 'arguments': expected a string")
				}
				want[id] = true
			}
			// The tool messages must follow at once, one per call.
			j := i + 1
			for ; j < len(msgs); j++ {
				tm := mapOf(msgs[j])
				if str(tm, "role") != "tool" {
					break
				}
				delete(want, str(tm, "tool_call_id"))
			}
			if len(want) > 0 {
				c.fail(where, chatMissingResult)
			}
		case "tool":
			c.keys(m, where, chatShape, []string{"role", "tool_call_id", "content"})
			id := str(m, "tool_call_id")
			// A tool message answers the calls of the assistant message
			// before the run of tool messages it is in.
			k := i - 1
			for k >= 0 && str(mapOf(msgs[k]), "role") == "tool" {
				k--
			}
			answers := false
			if k >= 0 && str(mapOf(msgs[k]), "role") == "assistant" {
				calls, _ := arrOf(field(mapOf(msgs[k]), "tool_calls"))
				for _, e := range calls {
					answers = answers || str(mapOf(e), "id") == id
				}
			}
			if !answers {
				c.fail(where, chatOrphanResult)
			}
			if _, dup := seenResult[id]; dup {
				c.fail(where, chatDuplicate)
			}
			seenResult[id] = i
			switch x := field(m, "content").(type) {
			case string:
			case []any:
				if len(x) == 0 {
					c.fail(where+".content", chatEmptyArray)
				}
				for k, p := range x {
					pm := mapOf(p)
					if str(pm, "type") != "text" {
						c.fail(fmt.Sprintf("%s.content[%d]", where, k), chatImageNotUser)
					}
				}
			default:
				c.fail(where+".content", "Invalid type for 'content'")
			}
		default:
			c.fail(where+".role", "Invalid value for 'role'")
		}
	}
}

func (c *checker) chatContent(m *record.Map, where string, images bool) {
	switch x := field(m, "content").(type) {
	case string:
	case []any:
		if len(x) == 0 {
			c.fail(where+".content", chatEmptyArray)
		}
		for k, p := range x {
			pm := mapOf(p)
			pw := fmt.Sprintf("%s.content[%d]", where, k)
			switch str(pm, "type") {
			case "text":
				c.keys(pm, pw, chatShape, []string{"type", "text"})
			case "image_url":
				if !images {
					c.fail(pw, chatImageNotUser)
				}
				c.keys(pm, pw, chatShape, []string{"type", "image_url"})
				iu := mapOf(field(pm, "image_url"))
				c.keys(iu, pw+".image_url", chatShape, []string{"url"}, "detail")
				c.dataURL(str(iu, "url"), pw)
			default:
				c.fail(pw, chatShape)
			}
		}
	default:
		c.fail(where+".content", "Invalid type for 'content'")
	}
}

func (c *checker) dataURL(u, where string) {
	if rest, ok := strings.CutPrefix(u, "data:"); ok {
		mime, data, ok := strings.Cut(rest, ";base64,")
		if !ok || !imageTypes[mime] || !isBase64(data) {
			c.fail(where, chatImageData)
		}
		return
	}
	if !strings.HasPrefix(u, "https://") && !strings.HasPrefix(u, "http://") {
		c.fail(where, "Invalid image URL")
	}
}

// ---- OpenAI Responses

func (c *checker) responses(body *record.Map) {
	c.keys(body, "body", respShape, []string{"input"})
	items, ok := arrOf(field(body, "input"))
	if !ok {
		c.fail("input", "input: expected an array")
		return
	}
	calls := map[string]bool{}
	outputs := map[string]bool{}
	for i, v := range items {
		where := fmt.Sprintf("input[%d]", i)
		m := mapOf(v)
		if id, ok := m.Get("id"); ok {
			s, _ := id.(string)
			if !strings.HasPrefix(s, "fc") && !strings.HasPrefix(s, "msg") && !strings.HasPrefix(s, "rs") {
				c.fail(where+".id", respItemID)
			}
		}
		switch str(m, "type") {
		case "message":
			c.keys(m, where, respShape, []string{"type", "role", "content"})
			role := str(m, "role")
			switch x := field(m, "content").(type) {
			case string:
				if role != "assistant" && x == "" {
					c.fail(where+".content", "string too short")
				}
			case []any:
				if len(x) == 0 {
					c.fail(where+".content", respEmptyArray)
				}
				for k, p := range x {
					pw := fmt.Sprintf("%s.content[%d]", where, k)
					pm := mapOf(p)
					switch t := str(pm, "type"); {
					case role == "assistant" && t != "output_text" && t != "refusal":
						c.fail(pw, respAssistantText)
					case t == "input_text":
						c.keys(pm, pw, respShape, []string{"type", "text"})
					case t == "input_image":
						c.responsesImage(pm, pw)
					default:
						c.fail(pw, respShape)
					}
				}
			default:
				c.fail(where+".content", "Invalid type for 'content'")
			}
			switch role {
			case "user", "system", "developer", "assistant":
			default:
				c.fail(where+".role", "Invalid value for 'role'")
			}
		case "function_call":
			c.keys(m, where, respShape, []string{"type", "call_id", "name", "arguments"}, "id", "status")
			id := str(m, "call_id")
			if id == "" {
				c.fail(where+".call_id", "string too short")
			}
			if len(id) > 64 {
				c.fail(where+".call_id", respCallIDLength)
			}
			if calls[id] {
				c.fail(where, respDuplicate)
			}
			calls[id] = true
			if !namePattern.MatchString(str(m, "name")) {
				c.fail(where+".name", "string does not match pattern")
			}
			if _, ok := field(m, "arguments").(string); !ok {
				c.fail(where+".arguments", "Invalid type for 'arguments'")
			}
		case "function_call_output":
			c.keys(m, where, respShape, []string{"type", "call_id", "output"}, "id", "status")
			id := str(m, "call_id")
			if len(id) > 64 {
				c.fail(where+".call_id", respCallIDLength)
			}
			if !calls[id] {
				c.fail(where, respOrphanOutput)
			}
			if outputs[id] {
				c.fail(where, respDuplicate)
			}
			outputs[id] = true
			switch x := field(m, "output").(type) {
			case string:
			case []any:
				if len(x) == 0 {
					c.fail(where+".output", respEmptyArray)
				}
				for k, p := range x {
					pw := fmt.Sprintf("%s.output[%d]", where, k)
					pm := mapOf(p)
					switch str(pm, "type") {
					case "input_text":
						c.keys(pm, pw, respShape, []string{"type", "text"})
					case "input_image":
						c.responsesImage(pm, pw)
					default:
						c.fail(pw, respShape)
					}
				}
			default:
				c.fail(where+".output", "Invalid type for 'output'")
			}
		default:
			c.fail(where+".type", "Invalid value for 'type'")
		}
	}
	for id := range calls {
		if !outputs[id] {
			c.fail("input: "+id, respMissingOutput)
		}
	}
}

func (c *checker) responsesImage(pm *record.Map, where string) {
	c.keys(pm, where, respShape, []string{"type", "image_url"}, "detail")
	c.dataURL(str(pm, "image_url"), where)
	switch field(pm, "detail") {
	case nil, "auto", "low", "high":
	default:
		c.fail(where+".detail", "Invalid value for 'detail'")
	}
}

// ---- Gemini generateContent

var gemImageTypes = map[string]bool{"image/jpeg": true, "image/png": true, "image/webp": true, "image/heic": true, "image/heif": true, "image/gif": true}

func (c *checker) gemini(body *record.Map) {
	c.keys(body, "body", gemShape, []string{"contents"}, "systemInstruction")
	if si, ok := body.Get("systemInstruction"); ok {
		sm := mapOf(si)
		c.keys(sm, "systemInstruction", gemShape, []string{"parts"}, "role")
		parts, _ := arrOf(field(sm, "parts"))
		if len(parts) == 0 {
			c.fail("systemInstruction.parts", gemEmptyParts)
		}
		for k, p := range parts {
			pm := mapOf(p)
			c.keys(pm, fmt.Sprintf("systemInstruction.parts[%d]", k), gemShape, []string{"text"})
		}
	}
	contents, ok := arrOf(field(body, "contents"))
	if !ok {
		c.fail("contents", "contents: expected a list")
		return
	}
	type turn struct {
		role              string
		calls, responses  int
		callNames         []string
		leadingResponses  bool
		otherAfterRespons bool
	}
	turns := make([]turn, len(contents))
	for i, v := range contents {
		where := fmt.Sprintf("contents[%d]", i)
		m := mapOf(v)
		c.keys(m, where, gemShape, []string{"role", "parts"})
		t := turn{role: str(m, "role")}
		if t.role != "user" && t.role != "model" {
			c.fail(where+".role", gemRole)
		}
		if i > 0 && turns[i-1].role == t.role {
			c.fail(where, alternate)
		}
		parts, _ := arrOf(field(m, "parts"))
		if len(parts) == 0 {
			c.fail(where+".parts", gemEmptyParts)
		}
		inResponses := true
		for k, p := range parts {
			pw := fmt.Sprintf("%s.parts[%d]", where, k)
			pm := mapOf(p)
			if pm == nil {
				c.fail(pw, gemOneof)
				continue
			}
			data := 0
			for _, key := range []string{"text", "inlineData", "functionCall", "functionResponse"} {
				if _, ok := pm.Get(key); ok {
					data++
				}
			}
			if data != 1 {
				c.fail(pw+".data", gemOneof)
			}
			c.keys(pm, pw, gemShape, nil, "text", "inlineData", "functionCall", "functionResponse", "thoughtSignature")
			if sig, ok := pm.Get("thoughtSignature"); ok {
				s, _ := sig.(string)
				if _, err := base64.StdEncoding.DecodeString(s); err != nil || s == "" {
					c.fail(pw+".thoughtSignature", gemSignature)
				}
			}
			isResponse := false
			switch {
			case pm.Members != nil && field(pm, "text") != nil:
				tx, _ := field(pm, "text").(string)
				if tx == "" {
					c.fail(pw+".text", gemOneof)
				}
			case field(pm, "inlineData") != nil:
				d := mapOf(field(pm, "inlineData"))
				c.keys(d, pw+".inlineData", gemShape, []string{"mimeType", "data"})
				if !gemImageTypes[str(d, "mimeType")] || str(d, "data") == "" {
					c.fail(pw+".inlineData", "Unsupported MIME type")
				} else if !isBase64(str(d, "data")) {
					c.fail(pw+".inlineData.data", gemBase64)
				}
			case field(pm, "functionCall") != nil:
				fc := mapOf(field(pm, "functionCall"))
				c.keys(fc, pw+".functionCall", gemShape, []string{"name", "args"}, "id")
				if t.role != "model" {
					c.fail(pw, "functionCall parts are only allowed in model content")
				}
				if !gemNamePatter.MatchString(str(fc, "name")) {
					c.fail(pw+".functionCall.name", "Invalid function name")
				}
				if mapOf(field(fc, "args")) == nil {
					c.fail(pw+".functionCall.args", "Invalid value at 'contents.parts.function_call.args' (type.googleapis.com/google.protobuf.Struct)")
				}
				t.calls++
				t.callNames = append(t.callNames, str(fc, "name"))
			case field(pm, "functionResponse") != nil:
				fr := mapOf(field(pm, "functionResponse"))
				c.keys(fr, pw+".functionResponse", gemShape, []string{"name", "response"}, "id", "parts")
				if mapOf(field(fr, "response")) == nil {
					c.fail(pw+".functionResponse.response", "Invalid value at 'contents.parts.function_response.response' (type.googleapis.com/google.protobuf.Struct)")
				}
				if t.role != "user" {
					c.fail(pw, "functionResponse parts are only allowed in user content")
				}
				if !inResponses {
					c.fail(pw, gemResponseTurn)
				}
				isResponse = true
				t.responses++
			}
			if !isResponse {
				inResponses = false
			}
		}
		turns[i] = t
	}
	for i, t := range turns {
		where := fmt.Sprintf("contents[%d]", i)
		if t.calls > 0 {
			if i == 0 || turns[i-1].role != "user" {
				c.fail(where, gemCallTurn)
			}
			if i+1 >= len(turns) || turns[i+1].responses == 0 {
				c.fail(where, gemCount)
			}
		}
		if t.responses > 0 {
			if i == 0 || turns[i-1].calls == 0 {
				c.fail(where, gemResponseTurn)
			} else if turns[i-1].calls != t.responses {
				c.fail(where, gemCount)
			}
		}
	}
}
