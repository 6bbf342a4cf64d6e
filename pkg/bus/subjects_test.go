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

// TestSubjectsSince: a list taken again from one before has the same
// lasts as a list taken afresh, for the subjects that moved, the new
// ones and the others.
func TestSubjectsSince(t *testing.T) {
	js := natstest.JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}})
	require.NoError(t, err)
	publish := func(subj, data string) {
		_, err := js.Publish(ctx, subj, []byte(data))
		require.NoError(t, err)
	}
	publish("t.a", "1")
	publish("t.b", "22")
	publish("t.c", "333")
	before, err := bus.Subjects(ctx, js, "T", "t.>")
	require.NoError(t, err)
	publish("t.b", "4444")
	publish("t.d", "55555")
	byName := func(l []bus.SubjectState) map[string]bus.SubjectState {
		out := map[string]bus.SubjectState{}
		for _, s := range l {
			out[s.Subject] = s
		}
		return out
	}
	got, err := bus.SubjectsSince(ctx, js, "T", "t.>", before)
	require.NoError(t, err)
	fresh, err := bus.Subjects(ctx, js, "T", "t.>")
	require.NoError(t, err)
	require.Equal(t, byName(fresh), byName(got))
	require.Equal(t, bus.SubjectState{Subject: "t.b", Messages: 2, Last: 4, LastSize: 4}, byName(got)["t.b"])
	again, err := bus.SubjectsSince(ctx, js, "T", "t.>", got)
	require.NoError(t, err)
	require.Equal(t, byName(fresh), byName(again), "nothing moved")
}
