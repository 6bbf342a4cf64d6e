package projection

import (
	"bytes"
	"encoding/binary"
	"flag"
	"fmt"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/internal/workload"
	"github.com/ctxd/ctxd/pkg/record"
	"github.com/stretchr/testify/require"
)

// The snapshot property test runs snapN generated sessions (snapShortN
// under -short unless -snap.n is given), seeded as the equivalence test's
// are; -snap.seed reruns the one a failure names.
var (
	snapN    = flag.Int("snap.n", 500, "generated sessions TestSnapshot_RestoresTheSession checks")
	snapSeed = flag.Uint64("snap.seed", 0, "check only the generated session with this seed")
)

const snapShortN = 100

// snapStep is one step of a generated session: a record applied, or a
// sequence skipped.
type snapStep struct {
	seq   uint64
	value any
	skip  bool
}

// snapCoverage counts the snapshots taken of sessions in each state the
// format must carry; the property test requires every one.
type snapCoverage struct {
	packed, trimmedStored, shed, unpaired, orphans, provider, compaction, skipped, empty int
}

// TestSnapshot_RestoresTheSession checks Restore's contract on generated
// sessions: a session snapshotted at any point and restored answers every
// rendering as the session it was taken of, then and after every later
// record, and as Build does; so does a restore of a restored session.
// Sessions are rendered at random moments, so that snapshots are taken
// with entries packed, some of them trimmed screenshots, and with caches
// half stale.
func TestSnapshot_RestoresTheSession(t *testing.T) {
	var cov snapCoverage
	if *snapSeed != 0 {
		checkSnapshots(t, *snapSeed, &cov)
		return
	}
	n := *snapN
	if testing.Short() && !flagSet("snap.n") {
		n = snapShortN
	}
	for i := range n {
		checkSnapshots(t, *equivBase+uint64(i), &cov)
		if t.Failed() {
			return
		}
	}
	t.Logf("snapshots taken with: %+v", cov)
	v := reflect.ValueOf(cov)
	for i := range v.NumField() {
		require.NotZero(t, v.Field(i).Int(), "no snapshot was taken of a session with %s", v.Type().Field(i).Name)
	}
}

// tracked is a session under test with what it last answered, to check
// that its Version changes whenever its view does.
type tracked struct {
	s       *Session
	name    string
	version uint64
	view    string
}

func checkSnapshots(t *testing.T, seed uint64, cov *snapCoverage) {
	r := rand.New(rand.NewPCG(seed, 0x3c6ef372fe94f82b))
	g := newGen(r)
	opt := Options{BrowserTools: g.BrowserTools()}
	n := 5 + r.IntN(56)
	if r.IntN(50) == 0 {
		n = 100 + r.IntN(151)
	}
	values := g.Session(n)
	if r.IntN(3) == 0 {
		values = g.Browsing(n) // screenshots, mostly
	}
	var steps []snapStep
	seq := uint64(0)
	for _, v := range values {
		seq += 1 + uint64(r.IntN(8)/7)
		if r.IntN(12) == 0 {
			steps = append(steps, snapStep{seq: seq, skip: true})
			seq++
		}
		steps = append(steps, snapStep{seq: seq, value: v})
	}
	var recs []Record
	defer func() {
		if t.Failed() {
			t.Logf("seed %d; rerun with: go test ./pkg/projection -run '^TestSnapshot_RestoresTheSession$' -snap.seed=%d\noptions: %+v\nrecords (seq: value):\n%s",
				seed, seed, opt, recordLines(recs))
		}
	}()

	live := &tracked{s: New(opt), name: "live"}
	sessions := []*tracked{live}
	skips, compactions := 0, 0
	snapshot := func(src *tracked, at int) {
		var prefix []byte
		if r.IntN(2) == 0 {
			prefix = []byte("prefix")
		}
		cov.count(src.s, skips, compactions)
		data := src.s.AppendSnapshot(bytes.Clone(prefix))
		require.Equal(t, string(prefix), string(data[:len(prefix)]), "AppendSnapshot appends")
		data = data[len(prefix):]
		rs, err := Restore(opt, data)
		require.NoError(t, err, "Restore of a snapshot of %s after step %d", src.name, at)
		require.NotZero(t, rs.Version(), "a restored session's Version")
		restored := &tracked{s: rs, name: fmt.Sprintf("%s restored after step %d", src.name, at)}
		compareSessions(t, r, live, restored)
		if len(sessions) < 4 {
			sessions = append(sessions, restored)
		} else {
			sessions[1+r.IntN(len(sessions)-1)] = restored
		}
	}
	for at, st := range steps {
		for _, ts := range sessions {
			if st.skip {
				require.True(t, ts.s.Skip(st.seq), "%s: Skip(%d)", ts.name, st.seq)
			} else {
				require.True(t, ts.s.Apply(st.seq, st.value), "%s: Apply(%d)", ts.name, st.seq)
			}
		}
		if st.skip {
			skips++
		} else {
			recs = append(recs, Record{Seq: st.seq, Value: st.value})
			if _, _, reset := classify(st.value); reset {
				compactions++
			}
		}
		// Render some sessions, so that entries settle.
		for _, ts := range sessions {
			if r.IntN(3) == 0 {
				renderOne(r, ts.s)
			}
		}
		if r.IntN(6) == 0 {
			snapshot(sessions[r.IntN(len(sessions))], at)
		}
		if r.IntN(4) == 0 {
			compareSessions(t, r, live, sessions[r.IntN(len(sessions))])
		}
	}
	snapshot(sessions[r.IntN(len(sessions))], len(steps))
	for _, ts := range sessions {
		compareSessions(t, r, live, ts)
		e := &equivalence{t: t, r: r, opt: opt, s: ts.s, recs: recs}
		e.checkAll()
	}
}

