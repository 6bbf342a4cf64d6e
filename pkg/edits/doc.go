// Package edits applies context edits to a session's neutral context
// before it is rendered (docs/EDITS.md): the content of old tool results
// cleared once the context is over a number of tokens, the thinking of
// older assistant turns removed, old images replaced by the notice of
// CONTEXT.md section 5.
//
// It is pure: values in, values out, no NATS and no clock. Parse reads
// the request's edits field into a Config; Apply takes the messages
// projection.Session.Messages returns and gives back edited copies (the
// messages given are never modified), with a Report of what changed.
// The token estimates come from the caller (Options.Tokens and
// Options.ValueTokens, package render's), so that the edits are decided
// on the estimate of the format the reply is rendered in.
//
// The same messages and Config always give the same result, and the
// cleared results change only when the excess over the trigger crosses a
// multiple of ToolResults.ClearAtLeastTokens: between those points the
// edited context of a growing session is the one before plus the new
// messages, and a provider's prompt cache keeps hitting.
package edits
