package render

import (
	"bytes"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"weak"

	"github.com/ctxd/ctxd/pkg/record"
)

// Incremental rendering (RENDER.md section 9). A session grows a record at
// a time, and its neutral context keeps its first messages; rendering it
// whole again for every fetch would cost the whole context each time.
// RenderJSON renders from a kept State instead: it reuses the JSON of the
// body up to the latest checkpoint before the first neutral message that
// changed, and renders and encodes only the messages from there on. The
// bytes, the report and the usage are those of Render of the whole
// context (TestRenderJSON_Incremental checks it on generated sessions).
//
// A checkpoint is a message boundary S where the rendering of the
// messages before S cannot depend on any message from S on:
//
//   - every call before S is answered by a result before S: a later
//     result can then only be a duplicate for it, and a later message
//     neither adds a call back nor joins a result group before S (a call
//     waiting for its result, or a provider-executed one never answered,
//     holds every checkpoint back until it is answered);
//   - a message other than a system message comes before S, so the
//     leading system text (Anthropic's system, Gemini's
//     systemInstruction) is complete;
//   - for Gemini, a user turn comes before S, so no later call is removed
//     for want of one.
//
// What the messages before S contribute is then fixed: their blocks,
// their changes (each change names a message before S, and changes are
// listed in message order), the ids given to their calls (a call's id
// depends only on the calls before it), the output message open for
// merging (role, its last neutral message, its blocks), Anthropic's
// latest screenshot, and the images and their tokens. A checkpoint keeps
// those, and the rendering from S goes on from them exactly as the whole
// rendering would.

// State is a rendering kept to render the next version of the same
// context. It is never modified once returned: a new rendering returns a
// new State sharing the unchanged parts.
type State struct {
	f        Format
	pv       *provider
	browser  []string
	msgs     []weak.Pointer[record.Map] // the neutral messages rendered, not kept alive
	arr      weak.Pointer[any]          // the array they were in (firstChange)
	ownSeqs  bool                       // seqs was made here (Options.SeqsFrom), not the caller's
	seqs     []uint64
	body     []byte // the body's members: its JSON object without its braces
	report   Report
	usage    Usage
	calls    []loggedCall // every call, in neutral order
	nblk     []int32      // Anthropic: the blocks of each body message but the last
	thinking [][2]int32   // Anthropic: the thinking blocks, in order
	cps      []checkpoint
	start    int // the first neutral message rendered anew
	// index finds calls by id, for the next rendering (callIndex); nil
	// until a rendering from a checkpoint makes it.
	index *callIndex
	// chHeld is, for each change of the report, the bytes of the To and
	// Reason strings of the changes up to it (Size).
	chHeld []int

	// mp is set for a msgpack rendering (RenderMsgpack): body holds the
	// body's members as msgpack map entries, whose messages array header
	// is at arrAt and its first item at itemsAt; fields counts the
	// members.
	mp             bool
	arrAt, itemsAt int
	fields         int

	// rep is the encoding of the report's changes (AppendReportJSON),
	// chEnd where each ends in it; before it is written, repKept and
	// nKept are the encoding and number of the changes kept from the
	// state rendered from.
	rep, repKept []byte
	chEnd        []int32
	nKept        int
	// Where body and rep start in the buffer they were appended to.
	bodyAt, repAt int

	// extended is set, atomically, once a rendering from this state has
	// appended to its slices in place (only the first may; see grow).
	extended *uint32

	// id names the state; from is the id of the state it was rendered
	// from (0: rendered whole), kept the bytes of its messages array's
	// items kept from that state's, in place (KeptItems).
	id, from uint64
	kept     int
	// jItemsAt is where the messages' items start in a JSON body.
	jItemsAt int
	// compared counts the neutral messages the rendering compared one
	// by one with those of the state it went on from (firstChange).
	compared int
}

// stateIDs numbers the states.
var stateIDs atomic.Uint64

// ID returns a number naming the state among all of the process.
func (s *State) ID() uint64 { return s.id }

// From returns the ID of the state the rendering went on from, 0 when it
// rendered the whole context.
func (s *State) From() uint64 { return s.from }

// KeptItems returns how many bytes of the messages array's items, from
// the first, are those of the state it went on from (From), byte for
// byte: every message of that state's array that ends within them is
// in this one's, the same, at the same place among the items.
func (s *State) KeptItems() int { return s.kept }

type loggedCall struct {
	id, wire string
	src      int
	// held is the bytes of the wire ids of the calls up to this one,
	// this one included, that are not their ids (Size).
	held int
}

