package projection

import (
	"fmt"
	"strings"

	"github.com/ctxd/ctxd/pkg/record"
)

// Session is the incremental projection of one session: Apply takes the
// session's records in stream order and Result answers, at any moment,
// exactly what Build answers over every record applied so far.
//
// Apply costs time in proportion to the record, never to the history: it
// keeps, per tool-call id, where its first call and first result are, so
// pairing and screenshot trimming change only the messages they touch.
// Rendering re-renders only those messages and serves an unchanged view
// from cache.
//
// A Session is not safe for concurrent use; its owner serializes access.
type Session struct {
	browser map[string]bool
	seq     uint64 // last stream sequence applied or skipped

	entries []entry
	ids     map[string]int32 // index into idStates
	idSlab  []idState
	tools   map[string]string // tool names, interned

	// latest is the browser result with images that keeps them; every
	// other browser result with images is trimmed.
	latest        site
	browserImages int // image blocks in all browser results with images

	// unpaired lists the calls not paired when last looked at, in order;
	// never a provider-executed one, which is never removed.
	unpaired []pendingCall
	orphans  []OrphanResult

	version uint64 // bumped by every change to the view

	// The cached renderings: the message list and its JSON and msgpack
	// encodings, each rebuilt from the first entry that changed.
	list, json, msgpack cache
	dropped             *Dropped // nil when stale

	held      any // see Keep
	heldBytes int64

	// raws holds, for entries appended since the JSON rendering was last
	// built, their records' own JSON when it is the message's encoding
	// (ApplyJSON, ApplyShaped), in entry order; rawBytes is their length,
	// counted in msgBytes while they are held.
	raws     []rawJSON
	rawBytes int64
	// lazyBytes is the part of rawBytes that lazy entries' JSON holds.
	lazyBytes int64

	msgBytes int64 // the estimated size of the entries' messages held, and raws
	settled  int64 // msgBytes less lazyBytes when Apply last settled the session (shed.go)
	settling bool  // Apply is building the JSON rendering: nothing is handed out
}

type site struct{ entry, block int }

// rawJSON is the JSON encoding of entry's message msg, byte for byte.
// A lazy entry has no msg yet (see lazy.go); alone is standsAlone of its
// message.
type rawJSON struct {
	entry int
	msg   *record.Map
	b     []byte
	alone bool
}

var noSite = site{-1, -1}

func (a site) after(b site) bool {
	return a.entry > b.entry || (a.entry == b.entry && a.block > b.block)
}

// entry is one pass-1 message and its current rendering.
//
// A settled entry is packed: its message and rendering are let go, and
// its JSON encoding in the JSON cache is all that is kept of it (see
// pack). The calls and results keep only strings of their own, so that
// no decoded record is held through them.
type entry struct {
	seq     uint64
	msg     *record.Map
	calls   []call
	results []result
	out     *record.Map // the rendering; nil when the passes drop it or packed
	role    role        // msg's
	kept    bool        // the passes keep the message: out != nil, or packed
	stale   bool        // out must be recomputed
	packed  bool        // msg and out are let go; the JSON cache holds it
	lazy    bool        // msg and out are not decoded yet; raws holds its JSON (lazy.go)
	changed uint64      // the session version at which out last changed
	size    int64       // the estimated size of msg; 0 when packed or lazy
}

type idState struct {
	name                   string // the id, a copy held by nothing else
	firstCall, firstResult int    // entry indexes, -1 when none yet
	// moreCalls lists the entries after firstCall that held calls with
	// this id, other than provider-executed ones, while it was not yet
	// paired: pairing re-renders them all.
	moreCalls    []int32
	browser      bool   // some call with this id is a browser call
	imageResults []site // kept results with images
}

func (st *idState) paired() bool {
	return st.firstCall >= 0 && st.firstResult > st.firstCall
}

// pendingCall locates a call that was not paired when last looked at.
type pendingCall struct{ entry, call int32 }

// New returns an empty session projection.
func New(opt Options) *Session {
	s := &Session{browser: opt.browserSet()}
	s.reset()
	return s
}

func (s *Session) reset() {
	s.entries = nil
	s.raws, s.rawBytes, s.lazyBytes = nil, 0, 0
	s.msgBytes = 0
	s.settled = 0
	s.ids = map[string]int32{}
	s.idSlab = nil
	s.tools = nil
	s.latest = noSite
	s.browserImages = 0
	s.unpaired = nil
	s.orphans = nil
	s.version++
	s.list.reset()
	s.json.restart()
	s.msgpack.reset()
	s.dropped = nil
}

// Seq returns the stream sequence of the last record applied or skipped.
func (s *Session) Seq() uint64 { return s.seq }

// Len returns the number of pass-1 messages since the last checkpoint.
func (s *Session) Len() int { return len(s.entries) }

// Apply applies the record at stream sequence seq. A sequence at or below
// the last one applied is ignored, so a redelivered or replayed record is
// never applied twice; Apply reports whether it applied the record.
func (s *Session) Apply(seq uint64, v any) bool {
	return s.ApplyJSON(seq, v, nil)
}

