package render

import (
	"fmt"
	"slices"
	"sort"
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
