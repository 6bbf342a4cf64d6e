package projection

import (
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/record"
)

func TestExplain_AgreesWithBuild(t *testing.T) {
	n := 2000
	if testing.Short() {
		n = 200
	}
	for seed := uint64(1); seed <= uint64(n); seed++ {
		r := rand.New(rand.NewPCG(seed, 7))
		g := newGen(r)
		opt := Options{BrowserTools: g.BrowserTools()}
		recs := Numbered(g.Session(5 + r.IntN(60)))
		ex := Explain(recs, opt)
		want := Build(recs, opt)
		require.True(t, reflect.DeepEqual(want, ex.Result), "seed %d: Explain's result differs from Build's", seed)
		checkFates(t, seed, recs, opt, ex)
	}
}

// checkFates checks the fates against what Build and an independent
// Session report: the messages each record gives, and the Dropped report
// split by record.
func checkFates(t *testing.T, seed uint64, recs []Record, opt Options, ex Explanation) {
	t.Helper()
	require.Len(t, ex.Fates, len(recs))
	s := New(opt)
	for _, r := range recs {
		s.Apply(r.Seq, r.Value)
	}
	var fromFates []uint64
	var unpaired []UnpairedCall
	var orphans []OrphanResult
	omitted := 0
	lastCompaction := -1
	for k, r := range recs {
		if IsValidCompaction(r.Value) {
			lastCompaction = k
		}
	}
	for k, f := range ex.Fates {
		require.Equal(t, recs[k].Seq, f.Seq)
		require.NotEmpty(t, f.Rule, "seed %d seq %d", seed, f.Seq)
		for range f.Messages {
			fromFates = append(fromFates, f.Seq)
		}
		unpaired = append(unpaired, f.UnpairedCalls...)
		orphans = append(orphans, f.OrphanResults...)
		omitted += f.ImagesOmitted
		switch f.Status {
		case StatusKept, StatusConverted, StatusTrimmed, StatusPruned:
			require.Equal(t, 1, f.Messages, "seed %d seq %d", seed, f.Seq)
			require.Greater(t, k, lastCompaction, "seed %d seq %d: kept before the latest compaction", seed, f.Seq)
		case StatusDropped:
			require.Zero(t, f.Messages)
			if Convert(recs[k].Value) != nil && !IsValidCompaction(recs[k].Value) && k > lastCompaction {
				// Pass 1 took it: pass 2 dropped it.
				require.Equal(t, 1, f.MessagesDropped, "seed %d seq %d", seed, f.Seq)
			}
		case StatusReplaced:
			require.Zero(t, f.Messages)
			require.Less(t, k, lastCompaction)
			require.LessOrEqual(t, f.ReplacedBy, recs[lastCompaction].Seq)
			require.Greater(t, f.ReplacedBy, f.Seq)
		case StatusCheckpoint:
			require.Equal(t, lastCompaction, k, "seed %d seq %d", seed, f.Seq)
		default:
			t.Fatalf("seed %d seq %d: status %q", seed, f.Seq, f.Status)
		}
		if f.Status == StatusTrimmed {
			require.Positive(t, f.ImagesOmitted)
		}
	}
	require.Equal(t, s.MessageSeqs(nil), fromFates, "seed %d: messages per record", seed)
	d := s.Dropped()
	require.Equal(t, d.UnpairedCalls, orEmptyU(unpaired), "seed %d", seed)
	require.Equal(t, d.OrphanResults, orEmptyO(orphans), "seed %d", seed)
	require.Equal(t, d.ImagesOmitted, omitted, "seed %d", seed)
}

func orEmptyU(s []UnpairedCall) []UnpairedCall {
	if s == nil {
		return []UnpairedCall{}
	}
	return s
}

func orEmptyO(s []OrphanResult) []OrphanResult {
	if s == nil {
		return []OrphanResult{}
	}
	return s
}

func TestExplain_Rules(t *testing.T) {
	m := func(kv ...any) *record.Map { return record.NewMap(kv...) }
	img := m("type", "image", "data", "AAAA", "mimeType", "image/png")
	recs := Numbered([]any{
		m("role", "user", "content", "hi"),                                                          // 1 kept
		m("kind", "context", "role", "user"),                                                        // 2 dropped rule 2
		m("role", "bashExecution", "command", "pwd", "output", "/", "exitCode", int64(0)),           // 3 converted
		m("role", "assistant", "content", []any{m("type", "toolCall", "id", "c1", "name", "bash")}), // 4 dropped: unpaired only
		m("role", "toolResult", "toolCallId", "zz", "content", "x"),                                 // 5 orphan
		m("role", "assistant", "content", []any{m("type", "text", "text", "look"), m("type", "toolCall", "id", "b1", "name", "browser_use"), m("type", "toolCall", "id", "c9", "name", "bash")}), // 6 pruned
		m("role", "toolResult", "toolCallId", "b1", "content", []any{img}),                                 // 7 trimmed
		m("role", "assistant", "content", []any{m("type", "toolCall", "id", "b2", "name", "browser_use")}), // 8 kept
		m("role", "toolResult", "toolCallId", "b2", "content", []any{img}),                                 // 9 kept (latest)
		"not a map",                      // 10
		m("type", "label", "label", "x"), // 11
	})
	ex := Explain(recs, Options{})
	want := []Status{StatusKept, StatusDropped, StatusConverted, StatusDropped, StatusDropped, StatusPruned, StatusTrimmed, StatusKept, StatusKept, StatusDropped, StatusDropped}
	for i, f := range ex.Fates {
		require.Equal(t, want[i], f.Status, "seq %d: %s", f.Seq, f.Rule)
	}
	require.Contains(t, ex.Fates[1].Rule, "rule 2")
	require.Contains(t, ex.Fates[3].Rule, `unpaired call "c1" (bash)`)
	require.Contains(t, ex.Fates[4].Rule, `orphan result "zz"`)
	require.Contains(t, ex.Fates[5].Rule, `"c9"`)
	require.Equal(t, 1, ex.Fates[6].ImagesOmitted)
	require.Equal(t, "not a map", ex.Fates[9].Rule[len("rule 6: "):])
	require.Equal(t, "label", ex.Fates[10].Class)

	// A compaction replaces what came before it.
	snap := m("type", "compaction", "at", "x", "baseSeq", int64(1), "plannerVersion", int64(1), "summaryModelRef", "m",
		"summary", "s", "qualityAudit", "passed", "messages", []any{m("role", "user", "content", "kept")},
		"firstKeptIndex", int64(0), "tokensBefore", int64(1), "tokensAfter", int64(1))
	recs = append(recs, Record{Seq: 12, Value: snap}, Record{Seq: 13, Value: m("role", "user", "content", "after")})
	ex = Explain(recs, Options{})
	require.Equal(t, StatusReplaced, ex.Fates[0].Status)
	require.Equal(t, uint64(12), ex.Fates[0].ReplacedBy)
	require.Equal(t, StatusDropped, ex.Fates[1].Status, "a record pass 1 dropped stays dropped")
	require.Equal(t, StatusCheckpoint, ex.Fates[11].Status)
	require.Equal(t, 1, ex.Fates[11].Messages)
	require.Equal(t, StatusKept, ex.Fates[12].Status)
}
