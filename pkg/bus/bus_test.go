package bus_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
	"github.com/ctxd/ctxd/pkg/bus"
	"github.com/ctxd/ctxd/streams"
)

// testContext is a context that ends with the test, or after a while.
func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func transcripts(t *testing.T) jetstream.StreamConfig {
	t.Helper()
	cfg, err := streams.Transcripts()
	require.NoError(t, err)
	return cfg
}

// ensureR3Transcripts creates the TRANSCRIPTS stream with three replicas
// on cluster c, through js, and returns its leader's node once it has one.
func ensureR3Transcripts(t *testing.T, c *natstest.Cluster, js jetstream.JetStream) *natstest.Node {
	t.Helper()
	cfg := transcripts(t)
	cfg.Replicas = 3
	_, err := bus.EnsureStream(testContext(t), js, cfg)
	require.NoError(t, err)
	return c.WaitStreamLeader(t, cfg.Name)
}

// ensureTranscripts creates the TRANSCRIPTS stream.
func ensureTranscripts(t *testing.T, js jetstream.JetStream) jetstream.Stream {
	t.Helper()
	st, err := bus.EnsureStream(testContext(t), js, transcripts(t))
	require.NoError(t, err)
	return st
}

// published is a record as stored.
type published struct {
	subject string
	seq     uint64
	data    string
}

// publishN publishes n records round-robin over three sessions.
func publishN(t *testing.T, js jetstream.JetStream, n int) []published {
	t.Helper()
	var out []published
	for i := range n {
		subj := fmt.Sprintf("transcripts.s%d", i%3)
		data := fmt.Sprintf(`{"role":"user","content":"%d"}`, i)
		seq, err := bus.Publish(testContext(t), js, subj, []byte(data), "")
		require.NoError(t, err)
		out = append(out, published{subj, seq, data})
	}
	return out
}

func asPublished(m bus.Msg) published { return published{m.Subject, m.Seq, string(m.Data)} }

// fieldsOf lists the fields named by every *bus.FieldError in err's tree.
func fieldsOf(err error) []string {
	var fields []string
	var walk func(error)
	walk = func(err error) {
		if fe, ok := err.(*bus.FieldError); ok {
			fields = append(fields, fe.Field)
		}
		switch u := err.(type) {
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				walk(e)
			}
		case interface{ Unwrap() error }:
			if e := u.Unwrap(); e != nil {
				walk(e)
			}
		}
	}
	walk(err)
	slices.Sort(fields)
	return fields
}

// Each mutation is a difference from the wanted stream, and the fields it
// must be reported under; none is a difference that matters.
var streamMutations = []struct {
	name   string
	mutate func(*jetstream.StreamConfig)
	fields []string
}{
	{"identical", func(*jetstream.StreamConfig) {}, nil},
	{"other subjects", func(c *jetstream.StreamConfig) { c.Subjects = []string{"transcripts.*"} }, []string{"subjects"}},
	{"more subjects", func(c *jetstream.StreamConfig) { c.Subjects = []string{"transcripts.>", "extra.>"} }, []string{"subjects"}},
	{"work-queue retention", func(c *jetstream.StreamConfig) { c.Retention = jetstream.WorkQueuePolicy }, []string{"retention"}},
	{"interest retention", func(c *jetstream.StreamConfig) { c.Retention = jetstream.InterestPolicy }, []string{"retention"}},
	{"memory storage", func(c *jetstream.StreamConfig) { c.Storage = jetstream.MemoryStorage }, []string{"storage"}},
	{"short duplicate window", func(c *jetstream.StreamConfig) { c.Duplicates = 30 * time.Second }, []string{"duplicate_window"}},
	{"small max_msg_size", func(c *jetstream.StreamConfig) { c.MaxMsgSize = 1 << 20 }, []string{"max_msg_size"}},
	{"no direct get", func(c *jetstream.StreamConfig) { c.AllowDirect = false }, []string{"allow_direct"}},
	{"everything", func(c *jetstream.StreamConfig) {
		c.Subjects = []string{"transcripts.*"}
		c.Retention = jetstream.InterestPolicy
		c.Storage = jetstream.MemoryStorage
		c.Duplicates = time.Minute
		c.MaxMsgSize = 1024
		c.AllowDirect = false
	}, []string{"allow_direct", "duplicate_window", "max_msg_size", "retention", "storage", "subjects"}},

	// Differences ctxd does not rely on.
	{"longer duplicate window", func(c *jetstream.StreamConfig) { c.Duplicates = 10 * time.Minute }, nil},
	{"larger max_msg_size", func(c *jetstream.StreamConfig) { c.MaxMsgSize = 16 << 20 }, nil},
	{"unlimited max_msg_size", func(c *jetstream.StreamConfig) { c.MaxMsgSize = -1 }, nil},
	{"description and consumer limit", func(c *jetstream.StreamConfig) {
		c.Description = "mine"
		c.MaxConsumers = 10
	}, nil}, // limits that delete records: stream_test.go
}

