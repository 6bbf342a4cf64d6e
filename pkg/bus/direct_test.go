package bus_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
	"github.com/ctxd/ctxd/pkg/bus"
	"github.com/ctxd/ctxd/pkg/natsd"
)

// bigRecords fills a memory stream BIG with n records of size bytes each,
// alternating between the subjects big.a and big.b, and returns them.
func bigRecords(t *testing.T, js jetstream.JetStream, n, size int) []published {
	t.Helper()
	ctx := testContext(t)
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name:        "BIG",
		Subjects:    []string{"big.>"},
		Storage:     jetstream.MemoryStorage,
		AllowDirect: true,
	})
	require.NoError(t, err)
	var out []published
	for i := range n {
		subj := "big.a"
		if i%2 == 1 {
			subj = "big.b"
		}
		data := fmt.Sprintf("record %d ", i)
		data += string(bytes.Repeat([]byte{'x'}, size-len(data)))
		ack, err := js.Publish(ctx, subj, []byte(data))
		require.NoError(t, err)
		out = append(out, published{subj, ack.Sequence, data})
	}
	return out
}

// A server ends a batched direct get once it has sent a number of bytes
// (the request's max_bytes, else its max_pending, 64 MiB by default):
// with large records a batch holds fewer records than asked for. Every
// read goes on from there, and hands on every record.
func TestDirectReads_ShortBatches(t *testing.T) {
	js := natstest.JetStream(t)
	nc := js.Conn()
	all := bigRecords(t, js, 72, 1<<20) // 72 MiB: more than the server sends in one batch
	ctx := testContext(t)

	var got []published
	require.NoError(t, bus.ReadRange(ctx, nc, "BIG", 1, 72, func(m bus.Msg) error {
		got = append(got, asPublished(m))
		return nil
	}))
	require.Equal(t, len(all), len(got), "ReadRange hands on every record")
	require.Equal(t, all, got)

	var seqs []uint64
	require.NoError(t, bus.ReadSubject(ctx, nc, "BIG", "big.b", 1, 72, func(seq uint64, data []byte) error {
		require.Equal(t, all[seq-1].data, string(data))
		seqs = append(seqs, seq)
		return nil
	}))
	var want []uint64
	for _, p := range all {
		if p.subject == "big.b" {
			want = append(want, p.seq)
		}
	}
	require.Equal(t, want, seqs, "ReadSubject hands on every record of the subject")

	seqs = nil
	require.NoError(t, bus.ReadSeqs(ctx, nc, "BIG", want, func(seq uint64, data []byte) error {
		require.Equal(t, all[seq-1].data, string(data))
		seqs = append(seqs, seq)
		return nil
	}))
	require.Equal(t, want, seqs, "ReadSeqs hands on every record asked for")
}

// A read's inbox holds what one read has in flight, not what a
// synchronous subscription holds by default (65 536 replies, 512 KiB
// allocated and cleared for every read): a reader's request pays a read
// or more of the stream, so that was most of what it allocated.
func TestDirectReads_InboxRoom(t *testing.T) {
	js := natstest.JetStream(t)
	nc := js.Conn()
	all := bigRecords(t, js, 4, 64)
	ctx := testContext(t)
	read := func() {
		require.NoError(t, bus.ReadSubjectSeqs(ctx, nc, "BIG", all[0].subject, []uint64{all[0].seq}, func(uint64, []byte) error { return nil }))
	}
	read()
	const reads = 200
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range reads {
		read()
	}
	runtime.ReadMemStats(&after)
	per := (after.TotalAlloc - before.TotalAlloc) / reads
	t.Logf("%d bytes allocated a read, the server's included", per)
	require.Less(t, per, uint64(128<<10), "bytes allocated a read of one record")
}

// A read by sequences of large records has no more of them in flight
// than the server lets the connection fall behind (its max_pending, here
// 16 MiB, past which it closes the connection as a slow consumer's): 72
// MiB of records are read whole, on one connection, by ReadSeqs and by
// ReadSubjectSeqs.
func TestDirectReads_SeqsOfLargeRecords(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "nats.conf")
	require.NoError(t, os.WriteFile(conf, []byte("max_pending: 16MB\n"), 0o600))
	nc := natstest.Connect(t, natstest.Start(t, func(s *natsd.Server) { s.ConfigFile = conf }))
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	all := bigRecords(t, js, 12, 6<<20)
	ctx := testContext(t)
	var want, seqs []uint64
	for _, p := range all {
		want = append(want, p.seq)
	}
	require.NoError(t, bus.ReadSeqs(ctx, nc, "BIG", want, func(seq uint64, data []byte) error {
		require.Equal(t, all[seq-1].data, string(data))
		seqs = append(seqs, seq)
		return nil
	}))
	require.Equal(t, want, seqs)
	seqs = nil
	for _, subj := range []string{"big.a", "big.b"} {
		var of []uint64
		for _, p := range all {
			if p.subject == subj {
				of = append(of, p.seq)
			}
		}
		require.NoError(t, bus.ReadSubjectSeqs(ctx, nc, "BIG", subj, of, func(seq uint64, data []byte) error {
			require.Equal(t, all[seq-1].data, string(data))
			seqs = append(seqs, seq)
			return nil
		}), subj)
	}
	require.Len(t, seqs, len(all))
	require.Zero(t, nc.Stats().Reconnects, "the connection was closed as a slow consumer's")
}

// CountSubject counts a subject's messages from a sequence on: those
// stored, less those deleted; none for a subject without any, or from
// past its last.
func TestCountSubject(t *testing.T) {
	js := natstest.JetStream(t)
	nc := js.Conn()
	all := bigRecords(t, js, 40, 100)
	ctx := testContext(t)
	count := func(subj string, from uint64) uint64 {
		t.Helper()
		n, err := bus.CountSubject(ctx, nc, "BIG", subj, from)
		require.NoError(t, err)
		return n
	}
	want := func(subj string, from uint64) uint64 {
		var n uint64
		for _, r := range all {
			if r.subject == subj && r.seq >= from {
				n++
			}
		}
		return n
	}
	for _, subj := range []string{"big.a", "big.b"} {
		for _, from := range []uint64{0, 1, 2, 3, 17, 39, 40, 41, 1000} {
			require.Equal(t, want(subj, from), count(subj, from), "%s from %d", subj, from)
		}
	}
	require.Zero(t, count("big.c", 1), "a subject without messages")

	st, err := js.Stream(ctx, "BIG")
	require.NoError(t, err)
	require.NoError(t, st.DeleteMsg(ctx, 3))
	require.NoError(t, st.DeleteMsg(ctx, 1))
	all = slices.DeleteFunc(all, func(r published) bool { return r.seq == 1 || r.seq == 3 })
	for _, from := range []uint64{1, 2, 3, 4} {
		require.Equal(t, want("big.a", from), count("big.a", from), "after deletions, from %d", from)
	}
}