// ApplyJSON is Apply for a record whose JSON encoding is raw:
// record.AppendJSON writes raw for v, byte for byte (as
// record.Decoder.DecodeCanonical reports). When the record passes through
// as its message, the session keeps raw until its JSON rendering is next
// built, and copies it there rather than encoding the message again: raw
// must not change. A nil raw is Apply.
func (s *Session) ApplyJSON(seq uint64, v any, raw []byte) bool {
	if seq <= s.seq {
		return false
	}
	s.seq = seq
	msg, snapshot, reset := classify(v)
	if reset {
		s.reset()
		for _, m := range snapshot {
			s.append(seq, m)
		}
		s.settle()
		return true
	}
	if msg != nil {
		s.append(seq, msg)
		if raw != nil && any(msg) == v {
			s.raws = append(s.raws, rawJSON{entry: len(s.entries) - 1, msg: msg, b: raw})
			s.rawBytes += int64(len(raw))
			s.msgBytes += int64(len(raw))
		}
		s.settle()
	}
	return true
}

// dropRaws lets go of the records' JSON once the JSON rendering is built,
// which packs every lazy entry; one that is not is materialized.
func (s *Session) dropRaws() {
	for _, r := range s.raws {
		s.materialize(r.entry)
	}
	clear(s.raws)
	s.raws = s.raws[:0]
	if cap(s.raws) > 256 {
		// Lazy entries settle once they are as long as the rendering
		// (shed.go): thousands of them, whose list Size no longer
		// counts once they are gone.
		s.raws = nil
	}
	s.msgBytes -= s.rawBytes
	s.rawBytes, s.lazyBytes = 0, 0
}

// Skip advances the session past a record that could not be decoded: the
// view stays the same, but Seq moves on. It reports whether seq was new.
func (s *Session) Skip(seq uint64) bool {
	if seq <= s.seq {
		return false
	}
	s.seq = seq
	return true
}

// id returns the state of a tool-call id, creating it; the pointer is
// valid until the next id is created.
func (s *Session) id(id string) *idState {
	if k, ok := s.ids[id]; ok {
		return &s.idSlab[k]
	}
	// A copy: the record's strings share blocks, and a key holding one
	// would hold the record's other strings after the entry is packed.
	id = strings.Clone(id)
	s.ids[id] = int32(len(s.idSlab))
	s.idSlab = append(s.idSlab, idState{name: id, firstCall: -1, firstResult: -1})
	return &s.idSlab[len(s.idSlab)-1]
}

// tool returns the session's copy of a tool name; see id.
func (s *Session) tool(name string) string {
	if name == "" {
		return ""
	}
	if t, ok := s.tools[name]; ok {
		return t
	}
	if s.tools == nil {
		s.tools = map[string]string{}
	}
	t := strings.Clone(name)
	s.tools[t] = t
	return t
}

// lookup returns the state of an id, or nil.
func (s *Session) lookup(id string) *idState {
	if k, ok := s.ids[id]; ok {
		return &s.idSlab[k]
	}
	return nil
}

// touch marks entry i for re-rendering.
func (s *Session) touch(i int) {
	s.version++
	s.unpack(i)
	e := &s.entries[i]
	e.stale = true
	e.changed = s.version
	s.list.dirty(i)
	s.json.dirty(i)
	s.msgpack.dirty(i)
	s.dropped = nil
}

// append adds one pass-1 message: the incremental passes 2 and 3.
func (s *Session) append(seq uint64, m *record.Map) {
	s.appendWith(seq, m, resultsOf(m), false)
}

// appendWith is append with the message's results given: Restore gives
// a trimmed screenshot result the image count of the message it was
// trimmed from. When lazy, m is the skeleton of a lazy entry's record,
// whose JSON raws holds (see lazy.go), read only until appendWith
// returns.
func (s *Session) appendWith(seq uint64, m *record.Map, results []result, lazy bool) {
	i := len(s.entries)
	s.version++
	s.entries = append(s.entries, entry{seq: seq, msg: m, role: roleKind(m), calls: callsOf(m), results: results, stale: true, changed: s.version})
	e := &s.entries[i]
	if lazy {
		e.msg, e.lazy = nil, true // m is read no more
	} else {
		e.size = sizeOf(m)
	}
	s.msgBytes += e.size
	s.dropped = nil

	for ci := range e.calls {
		c := &e.calls[ci]
		c.tool = s.tool(c.tool)
		if c.id == "" {
			if !c.provider {
				s.unpaired = append(s.unpaired, pendingCall{int32(i), int32(ci)})
			}
			continue
		}
		st := s.id(c.id)
		c.id = st.name
		if !st.paired() {
			if st.firstCall < 0 {
				// A provider-executed call pairs like any other.
				st.firstCall = i
			}
			// A provider-executed call stays in place whatever the
			// pairing: it is never reported, and pairing need not
			// re-render it.
			if !c.provider {
				s.unpaired = append(s.unpaired, pendingCall{int32(i), int32(ci)})
				if n := len(st.moreCalls); st.firstResult < 0 && st.firstCall != i && (n == 0 || st.moreCalls[n-1] != int32(i)) {
					st.moreCalls = append(st.moreCalls, int32(i))
				}
			}
		}
		if s.browser[c.tool] && !st.browser {
			// Results already seen for this id become browser results.
			st.browser = true
			for _, r := range st.imageResults {
				s.addBrowserImages(r, s.entries[r.entry].resultAt(r.block).images)
			}
		}
	}
	for ri := range e.results {
		r := &e.results[ri]
		if r.id == "" {
			s.orphans = append(s.orphans, OrphanResult{Seq: seq})
			continue
		}
		st := s.id(r.id)
		r.id = st.name
		if st.firstResult < 0 {
			st.firstResult = i
			if st.paired() {
				// The calls asked for this result: they stay from now on.
				s.touch(st.firstCall)
				for _, ci := range st.moreCalls {
					s.touch(int(ci))
				}
				st.moreCalls = nil
			}
		}
		if !st.paired() {
			s.orphans = append(s.orphans, OrphanResult{ID: r.id, Seq: seq})
			continue
		}
		if r.images > 0 {
			at := site{i, r.block}
			st.imageResults = append(st.imageResults, at)
			if st.browser {
				s.addBrowserImages(at, r.images)
			}
		}
	}
	if len(s.entries[i].calls) == 0 {
		// Rendered while the message is in the cache: without calls,
		// nothing but a later screenshot's trimming renders it again.
		// One with calls waits for their results.
		s.render(i)
	}
}