func TestCheckStream(t *testing.T) {
	want := transcripts(t)
	for _, tt := range streamMutations {
		t.Run(tt.name, func(t *testing.T) {
			have := want
			have.Subjects = slices.Clone(want.Subjects)
			tt.mutate(&have)
			err := bus.CheckStream(have, want)
			if tt.fields == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, bus.ErrIncompatible)
			require.Equal(t, tt.fields, fieldsOf(err))
			var fe *bus.FieldError
			require.ErrorAs(t, err, &fe)
			require.Equal(t, "stream TRANSCRIPTS", fe.Object)
			require.Contains(t, err.Error(), "field "+tt.fields[0])
		})
	}
}

func TestEnsureStream(t *testing.T) {
	js := natstest.JetStream(t)
	ctx := testContext(t)
	want := transcripts(t)

	st, err := bus.EnsureStream(ctx, js, want)
	require.NoError(t, err)
	got := st.CachedInfo().Config
	require.Equal(t, "TRANSCRIPTS", got.Name)
	require.Equal(t, []string{"transcripts.>"}, got.Subjects)
	require.Equal(t, jetstream.LimitsPolicy, got.Retention)
	require.Equal(t, jetstream.FileStorage, got.Storage)
	require.Equal(t, 2*time.Minute, got.Duplicates)
	require.Equal(t, int32(8<<20), got.MaxMsgSize)
	require.True(t, got.AllowDirect)

	// Idempotent: the existing stream is checked and kept.
	seq, err := bus.Publish(ctx, js, "transcripts.s1", []byte(`{}`), "")
	require.NoError(t, err)
	st, err = bus.EnsureStream(ctx, js, want)
	require.NoError(t, err)
	info, err := st.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(1), info.State.Msgs, "the stream is not recreated")
	require.Equal(t, seq, info.State.LastSeq)
	names := js.StreamNames(ctx)
	var all []string
	for n := range names.Name() {
		all = append(all, n)
	}
	require.NoError(t, names.Err())
	require.Equal(t, []string{"TRANSCRIPTS"}, all)
}

// An existing stream ctxd cannot run on is refused, naming every field,
// and left as it is.
func TestEnsureStream_Existing(t *testing.T) {
	js := natstest.JetStream(t)
	want := transcripts(t)
	for _, tt := range streamMutations {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testContext(t)
			have := want
			have.Subjects = slices.Clone(want.Subjects)
			tt.mutate(&have)
			_, err := js.CreateStream(ctx, have)
			require.NoError(t, err)
			t.Cleanup(func() { js.DeleteStream(context.Background(), want.Name) })

			st, err := bus.EnsureStream(ctx, js, want)
			if tt.fields == nil {
				require.NoError(t, err)
				require.NotNil(t, st)
				return
			}
			require.Nil(t, st)
			require.True(t, errors.Is(err, bus.ErrIncompatible), "%v", err)
			var fe *bus.FieldError
			require.True(t, errors.As(err, &fe), "%v", err)
			require.Equal(t, tt.fields, fieldsOf(err), "%v", err)

			kept, err := js.Stream(ctx, want.Name)
			require.NoError(t, err)
			require.Equal(t, have.Storage, kept.CachedInfo().Config.Storage, "the stream is left as it is")
			require.Equal(t, have.Subjects, kept.CachedInfo().Config.Subjects)
		})
	}
}

func TestEnsureConsumer(t *testing.T) {
	js := natstest.JetStream(t)
	ctx := testContext(t)
	st := ensureTranscripts(t, js)
	cfg, err := streams.Ingest()
	require.NoError(t, err)

	c, err := bus.EnsureConsumer(ctx, st, cfg)
	require.NoError(t, err)
	info := c.CachedInfo()
	require.Equal(t, "ctxd", info.Config.Durable)
	require.Equal(t, jetstream.AckNonePolicy, info.Config.AckPolicy)
	require.Equal(t, "transcripts.>", info.Config.FilterSubject)

	// Again, and with a changed description: the consumer is updated.
	_, err = bus.EnsureConsumer(ctx, st, cfg)
	require.NoError(t, err)
	cfg.Description = "updated"
	c, err = bus.EnsureConsumer(ctx, st, cfg)
	require.NoError(t, err)
	require.Equal(t, "updated", c.CachedInfo().Config.Description)

	// A change the server refuses names the consumer and the stream.
	cfg.AckPolicy = jetstream.AckAllPolicy
	_, err = bus.EnsureConsumer(ctx, st, cfg)
	require.Error(t, err)
	require.Contains(t, err.Error(), "consumer ctxd on stream TRANSCRIPTS")
}

