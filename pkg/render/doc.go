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
*/
package render
