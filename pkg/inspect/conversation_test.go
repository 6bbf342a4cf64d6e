package inspect_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/inspect"
	"github.com/ctxd/ctxd/pkg/record"
)

// between returns the part of s from the first from on to the next to.
func between(t *testing.T, s, from, to string) string {
	t.Helper()
	i := strings.Index(s, from)
	require.GreaterOrEqual(t, i, 0, "no %q", from)
	j := strings.Index(s[i:], to)
	require.Greater(t, j, 0, "no %q after %q", to, from)
	return s[i : i+j]
}

// TestHandler_Conversation: the session page opens on the context as
// the model sees it, each call beside its result, what the rules changed
// or left out marked with the rule, the JSON of each entry a click away.
func TestHandler_Conversation(t *testing.T) {
	in := startInstance(t, inspect.Options{})
	bigSeq := demoSession(t, in, "demo-1")

	code, _, body := in.get("/ui/sessions/demo-1")
	require.Equal(t, http.StatusOK, code, body)
	conv := between(t, body, `<section id="conversation"`, `</section>`)
	require.Less(t, strings.Index(body, `id="conversation"`), strings.Index(body, `id="records-section"`), "the conversation first")

	// Roles and text, escaped.
	require.Contains(t, conv, `<span class="role">user</span> <span class="idx">#0</span>`)
	require.Contains(t, conv, `&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;`)
	require.NotContains(t, conv, "<script>")

	// The browser call b1 beside its result, whose screenshot was
	// trimmed: the notice the model sees, the screenshot greyed, the rule.
	b1 := between(t, conv, `<div class="pair" data-call="b1">`, `<details`)
	require.Contains(t, b1, `call <b>browser_use</b> <code>b1</code>`)
	require.Contains(t, b1, fmt.Sprintf(`result #2 · seq %d · <span class="status st-trimmed">trimmed</span> <span class="rule">section 5: 1 earlier screenshot(s) omitted</span>`, bigSeq))
	require.Contains(t, b1, `[Earlier image omitted from the model context.]`)
	require.Contains(t, b1, fmt.Sprintf(`<img class="thumb conv omitted" loading="lazy" width="240" height="135" alt="an image not sent to the model" src="/ui/sessions/demo-1/images/%d/0">`, bigSeq))
	// b2's screenshot, the latest, is sent: a thumbnail, not greyed.
	b2 := between(t, conv, `<div class="pair" data-call="b2">`, `<details`)
	require.Contains(t, b2, `<img class="thumb conv" loading="lazy" width="240" height="135" alt="image" src="/ui/sessions/demo-1/images/5/0">`)
	// A result beside its call is not shown again on its own.
	require.NotContains(t, conv, `id="msg-2"`)
	require.NotContains(t, conv, `id="msg-4"`)

	// What the model is not sent, marked with the rule.
	removed := func(seq int) string {
		return between(t, conv, fmt.Sprintf(`<div class="conv-item removed st-dropped" data-seq="%d"`, seq), "</div>\n</div>")
	}
	require.Contains(t, removed(6), `section 3: unpaired call &#34;c9&#34; (bash) removed; nothing usable left`)
	require.Contains(t, removed(6), `assistant: [call bash]`)
	require.Contains(t, removed(7), `section 3: orphan result &#34;zz&#34; dropped`)
	require.Contains(t, removed(9), `rule 2: kind &#34;context&#34;`)
	require.Contains(t, conv, `<span class="status st-converted">converted</span> <span class="rule">rule 3 (2.1): a local shell run, as a user message</span>`)

	// The JSON of each entry shown, and its stored record, a click away.
	require.Equal(t, 4, strings.Count(conv, `<details class="json">`), "messages #0, #1, #3 and #5")
	require.Contains(t, conv, `<a href="/ui/sessions/demo-1/records/8">the stored record, seq 8, 72 B</a></details>`)
	require.Contains(t, conv, `{&#34;role&#34;:&#34;user&#34;,&#34;content&#34;:[{&#34;type&#34;:&#34;text&#34;,&#34;text&#34;:&#34;&lt;local_shell&gt;`)

	// As at seq 3 the screenshot is the latest, and sent.
	_, _, body = in.get("/ui/sessions/demo-1?at=3")
	conv = between(t, body, `<section id="conversation"`, `</section>`)
	require.Contains(t, conv, fmt.Sprintf(`<img class="thumb conv" loading="lazy" width="240" height="135" alt="image" src="/ui/sessions/demo-1/images/%d/0">`, bigSeq))
	require.NotContains(t, conv, "omitted")
	require.Contains(t, conv, "at seq 3")
}

