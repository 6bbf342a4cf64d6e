package render

// A provider is a format: everything in which the bodies of the formats
// differ. The plan (plan.go) takes the neutral context apart the same way
// for all of them; a provider lays the parts out as its API takes them
// (out), and says how its body is keyed and what its API accepts. Render,
// RenderJSON and RenderMsgpack, the report's encoding and the token
// estimate read a format's provider, never its name.
type provider struct {
	format Format

	// out lays the plan's items out as the body's messages: the system
	// member's value (nil for none) and the messages, and the latest
	// browser screenshot (its message and block in the body, or -1s)
	// for the cache breakpoint. An incremental rendering calls it from
	// the plan's checkpoint (plan.from), where it marks the checkpoints
	// it passes (plan.mark). nil for Neutral, which is not laid out.
	out func(p *plan) (system any, l *outList, shot [2]int)

	// system and messages are the keys of the body's members; system is
	// set only when out gives a value.
	system, messages string
	// blocks, when set, is the key of a body message's blocks: the
	// format merges consecutive messages of a role into one {"role",
	// blocks: [...]}, and a body message after a checkpoint may go on
	// with the blocks of later neutral messages. Empty: every body
	// message (or item) is a value of its own (outList.addFlat).
	blocks string
	// breakpoint is set when the report carries cache_breakpoint, the
	// block a prompt cache breakpoint keeps hitting on (Anthropic).
	breakpoint bool
	// userTurn is set when a call needs a user turn before it: a
	// checkpoint is only taken after one (Gemini).
	userTurn bool

	// idMax is the longest call id the API takes.
	idMax int
	// nameLetter: a tool name starts with a letter or '_'.
	nameLetter bool
	// heif: the API takes image/heic and image/heif besides JPEG, PNG,
	// GIF and WebP.
	heif bool
	// noImageURL, when set, is why an image by URL is left out: the API
	// takes inline images only.
	noImageURL string
	// imageTokens estimates the input tokens of an image of w x h pixels.
	imageTokens func(w, h int) int
}

// providers are the formats, keyed by name. Each provider's file declares
// its own; Formats lists their names in order.
var providers = map[Format]*provider{
	Neutral:         neutralProvider,
	Anthropic:       anthropicProvider,
	OpenAIChat:      openAIChatProvider,
	OpenAIResponses: openAIResponsesProvider,
	Gemini:          geminiProvider,
}

// providerOf returns format f's provider; f is one of Formats.
func providerOf(f Format) *provider {
	pv := providers[f]
	if pv == nil {
		panic("render: unknown format " + string(f))
	}
	return pv
}

// neutralProvider is the context as CONTEXT.md defines it: not laid out
// (Render returns it as it is); its images count as Anthropic's.
var neutralProvider = &provider{
	format:      Neutral,
	messages:    "messages",
	idMax:       64,
	imageTokens: anthropicImageTokens,
}
