// Package ownership decides who applies what, and which store answers a
// request: the roles of an instance on one stream.
//
// JetStream pins each ingest consumer (one per partition; an
// unpartitioned stream is one partition, its consumer the stream's own)
// to one instance at a time; the pin is the ownership, and nothing else
// is. Roles holds, per partition (a part), the ingest store the pinned
// ingest feeds and the floor no reply goes back past, and answers the
// service (server.Reacher): from the ingest store while the pin is held,
// from the follower that reads an unpartitioned stream along otherwise,
// or through the stream (roles.go, follow.go). Every stream's ingests
// take one path (ingest.go): a balancer decides which partitions'
// consumers this instance pulls from. With several partitions it counts
// the live instances by $SRV.PING, hands the surplus back, and listens
// to the handbacks of instances that stop (partitions.go, balancer.go,
// peers.go); the one partition of an unpartitioned stream it pulls from
// always, as a standby while another instance holds its pin.
//
// What it needs from outside is injected, each as a small interface or
// a function in Config: the stream (*bus.Stream: its state, follower,
// lag), the partitions' consumers (Consumers: pull, unpin, deleted),
// the other instances (Peers: count, announce, listen), the removal
// watcher (Removals), a factory of stores, and the app's context, logger
// and failure. StreamConsumers and NATSPeers are the real ones over
// package bus and a NATS connection; the tests use fakes of these
// interfaces, never a fake NATS server.
//
// Data flows one way: bus delivers records, ownership applies them to
// the store of the partition that owns them, and the service reads the
// store ownership chooses. ownership imports bus and store, and server
// for the Viewer it hands the service; it never imports app.
package ownership
