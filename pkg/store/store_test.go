package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/projection"
)

// long is a timeout no passing test reaches: a wait that hits it is a
// missed wake-up.
const long = time.Minute

// userRecord returns a JSON record that becomes one message.
func userRecord(text string) []byte {
	return fmt.Appendf(nil, `{"role":"user","content":%q}`, text)
}

// pending returns how many waiters the store holds.
func pending(s *Store) int {
	s.waitMu.Lock()
	defer s.waitMu.Unlock()
	return len(s.waiters)
}

// requireNoWaiters checks that nothing is left in the waiter heap.
func requireNoWaiters(t *testing.T, s *Store) {
	t.Helper()
	require.Zero(t, pending(s), "waiters left in the heap")
	require.Equal(t, ^uint64(0), s.nextWake.Load(), "nextWake with no waiters")
}

// view returns what View passes for a session: its sequence and message
// count, or ok false for nil.
func view(t *testing.T, s *Store, session string) (seq uint64, messages int, ok bool) {
	t.Helper()
	err := s.View(context.Background(), session, func(p *projection.Session) {
		if p != nil {
			seq, messages, ok = p.Seq(), len(p.Messages()), true
		}
	})
	require.NoError(t, err)
	return seq, messages, ok
}

// counts is the part of Stats these tests check.
type counts struct{ records, rejected, sessions, applied uint64 }

func countsOf(s *Store) counts {
	st := s.Stats()
	return counts{st.Records, st.Rejected, st.Sessions, st.Applied}
}

func TestStore_Wait(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancelExpired := context.WithDeadline(context.Background(), time.Unix(0, 0))
	defer cancelExpired()

	tests := []struct {
		name    string
		applied uint64
		ctx     context.Context
		seq     uint64
		timeout time.Duration
		want    error // nil, or matched with errors.Is
	}{
		{"nothing to wait for on an empty store", 0, context.Background(), 0, 0, nil},
		{"watermark reached, timeout 0", 5, context.Background(), 5, 0, nil},
		{"watermark passed, timeout 0", 5, context.Background(), 3, 0, nil},
		{"watermark reached, cancelled context", 5, cancelled, 5, long, nil},
		{"not reached, timeout 0 fails at once", 5, context.Background(), 6, 0, ErrWaitExpired},
		{"not reached, negative timeout fails at once", 5, context.Background(), 6, -time.Second, ErrWaitExpired},
		{"not reached, timeout expires", 5, context.Background(), 6, time.Millisecond, ErrWaitExpired},
		{"not reached, cancelled context", 0, cancelled, 1, long, context.Canceled},
		{"not reached, context past its deadline", 0, expired, 1, long, context.DeadlineExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore(t)
			s.Advance(tt.applied)
			err := s.Wait(tt.ctx, tt.seq, tt.timeout)
			if tt.want == nil {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, tt.want)
			}
			requireNoWaiters(t, s)
		})
	}
}

func TestStore_Wait_WokenByAdvance(t *testing.T) {
	s := newStore(t)
	s.Advance(2)
	done := make(chan error, 1)
	go func() { done <- s.Wait(context.Background(), 5, long) }()
	require.Eventually(t, func() bool { return pending(s) == 1 }, 20*time.Second, time.Millisecond, "waiting for the waiter to be queued")
	require.Equal(t, uint64(5), s.nextWake.Load())

	s.Advance(4) // short of 5: the waiter stays
	require.Equal(t, 1, pending(s))
	select {
	case err := <-done:
		t.Fatalf("Wait returned %v before the watermark reached 5", err)
	default:
	}

	s.Advance(5)
	require.Zero(t, pending(s), "Advance dequeues the waiter it wakes")
	require.NoError(t, <-done)
	requireNoWaiters(t, s)
}

func TestStore_Wait_CancelWhileWaiting(t *testing.T) {
	s := newStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Wait(ctx, 1, long) }()
	require.Eventually(t, func() bool { return pending(s) == 1 }, 20*time.Second, time.Millisecond, "waiting for the waiter to be queued")
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	requireNoWaiters(t, s)
}

