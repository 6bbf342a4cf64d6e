package bus_test

import (
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
	"github.com/ctxd/ctxd/pkg/bus"
)

// BenchmarkCountSubject measures the count a load by a checkpoint's
// index asks for beside its reads (CountSubject), against the read of
// the index's records (ReadSubjectSeqs), on a file stream of 1 000
// subjects of 200 records of 500 bytes each, interleaved.
//
//	go test ./pkg/bus -run '^$' -bench CountSubject -benchtime 2000x
func BenchmarkCountSubject(b *testing.B) {
	const subjects, per = 1000, 200
	js := natstest.JetStream(b)
	nc := js.Conn()
	ctx := b.Context()
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "C", Subjects: []string{"c.>"}, AllowDirect: true})
	require.NoError(b, err)
	data := make([]byte, 500)
	seqs := make([][]uint64, subjects)
	for i := range subjects * per {
		s := i % subjects
		ack, err := js.PublishAsync(fmt.Sprintf("c.%d", s), data)
		require.NoError(b, err)
		_ = ack
		seqs[s] = append(seqs[s], uint64(i+1))
		if i%4096 == 4095 {
			<-js.PublishAsyncComplete()
		}
	}
	<-js.PublishAsyncComplete()
	b.Run("count", func(b *testing.B) {
		for i := range b.N {
			s := i % subjects
			n, err := bus.CountSubject(ctx, nc, "C", fmt.Sprintf("c.%d", s), seqs[s][0])
			require.NoError(b, err)
			require.Equal(b, uint64(per), n)
		}
	})
	b.Run("read-index", func(b *testing.B) {
		for i := range b.N {
			s := i % subjects
			require.NoError(b, bus.ReadSubjectSeqs(ctx, nc, "C", fmt.Sprintf("c.%d", s), seqs[s], func(uint64, []byte) error { return nil }))
		}
	})
}
