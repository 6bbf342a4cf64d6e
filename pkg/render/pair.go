package render

import (
	"slices"
)

// pair gives each call at most one result: a result answers the earliest
// call with its id before it that has no result yet. A later result for
// an answered call is a duplicate, dropped; a call left without a result
// cannot be sent (every provider refuses it), and is removed. Never is a
// result made up.
func (p *plan) pair() {
	byID := map[string][]*call{}
	for _, c := range p.calls {
		byID[c.id] = append(byID[c.id], c)
	}
	for _, r := range p.results {
		if r.id == "" {
			p.change(Change{Kind: ResultRemoved, Message: r.src, Block: r.block, Reason: "no id"})
			continue
		}
		var target *call
		seen := p.ids.count(r.id) > 0 // a call of the prefix, answered there
		for _, c := range byID[r.id] {
			if c.src >= r.src {
				break
			}
			seen = true
			if c.res == nil {
				target = c
				break
			}
		}
		switch {
		case target != nil:
			target.res, r.call = r, target
		case seen:
			p.change(Change{Kind: DuplicateResult, Message: r.src, Block: r.block, ID: r.id})
		default:
			p.change(Change{Kind: ResultRemoved, Message: r.src, Block: r.block, ID: r.id, Reason: "no call before it"})
		}
	}
	for _, c := range p.calls {
		switch {
		case c.res == nil && c.provider:
			c.drop = "provider-executed, no result"
		case c.res == nil && c.drop == "":
			c.drop = "no result"
		case c.res != nil && c.drop != "":
			p.change(Change{Kind: ResultRemoved, Message: c.res.src, Block: c.res.block, ID: c.id, Reason: "its call is removed"})
			c.res.call, c.res = nil, nil
		}
		if c.drop != "" {
			p.change(Change{Kind: CallRemoved, Message: c.src, Block: c.block, ID: c.id, Reason: c.drop})
		}
	}
	p.mapIDs()
}

// mapIDs gives every call the id and tool name it is sent with.
func (p *plan) mapIDs() {
	ids := p.ids
	for _, c := range p.calls {
		c.wire = ids.wire(c.id) // every call counts, sent or not: stable as results arrive
		if c.drop != "" {
			continue
		}
		if c.wire != c.id {
			p.change(Change{Kind: IDRenamed, Message: c.src, Block: c.block, ID: c.id, To: c.wire})
		}
		c.tool = toolName(p.pv, c.name)
		if c.tool != c.name {
			p.change(Change{Kind: NameRenamed, Message: c.src, Block: c.block, ID: c.id, Reason: c.name, To: c.tool})
		}
	}
}

// layout drops the calls that cannot be sent and places each kept
// result in a group right after its call's message, in call order.
func (p *plan) layout() {
	out := make([]*item, 0, len(p.items)+len(p.calls))
	for _, it := range p.items {
		if it.kind != assistantItem {
			out = append(out, it)
			continue
		}
		var group []*result
		parts := it.parts[:0:0]
		for _, pt := range it.parts {
			if pt.kind == callPart {
				if pt.call.drop != "" {
					continue
				}
				group = append(group, pt.call.res)
			}
			parts = append(parts, pt)
		}
		it.parts = parts
		out = append(out, it)
		if len(group) > 0 {
			out = append(out, &item{kind: resultsItem, src: it.src, results: group})
		}
	}
	p.items = out
	p.reportMoves()
}

// reportMoves reports the results that do not already sit right after
// their call's message, in call order.
func (p *plan) reportMoves() {
	// content[j-p.start]: message j has content of its own (not
	// results). Every message the plan took apart is from p.start on.
	content := make([]bool, len(p.msgs)-p.start)
	userAt := map[int]*item{}
	for _, it := range p.items {
		if it.kind != resultsItem && len(it.parts) > 0 {
			content[it.src-p.start] = true
			if it.kind == userItem {
				userAt[it.src] = it
			}
		}
	}
	// groupOf[j-p.start]: the call message whose group message j's results all
	// join; -1 for none, -2 for several.
	groupOf := make([]int, len(p.msgs)-p.start)
	for j := range groupOf {
		groupOf[j] = -1
	}
	for _, r := range p.results {
		if r.call == nil {
			continue
		}
		switch g := groupOf[r.src-p.start]; {
		case g == -1:
			groupOf[r.src-p.start] = r.call.src
		case g != r.call.src:
			groupOf[r.src-p.start] = -2
		}
	}
	for _, it := range p.items {
		if it.kind != resultsItem {
			continue
		}
		sorted := slices.Clone(it.results)
		slices.SortStableFunc(sorted, func(a, b *result) int {
			if a.src != b.src {
				return a.src - b.src
			}
			return a.block - b.block
		})
		for k, r := range it.results {
			moved := sorted[k] != r
			for j := it.src + 1; j < r.src && !moved; j++ {
				moved = content[j-p.start] || (groupOf[j-p.start] != -1 && groupOf[j-p.start] != it.src)
			}
			if u := userAt[r.src]; !moved && r.block >= 0 && u != nil {
				// Content of the user message before the block.
				moved = u.parts[0].block < r.block
			}
			if moved {
				p.change(Change{Kind: ResultMoved, Message: r.src, Block: r.block, ID: r.id})
			}
		}
	}
}

func (p *plan) sortChanges() {
	slices.SortStableFunc(p.report.Changes, func(a, b Change) int { return a.Message - b.Message })
	if p.opt.Seqs == nil {
		return
	}
	for i := range p.report.Changes {
		if m := p.report.Changes[i].Message; m >= 0 && m < len(p.opt.Seqs) {
			p.report.Changes[i].Seq = p.opt.Seqs[m]
		}
	}
}