// checkpoint is the state of a rendering before the items of the neutral
// messages from at on.
type checkpoint struct {
	at  int // neutral message index
	off int // bytes of the body's JSON before: its members, the last message open
	// In a msgpack rendering: mopen is where the last message, open,
	// begins among the items (-1 when the format does not merge, or
	// before any message), and mlen the bytes of its blocks before;
	// without one, mlen is the bytes of the items before.
	mopen, mlen int
	outs        int    // body messages (items) begun
	nblk        int    // blocks of the last body message (merging formats)
	role        string // role of the last body message, "" for none
	last        int    // the neutral message of its last block
	shot        [2]int // Anthropic: the latest browser screenshot, or -1s

	images, imageBytes, imageTokens int
}

// Start returns the first neutral message the rendering rendered anew:
// 0 when it rendered the whole context.
func (s *State) Start() int { return s.start }

// BodyAt returns where the body starts in the buffer it was appended to.
func (s *State) BodyAt() int { return s.bodyAt }

// Seqs returns the record sequences of the messages rendered: Options.Seqs,
// or those Options.SeqsFrom gave.
func (s *State) Seqs() []uint64 { return s.seqs }

// Format returns the format rendered.
func (s *State) Format() Format { return s.f }

// Body returns the body's members, its JSON object without the braces
// (`"messages":[...]`): what a reply puts after its own fields. For a
// msgpack rendering, they are the entries of a msgpack map, Fields of
// them.
func (s *State) Body() []byte { return s.body }

// Fields returns the number of the body's members.
func (s *State) Fields() int { return s.fields }

// Report returns the rendering's report.
func (s *State) Report() Report { return s.report }

// Usage returns the body's usage.
func (s *State) Usage() Usage { return s.usage }

// In returns the state with its body and report bytes in buf: the
// buffer RenderJSON and AppendReportJSON appended to, as it ended up
// after any appends that moved it, or a copy of it. A caller that keeps
// its reply keeps the state In it, so that the bytes are held once.
func (s *State) In(buf []byte) *State {
	if s.bodyAt+len(s.body) > len(buf) || s.repAt+len(s.rep) > len(buf) {
		panic("render: State.In a buffer it was not written in")
	}
	c := *s
	c.body = buf[s.bodyAt : s.bodyAt+len(s.body) : s.bodyAt+len(s.body)]
	if s.rep != nil {
		c.rep = buf[s.repAt : s.repAt+len(s.rep) : s.repAt+len(s.rep)]
	}
	return &c
}

// appendKept appends bytes kept from the state rendered from: when dst
// is the buffer they lie in, written over from where they start, they are
// in place already.
func appendKept(dst, b []byte) []byte {
	if len(b) > 0 && cap(dst)-len(dst) >= len(b) && &dst[:len(dst)+1][len(dst)] == &b[0] {
		return dst[:len(dst)+len(b)]
	}
	return append(dst, b...)
}

// overwrites reports whether dst is the buffer prev's body lies in: a
// rendering from prev appended to it writes over prev's bytes from its
// body on, and must copy first what it reads of them after it writes.
func overwrites(dst []byte, prev *State) bool {
	if len(prev.body) == 0 || prev.bodyAt >= cap(dst) || &dst[:cap(dst)][prev.bodyAt] != &prev.body[0] {
		return false
	}
	if len(dst) != prev.bodyAt {
		panic("render: a rendering appended over the state it renders from, not where its body starts")
	}
	return true
}

// grow returns s[:n] to append to: in place when n is its length and in
// place is allowed (the first rendering from the state the slice belongs
// to: what it appends lies beyond that state's slices), else a copy.
func grow[T any](s []T, n int, inPlace bool) []T {
	if inPlace && n == len(s) {
		return s
	}
	return slices.Clone(s[:n])
}

// AppendReportJSON appends the report as it goes on the wire (Report.Map
// encoded), reusing the encoding of the changes kept from the state
// rendered from. Call it once, after RenderJSON and before the state is
// rendered from: the state keeps the encoding for the next rendering.
func (s *State) AppendReportJSON(dst []byte) ([]byte, error) {
	if s.rep != nil || s.chEnd != nil && len(s.chEnd) != s.nKept {
		panic("render: AppendReportJSON twice")
	}
	if s.mp {
		panic("render: AppendReportJSON of a msgpack rendering")
	}
	dst = append(dst, `{"changes":[`...)
	start := len(dst)
	dst = append(dst, s.repKept...)
	var err error
	for i := s.nKept; i < len(s.report.Changes); i++ {
		if i > 0 {
			dst = append(dst, ',')
		}
		if dst, err = record.AppendJSON(dst, s.report.Changes[i].Map()); err != nil {
			return dst, err
		}
		s.chEnd = append(s.chEnd, int32(len(dst)-start))
	}
	s.rep, s.repAt = dst[start:len(dst):len(dst)], start
	s.repKept = nil
	dst = append(dst, `],"ends_with_assistant":`...)
	dst = strconv.AppendBool(dst, s.report.EndsWithAssistant)
	if s.pv.breakpoint {
		dst = append(dst, `,"cache_breakpoint":`...)
		if bp := s.report.CacheBreakpoint; bp != nil {
			dst = append(dst, `{"message":`...)
			dst = strconv.AppendInt(dst, int64(bp.Message), 10)
			dst = append(dst, `,"block":`...)
			dst = strconv.AppendInt(dst, int64(bp.Block), 10)
			dst = append(dst, '}')
		} else {
			dst = append(dst, "null"...)
		}
	}
	return append(dst, '}'), nil
}

