package projection

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/workload"
	"github.com/ctxd/ctxd/pkg/record"
)

// TestShape_ReadsWhatThePassesRead holds a record's skeleton (Shape) to
// the whole record in everything the passes read of a message: its rule,
// role, calls, results, and what rewrite makes of it under every pairing
// and trimming, for generated records of every shape.
func TestShape_ReadsWhatThePassesRead(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 17))
	g := newGen(r)
	n := 0
	for range 3000 {
		v := g.Record()
		js, err := record.MarshalJSON(v)
		if err != nil {
			continue
		}
		skel, ok := shapeDecoder.DecodeShape(js, Shape)
		if !ok {
			continue // not a map, or a map too wide
		}
		m, err := record.Decode(js)
		require.NoError(t, err)
		n++
		kind, role, typ := keyFields(m)
		skind, srole, styp := keyFields(skel)
		require.Equal(t, ruleOf(kind, role, typ), ruleOf(skind, srole, styp), "%s", js)
		if !PassesThrough(skel) {
			continue
		}
		// What ApplyShaped holds as its JSON is a message pass 1 keeps as
		// it is: never a compaction.
		require.False(t, IsValidCompaction(m), "%s", js)
		require.Equal(t, rulePassThrough, ruleOf(kind, role, typ), "%s", js)
		c, _, reset := classify(m)
		require.True(t, c == m && !reset, "%s", js)
		require.Equal(t, roleKind(m), roleKind(skel), "%s", js)
		calls, results := callsOf(m), resultsOf(m)
		require.True(t, reflect.DeepEqual(calls, callsOf(skel)), "calls of %s", js)
		require.True(t, reflect.DeepEqual(results, resultsOf(skel)), "results of %s", js)
		// rewrite keeps the message as it is, drops it, or changes it,
		// alike for both, under random pairings and trimmings.
		for range 8 {
			kept, trim := map[string]bool{}, map[int]bool{}
			for _, c := range calls {
				kept[c.id] = r.IntN(2) == 0
			}
			for _, res := range results {
				kept[res.id] = r.IntN(2) == 0
				trim[res.block] = r.IntN(2) == 0
			}
			rw := func(msg *record.Map) *record.Map {
				return rewrite(msg, roleKind(msg), calls, results,
					func(c call) bool { return kept[c.id] },
					func(res result) bool { return kept[res.id] },
					func(res result) bool { return trim[res.block] })
			}
			out, sout := rw(m), rw(skel)
			require.Equal(t, out == nil, sout == nil, "dropped: %s", js)
			require.Equal(t, out == m, sout == skel, "kept as it is: %s", js)
			// keptAsIs, from what an entry keeps, says what rewrite does.
			require.Equal(t, out == m, keptAsIs(roleKind(m), calls, results, standsAlone(skel),
				func(c call) bool { return kept[c.id] },
				func(res result) bool { return kept[res.id] },
				func(res result) bool { return trim[res.block] }), "keptAsIs: %s", js)
		}
	}
	require.Greater(t, n, 1000, "records decoded to Shape")
}

// TestSession_LazyEntries shows that a session applied from records' JSON
// decodes only the messages whose rendering is not the record: here, an
// assistant message whose call is not answered when the session is read.
func TestSession_LazyEntries(t *testing.T) {
	recs := []string{
		`{"role":"user","content":"look"}`,
		`{"role":"assistant","content":[{"type":"toolCall","id":"c1","name":"read","arguments":{}}]}`,
		`{"role":"toolResult","toolCallId":"c1","content":[{"type":"text","text":"ok"}]}`,
		`{"role":"assistant","content":[{"type":"text","text":"and"},{"type":"toolCall","id":"c2","name":"read","arguments":{}}]}`,
	}
	s := New(Options{})
	var want []Record
	for i, js := range recs {
		skel, ok := shapeDecoder.DecodeShape([]byte(js), Shape)
		require.True(t, ok)
		require.True(t, s.ApplyShaped(uint64(i+1), skel, []byte(js)))
		v, err := record.Decode([]byte(js))
		require.NoError(t, err)
		want = append(want, Record{Seq: uint64(i + 1), Value: v})
	}
	for i := range s.entries {
		require.True(t, s.entries[i].lazy, "entry %d before any read", i)
	}
	body, _ := s.JSONBody()
	js, err := record.MarshalJSON(Build(want, Options{}).Messages)
	require.NoError(t, err)
	require.Equal(t, string(js), "["+string(body)+"]")
	for i, e := range s.entries {
		require.False(t, e.lazy, "entry %d after the JSON rendering", i)
		require.Equal(t, i < 3, e.packed, "entry %d packed", i)
	}
	require.NotNil(t, s.entries[3].msg, "the unanswered call's message, decoded")
	require.Empty(t, s.raws)
}

