package store

import (
	"fmt"
	"testing"

	"github.com/ctxd/ctxd/internal/workload"
)

// BenchmarkStore_ApplyIngest applies the records of ctxd bench's ingest
// figure (workload.Default: 200 KiB screenshots every 100 messages, a
// compaction every 1 000 records) to 50 live sessions in turn, as the
// ingest does: the store's and the projection's CPU a record, without
// the delivery.
func BenchmarkStore_ApplyIngest(b *testing.B) {
	const sessions = 50
	pool, err := workload.Encode(workload.New(11, workload.Default).Cycle(1000))
	if err != nil {
		b.Fatal(err)
	}
	size := 0
	for _, r := range pool {
		size += len(r)
	}
	ids := make([]string, sessions)
	for i := range ids {
		ids[i] = fmt.Sprintf("s%d", i)
	}
	s := New()
	s.Decoder.ShareInput, s.Decoder.ShareShort = true, true // as the app's store
	b.SetBytes(int64(size / len(pool)))
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		// Each session takes the pool in order, as a publisher's turns do.
		s.Apply(ids[i%sessions], uint64(i)+1, pool[(i/sessions)%len(pool)])
		i++
	}
}
