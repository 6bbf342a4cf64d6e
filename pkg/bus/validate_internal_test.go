package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
)

// coreServer runs a NATS server without JetStream, on which fakes answer
// the JetStream API alone, and returns its URL.
func coreServer(t *testing.T) string {
	t.Helper()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	require.NoError(t, err)
	ns.Start()
	t.Cleanup(func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	})
	require.True(t, ns.ReadyForConnections(10*time.Second))
	return ns.ClientURL()
}

// fakeMsg is a message of the fake stream.
type fakeMsg struct {
	subject string
	seq     uint64
}

func (m fakeMsg) data() []byte { return dataOf(m.seq) }

func dataOf(seq uint64) []byte { return []byte("record " + strconv.FormatUint(seq, 10)) }

// Leader behaviours of a fakeCluster.
const (
	leaderUp          = iota // answers
	leaderSilent             // no reply: an election in progress
	leaderUnavailable        // 503 JetStream system temporarily unavailable
)

// fakeCluster serves stream FAKE as a replicated stream: every direct get
// is answered by a replica holding the stream up to replica(n) for the
// n-th direct get (from 0), or up to its end, and the stream leader
// answers message gets and stream info from the whole stream.
type fakeCluster struct {
	msgs    []fakeMsg          // the stream as its leader holds it, in sequence order
	end     uint64             // its last sequence
	replica func(n int) uint64 // the last sequence of the replica answering the n-th direct get
	leader  int                // leaderUp, leaderSilent or leaderUnavailable
	none    int                // the first direct gets find no replica: 503 no responders
	lost    func(n int) bool   // the n-th direct get gets no reply: its replica's server stopped

	mu      sync.Mutex
	directs int // direct gets answered
	leaders int // requests to the leader
}

// newFake is a stream holding the given subjects, one message each, at
// sequences 1, 2, ... (an empty subject is a deleted sequence), answered
// by replicas at the positions replica gives.
func newFake(replica func(int) uint64, subjects ...string) *fakeCluster {
	f := &fakeCluster{replica: replica, end: uint64(len(subjects))}
	for i, s := range subjects {
		if s != "" {
			f.msgs = append(f.msgs, fakeMsg{s, uint64(i + 1)})
		}
	}
	return f
}

// start serves the fake and returns a client connection to it.
func (f *fakeCluster) start(t *testing.T) *nats.Conn {
	t.Helper()
	url := coreServer(t)
	srv := natstest.Connect(t, url)
	reply := func(m *nats.Msg, out ...*nats.Msg) {
		for _, r := range out {
			r.Subject = m.Reply
			// A request answered as the test ends finds the fake's
			// connection closed: its reader has gone, nothing to report.
			if err := srv.PublishMsg(r); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
				t.Errorf("reply: %v", err)
			}
		}
	}
	_, err := srv.Subscribe("$JS.API.DIRECT.GET.FAKE", func(m *nats.Msg) {
		var req getRequest
		if err := json.Unmarshal(m.Data, &req); err != nil {
			t.Errorf("request %q: %v", m.Data, err)
			return
		}
		f.mu.Lock()
		n := f.directs
		upTo := min(f.replica(n), f.end)
		f.directs++
		f.mu.Unlock()
		if n < f.none {
			reply(m, statusMsg("503"))
			return
		}
		if f.lost != nil && f.lost(n) {
			return
		}
		reply(m, f.direct(req, upTo)...)
	})
	require.NoError(t, err)
	leader := func(m *nats.Msg) {
		f.mu.Lock()
		f.leaders++
		f.mu.Unlock()
		switch f.leader {
		case leaderSilent:
			return
		case leaderUnavailable:
			reply(m, &nats.Msg{Data: []byte(`{"error":{"code":503,"err_code":10008,"description":"JetStream system temporarily unavailable"}}`)})
			return
		}
		if strings.HasPrefix(m.Subject, "$JS.API.STREAM.INFO.") {
			reply(m, &nats.Msg{Data: []byte(`{"state":{"last_seq":` + strconv.FormatUint(f.end, 10) + `}}`)})
			return
		}
		var req getRequest
		if err := json.Unmarshal(m.Data, &req); err != nil {
			t.Errorf("request %q: %v", m.Data, err)
			return
		}
		reply(m, f.leaderGet(req))
	}
	for _, subj := range []string{"$JS.API.STREAM.MSG.GET.FAKE", "$JS.API.STREAM.INFO.FAKE"} {
		_, err = srv.Subscribe(subj, leader)
		require.NoError(t, err)
	}
	require.NoError(t, srv.Flush())
	return natstest.Connect(t, url)
}

