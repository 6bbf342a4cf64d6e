/*
Package importer converts the transcripts that agent tools keep on disk
into ctxd records (docs/CONTEXT.md), so that history written before ctxd
can be published to a session's stream. It does no I/O beyond reading what
it is given and knows nothing of NATS: values in, records out.

One parser per format:

	claude-code  Claude Code's ~/.claude/projects/<project>/<session>.jsonl and its subagent files
	codex        Codex CLI's ~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl
	pi           pi's ~/.pi/agent/sessions/--<cwd>--/*.jsonl (versions 1 to 3)
	gemini       Gemini CLI's ~/.gemini/tmp/<project>/chats/session-*.json and .jsonl
	openhands    an OpenHands (V1 SDK) conversation directory of event-*.json files

[Detect] and [DetectFS] tell the format from the content.

Claude Code's parser is in three files: claudecode.go reads the entries
and groups them by conversation, claudebranch.go selects the active
branch, claudemessage.go makes the records. Beside the parsers,
importer.go holds Parse and Detect; compaction.go the builder every parser writes
records with; raw.go the records kept as the source's bytes;
compaction.go the compactions found in a source; rewind.go Rewind;
report.go the Report; values.go reading source values.

	ts, err := importer.Parse(importer.Pi, "session.jsonl", f)
	for _, t := range ts {
		// t.Session is the default ctxd session id; each of t.Records has a
		// stable ID for Nats-Msg-Id, its JSON to publish, and its Value.
	}

# What a conversion keeps

Only the active branch: the entries on the path from the last one back to
the root (Claude Code's uuid/parentUuid graph, pi's tree, OpenHands'
parent_id), with Gemini's rewinds and Codex's rollbacks applied. Claude
Code's parallel tool calls, written as a chain of lines whose results hang
off the chain, are recording artefacts and stay. What the tool sent to the
model is kept as it was written; what ctxd would drop (Codex's developer
role, Gemini's gemini role, pi's branch summaries) is renamed or rewritten
into a message ctxd keeps; images become {"type":"image",...} blocks with
their base64 data unchanged; each compaction becomes a valid ctxd compaction
whose snapshot is made of the converted records. Nothing is invented: a call
without a result stays without one.

# Identity

Every record has an ID derived from the source's own identity (an entry's
uuid or id, else the file's session id and the line), so converting the
same file twice, or the same file after it grew, gives the same IDs for the
same records. The caller turns them into Nats-Msg-Id headers.

# Reading

A file is read whole, its lines decoded on all processors. A [Parser]
bounds the lines it reads (MaxLine): a longer one fails the file as soon
as it is read, so that an input without newlines is refused, not held.

A line that does not decode fails the file, naming it: entries hang off
each other (a parentUuid, a parent id, a rewind), and leaving one out
could leave out the conversation before it, with nothing to show but a
count of abandoned entries. The one exception is invalid UTF-8 inside a
string, a byte a tool printed that no model reads either: it is replaced
with U+FFFD, as encoding/json does, and the report lists the line among
the approximations.

A large line of a Claude Code or pi message is checked (it is JSON the
record decoder takes) and scanned rather than decoded: only the fields
the conversion reads are decoded, and the message is kept as the line's
own bytes, which are what the record's JSON is made of. Record.Value
decodes them when it is asked for. ParseBytes converts bytes the caller
holds, a mapped file, without copying them.

# Reports

A [Report] counts the records by class, the source entries skipped as
metadata, the entries left on abandoned branches, and lists the entries not
understood (with their type and line) and what was approximated. An unknown
entry is reported, never fatal (but for a line that does not decode,
above); a file is refused ([ErrFormat]) only when nothing in it is
understood.
*/
package importer
