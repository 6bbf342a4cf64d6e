package projection_test

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"testing"
	"time"

	"github.com/ctxd/ctxd/internal/workload"
	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
)

// The benchmarks run on synthetic sessions shaped like real agent
// transcripts (internal/workload, profile Varied): mostly assistant turns
// with tool calls and their results, user text, some OpenAI-style
// tool_calls, occasional shell runs and extension messages, rare metadata
// rows, browser screenshots and compaction checkpoints. Values are built
// already decoded: decoding is benchmarked in pkg/record.
//
// Run them on one core, as a session is served by one goroutine:
//
//	go test ./pkg/projection -run '^$' -bench . -benchmem -cpu 1

const (
	// screenshotSize is the base64 length of a browser screenshot in the
	// rendered sessions.
	screenshotSize = 20 << 10
	// screenshotsPerSession are spread evenly over a rendered session.
	screenshotsPerSession = 5
	// applyPeriod is the number of records between two compactions in the
	// Apply workload, which keeps the session bounded as in production.
	applyPeriod = 4000
)

var renderSizes = []int{100, 1000, 10000}

func jsonSize(tb testing.TB, values ...any) int {
	tb.Helper()
	n := 0
	for _, v := range values {
		b, err := record.MarshalJSON(v)
		if err != nil {
			tb.Fatal(err)
		}
		n += len(b)
	}
	return n
}

// applyWorkload returns records that cycle cleanly (the last one is a
// compaction, so replaying from the start never pairs across the seam)
// and their average JSON size. Browser images are small here: Apply never
// reads image data, and the records stay around 500 bytes.
func applyWorkload(b *testing.B) ([]any, float64) {
	w := workload.New(1, workload.Varied.WithScreenshots(512, 0))
	var pool []any
	for range 4 {
		start := len(pool)
		for len(pool)-start < applyPeriod-1 {
			pool = append(pool, w.Turn()...)
		}
		pool = append(pool, w.Compaction(workload.Tail(pool[start:], 8)))
	}
	return pool, float64(jsonSize(b, pool...)) / float64(len(pool))
}

