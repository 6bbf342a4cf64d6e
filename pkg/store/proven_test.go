package store

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// forgedFixture is session victim with records at 1, 3, 5 and 6 (noise
// holds 2 and 4), and a checkpoint whose index leaves 3 out.
func forgedFixture(t *testing.T) (*fakeLoader, Checkpoint) {
	t.Helper()
	l := newFakeLoader()
	require.Equal(t, uint64(1), l.publish("victim", userRecord("one")))
	l.publish("noise", userRecord("noise two"))
	require.Equal(t, uint64(3), l.publish("victim", userRecord("three")))
	l.publish("noise", userRecord("noise four"))
	l.publish("victim", userRecord("five"))
	require.Equal(t, uint64(6), l.publish("victim", userRecord("six")))
	forged := Checkpoint{From: 0, Seq: 6}.WithSeqs([]uint64{1, 5, 6})
	require.NotEmpty(t, forged.Index)
	l.checkpoints["victim"] = forged
	return l, forged
}

// newerLoader is a seqLoader whose checkpoint writes keep a stored
// checkpoint that is as new (Checkpoint.Newer), as the bucket's do.
type newerLoader struct{ seqLoader }

func (l newerLoader) SaveCheckpoint(ctx context.Context, session string, cp Checkpoint) error {
	l.mu.Lock()
	old, ok := l.checkpoints[session]
	l.mu.Unlock()
	if ok && !cp.Newer(old) {
		return ctx.Err()
	}
	return l.fakeLoader.SaveCheckpoint(ctx, session, cp)
}

// newerStore is coldStore on a newerLoader.
func newerStore(t *testing.T, l *fakeLoader) *Store {
	s := coldStore(t, l, false)
	s.Loader = newerLoader{seqLoader{l}}
	return s
}

// A checkpoint index that leaves a record of the session out is found
// out before the load uses it: the session loads from its subject, the
// view is Build of every record, and the checkpoint is replaced by one
// that lists them all.
func TestStore_IndexLeavingRecordsOut(t *testing.T) {
	l, _ := forgedFixture(t)
	s := newerStore(t, l)
	requireView(t, s, l, "victim")
	require.NotEmpty(t, l.readsOf("victim"), "the subject was read")
	require.NoError(t, s.SaveCheckpoints(context.Background()))
	require.Equal(t, []uint64{1, 3, 5, 6}, indexOf(t, l, "victim"), "the checkpoint was replaced")

	// Loaded again from the checkpoint written: by its index.
	fresh := coldStore(t, l, false)
	seqReads := l.seqReads
	requireView(t, fresh, l, "victim")
	require.Equal(t, seqReads+1, l.seqReads, "loaded by the index written")
}

// Indexes that leave out a session's first record, or a record after
// its compaction, are found out as well.
func TestStore_IndexLeavingRecordsOut_Cases(t *testing.T) {
	t.Run("the first record", func(t *testing.T) {
		l, _ := forgedFixture(t)
		l.checkpoints["victim"] = Checkpoint{From: 0, Seq: 6}.WithSeqs([]uint64{3, 5, 6})
		s := newerStore(t, l)
		requireView(t, s, l, "victim")
		require.NoError(t, s.SaveCheckpoints(context.Background()))
		require.Equal(t, []uint64{1, 3, 5, 6}, indexOf(t, l, "victim"))
	})
	t.Run("after a compaction", func(t *testing.T) {
		l := newFakeLoader()
		l.publish("a", userRecord("before"))
		c := l.publish("a", compactionRecord("kept"))
		l.publish("b", userRecord("b"))
		left := l.publish("a", userRecord("left out"))
		last := l.publish("a", userRecord("last"))
		l.checkpoints["a"] = Checkpoint{From: c, Seq: last}.WithSeqs([]uint64{c, last})
		s := newerStore(t, l)
		requireView(t, s, l, "a")
		require.NoError(t, s.SaveCheckpoints(context.Background()))
		require.Equal(t, []uint64{c, left, last}, indexOf(t, l, "a"))
	})
	t.Run("records after the index", func(t *testing.T) {
		// A complete index, and records stored after it was written:
		// proven, and loaded by it.
		l, _ := forgedFixture(t)
		l.checkpoints["victim"] = Checkpoint{From: 0, Seq: 6}.WithSeqs([]uint64{1, 3, 5, 6})
		l.publish("victim", userRecord("seven"))
		s := newerStore(t, l)
		requireView(t, s, l, "victim")
		require.Equal(t, 1, l.seqReads, "loaded by the index")
		require.Equal(t, 1, l.counts, "proven by one count")
	})
}

