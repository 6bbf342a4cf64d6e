package bus_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
	"github.com/ctxd/ctxd/pkg/bus"
)

func TestSubjects(t *testing.T) {
	js := natstest.JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}})
	require.NoError(t, err)

	got, err := bus.Subjects(ctx, js, "T", "t.>")
	require.NoError(t, err)
	require.Empty(t, got, "an empty stream")

	big := strings.Repeat("x", 200_000)
	for _, p := range []struct{ subj, data string }{{"t.a", "1"}, {"t.b", "22"}, {"t.a", big}, {"t.c", "4"}, {"t.b", "55555"}} {
		_, err := js.Publish(ctx, p.subj, []byte(p.data))
		require.NoError(t, err)
	}
	got, err = bus.Subjects(ctx, js, "T", "t.>")
	require.NoError(t, err)
	byName := map[string]bus.SubjectState{}
	for _, s := range got {
		byName[s.Subject] = s
	}
	require.Equal(t, map[string]bus.SubjectState{
		"t.a": {Subject: "t.a", Messages: 2, Last: 3, LastSize: len(big)},
		"t.b": {Subject: "t.b", Messages: 2, Last: 5, LastSize: 5},
		"t.c": {Subject: "t.c", Messages: 1, Last: 4, LastSize: 1},
	}, byName)
}