func BenchmarkSession_Apply(b *testing.B) {
	pool, avg := applyWorkload(b)
	s := projection.New(projection.Options{})
	var seq uint64
	i := 0
	b.SetBytes(int64(avg))
	b.ReportAllocs()
	for b.Loop() {
		seq++
		s.Apply(seq, pool[i])
		if i++; i == len(pool) {
			i = 0
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(avg, "B/record")
}

// renderSession is a session of n pass-1 messages since its checkpoint,
// with screenshotsPerSession browser screenshots spread evenly, and the
// workload that made it, to continue it.
func renderSession(n int) ([]any, *workload.Generator) {
	p := workload.Varied.WithScreenshots(screenshotSize, 0)
	p.Mix.Browser = 0 // the screenshots are placed here
	w := workload.New(uint64(n), p)
	snapshot := []any{w.User(), w.Answer(), w.User()}
	recs := []any{w.Compaction(snapshot)}
	msgs := len(snapshot)
	every := n / (screenshotsPerSession + 1)
	next := every
	for msgs < n {
		var turn []any
		if msgs >= next {
			turn, next = w.BrowserTurn(), next+every
		} else {
			turn = w.Turn()
		}
		for _, v := range turn {
			recs = append(recs, v)
			if projection.Convert(v) != nil {
				msgs++
			}
		}
	}
	return recs, w
}

// The rendered sessions are those the figures were measured on: the
// digests were taken before the generator moved to internal/workload.
func TestBenchmarkSessions_Unchanged(t *testing.T) {
	digest := func(recs []any) string {
		h := sha256.New()
		for _, v := range recs {
			b, err := record.MarshalJSON(v)
			if err != nil {
				t.Fatal(err)
			}
			h.Write(b)
			h.Write([]byte{'\n'})
		}
		return fmt.Sprintf("%d records %x", len(recs), h.Sum(nil)[:8])
	}
	for n, want := range map[int][2]string{
		100:  {"101 records 2716b40436be93a8", "16 records 38d089f485936951"},
		1000: {"1020 records d19995b94e6e791f", "64 records 7ae708c955812793"},
	} {
		recs, w := renderSession(n)
		if got := digest(recs); got != want[0] {
			t.Errorf("session of %d messages: %s, want %s", n, got, want[0])
		}
		if got := digest(appends(w, appendsPerRebuild(n))); got != want[1] {
			t.Errorf("appends to the session of %d messages: %s, want %s", n, got, want[1])
		}
	}
}

// appends continues a session with k records: calls, each followed by its
// result, and every eighth call a browser call whose screenshot trims the
// one before it.
func appends(w *workload.Generator, k int) []any {
	var out []any
	for j := 0; len(out) < k; j++ {
		if j%8 == 7 {
			out = append(out, w.BrowserTurn()...)
		} else {
			out = append(out, w.CallPair()...)
		}
	}
	return out[:k]
}

// renderFormat is one encoding of the context: the session's cached
// rendering and the plain encoding of a message list it must equal.
type renderFormat struct {
	name   string
	body   func(s *projection.Session) []byte
	reply  func(s *projection.Session) []byte // the whole array
	encode func(dst []byte, msgs []any) ([]byte, error)
}

var renderFormats = []renderFormat{
	{
		name: "json",
		body: func(s *projection.Session) []byte {
			b, _ := s.JSONBody()
			return b
		},
		reply:  func(s *projection.Session) []byte { return s.AppendJSON(nil) },
		encode: func(dst []byte, msgs []any) ([]byte, error) { return record.AppendJSON(dst, msgs) },
	},
	{
		name: "msgpack",
		body: func(s *projection.Session) []byte {
			b, _, _ := s.MsgpackBody()
			return b
		},
		reply:  func(s *projection.Session) []byte { return s.AppendMsgpack(nil) },
		encode: func(dst []byte, msgs []any) ([]byte, error) { return record.AppendMsgpack(dst, msgs) },
	},
}

func newSession(recs []any) *projection.Session {
	s := projection.New(projection.Options{})
	for i, v := range recs {
		s.Apply(uint64(i+1), v)
	}
	return s
}

// appendsPerRebuild bounds how far after-append grows a session before it
// starts again from the n-message state.
func appendsPerRebuild(n int) int { return min(64, max(16, n/10)) }

// BenchmarkSession_Render measures serving a session's context:
//
//   - cached: the body when nothing changed, which must cost the same at
//     every size;
//   - after-append: Apply one record (a call, then its result, which
//     changes the call's message; some results carry a screenshot, which
//     trims the previous one), then render the body. MB/s counts the body
//     served. It also reports encode-ns/op, the cost of encoding the whole
//     reply measured interleaved on the same session, and x-encode, the
//     ratio of the two;
//   - encode-reply: the baseline, encoding Build's messages from scratch.
func BenchmarkSession_Render(b *testing.B) {
	for _, n := range renderSizes {
		recs, w := renderSession(n)
		tail := appends(w, appendsPerRebuild(n))
		msgs := projection.Build(projection.Numbered(recs), projection.Options{}).Messages
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			for _, f := range renderFormats {
				b.Run(f.name, func(b *testing.B) {
					checkBody(b, f, newSession(recs), recs)
					b.Run("cached", func(b *testing.B) { benchCached(b, f, recs) })
					b.Run("after-append", func(b *testing.B) { benchAfterAppend(b, f, recs, tail) })
					b.Run("encode-reply", func(b *testing.B) { benchEncodeReply(b, f, msgs) })
				})
			}
		})
	}
}

// checkBody makes sure the session renders what encoding Build's
// messages gives: a fast wrong answer is not worth measuring.
func checkBody(b *testing.B, f renderFormat, s *projection.Session, recs []any) {
	b.Helper()
	whole, err := f.encode(nil, projection.Build(projection.Numbered(recs), projection.Options{}).Messages)
	if err != nil {
		b.Fatal(err)
	}
	if got := f.reply(s); !bytes.Equal(got, whole) {
		b.Fatalf("%s rendering differs from encoding Build's messages (%d bytes, want %d)", f.name, len(got), len(whole))
	}
}

func benchCached(b *testing.B, f renderFormat, recs []any) {
	s := newSession(recs)
	f.body(s)
	var body []byte
	b.ReportAllocs()
	for b.Loop() {
		body = f.body(s)
	}
	b.ReportMetric(float64(len(body)), "body-B")
}