// A snapshot is written only from a projection whose load proved it
// holds every record: after a load by an index that leaves a record
// out, the snapshot written at shutdown holds that record, and a load
// from it shows every record.
func TestStore_NoSnapshotFromAnUnprovenLoad(t *testing.T) {
	l, _ := forgedFixture(t)
	sl := newSnapLoader(l)
	s := snapStore(t, sl)
	requireView(t, s, l, "victim")
	require.Equal(t, 1, shutdown(t, s, sl))

	fresh := snapStore(t, sl)
	requireView(t, fresh, l, "victim")
	require.Equal(t, uint64(1), fresh.Stats().SnapshotLoads)
}

// A checkpoint whose Seq lies past the stream's last sequence is
// replaced by the load's, although it looks newer.
func TestStore_CheckpointPastTheStreamReplaced(t *testing.T) {
	l := newFakeLoader()
	l.publish("a", userRecord("one"))
	l.publish("b", userRecord("b"))
	last := l.publish("a", userRecord("two"))
	for name, cp := range map[string]Checkpoint{
		"without an index": {From: 0, Seq: last + 100},
		"with one":         Checkpoint{From: 0, Seq: last + 100}.WithSeqs([]uint64{1, last + 100}),
	} {
		t.Run(name, func(t *testing.T) {
			require.NotEqual(t, name == "with one", cp.Index == "")
			l.checkpoints["a"] = cp
			s := newerStore(t, l)
			requireView(t, s, l, "a")
			require.NoError(t, s.SaveCheckpoints(context.Background()))
			got := checkpointsOf(l)["a"]
			require.Equal(t, last, got.Seq, "replaced: %+v", got)
			require.Equal(t, []uint64{1, last}, indexOf(t, l, "a"))
		})
	}
}

// behindLoader is a newerLoader whose first counts come from a replica
// behind: one record short.
type behindLoader struct {
	newerLoader
	behind *int
}

func (l behindLoader) CountRecords(ctx context.Context, session string, from uint64) (uint64, error) {
	n, err := l.newerLoader.CountRecords(ctx, session, from)
	l.mu.Lock()
	defer l.mu.Unlock()
	if *l.behind > 0 && n > 0 {
		*l.behind--
		n--
	}
	return n, err
}

// A count below the records read comes from a replica behind: the load
// asks again, and uses the index once a count is right; when none is,
// it reads the subject. Either way the view is Build of every record.
func TestStore_IndexCountedBehind(t *testing.T) {
	for _, c := range []struct {
		behind  int
		byIndex bool
	}{{1, true}, {proveRetries, true}, {proveRetries + 1, false}} {
		t.Run(fmt.Sprint(c.behind), func(t *testing.T) {
			l, _ := forgedFixture(t)
			l.checkpoints["victim"] = Checkpoint{From: 0, Seq: 6}.WithSeqs([]uint64{1, 3, 5, 6})
			s := coldStore(t, l, false)
			behind := c.behind
			s.Loader = behindLoader{newerLoader{seqLoader{l}}, &behind}
			requireView(t, s, l, "victim")
			require.Equal(t, min(c.behind+1, proveRetries+1), l.counts, "counts asked")
			if c.byIndex {
				require.Empty(t, l.readsOf("victim"), "loaded by the index")
			} else {
				require.NotEmpty(t, l.readsOf("victim"), "the subject was read")
			}
		})
	}
}

