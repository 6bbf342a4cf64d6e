package store

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/record"
)

func TestCheckpoint_Format(t *testing.T) {
	t.Run("round trip", func(t *testing.T) {
		r := rand.New(rand.NewPCG(1, 2))
		for range 200 {
			n := 1 + r.IntN(300)
			seqs := make([]uint64, n)
			next := uint64(1 + r.IntN(1000))
			for i := range seqs {
				seqs[i] = next
				next += 1 + uint64(r.IntN(1<<r.IntN(40)))
			}
			cp := Checkpoint{From: seqs[0], Seq: seqs[n-1]}.WithSeqs(seqs)
			require.NotEmpty(t, cp.Index)
			data, err := json.Marshal(cp)
			require.NoError(t, err)
			var back Checkpoint
			require.NoError(t, json.Unmarshal(data, &back))
			require.Equal(t, cp, back)
			got, err := back.Seqs()
			require.NoError(t, err)
			require.Equal(t, seqs, got)
		}
	})

	t.Run("the format written before indexes", func(t *testing.T) {
		var cp Checkpoint
		require.NoError(t, json.Unmarshal([]byte(`{"from":12,"seq":40}`), &cp))
		require.Equal(t, Checkpoint{From: 12, Seq: 40}, cp)
		seqs, err := cp.Seqs()
		require.NoError(t, err)
		require.Nil(t, seqs)
		require.NoError(t, cp.IndexError())
		data, err := json.Marshal(Checkpoint{From: 12, Seq: 40})
		require.NoError(t, err)
		require.JSONEq(t, `{"from":12,"seq":40}`, string(data), "without an index, the old format")
	})

	t.Run("an index that does not hold is dropped, not the checkpoint", func(t *testing.T) {
		enc := func(vals ...uint64) string {
			var b []byte
			for _, v := range vals {
				b = binary.AppendUvarint(b, v)
			}
			return base64.StdEncoding.EncodeToString(b)
		}
		for name, index := range map[string]string{
			"not base64":          `"%%%"`,
			"empty":               `""`,
			"no count":            `"` + enc() + `"`,
			"count 0":             `"` + enc(0) + `"`,
			"past the bound":      `"` + enc(MaxCheckpointSeqs+1, 5) + `"`,
			"fewer than counted":  `"` + enc(3, 5, 1) + `"`,
			"bytes left over":     `"` + enc(2, 5, 35, 7) + `"`,
			"a zero delta":        `"` + enc(3, 5, 35, 0) + `"`,
			"overflows":           `"` + enc(2, 5, ^uint64(0)) + `"`,
			"not from the from":   `"` + enc(2, 6, 34) + `"`,
			"not to the seq":      `"` + enc(2, 5, 30) + `"`,
			"a number, no string": `17`,
			"truncated varint":    `"` + base64.StdEncoding.EncodeToString([]byte{2, 5, 0x80}) + `"`,
		} {
			t.Run(name, func(t *testing.T) {
				var cp Checkpoint
				err := json.Unmarshal([]byte(`{"from":5,"seq":40,"index":`+index+`}`), &cp)
				if name == "not base64" || name == "a number, no string" {
					require.Error(t, err, "the JSON itself does not decode")
					return
				}
				require.NoError(t, err)
				require.Equal(t, Checkpoint{From: 5, Seq: 40}, cp.WithoutIndex())
				require.Empty(t, cp.Index)
				if name != "empty" && name != "no count" { // both decode as no index at all
					require.Error(t, cp.IndexError())
				}
			})
		}
		// The right one, for contrast.
		var cp Checkpoint
		require.NoError(t, json.Unmarshal([]byte(`{"from":5,"seq":40,"index":"`+enc(2, 5, 35)+`"}`), &cp))
		seqs, err := cp.Seqs()
		require.NoError(t, err)
		require.Equal(t, []uint64{5, 40}, seqs)
	})

	t.Run("the bound", func(t *testing.T) {
		seqs := make([]uint64, MaxCheckpointSeqs+1)
		for i := range seqs {
			seqs[i] = uint64(1000 * (i + 1))
		}
		over := Checkpoint{From: seqs[0], Seq: seqs[len(seqs)-1]}
		require.Empty(t, over.WithSeqs(seqs).Index, "past the bound: no index")
		at := Checkpoint{From: seqs[0], Seq: seqs[MaxCheckpointSeqs-1]}.WithSeqs(seqs[:MaxCheckpointSeqs])
		require.NotEmpty(t, at.Index)
		data, err := json.Marshal(at)
		require.NoError(t, err)
		require.Less(t, len(data), 64<<10-256, "within the bucket's max_msg_size, headers aside")
	})

	t.Run("newer", func(t *testing.T) {
		idx := Checkpoint{From: 5, Seq: 40}.WithSeqs([]uint64{5, 40})
		require.True(t, Checkpoint{From: 5, Seq: 41}.Newer(idx), "a later record")
		require.False(t, idx.Newer(Checkpoint{From: 5, Seq: 41}), "an earlier record, index or not")
		require.True(t, Checkpoint{From: 40, Seq: 40}.Newer(idx), "a later compaction")
		require.True(t, idx.Newer(Checkpoint{From: 5, Seq: 40}), "an index where there was none")
		require.False(t, Checkpoint{From: 5, Seq: 40}.Newer(idx), "none where there was one")
		require.False(t, idx.Newer(idx), "the same")
	})
}

