package inspect_test

import (
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/inspect"
	"github.com/ctxd/ctxd/pkg/ops"
	"github.com/ctxd/ctxd/pkg/record"
)

// chromium returns the headless browser's path. Outside CI a machine
// without it skips the browser tests; in CI ($CI set) they fail, so that
// they are never skipped there unnoticed (.ci/run installs it).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{os.Getenv("CTXD_CHROMIUM"), "chromium", "chromium-browser"} {
		if name == "" {
			continue
		}
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("chromium is not installed; CI must run the browser tests (apt-get install chromium)")
	}
	t.Skip("chromium is not installed (set CI to make this a failure)")
	return ""
}

// artifacts returns the directory screenshots are written to:
// $CTXD_ARTIFACTS, else artifacts/ at the module root (ignored by git).
func artifacts(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("CTXD_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join("..", "..", "artifacts")
	}
	dir = filepath.Join(dir, "browser")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	return dir
}

// TestBrowser opens the pages of a live session in headless Chromium:
// what the page shows once its script ran (the fates of the records, the
// greyed thumbnail of the trimmed screenshot, the escaped hostile
// record), a record applied while the page is open shown without a
// reload, and a screenshot of each page kept as an artifact.
func TestBrowser(t *testing.T) {
	bin := chromium(t)
	in := startInstance(t, inspect.Options{})
	bigSeq := demoSession(t, in, "demo-1")
	in.publish("transcripts.second", m("role", "user", "content", "hi"), "{not json")
	shots := artifacts(t)
	b := startBrowser(t, bin)
	shot := func(name string) {
		file := filepath.Join(shots, name+".png")
		b.screenshot(file)
		st, err := os.Stat(file)
		require.NoError(t, err, name)
		require.Positive(t, st.Size(), name)
		t.Logf("screenshot %s", file)
	}

	b.open(in.srv.URL + "/ui/")
	dom := b.dom()
	require.Contains(t, dom, `data-session="demo-1"`)
	require.Contains(t, dom, `data-session="second"`)
	shot("sessions")

	b.open(in.srv.URL + "/ui/sessions/demo-1")
	b.waitFor(`document.getElementById("live-status").textContent.startsWith("following")`)
	// The thumbnails load lazily, by their own URL, and are shown.
	b.waitFor(`Array.from(document.querySelectorAll("img.thumb")).every(i => i.complete && i.naturalWidth > 0)`)
	dom = b.dom()
	for _, st := range []string{"kept", "trimmed", "dropped", "converted"} {
		require.Contains(t, dom, `data-status="`+st+`"`, st)
	}
	require.Equal(t, "trimmed", b.eval(fmt.Sprintf(`document.getElementById("seq-%d").dataset.status`, bigSeq)))
	require.Equal(t, true, b.eval(fmt.Sprintf(`document.querySelector("#seq-%d img.thumb").classList.contains("omitted")`, bigSeq)))
	require.Equal(t, "0.35", b.eval(fmt.Sprintf(`getComputedStyle(document.querySelector("#seq-%d img.thumb")).opacity`, bigSeq)), "greyed out")
	require.Equal(t, false, b.eval(`document.querySelector("#seq-5 img.thumb").classList.contains("omitted")`))
	require.Equal(t, "dropped", b.eval(`document.getElementById("seq-6").dataset.status`))
	require.Contains(t, b.eval(`document.querySelector("#seq-6 .rule").textContent`), `unpaired call "c9" (bash)`)
	require.Contains(t, b.eval(`document.querySelector("#seq-7 .rule").textContent`), `orphan result "zz"`)
	// The hostile record is text: no element came of it, no script ran.
	require.Contains(t, b.eval(`document.querySelector("#seq-1 pre").textContent`), `<script>alert(\"x\")</script>`)
	require.Equal(t, float64(0), b.eval(`document.querySelectorAll("main script, main img:not(.thumb)").length`))
	shot("session")

	// Following: a record applied while the page is open appears.
	seq := in.publish("transcripts.demo-1", m("role", "user", "content", "applied while the page was open"))
	b.waitFor(fmt.Sprintf(`document.getElementById("seq-%d") !== null`, seq))
	require.Equal(t, "kept", b.eval(fmt.Sprintf(`document.getElementById("seq-%d").dataset.status`, seq)))
	require.Equal(t, fmt.Sprintf("following, seq %d", seq), b.eval(`document.getElementById("live-status").textContent`))
	shot("session-followed")

	// As it was at seq 3: the screenshot was then the latest, and kept.
	b.open(in.srv.URL + "/ui/sessions/demo-1?at=3")
	require.Equal(t, "kept", b.eval(`document.getElementById("seq-3").dataset.status`))
	require.Equal(t, float64(3), b.eval(`document.querySelectorAll("tr.rec").length`))
	shot("session-at-3")

	b.open(in.srv.URL + "/ui/rejected")
	require.Contains(t, b.dom(), "not a map")
	shot("rejected")
}