func TestStore_Wait_ManyWaiters(t *testing.T) {
	const top = 40
	s := newStore(t)
	// Two waiters per sequence, queued in random order.
	seqs := make([]uint64, 0, 2*top)
	for i := uint64(1); i <= top; i++ {
		seqs = append(seqs, i, i)
	}
	rand.Shuffle(len(seqs), func(i, j int) { seqs[i], seqs[j] = seqs[j], seqs[i] })

	type woken struct {
		seq, applied uint64
		err          error
	}
	results := make(chan woken, len(seqs))
	for _, seq := range seqs {
		go func() {
			err := s.Wait(context.Background(), seq, long)
			results <- woken{seq, s.Applied(), err}
		}()
	}
	require.Eventually(t, func() bool { return pending(s) == len(seqs) }, 20*time.Second, time.Millisecond, "waiting for every waiter to be queued")

	// Advance one sequence at a time, then by a jump: after each step,
	// exactly the waiters beyond the watermark are still queued, and
	// every one woken has its sequence reached.
	steps := []uint64{1, 2, 3, 7, 8, 20, 21, 39, top}
	got := 0
	for _, at := range steps {
		s.Advance(at)
		want := 0
		for _, seq := range seqs {
			if seq > at {
				want++
			}
		}
		require.Equal(t, want, pending(s), "waiters left after Advance(%d)", at)
		for got < len(seqs)-want {
			r := <-results
			require.NoError(t, r.err, "waiter for %d", r.seq)
			require.LessOrEqual(t, r.seq, at, "waiter for %d woken at watermark %d", r.seq, at)
			require.GreaterOrEqual(t, r.applied, r.seq)
			got++
		}
	}
	requireNoWaiters(t, s)
}

func TestStore_Wait_NoLeakedWaiters(t *testing.T) {
	s := newStore(t)
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			seq := uint64(i%50 + 1)
			switch i % 3 {
			case 0: // times out unless Advance gets there first
				err := s.Wait(context.Background(), seq, time.Duration(i%5)*time.Millisecond)
				if err != nil {
					assert.ErrorIs(t, err, ErrWaitExpired)
				}
			case 1: // cancelled, unless Advance gets there first
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i%7)*time.Millisecond)
				defer cancel()
				if err := s.Wait(ctx, seq, long); err != nil {
					assert.ErrorIs(t, err, context.DeadlineExceeded)
				}
			case 2: // woken by the Advance loop below
				assert.NoError(t, s.Wait(context.Background(), seq, long))
			}
		}()
	}
	for seq := uint64(1); seq <= 50; seq++ {
		s.Advance(seq)
	}
	wg.Wait()
	requireNoWaiters(t, s)

	// Waiters that all time out leave nothing behind either.
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			assert.ErrorIs(t, s.Wait(context.Background(), uint64(100+i), time.Millisecond), ErrWaitExpired)
		}()
	}
	wg.Wait()
	requireNoWaiters(t, s)
}

// A waiter that registers while Advance passes its sequence is woken,
// never left to time out with the watermark already there.
func TestStore_Wait_NoLostWakeup(t *testing.T) {
	n := 20000
	if testing.Short() {
		n = 2000
	}
	for i := range n {
		s := newStore(t)
		go s.Advance(1)
		if err := s.Wait(context.Background(), 1, long); err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
	}
}

func TestStore_Advance(t *testing.T) {
	s := newStore(t)
	for _, step := range []struct{ advance, want uint64 }{
		{3, 3},
		{1, 3}, // never backwards
		{3, 3},
		{10, 10},
	} {
		s.Advance(step.advance)
		require.Equal(t, step.want, s.Applied(), "after Advance(%d)", step.advance)
		require.Equal(t, step.want, s.Stats().Applied)
	}
}

func TestStore_Apply(t *testing.T) {
	t.Run("sessions are separate and the watermark follows", func(t *testing.T) {
		s := newStore(t)
		s.Apply("a", 1, userRecord("one"))
		s.Apply("b", 2, userRecord("two"))
		s.Apply("a", 3, userRecord("three"))

		seq, n, ok := view(t, s, "a")
		require.True(t, ok)
		require.Equal(t, uint64(3), seq)
		require.Equal(t, 2, n)
		seq, n, ok = view(t, s, "b")
		require.True(t, ok)
		require.Equal(t, uint64(2), seq)
		require.Equal(t, 1, n)
		require.Equal(t, counts{records: 3, sessions: 2, applied: 3}, countsOf(s))
		require.ElementsMatch(t, []string{"a", "b"}, s.Sessions())
	})

	t.Run("idempotent by sequence", func(t *testing.T) {
		s := newStore(t)
		s.Apply("a", 1, userRecord("one"))
		s.Apply("a", 2, userRecord("two"))
		s.Apply("a", 1, userRecord("one again")) // redelivered
		s.Apply("a", 2, userRecord("two again"))

		seq, n, _ := view(t, s, "a")
		require.Equal(t, uint64(2), seq)
		require.Equal(t, 2, n)
		require.Equal(t, uint64(2), s.Stats().Records)
	})

	t.Run("a record dropped by the rules still moves the session", func(t *testing.T) {
		s := newStore(t)
		s.Apply("a", 4, []byte(`{"kind":"context"}`))
		seq, n, ok := view(t, s, "a")
		require.True(t, ok)
		require.Equal(t, uint64(4), seq)
		require.Zero(t, n)
		require.Empty(t, s.Rejected())
	})
}

