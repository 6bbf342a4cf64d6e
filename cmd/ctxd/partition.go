package main

import (
	"context"
	"fmt"

	"github.com/ctxd/ctxd/pkg/bus"
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
it is when P is its own, and refused otherwise. Running ctxd instances go on
with what they started with: restart them after this command (they read P
from the stream). Instances of a ctxd without partitions reject the
partitioned records: upgrade them first.`

func runPartition(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "partition", "partition --partitions P [flags]", partitionAbout)
	conn := addConnFlags(fs, e, false)
	p := fs.Int("partitions", streams.RecommendedPartitions, "number of partitions, 2 to 1024; at least the instances foreseen")
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
	l, err := bus.Partition(ctx, js, stream, *p)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "stream %s: %d partitions; records up to sequence %d stay on transcripts.<session>\n", l.Stream, l.P, l.After)
	return nil
}
