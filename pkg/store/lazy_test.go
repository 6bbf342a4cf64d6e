package store

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
)

// The lazy equivalence test runs lazyN seeded runs (lazyShortN under
// -short); -lazy.seed reruns the one a failure names.
var lazySeed = flag.Uint64("lazy.seed", 0, "run only the TestStore_LazyEquivalence run with this seed")

const (
	lazyN      = 40
	lazyShortN = 8
	lazySteps  = 400
)

// stored is one record of the fake stream.
type stored struct {
	seq  uint64
	data []byte
}

type savedCheckpoint struct {
	session string
	cp      Checkpoint
}

type readRange struct {
	session  string
	from, to uint64
}

// fakeLoader is a Loader over an in-memory stream, as JetStream holds it:
// every session's records by stream sequence, and a checkpoint bucket. It
// records its calls.
type fakeLoader struct {
	mu          sync.Mutex
	last        uint64 // the stream's last sequence
	streams     map[string][]stored
	checkpoints map[string]Checkpoint

	checkpointCalls int
	saved           []savedCheckpoint // every SaveCheckpoint, in order
	reads           []readRange       // every Records, in order
	seqReads        int               // RecordsAt calls
	counts          int               // CountRecords calls
	lasts           int               // StreamLast calls
}

func newFakeLoader() *fakeLoader {
	return &fakeLoader{streams: map[string][]stored{}, checkpoints: map[string]Checkpoint{}}
}

func (l *fakeLoader) Checkpoint(ctx context.Context, session string) (Checkpoint, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.checkpointCalls++
	cp, ok := l.checkpoints[session]
	return cp, ok, ctx.Err()
}

func (l *fakeLoader) SaveCheckpoint(ctx context.Context, session string, cp Checkpoint) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.saved = append(l.saved, savedCheckpoint{session, cp})
	l.checkpoints[session] = cp
	return ctx.Err()
}

func (l *fakeLoader) Records(ctx context.Context, session string, from, to uint64, fn func(seq uint64, data []byte) error) error {
	l.mu.Lock()
	l.reads = append(l.reads, readRange{session, from, to})
	var recs []stored
	for _, r := range l.streams[session] {
		if r.seq >= from && r.seq <= to {
			recs = append(recs, r)
		}
	}
	l.mu.Unlock()
	for _, r := range recs {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fn(r.seq, r.data); err != nil {
			return err
		}
	}
	return nil
}

// publish stores a record in the stream and returns its sequence.
// seqLoader is a fakeLoader that also reads records by sequence.
type seqLoader struct{ *fakeLoader }

func (l seqLoader) RecordsAt(ctx context.Context, session string, seqs []uint64, fn func(seq uint64, data []byte) error) error {
	l.mu.Lock()
	l.seqReads++
	bySeq := map[uint64][]byte{}
	for _, r := range l.streams[session] {
		bySeq[r.seq] = r.data
	}
	l.mu.Unlock()
	for _, seq := range seqs {
		data, ok := bySeq[seq]
		if !ok {
			return fmt.Errorf("seq %d: %w", seq, ErrIndexStale)
		}
		if err := fn(seq, data); err != nil {
			return err
		}
	}
	return nil
}

// CountRecords counts the session's records from from on (Prover).
func (l seqLoader) CountRecords(ctx context.Context, session string, from uint64) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.counts++
	var n uint64
	for _, r := range l.streams[session] {
		if r.seq >= from {
			n++
		}
	}
	return n, ctx.Err()
}

// StreamLast returns the stream's last sequence (Prover).
func (l seqLoader) StreamLast(ctx context.Context) (uint64, error) {
	l.mu.Lock()
	l.lasts++
	l.mu.Unlock()
	return l.lastSeq(), ctx.Err()
}

func (l *fakeLoader) publish(session string, data []byte) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.last++
	l.streams[session] = append(l.streams[session], stored{l.last, data})
	return l.last
}

// skip takes a sequence for a record on a subject that names no session.
func (l *fakeLoader) skip() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.last++
	return l.last
}

func (l *fakeLoader) lastSeq() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last
}

func (l *fakeLoader) stream(session string) []stored {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.streams[session])
}

// delivery is a record as the consumer hands it on.
type delivery struct {
	session string
	seq     uint64
	data    []byte
}

// between returns the stream's records with a sequence in (after, to],
// in order.
func (l *fakeLoader) between(after, to uint64) []delivery {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []delivery
	for id, recs := range l.streams {
		for _, r := range recs {
			if r.seq > after && r.seq <= to {
				out = append(out, delivery{id, r.seq, r.data})
			}
		}
	}
	slices.SortFunc(out, func(a, b delivery) int { return cmp.Compare(a.seq, b.seq) })
	return out
}

