package projection

import (
	"fmt"
	"strings"

	"github.com/ctxd/ctxd/pkg/record"
)

// Status is what the context rules made of one record.
type Status string

// The statuses of Fate, each with the rule that decides it.
const (
	// StatusKept: the record is a message that passes through unchanged
	// (pass 1, rule 5) and passes 2 and 3 leave it as it is.
	StatusKept Status = "kept"
	// StatusConverted: a shell run or an extension message became a
	// message (pass 1, rules 3 and 4).
	StatusConverted Status = "converted"
	// StatusPruned: the message stays, but pass 2 removed unpaired calls
	// or orphan tool_result blocks from it.
	StatusPruned Status = "pruned"
	// StatusTrimmed: the message stays, with earlier screenshots replaced
	// by the omission notice (pass 3).
	StatusTrimmed Status = "trimmed"
	// StatusCheckpoint: the latest valid compaction; its snapshot starts
	// the context (section 4).
	StatusCheckpoint Status = "checkpoint"
	// StatusReplaced: what the record gave was replaced by a later valid
	// compaction (section 4).
	StatusReplaced Status = "replaced"
	// StatusDropped: the record gives no message: pass 1 dropped it, or
	// pass 2 left nothing of it (an orphan result, an assistant message
	// whose only content was unpaired calls).
	StatusDropped Status = "dropped"
)

// Fate explains one record: what the context rules made of it and the
// rule that decided it.
type Fate struct {
	Seq uint64 `json:"seq"`
	// Class names the record's shape: its role, its type, "compaction",
	// "shell run", "extension", or the kind of value when it is not a map.
	Class  string `json:"class"`
	Status Status `json:"status"`
	// Rule cites the rule of docs/CONTEXT.md that decided Status.
	Rule string `json:"rule"`
	// Messages counts the messages of the context that come from the
	// record: 0 or 1, or a compaction snapshot's.
	Messages int `json:"messages"`
	// ReplacedBy is the sequence of the compaction that replaced it.
	ReplacedBy uint64 `json:"replaced_by,omitempty"`
	// What passes 2 and 3 removed from the record's messages: these are
	// the record's share of the Dropped report.
	UnpairedCalls []UnpairedCall `json:"unpaired_calls,omitempty"`
	OrphanResults []OrphanResult `json:"orphan_results,omitempty"`
	ImagesOmitted int            `json:"images_omitted,omitempty"`
	// MessagesDropped counts the record's pass-1 messages pass 2 dropped
	// whole.
	MessagesDropped int `json:"messages_dropped,omitempty"`
}

// Explanation is Build's result with the fate of every record.
type Explanation struct {
	Result
	// Fates has one entry per record, in the order given.
	Fates []Fate
}

// Explain runs Build over records and says, for each record, what the
// rules made of it. It is Build itself, reporting as it goes: its Result
// always equals Build's.
func Explain(records []Record, opt Options) Explanation {
	ex := &explainer{records: records, fates: make([]Fate, len(records)), snapshot: make([]int, len(records)), latest: -1}
	res := build(records, opt, ex)
	ex.finish()
	return Explanation{Result: res, Fates: ex.fates}
}

// explainer collects what build decides for each record. Its methods do
// nothing on a nil explainer, so Build pays nothing for it.
type explainer struct {
	records []Record
	fates   []Fate
	// gave marks the records whose pass-1 message is in the list, until
	// a compaction replaces them.
	gave     []int // record indexes, since the latest reset
	snapshot []int // messages of a compaction's snapshot, by record index
	latest   int   // the latest valid compaction's record index, -1 none
	// items holds the record index of each pass-1 message, as build's
	// items list them.
	items []int
}

func (ex *explainer) reset(k, n int) {
	if ex == nil {
		return
	}
	by := ex.records[k].Seq
	for _, j := range ex.gave {
		ex.fates[j].Status = StatusReplaced
		ex.fates[j].ReplacedBy = by
		ex.fates[j].Rule = fmt.Sprintf("section 4: replaced by the compaction at seq %d", by)
	}
	ex.gave = append(ex.gave[:0], k)
	ex.items = ex.items[:0]
	for range n {
		ex.items = append(ex.items, k)
	}
	ex.latest = k
	ex.snapshot[k] = n
	ex.fates[k].Status = StatusCheckpoint
}

func (ex *explainer) passOne(k int, gave bool) {
	if ex == nil {
		return
	}
	if gave {
		ex.gave = append(ex.gave, k)
		ex.items = append(ex.items, k)
		return
	}
	ex.fates[k].Status = StatusDropped
	ex.fates[k].Rule = dropRule(ex.records[k].Value)
}

