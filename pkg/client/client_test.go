package client

import (
	"context"
	"testing"

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
	v, err := record.DecodeMsgpack(msgpackRequest(Request{MinSeq: 1 << 63, WaitMS: 250}))
	require.NoError(t, err)
	m := v.(*record.Map)
	minSeq, _ := m.Get("min_seq")
	wait, _ := m.Get("wait_ms")
	require.Equal(t, uint64(1<<63), minSeq)
	require.Equal(t, int64(250), wait)

	v, err = record.DecodeMsgpack(msgpackRequest(Request{MinSeq: 5}))
	require.NoError(t, err)
	wait, _ = v.(*record.Map).Get("wait_ms")
	require.Equal(t, int64(2000), wait, "the service default")
}

func TestError(t *testing.T) {
	require.Equal(t, "504 min_seq not reached within wait_ms", (&Error{"504", "min_seq not reached within wait_ms"}).Error())
}

func TestMsgpackRequest_FormatAndBudget(t *testing.T) {
	v, err := record.DecodeMsgpack(msgpackRequest(Request{Format: "gemini", BudgetTokens: 9000}))
	require.NoError(t, err)
	m := v.(*record.Map)
	f, _ := m.Get("format")
	b, _ := m.Get("budget_tokens")
	require.Equal(t, "gemini", f)
	require.Equal(t, int64(9000), b)
}