func (l *fakeLoader) readsOf(session string) []readRange {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []readRange
	for _, r := range l.reads {
		if r.session == session {
			out = append(out, r)
		}
	}
	return out
}

// ingest does what the consumer does with a message: the stream holds
// the record before the store applies it.
func ingest(s *Store, l *fakeLoader, session string, data []byte) uint64 {
	seq := l.publish(session, data)
	s.Apply(session, seq, data)
	return seq
}

// lazyConfig bounds a store.
type lazyConfig struct {
	maxSessions     int
	maxBytes        int64
	maxSessionBytes int64
	bySeq           bool  // the loader reads records by sequence too
	maxIndexed      int64 // 0: the default
	maxKnown        int   // 0: the default
}

func (c lazyConfig) String() string {
	return fmt.Sprintf("MaxSessions %d, MaxBytes %d, MaxSessionBytes %d, bySeq %v, MaxIndexed %d, MaxKnown %d", c.maxSessions, c.maxBytes, c.maxSessionBytes, c.bySeq, c.maxIndexed, c.maxKnown)
}

func newLazyStore(tb testing.TB, l *fakeLoader, c lazyConfig) *Store {
	s := newStore(tb)
	s.Loader = l
	if c.bySeq {
		s.Loader = seqLoader{l}
	}
	if c.maxIndexed > 0 {
		s.MaxIndexed = c.maxIndexed
	}
	if c.maxKnown > 0 {
		s.MaxKnown = c.maxKnown
	}
	s.MaxSessions, s.MaxBytes, s.MaxSessionBytes = c.maxSessions, c.maxBytes, c.maxSessionBytes
	// Indexes are written by SaveCheckpoints only: a write behind
	// would take slots' locks while the test checks the cache's bounds.
	s.checkpoints.every = time.Hour
	return s
}

// newFreshStore is newLazyStore for a store that starts on the stream
// before its first record, which may say so (Fresh).
func newFreshStore(t testing.TB, l *fakeLoader, c lazyConfig, fresh bool) *Store {
	s := newLazyStore(t, l, c)
	s.Fresh = fresh && l.lastSeq() == 0
	return s
}

// model is what a session's view must be, computed straight from the
// documented rules: its decodable records in stream order, minus those a
// store quarantines. A record is quarantined when the bytes of the
// records applied since the latest applied compaction (the compaction
// included) would pass maxSessionBytes with it; a quarantined compaction
// is not applied, so it resets nothing.
type model struct {
	maxSessionBytes int64
	weight          int64
	recs            []projection.Record
	last            uint64   // the session's last sequence
	quarantined     []uint64 // sequences, in order
	undecodable     []uint64

	// What Build answers over recs, once computed.
	wantJSON    string
	wantDropped projection.Dropped
	built       bool
}

func (m *model) add(seq uint64, data []byte) {
	m.last, m.built = seq, false
	v, err := record.Decode(data)
	if err != nil {
		m.undecodable = append(m.undecodable, seq)
		return
	}
	w := m.weight
	if projection.IsValidCompaction(v) {
		w = 0
	}
	if m.maxSessionBytes > 0 && w+int64(len(data)) > m.maxSessionBytes {
		m.quarantined = append(m.quarantined, seq)
		return
	}
	m.weight = w + int64(len(data))
	m.recs = append(m.recs, projection.Record{Seq: seq, Value: v})
}

func modelOf(recs []stored, maxSessionBytes int64) *model {
	m := &model{maxSessionBytes: maxSessionBytes}
	for _, r := range recs {
		m.add(r.seq, r.data)
	}
	return m
}

// want returns the JSON of Build over the model's records, and what
// Build dropped.
func (m *model) want(t *testing.T) (string, projection.Dropped) {
	t.Helper()
	if !m.built {
		res := projection.Build(m.recs, projection.Options{})
		b, err := record.AppendJSON(nil, res.Messages)
		require.NoError(t, err)
		m.wantJSON, m.wantDropped, m.built = string(b), res.Dropped, true
	}
	return m.wantJSON, m.wantDropped
}

// viewJSON renders a session through View: its JSON ("[]" for nil), its
// sequence and whether View passed nil.
func viewJSON(t *testing.T, s *Store, session string) (js string, seq uint64, isNil bool) {
	t.Helper()
	calls := 0
	err := s.View(context.Background(), session, func(p *projection.Session) {
		calls++
		if p == nil {
			js, isNil = "[]", true
			return
		}
		js, seq = string(p.AppendJSON(nil)), p.Seq()
	})
	require.NoError(t, err)
	require.Equal(t, 1, calls, "View calls fn once")
	return js, seq, isNil
}