func TestStore_Apply_Undecodable(t *testing.T) {
	tests := []struct {
		name string
		data []byte
	}{
		{"broken JSON", []byte(`{"role":`)},
		{"JSON array", []byte(`[1,2]`)},
		{"JSON string", []byte(`"hi"`)},
		{"msgpack integer", []byte{0x05}},
		{"truncated msgpack map", []byte{0x81, 0xa4, 'r', 'o'}},
		{"empty", []byte{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			s := newStore(t)
			s.Logger = slog.New(slog.NewTextHandler(&logs, nil))

			s.Apply("a", 1, userRecord("before"))
			s.Apply("b", 2, userRecord("other session"))
			s.Apply("a", 3, tt.data)

			// Skipped, but the session's sequence moves past it.
			seq, n, _ := view(t, s, "a")
			require.Equal(t, uint64(3), seq)
			require.Equal(t, 1, n)
			require.Equal(t, counts{records: 2, rejected: 1, sessions: 2, applied: 3}, countsOf(s))

			rej := s.Rejected()
			require.Len(t, rej, 1)
			r := rej[0]
			require.Equal(t, "transcripts.a", r.Subject)
			require.Equal(t, "a", r.Session)
			require.Equal(t, uint64(3), r.Seq)
			require.Equal(t, len(tt.data), r.Size)
			require.NotEmpty(t, r.Reason)
			require.False(t, r.At.IsZero())
			require.Contains(t, logs.String(), "record skipped")
			require.Contains(t, logs.String(), "seq=3")

			// Redelivered: neither counted nor listed twice.
			s.Apply("a", 3, tt.data)
			require.Equal(t, uint64(1), s.Stats().Rejected)
			require.Len(t, s.Rejected(), 1)

			// The session and the other one go on.
			s.Apply("a", 4, userRecord("after"))
			seq, n, _ = view(t, s, "a")
			require.Equal(t, uint64(4), seq)
			require.Equal(t, 2, n)
			seq, n, _ = view(t, s, "b")
			require.Equal(t, uint64(2), seq)
			require.Equal(t, 1, n)
		})
	}

	t.Run("the first record of a session", func(t *testing.T) {
		s := newStore(t)
		s.Apply("a", 7, []byte("not a record"))
		seq, n, ok := view(t, s, "a")
		require.True(t, ok, "the session exists once a record was consumed")
		require.Equal(t, uint64(7), seq)
		require.Zero(t, n)
		require.Equal(t, uint64(7), s.Applied())
	})
}

func TestStore_Reject(t *testing.T) {
	s := newStore(t)
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	s.Reject(Rejection{Subject: "transcripts.a.b", Seq: 5, Size: 2, Reason: "invalid session id"})
	s.Reject(Rejection{Subject: "transcripts.c", Seq: 6, At: at})

	require.Equal(t, counts{rejected: 2, applied: 6}, countsOf(s))
	require.Empty(t, s.Sessions(), "a misaddressed record creates no session")
	rej := s.Rejected()
	require.Len(t, rej, 2)
	require.Equal(t, "transcripts.a.b", rej[0].Subject)
	require.Equal(t, uint64(5), rej[0].Seq)
	require.False(t, rej[0].At.IsZero(), "At is set when missing")
	require.Equal(t, at, rej[1].At, "At is kept when given")
}

