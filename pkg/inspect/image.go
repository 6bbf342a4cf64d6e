package inspect

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"image"
	"image/draw"
	_ "image/gif" // decoders for the image types providers take
	_ "image/jpeg"
	"image/png"
	"strings"

	"github.com/ctxd/ctxd/pkg/record"
)

// inline is an image held in a record: base64 data and its media type.
type inline struct {
	mime, data string
}

// imageOf reads an image block with inline data, in the shapes records
// carry it: {"type":"image","data":..,"mimeType":..} and the Anthropic
// {"type":"image","source":{"type":"base64","media_type":..,"data":..}}.
func imageOf(m *record.Map) (inline, bool) {
	if t, _ := m.String("type"); t != "image" {
		return inline{}, false
	}
	if d, ok := m.String("data"); ok {
		mime, _ := m.String("mimeType")
		if mime == "" {
			mime, _ = m.String("mime_type")
		}
		return inline{mime: mime, data: d}, true
	}
	if s, ok := m.Get("source"); ok {
		if sm, ok := s.(*record.Map); ok {
			d, _ := sm.String("data")
			mime, _ := sm.String("media_type")
			return inline{mime: mime, data: d}, true // a URL source has no data
		}
	}
	return inline{}, true // an image block without inline data
}

// walkImages calls fn for every image block of v, in order: the order
// gives an image its number within its record.
func walkImages(v any, fn func(blk *record.Map, img inline)) {
	switch x := v.(type) {
	case []any:
		for _, e := range x {
			walkImages(e, fn)
		}
	case *record.Map:
		if img, ok := imageOf(x); ok {
			fn(x, img)
			return
		}
		for _, m := range x.Members {
			walkImages(m.Value, fn)
		}
	}
}

// imagesIn returns the image blocks of the messages, to tell which of a
// record's images reached the context: the passes keep an image block
// as the very same value, and replace a trimmed one.
func imagesIn(messages []any) map[*record.Map]bool {
	set := map[*record.Map]bool{}
	walkImages(messages, func(blk *record.Map, _ inline) { set[blk] = true })
	return set
}

// Thumbnail limits.
const (
	// MaxThumbnailSource is the largest image, decoded, that is made into
	// a thumbnail; a larger one gets a placeholder.
	MaxThumbnailSource = 16 << 20
	// maxPixels bounds the pixels of an image decoded for a thumbnail.
	maxPixels = 40_000_000
	// thumbSide is the longest side of a thumbnail, in pixels.
	thumbSide = 240
)

var errTooLarge = errors.New("too large for a thumbnail")

// thumbnail decodes base64 image data and returns a PNG at most
// thumbSide pixels a side. It refuses data over maxSource bytes or an
// image over maxPixels before decoding the pixels.
func thumbnail(b64 string, maxSource int) ([]byte, error) {
	if base64.StdEncoding.DecodedLen(len(b64)) > maxSource {
		return nil, fmt.Errorf("%w: %d bytes of base64", errTooLarge, len(b64))
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(b64))
	if err != nil {
		return nil, fmt.Errorf("image data: %w", err)
	}
	cfg, _, err := image.DecodeConfig(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	if cfg.Width <= 0 || cfg.Height <= 0 || cfg.Width*cfg.Height > maxPixels {
		return nil, fmt.Errorf("%w: %dx%d pixels", errTooLarge, cfg.Width, cfg.Height)
	}
	src, _, err := image.Decode(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	var out bytes.Buffer
	if err := png.Encode(&out, scale(src, thumbSide)); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// scale shrinks an image to fit side by side pixels, averaging up to 4x4
// of the source pixels each thumbnail pixel covers: a thumbnail, not a
// resampler. The source is first drawn into RGBA (image/draw has fast
// paths for the decoders' types), so sampling reads bytes rather than
// boxing a color per pixel.
func scale(src image.Image, side int) image.Image {
	b := src.Bounds()
	w, h := b.Dx(), b.Dy()
	if w <= side && h <= side {
		return src
	}
	rgba, ok := src.(*image.RGBA)
	if !ok {
		rgba = image.NewRGBA(image.Rect(0, 0, w, h))
		draw.Draw(rgba, rgba.Bounds(), src, b.Min, draw.Src)
	}
	tw, th := side, h*side/w
	if h > w {
		tw, th = w*side/h, side
	}
	tw, th = max(tw, 1), max(th, 1)
	dst := image.NewRGBA(image.Rect(0, 0, tw, th))
	for y := range th {
		y0, y1 := y*h/th, max((y+1)*h/th, y*h/th+1)
		sy := max((y1-y0)/4, 1)
		for x := range tw {
			x0, x1 := x*w/tw, max((x+1)*w/tw, x*w/tw+1)
			sx := max((x1-x0)/4, 1)
			var sum [4]int
			n := 0
			for yy := y0; yy < y1; yy += sy {
				row := yy * rgba.Stride // Pix starts at the bounds' minimum
				for xx := x0; xx < x1; xx += sx {
					p := rgba.Pix[row+xx*4 : row+xx*4+4 : row+xx*4+4]
					sum[0], sum[1], sum[2], sum[3] = sum[0]+int(p[0]), sum[1]+int(p[1]), sum[2]+int(p[2]), sum[3]+int(p[3])
					n++
				}
			}
			o := dst.PixOffset(x, y)
			dst.Pix[o], dst.Pix[o+1], dst.Pix[o+2], dst.Pix[o+3] = uint8(sum[0]/n), uint8(sum[1]/n), uint8(sum[2]/n), uint8(sum[3]/n)
		}
	}
	return dst
}

// placeholder is the SVG shown in place of an image that has no
// thumbnail; why is escaped as XML text.
func placeholder(why string) []byte {
	var esc bytes.Buffer
	for _, r := range cut(why, 60) {
		switch r {
		case '<':
			esc.WriteString("&lt;")
		case '>':
			esc.WriteString("&gt;")
		case '&':
			esc.WriteString("&amp;")
		case '"':
			esc.WriteString("&quot;")
		default:
			esc.WriteRune(r)
		}
	}
	return fmt.Appendf(nil, `<svg xmlns="http://www.w3.org/2000/svg" width="240" height="60"><rect width="240" height="60" fill="#eee" stroke="#999"/><text x="8" y="34" font-family="sans-serif" font-size="11" fill="#444">%s</text></svg>`, esc.String())
}