// TestBrowser_Login opens the inspector behind the listener's token as a
// browser does: sent to the login page, the token typed once, then the
// pages and the following of a session on an HttpOnly cookie that
// scripts cannot read, until the log out button ends it.
func TestBrowser_Login(t *testing.T) {
	bin := chromium(t)
	in := startInstance(t, inspect.Options{})
	demoSession(t, in, "demo-1")
	ui := inspect.New(in.app.InspectSource(), inspect.Options{Config: in.app.InspectConfig(), Poll: 20 * time.Millisecond, Logout: ops.LogoutPath})
	srv := ops.New("127.0.0.1:0")
	srv.Token = "s3cret"
	srv.Mount("/ui/", ui)
	require.NoError(t, srv.Open())
	t.Cleanup(func() { ui.Close(); srv.Close() })
	base := "http://" + srv.ListenAddr()
	b := startBrowser(t, bin)

	b.call("Page.navigate", map[string]any{"url": base + "/ui/sessions/demo-1"}, nil)
	b.waitFor(`location.pathname === "/login" && document.readyState === "complete"`)
	// Each submit waits for the evaluation to return: the navigation it
	// starts would otherwise cut the evaluation off.
	b.eval(`document.querySelector("input[name=token]").value = "wrong"; setTimeout(() => document.querySelector("form").submit(), 0); true`)
	b.waitFor(`document.readyState === "complete" && document.body.textContent.includes("wrong token")`)
	b.eval(`document.querySelector("input[name=token]").value = "s3cret"; setTimeout(() => document.querySelector("form").submit(), 0); true`)
	b.waitFor(`location.pathname === "/ui/sessions/demo-1" && document.getElementById("session") !== null`)
	require.Equal(t, "", b.eval(`document.cookie`), "the session cookie is HttpOnly")
	b.waitFor(`document.getElementById("live-status").textContent.startsWith("following")`)
	seq := in.publish("transcripts.demo-1", m("role", "user", "content", "followed behind the login"))
	b.waitFor(fmt.Sprintf(`document.getElementById("seq-%d") !== null`, seq))
	require.Equal(t, fmt.Sprintf("following, seq %d", seq), b.eval(`document.getElementById("live-status").textContent`))

	b.eval(`setTimeout(() => document.querySelector("form.logout button").click(), 0); true`)
	b.waitFor(`location.pathname === "/login" && document.readyState === "complete"`)
	b.call("Page.navigate", map[string]any{"url": base + "/ui/"}, nil)
	b.waitFor(`location.pathname === "/login" && document.readyState === "complete"`)
}

