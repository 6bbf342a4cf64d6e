package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
	"github.com/ctxd/ctxd/pkg/bus"
	"github.com/ctxd/ctxd/streams"
)

// inspectSession stores a session with a record of each fate, with no
// service running, and returns the server's URL.
func inspectSession(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	url := natstest.Start(t)
	js, err := jetstream.New(natstest.Connect(t, url))
	require.NoError(t, err)
	def, err := streams.Transcripts()
	require.NoError(t, err)
	_, err = bus.EnsureStream(ctx, js, def)
	require.NoError(t, err)
	records := strings.Join([]string{
		`{"role":"user","content":"fix the \u001b[31mlogin\u001b[0m button"}`,
		`{"role":"assistant","content":[{"type":"toolCall","id":"b1","name":"browser_use"}]}`,
		`{"role":"toolResult","toolCallId":"b1","content":[{"type":"image","data":"AAAA","mimeType":"image/png"}]}`,
		`{"role":"assistant","content":[{"type":"toolCall","id":"b2","name":"browser_use"}]}`,
		`{"role":"toolResult","toolCallId":"b2","content":[{"type":"image","data":"BBBB","mimeType":"image/png"}]}`,
		`{"role":"assistant","content":[{"type":"text","text":"running"},{"type":"toolCall","id":"c9","name":"bash"}]}`,
		`{"role":"toolResult","toolCallId":"zz","content":"orphan"}`,
		`{"type":"label","label":"x"}`,
	}, "\n")
	code, out, errOut := runCmd(t, records, "publish", "--session", "s-1", "--nats", url)
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "8\n", out)
	return url
}

func TestInspect_Text(t *testing.T) {
	url := inspectSession(t)
	code, out, errOut := runCmd(t, "", "inspect", "s-1", "--nats", url)
	require.Equal(t, 0, code, errOut)
	lines := strings.Split(out, "\n")
	require.Equal(t, "session s-1 (latest): 8 records, last seq 8", lines[0])
	require.Contains(t, lines[1], "context: 6 messages")
	require.Contains(t, lines[1], "images 1 kept, 1 omitted; 1 unpaired calls, 1 orphan results")
	status := map[string]string{}
	for _, l := range lines[3:] {
		f := strings.Fields(l)
		if l == "" {
			break // the table ends; the dropped report follows
		}
		if len(f) > 4 && f[0] != "SEQ" && f[0] != "|" {
			status[f[0]] = f[3]
		}
	}
	require.Equal(t, map[string]string{"1": "kept", "2": "kept", "3": "trimmed", "4": "kept", "5": "kept", "6": "pruned", "7": "dropped", "8": "dropped"}, status)
	require.Contains(t, out, `[0] user: fix the [31mlogin [0m button`, "escape sequences are not passed to the terminal")
	require.Contains(t, out, "[1] assistant: [call browser_use]")
	require.NotContains(t, out, "\x1b")
	require.Contains(t, out, `unpaired call "c9" (bash) at seq 6`)
	require.Contains(t, out, `orphan result "zz" at seq 7`)

	code, out, errOut = runCmd(t, "", "inspect", "s-1", "--at", "3", "--nats", url)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "session s-1 (as at seq 3): 3 records, last seq 3")
	require.Contains(t, out, "images 1 kept, 0 omitted")
}

func TestInspect_JSON(t *testing.T) {
	url := inspectSession(t)
	code, out, errOut := runCmd(t, "", "inspect", "s-1", "--json", "--at", "7", "--nats", url)
	require.Equal(t, 0, code, errOut)
	var got struct {
		Session string `json:"session"`
		At, Seq uint64
		Records []struct {
			Seq          uint64 `json:"seq"`
			Class        string `json:"class"`
			Status       string `json:"status"`
			Rule         string `json:"rule"`
			Messages     int    `json:"messages"`
			FirstMessage int    `json:"first_message"`
		} `json:"records"`
		Messages []map[string]any `json:"messages"`
		Dropped  struct {
			UnpairedCalls []map[string]any `json:"unpaired_calls"`
			ImagesOmitted int              `json:"images_omitted"`
		} `json:"dropped"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	require.Equal(t, "s-1", got.Session)
	require.Equal(t, uint64(7), got.At)
	require.Equal(t, uint64(7), got.Seq)
	require.Len(t, got.Records, 7)
	require.Len(t, got.Messages, 6)
	require.Equal(t, "trimmed", got.Records[2].Status)
	require.Equal(t, 2, got.Records[2].FirstMessage)
	require.Equal(t, "dropped", got.Records[6].Status)
	require.Equal(t, -1, got.Records[6].FirstMessage)
	require.Contains(t, got.Records[6].Rule, "orphan result")
	require.Equal(t, 1, got.Dropped.ImagesOmitted)
	require.Len(t, got.Dropped.UnpairedCalls, 1)
}

func TestInspect_Errors(t *testing.T) {
	url := inspectSession(t)
	code, _, errOut := runCmd(t, "", "inspect", "--nats", url)
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "want exactly one SESSION")
	code, _, errOut = runCmd(t, "", "inspect", "a.b", "--nats", url)
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "invalid session id")
	code, _, errOut = runCmd(t, "", "inspect", "nosuch", "--nats", url)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "no records")
}