func (f *fakeCluster) counts() (directs, leaders int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.directs, f.leaders
}

func matches(filter, subject string) bool { return filter == "" || filter == ">" || filter == subject }

// direct answers a direct get as a replica holding the stream up to upTo.
func (f *fakeCluster) direct(req getRequest, upTo uint64) []*nats.Msg {
	var held []fakeMsg
	for _, m := range f.msgs {
		if m.seq <= upTo {
			held = append(held, m)
		}
	}
	if len(req.MultiLast) > 0 {
		for i := len(held) - 1; i >= 0; i-- {
			if held[i].subject == req.MultiLast[0] {
				eob := statusMsg("204", 0)
				eob.Header.Set("Nats-UpTo-Sequence", strconv.FormatUint(upTo, 10))
				return []*nats.Msg{fakeStored(held[i]), eob}
			}
		}
		return []*nats.Msg{statusMsg("404")}
	}
	var match []fakeMsg
	for _, m := range held {
		if m.seq >= req.Seq && matches(req.NextFor, m.subject) {
			match = append(match, m)
		}
	}
	if req.Batch == 0 { // a single get
		if len(match) > 0 && match[0].seq == req.Seq {
			return []*nats.Msg{fakeStored(match[0])}
		}
		return []*nats.Msg{statusMsg("404")}
	}
	if len(match) == 0 {
		return []*nats.Msg{statusMsg("404")}
	}
	n := min(req.Batch, len(match))
	var out []*nats.Msg
	for _, m := range match[:n] {
		out = append(out, fakeStored(m))
	}
	return append(out, statusMsg("204", uint64(len(match)-n)))
}

// leaderGet answers a stream leader's message get.
func (f *fakeCluster) leaderGet(req getRequest) *nats.Msg {
	var found *fakeMsg
	for i, m := range f.msgs {
		switch {
		case req.LastFor != "":
			if m.subject == req.LastFor {
				found = &f.msgs[i]
			}
		case req.NextFor != "":
			if found == nil && m.seq >= req.Seq && matches(req.NextFor, m.subject) {
				found = &f.msgs[i]
			}
		case m.seq == req.Seq:
			found = &f.msgs[i]
		}
	}
	if found == nil {
		return &nats.Msg{Data: []byte(`{"error":{"code":404,"err_code":10037,"description":"no message found"}}`)}
	}
	body, _ := json.Marshal(map[string]any{"message": map[string]any{"subject": found.subject, "seq": found.seq, "data": found.data()}})
	return &nats.Msg{Data: body}
}

func fakeStored(m fakeMsg) *nats.Msg {
	r := nats.NewMsg("")
	r.Header.Set("Nats-Subject", m.subject)
	r.Header.Set("Nats-Sequence", strconv.FormatUint(m.seq, 10))
	r.Data = m.data()
	return r
}

// upToDate is a replica that holds the whole stream.
func upToDate(int) uint64 { return math.MaxUint64 }

// behindFor is a replica at lag for the first n direct gets, then one
// that holds the whole stream.
func behindFor(n int, lag uint64) func(int) uint64 {
	return func(i int) uint64 {
		if i < n {
			return lag
		}
		return math.MaxUint64
	}
}

// readFunc is one of the three validated reads of FAKE: ReadSubject of
// fake.a in [from, to], ReadRange of [from, to], or ReadSeqs of seqs.
type readFunc func(d *directGet, ctx context.Context, from, to uint64, seqs []uint64, fn func(seq uint64, data []byte) error) error

var readFuncs = map[string]readFunc{
	"ReadSubject": func(d *directGet, ctx context.Context, from, to uint64, _ []uint64, fn func(uint64, []byte) error) error {
		return d.readSubject(ctx, "fake.a", from, to, func(r directReply) error { return fn(r.seq, r.data) })
	},
	"ReadRange": func(d *directGet, ctx context.Context, from, to uint64, _ []uint64, fn func(uint64, []byte) error) error {
		return d.readRange(ctx, from, to, func(r directReply) error { return fn(r.seq, r.data) })
	},
	"ReadSeqs": func(d *directGet, ctx context.Context, _, _ uint64, seqs []uint64, fn func(uint64, []byte) error) error {
		return d.readSeqs(ctx, seqs, fn)
	},
}