// AppendReportMsgpack is AppendReportJSON for a msgpack rendering
// (RenderMsgpack): the report's map, as record.AppendMsgpack encodes
// Report.Map.
func (s *State) AppendReportMsgpack(dst []byte) ([]byte, error) {
	if s.rep != nil || s.chEnd != nil && len(s.chEnd) != s.nKept {
		panic("render: AppendReportMsgpack twice")
	}
	if !s.mp {
		panic("render: AppendReportMsgpack of a JSON rendering")
	}
	n := 2
	if s.pv.breakpoint {
		n = 3
	}
	dst = record.AppendMsgpackMapLen(dst, n)
	dst = record.AppendMsgpackString(dst, "changes")
	dst = record.AppendMsgpackArrayLen(dst, len(s.report.Changes))
	start := len(dst)
	dst = append(dst, s.repKept...)
	var err error
	for i := s.nKept; i < len(s.report.Changes); i++ {
		if dst, err = record.AppendMsgpack(dst, s.report.Changes[i].Map()); err != nil {
			return dst, err
		}
		s.chEnd = append(s.chEnd, int32(len(dst)-start))
	}
	s.rep, s.repAt = dst[start:len(dst):len(dst)], start
	s.repKept = nil
	dst = record.AppendMsgpackString(dst, "ends_with_assistant")
	dst, _ = record.AppendMsgpack(dst, s.report.EndsWithAssistant)
	if s.pv.breakpoint {
		var bp any
		if b := s.report.CacheBreakpoint; b != nil {
			bp = record.NewMap("message", int64(b.Message), "block", int64(b.Block))
		}
		dst = record.AppendMsgpackString(dst, "cache_breakpoint")
		dst, _ = record.AppendMsgpack(dst, bp)
	}
	return dst, nil
}

// Size returns the memory the state holds apart from its body bytes and
// the neutral messages it refers to (which the session's projection holds).
func (s *State) Size() int {
	n := 256 + cap(s.msgs)*8 + cap(s.seqs)*8 + cap(s.nblk)*4 + cap(s.thinking)*8 + cap(s.chEnd)*4 + cap(s.chHeld)*8 +
		cap(s.cps)*int(checkpointSize) + cap(s.report.Changes)*int(changeSize) + cap(s.calls)*int(callSize)
	if k := len(s.calls); k > 0 {
		n += s.calls[k-1].held
	}
	if s.index != nil {
		n += len(s.calls) * indexSize
	}
	if k := len(s.chHeld); k > 0 {
		n += s.chHeld[k-1]
	}
	return n
}

const (
	checkpointSize = 14*8 + 16
	changeSize     = 8*5 + 16*4
	callSize       = 16*2 + 8 + 8
	indexSize      = 2 * (16 + 24 + 8 + 16) // a call in both maps of callIndex
)

// RenderJSON appends the body's members (Body) of the rendering of
// messages in format f (not Neutral) to dst, and returns them with the
// State to render the next version from. With prev, a State of an
// earlier rendering, it renders only from the latest checkpoint before
// the first message that differs (RENDER.md section 9); the result is
// Render's, byte for byte, whatever prev holds. The messages are taken
// as projection.Session.Messages hands them out: an array handed in once
// is never written where it was read, only appended to, so that a
// rendering from the array prev rendered compares none of the messages
// it shares. It fails only when the messages hold a value JSON cannot
// carry.
func RenderJSON(dst []byte, prev *State, f Format, messages []any, opt Options) ([]byte, *State, error) {
	return renderFrom(dst, prev, f, messages, opt, false)
}

// RenderMsgpack is RenderJSON for a msgpack reply: it appends the body's
// members as the entries of a msgpack map (State.Fields of them, each as
// record.AppendMsgpack encodes Render's body), from the state of an
// earlier msgpack rendering. The usage is still the body's JSON's
// (RENDER.md section 7), measured without encoding it.
func RenderMsgpack(dst []byte, prev *State, f Format, messages []any, opt Options) ([]byte, *State, error) {
	return renderFrom(dst, prev, f, messages, opt, true)
}