// requireView checks that View shows Build over the session's stream.
func requireView(t *testing.T, s *Store, l *fakeLoader, session string) {
	t.Helper()
	want, _ := modelOf(l.stream(session), s.MaxSessionBytes).want(t)
	got, _, _ := viewJSON(t, s, session)
	require.Equal(t, want, got, "view of %s", session)
}

// quarantinedSeqs lists the sequences the store reports as quarantined.
func quarantinedSeqs(s *Store) []uint64 {
	var out []uint64
	for _, r := range s.Rejected() {
		if strings.Contains(r.Reason, "quarantined") {
			out = append(out, r.Seq)
		}
	}
	return out
}

// requireCacheConsistent checks the cache's counters against its slots
// and its bounds. It takes every lock: call it with nothing running.
func requireCacheConsistent(t *testing.T, s *Store, msgAndArgs ...any) {
	t.Helper()
	var loaded, size int64
	for _, sl := range s.dir.all() {
		sl.mu.Lock()
		if sl.proj != nil {
			loaded++
			size += sl.size + sl.held
			require.Equal(t, sl.proj.KeptBytes(), sl.held, msgAndArgs...)
		} else {
			require.Zero(t, sl.size, msgAndArgs...)
			require.Zero(t, sl.held, msgAndArgs...)
		}
		sl.mu.Unlock()
	}
	st := s.Stats()
	require.Equal(t, loaded, st.Loaded, msgAndArgs...)
	require.Equal(t, size, st.Bytes, msgAndArgs...)
	require.LessOrEqual(t, st.Loaded, int64(s.MaxSessions), msgAndArgs...)
	require.LessOrEqual(t, st.Bytes, s.MaxBytes, msgAndArgs...)
}

// lazyGen generates the records of several sessions as JSON: messages,
// tool calls and results with ids from a small pool, browser screenshots,
// compactions of the session's recent messages, records too big for a
// small session bound, and payloads that do not decode.
type lazyGen struct {
	r       *rand.Rand
	history map[string][]*record.Map // recent message records per session
}

var lazyIDs = []string{"c1", "c2", "c3", "b1"}

func lazyPick[T any](r *rand.Rand, xs ...T) T { return xs[r.IntN(len(xs))] }

func (g *lazyGen) text() string {
	return lazyPick(g.r, "ok", "let me look", "done", "the build fails", "héllo ✓") + fmt.Sprintf(" %d", g.r.IntN(1000))
}

func (g *lazyGen) image() *record.Map {
	return record.NewMap("type", "image", "data", fmt.Sprintf("iVBOR%04d", g.r.IntN(10000)), "mimeType", "image/png")
}

func (g *lazyGen) message(session string) *record.Map {
	switch n := g.r.IntN(30); {
	case n < 6:
		return record.NewMap("role", "user", "content", g.text())
	case n < 9:
		return record.NewMap("role", "assistant", "content", []any{record.NewMap("type", "text", "text", g.text())})
	case n < 19:
		var content []any
		for range 1 + g.r.IntN(2) {
			content = append(content, record.NewMap("type", "toolCall", "id", lazyPick(g.r, lazyIDs...),
				"name", lazyPick(g.r, "browser_use", "browser_use", "bash"),
				"arguments", record.NewMap("action", lazyPick(g.r, "click", "ls"))))
		}
		return record.NewMap("role", "assistant", "content", content)
	case n < 28:
		content := []any{record.NewMap("type", "text", "text", g.text())}
		for range g.r.IntN(3) {
			content = append(content, g.image())
		}
		return record.NewMap("role", "toolResult", "toolCallId", lazyPick(g.r, lazyIDs...),
			"toolName", lazyPick(g.r, "browser_use", "bash"), "content", content)
	}
	// Big: past a small session bound on its own.
	return record.NewMap("role", "user", "content", strings.Repeat("x", 400+g.r.IntN(1600)))
}

func (g *lazyGen) compaction(session string, valid bool) *record.Map {
	hist := g.history[session]
	var msgs []any
	for _, m := range hist[max(0, len(hist)-g.r.IntN(4)):] {
		msgs = append(msgs, m)
	}
	if g.r.IntN(3) == 0 {
		msgs = append(msgs, record.NewMap("role", "user", "content", "summary: "+g.text()))
	}
	if msgs == nil {
		msgs = []any{}
	}
	summary := "s"
	if g.r.IntN(4) == 0 {
		summary = strings.Repeat("s", 400+g.r.IntN(1600)) // past a small session bound
	}
	audit := "passed"
	if !valid {
		audit = "failed"
	}
	return record.NewMap("type", "compaction", "at", "2025-11-30T09:00:05Z", "baseSeq", int64(1),
		"plannerVersion", int64(1), "summaryModelRef", "m", "summary", summary, "qualityAudit", audit,
		"messages", msgs, "firstKeptIndex", int64(0), "tokensBefore", int64(100), "tokensAfter", int64(10))
}

