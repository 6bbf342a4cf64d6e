package render

import (
	"errors"
	"fmt"
	"strings"

	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
)

// Format names a shape of reply: the neutral context of CONTEXT.md, or the
// provider-specific part of a request body.
type Format string

// The formats. Neutral is the context as CONTEXT.md defines it, unchanged.
const (
	Neutral         Format = "neutral"
	Anthropic       Format = "anthropic"
	OpenAIChat      Format = "openai-chat"
	OpenAIResponses Format = "openai-responses"
	Gemini          Format = "gemini"
)

// Formats lists every format, neutral first.
var Formats = []Format{Neutral, Anthropic, OpenAIChat, OpenAIResponses, Gemini}

// ErrUnknownFormat is wrapped by ParseFormat's error.
var ErrUnknownFormat = errors.New("unknown format")

// ParseFormat returns the format named s; "" is Neutral.
func ParseFormat(s string) (Format, error) {
	if s == "" {
		return Neutral, nil
	}
	for _, f := range Formats {
		if string(f) == s {
			return f, nil
		}
	}
	return "", fmt.Errorf("%w %q: want one of %s", ErrUnknownFormat, s, formatList())
}

func formatList() string {
	names := make([]string, len(Formats))
	for i, f := range Formats {
		names[i] = string(f)
	}
	return strings.Join(names, ", ")
}

// Options adjust a rendering. The zero value is valid.
type Options struct {
	// Seqs holds the stream sequence of the record each message came from
	// (projection.Session.MessageSeqs); when given, changes name the
	// record, and Usage can name where a compaction may cut.
	Seqs []uint64
	// SeqsFrom, when Seqs is nil, appends to dst the sequences of the
	// messages from the i-th on (projection.Session.MessageSeqsFrom):
	// RenderJSON and RenderMsgpack then ask only for those of the
	// messages the state rendered from did not hold, and State.Seqs
	// returns them all. Render does not read it.
	SeqsFrom func(dst []uint64, i int) []uint64
	// BrowserTools names the tools whose screenshots CONTEXT.md's pass 3
	// trims, to place Anthropic's cache breakpoint before the latest one;
	// nil means projection.DefaultBrowserTools.
	BrowserTools []string
}

// Body is a rendered context: the provider-specific fields of a request
// body, in the order they are encoded (for Neutral: "messages").
type Body struct {
	Format Format
	Fields *record.Map
}

// AppendJSON appends the body as a JSON object.
func (b Body) AppendJSON(dst []byte) ([]byte, error) { return record.AppendJSON(dst, b.Fields) }

// JSONLen returns the length of the body's JSON object without encoding
// it: what Estimate counts, for a body sent in another encoding.
func (b Body) JSONLen() (int, error) { return record.JSONLen(b.Fields) }

// Report says what a rendering changed to make the neutral context valid
// for the provider, so that a runtime can log why a body differs.
type Report struct {
	// Changes lists every change, in the order of the neutral messages
	// they concern.
	Changes []Change
	// EndsWithAssistant is set when the body's last message is the
	// assistant's (model's): the provider takes it as a prefill, or
	// refuses it; the runtime appends its next user turn. Nothing is
	// appended here, since that would invent a turn.
	EndsWithAssistant bool
	// CacheBreakpoint, for Anthropic, is the block on which a cache_control
	// breakpoint keeps hitting next turn; nil when the body has no block.
	CacheBreakpoint *Breakpoint
}

// Breakpoint locates a block: Message indexes the body's messages, Block
// that message's content.
type Breakpoint struct {
	Message int `json:"message"`
	Block   int `json:"block"`
}

// Change kinds.
const (
	IDRenamed       = "id_renamed"        // a call id the provider would refuse, or a repeated one
	NameRenamed     = "name_renamed"      // a tool name outside the provider's pattern
	ResultMoved     = "result_moved"      // a result placed right after its call
	DuplicateResult = "duplicate_dropped" // a second result for one call
	CallRemoved     = "call_removed"      // a call that cannot be sent (Reason says why)
	ResultRemoved   = "result_removed"    // a result whose call cannot be sent
	MessagesMerged  = "messages_merged"   // a message merged into the one before it
	BlockRemoved    = "block_removed"     // a block the provider would refuse (Reason says why)
	MessageRemoved  = "message_removed"   // a message left with nothing to send
	ImageMoved      = "image_moved"       // a tool result's images moved to where the provider takes them
	SystemAsUser    = "system_as_user"    // a system message after the first turn sent as user text
	CallsReordered  = "calls_reordered"   // tool calls moved after the text of their turn
	ArgsWrapped     = "arguments_wrapped" // call arguments that are not an object, wrapped in one
)

// Change is one change a rendering made.
type Change struct {
	Kind string
	// Message indexes the neutral messages; Block its content array, -1
	// for the message as a whole or a tool_calls entry.
	Message, Block int
	Seq            uint64 // the record's stream sequence, 0 when unknown
	ID             string // the call id concerned, if any
	To             string // the new id or name, for a rename
	Into           int    // for a merge: the neutral message merged into
	Reason         string
}

// Render renders the neutral context (projection values: *record.Map
// messages as Session.Messages and Build return them) in format f, one of
// Formats (ParseFormat reads "" as Neutral; Render does not). It
// never fails: what cannot be made valid for the provider is left out and
// reported. The messages are not modified; the body shares strings and
// unchanged values with them.
func Render(f Format, messages []any, opt Options) (Body, Report) {
	pv := providerOf(f)
	if pv.out == nil {
		if messages == nil {
			messages = []any{}
		}
		return Body{Format: Neutral, Fields: record.NewMap("messages", messages)}, Report{}
	}
	p := newPlan(pv, messages, opt)
	p.extract()
	p.pair()
	p.layout()
	system, l, shot := pv.out(p)
	role := l.lastRole()
	p.report.EndsWithAssistant = role == "assistant" || role == "model"
	if pv.breakpoint && len(l.msgs) > 0 {
		p.report.CacheBreakpoint = breakpoint(len(l.msgs)-1, func(m int) int { return len(l.msgs[m].blocks) },
			func(m, b int) bool { return isThinking(l.msgs[m].blocks[b]) }, shot)
	}
	body := record.NewMap()
	if system != nil {
		body.Set(pv.system, system)
	}
	if pv.blocks != "" {
		body.Set(pv.messages, l.containers(pv.blocks))
	} else {
		body.Set(pv.messages, l.values())
	}
	p.sortChanges()
	return Body{Format: f, Fields: body}, p.report
}

func browserSet(names []string) map[string]bool {
	if names == nil {
		names = projection.DefaultBrowserTools
	}
	set := make(map[string]bool, len(names))
	for _, n := range names {
		set[n] = true
	}
	return set
}
