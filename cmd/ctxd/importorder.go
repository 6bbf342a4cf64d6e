package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/ctxd/ctxd/pkg/importer"
)

// orderError is a session whose records are not the file's first ones in
// the file's order: record want (an index in the file) is missing, and
// record got is stored where it belongs.
type orderError struct{ want, got int }

// storedPrefix checks the ids a session holds (in stream order) against
// the ids of a file's records: those of the file's records must be its
// first ones, in order, and it returns how many they are. The session
// may hold other records (of other files imported into it, or of live
// publishers) anywhere; abandoned counts those whose id starts with
// prefix, which an import of the same format into the same session
// stored: of a branch the file abandoned since, or of another file.
// Only those after the session's last rewind compaction count (its id
// starts with prefix and importer.RewindID): it repaired the ones before.
// last is the id of the last of them, after prefix.
func storedPrefix(stored, ids []string, prefix string) (n, abandoned int, last string, bad *orderError) {
	p, bad := storedState(stored, ids, prefix)
	return p.n, p.abandoned, p.last, bad
}

// prefixState is what storedState finds.
type prefixState struct {
	n         int    // the file's first records the session holds
	abandoned int    // records of the format after the last rewind, not of the file
	last      string // the id of the last of those, after the prefix
	// context is how many of the file's first records the session's
	// context holds: a rewind compaction holds the file's records up to
	// its fork, and the records after it add theirs. Fewer than n when
	// the file went back to records the session holds before a rewind
	// compaction that left them out.
	context int
}

// storedState is storedPrefix, with what the context holds of the file.
func storedState(stored, ids []string, prefix string) (p prefixState, bad *orderError) {
	if len(stored) == 0 {
		return p, nil // a new session: no need to index the file's ids
	}
	index := make(map[string]int, len(ids))
	for i, id := range ids {
		index[id] = i
	}
	rewind := prefix + importer.RewindID
	for _, id := range stored {
		i, ok := index[id]
		if !ok {
			switch {
			case strings.HasPrefix(id, rewind):
				p.abandoned, p.last = 0, ""
				p.context = p.n
				fork, _, _ := strings.Cut(strings.TrimPrefix(id, rewind), "@")
				if k, err := strconv.Atoi(fork); err == nil && k >= 0 && k < p.n {
					p.context = k
				}
			case strings.HasPrefix(id, prefix):
				p.abandoned++
				p.last = strings.TrimPrefix(id, prefix)
			}
			continue
		}
		if i != p.n {
			return prefixState{}, &orderError{want: p.n, got: i}
		}
		p.n++
		p.context++
	}
	return p, nil
}

// rewindID is the id of a rewind compaction published after the
// session's last sequence last, fork being how many of the file's
// records it holds: the sequence makes it unique, the fork tells what
// it holds.
func rewindID(fork int, last uint64) string {
	return fmt.Sprintf("%d@%d", fork, last)
}

func (e *orderError) describe(t *importer.Transcript, session string) error {
	want, got := &t.Records[e.want], &t.Records[e.got]
	what := fmt.Sprintf("%s: session %s lacks %s (record %d of %d) but holds records after it, from %s: a stream limit deleted it, or an import failed to store it",
		t.Name, session, want.Where, e.want+1, len(t.Records), got.Where)
	if e.got < e.want {
		what = fmt.Sprintf("%s: session %s holds %s (record %d of %d) again, after %s",
			t.Name, session, got.Where, e.got+1, len(t.Records), t.Records[e.want-1].Where)
	}
	return fmt.Errorf("%s; what follows can no longer be stored in the file's order, so nothing was published: import the file into a new --session", what)
}