func compaction(text string) *record.Map {
	return m("type", "compaction", "at", "2026-01-02T03:04:05Z", "baseSeq", int64(1), "plannerVersion", int64(1),
		"summaryModelRef", "m", "summary", "s", "qualityAudit", "passed",
		"messages", []any{m("role", "user", "content", text)},
		"firstKeptIndex", int64(0), "tokensBefore", int64(10), "tokensAfter", int64(5))
}

// TestHandler_ConversationCompaction: compactions are dividers, the
// records they replaced marked so, an invalid one dropped by its rule.
func TestHandler_ConversationCompaction(t *testing.T) {
	in := startInstance(t, inspect.Options{})
	in.publish("transcripts.c",
		m("role", "user", "content", "before"),                  // 1 replaced
		compaction("first snapshot"),                            // 2 replaced by 4
		m("type", "compaction", "summary", "invalid"),           // 3 dropped, resets nothing
		compaction("second snapshot"),                           // 4 checkpoint
		m("role", "assistant", "content", "after the snapshot"), // 5 kept
	)
	code, _, body := in.get("/ui/sessions/c")
	require.Equal(t, http.StatusOK, code)
	conv := between(t, body, `<section id="conversation"`, `</section>`)
	require.Equal(t, 2, strings.Count(conv, `<div class="conv-divider"`), "a divider per valid compaction")
	require.Contains(t, conv, `<div class="conv-divider" data-seq="4" data-status="checkpoint">compaction at <a href="/ui/sessions/c/records/4">seq 4</a> · <span class="status st-checkpoint">checkpoint</span> <span class="rule">section 4: the latest valid compaction; its snapshot gives 1 of 1 messages</span>`)
	require.Contains(t, conv, `<div class="conv-divider" data-seq="2" data-status="replaced">`)
	require.Regexp(t, `<div class="conv-item removed st-replaced" data-seq="1" data-status="replaced">[^§]*replaced by the compaction at seq 4`, conv)
	require.Contains(t, conv, `<div class="conv-item removed st-dropped" data-seq="3" data-status="dropped">`)
	require.Contains(t, conv, `rule 6: an invalid compaction (section 4), dropped; it resets nothing`)
	// After the divider of seq 4, its snapshot, then the record after it.
	after := conv[strings.Index(conv, `data-seq="4" data-status="checkpoint"`):]
	require.Less(t, strings.Index(after, "second snapshot"), strings.Index(after, "after the snapshot"))
	require.Equal(t, 2, strings.Count(conv, `<details class="json">`), "the context's 2 messages")
}

// TestHandler_Diff: ?at=A&diff=B shows what changed in the context from
// one sequence to the other, in either order.
func TestHandler_Diff(t *testing.T) {
	in := startInstance(t, inspect.Options{})
	bigSeq := demoSession(t, in, "demo-1")
	require.Equal(t, uint64(3), bigSeq)

	for _, q := range []string{"at=3&diff=5", "at=5&diff=3"} {
		code, _, body := in.get("/ui/sessions/demo-1?" + q)
		require.Equal(t, http.StatusOK, code, body)
		require.Contains(t, body, "From seq 3 (3 records, context 3 messages", q)
		require.Contains(t, body, "to seq 5 (5 records, context 5 messages", q)
		require.Contains(t, body, `2 added, 0 removed, 1 changed, 2 unchanged`, q)
		// The screenshot trimmed once a later one came.
		changed := between(t, body, `<div class="diff-item diff-changed" data-kind="changed" data-seq="3">`, "</div>\n</div>")
		require.Contains(t, changed, `[image/png, `)
		require.Contains(t, changed, `[Earlier image omitted from the model context.]`)
		require.Contains(t, body, `<tr class="fate" data-seq="3" data-from="kept" data-to="trimmed">`, q)
		require.Contains(t, body, `<div class="diff-item diff-added" data-kind="added" data-seq="4">`, q)
	}

	// A call that got its result: pruned at seq 2, kept at 3.
	code, _, body := in.get("/ui/sessions/demo-1?at=2&diff=3")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `<div class="diff-item diff-changed" data-kind="changed" data-seq="2">`)
	require.Contains(t, body, `<tr class="fate" data-seq="2" data-from="pruned" data-to="kept">`)

	// From a sequence to the session as it is.
	code, _, body = in.get("/ui/sessions/demo-1?diff=9")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "0 added, 0 removed, 0 changed, 6 unchanged")
	require.Contains(t, body, "No entry of the context changed.")

	// A compaction removes what it replaced and adds its snapshot.
	in.publish("transcripts.c", m("role", "user", "content", "before"), compaction("snapshot"))
	code, _, body = in.get("/ui/sessions/c?at=10&diff=11")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "1 added, 1 removed, 0 changed, 0 unchanged")
	require.Contains(t, body, `<div class="diff-item diff-removed" data-kind="removed" data-seq="10">`)
	require.Contains(t, body, `<div class="diff-item diff-added" data-kind="added" data-seq="11">`)
	require.Contains(t, body, `<tr class="fate" data-seq="10" data-from="kept" data-to="replaced">`)
}