// read runs one read of FAKE, each reply awaited at most timeout, and
// returns the sequences it handed on, each checked against its data, and
// what it counted.
func read(t *testing.T, nc *nats.Conn, timeout time.Duration, r readFunc, from, to uint64, seqs ...uint64) ([]uint64, ReadStats, error) {
	t.Helper()
	var got []uint64
	var err error
	stats := delta(func() {
		d, derr := openDirectGet(nc, "FAKE", timeout)
		require.NoError(t, derr)
		defer d.close()
		err = r(d, context.Background(), from, to, seqs, func(seq uint64, data []byte) error {
			require.Equal(t, string(dataOf(seq)), string(data))
			got = append(got, seq)
			return nil
		})
	})
	return got, stats, err
}

// delta returns what the reads counted while fn ran.
func delta(fn func()) ReadStats {
	before := Reads()
	fn()
	after := Reads()
	return ReadStats{
		Reads:   after.Reads - before.Reads,
		Stale:   after.Stale - before.Stale,
		Retried: after.Retried - before.Retried,
		Leader:  after.Leader - before.Leader,
	}
}

// alternate is ten sequences, fake.a at the odd ones, fake.b at the even.
var alternate = []string{"fake.a", "fake.b", "fake.a", "fake.b", "fake.a", "fake.b", "fake.a", "fake.b", "fake.a", "fake.b"}

// Each read hands on every record, whichever replica answers: a replica
// behind is asked again, then the leader; a read that cannot be proven
// fails, it never hands on a hole.
func TestValidatedReads(t *testing.T) {
	want := map[string][]uint64{
		"ReadSubject": {1, 3, 5, 7, 9},                 // fake.a in [1, 10]
		"ReadRange":   {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, // [1, 10]
		"ReadSeqs":    {1, 3, 5, 7, 9},                 // the sequences of fake.a
	}
	// Direct gets of a read from a current replica: ReadSubject also asks
	// for the subject's last record, since fake.a holds nothing at 10.
	cheapest := map[string]int{"ReadSubject": 2, "ReadRange": 1, "ReadSeqs": 5}
	tests := []struct {
		name    string
		replica func(int) uint64
		none    int // direct gets that find no replica
		leader  int
		retried bool // asked the replicas again
		leaders bool // asked the leader
		err     string
	}{
		{name: "current", replica: upToDate},
		{name: "behind, then current", replica: behindFor(2, 2), retried: true},
		{name: "empty, then current", replica: behindFor(1, 0), retried: true},
		{name: "no replica yet, then current", replica: upToDate, none: 1, retried: true},
		{name: "behind for good", replica: behindFor(1000, 4), retried: true, leaders: true},
		{name: "behind, leader silent", replica: behindFor(1000, 4), leader: leaderSilent, retried: true, leaders: true, err: "no reply"},
		{name: "behind, leader unavailable", replica: behindFor(1000, 4), leader: leaderUnavailable, retried: true, leaders: true, err: "503 JetStream system temporarily unavailable"},
	}
	for _, tt := range tests {
		for name, r := range readFuncs {
			t.Run(tt.name+"/"+name, func(t *testing.T) {
				f := newFake(tt.replica, alternate...)
				f.leader, f.none = tt.leader, tt.none
				nc := f.start(t)
				timeout := DirectTimeout
				if tt.leader == leaderSilent {
					timeout = 200 * time.Millisecond // the time it waits for the leader
				}
				got, stats, err := read(t, nc, timeout, r, 1, 10, 1, 3, 5, 7, 9)
				if tt.err != "" {
					require.ErrorContains(t, err, tt.err)
					require.ErrorContains(t, err, "stream FAKE: stream leader: ")
					return
				}
				require.NoError(t, err)
				require.Equal(t, want[name], got)
				require.Equal(t, uint64(1), stats.Reads)
				require.Equal(t, tt.retried, stats.Retried == 1, "retried: %+v", stats)
				require.Equal(t, tt.leaders, stats.Leader == 1, "asked the leader: %+v", stats)
				require.Equal(t, tt.retried, stats.Stale > 0, "stale replies: %+v", stats)
				directs, leaders := f.counts()
				if !tt.retried {
					require.Equal(t, cheapest[name], directs, "no round trip more than needed")
				}
				if !tt.leaders {
					require.Zero(t, leaders)
				}
			})
		}
	}
}

// A record that is gone (deleted, or past the end of the stream) is
// skipped once the leader says so; a current replica that proves the
// read complete spares the leader.
func TestValidatedReads_Deleted(t *testing.T) {
	withHole := append(append([]string{}, alternate[:8]...), "", "fake.b") // 9 deleted
	tests := []struct {
		name     string
		subjects []string
		read     string
		from, to uint64
		seqs     []uint64
		want     []uint64
		leader   bool
	}{
		{"a sequence deleted", withHole, "ReadSeqs", 0, 0, []uint64{1, 3, 5, 7, 9}, []uint64{1, 3, 5, 7}, true},
		{"a subject's last record deleted", withHole, "ReadSubject", 1, 10, nil, []uint64{1, 3, 5, 7}, false},
		{"a range with a deleted record", withHole, "ReadRange", 1, 10, nil, []uint64{1, 2, 3, 4, 5, 6, 7, 8, 10}, false},
		{"a range whose end is deleted", withHole, "ReadRange", 1, 9, nil, []uint64{1, 2, 3, 4, 5, 6, 7, 8}, false},
		{"a range whose end is deleted, and all after it", withHole[:9], "ReadRange", 1, 9, nil, []uint64{1, 2, 3, 4, 5, 6, 7, 8}, true},
		{"a range past the end", alternate, "ReadRange", 5, 20, nil, []uint64{5, 6, 7, 8, 9, 10}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(upToDate, tt.subjects...)
			nc := f.start(t)
			got, stats, err := read(t, nc, DirectTimeout, readFuncs[tt.read], tt.from, tt.to, tt.seqs...)
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
			require.Equal(t, tt.leader, stats.Leader == 1, "asked the leader: %+v", stats)
		})
	}
}