// count notes the states a session is in when its snapshot is taken.
func (c *snapCoverage) count(s *Session, skips, compactions int) {
	has := func(f func(i int, e *entry) bool) bool {
		for i := range s.entries {
			if f(i, &s.entries[i]) {
				return true
			}
		}
		return false
	}
	add := func(n *int, ok bool) {
		if ok {
			*n++
		}
	}
	add(&c.packed, has(func(_ int, e *entry) bool { return e.packed }))
	add(&c.trimmedStored, has(func(i int, e *entry) bool { return e.packed && len(s.storedTrimmed(i)) > 0 }))
	// A screenshot trimmed while not packed: its message let go of its images.
	add(&c.shed, has(func(i int, e *entry) bool { return !e.packed && len(s.storedTrimmed(i)) > 0 }))
	add(&c.unpaired, len(s.unpaired) > 0)
	add(&c.orphans, len(s.orphans) > 0)
	add(&c.provider, has(func(_ int, e *entry) bool {
		for _, c := range e.calls {
			if c.provider {
				return true
			}
		}
		return false
	}))
	add(&c.compaction, compactions > 0 && len(s.entries) > 0)
	add(&c.skipped, skips > 0)
	add(&c.empty, len(s.entries) == 0)
}

// renderOne asks a session for one of its renderings.
func renderOne(r *rand.Rand, s *Session) {
	switch r.IntN(4) {
	case 0:
		s.Messages()
	case 1:
		s.JSONBody()
	case 2:
		s.MsgpackBody()
	case 3:
		s.Dropped()
	}
}

// compareSessions requires that got answers every rendering as want
// does, asked in random order, and that got's Version changed if its
// view did since it was last compared.
func compareSessions(t *testing.T, r *rand.Rand, want, got *tracked) {
	t.Helper()
	require.Equal(t, want.s.Seq(), got.s.Seq(), "%s: Seq", got.name)
	require.Equal(t, want.s.Len(), got.s.Len(), "%s: Len", got.name)
	checks := []func(){
		func() {
			// The same values of the same Go types: a renderer may tell
			// an int64 from a float64 where record.Equal does not. (Up to
			// what a JSON decoder makes of a uint64 or a Number, as
			// packing is.)
			if w, g := want.s.Messages(), got.s.Messages(); !reflect.DeepEqual(decoded(w), decoded(g)) {
				requireMessages(t, w, g, got.name+": Messages")
				for i := range w {
					if !reflect.DeepEqual(decoded(w[i]), decoded(g[i])) {
						t.Fatalf("%s: message %d equal in value, not in type:\nwant %s\n got %s", got.name, i, typed(w[i]), typed(g[i]))
					}
				}
			}
		},
		func() { require.Equal(t, want.s.Dropped(), got.s.Dropped(), "%s: Dropped", got.name) },
		func() {
			require.Equal(t, string(want.s.AppendJSON(nil)), string(got.s.AppendJSON(nil)), "%s: AppendJSON", got.name)
		},
		func() {
			wb, wn := want.s.JSONBody()
			gb, gn := got.s.JSONBody()
			require.Equal(t, string(wb), string(gb), "%s: JSONBody", got.name)
			require.Equal(t, wn, gn, "%s: JSONBody count", got.name)
		},
		func() {
			wb, wn, werr := want.s.MsgpackBody()
			gb, gn, gerr := got.s.MsgpackBody()
			require.Equal(t, wb, gb, "%s: MsgpackBody", got.name)
			require.Equal(t, wn, gn, "%s: MsgpackBody count", got.name)
			require.Equal(t, fmt.Sprint(werr), fmt.Sprint(gerr), "%s: MsgpackBody error", got.name)
		},
		func() {
			require.Equal(t, want.s.AppendMsgpack(nil), got.s.AppendMsgpack(nil), "%s: AppendMsgpack", got.name)
		},
		func() {
			require.Equal(t, want.s.MessageSeqs(nil), got.s.MessageSeqs(nil), "%s: MessageSeqs", got.name)
		},
	}
	for _, i := range r.Perm(len(checks)) {
		checks[i]()
	}
	d, err := record.MarshalJSON(got.s.Dropped().Map())
	require.NoError(t, err)
	view := string(got.s.AppendJSON(nil)) + string(d)
	v := got.s.Version()
	require.NotZero(t, v, "%s: Version", got.name)
	if got.version != 0 && v == got.version {
		require.Equal(t, got.view, view, "%s: the view changed, Version %d did not", got.name, v)
	}
	got.version, got.view = v, view
}