func renderFrom(dst []byte, prev *State, f Format, messages []any, opt Options, mp bool) ([]byte, *State, error) {
	pv := providerOf(f)
	if pv.out == nil {
		panic("render: RenderJSON of the neutral format")
	}
	var from *checkpoint
	keep := 0        // checkpoints of prev kept
	inPlace := false // this rendering may append to prev's slices
	compat := prev != nil && prev.f == f && prev.mp == mp && (prev.browser == nil) == (opt.BrowserTools == nil) &&
		slices.Equal(prev.browser, opt.BrowserTools) && (prev.seqs == nil) == (opt.Seqs == nil && opt.SeqsFrom == nil)
	if compat {
		inPlace = atomic.CompareAndSwapUint32(prev.extended, 0, 1)
	}
	ownSeqs := false
	if opt.Seqs == nil && opt.SeqsFrom != nil {
		// The messages in the array prev rendered are those it rendered
		// (see firstChange): their sequences are prev's.
		n := 0
		if compat && len(messages) > 0 && prev.arr.Value() == &messages[0] {
			n = min(len(prev.msgs), len(prev.seqs), len(messages))
			opt.Seqs = grow(prev.seqs, n, inPlace && prev.ownSeqs)
		} else {
			opt.Seqs = make([]uint64, 0, len(messages))
		}
		opt.Seqs, ownSeqs = opt.SeqsFrom(opt.Seqs, n), true
		if len(opt.Seqs) != len(messages) {
			panic(fmt.Sprintf("render: %d sequences for %d messages", len(opt.Seqs), len(messages)))
		}
	}
	st := &State{f: f, pv: pv, browser: opt.BrowserTools, seqs: opt.Seqs, ownSeqs: ownSeqs, extended: new(uint32), mp: mp, id: stateIDs.Add(1)}
	if compat {
		var r int
		r, st.compared = firstChange(prev, messages, opt.Seqs)
		st.msgs = grow(prev.msgs, r, inPlace)
		keep = sort.Search(len(prev.cps), func(i int) bool { return prev.cps[i].at > r })
		if keep > 0 {
			from = &prev.cps[keep-1]
		}
	}
	if len(messages) > 0 {
		st.arr = weak.Make(&messages[0])
	}
	p := newPlan(pv, messages, opt)
	p.track = true
	for _, v := range messages[len(st.msgs):] {
		m, _ := v.(*record.Map)
		st.msgs = append(st.msgs, weak.Make(m))
	}
	if from != nil {
		p.start, p.from = from.at, from
		st.start = from.at
		st.fields = prev.fields
		ncalls := sort.Search(len(prev.calls), func(i int) bool { return prev.calls[i].src >= from.at })
		st.calls = grow(prev.calls, ncalls, inPlace)
		// The index of prev's calls goes on with this rendering's when
		// it may be written (see callIndex), and is made anew otherwise.
		if inPlace && prev.index != nil {
			st.index = prev.index
		} else {
			st.index = indexCalls(st.calls)
		}
		p.ids.base, p.ids.kept = st.index, st.calls[:ncalls:ncalls]
		nch := sort.Search(len(prev.report.Changes), func(i int) bool { return prev.report.Changes[i].Message >= from.at })
		st.report.Changes = grow(prev.report.Changes, nch, inPlace)
		st.chHeld = grow(prev.chHeld, nch, inPlace)
		st.cps = grow(prev.cps, keep, inPlace)
		if prev.rep != nil && len(prev.chEnd) >= nch {
			st.nKept, st.chEnd = nch, grow(prev.chEnd, nch, inPlace)
			if nch > 0 {
				st.repKept = prev.rep[:prev.chEnd[nch-1]]
			}
		}
		if pv.breakpoint {
			// The checkpoint's last message is open: its count is the
			// checkpoint's, and goes on.
			st.nblk = grow(prev.nblk, max(from.outs-1, 0), inPlace)
			nt := sort.Search(len(prev.thinking), func(i int) bool {
				t := prev.thinking[i]
				return int(t[0]) > from.outs-1 || int(t[0]) == from.outs-1 && int(t[1]) >= from.nblk
			})
			st.thinking = slices.Clip(prev.thinking[:nt])
		}
	}
	// bad counts from the first message rendered anew: a turn's
	// rendering allocates for what it renders, not for the session.
	p.badAt, p.bad = p.start, make([]int32, len(messages)-p.start+2)
	p.extract()
	p.pair()
	for _, c := range p.calls {
		// Copies: a string of a record holds the record's others.
		id, wire := strings.Clone(c.id), c.wire
		if wire == c.id {
			wire = id
		}
		held := 0
		if k := len(st.calls); k > 0 {
			held = st.calls[k-1].held
		}
		if wire != id {
			held += len(wire)
		}
		st.calls = append(st.calls, loggedCall{id: id, wire: wire, src: c.src, held: held})
		end := len(messages)
		if c.res != nil {
			end = c.res.src
		}
		p.bad[c.src+1-p.start]++ // calls before S not answered before S: S in c.src+1 .. end
		p.bad[end+1-p.start]--
	}
	if st.index != nil {
		st.index.add(st.calls, len(p.ids.kept))
	}
	p.layout()

	system, l, shot := pv.out(p)
	p.sortChanges()
	for _, c := range p.report.Changes {
		c.ID, c.Reason = strings.Clone(c.ID), strings.Clone(c.Reason) // see calls
		st.report.Changes = append(st.report.Changes, c)
		held := len(c.To) + len(c.Reason)
		if k := len(st.chHeld); k > 0 {
			held += st.chHeld[k-1]
		}
		st.chHeld = append(st.chHeld, held)
	}

	e := encoder{pv: pv, st: st, marks: p.marks, start: len(dst), openAt: -1}
	if from != nil && overwrites(dst, prev) {
		// The report's kept changes lie after the body.
		st.repKept = slices.Clone(st.repKept)
		e.over = true
	}
	start := len(dst)
	var err error
	switch {
	case from != nil && mp:
		st.from, st.kept = prev.id, from.mlen
		if from.mopen >= 0 {
			st.kept = from.mopen
		}
		e.images, e.imageBytes, e.imageTokens = from.images, from.imageBytes, from.imageTokens
		e.outs, e.nblk = from.outs, from.nblk
		if len(l.msgs) > 0 && l.msgs[0].cont > 0 {
			e.openMore = len(l.msgs[0].blocks)
		}
		dst = e.resume(dst, prev, from, l.base+len(l.msgs))
	case from != nil:
		st.from, st.kept, st.jItemsAt = prev.id, from.off-prev.jItemsAt, prev.jItemsAt
		dst = appendKept(dst, prev.body[:from.off])
		e.images, e.imageBytes, e.imageTokens = from.images, from.imageBytes, from.imageTokens
		e.outs, e.nblk = from.outs, from.nblk
	case mp:
		if dst, err = e.headMsgpack(dst, system, l.base+len(l.msgs)); err != nil {
			return dst, nil, err
		}
	default:
		st.fields = 1
		if system != nil {
			st.fields = 2
		}
		if dst, err = e.head(dst, system); err != nil {
			return dst, nil, err
		}
		st.jItemsAt = len(dst) - start
	}
	if mp {
		dst, err = e.messagesMsgpack(dst, l)
	} else {
		dst, err = e.messages(dst, start, l)
	}
	if err != nil {
		return dst, nil, err
	}
	st.body, st.bodyAt = dst[start:len(dst):len(dst)], start
	st.cps = append(st.cps, p.marks...)

	role := l.lastRole()
	if role == "" && from != nil {
		role = from.role
	}
	st.report.EndsWithAssistant = role == "assistant" || role == "model"
	if outs, last := e.outs, e.nblk; pv.breakpoint && outs > 0 {
		st.report.CacheBreakpoint = breakpoint(outs-1, func(m int) int {
			if m == outs-1 {
				return last
			}
			return int(st.nblk[m])
		},
			func(m, b int) bool {
				_, found := slices.BinarySearchFunc(st.thinking, [2]int32{int32(m), int32(b)}, func(a, b [2]int32) int {
					if a[0] != b[0] {
						return int(a[0] - b[0])
					}
					return int(a[1] - b[1])
				})
				return found
			}, shot)
	}
	st.usage = Usage{Bytes: len(st.body) + 2, Images: e.images}
	if mp {
		st.usage.Bytes = e.jlen + 2
	}
	st.usage.InputTokens = e.imageTokens + (max(st.usage.Bytes-e.imageBytes, 0)+BytesPerToken-1)/BytesPerToken
	return dst, st, nil
}