// record returns the next record of session.
func (g *lazyGen) record(session string) []byte {
	var m *record.Map
	switch n := g.r.IntN(40); {
	case n < 3:
		return []byte(lazyPick(g.r, `{"role":`, `[1,2]`, `{broken`, `"hi"`, ``))
	case n < 6:
		m = g.compaction(session, true)
		var hist []*record.Map
		msgs, _ := m.Get("messages")
		for _, v := range msgs.([]any) {
			hist = append(hist, v.(*record.Map))
		}
		g.history[session] = hist
	case n < 7:
		m = g.compaction(session, false)
	default:
		m = g.message(session)
		g.history[session] = append(g.history[session], m)
		if h := g.history[session]; len(h) > 6 {
			g.history[session] = h[len(h)-6:]
		}
	}
	data, err := record.MarshalJSON(m)
	if err != nil {
		panic(err)
	}
	return data
}

// lazyRun drives one store, restarted now and then, over one fake stream
// and checks every view against the model.
type lazyRun struct {
	t      *testing.T
	seed   uint64
	r      *rand.Rand
	cfg    lazyConfig
	l      *fakeLoader
	s      *Store
	g      *lazyGen
	models map[string]*model
	// The sequences the model expects to see rejected.
	quarantined, undecodable, misaddressed map[uint64]bool
	ops                                    []string // the latest operations
	step                                   int
	// handled is the last record handed to the store before a restart;
	// backlog is what the consumer delivers again after it, in order.
	handled uint64
	backlog []delivery
}

var lazySessions = []string{"s0", "s1", "s2", "s3", "s4", "s5"}

// ghost is a session that never has records.
const ghost = "ghost"

var lazyAll = append(slices.Clip(lazySessions), ghost)

func (run *lazyRun) logf(format string, args ...any) {
	run.ops = append(run.ops, fmt.Sprintf("%d: ", run.step)+fmt.Sprintf(format, args...))
	if len(run.ops) > 30 {
		run.ops = run.ops[1:]
	}
}

// report logs what a failure needs to be reproduced and understood.
func (run *lazyRun) report() {
	run.t.Logf("seed %d (rerun with -lazy.seed=%d), step %d, %v; latest operations:\n\t%s",
		run.seed, run.seed, run.step, run.cfg, strings.Join(run.ops, "\n\t"))
}

// restart starts a new store at the stream's last sequence, as
// app.Open does. Half the time the consumer then has a backlog: records
// the stream stored that no store applied, and records past the
// consumer's ack floor, delivered again. It delivers those it never
// delivered first, in order, then, after their ack wait, the others.
func (run *lazyRun) restart() {
	r := run.r
	withBacklog := r.IntN(2) == 0
	if withBacklog {
		for range r.IntN(4) {
			run.publishUnhandled(lazyPick(r, lazySessions...))
		}
	}
	if r.IntN(2) == 0 {
		// A clean shutdown writes every checkpoint; a crash drops those
		// not written yet.
		require.NoError(run.t, run.s.SaveCheckpoints(context.Background()))
		run.logf("SaveCheckpoints")
	}
	require.NoError(run.t, run.s.Close())
	last := run.l.lastSeq()
	run.s = newLazyStore(run.t, run.l, run.cfg)
	run.s.Advance(last)
	run.backlog = nil
	if withBacklog {
		floor := run.handled - min(run.handled, uint64(r.IntN(80)))
		delivered := floor + uint64(r.IntN(int(last-floor)+1))
		run.backlog = append(run.l.between(delivered, last), run.l.between(floor, delivered)...)
		run.logf("restart at %d, backlog (%d, %d] then (%d, %d]", last, delivered, last, floor, delivered)
		return
	}
	run.logf("restart at %d", last)
}

// redeliver hands the store the next record of the backlog.
func (run *lazyRun) redeliver() {
	d := run.backlog[0]
	run.backlog = run.backlog[1:]
	run.s.Apply(d.session, d.seq, d.data)
	run.logf("Apply(%s, %d: %s) again", d.session, d.seq, kindOf(d.data))
}

// publishUnhandled stores a record in the stream that the store never
// applies: it stops before the consumer hands it on.
func (run *lazyRun) publishUnhandled(session string) {
	data := run.g.record(session)
	seq := run.l.publish(session, data)
	run.model(session, seq, data)
	run.logf("Publish(%s, %d, %d bytes: %s), not applied", session, seq, len(data), kindOf(data))
}