// TestSnapshot_Options checks that a snapshot is restored only with
// options that project as the session's did.
func TestSnapshot_Options(t *testing.T) {
	s := New(Options{BrowserTools: []string{"shot", "browser_use"}})
	s.Apply(1, record.NewMap("role", "user", "content", "hi"))
	data := s.AppendSnapshot(nil)

	_, err := Restore(Options{BrowserTools: []string{"browser_use", "shot", "shot"}}, data)
	require.NoError(t, err, "the same tools, in another order")
	for _, opt := range []Options{{}, {BrowserTools: []string{}}, {BrowserTools: []string{"shot"}}, {BrowserTools: []string{"shot", "browser_use", "x"}}} {
		_, err := Restore(opt, data)
		require.ErrorIs(t, err, ErrSnapshot, "options %+v", opt)
		require.ErrorContains(t, err, "browser tools", "options %+v", opt)
	}

	// nil means the defaults: a session made with them listed is the same.
	d := New(Options{}).AppendSnapshot(nil)
	_, err = Restore(Options{BrowserTools: DefaultBrowserTools}, d)
	require.NoError(t, err)
}

// snapBuilder writes snapshots by hand, for the malformed-input tests.
type snapBuilder struct{ b []byte }

func newSnap(tools ...string) *snapBuilder {
	b := &snapBuilder{b: append([]byte(snapshotMagic), snapshotVersion)}
	b.uv(uint64(len(tools)))
	for _, n := range tools {
		b.uv(uint64(len(n)))
		b.b = append(b.b, n...)
	}
	return b
}

func (b *snapBuilder) uv(v uint64) *snapBuilder {
	b.b = binary.AppendUvarint(b.b, v)
	return b
}

func (b *snapBuilder) raw(p ...byte) *snapBuilder {
	b.b = append(b.b, p...)
	return b
}

// entry appends an entry: sequence delta, form and message bytes, and
// trimmed results as index, count pairs.
func (b *snapBuilder) entry(delta uint64, form byte, msg []byte, trimmed ...uint64) *snapBuilder {
	b.uv(delta).raw(form)
	b.b = binary.BigEndian.AppendUint32(b.b, uint32(len(msg)))
	b.b = append(b.b, msg...)
	b.uv(uint64(len(trimmed) / 2))
	for _, v := range trimmed {
		b.uv(v)
	}
	return b
}

// done appends the checksum.
func (b *snapBuilder) done() []byte {
	return binary.BigEndian.AppendUint32(bytes.Clone(b.b), crc32.Checksum(b.b, castagnoli))
}

func valueBytes(v any) []byte { return record.AppendBinary(nil, v) }