func benchAfterAppend(b *testing.B, f renderFormat, recs, tail []any) {
	var (
		s       *projection.Session
		seq     uint64
		next    int
		enc     []byte
		encTime time.Duration
		encRuns int
		bodyB   int
	)
	rebuild := func() {
		s = newSession(recs)
		f.body(s)
		seq, next = uint64(len(recs)), 0
	}
	rebuild()
	b.ReportAllocs()
	for b.Loop() {
		if next == len(tail) {
			b.StopTimer()
			rebuild()
			b.StartTimer()
		}
		seq++
		s.Apply(seq, tail[next])
		next++
		body := f.body(s)
		bodyB += len(body)
		// Sample the baseline every third append, so that it sees calls
		// and results alike.
		if next%3 == 0 {
			b.StopTimer()
			msgs := s.Messages()
			start := time.Now()
			var err error
			if enc, err = f.encode(enc[:0], msgs); err != nil {
				b.Fatal(err)
			}
			encTime += time.Since(start)
			encRuns++
			b.StartTimer()
		}
	}
	// The session must still answer what Build does over the same records.
	checkBody(b, f, s, append(append([]any(nil), recs...), tail[:next]...))
	b.SetBytes(int64(bodyB / b.N))
	if encRuns > 0 {
		op := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
		encNs := float64(encTime.Nanoseconds()) / float64(encRuns)
		b.ReportMetric(encNs, "encode-ns/op")
		b.ReportMetric(op/encNs, "x-encode")
	}
}

func benchEncodeReply(b *testing.B, f renderFormat, msgs []any) {
	out, err := f.encode(nil, msgs)
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 0, len(out))
	b.SetBytes(int64(len(out)))
	b.ReportAllocs()
	for b.Loop() {
		buf, _ = f.encode(buf[:0], msgs)
	}
}

// BenchmarkBuild is the rebuild-per-request baseline: the batch passes
// over the whole session, then encoding the reply.
func BenchmarkBuild(b *testing.B) {
	for _, n := range renderSizes {
		recs, _ := renderSession(n)
		numbered := projection.Numbered(recs)
		size := jsonSize(b, recs...)
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			b.Run("build", func(b *testing.B) {
				b.SetBytes(int64(size))
				b.ReportAllocs()
				for b.Loop() {
					projection.Build(numbered, projection.Options{})
				}
				b.ReportMetric(float64(b.N*len(recs))/b.Elapsed().Seconds(), "records/s")
			})
			b.Run("build+json", func(b *testing.B) {
				var buf []byte
				b.SetBytes(int64(size))
				b.ReportAllocs()
				for b.Loop() {
					res := projection.Build(numbered, projection.Options{})
					buf, _ = record.AppendJSON(buf[:0], res.Messages)
				}
				b.ReportMetric(float64(b.N*len(recs))/b.Elapsed().Seconds(), "records/s")
			})
		})
	}
}

// BenchmarkDecodeShape decodes the ingest figure's records (workload
// Default, screenshots left out) to projection.Shape (shape; reader, as
// the store does), against a whole decode of the same bytes (whole), the
// baseline.
func BenchmarkDecodeShape(b *testing.B) {
	pool, err := workload.Encode(workload.New(11, workload.Default).Cycle(1000))
	if err != nil {
		b.Fatal(err)
	}
	var recs [][]byte
	size := 0
	for _, r := range pool {
		if len(r) < 4096 {
			recs = append(recs, r)
			size += len(r)
		}
	}
	d := record.Decoder{ShareInput: true, ShareShort: true}
	b.Run("whole", func(b *testing.B) {
		b.SetBytes(int64(size / len(recs)))
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if _, _, err := d.DecodeCanonical(recs[i%len(recs)]); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("shape", func(b *testing.B) {
		b.SetBytes(int64(size / len(recs)))
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			d.DecodeShape(recs[i%len(recs)], projection.Shape)
			i++
		}
	})
	// As the store does: one reader, each skeleton built where the last
	// one was.
	b.Run("reader", func(b *testing.B) {
		r := d.ShapeReader(projection.Shape)
		b.SetBytes(int64(size / len(recs)))
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			r.Decode(recs[i%len(recs)])
			i++
		}
	})
}