// firstChange returns the index of the first neutral message that differs
// between prev's messages and cur, and how many it compared one by one:
// by identity (the projection hands out a message it re-renders as a new
// value, and never writes one it handed out) and by record sequence. The
// old messages are held weakly: one reclaimed since differs, as no message
// of cur can be it. When cur is the array prev's messages were in (the
// projection never writes what it handed out, and appends after it), they
// are all there as they were, and only the sequences are compared.
func firstChange(prev *State, cur []any, curSeqs []uint64) (at, compared int) {
	old, oldSeqs := prev.msgs, prev.seqs
	n := min(len(old), len(cur))
	if oldSeqs != nil {
		n = min(n, len(oldSeqs), len(curSeqs))
	}
	if n > 0 && prev.arr.Value() == &cur[0] {
		if oldSeqs != nil {
			for i := range n {
				if oldSeqs[i] != curSeqs[i] {
					return i, 0
				}
			}
		}
		return n, 0
	}
	for i := range n {
		m, ok := cur[i].(*record.Map)
		if !ok || m == nil || old[i].Value() != m || oldSeqs != nil && oldSeqs[i] != curSeqs[i] {
			return i, i + 1
		}
	}
	return n, n
}

// outList starts a list of body messages: after a checkpoint, a merging
// format's list starts with the checkpoint's last message, open.
func (p *plan) outList(merge bool) *outList {
	l := &outList{p: p, merge: merge}
	if c := p.from; c != nil {
		l.base = c.outs
		if merge && c.outs > 0 {
			l.base--
			l.msgs = []*out{{role: c.role, srcs: []int{c.last}, cont: c.nblk}}
		}
	}
	return l
}

