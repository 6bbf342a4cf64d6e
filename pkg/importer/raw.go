package importer

import (
	"bytes"

	"github.com/ctxd/ctxd/pkg/record"
)

// Most of a record is a value of the source passed through unchanged: a
// pi message, a Claude Code message's content. Its JSON is then the
// source's own bytes, which is cheaper than encoding the decoded value
// again and keeps every byte as the tool wrote it. The functions here find
// a value's bytes in a line; a record keeps them in place of an encoding.

// span returns the bytes of the value at a path of keys in a JSON object,
// or nil when the path is not there or the input is not what the decoder
// accepted. Like the decoder, it takes the last of repeated keys. Keys
// written with escapes are not matched: the caller then encodes the value.
func span(data []byte, path ...string) []byte {
	v := bytes.TrimSpace(data)
	for _, key := range path {
		v = member(v, key)
		if v == nil {
			return nil
		}
	}
	return v
}

// member returns the bytes of the value under key in the object obj.
func member(obj []byte, key string) []byte {
	if len(obj) == 0 || obj[0] != '{' {
		return nil
	}
	var found []byte
	i := skipSpace(obj, 1)
	if i < len(obj) && obj[i] == '}' {
		return nil
	}
	for i < len(obj) {
		if obj[i] != '"' {
			return nil
		}
		end := skipString(obj, i)
		if end < 0 {
			return nil
		}
		k := obj[i+1 : end-1]
		if bytes.IndexByte(k, '\\') >= 0 {
			return nil // a key spelled with escapes: leave it to the decoder
		}
		i = skipSpace(obj, end)
		if i >= len(obj) || obj[i] != ':' {
			return nil
		}
		i = skipSpace(obj, i+1)
		vend := skipValue(obj, i)
		if vend < 0 {
			return nil
		}
		if string(k) == key {
			found = obj[i:vend]
		}
		i = skipSpace(obj, vend)
		if i >= len(obj) {
			return nil
		}
		switch obj[i] {
		case ',':
			i = skipSpace(obj, i+1)
		case '}':
			return found
		default:
			return nil
		}
	}
	return nil
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index after the string starting at b[i] ('"'):
// the first quote not escaped, one preceded by an even number of
// backslashes.
func skipString(b []byte, i int) int {
	i++
	for {
		j := bytes.IndexByte(b[i:], '"')
		if j < 0 {
			return -1
		}
		i += j
		k := i
		for k > 0 && b[k-1] == '\\' {
			k--
		}
		if (i-k)%2 == 0 {
			return i + 1
		}
		i++
	}
}

// skipValue returns the index after the value starting at b[i].
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				if i = skipString(b, i); i < 0 {
					return -1
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return -1
	}
	for ; i < len(b); i++ {
		switch b[i] {
		case ',', '}', ']', ' ', '\t', '\r', '\n':
			return i
		}
	}
	return i
}

// splice encodes m with the members named in raw written as those bytes:
// m's JSON, where the raw bytes are the source's own for those members.
// It returns nil when a raw value is missing, so that m is encoded whole.
func splice(m *record.Map, raw map[string][]byte) []byte {
	size := 2
	for _, r := range raw {
		if r == nil {
			return nil
		}
		size += len(r)
	}
	out := make([]byte, 0, size+64*len(m.Members))
	out = append(out, '{')
	for i, mem := range m.Members {
		if i > 0 {
			out = append(out, ',')
		}
		out = record.AppendJSONString(out, mem.Key)
		out = append(out, ':')
		if r, ok := raw[mem.Key]; ok {
			out = append(out, r...)
			continue
		}
		var err error
		if out, err = record.AppendJSON(out, mem.Value); err != nil {
			return nil
		}
	}
	return append(out, '}')
}