// TestRestore_Malformed checks that Restore refuses, with an error that
// says what is wrong, every kind of bytes that is not a snapshot of this
// format and session.
func TestRestore_Malformed(t *testing.T) {
	user := record.NewMap("role", "user", "content", "hi")
	call := func(id string) *record.Map {
		return record.NewMap("role", "assistant", "content", []any{record.NewMap("type", "toolCall", "id", id, "name", "browser_use")})
	}
	omitted := []any{textBlock(OmittedImageText)}
	image := []any{record.NewMap("type", "image", "data", "AAAA")}
	result := func(id string, content []any) *record.Map {
		return record.NewMap("role", "toolResult", "toolCallId", id, "content", content)
	}
	good := newSnap("browser_use").uv(3).uv(1).entry(1, formValue, valueBytes(user)).done()
	_, err := Restore(Options{}, good)
	require.NoError(t, err, "the well-formed base")

	deep := []byte{}
	for range snapshotMaxDepth + 1 {
		deep = append(deep, tagArray, 1)
	}
	deep = append(deep, tagNil)
	deepMsg := append(append(valueBytes(record.NewMap("role", "user"))[:0:0], tagMap, 2), 4)
	deepMsg = append(deepMsg, "role"...)
	deepMsg = append(deepMsg, valueBytes("user")...)
	deepMsg = append(append(deepMsg, 7), "content"...)
	deepMsg = append(deepMsg, deep...)

	withTrailing := func(b []byte) []byte { return newSnap("browser_use").uv(3).uv(1).entry(1, formValue, b).done() }
	mapOf := func(parts ...[]byte) []byte {
		return append([]byte{tagMap}, bytes.Join(parts, nil)...)
	}
	str := func(s string) []byte { return append(binary.AppendUvarint(nil, uint64(len(s))), s...) }
	role := append(str("role"), valueBytes("user")...)

	for _, tc := range []struct {
		name, want string
		data       []byte
	}{
		{"empty", "shorter than any snapshot", nil},
		{"short", "shorter than any snapshot", []byte(snapshotMagic)},
		{"wrong magic", "no snapshot magic", append([]byte("ctxd\x00xxx\x01"), 0, 0, 0, 0, 0, 0)},
		{"json", "no snapshot magic", []byte(`{"role":"user","content":"hi"}`)},
		{"wrong version", "format version 2", func() []byte {
			b := bytes.Clone(good)
			b[len(snapshotMagic)] = 2
			return b
		}()},
		{"checksum", "checksum", func() []byte {
			b := bytes.Clone(good)
			b[len(b)-6] ^= 1
			return b
		}()},
		{"truncated", "checksum", good[:len(good)-1]},
		{"trailing bytes", "1 bytes after the last entry", newSnap("browser_use").uv(3).uv(1).entry(1, formValue, valueBytes(user)).raw(0).done()},
		{"other options", "browser tools", newSnap("x").uv(3).uv(0).done()},
		{"tool count beyond the bytes", "browser tool count", (&snapBuilder{b: append([]byte(snapshotMagic), snapshotVersion, 0x7f)}).done()},
		{"entry count beyond the bytes", "entry count: 1000", newSnap("browser_use").uv(3).uv(1000).done()},
		{"huge entry count", "entry count", newSnap("browser_use").uv(3).uv(math.MaxUint64).done()},
		{"varint overflow", "overflows", newSnap("browser_use").raw(0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01).uv(0).done()},
		{"entry sequence 0", "entry 0: sequence 0", newSnap("browser_use").uv(3).uv(1).entry(0, formValue, valueBytes(user)).done()},
		{"entry after the session", "sequence 4 after the session's 3", newSnap("browser_use").uv(3).uv(1).entry(4, formValue, valueBytes(user)).done()},
		{"sequence repeated", "sequence 2 again", newSnap("browser_use").uv(3).uv(3).
			entry(1, formValue, valueBytes(user)).entry(1, formValue, valueBytes(user)).entry(0, formValue, valueBytes(user)).done()},
		{"sequence overflows", "sequence overflows", newSnap("browser_use").uv(math.MaxUint64).uv(2).
			entry(5, formValue, valueBytes(user)).entry(math.MaxUint64, formValue, valueBytes(user)).done()},
		{"unknown form", "form 3", newSnap("browser_use").uv(3).uv(1).entry(1, 3, valueBytes(user)).done()},
		{"message length beyond the bytes", "message: 1000 bytes", newSnap("browser_use").uv(3).uv(1).uv(1).raw(formValue, 0, 0, 0x03, 0xe8, tagNil, 0, 0, 0, 0, 0, 0).done()},
		{"message not a map", "message is array, not a map", withTrailing(valueBytes([]any{}))},
		{"message nil", "not a map", withTrailing(valueBytes(nil))},
		{"json message not a map", "message is array, not a map", newSnap("browser_use").uv(3).uv(1).entry(1, formJSON, []byte(`[1]`)).done()},
		{"json message msgpack", "json", newSnap("browser_use").uv(3).uv(1).entry(1, formJSON, []byte{0x81, 0xa4, 'r', 'o', 'l', 'e', 0xa4, 'u', 's', 'e', 'r'}).done()},
		{"json message bad", "json", newSnap("browser_use").uv(3).uv(1).entry(1, formJSON, []byte(`{"role":`)).done()},
		{"message pass 1 drops", "not a message pass 1 keeps", withTrailing(valueBytes(record.NewMap("role", "custom", "content", "x")))},
		{"context row", "not a message pass 1 keeps", withTrailing(valueBytes(record.NewMap("kind", "context", "role", "user")))},
		{"bytes after the message", "1 bytes after the message", withTrailing(append(valueBytes(user), tagNil))},
		{"unknown tag", "unknown tag 10", withTrailing(mapOf([]byte{1}, role[:len(role)-len(valueBytes("user"))], []byte{10}))},
		{"truncated value", "truncated float", withTrailing(mapOf([]byte{1}, str("role"), []byte{tagFloat, 1, 2}))},
		{"count beyond the bytes", "items", withTrailing(mapOf([]byte{2}, role))},
		{"map count beyond the bytes", "items", withTrailing(mapOf([]byte{100}, role))},
		{"array count beyond the bytes", "items", withTrailing(mapOf([]byte{2}, role, str("content"), []byte{tagArray, 100, tagNil}))},
		{"invalid UTF-8", "invalid UTF-8", withTrailing(mapOf([]byte{1}, str("role"), []byte{tagString}, str("us\xffr")))},
		{"invalid UTF-8 key", "invalid UTF-8", withTrailing(mapOf([]byte{1}, str("ro\xffe"), valueBytes("user")))},
		{"NaN", "non-finite", withTrailing(mapOf([]byte{2}, role, str("x"), binary.BigEndian.AppendUint64([]byte{tagFloat}, math.Float64bits(math.NaN()))))},
		{"infinity", "non-finite", withTrailing(mapOf([]byte{2}, role, str("x"), binary.BigEndian.AppendUint64([]byte{tagFloat}, math.Float64bits(math.Inf(1)))))},
		{"invalid number", "invalid number literal", withTrailing(mapOf([]byte{2}, role, str("x"), []byte{tagNumber}, str("1x")))},
		{"repeated key", `key "role" repeated`, withTrailing(mapOf([]byte{2}, role, role))},
		{"too deep", "nested deeper than", withTrailing(deepMsg)},
		{"trimmed index beyond the results", "trimmed result 1 of 1", newSnap("browser_use").uv(3).uv(2).
			entry(1, formValue, valueBytes(call("a"))).entry(1, formValue, valueBytes(result("a", omitted)), 1, 1).done()},
		{"trimmed results out of order", "trimmed result 0 of 2, after 0", newSnap("browser_use").uv(3).uv(1).
			entry(1, formValue, valueBytes(record.NewMap("role", "user", "content", []any{
				record.NewMap("type", "tool_result", "tool_use_id", "a", "content", omitted),
				record.NewMap("type", "tool_result", "tool_use_id", "b", "content", omitted)})), 0, 1, 0, 1).done()},
		{"trimmed of more images than notices", "trimmed of 2 images, but it holds 0 images and 1 omission notices", newSnap("browser_use").uv(3).uv(2).
			entry(1, formValue, valueBytes(call("a"))).entry(1, formValue, valueBytes(result("a", omitted)), 0, 2).done()},
		{"trimmed but holding images", "holds 1 images", newSnap("browser_use").uv(3).uv(2).
			entry(1, formValue, valueBytes(call("a"))).entry(1, formValue, valueBytes(result("a", append(image, omitted...))), 0, 1).done()},
		{"trimmed of no images", "trimmed of 0 images", newSnap("browser_use").uv(3).uv(2).
			entry(1, formValue, valueBytes(call("a"))).entry(1, formValue, valueBytes(result("a", omitted)), 0, 0).done()},
		{"trimmed, but the latest screenshot", "stored trimmed, but the session keeps its images", newSnap("browser_use").uv(3).uv(2).
			entry(1, formValue, valueBytes(call("a"))).entry(1, formValue, valueBytes(result("a", omitted)), 0, 1).done()},
		{"trimmed, but not a browser result", "stored trimmed, but the session keeps its images", newSnap().uv(3).uv(2).
			entry(1, formValue, valueBytes(call("a"))).entry(1, formValue, valueBytes(result("a", omitted)), 0, 1).done()},
		{"trimmed, but an orphan", "stored trimmed, but the session keeps its images", newSnap("browser_use").uv(3).uv(3).
			entry(1, formValue, valueBytes(result("a", omitted)), 0, 1).entry(1, formValue, valueBytes(call("a"))).
			entry(1, formValue, valueBytes(result("b", image))).done()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opt := Options{}
			if strings.HasPrefix(tc.name, "trimmed, but not a browser") {
				opt = Options{BrowserTools: []string{}}
			}
			s, err := Restore(opt, tc.data)
			require.Nil(t, s)
			require.ErrorIs(t, err, ErrSnapshot)
			require.ErrorContains(t, err, tc.want)
		})
	}

	// The trimmed screenshot the last cases get wrong, stored right: a
	// newer one keeps its images.
	ok := newSnap("browser_use").uv(4).uv(4).
		entry(1, formValue, valueBytes(call("a"))).entry(1, formValue, valueBytes(result("a", omitted)), 0, 1).
		entry(1, formValue, valueBytes(call("b"))).entry(1, formValue, valueBytes(result("b", image))).done()
	s, err := Restore(Options{}, ok)
	require.NoError(t, err)
	require.Equal(t, 1, s.Dropped().ImagesOmitted)
}