func (run *lazyRun) publish(session string) {
	data := run.g.record(session)
	seq := ingest(run.s, run.l, session, data)
	run.handled = seq
	run.model(session, seq, data)
	run.logf("Apply(%s, %d, %d bytes: %s)", session, seq, len(data), kindOf(data))
}

// model adds a record of the stream to its session's model.
func (run *lazyRun) model(session string, seq uint64, data []byte) {
	m := run.models[session]
	if m == nil {
		m = &model{maxSessionBytes: run.cfg.maxSessionBytes}
		run.models[session] = m
	}
	m.add(seq, data)
	switch {
	case slices.Contains(m.quarantined, seq):
		run.quarantined[seq] = true
	case slices.Contains(m.undecodable, seq):
		run.undecodable[seq] = true
	}
}

// kindOf names a record's shape for the operation log.
func kindOf(data []byte) string {
	m, err := record.Decode(data)
	if err != nil {
		return "undecodable"
	}
	if typ, ok := m.String("type"); ok {
		if projection.IsValidCompaction(m) {
			return "valid " + typ
		}
		return "invalid " + typ
	}
	role, _ := m.String("role")
	return role
}

func (run *lazyRun) view(session string) {
	t := run.t
	run.logf("View(%s)", session)
	got, seq, isNil := viewJSON(t, run.s, session)
	m := run.models[session]
	if m == nil {
		require.True(t, isNil, "a session without records views as nil")
		return
	}
	require.False(t, isNil, "View(%s) passed nil", session)
	want, dropped := m.want(t)
	require.Equal(t, want, got, "View(%s)", session)
	require.Equal(t, m.last, seq, "View(%s): Seq", session)
	require.NoError(t, run.s.View(context.Background(), session, func(p *projection.Session) {
		require.Equal(t, dropped, p.Dropped(), "View(%s): Dropped", session)
	}))
}

// checkRejected checks that the store lists only what the model rejects,
// each at most once.
func (run *lazyRun) checkRejected() {
	t := run.t
	seen := map[uint64]bool{}
	for _, r := range run.s.Rejected() {
		require.False(t, seen[r.Seq], "seq %d listed twice", r.Seq)
		seen[r.Seq] = true
		switch {
		case strings.Contains(r.Reason, "quarantined"):
			require.True(t, run.quarantined[r.Seq], "seq %d quarantined: %s", r.Seq, r.Reason)
		case run.misaddressed[r.Seq]:
		default:
			require.True(t, run.undecodable[r.Seq], "seq %d rejected: %s", r.Seq, r.Reason)
		}
	}
}

func (run *lazyRun) do() {
	r := run.r
	switch n := r.IntN(100); {
	case len(run.backlog) > 0 && n < 20:
		run.redeliver()
	case n < 48:
		run.publish(lazyPick(r, lazySessions...))
	case n < 50:
		seq := run.l.skip()
		run.misaddressed[seq] = true
		run.s.Reject(Rejection{Subject: "transcripts.a.b", Seq: seq, Reason: "invalid session id"})
		run.logf("Reject(%d)", seq)
	case n < 78:
		run.view(lazyPick(r, lazyAll...))
	case n < 84:
		id := lazyPick(r, lazyAll...)
		run.s.Evict(id)
		run.logf("Evict(%s)", id)
	case n < 86:
		require.NoError(run.t, run.s.SaveCheckpoints(context.Background()))
		run.logf("SaveCheckpoints")
	case n < 92:
		run.restart()
	default:
		for _, id := range lazySessions {
			run.view(id)
		}
	}
	requireCacheConsistent(run.t, run.s)
	run.checkRejected()
	require.Equal(run.t, run.l.lastSeq(), run.s.Applied())
}

func runLazy(t *testing.T, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	cfg := lazyConfig{
		maxSessions:     lazyPick(r, 1, 2, 2, 3, 100),
		maxBytes:        lazyPick[int64](r, 800, 4000, DefaultMaxBytes),
		maxSessionBytes: lazyPick[int64](r, 0, 900, 3000, DefaultMaxSessionBytes),
		bySeq:           r.IntN(3) > 0,
		maxIndexed:      lazyPick[int64](r, 0, 0, 8, 40),
		maxKnown:        lazyPick(r, 0, 0, 1, 3),
	}
	l := newFakeLoader()
	run := &lazyRun{
		t: t, seed: seed, r: r, cfg: cfg, l: l,
		s:            newFreshStore(t, l, cfg, r.IntN(2) == 0),
		g:            &lazyGen{r: r, history: map[string][]*record.Map{}},
		models:       map[string]*model{},
		quarantined:  map[uint64]bool{},
		undecodable:  map[uint64]bool{},
		misaddressed: map[uint64]bool{},
	}
	defer func() {
		if t.Failed() {
			run.report()
		}
	}()
	for run.step = range lazySteps {
		run.do()
	}
	// Everything, once more, from a store that starts cold, and once
	// it has met its backlog.
	run.restart()
	for _, id := range lazySessions {
		run.view(id)
	}
	run.view(ghost)
	for len(run.backlog) > 0 {
		run.redeliver()
	}
	for _, id := range lazySessions {
		run.view(id)
	}
	run.checkRejected()
}

