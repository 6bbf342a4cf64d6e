package projection

import "github.com/ctxd/ctxd/pkg/record"

// Record is one stored record with its stream sequence.
type Record struct {
	Seq   uint64
	Value any
}

// Numbered pairs values with their 1-based positions as sequences, the
// way `ctxd build` numbers its input.
func Numbered(values []any) []Record {
	recs := make([]Record, len(values))
	for i, v := range values {
		recs[i] = Record{Seq: uint64(i + 1), Value: v}
	}
	return recs
}

// UnpairedCall is a call left out of the context because no result
// answers it: an action whose outcome is unknown.
type UnpairedCall struct {
	ID   string `json:"id"`
	Tool string `json:"tool"`
	Seq  uint64 `json:"seq"`
}

// OrphanResult is a result left out because no earlier call asked for it.
type OrphanResult struct {
	ID  string `json:"id"`
	Seq uint64 `json:"seq"`
}

// Dropped reports what passes 2 and 3 removed (CONTEXT.md section 6).
type Dropped struct {
	UnpairedCalls []UnpairedCall `json:"unpaired_calls"`
	OrphanResults []OrphanResult `json:"orphan_results"`
	ImagesOmitted int            `json:"images_omitted"`
}

// Result is a session's model context and what the passes removed.
type Result struct {
	// Messages is the model context; never nil.
	Messages []any
	Dropped  Dropped
}

// item is a pass-1 message with the sequence of the record it came from.
type item struct {
	seq uint64
	msg *record.Map
}

// Build is the batch form of the context rules: it runs the pipeline of
// CONTEXT.md over all records of a session, in order. It is written
// straight from the rules, as the reference the incremental Session is
// tested against.
func Build(records []Record, opt Options) Result {
	return build(records, opt, nil)
}

// build is Build, telling ex, when not nil, what each rule decided for
// each record (see Explain).
func build(records []Record, opt Options, ex *explainer) Result {
	// Pass 1: classify, convert, reset.
	var items []item
	for k, r := range records {
		msg, snapshot, reset := classify(r.Value)
		if reset {
			items = items[:0:0]
			for _, m := range snapshot {
				items = append(items, item{seq: r.Seq, msg: m})
			}
			ex.reset(k, len(snapshot))
			continue
		}
		if msg != nil {
			items = append(items, item{seq: r.Seq, msg: msg})
		}
		ex.passOne(k, msg != nil)
	}
	calls := make([][]call, len(items))
	results := make([][]result, len(items))
	for i, it := range items {
		calls[i] = callsOf(it.msg)
		results[i] = resultsOf(it.msg)
	}

	// Pass 2: an id is paired when its first result follows its first call.
	firstCall := map[string]int{}
	firstResult := map[string]int{}
	for i := range items {
		for _, c := range calls[i] {
			if _, seen := firstCall[c.id]; c.id != "" && !seen {
				firstCall[c.id] = i
			}
		}
		for _, r := range results[i] {
			if _, seen := firstResult[r.id]; r.id != "" && !seen {
				firstResult[r.id] = i
			}
		}
	}
	paired := func(id string) bool {
		c, okc := firstCall[id]
		r, okr := firstResult[id]
		return id != "" && okc && okr && c < r
	}
	res := Result{Dropped: Dropped{UnpairedCalls: []UnpairedCall{}, OrphanResults: []OrphanResult{}}}
	for i, it := range items {
		for _, c := range calls[i] {
			// A provider-executed call is never removed, so never reported.
			if !c.provider && !paired(c.id) {
				u := UnpairedCall{ID: c.id, Tool: c.tool, Seq: it.seq}
				res.Dropped.UnpairedCalls = append(res.Dropped.UnpairedCalls, u)
				ex.unpaired(i, u)
			}
		}
		for _, r := range results[i] {
			if !paired(r.id) {
				o := OrphanResult{ID: r.id, Seq: it.seq}
				res.Dropped.OrphanResults = append(res.Dropped.OrphanResults, o)
				ex.orphan(i, o)
			}
		}
	}

	// Pass 3: find the latest browser result with images among the results
	// that survive pass 2.
	browserTools := opt.browserSet()
	browserID := map[string]bool{}
	for i := range items {
		for _, c := range calls[i] {
			if c.id != "" && paired(c.id) && browserTools[c.tool] {
				browserID[c.id] = true
			}
		}
	}
	type site struct{ msg, block int }
	latest := site{-1, -1}
	for i := range items {
		for _, r := range results[i] {
			if paired(r.id) && browserID[r.id] && r.images > 0 {
				latest = site{i, r.block}
			}
		}
	}
	trimCount := 0
	res.Messages = make([]any, 0, len(items))
	for i, it := range items {
		trimmed := 0
		out := rewrite(it.msg, roleKind(it.msg), calls[i], results[i],
			func(c call) bool { return paired(c.id) },
			func(r result) bool { return paired(r.id) },
			func(r result) bool {
				if browserID[r.id] && (site{i, r.block}) != latest {
					trimmed += r.images
					return true
				}
				return false
			})
		trimCount += trimmed
		if out != nil {
			res.Messages = append(res.Messages, out)
		}
		ex.rendered(i, out != nil, trimmed)
	}
	res.Dropped.ImagesOmitted = trimCount
	return res
}