// ReadSubject proves where a subject ends with a replica that holds the
// read's end, or with the leader; a read to the end asks the leader.
func TestValidatedReads_SubjectEnd(t *testing.T) {
	tests := []struct {
		name    string
		replica func(int) uint64
		to      uint64
		leader  bool
	}{
		{"the last record's replica is behind the read's end", func(i int) uint64 {
			if i == 0 {
				return math.MaxUint64 // the batch
			}
			return 4 // every probe
		}, 10, true},
		{"to the end", upToDate, math.MaxUint64, true},
		{"to the end, behind", behindFor(1000, 4), math.MaxUint64, true},
		{"within the subject", behindFor(1000, 4), 3, false}, // the read sees 3
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nc := newFake(tt.replica, alternate...).start(t)
			got, stats, err := read(t, nc, DirectTimeout, readFuncs["ReadSubject"], 1, tt.to)
			require.NoError(t, err)
			want := []uint64{1, 3, 5, 7, 9}
			if tt.to == 3 {
				want = []uint64{1, 3}
			}
			require.Equal(t, want, got)
			require.Equal(t, tt.leader, stats.Leader == 1, "asked the leader: %+v", stats)
		})
	}
}

// LastOf reports what the answering replica holds; a replica with nothing
// of the subject sends the question to the leader.
func TestLastOf(t *testing.T) {
	tests := []struct {
		name    string
		replica func(int) uint64
		none    int
		leader  int
		subject string
		last    uint64 // 0: none
		upTo    uint64
		err     string
	}{
		{name: "current", replica: upToDate, subject: "fake.a", last: 9, upTo: 10},
		{name: "behind", replica: behindFor(1000, 4), subject: "fake.a", last: 3, upTo: 4},
		{name: "nothing on the replica", replica: behindFor(1000, 0), subject: "fake.a", last: 9, upTo: 10},
		{name: "no such subject", replica: upToDate, subject: "fake.c", upTo: 10},
		{name: "no replica", replica: upToDate, none: 1, subject: "fake.a", last: 9, upTo: 10},
		{name: "nothing, leader unavailable", replica: upToDate, subject: "fake.c", leader: leaderUnavailable, err: "503"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(tt.replica, alternate...)
			f.leader, f.none = tt.leader, tt.none
			nc := f.start(t)
			last, upTo, err := LastOf(context.Background(), nc, "FAKE", tt.subject)
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.upTo, upTo)
			if tt.last == 0 {
				require.Nil(t, last)
				return
			}
			require.Equal(t, &Msg{Subject: tt.subject, Seq: tt.last, Data: dataOf(tt.last)}, last)
		})
	}
}