// TestStore_LazyEquivalence checks the contract of a store with a Loader:
// whatever was evicted or loaded when, and across restarts, View shows
// exactly Build over the session's decodable records in stream order,
// minus the quarantined ones.
func TestStore_LazyEquivalence(t *testing.T) {
	if *lazySeed != 0 {
		runLazy(t, *lazySeed)
		return
	}
	n := lazyN
	if testing.Short() {
		n = lazyShortN
	}
	for seed := uint64(1); seed <= uint64(n); seed++ {
		runLazy(t, seed)
		if t.Failed() {
			return
		}
	}
}

// compactionRecord returns a valid compaction keeping one user message.
func compactionRecord(kept string) []byte {
	return fmt.Appendf(nil, `{"type":"compaction","at":"x","baseSeq":1,"plannerVersion":1,"summaryModelRef":"m","summary":"s",`+
		`"qualityAudit":"passed","messages":[{"role":"user","content":%q}],"firstKeptIndex":0,"tokensBefore":1,"tokensAfter":1}`, kept)
}

func TestStore_LoadsFromCheckpoint(t *testing.T) {
	cfg := lazyConfig{maxSessions: 100, maxBytes: DefaultMaxBytes, maxSessionBytes: DefaultMaxSessionBytes}
	l := newFakeLoader()
	s := newLazyStore(t, l, cfg)
	ingest(s, l, "a", userRecord("one"))
	ingest(s, l, "b", userRecord("other"))
	ingest(s, l, "a", userRecord("two"))
	cseq := ingest(s, l, "a", compactionRecord("kept"))
	require.NoError(t, s.checkpoints.flush(context.Background())) // written behind the ingest
	require.Equal(t, []savedCheckpoint{{"a", Checkpoint{From: cseq, Seq: cseq}.WithSeqs([]uint64{cseq})}}, l.saved,
		"a valid compaction saves the session's checkpoint")
	ingest(s, l, "a", userRecord("three"))
	last := ingest(s, l, "b", userRecord("other again"))

	t.Run("the ingest's own compaction", func(t *testing.T) {
		s.Evict("a")
		before := len(l.readsOf("a"))
		cps := l.checkpointCalls
		requireView(t, s, l, "a")
		reads := l.readsOf("a")[before:]
		require.Equal(t, []readRange{{"a", cseq, last}}, reads)
		require.Equal(t, cps, l.checkpointCalls, "the ingest saw the compaction: no checkpoint to read")
	})

	t.Run("a fresh store reads the checkpoint", func(t *testing.T) {
		fresh := newLazyStore(t, l, cfg)
		fresh.Advance(l.lastSeq())
		before := len(l.readsOf("a"))
		cps := l.checkpointCalls
		requireView(t, fresh, l, "a")
		js, _, _ := viewJSON(t, fresh, "a")
		require.Contains(t, js, "kept")
		require.Contains(t, js, "three")
		require.NotContains(t, js, `"one"`)
		require.Equal(t, []readRange{{"a", cseq, last}}, l.readsOf("a")[before:], "loaded from the compaction, not from 0")
		require.Equal(t, cps+1, l.checkpointCalls)

		// A later record goes on from there, and a reload too.
		ingest(fresh, l, "a", userRecord("four"))
		requireView(t, fresh, l, "a")
		fresh.Evict("a")
		requireView(t, fresh, l, "a")
		require.Equal(t, cseq, l.readsOf("a")[len(l.readsOf("a"))-1].from)
	})

	t.Run("SaveCheckpoints saves what the next start needs", func(t *testing.T) {
		ingest(s, l, "b", compactionRecord("b kept"))
		ingest(s, l, "b", userRecord("b after"))
		require.NoError(t, s.SaveCheckpoints(context.Background()))
		cp := l.checkpoints["b"]
		require.Equal(t, l.lastSeq(), cp.Seq)
		require.Equal(t, l.lastSeq()-1, cp.From)

		fresh := newLazyStore(t, l, cfg)
		fresh.Advance(l.lastSeq())
		before := len(l.readsOf("b"))
		requireView(t, fresh, l, "b")
		require.Equal(t, []readRange{{"b", cp.From, l.lastSeq()}}, l.readsOf("b")[before:])
	})
}