// TestBrowser_Conversation opens the conversation view of a session with
// a compaction, browser calls beside their results and a trimmed
// screenshot: what it shows and marks, the JSON of an entry opened with
// a click, a record applied while it is open, the diff between two
// sequences; screenshots of each are kept as artifacts.
func TestBrowser_Conversation(t *testing.T) {
	bin := chromium(t)
	in := startInstance(t, inspect.Options{})
	subj := "transcripts.agent"
	shotB64 := base64.StdEncoding.EncodeToString(noisePNG(t, 200))
	img := func() *record.Map { return m("type", "image", "data", shotB64, "mimeType", "image/png") }
	call := func(id, tool string, args *record.Map) *record.Map {
		return m("role", "assistant", "content", []any{m("type", "text", "text", "Let me look at the page."),
			m("type", "toolCall", "id", id, "name", tool, "arguments", args)})
	}
	in.publish(subj,
		m("role", "user", "content", "an early question, compacted away"),                                         // 1 replaced
		compaction("Summary: the user wants the pricing page checked."),                                           // 2 checkpoint
		m("role", "user", "content", "Open the pricing page and tell me the price."),                              // 3
		call("b1", "browser_use", m("action", "goto", "url", "https://example.com/pricing")),                      // 4
		m("role", "toolResult", "toolCallId", "b1", "content", []any{m("type", "text", "text", "loaded"), img()}), // 5 trimmed
		call("b2", "browser_use", m("action", "scroll")),                                                          // 6
		m("role", "toolResult", "toolCallId", "b2", "content", []any{img()}),                                      // 7 kept
		m("role", "toolResult", "toolCallId", "nope", "content", "an orphan"),                                     // 8 dropped
	)
	shots := artifacts(t)
	b := startBrowser(t, bin)
	shot := func(name string) {
		file := filepath.Join(shots, name+".png")
		b.screenshot(file)
		st, err := os.Stat(file)
		require.NoError(t, err, name)
		require.Positive(t, st.Size(), name)
		t.Logf("screenshot %s", file)
	}

	b.open(in.srv.URL + "/ui/sessions/agent")
	b.waitFor(`document.getElementById("live-status").textContent.startsWith("following")`)
	b.waitFor(`Array.from(document.querySelectorAll("#conversation img.thumb")).every(i => i.complete && i.naturalWidth > 0)`)
	conv := `document.getElementById("conversation")`
	require.Equal(t, float64(2), b.eval(conv+`.querySelectorAll("img.thumb.conv").length`), "both screenshots")
	// The compaction is a divider, the record before it marked replaced.
	require.Equal(t, "checkpoint", b.eval(conv+`.querySelector(".conv-divider[data-seq='2']").dataset.status`))
	require.Contains(t, b.eval(conv+`.querySelector(".conv-item.removed[data-seq='1'] .rule").textContent`), "replaced by the compaction at seq 2")
	// Each call beside its result, side by side.
	require.Equal(t, float64(2), b.eval(conv+`.querySelectorAll(".pair").length`))
	require.Equal(t, true, b.eval(`(() => { const p = document.querySelector(".pair[data-call='b1']");
		const c = p.querySelector(".call").getBoundingClientRect(), r = p.querySelector(".result").getBoundingClientRect();
		return r.left >= c.right && Math.abs(r.top - c.top) < 2; })()`), "the result to the right of its call")
	require.Contains(t, b.eval(`document.querySelector(".pair[data-call='b1'] .call").textContent`), "https://example.com/pricing")
	// The earlier screenshot trimmed: the notice, the image greyed, the rule.
	b1 := `document.querySelector(".pair[data-call='b1'] .result")`
	require.Equal(t, "trimmed", b.eval(b1+`.dataset.status`))
	require.Contains(t, b.eval(b1+`.textContent`), "[Earlier image omitted from the model context.]")
	require.Contains(t, b.eval(b1+`.textContent`), "section 5")
	require.Equal(t, "0.35", b.eval(`getComputedStyle(`+b1+`.querySelector("img.thumb.omitted")).opacity`))
	require.Equal(t, false, b.eval(`document.querySelector(".pair[data-call='b2'] img.thumb").classList.contains("omitted")`))
	require.Contains(t, b.eval(conv+`.querySelector(".conv-item.removed[data-seq='8'] .rule").textContent`), `orphan result "nope"`)
	// The JSON of an entry, one click away.
	details := conv + `.querySelector("#msg-2 details.json")`
	require.Equal(t, false, b.eval(details+`.open`))
	b.eval(details + `.querySelector("summary").click(); true`)
	require.Equal(t, true, b.eval(details+`.open`))
	require.Contains(t, b.eval(details+`.querySelector("pre").textContent`), `"toolCall"`)
	b.eval(`document.getElementById("conversation").scrollIntoView(); true`)
	shot("conversation")

	// A record applied while the page is open joins the conversation.
	seq := in.publish(subj, m("role", "assistant", "content", "The price is 12 euros a month."))
	b.waitFor(fmt.Sprintf(`document.querySelector("#conversation .conv-item[data-seq='%d']") !== null`, seq))
	require.Contains(t, b.eval(fmt.Sprintf(`document.querySelector("#conversation .conv-item[data-seq='%d']").textContent`, seq)), "12 euros")
	shot("conversation-followed")

	// What changed from seq 5 to 7: the first screenshot trimmed.
	b.open(in.srv.URL + "/ui/sessions/agent?at=5&diff=7")
	require.Equal(t, float64(1), b.eval(`document.querySelectorAll(".diff-item[data-kind='changed']").length`))
	require.Equal(t, "5", b.eval(`document.querySelector(".diff-item[data-kind='changed']").dataset.seq`))
	require.Equal(t, "trimmed", b.eval(`document.querySelector("tr.fate[data-seq='5']").dataset.to`))
	shot("diff")
}
