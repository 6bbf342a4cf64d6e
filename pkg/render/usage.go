package render

import (
	"encoding/base64"
	"encoding/binary"
	stdimage "image"
	_ "image/gif" // DecodeConfig for the image types providers take
	_ "image/jpeg"
	_ "image/png"
	"io"
	"strings"

	"github.com/ctxd/ctxd/pkg/record"
)

// Usage is the size of a rendered context, for a runtime that decides
// when to compact.
type Usage struct {
	// Bytes is the size of the body's JSON encoding.
	Bytes int
	// Images counts the image blocks.
	Images int
	// InputTokens estimates the input tokens the provider counts for the
	// body (RENDER.md, "Usage", gives the method and its error): a token
	// per 4 bytes of JSON outside image data, and each image by the
	// provider's published formula from its pixel size.
	InputTokens int
}

// BytesPerToken is the estimate's ratio of JSON bytes to tokens.
const BytesPerToken = 4

// defaultSide is the side of a square image assumed when the data does
// not say its size.
const defaultSide = 1024

// Estimate returns the usage of a body whose JSON encoding is jsonBytes
// long.
func Estimate(b Body, jsonBytes int) Usage {
	u := Usage{Bytes: jsonBytes}
	imageBytes, tokens := 0, 0
	walkImages(b.Fields, func(img image, n int) {
		u.Images++
		imageBytes += n
		w, h, ok := imageSize(img)
		if !ok {
			w, h = defaultSide, defaultSide
		}
		tokens += imageTokens(b.Format, w, h)
	})
	text := max(jsonBytes-imageBytes, 0)
	u.InputTokens = tokens + (text+BytesPerToken-1)/BytesPerToken
	return u
}

// walkImages calls fn for every image block in v, in any format's shape,
// with the bytes its data takes in the encoding.
func walkImages(v any, fn func(img image, n int)) {
	switch x := v.(type) {
	case []any:
		for _, e := range x {
			walkImages(e, fn)
		}
	case *record.Map:
		typ, _ := x.String("type")
		switch typ {
		case "image", "image_url":
			if img, reason := parseImage(x); reason == "" {
				fn(img, len(img.data)+len(img.url))
				return
			}
		case "input_image":
			u, _ := x.String("image_url")
			if img, reason := imageURL(u); reason == "" {
				fn(img, len(u))
				return
			}
		}
		if d, ok := x.Get("inlineData"); ok {
			if m, ok := d.(*record.Map); ok {
				mime, _ := m.String("mimeType")
				data, _ := m.String("data")
				fn(image{mime: mime, data: data}, len(data))
				return
			}
		}
		for _, m := range x.Members {
			walkImages(m.Value, fn)
		}
	}
}

// imageTokens is format f's published count for an image of w by h
// pixels (provider.imageTokens). The neutral context counts as Anthropic.
func imageTokens(f Format, w, h int) int { return providerOf(f).imageTokens(w, h) }

// imageSize reads an inline image's pixel size from its header.
func imageSize(img image) (w, h int, ok bool) {
	if img.data == "" || img.url != "" {
		return 0, 0, false
	}
	r := base64.NewDecoder(base64.StdEncoding, strings.NewReader(img.data))
	if img.mime == "image/webp" {
		return webpSize(r)
	}
	cfg, _, err := stdimage.DecodeConfig(r)
	if err != nil || cfg.Width <= 0 || cfg.Height <= 0 {
		return 0, 0, false
	}
	return cfg.Width, cfg.Height, true
}

// webpSize reads the size from a WebP header (lossy, lossless or extended).
func webpSize(r io.Reader) (w, h int, ok bool) {
	var b [30]byte
	if _, err := io.ReadFull(r, b[:]); err != nil || string(b[0:4]) != "RIFF" || string(b[8:12]) != "WEBP" {
		return 0, 0, false
	}
	switch string(b[12:16]) {
	case "VP8 ":
		w = int(binary.LittleEndian.Uint16(b[26:28]) & 0x3fff)
		h = int(binary.LittleEndian.Uint16(b[28:30]) & 0x3fff)
	case "VP8L":
		bits := binary.LittleEndian.Uint32(b[21:25])
		w = int(bits&0x3fff) + 1
		h = int(bits>>14&0x3fff) + 1
	case "VP8X":
		w = int(uint32(b[24])|uint32(b[25])<<8|uint32(b[26])<<16) + 1
		h = int(uint32(b[27])|uint32(b[28])<<8|uint32(b[29])<<16) + 1
	default:
		return 0, 0, false
	}
	return w, h, w > 0 && h > 0
}

