package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/ctxd/ctxd/pkg/bus"
	"github.com/ctxd/ctxd/pkg/client"
	"github.com/ctxd/ctxd/streams"
)

const partitionAbout = `Spreads the sessions of an existing TRANSCRIPTS stream over partitions:
a stream update adds the subject transform that stores a record published
to transcripts.<session> as transcripts.<k>.<session>, k = FNV-32a(session)
mod P. Publishers keep publishing to transcripts.<session>.

Nothing is moved or renumbered: the records stored so far stay on
transcripts.<session> with their sequences, so every min_seq stays valid.
The last sequence stored before the transform is written in the stream's
metadata (ctxd_partitioned_after), and ctxd reads a session's records on
both subjects up to it.

P is fixed for the stream's life; a stream already partitioned is left as
it is when P is its own, and refused otherwise.

Stop every ctxd instance of the stream first, and start them again after
this command (they read P from the stream): an instance reads a session on
the subjects of the layout it started with, and would miss the records
stored after the change. The command refuses while instances of the stream
answer $SRV.PING (it waits --ping-wait for them), and names them; one that
meets the change anyway stops answering and exits with an error, for its
supervisor to start it again. Publishers may go on meanwhile: ctxd applies
what they stored when it starts. Instances of a ctxd without partitions
reject the partitioned records: upgrade them first.`

func runPartition(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "partition", "partition --partitions P [flags]", partitionAbout)
	conn := addConnFlags(fs, e, false)
	p := fs.Int("partitions", streams.RecommendedPartitions, "number of partitions, 2 to 1024; at least the instances foreseen")
	pingWait := fs.Duration("ping-wait", time.Second, "how long to wait for running instances of the stream to answer $SRV.PING")
	pos, err := parse(e, fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		fmt.Fprintf(e.stderr, "ctxd partition: takes no arguments, got %q\n", pos)
		return errUsage
	}
	if *p < 2 || *p > streams.MaxPartitions {
		fmt.Fprintf(e.stderr, "ctxd partition: --partitions %d; 2 to %d\n", *p, streams.MaxPartitions)
		return errUsage
	}
	nc, stream, err := conn.connectStream(e, fs)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := bus.JetStream(nc)
	if err != nil {
		return err
	}
	running, err := client.Instances(ctx, nc, *pingWait)
	if err != nil {
		return err
	}
	var names []string
	for _, in := range running {
		if in.Stream == "" || in.Stream == stream {
			names = append(names, in.Name)
		}
	}
	if len(names) > 0 {
		return fmt.Errorf("ctxd partition: %d ctxd instance(s) serve stream %s (%s): stop them first, and start them again after the change; records published meanwhile are kept and applied when they start",
			len(names), stream, strings.Join(names, ", "))
	}
	l, err := bus.Partition(ctx, js, stream, *p)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "stream %s: %d partitions; records up to sequence %d stay on transcripts.<session>\n", l.Stream, l.P, l.After)
	return nil
}