// FuzzCheckpointJSON: whatever the bucket holds, decoding never panics,
// and an index that decodes fits its checkpoint.
func FuzzCheckpointJSON(f *testing.F) {
	f.Add([]byte(`{"from":5,"seq":40,"index":"AgUj"}`))
	f.Add([]byte(`{"from":0,"seq":0}`))
	f.Add([]byte(`{"from":1,"seq":2,"index":"////"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var cp Checkpoint
		if json.Unmarshal(data, &cp) != nil {
			return
		}
		seqs, err := cp.Seqs()
		require.NoError(t, err, "a decoded index is checked")
		if seqs != nil {
			require.NoError(t, checkSeqs(cp.From, cp.Seq, seqs))
		}
	})
}

// coldStore is a store on the fake stream that loads by sequence, as
// ctxd's does, and writes indexes behind the ingest at once.
func coldStore(t *testing.T, l *fakeLoader, fresh bool) *Store {
	s := newStore(t)
	s.Loader = seqLoader{l}
	s.Fresh = fresh && l.lastSeq() == 0
	s.checkpoints.every = time.Millisecond
	s.Advance(l.lastSeq())
	t.Cleanup(func() { s.Close() })
	return s
}

// genSessions publishes generated records of n sessions, interleaved.
func genSessions(s *Store, l *fakeLoader, r *rand.Rand, n, records int) []string {
	g := &lazyGen{r: r, history: map[string][]*record.Map{}}
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("g%d", i)
	}
	for range records {
		id := ids[r.IntN(n)]
		ingest(s, l, id, g.record(id))
	}
	return ids
}

// indexOf returns the session's stored checkpoint's sequences.
func indexOf(t *testing.T, l *fakeLoader, session string) []uint64 {
	t.Helper()
	cp, ok := checkpointsOf(l)[session]
	require.True(t, ok, "%s has a checkpoint", session)
	seqs, err := cp.Seqs()
	require.NoError(t, err)
	require.NotEmpty(t, seqs, "%s: checkpoint %+v has no index", session, cp)
	return seqs
}

// After a load that finds a later compaction than its checkpoint's, the
// checkpoint written from there carries the index the load set.
func TestStore_LaterCompactionWrittenWithItsIndex(t *testing.T) {
	l := newFakeLoader()
	l.publish("a", userRecord("one"))
	c1 := l.publish("a", compactionRecord("first"))
	l.publish("a", userRecord("two"))
	c2 := l.publish("a", compactionRecord("second"))
	last := l.publish("a", userRecord("three"))
	l.checkpoints["a"] = Checkpoint{From: c1, Seq: c1}
	s := coldStore(t, l, false)
	s.checkpoints.every = time.Hour // only the load's own put
	requireView(t, s, l, "a")
	require.NoError(t, s.checkpoints.flush(context.Background()))
	want := Checkpoint{From: c2, Seq: last}.WithSeqs([]uint64{c2, last})
	require.Equal(t, []savedCheckpoint{{"a", want}}, l.saved, "written once, with its index")
}

// After a restart, a session loads by its checkpoint's index, and what
// it shows is Build over its records: for generated sessions (every kind
// of record, compactions valid or not, records that do not decode or
// that break the session's bound), whether records came after the
// checkpoint or not, on a store that met the sessions from their first
// record or loaded them.
func TestStore_ColdLoadByStoredIndex(t *testing.T) {
	for seed := range uint64(8) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 77))
			l := newFakeLoader()
			s := coldStore(t, l, seed%2 == 0)
			s.MaxSessionBytes = 3000
			ids := genSessions(s, l, r, 6, 300)
			if seed%2 == 1 {
				// Not Fresh: sessions are indexed once loaded.
				for _, id := range ids {
					requireView(t, s, l, id)
				}
			}
			require.NoError(t, s.SaveCheckpoints(context.Background()))
			require.NoError(t, s.Close())
			stale := seed%4 >= 2
			if stale {
				// Records after the checkpoints were written: a crash
				// lost the later ones.
				genSessionsOnly(l, r, ids, 60)
			}

			fresh := coldStore(t, l, false)
			fresh.MaxSessionBytes = 3000
			for _, id := range ids {
				if len(l.stream(id)) == 0 {
					continue
				}
				seqReads, reads := l.seqReads, len(l.readsOf(id))
				idx := indexOf(t, l, id) // the one the load reads by
				requireView(t, fresh, l, id)
				require.Equal(t, seqReads+1, l.seqReads, "%s: loaded by its index", id)
				after := l.readsOf(id)[reads:]
				for _, rr := range after {
					require.Greater(t, rr.from, idx[len(idx)-1], "%s: the subject is read only after the index", id)
				}
			}
		})
	}
}

// genSessionsOnly publishes records of the sessions without a store.
func genSessionsOnly(l *fakeLoader, r *rand.Rand, ids []string, records int) {
	g := &lazyGen{r: r, history: map[string][]*record.Map{}}
	for range records {
		id := ids[r.IntN(len(ids))]
		l.publish(id, g.record(id))
	}
}

// A stored index that does not hold (a sequence of another session's,
// one deleted, one made up, one left out of the order) is found out by
// the read, and the session loads by scanning its subject: the view is
// Build of its records either way.
func TestStore_TamperedIndex(t *testing.T) {
	l := newFakeLoader()
	s := coldStore(t, l, true)
	for i := range 40 {
		ingest(s, l, "a", userRecord(fmt.Sprintf("a %d", i)))
		ingest(s, l, "b", userRecord(fmt.Sprintf("b %d", i)))
	}
	require.NoError(t, s.SaveCheckpoints(context.Background()))
	require.NoError(t, s.Close())
	good := checkpointsOf(l)["a"]
	seqs, err := good.Seqs()
	require.NoError(t, err)
	require.Len(t, seqs, 40)
	bSeqs := indexOf(t, l, "b")

	for name, tamper := range map[string]func([]uint64) []uint64{
		"another session's record": func(s []uint64) []uint64 { s[10] = bSeqs[10]; return s },
		"a sequence past the stream": func(s []uint64) []uint64 {
			return append(s[:len(s)-1], l.lastSeq()+5) // the last, which must be Seq, moved
		},
	} {
		t.Run(name, func(t *testing.T) {
			bad := tamper(slices.Clone(seqs))
			cp := Checkpoint{From: good.From, Seq: bad[len(bad)-1]}.WithSeqs(bad)
			require.NotEmpty(t, cp.Index)
			l.mu.Lock()
			l.checkpoints["a"] = cp
			l.mu.Unlock()
			fresh := coldStore(t, l, false)
			reads := len(l.readsOf("a"))
			requireView(t, fresh, l, "a")
			require.Greater(t, len(l.readsOf("a")), reads, "the subject was scanned")
		})
	}

	t.Run("a record deleted from the stream", func(t *testing.T) {
		l.mu.Lock()
		l.checkpoints["a"] = good
		recs := l.streams["a"]
		l.streams["a"] = slices.Delete(slices.Clone(recs), 5, 6)
		l.mu.Unlock()
		t.Cleanup(func() { l.mu.Lock(); l.streams["a"] = recs; l.mu.Unlock() })
		fresh := coldStore(t, l, false)
		reads := len(l.readsOf("a"))
		requireView(t, fresh, l, "a")
		require.Greater(t, len(l.readsOf("a")), reads, "the subject was scanned")
	})
}

// The write behind the ingest: a session's index is written as records
// come, never replaced by an older checkpoint, and a session past
// MaxCheckpointSeqs is written without one (and loads by scanning).
func TestStore_IndexWrittenBehind(t *testing.T) {
	l := newFakeLoader()
	s := coldStore(t, l, true)
	var last uint64
	for i := range 50 {
		last = ingest(s, l, "a", userRecord(fmt.Sprintf("a %d", i)))
		ingest(s, l, "b", userRecord(fmt.Sprintf("b %d", i)))
	}
	require.Eventually(t, func() bool {
		cp, ok := checkpointsOf(l)["a"]
		return ok && cp.Seq == last
	}, 10*time.Second, time.Millisecond, "written behind, without a shutdown")
	require.Len(t, indexOf(t, l, "a"), 50)

	// Past the bound: no index, the checkpoint still written.
	for i := range MaxCheckpointSeqs {
		last = ingest(s, l, "a", userRecord(fmt.Sprint(i)))
	}
	require.NoError(t, s.SaveCheckpoints(context.Background()))
	cp := checkpointsOf(l)["a"]
	require.Equal(t, Checkpoint{From: 0, Seq: last}, cp, "past the bound: the checkpoint without its index")
	require.NoError(t, s.Close())
	fresh := coldStore(t, l, false)
	seqReads := l.seqReads
	requireView(t, fresh, l, "a")
	require.Equal(t, seqReads, l.seqReads, "loaded by scanning")
	requireView(t, fresh, l, "b")
	require.Equal(t, seqReads+1, l.seqReads, "b, within the bound, by its index")
}

// A checkpoint that does not decode (ErrBadCheckpoint from the Loader)
// loads the session from its subject's start, with a warning.
func TestStore_BadCheckpointLoadsFromTheStart(t *testing.T) {
	l := newFakeLoader()
	ingest0 := func(text string) uint64 { return l.publish("a", userRecord(text)) }
	ingest0("one")
	ingest0("two")
	var logs strings.Builder
	fl := &funcLoader{fakeLoader: l, checkpoint: func(context.Context, string) (Checkpoint, bool, error) {
		return Checkpoint{}, false, fmt.Errorf("checkpoint a: %w: invalid character", ErrBadCheckpoint)
	}}
	s := newStore(t)
	s.Loader = fl
	s.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	s.Advance(l.lastSeq())
	t.Cleanup(func() { s.Close() })
	requireView(t, s, l, "a")
	require.Equal(t, readRange{"a", 0, l.lastSeq()}, l.readsOf("a")[0])
	require.Contains(t, logs.String(), "checkpoint does not decode")
}

// The writer keeps the newest checkpoint of a session waiting to be
// written, in whatever order they come, and after a failed write.
func TestCheckpointWriter_KeepsTheNewest(t *testing.T) {
	release := make(chan struct{})
	var written []map[string]Checkpoint
	fail := true
	w := &checkpointWriter{
		write: func(ctx context.Context, batch map[string]Checkpoint) error {
			if err := blockUntil(ctx, release); err != nil {
				return err
			}
			if fail {
				fail = false
				return fmt.Errorf("no responders")
			}
			written = append(written, batch)
			return nil
		},
		written: func(map[string]Checkpoint, bool) {},
		logger:  func() *slog.Logger { return slog.New(slog.DiscardHandler) },
	}
	w.init()
	t.Cleanup(func() { w.close() })
	newer := Checkpoint{From: 4, Seq: 9}.WithSeqs([]uint64{4, 9})
	w.put("a", newer) // the writer takes it and waits in the write, which fails
	w.put("a", Checkpoint{From: 4, Seq: 7}.WithSeqs([]uint64{4, 7}))
	w.put("a", Checkpoint{From: 4, Seq: 9})
	w.put("b", Checkpoint{From: 1, Seq: 2})
	w.put("b", Checkpoint{From: 0, Seq: 2})
	close(release)
	require.NoError(t, w.flush(context.Background()))
	last := map[string]Checkpoint{}
	for _, b := range written {
		for id, cp := range b {
			last[id] = cp
		}
	}
	require.Equal(t, map[string]Checkpoint{"a": newer, "b": {From: 1, Seq: 2}}, last)
}

// Indexes marked but not yet due are written by a flush at once: a
// shutdown does not wait for the next interval, nor leave them out.
func TestStore_FlushWritesMarkedIndexes(t *testing.T) {
	l := newFakeLoader()
	s := coldStore(t, l, true)
	s.checkpoints.every = time.Hour
	var last uint64
	for i := range 30 {
		last = ingest(s, l, "a", userRecord(fmt.Sprint(i)))
	}
	require.Empty(t, checkpointsOf(l), "not due")
	require.NoError(t, s.checkpoints.flush(context.Background()))
	require.Equal(t, last, checkpointsOf(l)["a"].Seq)
	require.Len(t, indexOf(t, l, "a"), 30)
}