// TestRestore_AllocatesInProportion checks that what Restore allocates
// stays within a small multiple of its input, whatever the counts in it
// claim: containers nested to the limit each claiming the bytes left,
// maps and arrays of one-byte elements, many entries.
func TestRestore_AllocatesInProportion(t *testing.T) {
	nested := func(tag byte, n int) []byte {
		var b []byte
		for range snapshotMaxDepth - 1 {
			b = append(b, tag)
			b = binary.AppendUvarint(b, uint64(n))
			if tag == tagMap {
				b = append(b, 0) // an empty key
			}
		}
		return b
	}
	msgWith := func(content []byte) []byte {
		b := append([]byte{tagMap, 2}, 4)
		b = append(b, "role"...)
		b = append(b, valueBytes("user")...)
		b = append(append(b, 7), "content"...)
		return append(b, content...)
	}
	ones := func(tag byte, n int, elem ...byte) []byte {
		b := binary.AppendUvarint([]byte{tag}, uint64(n))
		for range n {
			b = append(b, elem...)
		}
		return b
	}
	many := newSnap("browser_use").uv(100000).uv(20000)
	for range 20000 {
		many.entry(1, formValue, valueBytes(record.NewMap("role", "user")))
	}
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"nested arrays claiming the bytes left", newSnap("browser_use").uv(3).uv(1).entry(1, formValue, msgWith(append(nested(tagArray, 60000), make([]byte, 60000)...))).done()},
		{"nested maps claiming the bytes left", newSnap("browser_use").uv(3).uv(1).entry(1, formValue, msgWith(append(nested(tagMap, 30000), make([]byte, 60000)...))).done()},
		{"an array of nils", newSnap("browser_use").uv(3).uv(1).entry(1, formValue, msgWith(ones(tagArray, 100000, tagNil))).done()},
		{"a map of empty keys", newSnap("browser_use").uv(3).uv(1).entry(1, formValue, msgWith(ones(tagMap, 50000, 0, tagNil))).done()},
		{"many entries", many.done()},
		{"json", newSnap("browser_use").uv(3).uv(1).entry(1, formJSON, []byte(`{"role":"user","content":[`+strings.Repeat("[", 100000)+`]}`)).done()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			_, err := Restore(Options{}, tc.data)
			runtime.ReadMemStats(&after)
			alloc := after.TotalAlloc - before.TotalAlloc
			t.Logf("%d bytes in, %d allocated, error: %v", len(tc.data), alloc, err)
			require.LessOrEqual(t, alloc, uint64(64*len(tc.data)+64<<10), "allocated %d for %d bytes", alloc, len(tc.data))
		})
	}
}

