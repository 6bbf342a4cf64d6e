package bus_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
	"github.com/ctxd/ctxd/pkg/bus"
	"github.com/ctxd/ctxd/pkg/subject"
	"github.com/ctxd/ctxd/streams"
)

// randomSession returns a session id of 1 to 40 characters of the
// allowed alphabet.
func randomSession(rng *rand.Rand) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-"
	b := make([]byte, 1+rng.IntN(40))
	for i := range b {
		b[i] = alphabet[rng.IntN(len(alphabet))]
	}
	return string(b)
}

// The server stores a record published to transcripts.<session> on
// transcripts.<k>.<session> with k = subject.Partition(session, P), for
// many session ids and several P.
func TestPartition_SameAsServer(t *testing.T) {
	nc := natstest.Connect(t, natstest.Start(t))
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx := testContext(t)
	rng := rand.New(rand.NewPCG(1, 2))
	for _, p := range []int{2, 7, 16, 64} {
		cfg := transcripts(t)
		cfg.Name = fmt.Sprintf("T%d", p)
		cfg.Subjects = []string{fmt.Sprintf("t%d.>", p)}
		cfg.SubjectTransform = &jetstream.SubjectTransformConfig{Source: fmt.Sprintf("t%d.*", p), Destination: fmt.Sprintf("t%d.{{partition(%d,1)}}.{{wildcard(1)}}", p, p)}
		st, err := js.CreateStream(ctx, cfg)
		require.NoError(t, err)
		for range 500 {
			s := randomSession(rng)
			ack, err := js.Publish(ctx, fmt.Sprintf("t%d.%s", p, s), []byte("{}"))
			require.NoError(t, err)
			m, err := st.GetMsg(ctx, ack.Sequence)
			require.NoError(t, err)
			require.Equal(t, fmt.Sprintf("t%d.%d.%s", p, subject.Partition(s, p), s), m.Subject, "P=%d session %q", p, s)
		}
	}
}

// On a partitioned stream a publisher's expected last sequence of its
// session works as before: the server checks it on the stored subject.
func TestPartition_ExpectedLastSubjectSequence(t *testing.T) {
	nc := natstest.Connect(t, natstest.Start(t))
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx := testContext(t)
	cfg := transcripts(t)
	cfg.SubjectTransform = streams.PartitionTransform(16)
	_, err = js.CreateStream(ctx, cfg)
	require.NoError(t, err)
	a1, err := js.Publish(ctx, "transcripts.s1", []byte("1"), jetstream.WithExpectLastSequencePerSubject(0))
	require.NoError(t, err)
	_, err = js.Publish(ctx, "transcripts.s2", []byte("x"))
	require.NoError(t, err)
	a2, err := js.Publish(ctx, "transcripts.s1", []byte("2"), jetstream.WithExpectLastSequencePerSubject(a1.Sequence))
	require.NoError(t, err)
	_, err = js.Publish(ctx, "transcripts.s1", []byte("3"), jetstream.WithExpectLastSequencePerSubject(a1.Sequence))
	var apiErr *jetstream.APIError
	require.True(t, errors.As(err, &apiErr), "%v", err)
	require.Equal(t, jetstream.ErrorCode(10071), apiErr.ErrorCode)
	_, err = js.Publish(ctx, "transcripts.s1", []byte("3"), jetstream.WithExpectLastSequencePerSubject(a2.Sequence))
	require.NoError(t, err)
	// bus.Append's session log, read on the stored subject, agrees.
	l := bus.Layout{Stream: cfg.Name, P: 16}
	var seqs []uint64
	require.NoError(t, l.ReadSubject(ctx, nc, "s1", 1, ^uint64(0), func(seq uint64, _ []byte) error {
		seqs = append(seqs, seq)
		return nil
	}))
	require.Equal(t, []uint64{a1.Sequence, a2.Sequence, a2.Sequence + 1}, seqs)
}