func TestPublish(t *testing.T) {
	js := natstest.JetStream(t)
	ctx := testContext(t)
	st := ensureTranscripts(t, js)

	steps := []struct {
		subject, data, msgID string
		seq                  uint64
	}{
		{"transcripts.s1", `{"n":1}`, "", 1},
		{"transcripts.s1", `{"n":1}`, "", 2}, // no id: stored again
		{"transcripts.s2", `{"n":2}`, "id-a", 3},
		{"transcripts.s2", `{"n":2}`, "id-a", 3}, // a retry: stored once
		{"transcripts.s2", `{"n":3}`, "id-b", 4},
		{"transcripts.s1", `{"n":2}`, "id-a", 3}, // the id alone decides
	}
	for i, step := range steps {
		seq, err := bus.Publish(ctx, js, step.subject, []byte(step.data), step.msgID)
		require.NoError(t, err, "step %d", i)
		require.Equal(t, step.seq, seq, "step %d", i)
	}
	info, err := st.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(4), info.State.Msgs)
	m, err := st.GetMsg(ctx, 3)
	require.NoError(t, err)
	require.Equal(t, "transcripts.s2", m.Subject)
	require.Equal(t, `{"n":2}`, string(m.Data))

	_, err = bus.Publish(ctx, js, "elsewhere.s1", []byte(`{}`), "")
	require.Error(t, err, "no stream takes the subject")
	require.Contains(t, err.Error(), "publish to elsewhere.s1")
}

func TestReplay(t *testing.T) {
	js := natstest.JetStream(t)
	ensureTranscripts(t, js)
	all := publishN(t, js, 25)

	tests := []struct {
		from       uint64
		first, end int // the records expected: all[first:end]
	}{
		{from: 0, first: 0, end: 25},
		{from: 1, first: 0, end: 25},
		{from: 10, first: 9, end: 25},
		{from: 25, first: 24, end: 25},
		{from: 26, first: 25, end: 25},
		{from: 1000, first: 25, end: 25},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("from %d", tt.from), func(t *testing.T) {
			var got []published
			n, last, err := bus.Replay(testContext(t), js, "TRANSCRIPTS", tt.from, func(m bus.Msg) {
				got = append(got, asPublished(m))
			})
			require.NoError(t, err)
			want := all[tt.first:tt.end]
			if len(want) == 0 {
				require.Empty(t, got)
			} else {
				require.Equal(t, want, got)
			}
			require.Equal(t, len(want), n)
			if len(want) == 0 {
				require.Zero(t, last)
			} else {
				require.Equal(t, want[len(want)-1].seq, last)
			}
		})
	}
}

func TestReplay_EmptyStream(t *testing.T) {
	js := natstest.JetStream(t)
	ensureTranscripts(t, js)
	n, last, err := bus.Replay(testContext(t), js, "TRANSCRIPTS", 1, func(m bus.Msg) {
		t.Errorf("handler called for %d", m.Seq)
	})
	require.NoError(t, err)
	require.Zero(t, n)
	require.Zero(t, last)
}

func TestReplay_MissingStream(t *testing.T) {
	js := natstest.JetStream(t)
	_, _, err := bus.Replay(testContext(t), js, "NOPE", 1, func(bus.Msg) {})
	require.ErrorIs(t, err, jetstream.ErrStreamNotFound)
}

// Replay stops at the end of the stream as it was when it started, even
// while records keep coming.
func TestReplay_StopsAtTheEnd(t *testing.T) {
	js := natstest.JetStream(t)
	ensureTranscripts(t, js)
	all := publishN(t, js, 10)

	var got []published
	n, last, err := bus.Replay(testContext(t), js, "TRANSCRIPTS", 1, func(m bus.Msg) {
		got = append(got, asPublished(m))
		_, err := bus.Publish(context.Background(), js, "transcripts.more", []byte(`{}`), "")
		require.NoError(t, err)
	})
	require.NoError(t, err)
	require.Equal(t, 10, n)
	require.Equal(t, uint64(10), last)
	require.Equal(t, all, got)
}