// TestHandler_DiffBadSeqs: a sequence that is malformed or out of the
// session's range is a 400 that names the parameter.
func TestHandler_DiffBadSeqs(t *testing.T) {
	in := startInstance(t, inspect.Options{})
	in.publish("transcripts.first", m("role", "user", "content", "first"))
	in.publish("transcripts.late", m("role", "user", "content", "one"), m("role", "user", "content", "two"))
	for q, want := range map[string]string{
		"diff=x":                            `diff: &#34;x&#34; is not a stream sequence`,
		"diff=":                             `diff: &#34;&#34; is not a stream sequence`,
		"diff=-1":                           `diff: &#34;-1&#34; is not a stream sequence`,
		"diff=0":                            `diff: &#34;0&#34; is not a stream sequence`,
		"diff=18446744073709551616":         `diff: &#34;18446744073709551616&#34; is not a stream sequence`,
		"diff=" + strings.Repeat("9", 5000): `diff: &#34;99999`,
		"at=x&diff=2":                       `at: &#34;x&#34; is not a stream sequence`,
		"at=0&diff=2":                       `at: &#34;0&#34; is not a stream sequence`,
		"diff=1":                            `diff: session late has no records up to seq 1`,
		"at=1&diff=3":                       `at: session late has no records up to seq 1`,
		"diff=2&page=1":                     `diff: not with page`,
		"diff=2&after=2":                    `diff: not with after`,
		"diff=2&format=json":                `diff: not with format`,
	} {
		code, ctype, body := in.get("/ui/sessions/late?" + q)
		require.Equal(t, http.StatusBadRequest, code, q)
		require.Equal(t, "text/html; charset=utf-8", ctype, q)
		require.Contains(t, body, want, q)
		require.Less(t, len(body), 2000, q)
	}
}

// TestHandler_DiffBounded: a diff reads as a view does, and refuses a
// session past what a view reads rather than read it all.
func TestHandler_DiffBounded(t *testing.T) {
	in := startInstance(t, inspect.Options{ReadBytes: 64 << 10, Authorize: func(_ *http.Request, s string) bool { return s != "secret" }})
	for range 4 {
		in.publish("transcripts.big", m("role", "user", "content", strings.Repeat("x", 30<<10)))
	}
	in.publish("transcripts.secret", m("role", "user", "content", "not for you"))
	code, _, body := in.get("/ui/sessions/big?at=1&diff=4")
	require.Equal(t, http.StatusRequestEntityTooLarge, code, body)
	require.Contains(t, body, "diff: no diff: The session&#39;s 4 records up to seq 4 hold")
	code, _, body = in.get("/ui/sessions/big?at=1&diff=2")
	require.Equal(t, http.StatusOK, code, body)
	code, _, _ = in.get("/ui/sessions/secret?at=5&diff=5")
	require.Equal(t, http.StatusNotFound, code)
}

// TestHandler_ConversationHostile: a message of thousands of blocks or
// calls, a role or id of megabytes, keep the page small and escaped.
func TestHandler_ConversationHostile(t *testing.T) {
	in := startInstance(t, inspect.Options{})
	var blocks, calls, images []any
	for i := range 50_000 {
		blocks = append(blocks, m("type", "text", "text", fmt.Sprintf("b%d", i)))
	}
	for i := range 5_000 {
		calls = append(calls, m("type", "toolCall", "id", fmt.Sprintf("c%d", i), "name", "web_search", "providerExecuted", true))
	}
	small := smallPNG(t)
	for range 5_000 {
		images = append(images, m("type", "image", "data", small, "mimeType", "image/png"))
	}
	long := strings.Repeat("<r>", 100_000)
	in.publish("transcripts.h",
		m("role", "user", "content", blocks),
		m("role", "assistant", "content", calls),
		m("role", "user", "content", images),
		m("role", "assistant "+long, "content", "a long role"),
		m("role", "assistant", "content", []any{m("type", "toolCall", "id", long, "name", long)}),
		m("role", "toolResult", "toolCallId", long, "content", "answered"),
	)
	code, _, body := in.get("/ui/sessions/h")
	require.Equal(t, http.StatusOK, code)
	conv := between(t, body, `<section id="conversation"`, `</section>`)
	t.Logf("page %d bytes, conversation %d bytes", len(body), len(conv))
	require.Less(t, len(conv), 200<<10, "the conversation of a hostile session")
	require.NotContains(t, body, "<r>")
	require.Contains(t, conv, "more blocks")
}