// ReadSeqs waits for every reply of a window, however they are ordered,
// and fails when one is lost.
func TestDirectGet_Seqs(t *testing.T) {
	nc := fakeStream(t, func(req getRequest) []*nats.Msg {
		if req.Seq == 9 {
			return nil // lost
		}
		return []*nats.Msg{storedMsg(req.Seq)}
	})
	read := func(seqs ...uint64) ([]uint64, error) {
		d, err := openDirectGet(nc, "FAKE", 200*time.Millisecond)
		require.NoError(t, err)
		defer d.close()
		var got []uint64
		err = d.readSeqs(context.Background(), seqs, func(seq uint64, _ []byte) error {
			got = append(got, seq)
			return nil
		})
		return got, err
	}
	got, err := read(7, 2, 3)
	require.NoError(t, err)
	require.Equal(t, []uint64{7, 2, 3}, got)

	_, err = read(1, 9, 2)
	require.ErrorIs(t, err, ErrNoReply)
}

// A direct get in flight to a server that stops gets no reply: the read
// asks again after a short wait, and another replica answers. Each read
// hands on every record once, in order, whichever request was lost.
func TestValidatedReads_LostReply(t *testing.T) {
	defer func(d time.Duration) { attemptTimeout = d }(attemptTimeout)
	attemptTimeout = 100 * time.Millisecond
	want := map[string][]uint64{
		"ReadSubject": {1, 3, 5, 7, 9},
		"ReadRange":   {1, 2, 3, 4, 5, 6, 7, 8, 9, 10},
		"ReadSeqs":    {1, 3, 5, 7, 9},
	}
	public := map[string]func(nc *nats.Conn, fn func(uint64, []byte) error) error{
		"ReadSubject": func(nc *nats.Conn, fn func(uint64, []byte) error) error {
			return ReadSubject(context.Background(), nc, "FAKE", "fake.a", 1, 10, fn)
		},
		"ReadRange": func(nc *nats.Conn, fn func(uint64, []byte) error) error {
			return ReadRange(context.Background(), nc, "FAKE", 1, 10, func(m Msg) error { return fn(m.Seq, m.Data) })
		},
		"ReadSeqs": func(nc *nats.Conn, fn func(uint64, []byte) error) error {
			return ReadSeqs(context.Background(), nc, "FAKE", []uint64{1, 3, 5, 7, 9}, fn)
		},
	}
	for name, read := range public {
		for _, lostAt := range []int{0, 1} {
			t.Run(fmt.Sprintf("%s, request %d lost", name, lostAt), func(t *testing.T) {
				f := newFake(upToDate, alternate...)
				f.lost = func(n int) bool { return n == lostAt }
				nc := f.start(t)
				var got []uint64
				err := read(nc, func(seq uint64, data []byte) error {
					require.Equal(t, string(dataOf(seq)), string(data))
					got = append(got, seq)
					return nil
				})
				require.NoError(t, err)
				require.Equal(t, want[name], got)
			})
		}
	}
	t.Run("LastOf, request 0 lost", func(t *testing.T) {
		f := newFake(upToDate, alternate...)
		f.lost = func(n int) bool { return n == 0 }
		nc := f.start(t)
		last, upTo, err := LastOf(context.Background(), nc, "FAKE", "fake.b")
		require.NoError(t, err)
		require.Equal(t, uint64(10), last.Seq)
		require.Equal(t, uint64(10), upTo)
	})
	t.Run("every request lost", func(t *testing.T) {
		f := newFake(upToDate, alternate...)
		f.lost = func(int) bool { return true }
		f.leader = leaderSilent
		nc := f.start(t)
		err := ReadSubject(context.Background(), nc, "FAKE", "fake.a", 1, 10, func(uint64, []byte) error { return nil })
		require.ErrorIs(t, err, ErrNoReply)
	})
}
