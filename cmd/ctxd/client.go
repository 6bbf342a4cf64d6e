package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ctxd/ctxd/pkg/bus"
	"github.com/ctxd/ctxd/pkg/client"
	"github.com/ctxd/ctxd/pkg/edits"
	"github.com/ctxd/ctxd/pkg/protocol"
	"github.com/ctxd/ctxd/pkg/record"
	"github.com/ctxd/ctxd/pkg/subject"
)

const publishAbout = `Publishes records to transcripts.SESSION and prints the stream sequence
of the last one. Records are read from FILE, or standard input when FILE is
absent or "-", as JSON lines (blank lines skipped). Every line is checked to
be a JSON object before anything is published; a bad line publishes nothing.`

func runPublish(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "publish", "publish --session SESSION [flags] [FILE]", publishAbout)
	conn := addConnFlags(fs, e, true)
	session := fs.String("session", "", "session id: 1 to 128 of A-Z a-z 0-9 _ - (required)")
	asMsgpack := fs.Bool("msgpack", false, "publish each record as msgpack instead of JSON")
	msgIDPrefix := fs.String("msg-id-prefix", "", "send Nats-Msg-Id PREFIX-N for the N-th record, so a re-run within the duplicate window stores nothing twice")
	timeout := addTimeout(fs, time.Minute)
	pos, err := parse(e, fs, args)
	if err != nil {
		return err
	}
	if err := e.bound("publish", "--timeout", *timeout); err != nil {
		return err
	}
	if *session == "" {
		fmt.Fprintln(e.stderr, "ctxd publish: --session is required")
		return errUsage
	}
	if err := checkSession(e, "publish", *session); err != nil {
		return err
	}
	subj, err := subject.Transcript(*session)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		fmt.Fprintf(e.stderr, "ctxd publish: at most one FILE, got %d arguments\n", len(pos))
		return errUsage
	}
	in := e.stdin
	if len(pos) == 1 && pos[0] != "-" {
		f, err := os.Open(pos[0])
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}
	data, err := readAll(in)
	if err != nil {
		return err
	}
	var payloads [][]byte
	for n, line := range bytes.Split(data, []byte{'\n'}) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		v, err := record.DecodeJSON(line)
		if err != nil {
			return newLineError(n+1, err)
		}
		if _, ok := v.(*record.Map); !ok {
			return &lineError{line: n + 1, err: fmt.Errorf("a record must be a JSON object, got %s", record.TypeName(v))}
		}
		if *asMsgpack {
			if line, err = record.MarshalMsgpack(v); err != nil {
				return newLineError(n+1, err)
			}
		}
		payloads = append(payloads, line)
	}
	if len(payloads) == 0 {
		return errors.New("no records to publish")
	}
	nc, err := conn.connect(e, fs)
	if err != nil {
		return err
	}
	defer nc.Close()
	var msgID func(int) string
	if *msgIDPrefix != "" {
		msgID = func(i int) string { return fmt.Sprintf("%s-%d", *msgIDPrefix, i+1) }
	}
	last, err := bus.PublishAll(ctx, nc, subj, payloads, msgID)
	if err != nil {
		return err
	}
	fmt.Fprintln(e.stdout, last)
	return nil
}

const contextAbout = `Requests ctxd.context.SESSION and prints the reply as JSON (with
--partitions P, ctxd.p.K.SESSION first: the instance that applies the
session's partition K; ctxd.context.SESSION when none does):
  {"session": ..., "seq": ..., "messages": [...], "dropped": {...}}
With --min-seq N the reply waits until the projection has applied every
record up to stream sequence N (pass the sequence ctxd publish printed),
for --wait-ms at most; --wait-ms 0 answers now or fails (504).
With --format F (anthropic, openai-chat, openai-responses, gemini) the
reply holds the context rendered for that provider, with a report of what
the rendering changed (docs/RENDER.md); --budget-tokens N adds whether it
is over N input tokens and where a compaction may cut.
With --edits JSON the context is edited before rendering (docs/EDITS.md):
old tool results cleared once it is over a number of tokens, old thinking
and images removed, with a report under "edits"; for example
  --edits '{"tool_results":{"trigger_tokens":100000,"keep":3,"clear_at_least_tokens":20000}}'
  --edits '{"thinking":{"keep_turns":1},"images":{"keep":3,"batch":10}}'
tool_results without trigger_tokens takes --budget-tokens as its trigger.
A reply larger than the server's max payload comes in chunks and is
printed whole: --wait-ms plus 5 s bound the wait for the answer, then each
chunk may take 30 s, however many there are.
A request not answered within --hedge-ms is sent once more to
ctxd.context.SESSION, where any instance may take it, and the first answer
wins; a request whose connection to the NATS server is lost is sent again
once it is back, or fails naming the lost connection.
The reply carries "digest", which names its messages (--digest=false
leaves it out); with --have-seq N --have-digest D, the seq and digest of
a reply held, the reply may be a delta, printed raw: "delta": {"keep": K}
and only the messages from K on (docs/PROTOCOL.md, "Delta replies").`

// contextChunkTimeout is how long ctxd context waits for each chunk of a
// large reply after the first.
const contextChunkTimeout = 30 * time.Second