// A checkpoint whose From is not a compaction of the session, at the
// session's last record, is replaced, though it looks as new as the
// load's or newer.
func TestStore_CheckpointFromNoCompactionReplaced(t *testing.T) {
	l := newFakeLoader()
	c := l.publish("a", compactionRecord("kept"))
	plain := l.publish("a", userRecord("one"))
	last := l.publish("a", userRecord("two"))
	l.checkpoints["a"] = Checkpoint{From: plain, Seq: last}.WithSeqs([]uint64{plain, last})
	s := newerStore(t, l)
	requireView(t, s, l, "a")
	require.NoError(t, s.SaveCheckpoints(context.Background()))
	got := checkpointsOf(l)["a"]
	require.Equal(t, c, got.From, "replaced: %+v", got)
	require.Equal(t, []uint64{c, plain, last}, indexOf(t, l, "a"))
}

// A load from a snapshot reads the records after it by the checkpoint's
// index: an index that leaves one of them out is found out too, and the
// checkpoint rewritten.
func TestStore_SnapshotThenIndexLeavingRecordsOut(t *testing.T) {
	l := newFakeLoader()
	sl := newSnapLoader(l)
	s := snapStore(t, sl)
	var seqs []uint64
	for _, text := range []string{"one", "two", "three"} {
		seqs = append(seqs, ingest(s, l, "a", userRecord(text)))
		ingest(s, l, "b", userRecord("b "+text))
	}
	requireView(t, s, l, "a")
	require.Equal(t, 1, shutdown(t, s, sl), "a's snapshot, at its last record")
	left := l.publish("a", userRecord("four, left out"))
	l.publish("b", userRecord("b four"))
	five := l.publish("a", userRecord("five"))
	six := l.publish("a", userRecord("six"))
	l.mu.Lock()
	l.checkpoints["a"] = Checkpoint{From: 0, Seq: six}.WithSeqs(append(slices.Clone(seqs), five, six))
	l.mu.Unlock()

	fresh := snapStore(t, sl)
	requireView(t, fresh, l, "a")
	require.NoError(t, fresh.SaveCheckpoints(context.Background()))
	require.Equal(t, append(seqs, left, five, six), indexOf(t, l, "a"))
}

// A reader whose ingest is behind the writer of a right checkpoint
// cannot prove that checkpoint's index (the count holds records past
// what it reads): it reads the subject, and its corrective checkpoint,
// older than the one stored, does not move the session's checkpoint back.
func TestStore_ReaderBehindKeepsANewerCheckpoint(t *testing.T) {
	l := newFakeLoader()
	l.publish("a", userRecord("one"))
	l.publish("b", userRecord("b"))
	l.publish("a", userRecord("three"))
	four := l.publish("a", userRecord("four"))
	good := Checkpoint{From: 0, Seq: four}.WithSeqs([]uint64{1, 3, four})
	l.checkpoints["a"] = good
	s := newStore(t)
	s.Loader = newerLoader{seqLoader{l}}
	s.checkpoints.every = 1
	s.Advance(3) // this instance's ingest is at 3
	t.Cleanup(func() { s.Close() })
	viewJSON(t, s, "a") // up to 3: what this instance has applied
	require.NoError(t, s.SaveCheckpoints(context.Background()))
	got := checkpointsOf(l)["a"]
	require.Equal(t, good.Seq, got.Seq, "the checkpoint is not moved back")
	seqs, err := got.Seqs()
	require.NoError(t, err)
	require.Equal(t, []uint64{1, 3, four}, seqs)
}

// staleLoader refuses every index, as a layout does an index from before
// its partitioning.
type staleLoader struct{ newerLoader }

func (l staleLoader) RecordsAt(context.Context, string, []uint64, func(uint64, []byte) error) error {
	return ErrIndexStale
}

// A load that finds nothing to change in a checkpoint writes none: an
// index the layout refuses, loaded again and again, costs no write each
// time.
func TestStore_NoRewriteOfTheSameCheckpoint(t *testing.T) {
	l := newFakeLoader()
	l.publish("a", userRecord("one"))
	l.publish("b", userRecord("b"))
	last := l.publish("a", userRecord("two"))
	l.checkpoints["a"] = Checkpoint{From: 0, Seq: last}.WithSeqs([]uint64{1, last})
	for range 3 {
		s := coldStore(t, l, false)
		s.Loader = staleLoader{newerLoader{seqLoader{l}}}
		requireView(t, s, l, "a")
		require.NoError(t, s.SaveCheckpoints(context.Background()))
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	require.Empty(t, l.saved, "checkpoints written that change nothing")
}
