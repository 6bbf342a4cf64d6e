package render

import (
	"slices"
	"strconv"
	"sync/atomic"
	"weak"

	"github.com/ctxd/ctxd/pkg/record"
)

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