func TestStore_EvictsByCountAndBytes(t *testing.T) {
	ids := make([]string, 12)
	for i := range ids {
		ids[i] = fmt.Sprintf("s%d", i)
	}
	fill := func(t *testing.T, s *Store, l *fakeLoader, perSession int) {
		t.Helper()
		for i := range perSession {
			for _, id := range ids {
				ingest(s, l, id, userRecord(fmt.Sprintf("%s %d %s", id, i, strings.Repeat("x", 50))))
			}
		}
	}

	t.Run("by count", func(t *testing.T) {
		l := newFakeLoader()
		s := newLazyStore(t, l, lazyConfig{maxSessions: 3, maxBytes: DefaultMaxBytes, maxSessionBytes: DefaultMaxSessionBytes})
		fill(t, s, l, 3)
		require.Zero(t, s.Stats().Loaded, "the ingest loads nothing")
		r := rand.New(rand.NewPCG(1, 2))
		for i := range 200 {
			id := ids[r.IntN(len(ids))]
			if i%5 == 0 {
				ingest(s, l, id, userRecord(fmt.Sprint(i)))
			}
			requireView(t, s, l, id)
			requireCacheConsistent(t, s)
			require.NotNil(t, s.slot(id, false).proj, "the session viewed last stays loaded")
		}
		st := s.Stats()
		require.LessOrEqual(t, st.Loaded, int64(3))
		require.NotZero(t, st.Evictions)
		require.Greater(t, st.Loads, uint64(len(ids)), "evicted sessions are loaded again")
	})

	t.Run("by bytes", func(t *testing.T) {
		l := newFakeLoader()
		// About 1 500 bytes a session once viewed, its JSON buffer 1 KiB
		// at least: a few fit.
		const maxBytes = 5000
		s := newLazyStore(t, l, lazyConfig{maxSessions: 100, maxBytes: maxBytes, maxSessionBytes: DefaultMaxSessionBytes})
		fill(t, s, l, 2)
		var evictions []uint64
		for round := range 3 {
			for _, id := range ids {
				requireView(t, s, l, id)
				requireCacheConsistent(t, s)
				st := s.Stats()
				require.LessOrEqual(t, st.Bytes, int64(maxBytes))
				require.Positive(t, st.Bytes, "the session viewed last stays loaded")
				evictions = append(evictions, st.Evictions)
			}
			require.NotZero(t, evictions[len(evictions)-1], "round %d", round)
		}
		require.Greater(t, evictions[len(evictions)-1], evictions[len(ids)-1], "evictions go on as sessions are viewed")
	})
}

// storedAt stands for a layout's SubjectAt: a subject that tells the
// record's seq.
func storedAt(session string, seq uint64) string {
	return fmt.Sprintf("transcripts.%d.%s", seq, session)
}

// A record that does not decode is listed under the subject SubjectOf
// names for it (its partition's, on a partitioned stream).
func TestStore_RejectionNamesTheStoredSubject(t *testing.T) {
	s := newStore(t)
	s.Apply("a", 3, []byte("notjson"))
	s.SubjectOf = storedAt
	s.Apply("a", 4, []byte("notjson"))
	rej := s.Rejected()
	require.Len(t, rej, 2)
	require.Equal(t, "transcripts.a", rej[0].Subject, "without SubjectOf: the publish subject")
	require.Equal(t, "transcripts.4.a", rej[1].Subject)
}

