package projection

import (
	"bytes"
	"flag"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strconv"
	"testing"

	"github.com/ctxd/ctxd/pkg/record"
	"github.com/stretchr/testify/require"
)

// The property test runs equivN generated sessions, seeded equivBase,
// equivBase+1, ...; under -short it runs equivShortN unless -equiv.n is
// given. The seeds are fixed so that a run is reproducible; pass another
// -equiv.base to explore new sessions, and -equiv.seed to rerun the one
// session a failure names (seed 0 means none).
//
// Sessions are 5 to 60 records long, one in a hundred 100 to 250; one in
// three is a browsing session (sessiongen.Gen.Browsing), and every check
// also checks that no trimmed screenshot's image is held. Three
// in four short ones are compared with Build after every record; the
// rest now and then, with partial renderings between. The full run takes
// 15 to 30 seconds on two shared cores, -short under a second.
var (
	equivN    = flag.Int("equiv.n", 10000, "generated sessions TestSession_EquivalentToBuild checks")
	equivBase = flag.Uint64("equiv.base", 1, "seed of the first generated session")
	equivSeed = flag.Uint64("equiv.seed", 0, "check only the generated session with this seed")
)

const equivShortN = 300

// TestSession_EquivalentToBuild checks the contract of Session: after
// every record applied, its messages, dropped report and encodings equal
// Build over the records so far. Renderings are requested in random order
// and at random moments, several applies apart in some sessions, since
// incremental bugs hide in caches.
func TestSession_EquivalentToBuild(t *testing.T) {
	if *equivSeed != 0 {
		checkEquivalence(t, *equivSeed)
		return
	}
	n := *equivN
	if testing.Short() && !flagSet("equiv.n") {
		n = equivShortN
	}
	for i := range n {
		checkEquivalence(t, *equivBase+uint64(i))
		if t.Failed() {
			return
		}
	}
}

// TestSession_EquivalentToBuild_SettlingOften is the same check with
// sessions settling (shed.go) every 64 bytes instead of every 16 KiB, so
// that short generated sessions go through every way Apply builds the
// JSON rendering: after decoded messages, and after lazy ones, grown in
// one step.
func TestSession_EquivalentToBuild_SettlingOften(t *testing.T) {
	defer func(n int) { settleBytes = n }(settleBytes)
	settleBytes = 64
	n := *equivN / 10
	if testing.Short() && !flagSet("equiv.n") {
		n = equivShortN
	}
	for i := range n {
		checkEquivalence(t, *equivBase+uint64(i))
		if t.Failed() {
			t.Logf("settling every %d bytes", settleBytes)
			return
		}
	}
}

func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// heldView is a rendering handed out earlier, with a copy of what it
// said then: the session must never write it again.
type heldView struct {
	what string
	got  func() []byte // encodes the held rendering as it is now
	then []byte
}

// equivalence drives one generated session through a Session, checking
// it against Build.
type equivalence struct {
	t    *testing.T
	r    *rand.Rand
	opt  Options
	s    *Session
	recs []Record
	// want is Build over recs (nil Messages when not yet computed), with
	// its encodings (nil when not yet computed; wantMP stays nil when the
	// messages have no msgpack form).
	want           Result
	wantJSON       []byte
	wantMP         []byte
	wantMPComputed bool
	held           []heldView
}