// mark records a checkpoint before the items of neutral message at, when
// it is one (see above); started says a message other than a leading
// system message came before.
func (p *plan) mark(l *outList, at int, started bool, shot [2]int) {
	if !p.track || at <= p.badAt {
		return // before the start, or the items of one message go on
	}
	for p.badAt < at {
		p.badAt++
		p.badN += p.bad[p.badAt-p.start]
	}
	if p.badN > 0 || !started && p.from == nil || p.pv.userTurn && !p.userTurn {
		return
	}
	c := checkpoint{at: at, outs: l.base + len(l.msgs), shot: shot}
	if n := len(l.msgs); n > 0 {
		o := l.msgs[n-1]
		c.role, c.last = o.role, o.srcs[len(o.srcs)-1]
		if !o.flat {
			c.nblk = o.cont + len(o.blocks)
		}
	} else if p.from != nil {
		c.role, c.last, c.nblk = p.from.role, p.from.last, p.from.nblk
	}
	p.marks = append(p.marks, c)
}

// encoder writes the body's members, completing the marks with the
// offsets and image counts they were taken at.
type encoder struct {
	pv    *provider
	st    *State
	marks []checkpoint
	next  int // the first mark not yet reached

	// A msgpack encoding (encodeMsgpack) tracks the length of the JSON it
	// stands for in jlen, and where in dst its items, its last message
	// (-1 for none, or a format that does not merge) and that message's
	// blocks begin. prevOpen holds the blocks of the open message of the
	// checkpoint resumed from, written after its new header.
	start, items, openAt, blocksAt int
	jlen                           int
	over                           bool // dst is the buffer of the state rendered from
	prevOpen                       []byte
	resumeOpen                     bool
	openMore                       int // blocks merged into the open message since
	openRole                       string

	outs, nblk                      int
	images, imageBytes, imageTokens int
}

func (e *encoder) head(dst []byte, system any) ([]byte, error) {
	if system != nil {
		dst = record.AppendJSONString(dst, e.pv.system)
		dst = append(dst, ':')
		var err error
		if dst, err = record.AppendJSON(dst, system); err != nil {
			return dst, fmt.Errorf("encode %s body: %w", e.pv.format, err)
		}
		e.walk(system)
		dst = append(dst, ',')
	}
	dst = record.AppendJSONString(dst, e.pv.messages)
	return append(dst, ":["...), nil
}

func (e *encoder) walk(v any) {
	walkImages(v, func(img image, n int) {
		e.images++
		e.imageBytes += n
		w, h, ok := imageSize(img)
		if !ok {
			w, h = defaultSide, defaultSide
		}
		e.imageTokens += e.pv.imageTokens(w, h)
	})
}

// reached completes the marks taken where the encoding is now.
func (e *encoder) reached(off int) {
	for e.next < len(e.marks) && e.marks[e.next].outs == e.outs && e.marks[e.next].nblk == e.nblk {
		m := &e.marks[e.next]
		m.off, m.images, m.imageBytes, m.imageTokens = off, e.images, e.imageBytes, e.imageTokens
		e.next++
	}
}