func (e *entry) resultAt(block int) result {
	for _, r := range e.results {
		if r.block == block {
			return r
		}
	}
	return result{}
}

// addBrowserImages records a kept browser result holding n images: the
// latest such result keeps its images, every earlier one is trimmed, and
// the message of a trimmed one lets go of its images (see shed).
func (s *Session) addBrowserImages(at site, n int) {
	s.browserImages += n
	if s.latest == noSite || at.after(s.latest) {
		old := s.latest
		s.latest = at
		if old != noSite {
			s.trim(old.entry)
		}
		s.touch(at.entry)
		return
	}
	s.trim(at.entry)
}

// trim marks entry i for re-rendering and lets go of the images of its
// trimmed results (see shed). A packed entry is decoded from the JSON
// cache without copying its long strings, a screenshot's base64 among
// them, since shed copies out what the entry keeps and the images go.
func (s *Session) trim(i int) {
	e := &s.entries[i]
	s.materialize(i) // its images are let go of below
	var shared *record.Map
	if e.packed {
		m, err := shareDecoder.Decode(s.jsonEntry(i))
		if err != nil {
			// See decodeJSONEntry.
			panic(fmt.Sprintf("projection: packed message from seq %d does not decode: %v", e.seq, err))
		}
		shared = m
		e.msg, e.out, e.packed = m, m, false
		e.size = sizeOf(m)
		s.msgBytes += e.size
	}
	s.touch(i)
	s.shed(i)
	if shared != nil && e.msg == shared {
		// Nothing was trimmed: the message must not point into the
		// cache's bytes, which a rebuild writes over.
		s.msgBytes -= e.size
		e.msg, e.out = detach(shared).(*record.Map), nil
		e.size = sizeOf(e.msg)
		s.msgBytes += e.size
	}
}

// paired reports whether an id is paired.
func (s *Session) paired(id string) bool {
	st := s.lookup(id)
	return st != nil && st.paired()
}

// render brings entry i's rendering up to date.
func (s *Session) render(i int) {
	e := &s.entries[i]
	if !e.stale || e.lazy && s.renderLazy(i) {
		return
	}
	e.stale = false
	e.out = rewrite(e.msg, e.role, e.calls, e.results,
		func(c call) bool { return s.paired(c.id) },
		func(r result) bool { return s.paired(r.id) },
		func(r result) bool { return s.trimmed(i, r) })
	e.kept = e.out != nil
}

// trimmed reports whether kept result r of entry i has its images
// replaced: a browser result that is not the latest.
func (s *Session) trimmed(i int, r result) bool {
	st := s.lookup(r.id)
	return st != nil && st.browser && (site{i, r.block}) != s.latest
}

// Dropped returns what the passes remove from the current view. The
// slices are shared with the cache: read them, don't modify them.
func (s *Session) Dropped() Dropped {
	if s.dropped != nil {
		return *s.dropped
	}
	d := Dropped{
		UnpairedCalls: []UnpairedCall{},
		OrphanResults: append([]OrphanResult{}, s.orphans...),
	}
	// A call once paired stays paired: forget it for good.
	kept := s.unpaired[:0]
	for _, p := range s.unpaired {
		e := &s.entries[p.entry]
		c := e.calls[p.call]
		if c.id != "" && s.paired(c.id) {
			continue
		}
		kept = append(kept, p)
		d.UnpairedCalls = append(d.UnpairedCalls, UnpairedCall{ID: c.id, Tool: c.tool, Seq: e.seq})
	}
	s.unpaired = kept
	if s.latest != noSite {
		d.ImagesOmitted = s.browserImages - s.entries[s.latest.entry].resultAt(s.latest.block).images
	}
	s.dropped = &d
	return d
}