// Deleted records are not waited for: not in the middle, and not at the
// end, where nothing is left to read from the start sequence on.
func TestReplay_DeletedRecords(t *testing.T) {
	js := natstest.JetStream(t)
	st := ensureTranscripts(t, js)
	all := publishN(t, js, 6)
	ctx := testContext(t)
	for _, seq := range []uint64{2, 5, 6} {
		require.NoError(t, st.DeleteMsg(ctx, seq))
	}

	tests := []struct {
		from uint64
		want []published
	}{
		{1, []published{all[0], all[2], all[3]}},
		{2, []published{all[2], all[3]}},
		{4, []published{all[3]}},
		{5, nil},
		{6, nil},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("from %d", tt.from), func(t *testing.T) {
			var got []published
			n, last, err := bus.Replay(testContext(t), js, "TRANSCRIPTS", tt.from, func(m bus.Msg) {
				got = append(got, asPublished(m))
			})
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
			require.Equal(t, len(tt.want), n)
			if len(tt.want) > 0 {
				require.Equal(t, tt.want[len(tt.want)-1].seq, last)
			}
		})
	}
}

func TestReplay_Cancelled(t *testing.T) {
	js := natstest.JetStream(t)
	ensureTranscripts(t, js)
	publishN(t, js, 5)

	ctx, cancel := context.WithCancel(context.Background())
	var got int
	n, _, err := bus.Replay(ctx, js, "TRANSCRIPTS", 1, func(bus.Msg) {
		got++
		if got == 2 {
			cancel()
		}
	})
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, 2, n)
	require.Equal(t, 2, got)
}

// collector is a handler that keeps what it is given.
type collector struct {
	mu   sync.Mutex
	msgs []published
}

func (c *collector) handle(m bus.Msg) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.msgs = append(c.msgs, asPublished(m))
}

func (c *collector) got() []published {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.msgs)
}

func TestStartIngest(t *testing.T) {
	js := natstest.JetStream(t)
	ctx := testContext(t)
	st := ensureTranscripts(t, js)
	cfg, err := streams.Ingest()
	require.NoError(t, err)
	cons, err := bus.EnsureConsumer(ctx, st, cfg)
	require.NoError(t, err)

	before := publishN(t, js, 30)
	var c collector
	in, err := bus.StartIngest(cons, 0, nil, c.handle, nil)
	require.NoError(t, err)
	after := publishN(t, js, 30)
	want := append(before, after...)

	require.Eventually(t, func() bool { return len(c.got()) >= len(want) }, 20*time.Second, 5*time.Millisecond, "waiting for every record to be handled")
	require.Equal(t, want, c.got(), "every record once, in stream order")
	require.NoError(t, in.Close())

	// Delivered records are not delivered again (ack policy none: the
	// server counts a message done once sent): a new ingest on the same
	// durable consumer starts after them.
	more := publishN(t, js, 3)
	var c2 collector
	in2, err := bus.StartIngest(cons, 0, nil, c2.handle, nil)
	require.NoError(t, err)
	t.Cleanup(func() { in2.Close() })
	require.Eventually(t, func() bool { return len(c2.got()) >= len(more) }, 20*time.Second, 5*time.Millisecond, "waiting for the new records to be handled")
	require.Equal(t, more, c2.got())
	require.Len(t, c.got(), len(want), "a closed ingest takes nothing more")
}

// ReadRange reads every subject's messages in a sequence range, skipping
// deleted ones; ReadSeqs reads given sequences; ReadSubject one subject.
func TestDirectReads(t *testing.T) {
	js := natstest.JetStream(t)
	st := ensureTranscripts(t, js)
	all := publishN(t, js, 600) // more than one direct-get batch
	ctx := testContext(t)
	require.NoError(t, st.DeleteMsg(ctx, 5))
	nc := js.Conn()

	var got []published
	require.NoError(t, bus.ReadRange(ctx, nc, "TRANSCRIPTS", 3, 520, func(m bus.Msg) error {
		got = append(got, asPublished(m))
		return nil
	}))
	want := append(append([]published{}, all[2:4]...), all[5:520]...)
	require.Equal(t, want, got)

	got = nil
	require.NoError(t, bus.ReadRange(ctx, nc, "TRANSCRIPTS", 598, 700, func(m bus.Msg) error {
		got = append(got, asPublished(m))
		return nil
	}))
	require.Equal(t, all[597:], got, "a range past the end stops at the end")

	var seqs []uint64
	require.NoError(t, bus.ReadSeqs(ctx, nc, "TRANSCRIPTS", []uint64{9, 5, 300, 1}, func(seq uint64, _ []byte) error {
		seqs = append(seqs, seq)
		return nil
	}))
	require.Equal(t, []uint64{9, 300, 1}, seqs, "in the order given, deleted ones skipped")

	seqs = nil
	require.NoError(t, bus.ReadSubject(ctx, nc, "TRANSCRIPTS", "transcripts.s1", 1, 600, func(seq uint64, _ []byte) error {
		seqs = append(seqs, seq)
		return nil
	}))
	var wantSeqs []uint64
	for s := uint64(2); s <= 600; s += 3 {
		if s != 5 { // deleted
			wantSeqs = append(wantSeqs, s)
		}
	}
	require.Equal(t, wantSeqs, seqs)
}