func TestStore_Quarantine(t *testing.T) {
	const bound = 400
	cfg := lazyConfig{maxSessions: 100, maxBytes: DefaultMaxBytes, maxSessionBytes: bound}
	big := userRecord(strings.Repeat("x", bound))

	for _, loaded := range []bool{true, false} {
		name := "a session not loaded when the record arrives"
		if loaded {
			name = "a session loaded when the record arrives"
		}
		t.Run(name, func(t *testing.T) {
			l := newFakeLoader()
			s := newLazyStore(t, l, cfg)
			s.SubjectOf = storedAt
			ingest(s, l, "a", userRecord("before"))
			ingest(s, l, "b", userRecord("b before"))
			if loaded {
				requireView(t, s, l, "a")
			}
			bad := ingest(s, l, "a", big)
			ingest(s, l, "a", userRecord("after"))
			ingest(s, l, "b", userRecord("b after"))

			for range 3 {
				js, seq, _ := viewJSON(t, s, "a")
				require.Equal(t, `[{"role":"user","content":"before"},{"role":"user","content":"after"}]`, js)
				require.Equal(t, bad+1, seq)
				require.Equal(t, []uint64{bad}, quarantinedSeqs(s), "listed once")
				rej := s.Rejected()
				require.Len(t, rej, 1)
				require.Equal(t, "a", rej[0].Session)
				require.Equal(t, storedAt("a", bad), rej[0].Subject, "the subject it is stored on")
				require.Equal(t, len(big), rej[0].Size)
				s.Evict("a")
			}
			js, _, _ := viewJSON(t, s, "b")
			require.Equal(t, `[{"role":"user","content":"b before"},{"role":"user","content":"b after"}]`, js)

			// A restarted store quarantines the same record.
			fresh := newLazyStore(t, l, cfg)
			fresh.SubjectOf = storedAt
			fresh.Advance(l.lastSeq())
			requireView(t, fresh, l, "a")
			require.Equal(t, []uint64{bad}, quarantinedSeqs(fresh))
			rej := fresh.Rejected()
			require.Len(t, rej, 1)
			require.Equal(t, storedAt("a", bad), rej[0].Subject)
		})
	}

	t.Run("a compaction too big for a session resets nothing", func(t *testing.T) {
		l := newFakeLoader()
		s := newLazyStore(t, l, cfg)
		ingest(s, l, "a", userRecord("before"))
		requireView(t, s, l, "a")
		huge := compactionRecord(strings.Repeat("k", bound))
		bad := ingest(s, l, "a", huge)
		ingest(s, l, "a", userRecord("after"))
		want := `[{"role":"user","content":"before"},{"role":"user","content":"after"}]`
		for range 2 {
			js, _, _ := viewJSON(t, s, "a")
			require.Equal(t, want, js)
			require.Equal(t, []uint64{bad}, quarantinedSeqs(s))
			s.Evict("a")
		}
		require.NoError(t, s.SaveCheckpoints(context.Background()))
		fresh := newLazyStore(t, l, cfg)
		fresh.Advance(l.lastSeq())
		js, _, _ := viewJSON(t, fresh, "a")
		require.Equal(t, want, js)
	})

	t.Run("records since the compaction count, not before", func(t *testing.T) {
		l := newFakeLoader()
		s := newLazyStore(t, l, cfg)
		for i := range 4 { // past the bound in all, within it since the compaction
			ingest(s, l, "a", userRecord(fmt.Sprintf("%d %s", i, strings.Repeat("y", 70))))
			if i == 2 {
				ingest(s, l, "a", compactionRecord("kept"))
			}
		}
		require.Empty(t, modelOf(l.stream("a"), bound).quarantined)
		requireView(t, s, l, "a")
		require.Empty(t, quarantinedSeqs(s))
	})
}

func TestStore_UnknownSessionNotRegistered(t *testing.T) {
	cfg := lazyConfig{maxSessions: 100, maxBytes: DefaultMaxBytes, maxSessionBytes: DefaultMaxSessionBytes}
	l := newFakeLoader()
	s := newLazyStore(t, l, cfg)

	for range 3 {
		_, _, isNil := viewJSON(t, s, "nobody")
		require.True(t, isNil)
	}
	st := s.Stats()
	require.Zero(t, st.Sessions, "no slot is kept for a session without records")
	require.Zero(t, st.Loaded)
	require.Zero(t, st.Bytes)
	require.Empty(t, s.Sessions())

	ingest(s, l, "a", userRecord("one"))
	ingest(s, l, "a", []byte("{broken"))
	ingest(s, l, "b", userRecord("two"))

	// After a restart, the sessions exist only in the stream.
	fresh := newLazyStore(t, l, cfg)
	fresh.Advance(l.lastSeq())
	require.Empty(t, fresh.Sessions())
	js, seq, isNil := viewJSON(t, fresh, "a")
	require.False(t, isNil, "View discovers a session from the stream")
	require.Equal(t, `[{"role":"user","content":"one"}]`, js)
	require.Equal(t, uint64(2), seq)
	require.Equal(t, []string{"a"}, fresh.Sessions())
	require.Equal(t, uint64(1), fresh.Stats().Sessions)

	_, _, isNil = viewJSON(t, fresh, "nobody")
	require.True(t, isNil)
	require.Equal(t, uint64(1), fresh.Stats().Sessions)
	requireCacheConsistent(t, fresh)

	// The ingest goes on with the discovered session's slot.
	ingest(fresh, l, "a", userRecord("three"))
	requireView(t, fresh, l, "a")
	require.Equal(t, uint64(1), fresh.Stats().Sessions)
	fresh.Evict("a")
	requireView(t, fresh, l, "a")
	requireView(t, fresh, l, "b")
	require.ElementsMatch(t, []string{"a", "b"}, fresh.Sessions())
}
