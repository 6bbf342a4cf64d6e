// Command turn is what an agent runtime does every turn: publish the
// turn's record to its session's subject, then fetch the context for the
// next model call, as a provider's request body, once that record is
// applied (min_seq = the record's PubAck sequence).
//
//	go run ./cmd/ctxd serve               # in one terminal
//	go run ./examples/turn demo anthropic # in another
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ctxd/ctxd/pkg/client"
)

func main() {
	session, format := "demo", "anthropic"
	if len(os.Args) > 1 {
		session = os.Args[1]
	}
	if len(os.Args) > 2 {
		format = os.Args[2]
	}
	url := os.Getenv("NATS_URL")
	if url == "" {
		url = nats.DefaultURL
	}
	nc, err := nats.Connect(url)
	if err != nil {
		fmt.Fprintln(os.Stderr, "turn:", err)
		os.Exit(1)
	}
	defer nc.Close()
	body, err := turn(context.Background(), nc, session, format,
		[]byte(`{"role":"user","content":"What changed in src/login.tsx?"}`))
	if err != nil {
		fmt.Fprintln(os.Stderr, "turn:", err)
		os.Exit(1)
	}
	os.Stdout.Write(append(body, '\n'))
}

// turn publishes record to the session and returns the context that
// includes it, rendered for format ("" for the neutral context).
func turn(ctx context.Context, nc *nats.Conn, session, format string, record []byte) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	seq, err := client.Publish(ctx, nc, session, record, "")
	if err != nil {
		return nil, err
	}
	return client.Context(ctx, nc, session, client.Request{MinSeq: seq, Format: format})
}