func checkEquivalence(t *testing.T, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	g := newGen(r)
	e := &equivalence{t: t, r: r, opt: Options{BrowserTools: g.BrowserTools()}}
	e.s = New(e.opt)
	// Sessions are short, 5 to 60 records, so that thousands of them can
	// be checked after every record; one in a hundred is long, 100 to 250
	// records, and checked sparsely.
	long := r.IntN(100) == 0
	n := 5 + r.IntN(56)
	if long {
		n = 100 + r.IntN(151)
	}
	// One in three is a browsing session: screenshots, mostly.
	values := g.Session(n)
	if r.IntN(3) == 0 {
		values = g.Browsing(n)
	}
	before := encodeAll(t, values)
	defer func() {
		if t.Failed() {
			t.Logf("seed %d; rerun with: go test ./pkg/projection -run '^TestSession_EquivalentToBuild$' -equiv.seed=%d\noptions: %+v\nrecords (seq: value):\n%s",
				seed, seed, e.opt, recordLines(e.recs))
		}
	}()

	// Most sessions are compared after every record; the others only now
	// and then, with partial renderings between, so that the caches see
	// several changes at once.
	sparse := long || r.IntN(4) == 0
	var skipped []uint64
	shapes := shapeDecoder.ShapeReader(Shape)
	seq := uint64(0)
	for _, v := range values {
		seq += 1 + uint64(r.IntN(8)/7) // sequences may have gaps
		if r.IntN(12) == 0 {
			// A record that could not be decoded: the view stays the same.
			if !e.s.Skip(seq) || e.s.Seq() != seq || e.s.Skip(seq) {
				t.Fatalf("Skip(%d) twice: Seq %d", seq, e.s.Seq())
			}
			skipped = append(skipped, seq)
			e.maybeCheck(sparse)
			seq++
		}
		if r.IntN(12) == 0 {
			// A redelivered or replayed record is ignored.
			last := e.s.Seq()
			old := r.Uint64N(last + 1)
			if e.s.Apply(old, g.Record()) || e.s.Seq() != last {
				t.Fatalf("Apply(%d) after %d was applied: Seq %d", old, last, e.s.Seq())
			}
			e.maybeCheck(sparse)
		}
		// A third of the records come as a consumer decodes them, with
		// their canonical JSON (ApplyJSON), which the JSON rendering
		// copies; a third as its JSON alone, decoded to Shape
		// (ApplyShaped), which the session decodes only if it must.
		var raw []byte
		way := r.IntN(3)
		if way > 0 {
			v, raw = canonicalOf(t, v)
		}
		last := e.s.Seq()
		var applied bool
		// One reader for the session, as the store's: each skeleton is
		// built where the last one was.
		if skel, ok := shapes.Decode(raw); way == 2 && ok {
			applied = e.s.ApplyShaped(seq, skel, raw)
		} else {
			applied = e.s.ApplyJSON(seq, v, raw)
		}
		if !applied || e.s.Seq() != seq {
			t.Fatalf("Apply(%d) after %d was ignored: Seq %d", seq, last, e.s.Seq())
		}
		if msg := rawsWrongly(e.s); msg != "" {
			t.Fatalf("after seq %d: %s", seq, msg)
		}
		e.recs = append(e.recs, Record{Seq: seq, Value: v})
		e.invalidate()
		e.maybeCheck(sparse)
	}
	e.checkAll()

	// Applying everything again changes nothing.
	for _, rec := range e.recs {
		require.False(t, e.s.Apply(rec.Seq, rec.Value), "Apply(%d) again", rec.Seq)
	}
	for _, sq := range skipped {
		require.False(t, e.s.Skip(sq), "Skip(%d) again", sq)
	}
	e.checkAll()

	// Renderings handed out earlier still say what they said.
	for _, h := range e.held {
		require.Equal(t, string(h.then), string(h.got()), "a held %s changed", h.what)
	}

	// A fresh session fed the same records, rendered only at the end, gives
	// the same bytes.
	replay := New(e.opt)
	next := 0
	for _, rec := range e.recs {
		for next < len(skipped) && skipped[next] < rec.Seq {
			replay.Skip(skipped[next])
			next++
		}
		replay.Apply(rec.Seq, rec.Value)
		// Never read, it holds no trimmed screenshot's images either.
		if msg := heldWrongly(replay); msg != "" {
			t.Fatalf("replay, unread, after seq %d: %s", rec.Seq, msg)
		}
	}
	for _, sq := range skipped[next:] {
		replay.Skip(sq)
	}
	require.Equal(t, e.s.Seq(), replay.Seq(), "replay: Seq")
	require.Equal(t, string(e.s.AppendJSON(nil)), string(replay.AppendJSON(nil)), "replay: JSON")
	require.Equal(t, e.s.AppendMsgpack(nil), replay.AppendMsgpack(nil), "replay: msgpack")
	require.Equal(t, e.s.Dropped(), replay.Dropped(), "replay: dropped")
	requireMessages(t, e.s.Messages(), replay.Messages(), "replay: messages")

	// Neither Build nor Session changes the records.
	require.Equal(t, before, encodeAll(t, values), "records were modified")
}

// canonicalOf returns a record as a consumer decodes it from its
// canonical JSON, and that JSON; a value that is not a map with a JSON
// form comes back as it is, without JSON.
func canonicalOf(t *testing.T, v any) (any, []byte) {
	js, err := record.MarshalJSON(v)
	if err != nil {
		return v, nil
	}
	m, canonical, err := record.Decoder{ShareInput: true}.DecodeCanonical(js)
	if err != nil {
		return v, nil // not a map
	}
	require.True(t, canonical, "the encoding %s is not canonical", js)
	return m, js
}

// invalidate forgets what Build answered: a record was applied.
func (e *equivalence) invalidate() {
	e.want, e.wantJSON, e.wantMP, e.wantMPComputed = Result{}, nil, nil, false
}

