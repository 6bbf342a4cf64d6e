package projection

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/ctxd/ctxd/pkg/record"
	"github.com/stretchr/testify/require"
)

// The fuzz targets run their seed corpus (testdata/fuzz/<target>: the
// fixtures' record lists, the example session and hand-picked corner
// cases) with every go test. To fuzz, one target at a time:
//
//	go test ./pkg/projection -run '^$' -fuzz '^FuzzSession_EquivalentToBuild$' -fuzztime 3m -parallel 1
//
// A smaller -fuzzminimizetime (the default is 60s per new input) spends
// more of the time fuzzing.

// maxFuzzRecords bounds the session a fuzz input describes: every prefix
// is checked, so the cost of an input grows with the square of its length.
const maxFuzzRecords = 64

// fuzzStep is one record of a fuzzed session.
type fuzzStep struct {
	seq   uint64
	value any
	raw   []byte // the line, when it is the value's canonical JSON (ApplyJSON, ApplyShaped)
	ok    bool   // false: the record could not be decoded and is skipped
}

// jsonLines decodes data as JSON lines: one record a line, blank lines
// ignored. A line that does not decode is kept as a step that is not ok.
func jsonLines(data []byte) []fuzzStep {
	var steps []fuzzStep
	for line := range bytes.SplitSeq(data, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		v, err := record.DecodeJSON(line)
		step := fuzzStep{value: v, ok: err == nil}
		if _, canonical, _ := (record.Decoder{}).DecodeCanonical(line); canonical {
			step.raw = line
		}
		steps = append(steps, step)
	}
	return steps
}

// fuzzSession turns a fuzz input into a session and the options to
// project it with. The input is a generator seed and JSON lines: the
// session is the generated one (none for seed 0, up to 40 records
// otherwise) with the decoded lines interleaved at positions the seed
// picks, numbered from 1. A seed of 2 modulo 3 generates a browsing
// session (sessiongen.Gen.Browsing).
func fuzzSession(seed uint64, data []byte) ([]fuzzStep, Options) {
	lines := jsonLines(data)
	var generated []fuzzStep
	r := rand.New(rand.NewPCG(seed, 0x6a09e667f3bcc908))
	opt := Options{}
	if seed != 0 {
		g := newGen(r)
		opt = Options{BrowserTools: g.BrowserTools()}
		values := g.Session(int(seed % 41))
		if seed%3 == 2 {
			values = g.Browsing(int(seed % 41)) // screenshots, mostly
		}
		for _, v := range values {
			generated = append(generated, fuzzStep{value: v, ok: true})
		}
	}
	steps := make([]fuzzStep, 0, len(lines)+len(generated))
	for len(lines)+len(generated) > 0 && len(steps) < maxFuzzRecords {
		var next fuzzStep
		if len(generated) == 0 || (len(lines) > 0 && r.IntN(2) == 0) {
			next, lines = lines[0], lines[1:]
		} else {
			next, generated = generated[0], generated[1:]
		}
		next.seq = uint64(len(steps) + 1)
		steps = append(steps, next)
	}
	return steps, opt
}

// FuzzSession_EquivalentToBuild checks, for any session, that Session
// equals Build after every record. The input is a generator seed and
// JSON lines (see fuzzSession): the seed brings realistic structure, the
// lines the values nobody thought of. One seed in three settles the
// session every 64 bytes (see TestSession_EquivalentToBuild_SettlingOften).
func FuzzSession_EquivalentToBuild(f *testing.F) {
	f.Add(uint64(0), []byte(`{"role":"user","content":"go"}`))
	f.Add(uint64(7), []byte{})
	f.Add(uint64(4), []byte(`{"role":"user","content":"go"}`))
	f.Fuzz(func(t *testing.T, seed uint64, data []byte) {
		if seed%3 == 1 {
			defer func(n int) { settleBytes = n }(settleBytes)
			settleBytes = 64
		}
		steps, opt := fuzzSession(seed, data)
		e := &equivalence{
			t:   t,
			r:   rand.New(rand.NewPCG(seed, uint64(len(data)))),
			opt: opt,
			s:   New(opt),
		}
		shapes := shapeDecoder.ShapeReader(Shape)
		for _, st := range steps {
			if !st.ok {
				require.True(t, e.s.Skip(st.seq))
			} else {
				if skel, ok := shapes.Decode(st.raw); ok && st.seq%2 == 0 {
					require.True(t, e.s.ApplyShaped(st.seq, skel, st.raw))
				} else {
					require.True(t, e.s.ApplyJSON(st.seq, st.value, st.raw))
				}
				if msg := rawsWrongly(e.s); msg != "" {
					t.Fatalf("after seq %d: %s", st.seq, msg)
				}
				e.recs = append(e.recs, Record{Seq: st.seq, Value: st.value})
				e.invalidate()
			}
			e.maybeCheck(seed%4 == 3)
		}
		e.checkAll()
		for _, h := range e.held {
			require.Equal(t, string(h.then), string(h.got()), "a held %s changed", h.what)
		}
	})
}

// FuzzBuild feeds Build arbitrary JSON lines (lines that do not decode
// are left out). Build must not panic, and its answer must be well
// formed: a non-nil list of messages with a role rule 5 lets through,
// that encodes as JSON and reads back equal, and a report of items with
// sequences from the input. Neither the records nor the answer may
// depend on anything but the input.
func FuzzBuild(f *testing.F) {
	f.Add([]byte(`{"role":"user","content":"go"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var values []any
		for _, st := range jsonLines(data) {
			if st.ok {
				values = append(values, st.value)
			}
		}
		before := encodeAll(t, values)
		res := Build(Numbered(values), Options{})

		require.NotNil(t, res.Messages)
		for _, m := range res.Messages {
			msg, ok := m.(*record.Map)
			require.True(t, ok, "a message is a map")
			role, _ := msg.String("role")
			require.Contains(t, []string{"user", "assistant", "system", "tool", "toolResult"}, role)
		}
		out, err := record.MarshalJSON(res.Messages)
		require.NoError(t, err)
		back, err := record.DecodeJSON(out)
		require.NoError(t, err)
		requireMessages(t, res.Messages, back.([]any), "JSON round trip")
		if mp, err := record.MarshalMsgpack(res.Messages); err != nil {
			// Only a JSON number beyond float64 has no msgpack form.
			require.ErrorIs(t, err, record.ErrUnsupported)
		} else {
			back, err := record.DecodeMsgpack(mp)
			require.NoError(t, err)
			require.Len(t, back, len(res.Messages))
		}

		require.NotNil(t, res.Dropped.UnpairedCalls)
		require.NotNil(t, res.Dropped.OrphanResults)
		require.GreaterOrEqual(t, res.Dropped.ImagesOmitted, 0)
		for _, c := range res.Dropped.UnpairedCalls {
			require.True(t, c.Seq >= 1 && c.Seq <= uint64(len(values)), "unpaired call seq %d", c.Seq)
		}
		for _, r := range res.Dropped.OrphanResults {
			require.True(t, r.Seq >= 1 && r.Seq <= uint64(len(values)), "orphan result seq %d", r.Seq)
		}

		again, err := record.MarshalJSON(Build(Numbered(values), Options{}).Messages)
		require.NoError(t, err)
		require.Equal(t, string(out), string(again), "Build is deterministic")
		require.Equal(t, string(before), string(encodeAll(t, values)), "records were modified")
	})
}

// shapeDecoder decodes records to Shape as the store does.
var shapeDecoder = record.Decoder{ShareInput: true, ShareShort: true}
