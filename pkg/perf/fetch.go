package perf

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/ctxd/ctxd/internal/workload"
	"github.com/ctxd/ctxd/pkg/bus"
	"github.com/ctxd/ctxd/pkg/client"
	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/protocol"
	"github.com/ctxd/ctxd/pkg/record"
	"github.com/ctxd/ctxd/pkg/server"
	"github.com/ctxd/ctxd/pkg/subject"
	"github.com/ctxd/ctxd/streams"
)

// requestTimeout bounds every request of the run.
const requestTimeout = time.Minute

// fetchOnce fetches a session's context the way any Go client does.
func fetchOnce(ctx context.Context, nc *nats.Conn, session string, req client.Request) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	data, err := client.Context(ctx, nc, session, req)
	if err != nil {
		return nil, fmt.Errorf("fetch %s: %w", session, err)
	}
	return data, nil
}

// bareOnce requests the bare responder's bytes the same way.
func bareOnce(ctx context.Context, nc *nats.Conn, subj string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	data, err := client.Do(ctx, nc, nats.NewMsg(subj))
	if err != nil {
		return nil, fmt.Errorf("bare request %s: %w", subj, err)
	}
	return data, nil
}

// bareResponder answers requests with fixed bytes: the baseline of a
// fetch, all NATS and nothing of ctxd. A body larger than the max payload
// goes in chunks, with the headers ctxd uses, so that a client makes the
// same round trips for both.
type bareResponder struct {
	subs []*nats.Subscription
}

// chunkRoom is what ctxd's service leaves in a chunk for its headers.
const chunkRoom = 4 << 10

func newBareResponder(nc *nats.Conn, subj string, body []byte) (*bareResponder, error) {
	br := &bareResponder{}
	size := int(nc.MaxPayload()) - chunkRoom
	var first *nats.Msg
	if len(body) <= size {
		first = &nats.Msg{Data: body}
	} else {
		var chunks [][]byte
		for rest := body; len(rest) > 0; {
			n := min(size, len(rest))
			chunks = append(chunks, rest[:n])
			rest = rest[n:]
		}
		prefix := subj + ".chunk"
		first = &nats.Msg{Data: chunks[0], Header: nats.Header{
			server.HeaderChunks:       []string{strconv.Itoa(len(chunks))},
			server.HeaderChunkSubject: []string{prefix},
			server.HeaderReplyBytes:   []string{strconv.Itoa(len(body))},
		}}
		sub, err := nc.Subscribe(prefix+".*", func(m *nats.Msg) {
			k, _ := strconv.Atoi(m.Subject[len(prefix)+1:])
			if k >= 1 && k < len(chunks) {
				m.Respond(chunks[k])
			}
		})
		if err != nil {
			return nil, err
		}
		br.subs = append(br.subs, sub)
	}
	sub, err := nc.Subscribe(subj, func(m *nats.Msg) {
		m.RespondMsg(&nats.Msg{Data: first.Data, Header: first.Header})
	})
	if err != nil {
		br.close()
		return nil, err
	}
	br.subs = append(br.subs, sub)
	return br, nc.Flush()
}

func (br *bareResponder) close() {
	for _, s := range br.subs {
		s.Unsubscribe()
	}
}

// fetchSession is a live session of n messages since its latest
// compaction, and its bare twin.
type fetchSession struct {
	name string
	n    int
	last uint64 // sequence of its last record
	body []byte // its context reply
	bare string // the bare responder's subject
	// gen made its records, and continues the session when the turn
	// figure appends to it, after the fetch and clients figures.
	gen *workload.Generator
}