// TestRestore_SettlesLikeLive checks that a restored session, once
// rendered, lets go of as much as a session fed the records does: the
// same entries are packed.
func TestRestore_SettlesLikeLive(t *testing.T) {
	for seed := range uint64(200) {
		r := rand.New(rand.NewPCG(seed, 1))
		g := newGen(r)
		opt := Options{BrowserTools: g.BrowserTools()}
		live := New(opt)
		for i, v := range g.Session(10 + r.IntN(100)) {
			live.Apply(uint64(i+1), v)
			if r.IntN(4) == 0 {
				live.JSONBody()
			}
		}
		live.JSONBody()
		rs, err := Restore(opt, live.AppendSnapshot(nil))
		require.NoError(t, err)
		rs.JSONBody()
		for i := range live.entries {
			require.Equal(t, live.entries[i].packed, rs.entries[i].packed, "seed %d: entry %d packed", seed, i)
		}
	}
}

// TestRestore_KeepsNoReferenceToData checks that a restored session
// holds nothing of the bytes it was restored from: the caller may reuse
// them. Some sessions are snapshotted before any rendering (every entry
// in the value encoding), some after (settled entries as JSON).
func TestRestore_KeepsNoReferenceToData(t *testing.T) {
	for seed := range uint64(50) {
		r := rand.New(rand.NewPCG(seed, 3))
		g := newGen(r)
		opt := Options{BrowserTools: g.BrowserTools()}
		live := New(opt)
		for i, v := range g.Session(5 + r.IntN(60)) {
			live.Apply(uint64(i+1), v)
		}
		if seed%2 == 1 {
			live.JSONBody()
		}
		data := live.AppendSnapshot(nil)
		rs, err := Restore(opt, data)
		require.NoError(t, err)
		for i := range data {
			data[i] = 'x'
		}
		compareSessions(t, r, &tracked{s: live, name: "live"}, &tracked{s: rs, name: fmt.Sprintf("seed %d restored", seed)})
	}
}