// A stream partitioned after it had records keeps them where they are,
// with their sequences; a session's reads cover both its subjects, in
// order, and its last record is the later subject's.
func TestPartition_Migrate(t *testing.T) {
	nc := natstest.Connect(t, natstest.Start(t))
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx := testContext(t)
	ensureTranscripts(t, js)
	want := map[string][]uint64{}
	publish := func(n int) {
		for i := range n {
			s := fmt.Sprintf("s%d", i%5)
			ack, err := js.Publish(ctx, "transcripts."+s, []byte(fmt.Sprint(i)))
			require.NoError(t, err)
			want[s] = append(want[s], ack.Sequence)
		}
	}
	publish(23)
	l, err := bus.Partition(ctx, js.Conn(), "TRANSCRIPTS", 16)
	require.NoError(t, err)
	require.Equal(t, uint64(23), l.After)
	publish(17)
	st, err := js.Stream(ctx, "TRANSCRIPTS")
	require.NoError(t, err)
	have, err := bus.LayoutOf(st.CachedInfo().Config)
	require.NoError(t, err)
	require.Equal(t, l.Layout, have)
	for s, seqs := range want {
		var got []uint64
		require.NoError(t, l.ReadSubject(ctx, nc, s, 1, ^uint64(0), func(seq uint64, _ []byte) error {
			got = append(got, seq)
			return nil
		}))
		require.Equal(t, seqs, got, s)
		got = nil
		require.NoError(t, l.ReadSubject(ctx, nc, s, seqs[2], seqs[len(seqs)-2], func(seq uint64, _ []byte) error {
			got = append(got, seq)
			return nil
		}))
		require.Equal(t, seqs[2:len(seqs)-1], got, s)
		last, upTo, err := l.LastOf(ctx, nc, s)
		require.NoError(t, err)
		require.Equal(t, seqs[len(seqs)-1], last.Seq)
		require.GreaterOrEqual(t, upTo, uint64(40))
		err = l.ReadSubjectSeqs(ctx, nc, s, seqs, func(uint64, []byte) error { return nil })
		require.Error(t, err, "an index across the boundary is stale: the store reads the subjects")
		// Counted on both subjects.
		for _, from := range []uint64{0, 1, seqs[2], l.After, l.After + 1, seqs[len(seqs)-1], seqs[len(seqs)-1] + 1} {
			n, err := l.Count(ctx, nc, s, from)
			require.NoError(t, err)
			require.Equal(t, uint64(len(upFrom(seqs, from))), n, "%s from %d", s, from)
		}
		// The sizes of its records, on both its subjects, without them.
		stream, err := bus.OpenStream(ctx, nc, "TRANSCRIPTS")
		require.NoError(t, err)
		got = nil
		sizes := map[uint64]int{}
		require.NoError(t, l.ReadSubject(ctx, nc, s, 1, ^uint64(0), func(seq uint64, data []byte) error {
			sizes[seq] = len(data)
			return nil
		}))
		require.NoError(t, stream.SessionSizes(ctx, s, 1, ^uint64(0), func(seq uint64, size int) error {
			require.Equal(t, sizes[seq], size, "seq %d", seq)
			got = append(got, seq)
			return nil
		}))
		require.Equal(t, seqs, got, s)
		got = nil
		require.NoError(t, stream.SessionSizes(ctx, s, 1, seqs[len(seqs)-2], func(seq uint64, _ int) error {
			got = append(got, seq)
			return nil
		}))
		require.Equal(t, seqs[:len(seqs)-1], got, "up to a sequence")
		got = nil
		require.NoError(t, stream.SessionSizes(ctx, s, seqs[1], ^uint64(0), func(seq uint64, _ int) error {
			got = append(got, seq)
			return nil
		}))
		require.Equal(t, seqs[1:], got, "from a sequence")
		lastSeq, err := stream.SessionLast(ctx, s)
		require.NoError(t, err)
		require.Equal(t, seqs[len(seqs)-1], lastSeq, "the last")
	}
	// Again: nothing changes; another count is refused.
	again, err := bus.Partition(ctx, js.Conn(), "TRANSCRIPTS", 16)
	require.NoError(t, err)
	require.Equal(t, l, again)
	_, err = bus.Partition(ctx, js.Conn(), "TRANSCRIPTS", 8)
	require.ErrorIs(t, err, bus.ErrIncompatible)
}