// unpaired, orphan and rendered are told of build's item i.
func (ex *explainer) unpaired(i int, u UnpairedCall) {
	if ex != nil {
		f := &ex.fates[ex.items[i]]
		f.UnpairedCalls = append(f.UnpairedCalls, u)
	}
}

func (ex *explainer) orphan(i int, o OrphanResult) {
	if ex != nil {
		f := &ex.fates[ex.items[i]]
		f.OrphanResults = append(f.OrphanResults, o)
	}
}

func (ex *explainer) rendered(i int, kept bool, trimmed int) {
	if ex == nil {
		return
	}
	f := &ex.fates[ex.items[i]]
	if kept {
		f.Messages++
	} else {
		f.MessagesDropped++
	}
	f.ImagesOmitted += trimmed
}

// finish gives every record its class, and every record that gave
// messages its status and rule.
func (ex *explainer) finish() {
	for k := range ex.fates {
		f := &ex.fates[k]
		v := ex.records[k].Value
		f.Seq = ex.records[k].Seq
		f.Class = Class(v)
		switch f.Status {
		case StatusDropped, StatusReplaced:
			continue
		case StatusCheckpoint:
			f.Rule = fmt.Sprintf("section 4: the latest valid compaction; its snapshot gives %d of %d messages", f.Messages, ex.snapshot[k])
			if f.UnpairedCalls != nil || f.OrphanResults != nil || f.ImagesOmitted > 0 {
				f.Rule += "; " + removed(f)
			}
			continue
		}
		switch {
		case f.Messages == 0:
			f.Status = StatusDropped
			f.Rule = "section 3: " + removed(f) + "; nothing usable left"
			if f.UnpairedCalls == nil && f.OrphanResults == nil {
				f.Rule = "section 3: an assistant message with nothing usable"
			}
		case f.ImagesOmitted > 0:
			f.Status = StatusTrimmed
			f.Rule = "section 5: " + removed(f)
		case f.UnpairedCalls != nil || f.OrphanResults != nil:
			f.Status = StatusPruned
			f.Rule = "section 3: " + removed(f)
		default:
			m := v.(*record.Map)
			switch ruleOf(keyFields(m)) {
			case ruleShell:
				f.Status, f.Rule = StatusConverted, "rule 3 (2.1): a local shell run, as a user message"
			case ruleExtension:
				f.Status, f.Rule = StatusConverted, "rule 4 (2.2): an extension message, as a "+roleOf(Convert(m))+" message"
			default:
				f.Status, f.Rule = StatusKept, "rule 5: a message, unchanged"
			}
		}
	}
}

// removed says what passes 2 and 3 took from a record.
func removed(f *Fate) string {
	var parts []string
	for _, c := range f.UnpairedCalls {
		parts = append(parts, fmt.Sprintf("unpaired call %s removed", describeID(c.ID, c.Tool)))
	}
	for _, o := range f.OrphanResults {
		parts = append(parts, fmt.Sprintf("orphan result %s dropped", describeID(o.ID, "")))
	}
	if f.ImagesOmitted > 0 {
		parts = append(parts, fmt.Sprintf("%d earlier screenshot(s) omitted", f.ImagesOmitted))
	}
	return strings.Join(parts, "; ")
}

func describeID(id, tool string) string {
	s := fmt.Sprintf("%q", id)
	if id == "" {
		s = "(no id)"
	}
	if tool != "" {
		s += " (" + tool + ")"
	}
	return s
}

// dropRule names the pass-1 rule that drops a record.
func dropRule(v any) string {
	m, ok := v.(*record.Map)
	if !ok {
		return "rule 6: not a map"
	}
	kind, role, typ := keyFields(m)
	switch ruleOf(kind, role, typ) {
	case ruleContext:
		return `rule 2: kind "context"`
	case ruleShell:
		return "rule 3 (2.1): a shell run excluded from the context, or with no command"
	}
	if typ == "compaction" {
		return "rule 6: an invalid compaction (section 4), dropped; it resets nothing"
	}
	return "rule 6: " + Class(v) + ", not a message"
}

// Class names a record's shape for people: its role or type,
// "compaction", "shell run", "extension", or the kind of value when it
// is not a map.
func Class(v any) string {
	m, ok := v.(*record.Map)
	if !ok {
		return record.TypeName(v)
	}
	kind, role, typ := keyFields(m)
	if typ == "compaction" {
		if IsValidCompaction(m) {
			return "compaction"
		}
		return "compaction (invalid)"
	}
	switch ruleOf(kind, role, typ) {
	case ruleShell:
		return "shell run"
	case ruleExtension:
		return "extension"
	case ruleContext:
		return "context"
	}
	if s, ok := role.(string); ok && s != "" {
		return s
	}
	if s, ok := typ.(string); ok && s != "" {
		return s
	}
	if s, ok := kind.(string); ok && s != "" {
		return s
	}
	return "map"
}
