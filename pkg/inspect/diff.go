package inspect

import (
	"bytes"
	"cmp"
	"slices"

	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
)

// Bounds of a diff page: the entries and fates it lists; the previews
// share PageBytes.
const diffItems = 200

// contextDiff is what changed in a session's context between two
// sequences: the context messages added, removed and changed, each
// known by the record that gives it and its place among that record's
// messages, and the records whose fate changed.
type contextDiff struct {
	Entries                       []diffEntry
	Added, Removed, Changed, Same int
	Hidden                        int // entries past those listed
	Fates                         []fateChange
	FatesHidden                   int
}

// diffEntry is a context message added, removed or changed.
type diffEntry struct {
	Kind          string // "added", "removed", "changed"
	Seq           uint64 // the record that gives it
	K             int    // its place among the record's messages
	Role          string
	Before, After string // previews; "" for the side it is absent from
	From, To      int    // its index in each context; -1 when absent
}

// fateChange is a record whose fate differs between the two views, or
// that the later one holds only.
type fateChange struct {
	Seq        uint64
	Class      string
	From, To   projection.Status // From "" for a record the first view lacks
	Rule       string            // the rule in the second view
	Size       int
	FromAbsent bool
}

type msgKey struct {
	seq uint64
	k   int
}

// keyed lists a view's context messages by the record that gives them.
func keyed(v *View) (keys []msgKey, at map[msgKey]int) {
	keys = make([]msgKey, len(v.Messages))
	at = make(map[msgKey]int, len(v.Messages))
	for _, row := range v.Rows {
		for k := range row.Messages {
			if j := row.First + k; j < len(keys) {
				keys[j] = msgKey{row.Seq, k}
				at[keys[j]] = j
			}
		}
	}
	return keys, at
}

// diffViews compares the contexts of two explained views of a session,
// a before b: a message of the same record and place in both is the
// same entry, changed when its JSON differs (a screenshot trimmed, a
// call that got its result). The previews listed take budget bytes at
// most.
func diffViews(a, b *View, budget int) contextDiff {
	var d contextDiff
	ka, ia := keyed(a)
	kb, ib := keyed(b)
	role := func(m any) string {
		if mm, ok := m.(*record.Map); ok {
			r, _ := mm.String("role")
			return r
		}
		return ""
	}
	var all []diffEntry
	for j, key := range kb {
		i, ok := ia[key]
		if !ok {
			d.Added++
			all = append(all, diffEntry{Kind: "added", Seq: key.seq, K: key.k, Role: role(b.Messages[j]), From: -1, To: j})
			continue
		}
		x, errx := record.MarshalJSON(a.Messages[i])
		y, erry := record.MarshalJSON(b.Messages[j])
		if errx == nil && erry == nil && bytes.Equal(x, y) {
			d.Same++
			continue
		}
		d.Changed++
		all = append(all, diffEntry{Kind: "changed", Seq: key.seq, K: key.k, Role: role(b.Messages[j]), From: i, To: j})
	}
	for i, key := range ka {
		if _, ok := ib[key]; !ok {
			d.Removed++
			all = append(all, diffEntry{Kind: "removed", Seq: key.seq, K: key.k, Role: role(a.Messages[i]), From: i, To: -1})
		}
	}
	slices.SortStableFunc(all, func(x, y diffEntry) int {
		return cmp.Or(cmp.Compare(x.Seq, y.Seq), cmp.Compare(x.K, y.K))
	})
	for _, e := range all {
		if len(d.Entries) == diffItems || budget <= 0 {
			d.Hidden++
			continue
		}
		if e.From >= 0 {
			e.Before = preview(a.Messages[e.From], min(convJSON, budget))
			budget -= len(e.Before)
		}
		if e.To >= 0 {
			e.After = preview(b.Messages[e.To], min(convJSON, max(budget, 0)))
			budget -= len(e.After)
		}
		d.Entries = append(d.Entries, e)
	}

	before := make(map[uint64]projection.Status, len(a.Rows))
	for _, r := range a.Rows {
		before[r.Seq] = r.Status
	}
	for _, r := range b.Rows {
		st, ok := before[r.Seq]
		if ok && st == r.Status {
			continue
		}
		if len(d.Fates) == diffItems {
			d.FatesHidden++
			continue
		}
		d.Fates = append(d.Fates, fateChange{Seq: r.Seq, Class: r.Class, From: st, To: r.Status, Rule: r.Rule, Size: r.Size, FromAbsent: !ok})
	}
	return d
}