// reachedMsgpack completes the marks taken where a msgpack encoding is
// now, at the end of dst.
func (e *encoder) reachedMsgpack(dst []byte) {
	for e.next < len(e.marks) && e.marks[e.next].outs == e.outs && e.marks[e.next].nblk == e.nblk {
		m := &e.marks[e.next]
		m.off, m.images, m.imageBytes, m.imageTokens = e.jlen, e.images, e.imageBytes, e.imageTokens
		if e.openAt >= 0 {
			m.mopen, m.mlen = e.openAt-e.items, len(dst)-e.blocksAt
		} else {
			m.mopen, m.mlen = -1, len(dst)-e.items
		}
		e.next++
	}
}

// jsonLen is record.JSONLen.
func jsonLen(v any) (int, error) {
	n, err := record.JSONLen(v)
	if err != nil {
		return 0, fmt.Errorf("encode body: %w", err)
	}
	return n, nil
}

// headMsgpack writes the members before the messages' items, msgpack,
// and the header of an array of n messages.
func (e *encoder) headMsgpack(dst []byte, system any, n int) ([]byte, error) {
	key, sysKey := e.pv.messages, e.pv.system
	e.st.fields = 1
	if system != nil {
		e.st.fields = 2
		dst = record.AppendMsgpackString(dst, sysKey)
		var err error
		if dst, err = record.AppendMsgpack(dst, system); err != nil {
			return dst, fmt.Errorf("encode %s body: %w", e.pv.format, err)
		}
		k, err := jsonLen(system)
		if err != nil {
			return dst, err
		}
		e.jlen += len(sysKey) + 3 + k + 1 // "key":value,
		e.walk(system)
	}
	dst = record.AppendMsgpackString(dst, key)
	e.jlen += len(key) + 2 + 2 // "key":[
	e.st.arrAt = len(dst) - e.start
	dst = record.AppendMsgpackArrayLen(dst, n)
	e.st.itemsAt = len(dst) - e.start
	e.items = len(dst)
	return dst, nil
}

// resume writes the members of prev's msgpack body up to the checkpoint
// from, with its messages array header made for n messages. The open
// message's blocks are kept in prevOpen, for messagesMsgpack to write
// after its new header.
func (e *encoder) resume(dst []byte, prev *State, from *checkpoint, n int) []byte {
	body := prev.body
	items := body[prev.itemsAt:]
	var blocks int
	if from.mopen >= 0 {
		blocks = from.mopen + msgHeaderLen(items[from.mopen:], from.role, e.pv.blocks)
	}
	if e.over {
		// Written over in place, the kept bytes stay where they are
		// unless a header before them changes its length: then they
		// are copied out first.
		var buf [64]byte
		same := len(record.AppendMsgpackArrayLen(buf[:0], n)) == prev.itemsAt-prev.arrAt
		if same && from.mopen >= 0 {
			same = len(appendMsgHeader(buf[:0], from.role, e.pv.blocks, e.nblk+e.openMore)) == blocks-from.mopen
		}
		if !same {
			body = bytes.Clone(body)
			items = body[prev.itemsAt:]
		}
	}
	e.st.arrAt = prev.arrAt
	dst = appendKept(dst, body[:prev.arrAt])
	dst = record.AppendMsgpackArrayLen(dst, n)
	e.st.itemsAt = len(dst) - e.start
	e.items = len(dst)
	e.jlen = from.off
	if from.mopen < 0 {
		return appendKept(dst, items[:from.mlen])
	}
	dst = appendKept(dst, items[:from.mopen])
	e.prevOpen, e.resumeOpen, e.openRole = items[blocks:blocks+from.mlen], true, from.role
	return dst
}

// appendMsgHeader appends the head of a merged message of n blocks:
// {"role": role, key: [ in msgpack.
func appendMsgHeader(dst []byte, role, key string, n int) []byte {
	dst = record.AppendMsgpackMapLen(dst, 2)
	dst = record.AppendMsgpackString(dst, "role")
	dst = record.AppendMsgpackString(dst, role)
	dst = record.AppendMsgpackString(dst, key)
	return record.AppendMsgpackArrayLen(dst, n)
}

// msgHeaderLen returns the length of the head appendMsgHeader wrote at
// the start of b.
func msgHeaderLen(b []byte, role, key string) int {
	var buf [64]byte
	n := len(appendMsgHeader(buf[:0], role, key, 0)) - 1 // less the array header
	switch b[n] {
	case 0xdc:
		return n + 3
	case 0xdd:
		return n + 5
	}
	return n + 1
}

