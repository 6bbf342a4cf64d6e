// Package bus is the one package that talks JetStream. Every other
// package reaches streams, consumers and buckets through it, holding at
// most a connection and bus's own handles: Stream (SetUp, FindStream,
// OpenStream), Consumer, Ingest, Follower, Checkpoints, Snapshots,
// Layout. Only bus, the definitions in streams/, pkg/perf's baselines
// (which measure JetStream itself) and tests import nats.go/jetstream.
// The functions that take JetStream's handles (EnsureStream,
// OpenConsumer, StartIngest, Replay, Publish...) are what the handles'
// methods are made of; they stay exported for those baselines, ctxd's
// offline commands and the tests.
//
// bus knows no domain package: it moves bytes, sequences and subjects
// (package subject names them). The one domain value it stores, a
// session's checkpoint, is package checkpoint's, a leaf that package
// store shares; everything else it hands on is bytes.
//
//   - Streams and consumers: EnsureStream creates the TRANSCRIPTS stream
//     from its definition in streams/, or checks an existing one field by
//     field (CheckStream, FieldError); limits that delete records are
//     refused unless AllowLimits. OpenConsumer opens the ingest's durable
//     consumer the same way (CheckConsumer), replacing one without the
//     definition's priority group or ack policy at its acknowledged floor.
//   - Ingest: StartIngest feeds a durable consumer's records to a Handler
//     in stream order, every sequence once, reading the sequences a
//     delivery skipped before going on; on a consumer with acks (not
//     ctxd's) it acknowledges in batches. Pulls ask for what fits the
//     server (PullBytes). On
//     the pinned consumer every instance pulls and JetStream delivers to
//     one; the Pin hooks hear when this one gains or loses the pin. On a
//     partition's consumer TrackDeliveries spares the reads of the
//     records between two deliveries that are not the partition's.
//   - Pins and lag: Stream.Unpin gives a consumer's pin back (only the
//     pin named, or whoever holds it), Stream.Lag says how far behind
//     the stream consumers are, Stream.ConsumerDeleted whether one was
//     deleted; Stream.WatchLayout tells the instance when the stream's
//     partitions are no longer those it started with. NotEnabled, NoPeers and Transient
//     sort the errors of a JetStream that is starting.
//   - Reads: Replay reads a range with an ordered consumer; ReadSubject,
//     ReadRange and ReadSeqs read with direct gets, no consumer needed;
//     LastOf asks for a subject's last record; StreamFor finds the stream
//     of a subject, and ReadSubjectLog the ids of a subject's records, with
//     a consumer that delivers headers only. Every direct-get reply is
//     awaited at most DirectTimeout, then asked for again (the server that
//     had the request may have stopped), and a batched read goes on until the
//     server says nothing is left, however short a batch it sent. Stream
//     offers these reads to a caller that holds only a connection.
//   - Validated reads: on a replicated stream any replica answers a direct
//     get, a follower that has not yet stored what the leader acknowledged
//     included, and its 404 or "nothing more" speaks only for itself. So
//     every read proves from the replies how far it reached: a message at
//     sequence N proves its replica holds every sequence up to N, and a
//     multi_last reply's Nats-UpTo-Sequence is its replica's last
//     sequence. A read that stops short of a record it knows exists asks
//     the replicas again, then the stream leader, whose "no message" alone
//     makes a record gone; a read it cannot prove fails. When the replica
//     is current this costs no request, except one multi_last for a
//     ReadSubject that meets no record at or past its end. Reads counts
//     the reads that had to ask again or ask the leader.
//   - Writes: Publish stores one record, PublishAll many, pipelined;
//     Append appends records to a subject, pipelined, and tells what the
//     server did with each.
//   - Checkpoints: the key-value bucket of per-session checkpoints.
//
// # Files
//
//	stream.go       EnsureStream, CheckStream, OpenConsumer: definitions checked field by field
//	handle.go       SetUp, FindStream, Consumer: the handles over them
//	streamread.go   Stream, OpenStream: a stream's reads and buckets over a connection
//	consume.go      StartIngest, Replay, Ingest, Pin: records fed to a Handler
//	pull.go         PullBytes: what a pull may ask for
//	ackreply.go     the sequences a delivery's reply subject names
//	follow.go       Follower: a whole stream read along as it is written
//	direct.go       ReadSubject, ReadRange, ReadSeqs, LastOf, CountSubject: reads by direct get
//	directget.go    the direct-get requests, batches and multi_last behind them, and their replies
//	directseqs.go   reads by sequence: a window of single gets, asked again until answered
//	seqsof.go       ReadSubjectSeqs: a subject's records at the sequences of an index
//	validate.go     validated reads: what a replica's replies prove; Reads, ReadStats
//	leader.go       stream info from the leader only
//	subjectlog.go   StreamFor, ReadSubjectLog: the ids of a subject's records
//	headers.go      a consumer that delivers headers only
//	subjects.go     Subjects, ListSubjects: what a stream holds of each subject
//	publish.go      Publish, PublishAll
//	append.go       Append: records appended to a subject, what the server did with each
//	partition.go    Layout, CheckLayout: partitions of the stream
//	layoutwatch.go  LayoutWatch: the partitions changing under a running instance
//	removals.go     removals announced and the stream's state read back
//	checkpoint.go   Checkpoints: the bucket of session checkpoints
//	snapshots.go    Snapshots: the bucket of session snapshots
//	bucket.go       a key-value bucket opened from its definition
//	errors.go       NoPeers, NotEnabled, Transient: the errors of a JetStream starting
//
// Data flows one way: publisher -> stream -> consumer -> handler. The
// handler (the projections) knows nothing of JetStream, and bus knows
// nothing of projections: they meet in package ownership, which package
// app wires.
package bus
