/*
Package render turns the neutral model context (CONTEXT.md, what
projection.Build and Session.Messages return) into the provider-specific
part of a request body that the provider accepts: Anthropic Messages,
OpenAI Chat Completions, OpenAI Responses or Gemini generateContent.

	body, report := render.Render(render.Anthropic, messages, render.Options{Seqs: seqs})
	b, _ := body.AppendJSON(nil) // {"system": [...], "messages": [...]}

The neutral context pairs every call with a result somewhere after it;
providers need more: the result right after its call, one result per call,
ids of their own alphabet and length, no empty content, system text where
they take it, images where they take them. Render enforces every rule
docs/RENDER.md lists, each with the provider error it prevents. It never
invents: nothing is answered that was not, no turn is added; what cannot
be made valid is left out, and the Report lists every change, so that a
runtime can log why a body differs from its transcript.

Rendering is a pure function of the messages: the same messages give the
same bytes, keys in a fixed order and ids mapped the same way, and a
context that grows keeps the rendering of its unchanged beginning, so the
providers' prompt caches keep hitting. Estimate and CheckBudget give the
size of a body and where a compaction may cut.

Render does no I/O and holds no state; the server renders on request.
RenderJSON and RenderMsgpack render a context that grew from the State of
its rendering before, byte for byte as Render would, redoing only what
follows the first message that changed (incremental.go).

# Where things are

	render.go       Format, Options, Body, Report, Render
	provider.go     the provider type and the table of formats
	plan.go         the neutral context taken apart: items, calls, results
	pair.go         calls paired with their results, ids mapped, the items laid out
	image.go        the image shapes records carry, and which a body may send
	emit.go         what every format's layout shares: body messages, text, images
	ids.go          call ids and tool names as the providers take them
	anthropic.go    the Anthropic Messages format
	openai.go       the OpenAI Chat Completions and Responses formats
	gemini.go       the Gemini generateContent format
	incremental.go  RenderJSON, RenderMsgpack: rendering from the checkpoint before the first change
	state.go        State: a rendering kept, its checkpoints, its report on the wire
	encoder.go      the encoder of a body's messages, in JSON or msgpack, resumed at a checkpoint
	encode.go       the report, usage and budget as they go on the wire
	usage.go        Estimate, Tokens, CheckBudget: sizes, image tokens, where to compact

# Adding a format

A format is a provider value (provider.go) in a file of its own: its
name, the keys of its body's members, whether it merges messages of a role
into one (blocks), what its API takes (id length, tool names, image types,
images by URL), its image token formula, and out, which lays the plan's
items out as its messages, marking checkpoints as it goes (see
anthropicOut or openAIResponsesOut). Then:

  - add its Format constant and its place in Formats (render.go), and its
    entry in providers (provider.go): the only lists of formats;
  - give it golden files (testdata/golden/NAME, written with -update),
    and a schema (testdata/schemas) or validator (validate_test.go) the
    tests check every rendering against.

Nothing else names a format: Render, RenderJSON and RenderMsgpack, the
report's encoding, Estimate and Tokens, and the service's replies read its
provider. TestRenderJSON_Incremental and TestRenderMsgpack_Incremental
then check, for every format in Formats, that a context rendered as it
grows equals a rendering from scratch at every step.
*/
package render