func TestStore_Rejected(t *testing.T) {
	tests := []struct {
		log, count int
		want       []uint64 // sequences listed, oldest first
	}{
		{log: 3, count: 0, want: []uint64{}},
		{log: 3, count: 2, want: []uint64{1, 2}},
		{log: 3, count: 3, want: []uint64{1, 2, 3}},
		{log: 3, count: 4, want: []uint64{2, 3, 4}},
		{log: 3, count: 8, want: []uint64{6, 7, 8}},
		{log: 3, count: 9, want: []uint64{7, 8, 9}},
		{log: 1, count: 5, want: []uint64{5}},
		{log: 0, count: 5, want: []uint64{}},
		{log: -1, count: 5, want: []uint64{}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("log %d, %d rejected", tt.log, tt.count), func(t *testing.T) {
			s := newStore(t)
			s.RejectLog = tt.log
			for seq := uint64(1); seq <= uint64(tt.count); seq++ {
				s.Apply("a", seq, []byte("{"))
			}
			got := []uint64{}
			for _, r := range s.Rejected() {
				got = append(got, r.Seq)
			}
			require.Equal(t, tt.want, got)
			require.NotNil(t, s.Rejected(), "an empty list, never nil")
			require.Equal(t, uint64(tt.count), s.Stats().Rejected, "counted whether kept or not")
		})
	}

	t.Run("default bound", func(t *testing.T) {
		s := newStore(t)
		require.Equal(t, DefaultRejectLog, s.RejectLog)
		for seq := uint64(1); seq <= DefaultRejectLog+10; seq++ {
			s.Reject(Rejection{Subject: "transcripts.x.y", Seq: seq})
		}
		rej := s.Rejected()
		require.Len(t, rej, DefaultRejectLog)
		require.Equal(t, uint64(11), rej[0].Seq)
		require.Equal(t, uint64(DefaultRejectLog+10), rej[len(rej)-1].Seq)
	})

	t.Run("the list is a copy", func(t *testing.T) {
		s := newStore(t)
		s.Reject(Rejection{Subject: "transcripts.x.y", Seq: 1})
		s.Rejected()[0].Seq = 99
		require.Equal(t, uint64(1), s.Rejected()[0].Seq)
	})
}

func TestStore_View(t *testing.T) {
	s := newStore(t)
	calls := 0
	require.NoError(t, s.View(context.Background(), "unknown", func(p *projection.Session) {
		calls++
		require.Nil(t, p)
	}))
	require.Equal(t, 1, calls)
	require.Empty(t, s.Sessions(), "View creates no session")
	require.Zero(t, s.Stats().Sessions)

	s.Apply("known", 1, userRecord("hi"))
	require.NoError(t, s.View(context.Background(), "known", func(p *projection.Session) {
		calls++
		require.NotNil(t, p)
		require.Equal(t, uint64(1), p.Seq())
	}))
	require.Equal(t, 2, calls)
}

// Readers render while the ingest applies: run under -race.
func TestStore_Concurrent(t *testing.T) {
	const sessions, perSession = 4, 200
	s := newStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var readers sync.WaitGroup
	for i := range sessions {
		readers.Add(1)
		go func() {
			defer readers.Done()
			id := fmt.Sprintf("s%d", i)
			var last uint64
			for ctx.Err() == nil {
				err := s.View(ctx, id, func(p *projection.Session) {
					if p == nil {
						return
					}
					assert.GreaterOrEqual(t, p.Seq(), last, "a session's seq never goes back")
					last = p.Seq()
					p.AppendJSON(nil)
					p.AppendMsgpack(nil)
				})
				assert.NoError(t, err)
				runtime.Gosched() // let the ingest in
			}
		}()
	}

	var waiters sync.WaitGroup
	total := uint64(sessions * perSession)
	for _, seq := range []uint64{1, total / 2, total} {
		waiters.Add(1)
		go func() {
			defer waiters.Done()
			assert.NoError(t, s.Wait(context.Background(), seq, long))
			assert.GreaterOrEqual(t, s.Applied(), seq)
		}()
	}

	// The ingest: one goroutine, stream order, sessions interleaved.
	for seq := uint64(1); seq <= total; seq++ {
		id := fmt.Sprintf("s%d", seq%sessions)
		if seq%17 == 0 {
			s.Apply(id, seq, []byte("{broken"))
		} else {
			s.Apply(id, seq, userRecord(fmt.Sprint(seq)))
		}
	}
	waiters.Wait()
	cancel()
	readers.Wait()

	st := s.Stats()
	require.Equal(t, total, st.Applied)
	require.Equal(t, uint64(sessions), st.Sessions)
	require.Equal(t, total/17, st.Rejected)
	require.Equal(t, total-total/17, st.Records)
	for i := range sessions {
		seq, _, _ := view(t, s, fmt.Sprintf("s%d", i))
		require.Equal(t, total-uint64((sessions-i)%sessions), seq)
	}
	requireNoWaiters(t, s)
}

func TestStore_Wait_ErrorSaysWhere(t *testing.T) {
	s := newStore(t)
	err := s.Wait(context.Background(), 9, time.Millisecond)
	require.True(t, errors.Is(err, ErrWaitExpired))
	require.Contains(t, err.Error(), "waiting for 9")
}
