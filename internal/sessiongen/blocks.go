package sessiongen

import (
	"fmt"

	"github.com/ctxd/ctxd/pkg/record"
)

// text returns short prose, sometimes empty, blank or multi-line.
func (g *Gen) text() string {
	switch g.r.IntN(10) {
	case 0:
		return ""
	case 1:
		return pick(g, " ", "\n\t ", "\u00a0\u2003")
	case 2:
		return "line one\nline two\n"
	case 3:
		return "héllo wörld ✓ \"quoted\" \\ back"
	}
	return pick(g, "ok", "let me check", "done", "the build fails", "looks good", "running the tests") +
		fmt.Sprintf(" %d", g.r.IntN(100))
}

func (g *Gen) textBlock() *record.Map {
	return record.NewMap("type", "text", "text", g.text())
}

// imageBlock is an image: mostly an inline PNG, now and then one that
// some providers refuse (a type none takes, HEIC, which only Gemini takes,
// an image by URL, which Gemini does not take, or data that is not
// base64, which none takes). The shape comes from the one number drawn,
// so that adding shapes kept every other draw.
func (g *Gen) imageBlock() *record.Map {
	n := g.r.IntN(10000)
	switch n % 16 {
	case 0:
		return record.NewMap("type", "image", "data", fmt.Sprintf("Qk00%04d", n), "mimeType", "image/bmp")
	case 1:
		return record.NewMap("type", "image", "data", fmt.Sprintf("AAAA%04d", n), "mimeType", "image/heic")
	case 2:
		return record.NewMap("type", "image", "source", record.NewMap("type", "url", "url", fmt.Sprintf("https://example.com/%04d.png", n)))
	case 3:
		return record.NewMap("type", "image", "data", fmt.Sprintf("iVBOR%04d", n), "mimeType", "image/png")
	}
	return record.NewMap("type", "image", "data", fmt.Sprintf("iVBORw0K%04d", n), "mimeType", "image/png")
}

func (g *Gen) thinkingBlock() *record.Map {
	return record.NewMap("type", "thinking", "thinking", g.text(), "signature", "sig")
}

// callID returns the id a new call gets: mostly one of the small pool,
// sometimes one that collides with nothing, sometimes none at all.
func (g *Gen) callID() (any, bool) {
	switch n := g.r.IntN(20); {
	case n < 9:
		return pick(g, idPool...), true
	case n < 18:
		g.unique++
		return fmt.Sprintf("u%d", g.unique), true
	case n == 18:
		return "", true
	}
	return pick[any](g, nil, int64(7), []any{"c1"}), g.chance(2)
}

// resultID returns the id a result carries: usually a call's, recent or
// long past; sometimes a pool id that may not have been called (yet), an
// id nobody called, or none at all. tool is the answered call's tool, ""
// when the id answers no known call.
func (g *Gen) resultID() (id any, present bool, tool string) {
	switch n := g.r.IntN(20); {
	case n < 15 && len(g.calls) > 0:
		i := len(g.calls) - 1 - g.r.IntN(min(len(g.calls), 3))
		if g.chance(4) {
			i = g.r.IntN(len(g.calls)) // long after the call
		}
		return g.calls[i].id, true, g.calls[i].tool
	case n < 17:
		return pick(g, idPool...), true, ""
	case n == 17:
		return "nobody-called-this", true, ""
	case n == 18:
		return "", true, ""
	}
	return pick[any](g, nil, int64(42), false), g.chance(2), ""
}

// toolName returns a call's tool name, now and then one that is missing
// or not a string.
func (g *Gen) toolName() (any, bool) {
	switch g.r.IntN(20) {
	case 0:
		return nil, false
	case 1:
		return int64(3), true
	}
	return pick(g, toolNames...), true
}