// fetch measures the fetch, clients and turn figures, which share their
// sessions.
func (b *bench) fetch(ctx context.Context) ([]Row, error) {
	cfg := b.cfg
	var sizes []int
	if cfg.wants(FigureFetch) {
		sizes = append(sizes, cfg.FetchMessages...)
	}
	if cfg.wants(FigureClients) {
		sizes = append(sizes, cfg.ClientsMessages)
	}
	if cfg.wants(FigureTurn) {
		sizes = append(sizes, cfg.TurnMessages...)
	}
	slices.Sort(sizes)
	sizes = slices.Compact(sizes)

	a, err := b.startApp(ctx)
	if err != nil {
		return nil, err
	}
	defer a.Close()
	p, err := b.newPublisher()
	if err != nil {
		return nil, err
	}
	// The bare responders have a connection of their own, as the service
	// has.
	rc, err := nats.Connect(b.url, nats.Name("ctxd-bench-bare"))
	if err != nil {
		return nil, err
	}
	defer rc.Close()

	sessions := map[int]*fetchSession{}
	var last uint64
	published := 0
	for _, n := range sizes {
		gen := workload.New(uint64(n), cfg.profile())
		recs, err := workload.Encode(gen.Session(n))
		if err != nil {
			return nil, err
		}
		s := &fetchSession{name: fmt.Sprintf("fetch-%d", n), n: n, bare: fmt.Sprintf("perf.bare.%d", n), gen: gen}
		stored := 0
		for _, r := range recs {
			stored += len(r)
		}
		if s.last, err = p.publishPaced(ctx, a, last, len(recs), func(i int) (string, []byte) { return subject.TranscriptsPrefix + s.name, recs[i] }); err != nil {
			return nil, err
		}
		last, published = s.last, published+len(recs)
		if s.body, err = fetchOnce(ctx, b.nc, s.name, client.Request{MinSeq: s.last, WaitMS: 30000}); err != nil {
			return nil, err
		}
		br, err := newBareResponder(rc, s.bare, s.body)
		if err != nil {
			return nil, err
		}
		defer br.close()
		b.logf("fetch: session of %d messages: %d records, %d bytes stored, reply %d bytes", n, len(recs), stored, len(s.body))
		sessions[n] = s
	}

	var rows []Row
	if cfg.wants(FigureFetch) {
		for _, n := range cfg.FetchMessages {
			r, err := b.fetchLatency(ctx, sessions[n])
			if err != nil {
				return nil, err
			}
			rows = append(rows, r...)
		}
	}
	if cfg.wants(FigureClients) {
		r, err := b.clients(ctx, sessions[cfg.ClientsMessages])
		if err != nil {
			return nil, err
		}
		rows = append(rows, r)
	}
	if cfg.wants(FigureTurn) {
		sub, err := startRebuilder(ctx, rc)
		if err != nil {
			return nil, err
		}
		defer sub.Unsubscribe()
		for _, n := range slices.Compact(slices.Sorted(slices.Values(cfg.TurnMessages))) {
			// The fetch with no new records first: the turns then append
			// to the session.
			cached, err := b.cachedFetch(ctx, sessions[n])
			if err != nil {
				return nil, err
			}
			turn, turnRecords, err := b.turn(ctx, sessions[n])
			if err != nil {
				return nil, err
			}
			published += turnRecords
			rows = append(rows, turn, cached)
		}
	}
	b.checkApplied("fetch", a, uint64(published))
	return rows, nil
}

// interleave times a and b samples times each, alternating which goes
// first, after a few untimed rounds, and returns their sorted latencies.
func interleave(ctx context.Context, samples int, a, b func() error) (la, lb []time.Duration, err error) {
	for range min(samples, 20) {
		if err := a(); err != nil {
			return nil, nil, err
		}
		if err := b(); err != nil {
			return nil, nil, err
		}
	}
	la, lb = make([]time.Duration, 0, samples), make([]time.Duration, 0, samples)
	for i := range samples {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		fs, ls := []func() error{a, b}, []*[]time.Duration{&la, &lb}
		if i%2 == 1 {
			fs[0], fs[1], ls[0], ls[1] = fs[1], fs[0], ls[1], ls[0]
		}
		for k, f := range fs {
			start := time.Now()
			if err := f(); err != nil {
				return nil, nil, err
			}
			*ls[k] = append(*ls[k], time.Since(start))
		}
	}
	slices.Sort(la)
	slices.Sort(lb)
	return la, lb, nil
}

func (b *bench) fetchLatency(ctx context.Context, s *fetchSession) ([]Row, error) {
	want := len(s.body)
	ctxdFetch := func() error {
		data, err := fetchOnce(ctx, b.nc, s.name, client.Request{})
		if err == nil && len(data) != want {
			err = fmt.Errorf("fetch %s: %d bytes, expected %d", s.name, len(data), want)
		}
		return err
	}
	bareFetch := func() error {
		data, err := bareOnce(ctx, b.nc, s.bare)
		if err == nil && len(data) != want {
			err = fmt.Errorf("bare %s: %d bytes, expected %d", s.bare, len(data), want)
		}
		return err
	}
	lc, lb, err := interleave(ctx, b.cfg.FetchSamples, ctxdFetch, bareFetch)
	if err != nil {
		return nil, err
	}
	b.logf("fetch: %d messages: p50 %v vs %v, p99 %v vs %v, p999 %v vs %v", s.n,
		percentile(lc, .5), percentile(lb, .5), percentile(lc, .99), percentile(lb, .99), percentile(lc, .999), percentile(lb, .999))
	row := func(name string, q float64, t Target) Row {
		return Row{Figure: fmt.Sprintf("fetch %d msgs %s", s.n, name), Kind: Latency,
			Ctxd: percentile(lc, q).Seconds(), Baseline: percentile(lb, q).Seconds(), Target: t}
	}
	return []Row{
		row("p50", .5, Target{MaxRatio: 1.5}),
		row("p99", .99, Target{MaxRatio: 2}),
		row("p999", .999, Target{}),
	}, nil
}