// expected returns Build over the records so far, computing it once per
// prefix.
func (e *equivalence) expected() Result {
	if e.want.Messages == nil {
		e.want = Build(e.recs, e.opt)
	}
	return e.want
}

// expectedJSON returns the JSON encoding of Build's messages.
func (e *equivalence) expectedJSON() []byte {
	if e.wantJSON == nil {
		e.wantJSON = mustJSON(e.t, e.expected().Messages)
	}
	return e.wantJSON
}

// expectedMsgpack returns the msgpack encoding of Build's messages; ok is
// false when they have none (a JSON number beyond float64).
func (e *equivalence) expectedMsgpack() (b []byte, ok bool) {
	if !e.wantMPComputed {
		b, err := record.MarshalMsgpack(e.expected().Messages)
		if err != nil {
			require.ErrorIs(e.t, err, record.ErrUnsupported)
			b = nil
		}
		e.wantMP, e.wantMPComputed = b, true
	}
	return e.wantMP, e.wantMP != nil
}

// maybeCheck compares the session with Build after a step: always, or in
// a sparse session now and then, with a partial rendering in between.
func (e *equivalence) maybeCheck(sparse bool) {
	if !sparse {
		e.checkAll()
		return
	}
	switch n := e.r.IntN(6); {
	case n == 0:
		e.checkAll()
	case n <= 2:
		e.checkOne(e.r.IntN(len(renderings)))
	}
}

// checkAll compares every rendering, in random order, and checks what
// the session holds.
func (e *equivalence) checkAll() {
	for _, i := range e.r.Perm(len(renderings)) {
		e.checkOne(i)
	}
	if msg := heldWrongly(e.s); msg != "" {
		e.t.Fatal(msg)
	}
}

// rawsWrongly says how a session's records' JSON (raws) disagrees with
// what it counts of them: every lazy entry has its JSON, rawBytes is
// their length, and lazyBytes the length of the lazy entries' alone,
// which decides when they settle (shed.go).
func rawsWrongly(s *Session) string {
	var all, lazy int64
	held := map[int]bool{}
	for k, r := range s.raws {
		if k > 0 && r.entry <= s.raws[k-1].entry {
			return fmt.Sprintf("raws out of entry order at %d", k)
		}
		held[r.entry] = true
		all += int64(len(r.b))
		if s.entries[r.entry].lazy {
			lazy += int64(len(r.b))
		}
	}
	for i := range s.entries {
		if s.entries[i].lazy && !held[i] {
			return fmt.Sprintf("lazy entry %d has no JSON", i)
		}
	}
	if all != s.rawBytes || lazy != s.lazyBytes {
		return fmt.Sprintf("records' JSON counted at %d bytes, %d of them lazy; hold %d, %d lazy", s.rawBytes, s.lazyBytes, all, lazy)
	}
	return ""
}

// heldWrongly says what a session holds that it should not: an image of
// a result the passes trim (it can never come back into the context), or
// a size that is not the sum of its messages' sizes; "" when nothing.
func heldWrongly(s *Session) string {
	var sum int64
	for i := range s.entries {
		e := &s.entries[i]
		if e.packed != (e.msg == nil) {
			return fmt.Sprintf("entry %d (seq %d): packed %v with a message %v", i, e.seq, e.packed, e.msg != nil)
		}
		if e.msg == nil {
			if e.size != 0 {
				return fmt.Sprintf("entry %d (seq %d): packed, counted at %d bytes", i, e.seq, e.size)
			}
			continue
		}
		if got := sizeOf(e.msg); got != e.size {
			return fmt.Sprintf("entry %d (seq %d): counted at %d bytes, holds %d", i, e.seq, e.size, got)
		}
		sum += e.size
		// The rendering is made from the message: Build checks it.
		for _, r := range resultsOf(e.msg) {
			if r.images > 0 && s.paired(r.id) && s.trimmed(i, r) {
				return fmt.Sprintf("entry %d (seq %d): holds %d images of trimmed result %q", i, e.seq, r.images, r.id)
			}
		}
	}
	if sum != s.msgBytes {
		return fmt.Sprintf("messages counted at %d bytes, hold %d", s.msgBytes, sum)
	}
	return ""
}

// renderings are the ways a session can be read, each checked against
// Build.
var renderings = []func(e *equivalence){
	(*equivalence).checkMessages,
	(*equivalence).checkDropped,
	(*equivalence).checkResult,
	(*equivalence).checkAppendJSON,
	(*equivalence).checkJSONBody,
	(*equivalence).checkAppendMsgpack,
	(*equivalence).checkMsgpackBody,
}