// FuzzRestore checks that Restore of any bytes neither panics nor
// allocates out of proportion, and that what it accepts is a working
// session: it renders, and its own snapshot restores to the same view.
// Each input is also restored with its checksum made right, so that the
// fuzzer reaches the decoding behind it. The seeds are snapshots of
// generated sessions.
func FuzzRestore(f *testing.F) {
	for seed := range uint64(8) {
		r := rand.New(rand.NewPCG(seed, 2))
		g := newGen(r)
		s := New(Options{})
		for i, v := range g.Session(5 + r.IntN(30)) {
			s.Apply(uint64(i+1), v)
			if r.IntN(3) == 0 {
				s.JSONBody()
			}
		}
		f.Add(s.AppendSnapshot(nil))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		try := func(data []byte) {
			s, err := Restore(Options{}, data)
			if err != nil {
				require.ErrorIs(t, err, ErrSnapshot)
				require.Nil(t, s)
				return
			}
			view := s.AppendJSON(nil)
			s.AppendMsgpack(nil)
			s.Dropped()
			again, err := Restore(Options{}, s.AppendSnapshot(nil))
			require.NoError(t, err, "the snapshot of a restored session")
			require.Equal(t, string(view), string(again.AppendJSON(nil)))
			require.Equal(t, s.Dropped(), again.Dropped())
		}
		try(data)
		if len(data) >= 4 {
			body := data[:len(data)-4]
			try(binary.BigEndian.AppendUint32(bytes.Clone(body), crc32.Checksum(body, castagnoli)))
		}
	})
}

// A 200-record session as the cold-load figures use, and the same
// session with screenshots.
func snapshotWorkloads() []struct {
	name string
	recs []any
} {
	return []struct {
		name string
		recs []any
	}{
		{"200records", workload.New(7, workload.Default.WithScreenshots(0, 0)).Records(200)},
		{"200records-screenshots", workload.New(1, workload.Default.WithScreenshots(200<<10, 200)).Records(200)},
	}
}

