package inspect

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"image"
	"image/color"
	"image/png"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/record"
)

func encodePNG(t *testing.T, w, h int) string {
	t.Helper()
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for i := range img.Pix {
		img.Pix[i] = 255
	}
	img.Set(0, 0, color.NRGBA{0, 0, 0, 255})
	var b bytes.Buffer
	require.NoError(t, png.Encode(&b, img))
	return base64.StdEncoding.EncodeToString(b.Bytes())
}

func TestThumbnail(t *testing.T) {
	t.Run("shrunk to fit, aspect kept", func(t *testing.T) {
		out, err := thumbnail(encodePNG(t, 1000, 500), MaxThumbnailSource)
		require.NoError(t, err)
		cfg, err := png.DecodeConfig(bytes.NewReader(out))
		require.NoError(t, err)
		require.Equal(t, [2]int{240, 120}, [2]int{cfg.Width, cfg.Height})
		out, err = thumbnail(encodePNG(t, 3, 700), MaxThumbnailSource)
		require.NoError(t, err)
		cfg, err = png.DecodeConfig(bytes.NewReader(out))
		require.NoError(t, err)
		require.Equal(t, [2]int{1, 240}, [2]int{cfg.Width, cfg.Height})
	})
	t.Run("small images as they are", func(t *testing.T) {
		out, err := thumbnail(encodePNG(t, 20, 10), MaxThumbnailSource)
		require.NoError(t, err)
		cfg, err := png.DecodeConfig(bytes.NewReader(out))
		require.NoError(t, err)
		require.Equal(t, [2]int{20, 10}, [2]int{cfg.Width, cfg.Height})
	})
	t.Run("data over the cap is refused before decoding", func(t *testing.T) {
		_, err := thumbnail(strings.Repeat("A", 4000), 1000)
		require.True(t, errors.Is(err, errTooLarge), "%v", err)
	})
	t.Run("too many pixels is refused before decoding them", func(t *testing.T) {
		// A header claiming 20000x20000 pixels: what a decompression
		// bomb looks like.
		var b bytes.Buffer
		require.NoError(t, png.Encode(&b, image.NewGray(image.Rect(0, 0, 1, 1))))
		raw := b.Bytes()
		// IHDR's width and height are bytes 16 to 23, its CRC 29 to 32.
		copy(raw[16:], []byte{0, 0, 0x4e, 0x20, 0, 0, 0x4e, 0x20})
		binary.BigEndian.PutUint32(raw[29:], crc32.ChecksumIEEE(raw[12:29]))
		_, err := thumbnail(base64.StdEncoding.EncodeToString(raw), MaxThumbnailSource)
		require.True(t, errors.Is(err, errTooLarge), "%v", err)
	})
	t.Run("not an image", func(t *testing.T) {
		_, err := thumbnail(base64.StdEncoding.EncodeToString([]byte("<svg onload=alert(1)>")), MaxThumbnailSource)
		require.Error(t, err)
		_, err = thumbnail("!!!not base64", MaxThumbnailSource)
		require.Error(t, err)
	})
}

func TestPlaceholder_Escapes(t *testing.T) {
	svg := string(placeholder(`<script>alert("x")</script>&`))
	require.NotContains(t, svg, "<script>")
	require.Contains(t, svg, "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;")
}

func TestWalkImages(t *testing.T) {
	a := record.NewMap("type", "image", "data", "AAAA", "mimeType", "image/png")
	b := record.NewMap("type", "image", "source", record.NewMap("type", "base64", "media_type", "image/jpeg", "data", "BBBB"))
	c := record.NewMap("type", "image", "source", record.NewMap("type", "url", "url", "https://x"))
	v := record.NewMap("role", "user", "content", []any{a, record.NewMap("type", "tool_result", "content", []any{b, c})})
	var got []inline
	walkImages(v, func(_ *record.Map, img inline) { got = append(got, img) })
	require.Equal(t, []inline{{"image/png", "AAAA"}, {"image/jpeg", "BBBB"}, {}}, got)
}

func TestPreview_Hostile(t *testing.T) {
	deep := any("bottom")
	for range 100 {
		deep = []any{deep}
	}
	long := strings.Repeat("é", 10_000)
	many := make([]any, 5000)
	for i := range many {
		many[i] = "x"
	}
	v := record.NewMap("deep", deep, "long", long, strings.Repeat("k", 1000), many,
		"img", record.NewMap("type", "image", "data", strings.Repeat("A", 1<<20), "mimeType", "image/png"))
	p := preview(v, 1<<20)
	require.Less(t, len(p), 3000, "each string cut, long arrays and deep nesting cut")
	require.Contains(t, p, "…[4800 more]")
	require.NotContains(t, p, strings.Repeat("A", 100), "image data named, not shown")
	require.Contains(t, p, "[image/png, 1048576 bytes of base64]")
	p = preview(v, 500)
	require.LessOrEqual(t, len(p), 500+len("…"))
	require.True(t, strings.HasSuffix(p, "…"))

	p = preview(record.NewMap("long", long), 1<<20)
	require.Contains(t, p, "…[20000 bytes]")
	require.True(t, strings.ToValidUTF8(p, "?") == p, "cut on a character boundary")
}

func TestClean_Terminal(t *testing.T) {
	require.Equal(t, "a [31mred [0m b c", clean("a\x1b[31mred\x1b[0m\n\tb\r\u0085c", 100))
	require.Equal(t, "ab…", clean("abcdef", 2))
}

// BenchmarkThumbnail measures a thumbnail of a 5 MiB screenshot (an
// incompressible 1150x1150 PNG), beside decoding its base64 alone.
func BenchmarkThumbnail(b *testing.B) {
	img := image.NewNRGBA(image.Rect(0, 0, 1150, 1150))
	for i := range img.Pix {
		img.Pix[i] = byte(i*7919 + i>>7)
	}
	var buf bytes.Buffer
	require.NoError(b, (&png.Encoder{CompressionLevel: png.NoCompression}).Encode(&buf, img))
	data := base64.StdEncoding.EncodeToString(buf.Bytes())
	b.Run("base64-only", func(b *testing.B) {
		b.SetBytes(int64(buf.Len()))
		for b.Loop() {
			base64.StdEncoding.DecodeString(data)
		}
	})
	b.Run("thumbnail", func(b *testing.B) {
		b.SetBytes(int64(buf.Len()))
		for b.Loop() {
			if _, err := thumbnail(data, MaxThumbnailSource); err != nil {
				b.Fatal(err)
			}
		}
	})
}
