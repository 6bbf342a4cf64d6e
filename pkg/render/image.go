package render

import (
	"net/url"
	"strings"

	"github.com/ctxd/ctxd/pkg/record"
)

// image is an image block: inline base64 data, or a URL.
type image struct {
	mime, data, url string
}

// parseImage reads the image shapes records carry: pi's {data, mimeType},
// Anthropic's {source: {type: base64|url, ...}} and OpenAI's image_url
// with a data: or http(s) URL. The reason is "" when it is an image.
func parseImage(b *record.Map) (image, string) {
	if typ, _ := b.String("type"); typ == "image_url" {
		var u string
		switch x := get(b, "image_url").(type) {
		case string:
			u = x
		case *record.Map:
			u, _ = x.String("url")
		}
		return imageURL(u)
	}
	if data, ok := b.String("data"); ok {
		mime, _ := b.String("mimeType")
		if mime == "" {
			mime, _ = b.String("media_type")
		}
		return inline(mime, data)
	}
	src, ok := get(b, "source").(*record.Map)
	if !ok {
		return image{}, "image without data"
	}
	switch t, _ := src.String("type"); t {
	case "base64":
		mime, _ := src.String("media_type")
		data, _ := src.String("data")
		return inline(mime, data)
	case "url":
		u, _ := src.String("url")
		return imageURL(u)
	}
	return image{}, "image source of an unsupported type"
}

func inline(mime, data string) (image, string) {
	switch {
	case data == "":
		return image{}, "image without data"
	case mime == "":
		return image{}, "image without a media type"
	}
	return image{mime: mime, data: data}, ""
}

// sendable parses an image block of the neutral context for a body: as
// parseImage, and refusing inline data that is not base64. (The images of
// a rendered body were checked on their way in: Estimate reads them with
// parseImage.)
func sendable(b *record.Map) (image, string) {
	img, reason := parseImage(b)
	if reason == "" && img.url == "" && !isBase64(img.data) {
		return image{}, "image data not base64"
	}
	return img, reason
}

// isBase64 reports whether s is standard, padded base64, as every
// provider takes image data: whole groups of four, "=" only at the end.
// It reads every byte, eight at a time, without decoding: images are
// large and checked on every render.
func isBase64(s string) bool {
	if len(s)%4 != 0 {
		return false
	}
	end := len(s)
	if end > 0 && s[end-1] == '=' {
		end--
		if s[end-1] == '=' {
			end--
		}
	}
	i := 0
	for ; i+8 <= end; i += 8 {
		w := s[i : i+8] // one bounds check, and the loads become one
		x := uint64(w[0]) | uint64(w[1])<<8 | uint64(w[2])<<16 | uint64(w[3])<<24 |
			uint64(w[4])<<32 | uint64(w[5])<<40 | uint64(w[6])<<48 | uint64(w[7])<<56
		if !base64Word(x) {
			return false
		}
	}
	for ; i < end; i++ {
		c := s[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '/' && c <= '9' || c == '+') {
			return false
		}
	}
	return true
}

// base64Word reports whether each of the eight bytes of x is in the
// base64 alphabet: '+', '/' to '9' (the slash and the digits), 'A' to 'Z'
// or 'a' to 'z'. For a byte b below 0x80, b+(0x80-lo) has its high bit
// set when b >= lo, and b+(0x7f-hi) has it clear when b <= hi; no sum
// carries into the next byte.
func base64Word(x uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	if x&highs != 0 {
		return false
	}
	plus := (x + ones*(0x80-'+')) &^ (x + ones*(0x7f-'+'))
	digits := (x + ones*(0x80-'/')) &^ (x + ones*(0x7f-'9'))
	upper := (x + ones*(0x80-'A')) &^ (x + ones*(0x7f-'Z'))
	lower := (x + ones*(0x80-'a')) &^ (x + ones*(0x7f-'z'))
	return (plus|digits|upper|lower)&highs == highs
}

func imageURL(u string) (image, string) {
	if rest, ok := strings.CutPrefix(u, "data:"); ok {
		mime, data, ok := strings.Cut(rest, ";base64,")
		if !ok {
			return image{}, "data URL not in base64"
		}
		return inline(mime, data)
	}
	if strings.HasPrefix(u, "https://") || strings.HasPrefix(u, "http://") {
		// A provider fetches it: OpenAI's schema wants a URI, and none
		// can fetch from a URL that does not parse or names no host.
		if pu, err := url.Parse(u); err != nil || pu.Host == "" {
			return image{}, "image URL not valid"
		}
		return image{url: u}, ""
	}
	return image{}, "image without data"
}