func (e *equivalence) checkOne(i int) { renderings[i](e) }

func (e *equivalence) hold(what string, got func() []byte) {
	if e.r.IntN(8) == 0 {
		e.held = append(e.held, heldView{what: what, got: got, then: bytes.Clone(got())})
	}
}

// The checks compare first and call require only on a difference: they
// run after every record of thousands of sessions, and require's helpers
// walk the stack on every call.

func (e *equivalence) checkMessages() {
	want := e.expected()
	got := e.s.Messages()
	if !record.Equal(want.Messages, got) {
		requireMessages(e.t, want.Messages, got, "Messages")
	}
	e.hold("Messages", func() []byte { return mustJSON(e.t, got) })
}

func (e *equivalence) checkDropped() {
	if want, got := e.expected().Dropped, e.s.Dropped(); !reflect.DeepEqual(want, got) {
		require.Equal(e.t, want, got, "Dropped")
	}
}

func (e *equivalence) checkResult() {
	want := e.expected()
	got := e.s.Result()
	if !record.Equal(want.Messages, got.Messages) {
		requireMessages(e.t, want.Messages, got.Messages, "Result")
	}
	if !reflect.DeepEqual(want.Dropped, got.Dropped) {
		require.Equal(e.t, want.Dropped, got.Dropped, "Result")
	}
}

func (e *equivalence) checkAppendJSON() {
	want := append([]byte("prefix"), e.expectedJSON()...)
	if got := e.s.AppendJSON([]byte("prefix")); !bytes.Equal(want, got) {
		require.Equal(e.t, string(want), string(got), "AppendJSON")
	}
}

func (e *equivalence) checkJSONBody() {
	want := e.expectedJSON()
	body, n := e.s.JSONBody()
	if got := append(append([]byte("["), body...), ']'); !bytes.Equal(want, got) {
		require.Equal(e.t, string(want), string(got), "JSONBody")
	}
	if len(e.expected().Messages) != n {
		require.Equal(e.t, len(e.expected().Messages), n, "JSONBody count")
	}
	e.hold("JSONBody", func() []byte { return body })
}

func (e *equivalence) checkAppendMsgpack() {
	want, ok := e.expectedMsgpack()
	got := e.s.AppendMsgpack([]byte("prefix"))
	if !ok {
		// No msgpack form: nothing is appended.
		want = nil
	}
	if want = append([]byte("prefix"), want...); !bytes.Equal(want, got) {
		require.Equal(e.t, want, got, "AppendMsgpack")
	}
}

func (e *equivalence) checkMsgpackBody() {
	want, ok := e.expectedMsgpack()
	body, n, err := e.s.MsgpackBody()
	wantN := len(e.expected().Messages)
	if ok {
		if err != nil {
			require.NoError(e.t, err, "MsgpackBody")
		}
	} else {
		// No msgpack form: an error, and a body of the messages that have
		// one.
		require.ErrorIs(e.t, err, record.ErrUnsupported, "MsgpackBody without a msgpack form")
		var encodable []any
		for _, m := range e.expected().Messages {
			if _, err := record.MarshalMsgpack(m); err == nil {
				encodable = append(encodable, m)
			}
		}
		wantN = len(encodable)
		want, err = record.MarshalMsgpack(append([]any{}, encodable...))
		require.NoError(e.t, err)
	}
	if got := append(record.AppendMsgpackArrayLen(nil, n), body...); !bytes.Equal(want, got) {
		require.Equal(e.t, want, got, "MsgpackBody")
	}
	if wantN != n {
		require.Equal(e.t, wantN, n, "MsgpackBody count")
	}
	e.hold("MsgpackBody", func() []byte { return body })
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := record.MarshalJSON(v)
	require.NoError(t, err)
	return b
}

// encodeAll encodes records to compare them before and after use.
func encodeAll(t testing.TB, values []any) []byte {
	t.Helper()
	var b []byte
	for _, v := range values {
		b = append(append(b, mustJSON(t, v)...), '\n')
	}
	return b
}

// recordLines prints records one a line, to reproduce a failure by hand
// or to turn it into a fixture.
func recordLines(recs []Record) string {
	var b []byte
	for _, r := range recs {
		b = strconv.AppendUint(b, r.Seq, 10)
		b = append(b, ": "...)
		line, err := record.MarshalJSON(r.Value)
		if err != nil {
			line = []byte(err.Error())
		}
		b = append(b, line...)
		b = append(b, '\n')
	}
	return string(b)
}