// BenchmarkSnapshot measures, for a 200-record session built as the
// cold-load benchmarks build theirs (internal/workload, records stored as
// JSON): the size of its snapshot beside its JSON reply and its stored
// records; the cost of AppendSnapshot; and the cost of Restore beside the
// baseline it replaces, decoding the stored records and applying them,
// each with and without rendering the first JSON reply. It reports the
// heap a rendered session holds, fed the records and restored.
//
//	go test ./pkg/projection -run '^$' -bench Snapshot -benchmem -cpu 1
func BenchmarkSnapshot(b *testing.B) {
	reply := func(s *Session) []byte {
		body, _ := s.JSONBody()
		return body
	}
	for _, w := range snapshotWorkloads() {
		payloads, err := workload.Encode(w.recs)
		require.NoError(b, err)
		dec := record.Decoder{ShareInput: true}
		load := func() *Session {
			s := New(Options{})
			for i, p := range payloads {
				m, err := dec.Decode(p)
				if err != nil {
					b.Fatal(err)
				}
				s.Apply(uint64(i+1), m)
			}
			return s
		}
		live := load()
		replyBytes := len(reply(live))
		snap := live.AppendSnapshot(nil)
		stored := 0
		for _, p := range payloads {
			stored += len(p)
		}
		liveHeap := heapOf(load)
		restoredHeap := heapOf(func() *Session {
			s, err := Restore(Options{}, snap)
			require.NoError(b, err)
			return s
		})
		sizes := func(b *testing.B) {
			b.ReportMetric(float64(len(snap)), "snapshot-B")
			b.ReportMetric(float64(replyBytes), "reply-B")
			b.ReportMetric(float64(stored), "records-B")
		}
		b.Run(w.name+"/sizes", func(b *testing.B) {
			for b.Loop() {
			}
			sizes(b)
			b.ReportMetric(float64(liveHeap), "live-heap-B")
			b.ReportMetric(float64(restoredHeap), "restored-heap-B")
		})
		b.Run(w.name+"/AppendSnapshot", func(b *testing.B) {
			buf := make([]byte, 0, len(snap))
			b.SetBytes(int64(len(snap)))
			b.ReportAllocs()
			for b.Loop() {
				buf = live.AppendSnapshot(buf[:0])
			}
		})
		b.Run(w.name+"/decode+Apply", func(b *testing.B) {
			b.SetBytes(int64(stored))
			b.ReportAllocs()
			for b.Loop() {
				load()
			}
		})
		b.Run(w.name+"/Restore", func(b *testing.B) {
			b.SetBytes(int64(len(snap)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Restore(Options{}, snap); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(w.name+"/decode+Apply+reply", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				reply(load())
			}
		})
		b.Run(w.name+"/Restore+reply", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				s, err := Restore(Options{}, snap)
				if err != nil {
					b.Fatal(err)
				}
				reply(s)
			}
		})
	}
}

// heapOf returns the heap a session made by mk holds once its JSON reply
// is rendered (the entries that settle let go of their messages).
func heapOf(mk func() *Session) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s := mk()
	s.JSONBody()
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(s)
	return after.HeapAlloc - before.HeapAlloc
}

// typed prints a record value with the Go type of every scalar.
func typed(v any) string {
	switch x := v.(type) {
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = typed(e)
		}
		return fmt.Sprintf("[]any(%d/%d)[%s]", len(x), cap(x), strings.Join(parts, ", "))
	case *record.Map:
		if x == nil {
			return "(*Map)(nil)"
		}
		parts := make([]string, len(x.Members))
		for i, m := range x.Members {
			parts[i] = fmt.Sprintf("%q: %s", m.Key, typed(m.Value))
		}
		return fmt.Sprintf("{%s}", strings.Join(parts, ", "))
	}
	return fmt.Sprintf("%T(%#v)", v, v)
}

// decoded returns a copy of a record value with each value that packing
// lets through and JSON reads back as another type (see exactInJSON) as
// it reads back: a Number, a uint64, a float64 that is not whole. Those
// change type when an entry packs, in a live session as in a restored
// one, and encode the same either way.
func decoded(v any) any {
	switch x := v.(type) {
	case uint64:
		return decoded(record.Number(strconv.FormatUint(x, 10)))
	case float64:
		if !exactInJSON(x) {
			return x
		}
		b, _ := record.MarshalJSON(x)
		return decoded(record.Number(b))
	case record.Number:
		d, err := record.DecodeJSON([]byte("[" + string(x) + "]"))
		if err != nil {
			return x
		}
		return d.([]any)[0]
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = decoded(e)
		}
		return out
	case *record.Map:
		if x == nil {
			return x
		}
		out := &record.Map{Members: make([]record.Member, len(x.Members))}
		for i, m := range x.Members {
			out.Members[i] = record.Member{Key: m.Key, Value: decoded(m.Value)}
		}
		return out
	}
	return v
}

// Tags of the binary form of values (record.AppendBinary), for the
// snapshots the tests write by hand.
const (
	tagNil = iota
	tagFalse
	tagTrue
	tagString
	tagInt
	tagUint
	tagFloat
	tagNumber
	tagArray
	tagMap
)