// Budget is what a reply says about a token budget the request gave.
type Budget struct {
	// Tokens is the budget asked for.
	Tokens uint64
	// Over is set when the estimate exceeds it.
	Over bool
	// CompactBeforeSeq, when over, is the stream sequence of the latest
	// record before which a compaction keeps every call with its result:
	// no call before it has its result at or after it. 0 when there is no
	// such record.
	CompactBeforeSeq uint64
}

// CheckBudget compares an estimate with a budget; seqs are the records of
// the neutral messages (Options.Seqs).
func CheckBudget(messages []any, seqs []uint64, u Usage, tokens uint64) Budget {
	b := Budget{Tokens: tokens, Over: uint64(u.InputTokens) > tokens}
	if b.Over {
		b.CompactBeforeSeq = CompactionPoint(messages, seqs)
	}
	return b
}

// CompactionPoint returns the stream sequence of the latest record,
// after the first, where a compaction may cut the neutral messages: no
// call before the record is answered by a result at or after it. Messages
// of one record (a compaction's snapshot) are never cut apart. 0 when no
// record qualifies.
func CompactionPoint(messages []any, seqs []uint64) uint64 {
	n := len(messages)
	if len(seqs) != n || n < 2 {
		return 0
	}
	lastCall := map[string]int{}
	// bad[b] > 0: a cut before message b separates a call from a result.
	bad := make([]int, n+1)
	for i, v := range messages {
		m, ok := v.(*record.Map)
		if !ok {
			continue
		}
		for _, id := range callIDs(m) {
			lastCall[id] = i
		}
		for _, id := range resultIDs(m) {
			if c, ok := lastCall[id]; ok && c < i {
				bad[c+1]++ // cuts c+1 .. i are bad
				bad[i+1]--
			}
		}
	}
	open := 0
	best := 0
	for b := 1; b < n; b++ {
		open += bad[b]
		if open == 0 && seqs[b] != seqs[b-1] {
			best = b
		}
	}
	if best == 0 {
		return 0
	}
	return seqs[best]
}

func callIDs(m *record.Map) []string {
	if role, _ := m.String("role"); role != "assistant" {
		return nil
	}
	var ids []string
	if arr, ok := get(m, "content").([]any); ok {
		for _, e := range arr {
			if b, ok := e.(*record.Map); ok {
				switch t, _ := b.String("type"); t {
				case "toolCall", "tool_use", "tool_call":
					if id := firstString(b, "id", "toolCallId", "tool_call_id", "tool_call_id$"); id != "" {
						ids = append(ids, id)
					}
				}
			}
		}
	}
	if arr, ok := get(m, "tool_calls").([]any); ok {
		for _, e := range arr {
			if b, ok := e.(*record.Map); ok {
				if id, _ := b.String("id"); id != "" {
					ids = append(ids, id)
				}
			}
		}
	}
	return ids
}

func resultIDs(m *record.Map) []string {
	switch role, _ := m.String("role"); role {
	case "toolResult", "tool":
		if id := firstString(m, "toolCallId", "tool_call_id", "tool_call_id$"); id != "" {
			return []string{id}
		}
	case "user":
		var ids []string
		if arr, ok := get(m, "content").([]any); ok {
			for _, e := range arr {
				if b, ok := e.(*record.Map); ok {
					if t, _ := b.String("type"); t == "tool_result" {
						if id, _ := b.String("tool_use_id"); id != "" {
							ids = append(ids, id)
						}
					}
				}
			}
		}
		return ids
	}
	return nil
}

// ValueTokens estimates the input tokens a value (a message, a block, a
// result's content) adds to a body in format f, as Estimate counts a
// body: a token per BytesPerToken bytes of its JSON outside image data,
// and each image by the provider's formula. A value JSON cannot encode
// counts 0.
func ValueTokens(f Format, v any) int {
	n, err := record.JSONLen(v)
	if err != nil {
		return 0
	}
	imageBytes, tokens := 0, 0
	walkImages(v, func(img image, size int) {
		imageBytes += size
		w, h, ok := imageSize(img)
		if !ok {
			w, h = defaultSide, defaultSide
		}
		tokens += imageTokens(f, w, h)
	})
	return tokens + (max(n-imageBytes, 0)+BytesPerToken-1)/BytesPerToken
}

// Tokens estimates the input tokens of the neutral messages rendered in
// format f: the InputTokens of the usage the reply would carry.
func Tokens(f Format, messages []any, opt Options) int {
	body, _ := Render(f, messages, opt)
	n, err := body.JSONLen()
	if err != nil {
		return 0
	}
	return Estimate(body, n).InputTokens
}