// messagesMsgpack is messages for a msgpack encoding: it writes the
// list's items after the body so far, the last message of a merging
// format's checkpoint (prevOpen) with its new header, and tracks the
// JSON length of what it writes.
func (e *encoder) messagesMsgpack(dst []byte, l *outList) ([]byte, error) {
	key := e.pv.blocks
	open := e.outs > 0 && e.pv.blocks != ""
	if e.resumeOpen {
		// The checkpoint's last message, with the blocks merged into it
		// since.
		n := e.nblk + e.openMore
		e.openAt = len(dst)
		dst = appendMsgHeader(dst, e.openRole, key, n)
		e.blocksAt = len(dst)
		dst = appendKept(dst, e.prevOpen)
		e.prevOpen = nil
	}
	e.reachedMsgpack(dst)
	var err error
	for _, o := range l.msgs {
		if o.flat {
			if e.outs > 0 {
				e.jlen++
			}
			if dst, err = record.AppendMsgpack(dst, o.blocks[0]); err != nil {
				return dst, fmt.Errorf("encode %s body: %w", e.pv.format, err)
			}
			k, err := jsonLen(o.blocks[0])
			if err != nil {
				return dst, err
			}
			e.jlen += k
			e.walk(o.blocks[0])
			e.outs++
			e.reachedMsgpack(dst)
			continue
		}
		if o.cont == 0 {
			// A new message; the one before is closed.
			e.openAt = len(dst)
			dst = appendMsgHeader(dst, o.role, key, len(o.blocks))
			e.blocksAt = len(dst)
			if open {
				e.jlen += 2 // ]}
			}
			if e.outs > 0 {
				e.jlen++
			}
			r, err := jsonLen(o.role)
			if err != nil {
				return dst, err
			}
			e.jlen += len(`{"role":`) + r + 1 + len(key) + 2 + 2 // {"role":R,"key":[
			if e.pv.breakpoint && e.outs > 0 {
				e.st.nblk = append(e.st.nblk, int32(e.nblk)) // closed
			}
			e.outs++
			e.nblk = 0
			open = true
		}
		for _, b := range o.blocks {
			if e.nblk > 0 {
				e.jlen++
			}
			if dst, err = record.AppendMsgpack(dst, b); err != nil {
				return dst, fmt.Errorf("encode %s body: %w", e.pv.format, err)
			}
			k, err := jsonLen(b)
			if err != nil {
				return dst, err
			}
			e.jlen += k
			e.walk(b)
			if e.pv.breakpoint {
				if isThinking(b) {
					e.st.thinking = append(e.st.thinking, [2]int32{int32(e.outs - 1), int32(e.nblk)})
				}
			}
			e.nblk++
			e.reachedMsgpack(dst)
		}
	}
	if open {
		e.jlen += 2
	}
	if e.next != len(e.marks) {
		panic(fmt.Sprintf("render: %d checkpoints not reached", len(e.marks)-e.next))
	}
	e.jlen++ // ]
	return dst, nil
}

// messages writes the list's messages after the body so far (dst[start:]
// holds the members up to the checkpoint, its last message open), and
// closes the body.
func (e *encoder) messages(dst []byte, start int, l *outList) ([]byte, error) {
	key := e.pv.blocks
	open := e.outs > 0 && e.pv.blocks != ""
	e.reached(len(dst) - start)
	var err error
	for _, o := range l.msgs {
		if o.flat {
			if e.outs > 0 {
				dst = append(dst, ',')
			}
			if dst, err = record.AppendJSON(dst, o.blocks[0]); err != nil {
				return dst, fmt.Errorf("encode %s body: %w", e.pv.format, err)
			}
			e.walk(o.blocks[0])
			e.outs++
			e.reached(len(dst) - start)
			continue
		}
		if o.cont == 0 {
			// A new message; the one before is closed.
			if open {
				dst = append(dst, "]}"...)
			}
			if e.outs > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"role":`...)
			dst = record.AppendJSONString(dst, o.role)
			dst = append(dst, ',')
			dst = record.AppendJSONString(dst, key)
			dst = append(dst, ":["...)
			if e.pv.breakpoint && e.outs > 0 {
				e.st.nblk = append(e.st.nblk, int32(e.nblk)) // closed
			}
			e.outs++
			e.nblk = 0
			open = true
		}
		for _, b := range o.blocks {
			if e.nblk > 0 {
				dst = append(dst, ',')
			}
			if dst, err = record.AppendJSON(dst, b); err != nil {
				return dst, fmt.Errorf("encode %s body: %w", e.pv.format, err)
			}
			e.walk(b)
			if e.pv.breakpoint {
				if isThinking(b) {
					e.st.thinking = append(e.st.thinking, [2]int32{int32(e.outs - 1), int32(e.nblk)})
				}
			}
			e.nblk++
			e.reached(len(dst) - start)
		}
	}
	if open {
		dst = append(dst, "]}"...)
	}
	if e.next != len(e.marks) {
		panic(fmt.Sprintf("render: %d checkpoints not reached", len(e.marks)-e.next))
	}
	return append(dst, ']'), nil
}
