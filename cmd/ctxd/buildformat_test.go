package main

import (
	"bytes"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
	"github.com/ctxd/ctxd/pkg/render"
)

// ctxd build --format F prints the body pkg/render makes of the context;
// --dropped adds the passes' report and the renderer's.
func TestBuild_Format(t *testing.T) {
	data, err := os.ReadFile("../../examples/session.jsonl")
	require.NoError(t, err)
	for _, f := range render.Formats[1:] {
		t.Run(string(f), func(t *testing.T) {
			code, out, errOut := runCmd(t, string(data), "build", "--format", string(f))
			require.Equal(t, 0, code, errOut)
			recs, err := readRecords(bytes.NewReader(data), record.Decoder{})
			require.NoError(t, err)
			res := projection.Build(projection.Numbered(recs), projection.Options{})
			body, rep := render.Render(f, res.Messages, render.Options{})
			require.True(t, record.Equal(body.Fields, decodeOutput(t, out)), "body:\n%s", out)

			code, out, errOut = runCmd(t, string(data), "build", "--format", string(f), "--dropped")
			require.Equal(t, 0, code, errOut)
			m := decodeOutput(t, out).(*record.Map)
			var keys []string
			for _, mem := range m.Members {
				keys = append(keys, mem.Key)
			}
			var want []string
			for _, mem := range body.Fields.Members {
				want = append(want, mem.Key)
			}
			require.Equal(t, append(want, "dropped", "render"), keys)
			got, _ := m.Get("render")
			changes, _ := got.(*record.Map).Get("changes")
			require.Len(t, changes, len(rep.Changes))
		})
	}

	code, out, errOut := runCmd(t, "", "build", "--format", "bogus")
	require.Equal(t, 2, code)
	require.Empty(t, out)
	require.Contains(t, errOut, "want one of neutral, anthropic, openai-chat, openai-responses, gemini")

	// neutral is the default, and prints what build always printed.
	code1, out1, _ := runCmd(t, string(data), "build")
	code2, out2, _ := runCmd(t, string(data), "build", "--format", "neutral")
	require.Equal(t, 0, code1)
	require.Equal(t, 0, code2)
	require.Equal(t, out1, out2)
}