// ReadPartition reads one partition's records of a range, and only
// them.
func TestReadPartition(t *testing.T) {
	nc := natstest.Connect(t, natstest.Start(t))
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx := testContext(t)
	cfg := transcripts(t)
	cfg.SubjectTransform = streams.PartitionTransform(4)
	_, err = js.CreateStream(ctx, cfg)
	require.NoError(t, err)
	byPart := map[int][]uint64{}
	for i := range 60 {
		s := fmt.Sprintf("s%d", i%9)
		ack, err := js.Publish(ctx, "transcripts."+s, []byte("{}"))
		require.NoError(t, err)
		k := subject.Partition(s, 4)
		byPart[k] = append(byPart[k], ack.Sequence)
	}
	for k, seqs := range byPart {
		require.Greater(t, len(seqs), 3)
		var got []uint64
		through := seqs[len(seqs)-1]
		require.NoError(t, bus.ReadPartition(ctx, nc, "TRANSCRIPTS", k, seqs[1], through-1, through, func(m bus.Msg) error {
			_, pk, err := subject.SessionOfStored(m.Subject)
			require.NoError(t, err)
			require.Equal(t, k, pk)
			got = append(got, m.Seq)
			return nil
		}))
		require.Equal(t, seqs[1:len(seqs)-1], got, "partition %d", k)
	}
}

// A record's stored subject: its partition's after the stream was
// partitioned, its publish subject before and on an unpartitioned stream.
func TestLayout_SubjectAt(t *testing.T) {
	s := "demo"
	k := subject.Partition(s, 4)
	part := fmt.Sprintf("transcripts.%d.demo", k)
	for _, tc := range []struct {
		layout bus.Layout
		seq    uint64
		want   string
	}{
		{bus.Layout{P: 1}, 1, "transcripts.demo"},
		{bus.Layout{P: 0}, 9, "transcripts.demo"},
		{bus.Layout{P: 4}, 1, part},
		{bus.Layout{P: 4, After: 10}, 10, "transcripts.demo"},
		{bus.Layout{P: 4, After: 10}, 11, part},
	} {
		require.Equal(t, tc.want, tc.layout.SubjectAt(s, tc.seq), "%+v at %d", tc.layout, tc.seq)
	}
}

// interrupt leaves TRANSCRIPTS as a partitioning stopped half way may:
// 15 records of alpha on transcripts.alpha, the transform of 4
// partitions, and the metadata ctxd_partitioned_after as after says
// ("": none).
func interrupt(t *testing.T, js jetstream.JetStream, after string) {
	t.Helper()
	ctx := testContext(t)
	st := ensureTranscripts(t, js)
	for i := range 15 {
		_, err := js.Publish(ctx, "transcripts.alpha", []byte(fmt.Sprintf(`{"role":"user","content":"m%d"}`, i)))
		require.NoError(t, err)
	}
	cfg := st.CachedInfo().Config
	cfg.SubjectTransform = streams.PartitionTransform(4)
	if after != "" {
		cfg.Metadata = map[string]string{streams.PartitionedAfter: after}
	}
	_, err := js.UpdateStream(ctx, cfg)
	require.NoError(t, err)
}

