package server

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/render"
	"github.com/ctxd/ctxd/pkg/store"
	"github.com/ctxd/ctxd/pkg/subject"
)

func TestErrorReply(t *testing.T) {
	// secret stands for internal detail that must never reach a client.
	const secret = "open /var/lib/ctxd/secret: permission denied"
	badSession := subject.CheckSession("a b")
	require.Error(t, badSession)

	tests := []struct {
		name string
		err  error
		code string
		desc string // exact description; empty: checked by contains
		has  string
	}{
		{name: "bad session id", err: badSession, code: CodeBadRequest, desc: badSession.Error()},
		{name: "bad session id, wrapped", err: fmt.Errorf("context: %w", badSession), code: CodeBadRequest, has: "invalid session id"},
		{name: "bad body", err: fmt.Errorf("%w: min_seq must be a non-negative integer, got -1", errBadBody), code: CodeBadRequest, has: "min_seq must be a non-negative integer"},
		{name: "unknown format", err: func() error { _, err := render.ParseFormat("x"); return err }(), code: CodeBadRequest, has: "want one of neutral, anthropic, openai-chat, openai-responses, gemini"},
		{name: "wait expired", err: fmt.Errorf("%w: at 3, waiting for 9", store.ErrWaitExpired), code: CodeWaitExpired, desc: "min_seq not reached within wait_ms"},
		{name: "wait ended by shutdown", err: fmt.Errorf("%w: shutting down", store.ErrWaitExpired), code: CodeWaitExpired, desc: "min_seq not reached within wait_ms"},
		{name: "wait expired, bare", err: store.ErrWaitExpired, code: CodeWaitExpired, desc: "min_seq not reached within wait_ms"},
		{name: "reply too large", err: fmt.Errorf("%w: 9000000 bytes (%s)", errTooLarge, secret), code: CodeInternal, desc: "context too large to hold for chunked delivery"},
		{name: "reply over the largest sent", err: fmt.Errorf("%w: 9000000 bytes: %w", errTooLarge, &tooLargeError{size: 600 << 20, max: 512 << 20}), code: CodeInternal,
			desc: "context reply of 629145600 bytes is larger than the largest this service sends, 536870912 bytes (twice ctxd serve --max-session-bytes, at least 512 MiB)"},
		{name: "no such chunk", err: fmt.Errorf("chunk 3 of %s: %w", secret, errNoChunk), code: CodeNotFound, desc: "no such chunk: expired, evicted, fetched already, or never made; request the context again"},
		{name: "too many waiters", err: errTooManyWaiters, code: CodeBusy, desc: "too many requests waiting for min_seq: retry later, or with wait_ms 0"},
		{name: "load lane full", err: fmt.Errorf("%w (%s)", errBusy, secret), code: CodeBusy, desc: "too many requests for sessions not in the cache: retry later"},
		{name: "no msgpack form", err: fmt.Errorf("%w: message from seq 2: %s", errNotMsgpack, secret), code: CodeInternal, desc: "context holds a number msgpack cannot carry; request JSON"},
		{name: "past timeout_ms", err: fmt.Errorf("%w: %w", errNoTime, errors.New(secret)), code: CodeWaitExpired, has: "no answer within timeout_ms"},
		{name: "the stream did not answer", err: fmt.Errorf("%w: %w", errStreamTimeout, fmt.Errorf("direct get (%s): %w", secret, context.DeadlineExceeded)), code: CodeWaitExpired, has: "the stream did not answer in time"},
		{name: "anything else", err: errors.New(secret), code: CodeInternal, desc: "internal error"},
		{name: "anything else, wrapped", err: fmt.Errorf("render: %w", errors.New(secret)), code: CodeInternal, desc: "internal error"},
		{name: "context cancelled", err: context.Canceled, code: CodeInternal, desc: "internal error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, desc := errorReply(tt.err)
			require.Equal(t, tt.code, code)
			if tt.desc != "" {
				require.Equal(t, tt.desc, desc)
			} else {
				require.Contains(t, desc, tt.has)
			}
			if code != CodeBadRequest {
				require.NotContains(t, desc, "secret")
				require.NotContains(t, desc, "waiting for 9")
			}
		})
	}
}
