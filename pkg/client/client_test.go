package client

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/record"
	"github.com/ctxd/ctxd/pkg/subject"
)

// A bad session id is refused before anything is sent (no connection is
// even needed).
func TestContext_RefusesBadSessionIDs(t *testing.T) {
	for _, id := range []string{"", "a.b", "*", ">", "a b", string(make([]byte, 129))} {
		_, err := Context(context.Background(), nil, id, Request{})
		require.ErrorIs(t, err, subject.ErrBadSession, "%q", id)
	}
}

func TestMsgpackRequest(t *testing.T) {
	v, err := record.DecodeMsgpack(requestBody(Request{MinSeq: 1 << 63, WaitMS: 250, Msgpack: true}, 0))
	require.NoError(t, err)
	m := v.(*record.Map)
	minSeq, _ := m.Get("min_seq")
	wait, _ := m.Get("wait_ms")
	require.Equal(t, uint64(1<<63), minSeq)
	require.Equal(t, int64(250), wait)

	v, err = record.DecodeMsgpack(requestBody(Request{MinSeq: 5, Msgpack: true}, 0))
	require.NoError(t, err)
	_, has := v.(*record.Map).Get("wait_ms")
	require.False(t, has, "no wait_ms: the service's default")

	v, err = record.DecodeMsgpack(requestBody(Request{MinSeq: 5, NoWait: true, Msgpack: true}, 0))
	require.NoError(t, err)
	wait, _ = v.(*record.Map).Get("wait_ms")
	require.Equal(t, int64(0), wait, "NoWait sends wait_ms 0")
}

func TestError(t *testing.T) {
	require.Equal(t, "504 min_seq not reached within wait_ms", (&Error{"504", "min_seq not reached within wait_ms"}).Error())
}

func TestMsgpackRequest_FormatAndBudget(t *testing.T) {
	v, err := record.DecodeMsgpack(requestBody(Request{Format: "gemini", BudgetTokens: 9000, Msgpack: true}, 0))
	require.NoError(t, err)
	m := v.(*record.Map)
	f, _ := m.Get("format")
	b, _ := m.Get("budget_tokens")
	require.Equal(t, "gemini", f)
	require.Equal(t, int64(9000), b)
}

// A request sent under a deadline says how long the client waits
// (timeout_ms), a little less than the time left, so that the service
// answers, with an error if it must, before the client gives up.
func TestRequestBody_Timeout(t *testing.T) {
	require.Nil(t, requestBody(Request{}, 0), "no field, no deadline: no body")
	require.JSONEq(t, `{"min_seq":0,"timeout_ms":900}`, string(requestBody(Request{}, 900*time.Millisecond)))
	require.JSONEq(t, `{"min_seq":7,"wait_ms":500,"timeout_ms":1,"format":"gemini"}`,
		string(requestBody(Request{MinSeq: 7, WaitMS: 500, Format: "gemini"}, time.Microsecond)))

	v, err := record.DecodeMsgpack(requestBody(Request{Msgpack: true}, 2*time.Second))
	require.NoError(t, err)
	got, _ := v.(*record.Map).Get("timeout_ms")
	require.Equal(t, int64(2000), got)

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	left := timeoutOf(ctx)
	require.Greater(t, left, 700*time.Millisecond)
	require.LessOrEqual(t, left, 800*time.Millisecond, "a margin for the reply to come back")
	require.Zero(t, timeoutOf(context.Background()))
}

// The request body says what Request asks: NoWait is wait_ms 0 (not the
// service default), in JSON and msgpack; a negative WaitMS is refused
// before anything is sent.
func TestContext_RequestBody(t *testing.T) {
	nc := startNATS(t)
	bodies := make(chan []byte, 8)
	_, err := nc.Subscribe("ctxd.context.s", func(m *nats.Msg) {
		bodies <- m.Data
		m.Respond([]byte(`{"session":"s","seq":0,"messages":[]}`))
	})
	require.NoError(t, err)
	require.NoError(t, nc.Flush())

	for _, tt := range []struct {
		req  Request
		want string
	}{
		{Request{}, ``},
		{Request{MinSeq: 5}, `{"min_seq":5}`},
		{Request{MinSeq: 5, WaitMS: 250}, `{"min_seq":5,"wait_ms":250}`},
		{Request{MinSeq: 5, NoWait: true}, `{"min_seq":5,"wait_ms":0}`},
		{Request{NoWait: true, WaitMS: 250}, `{"min_seq":0,"wait_ms":0}`},
		{Request{MinSeq: 5, NoWait: true, Msgpack: true}, `{"min_seq": int64(5), "wait_ms": int64(0)}`},
		{Request{MinSeq: 5, Msgpack: true}, `{"min_seq": int64(5), "wait_ms": <nil>(<nil>)}`}, // the service default
	} {
		// No deadline: no timeout_ms (TestRequestBody_Timeout).
		_, err := Context(context.Background(), nc, "s", tt.req)
		require.NoError(t, err)
		body := <-bodies
		if tt.req.Msgpack {
			v, err := record.DecodeMsgpack(body)
			require.NoError(t, err)
			m := v.(*record.Map)
			minSeq, _ := m.Get("min_seq")
			wait, _ := m.Get("wait_ms")
			require.Equal(t, tt.want, fmt.Sprintf(`{"min_seq": %T(%v), "wait_ms": %T(%v)}`, minSeq, minSeq, wait, wait), "%+v", tt.req)
			continue
		}
		require.Equal(t, tt.want, string(body), "%+v", tt.req)
	}

	_, err = Context(timeout(t), nc, "s", Request{WaitMS: -1})
	require.ErrorIs(t, err, ErrBadRequest)
	require.EqualError(t, err, "bad context request: WaitMS -1 is negative")
	require.Empty(t, bodies, "nothing is sent")
}