// clients measures requests/s of concurrent clients, ctxd and bare in
// alternating rounds.
func (b *bench) clients(ctx context.Context, s *fetchSession) (Row, error) {
	cfg := b.cfg
	conns := make([]*nats.Conn, cfg.Clients)
	for i := range conns {
		nc, err := nats.Connect(b.url, nats.Name(fmt.Sprintf("ctxd-bench-client-%d", i)))
		if err != nil {
			return Row{}, err
		}
		defer nc.Close()
		conns[i] = nc
	}
	want := len(s.body)
	phase := func(req func(nc *nats.Conn) ([]byte, error)) (float64, error) {
		var done atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, len(conns))
		start := time.Now()
		deadline := start.Add(cfg.ClientsTime)
		for _, nc := range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(deadline) {
					data, err := req(nc)
					if err == nil && len(data) != want {
						err = fmt.Errorf("%d bytes, expected %d", len(data), want)
					}
					if err != nil {
						errs <- err
						return
					}
					done.Add(1)
				}
			}()
		}
		wg.Wait()
		elapsed := time.Since(start)
		close(errs)
		if err := <-errs; err != nil {
			return 0, err
		}
		return float64(done.Load()) / elapsed.Seconds(), nil
	}
	viaCtxd := func(nc *nats.Conn) ([]byte, error) { return fetchOnce(ctx, nc, s.name, client.Request{}) }
	viaBare := func(nc *nats.Conn) ([]byte, error) { return bareOnce(ctx, nc, s.bare) }
	var ctxdRates, bareRates []float64
	for round := range cfg.Rounds {
		for k := range 2 {
			if (k+round)%2 == 0 {
				r, err := phase(viaCtxd)
				if err != nil {
					return Row{}, err
				}
				ctxdRates = append(ctxdRates, r)
			} else {
				r, err := phase(viaBare)
				if err != nil {
					return Row{}, err
				}
				bareRates = append(bareRates, r)
			}
		}
		b.logf("clients: round %d: %d clients, %d messages: ctxd %.0f req/s, bare %.0f req/s", round+1, cfg.Clients, s.n, ctxdRates[round], bareRates[round])
	}
	return Row{
		Figure:   fmt.Sprintf("fetch %d msgs, %d clients (req/s)", s.n, cfg.Clients),
		Kind:     Rate,
		Ctxd:     median(ctxdRates),
		Baseline: median(bareRates),
	}, nil
}

// rebuildPrefix is followed by a session's id in the subject of the
// rebuild-per-turn responder.
const rebuildPrefix = "perf.rebuild."

// startRebuilder answers context requests for a session on
// perf.rebuild.<session> the way a design that stores records and
// rebuilds on every request does: read the session's records from the
// stream, up to min_seq (to its end without one), run the batch passes,
// encode the reply. It answers on rc, a connection of its own, as ctxd's
// service does, and honours min_seq by checking that what it read
// reaches it (a record whose publish was acknowledged is in the stream
// already).
func startRebuilder(ctx context.Context, rc *nats.Conn) (*nats.Subscription, error) {
	def, err := streams.Transcripts()
	if err != nil {
		return nil, err
	}
	sub, err := rc.Subscribe(rebuildPrefix+"*", func(m *nats.Msg) {
		session := strings.TrimPrefix(m.Subject, rebuildPrefix)
		var out []byte
		var seq uint64
		req, err := protocol.ParseRequest(m.Data)
		if err == nil {
			to := uint64(math.MaxUint64) // the end, as the stream leader says
			if req.MinSeq > 0 {
				to = req.MinSeq // a record of the session: seeing it proves the read, with no request more
			}
			out, seq, err = rebuildPerTurn(ctx, rc, def.Name, session, to)
		}
		if err == nil && seq < req.MinSeq {
			err = fmt.Errorf("read %s up to %d, short of min_seq %d", session, seq, req.MinSeq)
		}
		if err == nil {
			err = m.Respond(out)
		}
		if err != nil { // the client fails with it, rather than time out
			m.RespondMsg(&nats.Msg{Header: nats.Header{
				micro.ErrorCodeHeader: []string{protocol.CodeInternal},
				micro.ErrorHeader:     []string{err.Error()},
			}})
		}
	})
	if err != nil {
		return nil, err
	}
	return sub, rc.Flush()
}