// A partitioning stopped half way (a crash between the transform and
// the metadata that says where the older records end, or a boundary
// read before records that the transform did not catch) is finished by
// running Partition again: every record of alpha is read.
func TestPartition_FinishesAnInterruptedOne(t *testing.T) {
	for _, tc := range []struct{ name, after string }{
		{"transform without metadata", ""},
		{"metadata short of the records", "5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc := natstest.Connect(t, natstest.Start(t))
			js, err := jetstream.New(nc)
			require.NoError(t, err)
			ctx := testContext(t)
			interrupt(t, js, tc.after)

			// Found unfinished, by whoever reads the stream.
			st, err := js.Stream(ctx, "TRANSCRIPTS")
			require.NoError(t, err)
			half, err := bus.LayoutOf(st.CachedInfo().Config)
			require.NoError(t, err)
			err = bus.CheckLayout(ctx, nc, half)
			var ue *bus.UnfinishedError
			require.ErrorAs(t, err, &ue)
			require.Equal(t, bus.UnfinishedError{Stream: "TRANSCRIPTS", P: 4, After: half.After, Seq: 15, Subject: "transcripts.alpha"}, *ue)
			require.ErrorContains(t, err, "run ctxd partition --partitions 4 to finish it")
			_, err = bus.OpenStream(ctx, nc, "TRANSCRIPTS")
			require.ErrorAs(t, err, &ue)
			// Another number of partitions is refused, and says how to finish.
			_, err = bus.Partition(ctx, js.Conn(), "TRANSCRIPTS", 8)
			require.ErrorIs(t, err, bus.ErrIncompatible)
			require.ErrorAs(t, err, &ue)
			// Buckets a ctxd may have written from a wrong read.
			for _, b := range []string{streams.SnapshotsBucket, streams.CheckpointsBucket} {
				kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: b})
				require.NoError(t, err)
				_, err = kv.Put(ctx, "alpha", []byte("x"))
				require.NoError(t, err)
			}

			l, err := bus.Partition(ctx, js.Conn(), "TRANSCRIPTS", 4)
			require.NoError(t, err)
			require.True(t, l.Finished)
			require.Equal(t, 4, l.P)
			require.NoError(t, bus.CheckLayout(ctx, nc, l.Layout))
			for _, b := range []string{streams.SnapshotsBucket, streams.CheckpointsBucket} {
				kv, err := js.KeyValue(ctx, b)
				require.NoError(t, err)
				_, err = kv.Get(ctx, "alpha")
				require.ErrorIs(t, err, jetstream.ErrKeyNotFound, "bucket %s emptied", b)
			}
			require.GreaterOrEqual(t, l.After, uint64(15), "the records on transcripts.alpha are before the boundary")
			var seqs []uint64
			require.NoError(t, l.ReadSubject(ctx, nc, "alpha", 1, ^uint64(0), func(seq uint64, _ []byte) error {
				seqs = append(seqs, seq)
				return nil
			}))
			require.Len(t, seqs, 15)
			_, err = js.Publish(ctx, "transcripts.alpha", []byte(`{"role":"user","content":"after"}`))
			require.NoError(t, err)
			seqs = nil
			require.NoError(t, l.ReadSubject(ctx, nc, "alpha", 1, ^uint64(0), func(seq uint64, _ []byte) error {
				seqs = append(seqs, seq)
				return nil
			}))
			require.Equal(t, []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, seqs)
			again, err := bus.Partition(ctx, js.Conn(), "TRANSCRIPTS", 4)
			require.NoError(t, err)
			require.Equal(t, bus.Partitioning{Layout: l.Layout}, again, "finished: nothing more to do")
		})
	}
}

// A record stored between the read of the last sequence and the update
// that adds the transform is on transcripts.<session> past the metadata
// written with it: Partition raises the metadata over it before it
// returns. Publishers race the command here, many times.
func TestPartition_PublishersMeanwhile(t *testing.T) {
	for run := range 10 {
		nc := natstest.Connect(t, natstest.Start(t))
		js, err := jetstream.New(nc)
		require.NoError(t, err)
		ctx := testContext(t)
		ensureTranscripts(t, js)
		stop := make(chan struct{})
		published := make(chan []uint64)
		go func() {
			var seqs []uint64
			defer func() { published <- seqs }()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				ack, err := js.Publish(ctx, "transcripts.alpha", []byte(fmt.Sprint(i)))
				if err != nil {
					return
				}
				seqs = append(seqs, ack.Sequence)
			}
		}()
		for {
			st, err := js.Stream(ctx, "TRANSCRIPTS")
			require.NoError(t, err)
			if st.CachedInfo().State.Msgs >= 20 {
				break
			}
		}
		l, err := bus.Partition(ctx, js.Conn(), "TRANSCRIPTS", 4)
		require.NoError(t, err)
		close(stop)
		seqs := <-published
		require.False(t, l.Finished)
		require.NoError(t, bus.CheckLayout(ctx, nc, l.Layout), "run %d", run)
		var got []uint64
		require.NoError(t, l.ReadSubject(ctx, nc, "alpha", 1, ^uint64(0), func(seq uint64, _ []byte) error {
			got = append(got, seq)
			return nil
		}))
		require.Equal(t, seqs, got, "run %d: every record of alpha is read", run)
	}
}

// upFrom returns the suffix of increasing seqs from from on.
func upFrom(seqs []uint64, from uint64) []uint64 {
	n, _ := slices.BinarySearch(seqs, from)
	return seqs[n:]
}