func runContext(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "context", "context SESSION [flags]", contextAbout)
	conn := addConnFlags(fs, e, true)
	minSeq := fs.Uint64("min-seq", 0, "wait until the projection has applied this stream sequence")
	waitMS := fs.Int("wait-ms", 2000, "how long the service may wait for --min-seq, in ms (at most 30000; 0: answer now or fail)")
	format := fs.String("format", "", "neutral (the default), anthropic, openai-chat, openai-responses or gemini")
	budget := fs.Uint64("budget-tokens", 0, "say whether the context is over this many input tokens (0: don't)")
	editsJSON := fs.String("edits", "", "edit the context before rendering: a JSON object of tool_results, thinking, images (docs/EDITS.md)")
	partitions := fs.Int("partitions", 0, "the stream's partitions: ask the instance that applies the session's partition first (ctxd.p.K.SESSION)")
	digest := fs.Bool("digest", true, "the reply carries its digest; false leaves it out (not with --have-seq)")
	haveSeq := fs.Uint64("have-seq", 0, "the seq of the reply held (with --have-digest): the reply may be a delta against it")
	haveDigest := fs.String("have-digest", "", "the digest of the reply held (with --have-seq)")
	hedgeMS := fs.Int("hedge-ms", 0, "send the request once more, to any instance, when no answer came within this many ms (0: a quarter of the time, 200 to 1000 ms; -1: never)")
	pos, err := parse(e, fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fmt.Fprintln(e.stderr, "ctxd context: want exactly one SESSION")
		return errUsage
	}
	if err := checkSession(e, "context", pos[0]); err != nil {
		return err
	}
	if _, err := checkFormat(e, "context", *format); err != nil {
		return err
	}
	if *waitMS < 0 {
		fmt.Fprintf(e.stderr, "ctxd context: --wait-ms must be 0 or more, got %d\n", *waitMS)
		return errUsage
	}
	var edited *edits.Config
	if *editsJSON != "" {
		if edited, err = edits.ParseJSON([]byte(*editsJSON)); err != nil {
			fmt.Fprintf(e.stderr, "ctxd context: --edits: %v\n", err)
			return errUsage
		}
		if edited.ToolResults != nil && !edited.ToolResults.HasTrigger && *budget == 0 {
			fmt.Fprintln(e.stderr, "ctxd context: --edits: edits.tool_results.trigger_tokens is required without --budget-tokens")
			return errUsage
		}
	}
	if err := checkHave(e, fs, *haveDigest); err != nil {
		return err
	}
	if *haveDigest != "" && !*digest {
		fmt.Fprintln(e.stderr, "ctxd context: --digest=false with --have-seq and --have-digest: a delta reply carries its digest")
		return errUsage
	}
	if *hedgeMS < -1 {
		fmt.Fprintf(e.stderr, "ctxd context: --hedge-ms must be -1 (never), 0 (the default) or more, got %d\n", *hedgeMS)
		return errUsage
	}
	nc, err := conn.connect(e, fs)
	if err != nil {
		return err
	}
	defer nc.Close()
	timeout := time.Duration(min(*waitMS, 30000))*time.Millisecond + 5*time.Second
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// The timeout is the answer's; a large one then takes as long as its
	// chunks keep coming.
	data, err := client.Context(ctx, nc, pos[0], client.Request{MinSeq: *minSeq, WaitMS: *waitMS, NoWait: *waitMS == 0, Format: *format,
		BudgetTokens: *budget, Edits: edited, Partitions: *partitions, ChunkTimeout: contextChunkTimeout, Hedge: time.Duration(*hedgeMS) * time.Millisecond,
		NoDigest: !*digest, HaveSeq: *haveSeq, HaveDigest: *haveDigest})
	if err != nil {
		return err
	}
	return e.writeJSON(data)
}

// checkHave checks --have-seq and --have-digest: both or neither, and a
// digest of 64 lowercase hex digits.
func checkHave(e *env, fs *flag.FlagSet, digest string) error {
	seqSet := false
	fs.Visit(func(f *flag.Flag) { seqSet = seqSet || f.Name == "have-seq" })
	switch {
	case seqSet != (digest != ""):
		fmt.Fprintln(e.stderr, "ctxd context: --have-seq and --have-digest go together: give both, or neither")
		return errUsage
	case digest == "":
		return nil
	}
	if _, err := protocol.ParseRequest(fmt.Appendf(nil, `{"have_seq":0,"have_digest":%q}`, digest)); err != nil {
		fmt.Fprintf(e.stderr, "ctxd context: --have-digest must be a digest of %d lowercase hex digits, got %q\n", protocol.DigestLen, digest)
		return errUsage
	}
	return nil
}

func runRejected(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "rejected", "rejected [flags]", "Lists the records the projections skipped (undecodable, not a map, or on a\nsubject that is not a valid session), oldest first, as a JSON array.\nThey stay in the stream.")
	conn := addConnFlags(fs, e, true)
	timeout := addTimeout(fs, 10*time.Second)
	pos, err := parse(e, fs, args)
	if err != nil {
		return err
	}
	if err := noArgs(e, "rejected", pos); err != nil {
		return err
	}
	if err := e.bound("rejected", "--timeout", *timeout); err != nil {
		return err
	}
	nc, err := conn.connect(e, fs)
	if err != nil {
		return err
	}
	defer nc.Close()
	msg := nats.NewMsg("ctxd.rejected")
	data, err := client.Do(ctx, nc, msg)
	if err != nil {
		return err
	}
	return e.writeJSON(data)
}