// rebuildRequest asks the rebuild-per-turn responder for a session's
// context, as a client of ctxd would ask ctxd.
func rebuildRequest(ctx context.Context, nc *nats.Conn, session string, minSeq uint64) ([]byte, error) {
	msg := nats.NewMsg(rebuildPrefix + session)
	if minSeq > 0 {
		msg.Data = protocol.Request{MinSeq: minSeq}.AppendJSON(nil)
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	data, err := client.Do(ctx, nc, msg)
	if err != nil {
		return nil, fmt.Errorf("rebuild %s: %w", session, err)
	}
	return data, nil
}

// cachedFetch compares ctxd's fetch of a session that received no new
// records with rebuilding its context per request: what ctxd answers
// from the reply it keeps, against the rebuild's whole work.
func (b *bench) cachedFetch(ctx context.Context, s *fetchSession) (Row, error) {
	want, err := fetchOnce(ctx, b.nc, s.name, client.Request{})
	if err != nil {
		return Row{}, err
	}
	rebuilt, err := rebuildRequest(ctx, b.nc, s.name, 0)
	if err != nil {
		return Row{}, fmt.Errorf("turn: %w", err)
	}
	if !bytes.Equal(rebuilt, want) {
		return Row{}, fmt.Errorf("turn: the rebuilt reply of %s (%d bytes) differs from ctxd's (%d bytes)", s.name, len(rebuilt), len(want))
	}
	ctxdFetch := func() error {
		data, err := fetchOnce(ctx, b.nc, s.name, client.Request{})
		if err == nil && len(data) != len(want) {
			err = fmt.Errorf("fetch %s: %d bytes, expected %d", s.name, len(data), len(want))
		}
		return err
	}
	rebuild := func() error {
		data, err := rebuildRequest(ctx, b.nc, s.name, 0)
		if err == nil && len(data) != len(want) {
			err = fmt.Errorf("rebuild %s: %d bytes, expected %d", s.name, len(data), len(want))
		}
		return err
	}
	lc, lr, err := interleave(ctx, b.cfg.TurnSamples, ctxdFetch, rebuild)
	if err != nil {
		return Row{}, err
	}
	b.logf("turn: %d messages, no new records: ctxd fetch p50 %v p99 %v, rebuild p50 %v p99 %v", s.n,
		percentile(lc, .5), percentile(lc, .99), percentile(lr, .5), percentile(lr, .99))
	return Row{
		Figure:   fmt.Sprintf("fetch, no new records, vs rebuild, %d msgs p50", s.n),
		Kind:     Latency,
		Ctxd:     percentile(lc, .5).Seconds(),
		Baseline: percentile(lr, .5).Seconds(),
	}, nil
}

// turn compares a turn with ctxd against a turn with a service that
// rebuilds the context per request: publish the turn's records, each
// acknowledged, then ask for the context with min_seq the last
// acknowledgement's sequence. Both sides are timed the same way, from the
// first publish to the reply in hand, and append their turns to the one
// session, the next turn of it each time, so that both answer for the
// same records: every reply's seq must be its turn's last record, and
// the two sides' replies are compared byte for byte before and after.
// ctxd applies the baseline's records too, as it applies every record of
// the stream. It returns the number of records it published.
func (b *bench) turn(ctx context.Context, s *fetchSession) (Row, int, error) {
	samples := b.cfg.TurnSamples
	// A turn for each call of either side, the untimed ones of interleave
	// included, made before any is timed.
	turns := make([][][]byte, 2*(samples+min(samples, 20)))
	messages := 0
	for i := range turns {
		recs := s.gen.Next()
		for _, v := range recs {
			if workload.IsMessage(v) {
				messages++
			}
		}
		var err error
		if turns[i], err = workload.Encode(recs); err != nil {
			return Row{}, 0, err
		}
	}
	next, published, last := 0, 0, s.last
	play := func(ask func(minSeq uint64) ([]byte, error)) error {
		if next == len(turns) {
			return errors.New("turn: out of turns")
		}
		recs := turns[next]
		next++
		var seq uint64
		for _, data := range recs {
			pctx, cancel := context.WithTimeout(ctx, requestTimeout)
			ack, err := b.js.Publish(pctx, subject.TranscriptsPrefix+s.name, data)
			cancel()
			if err != nil {
				return fmt.Errorf("turn: publish to %s: %w", s.name, err)
			}
			seq = ack.Sequence
		}
		published += len(recs)
		last = seq
		reply, err := ask(seq)
		if err != nil {
			return err
		}
		if got, err := replySeq(reply); err != nil || got != seq {
			return fmt.Errorf("turn: a reply for %s after a turn ending at %d has seq %d (%v)", s.name, seq, got, err)
		}
		return nil
	}
	ctxdTurn := func() error {
		return play(func(minSeq uint64) ([]byte, error) {
			return fetchOnce(ctx, b.nc, s.name, client.Request{MinSeq: minSeq, WaitMS: 30000})
		})
	}
	rebuildTurn := func() error {
		return play(func(minSeq uint64) ([]byte, error) { return rebuildRequest(ctx, b.nc, s.name, minSeq) })
	}
	same := func() error {
		want, err := fetchOnce(ctx, b.nc, s.name, client.Request{MinSeq: last, WaitMS: 30000})
		if err != nil {
			return err
		}
		rebuilt, err := rebuildRequest(ctx, b.nc, s.name, last)
		if err != nil {
			return err
		}
		if !bytes.Equal(rebuilt, want) {
			return fmt.Errorf("turn: at seq %d the rebuilt reply of %s (%d bytes) differs from ctxd's (%d bytes)", last, s.name, len(rebuilt), len(want))
		}
		return nil
	}
	if err := same(); err != nil {
		return Row{}, 0, err
	}
	lc, lr, err := interleave(ctx, samples, ctxdTurn, rebuildTurn)
	if err != nil {
		return Row{}, 0, err
	}
	if err := same(); err != nil {
		return Row{}, 0, err
	}
	b.logf("turn: %d messages, growing to %d (%d turns of %d records): turn with ctxd p50 %v p99 %v, with rebuild-per-turn p50 %v p99 %v", s.n,
		s.n+messages, len(turns), published, percentile(lc, .5), percentile(lc, .99), percentile(lr, .5), percentile(lr, .99))
	return Row{
		Figure:   fmt.Sprintf("turn (publish + fetch at min_seq) vs rebuild, %d msgs p50", s.n),
		Kind:     Latency,
		Ctxd:     percentile(lc, .5).Seconds(),
		Baseline: percentile(lr, .5).Seconds(),
		Target:   Target{MaxRatio: 0.1, Note: "10x faster"},
	}, published, nil
}

// replySeq reads the seq of a JSON context reply from its head,
// {"session":S,"seq":N,..., without decoding the rest.
func replySeq(reply []byte) (uint64, error) {
	head := reply[:min(len(reply), 200)]
	i := bytes.Index(head, []byte(`,"seq":`))
	if i < 0 {
		return 0, errors.New("no seq at the head of the reply")
	}
	digits := head[i+len(`,"seq":`):]
	n := 0
	for n < len(digits) && digits[n] >= '0' && digits[n] <= '9' {
		n++
	}
	return strconv.ParseUint(string(digits[:n]), 10, 64)
}

// rebuildPerTurn builds a session's context reply the way a design that
// stores records and rebuilds on every request does: read the session's
// records from the stream up to to, run the batch passes, encode the
// reply with its digest. It returns the reply and the sequence of the
// last record read.
func rebuildPerTurn(ctx context.Context, nc *nats.Conn, stream, session string, to uint64) ([]byte, uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	var recs []projection.Record
	dec := record.Decoder{}
	var seq uint64
	err := bus.ReadSubject(ctx, nc, stream, subject.TranscriptsPrefix+session, 1, to, func(s uint64, data []byte) error {
		seq = s
		if v, err := dec.Decode(data); err == nil {
			recs = append(recs, projection.Record{Seq: s, Value: v})
		}
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	res := projection.Build(recs, projection.Options{})
	out := record.AppendJSONString([]byte(`{"session":`), session)
	out = append(out, `,"seq":`...)
	out = strconv.AppendUint(out, seq, 10)
	out = append(out, `,"messages":`...)
	if out, err = record.AppendJSON(out, res.Messages); err != nil {
		return nil, 0, err
	}
	dropped, err := json.Marshal(res.Dropped)
	if err != nil {
		return nil, 0, err
	}
	out = append(out, `,"dropped":`...)
	out = append(out, dropped...)
	out = append(out, '}')
	// The reply ctxd sends carries its digest: the rebuild computes it
	// too, over the messages it encoded.
	digest, err := protocol.ComputeDigest(out)
	if err != nil {
		return nil, 0, err
	}
	out = append(out[:len(out)-1], `,"digest":"`...)
	out = append(out, digest...)
	return append(out, `"}`...), seq, nil
}