// TestSession_LazyEntriesSettleInFewSteps: a session of messages held as
// their JSON, never read, settles them when they hold as much as the
// rendering, which then grows once by what they hold, not by append's
// steps of a quarter, each a fresh buffer: the session allocates about
// twice its rendering for it, where steps of a quarter took five times.
func TestSession_LazyEntriesSettleInFewSteps(t *testing.T) {
	const n = 4000
	text := strings.Repeat("word ", 100)
	jss := make([][]byte, n)
	skels := make([]*record.Map, n)
	values := make([]any, n)
	for i := range n {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		jss[i] = fmt.Appendf(nil, `{"role":%q,"content":"%s%d"}`, role, text, i)
		var ok bool
		skels[i], ok = shapeDecoder.DecodeShape(jss[i], Shape)
		require.True(t, ok)
		v, err := record.Decode(jss[i])
		require.NoError(t, err)
		values[i] = v
	}
	s := New(Options{})
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := range n {
		require.True(t, s.ApplyShaped(uint64(i+1), skels[i], jss[i]))
		if s.lazyBytes >= max(int64(settleBytes), int64(len(s.json.bytes))) {
			t.Fatalf("after record %d: its lazy entries hold as much as the rendering, unsettled", i+1)
		}
	}
	runtime.ReadMemStats(&after)
	rendering := len(s.json.bytes) + int(s.lazyBytes)
	require.Greater(t, rendering, 2_000_000)
	// The entries and the list of records' JSON take about as much as
	// the rendering here (2.4 MB), settling never more than the
	// rendering: 4.5 MB. append's steps, in one settle, took 7.5 MB;
	// settling every eighth of the rendering 12 MB.
	allocated := int(after.TotalAlloc - before.TotalAlloc)
	require.Less(t, allocated, 5*rendering/2, "bytes allocated for a rendering of %d", rendering)
	requireBuild(t, s, values)
	// Rendered, the session holds no list of thousands of records' JSON
	// either, which Size would not count.
	require.Empty(t, s.raws)
	require.LessOrEqual(t, cap(s.raws), 256)
}

// TestSession_LazySettleWithTrimGrowsOnce: a settle that copies in lazy
// entries' JSON and rebuilds a screenshot trimmed behind them makes room
// for the JSON where the rebuilt entries end, not where they ended
// before the trim: the rendering is not built larger than it ends, to be
// copied again into a smaller buffer by the settle's rule on room. The
// records are ctxd bench's ingest records (a 200 KiB screenshot every 100
// messages) as the store applies them; the session never reads.
func TestSession_LazySettleWithTrimGrowsOnce(t *testing.T) {
	pool, err := workload.Encode(workload.New(11, workload.Default).Cycle(1000)[:800])
	require.NoError(t, err)
	type applied struct {
		skel *record.Map // ApplyShaped, or
		v    any         // ApplyJSON
		raw  []byte
	}
	recs := make([]applied, len(pool))
	values := make([]any, len(pool))
	for i, js := range pool {
		if values[i], err = record.Decode(js); err != nil {
			t.Fatal(err)
		}
		if skel, ok := shapeDecoder.DecodeShape(js, Shape); ok && PassesThrough(skel) {
			recs[i] = applied{skel: skel, raw: js}
			continue
		}
		v, canonical, err := shapeDecoder.DecodeCanonical(js)
		require.NoError(t, err)
		recs[i] = applied{v: v}
		if canonical {
			recs[i].raw = js
		}
	}
	s := New(Options{})
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i, r := range recs {
		if r.skel != nil {
			s.ApplyShaped(uint64(i+1), r.skel, r.raw)
		} else {
			s.ApplyJSON(uint64(i+1), r.v, r.raw)
		}
	}
	runtime.ReadMemStats(&after)
	// 2.6 MB, 3.2 times the rendering (entries, ids, trimmed messages);
	// making room for the JSON where the rendering ended before the trim
	// took 3.2 MB, two copies of the rendering more.
	rendering := len(s.json.bytes) + int(s.lazyBytes)
	allocated := int(after.TotalAlloc - before.TotalAlloc)
	require.Less(t, allocated, 7*rendering/2, "bytes allocated for a rendering of %d", rendering)
	requireBuild(t, s, values)
}

// TestSession_TinyLazyEntriesSettleByWhatTheyHold: what lazy entries
// hold beyond their JSON (each its place in the list and its buffer's
// rounding) settles them too once it reaches a quarter of the rendering,
// so that a session of tiny records holds about its rendering unsettled
// at most, however small they are, and not several times it.
func TestSession_TinyLazyEntriesSettleByWhatTheyHold(t *testing.T) {
	s := New(Options{})
	var values []any
	for i := range 20000 {
		js := fmt.Appendf(nil, `{"role":"user","content":"%d"}`, i)
		skel, ok := shapeDecoder.DecodeShape(js, Shape)
		require.True(t, ok)
		require.True(t, s.ApplyShaped(uint64(i+1), skel, js))
		v, err := record.Decode(js)
		require.NoError(t, err)
		values = append(values, v)
		n := int64(len(s.json.bytes))
		if s.lazyBytes >= max(int64(settleBytes), n) || rawOverhead*int64(len(s.raws)) >= max(int64(settleBytes), n/4) {
			t.Fatalf("after record %d: %d lazy entries hold %d bytes and %d more unsettled beside a rendering of %d",
				i+1, len(s.raws), s.lazyBytes, rawOverhead*len(s.raws), n)
		}
	}
	requireBuild(t, s, values)
}
