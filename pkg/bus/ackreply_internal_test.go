package bus

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

func TestStreamSeq(t *testing.T) {
	for _, tt := range []struct {
		name  string
		reply string
		seq   uint64
		ok    bool
	}{
		{"first form", "$JS.ACK.TRANSCRIPTS.ctxd.1.42.40.1764493200000000000.7", 42, true},
		{"second form", "$JS.ACK._.ABCDEF.TRANSCRIPTS.ctxd.3.42.40.1764493200000000000.7.xyz", 42, true},
		{"second form without the last token", "$JS.ACK.hub.ABCDEF.TRANSCRIPTS.ctxd.3.42.40.1764493200000000000.7", 42, true},
		{"second form with more tokens", "$JS.ACK._.ABCDEF.TRANSCRIPTS.ctxd.3.42.40.17.7.xyz.more", 42, true},
		{"largest sequence", "$JS.ACK.S.c.1.18446744073709551615.1.1.0", 1<<64 - 1, true},
		{"past 2^64-1", "$JS.ACK.S.c.1.18446744073709551616.1.1.0", 0, false},
		{"21 digits", "$JS.ACK.S.c.1.000000000000000000042.1.1.0", 0, false},
		{"leading zeros", "$JS.ACK.S.c.1.00042.1.1.0", 42, true},
		{"zero", "$JS.ACK.S.c.1.0.1.1.0", 0, false},
		{"empty sequence", "$JS.ACK.S.c.1..1.1.0", 0, false},
		{"not a number", "$JS.ACK.S.c.1.4x2.1.1.0", 0, false},
		{"signed", "$JS.ACK.S.c.1.+42.1.1.0", 0, false},
		{"10 tokens", "$JS.ACK.S.c.1.42.1.1.0.x", 0, false},
		{"8 tokens", "$JS.ACK.S.c.1.42.1.1", 0, false},
		{"other prefix", "$JS.NAK.S.c.1.42.1.1.0", 0, false},
		{"an inbox", "_INBOX.abc", 0, false},
		{"empty", "", 0, false},
		{"dots only", "$JS.ACK.......", 0, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			seq, ok := streamSeq(tt.reply)
			require.Equal(t, tt.ok, ok)
			require.Equal(t, tt.seq, seq)
		})
	}
}

// streamSeq agrees with jetstream's Metadata on every subject both read.
func FuzzStreamSeq(f *testing.F) {
	for _, s := range []string{
		"$JS.ACK.TRANSCRIPTS.ctxd.1.42.40.1764493200000000000.7",
		"$JS.ACK._.ABCDEF.TRANSCRIPTS.ctxd.3.42.40.1764493200000000000.7.xyz",
		"$JS.ACK.S.c.1.18446744073709551616.1.1.0",
		"$JS.ACK.......",
		"_INBOX.x",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, reply string) {
		seq, ok := streamSeq(reply)
		if !ok {
			return
		}
		require.Positive(t, seq)
		m := jsMsg(t, reply)
		meta, err := m.Metadata()
		require.NoError(t, err, "streamSeq read %d from %q", seq, reply)
		require.Equal(t, meta.Sequence.Stream, seq, reply)
	})
}

// jsMsg makes a message with the reply subject given, as a consumer
// delivers it; its Metadata is nats.go's reading of the subject, the
// same parser as jetstream's.
func jsMsg(t *testing.T, reply string) *nats.Msg {
	t.Helper()
	return &nats.Msg{Subject: "transcripts.s", Reply: reply, Sub: &nats.Subscription{}}
}

func TestStreamSeq_AgreesWithMetadata(t *testing.T) {
	for _, reply := range []string{
		"$JS.ACK.TRANSCRIPTS.ctxd.1.42.40.1764493200000000000.7",
		"$JS.ACK._.ABCDEF.TRANSCRIPTS.ctxd.3.1234567.40.1764493200000000000.7.xyz",
		"$JS.ACK.hub.ABCDEF.TRANSCRIPTS.ctxd.3.9.40.1764493200000000000.7",
		"$JS.ACK.S.c.1." + strings.Repeat("9", 19) + ".1.1.0",
	} {
		seq, ok := streamSeq(reply)
		require.True(t, ok, reply)
		meta, err := jsMsg(t, reply).Metadata()
		require.NoError(t, err)
		require.Equal(t, meta.Sequence.Stream, seq, reply)
	}
}

// The stream sequence of a delivered message: read in place, and by
// nats.go's Metadata, which the ingest called before.
func BenchmarkStreamSeq(b *testing.B) {
	reply := "$JS.ACK._.ABCDEF.TRANSCRIPTS.ctxd.1.1234567.1234560.1764493200000000000.42.xyz"
	b.Run("streamSeq", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := streamSeq(reply); !ok {
				b.Fatal(reply)
			}
		}
	})
	b.Run("Metadata", func(b *testing.B) {
		b.ReportAllocs()
		m := &nats.Msg{Reply: reply, Sub: &nats.Subscription{}}
		for b.Loop() {
			if _, err := m.Metadata(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
