package render

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
)

func idByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// validID reports whether s matches ^[a-zA-Z0-9_-]{1,max}$.
func validID(s string, max int) bool {
	if s == "" || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !idByte(s[i]) {
			return false
		}
	}
	return true
}

// sanitize replaces every byte outside [a-zA-Z0-9_-] by '_'.
func sanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !idByte(c) {
			b[i] = '_'
		}
	}
	return string(b)
}

func shortHash(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:4])
}

// idMap maps call ids to ids a provider takes, deterministically and
// without collisions: an id that is valid and seen for the first time is
// kept; an invalid one is sanitized, cut and given a hash of the original;
// the n-th call reusing an id gets the suffix _n. Should the result still
// collide with an id given out before, a counter follows. The mapping of
// an id depends only on the calls before it, so a session that grows keeps
// the ids it had.
type idMap struct {
	max   int
	seen  map[string]int
	taken map[string]bool
	// An incremental rendering's calls before its checkpoint: kept, found
	// through base rather than entered in seen and taken one by one.
	base *callIndex
	kept []loggedCall
}

// count returns how many calls before have the id.
func (m *idMap) count(id string) int {
	n := m.seen[id]
	if m.base != nil {
		n += m.base.count(m.base.byID[id], m.kept, func(c loggedCall) string { return c.id }, id)
	}
	return n
}

// given reports whether a call before is sent with the id w.
func (m *idMap) given(w string) bool {
	return m.taken[w] || m.base != nil && m.base.count(m.base.byWire[w], m.kept, func(c loggedCall) string { return c.wire }, w) > 0
}

// callIndex finds a rendering's calls (State.calls) by id and by the id
// they are sent with, so that the next rendering maps the ids of its
// calls without entering every call before its checkpoint anew. It is
// shared by the renderings that go on from each other in place (State's
// extended), each adding its calls: an entry is an index in the calls of
// the rendering that reads it, and counts only when the call there has
// the key, so the entries of calls a later rendering did again are
// ignored.
type callIndex struct {
	byID, byWire map[string][]int32
}

// indexCalls returns the index of calls.
func indexCalls(calls []loggedCall) *callIndex {
	x := &callIndex{byID: make(map[string][]int32, len(calls)), byWire: make(map[string][]int32, len(calls))}
	x.add(calls, 0)
	return x
}

// add enters calls[from:].
func (x *callIndex) add(calls []loggedCall, from int) {
	for i := from; i < len(calls); i++ {
		c := calls[i]
		x.byID[c.id] = addIndex(x.byID[c.id], int32(i))
		x.byWire[c.wire] = addIndex(x.byWire[c.wire], int32(i))
	}
}

func addIndex(s []int32, i int32) []int32 {
	for _, k := range s {
		if k == i {
			return s
		}
	}
	return append(s, i)
}

// count returns how many of the entries name a call of calls whose key
// is key.
func (x *callIndex) count(entries []int32, calls []loggedCall, key func(loggedCall) string, k string) int {
	n := 0
	for _, i := range entries {
		if int(i) < len(calls) && key(calls[i]) == k {
			n++
		}
	}
	return n
}

func newIDMap(max int) *idMap {
	return &idMap{max: max, seen: map[string]int{}, taken: map[string]bool{}}
}

func (m *idMap) wire(id string) string {
	n := m.count(id)
	m.seen[id]++
	w := id
	if !validID(id, m.max) || n > 0 || m.given(id) {
		suffix := ""
		if !validID(id, m.max) {
			suffix = "_" + shortHash(id)
		}
		if n > 0 {
			suffix += "_" + strconv.Itoa(n+1)
		}
		w = cut(sanitize(id), m.max-len(suffix)) + suffix
		for k := 2; m.given(w); k++ {
			more := suffix + "_x" + strconv.Itoa(k)
			w = cut(sanitize(id), m.max-len(more)) + more
		}
	}
	m.taken[w] = true
	return w
}

func cut(s string, n int) string {
	if len(s) > n {
		return s[:max(n, 0)]
	}
	return s
}

// toolName returns the name a call is sent with: names outside the
// pattern every provider documents for function names,
// ^[a-zA-Z0-9_-]{1,64}$ (Gemini: starting with a letter or '_'), are
// sanitized and cut; a name is never empty here.
func toolName(pv *provider, name string) string {
	ok := validID(name, 64)
	if ok && pv.nameLetter {
		c := name[0]
		ok = c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
	}
	if ok {
		return name
	}
	s := cut(sanitize(name), 64)
	if pv.nameLetter && !(s[0] == '_' || s[0] >= 'a' && s[0] <= 'z' || s[0] >= 'A' && s[0] <= 'Z') {
		s = cut("_"+s, 64)
	}
	return s
}
