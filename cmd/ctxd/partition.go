package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/ctxd/ctxd/pkg/bus"
	"github.com/ctxd/ctxd/pkg/client"
	"github.com/ctxd/ctxd/pkg/natsd"
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

The transform and the metadata go in one stream update. A record stored
between the read of the last sequence and that update lands before the
transform; the command then raises the metadata over it in a second
update. A stream left between the two (the command killed there, or an
earlier ctxd, which always made two updates) is refused by ctxd serve,
rebuild, inspect and import, with an error naming this command: run it
again with the stream's P to finish it. Finishing also empties the
snapshot and checkpoint buckets, which a ctxd that read the stream wrong
may have written; sessions then load from the stream.

P is fixed for the stream's life; a stream already partitioned is left as
it is when P is its own (once finished), and refused otherwise.

Stop every ctxd instance of the stream first, and start them again after
this command (they read P from the stream): an instance reads a session on
the subjects of the layout it started with, and would miss the records
stored after the change. The command refuses while instances of the stream
answer $SRV.PING (it waits --ping-wait for them), and names them; one that
meets the change anyway stops answering and exits with an error, for its
supervisor to start it again. Publishers may go on meanwhile: ctxd applies
what they stored when it starts.

With the embedded server (ctxd serve without --nats), stop ctxd serve and
give its store directory: ctxd partition --data ./data --partitions 16.
The server then runs in this process, and killing it while it rewrites
the stream's configuration would leave the file and its checksum
disagreeing, a stream the next server skips: the files are kept aside in
the store (ctxd-kept) until the update is done, and the next open of the
store puts them back if it was not. Instances of a ctxd without
partitions reject the partitioned records: upgrade them first.`

func runPartition(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "partition", "partition --partitions P [flags]", partitionAbout)
	conn := addConnFlags(fs, e, false)
	p := fs.Int("partitions", streams.RecommendedPartitions, "number of partitions, 2 to 1024; at least the instances foreseen")
	pingWait := fs.Duration("ping-wait", time.Second, "how long to wait for running instances of the stream to answer $SRV.PING")
	data := fs.String("data", "", "the embedded server's store `DIR` (that of ctxd serve without --nats, stopped): partition the stream there, instead of on a server at --nats")
	timeout := addTimeout(fs, 10*time.Minute)
	pos, err := parse(e, fs, args)
	if err != nil {
		return err
	}
	if err := e.bound("partition", "--timeout", *timeout); err != nil {
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
	var srv *natsd.Server // the embedded server's, with --data
	if *data != "" {
		explicit := false
		fs.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "nats" })
		if explicit {
			fmt.Fprintln(e.stderr, "ctxd partition: --data and --nats name two servers; give one")
			return errUsage
		}
		// The store of the embedded server, opened here alone: a ctxd
		// serve that runs on it holds it, and the open fails.
		srv = natsd.New(*data)
		srv.Port = -1
		if err := srv.OpenContext(ctx); err != nil {
			return fmt.Errorf("open the store in %s (stop the ctxd serve that runs on it first): %w", *data, err)
		}
		defer srv.Close()
		conn.url = srv.ClientURL()
	}
	nc, stream, err := conn.connectStream(e, fs)
	if err != nil {
		return err
	}
	defer nc.Close()
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
		return fmt.Errorf("%d ctxd instance(s) serve stream %s (%s): stop them first, and start them again after the change; records published meanwhile are kept and applied when they start",
			len(names), stream, strings.Join(names, ", "))
	}
	if srv != nil {
		// The update rewrites the stream's configuration in the store, in
		// this process: killed half way, the server would skip the stream
		// at its next start. The next open puts the copy back instead.
		drop, err := srv.KeepStreamConfig(stream)
		if err != nil {
			return err
		}
		defer func() {
			if err := drop(); err != nil {
				fmt.Fprintf(e.stderr, "ctxd partition: %v\n", err)
			}
		}()
	}
	done, err := bus.Partition(ctx, nc, stream, *p)
	if err != nil {
		if *data != "" {
			err = withDataHint(err, *data)
		}
		return err
	}
	if done.Finished {
		fmt.Fprintf(e.stdout, "stream %s: its partitioning was not finished, and is now; the snapshot and checkpoint buckets were emptied (ctxd may have written them from a wrong read; sessions load from the stream)\n", done.Stream)
	}
	fmt.Fprintf(e.stdout, "stream %s: %d partitions; records up to sequence %d stay on transcripts.<session>\n", done.Stream, done.P, done.After)
	return nil
}

// withDataHint adds to the error of a stream whose partitioning is not
// finished the command that finishes it on the embedded server's store
// in dir.
func withDataHint(err error, dir string) error {
	var ue *bus.UnfinishedError
	if !errors.As(err, &ue) {
		return err
	}
	return fmt.Errorf("%w\n(on the embedded server's store: ctxd partition --data %s --partitions %d, with ctxd serve stopped)", err, dir, ue.P)
}
