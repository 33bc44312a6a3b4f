// Package netio is the broker's network side: a gnet listener per protocol
// (Kafka, and the native protocol of internal/nativeproto), request
// framing, the handlers of every API, and the writing of responses,
// fetched records going from segment files to sockets with sendfile.
//
// It is the broker's most concurrent package. This comment is its
// concurrency contract; the code it names is the reference.
//
// # Reading and parsing: the gnet event loops
//
// Each connection belongs to one gnet event loop (Config.EventLoops of
// them, GOMAXPROCS by default), which alone reads it: Server.OnTraffic
// copies the bytes gnet read into the pooled buffer of the frame being
// assembled (conn.frame; pool.go), closes the connection on a length
// prefix above MaxRequestBytes, and dispatches each whole frame in arrival order
// (Server.dispatch, then handleFrame or handleNativeFrame: header, API
// table, versions). Everything in conn marked "event loop only" (the
// frame being assembled, the unread count) is touched by that loop alone.
//
// # Running handlers: inline or on a goroutine
//
// A handler runs inline on the event loop unless it may block:
//
//   - Kafka: the apiTable rows marked async (Metadata, OffsetCommit and the
//     admin APIs: CreateTopics, DeleteTopics, InitProducerId,
//     DescribeConfigs, AlterConfigs, CreatePartitions, DeleteGroups,
//     IncrementalAlterConfigs, OffsetDelete) are decoded on the loop, in
//     order, so that a malformed body closes the connection before anything
//     pipelined behind it is parsed, then run on a goroutine of their own.
//     The others run inline.
//   - Kafka's group coordinator requests (groupOrdered: OffsetCommit,
//     OffsetFetch, JoinGroup, LeaveGroup, SyncGroup, TxnOffsetCommit,
//     DeleteGroups, OffsetDelete, ConsumerGroupHeartbeat,
//     ShareGroupHeartbeat) are processed one after another per connection,
//     in arrival order, as Kafka processes a connection's requests
//     (dispatchOrdered, conn.groupTail): an inline one whose predecessor is
//     still running is decoded on the loop and waits for it on a goroutine.
//     Clients rely on it: an OffsetCommit pipelined before the heartbeat
//     that gives its partition up, an OffsetFetch behind the commit it must
//     see. A classic Heartbeat keeps out of it: it only keeps a session,
//     which a slow commit ahead of it would let expire. JoinGroup and
//     LeaveGroup of a group with consumer-protocol state finish on a
//     goroutine of the engine's, after the lane moves on.
//   - Native (handleNativeFrame): CREATE_TOPIC, COMMIT_OFFSET and FETCH
//     (which reads, decompresses and re-encodes records) run on a
//     goroutine of their own; PRODUCE and FETCH_OFFSET inline.
//   - A produce (Kafka or native) whose topic must be auto-created leaves
//     the loop for the connection's serial goroutine (conn.serial), and
//     every produce behind it on that connection follows it there until
//     the queue is empty, so appends keep request order. Off the loop a
//     produce waits for its shard's room instead of pausing the
//     connection. Nothing on a loop creates a topic or waits for an
//     fsync. One disk wait is left there: a Kafka fetch answered inline
//     sends its ranges with sendfile on the loop (up to inlineMaxBytes a
//     round, see Writing), and a range that is not in the page cache (a
//     consumer far behind) is read from disk right then; the index
//     lookups before it are mmap reads, which can fault in the same way.
//
// An inline handler may still finish later, elsewhere: a produce is
// answered from its writer shard's goroutine (engine.AppendRequest.Done),
// a Kafka fetch that must wait for data parks without a goroutine
// (fetch.park) and is read and answered by whoever wakes it (the append's
// notification on a shard goroutine or event loop, its MaxWaitMs timer,
// Drain or the connection's close), and JoinGroup and SyncGroup
// are answered by whichever goroutine completes the group's phase (another
// member's request on some event loop, a group timer, or the coordinator's
// persistence goroutine).
//
// # Ordering
//
// Responses leave in request order whatever order handlers finish in.
// Each request gets a slot in the connection's FIFO (conn.slot, on the
// event loop, in parse order; a produce only once admitted, so a paused
// one has no slot yet); the handler's completion fills it (conn.complete,
// from any goroutine); only complete slots at the head of the FIFO are
// sent. An acks=0 produce keeps its slot, marked to send nothing, so that
// it is counted in flight and released in order.
//
// # Writing: whoever holds conn.writing
//
// gnet's outbound buffer is never used, so bytes written by gnet and by
// sendfile cannot interleave. One
// goroutine at a time writes a connection: the one that set conn.writing
// under conn.mu. In conn.complete, when the completed slot is at the head
// of the FIFO, at most 1 MiB (inlineMaxBytes), and nobody is writing, the
// completing goroutine itself (the event loop for an immediate answer or
// an append on the direct-write path, a writer shard for a produce, the
// append that wakes a parked fetch, an async handler) takes the ready
// slots at the head, up to 1 MiB, and sends them with non-blocking
// sendmsg (and sendfile for fetched ranges) on gnet's own socket; then,
// up to inlineRounds writes in all, what completed meanwhile. It never
// waits for the socket (sendfile may still read a range from disk): what
// a full socket does not take (EAGAIN) is left in conn.rest for the
// connection's writer goroutine (conn.writeLoop), which also sends every
// larger response and what is left after those rounds, blocking on a dup of the
// socket (the runtime's poller waits on it) as long as it takes. That
// goroutine and its dup are started the first time a connection needs
// them (conn.wakeWriter), so an idle connection holds one descriptor and
// no goroutine. gnet closes its socket right after OnClose returns;
// OnClose (conn.close) waits for an inline writer still using it, and no
// inline write starts on a closed connection, so a descriptor number gnet
// reuses for a new connection is never written by an old one's writer. Whoever wrote a batch releases what its slots held
// (conn.finish: the request's pooled buffer is already back, the fetch's
// segment references go now), lowers the in-flight count and, after a
// write error, closes the connection.
//
// One exception delays a write: while the event loop dispatches the
// frames it read together (OnTraffic, between conn.holdWrites and
// conn.flushHeld; conn.held under conn.mu), a response completed at the
// head of the FIFO is only marked ready, and the loop sends the ready
// ones in one write when it has dispatched them all, or 64 KiB of
// requests (heldRunBytes). Pipelined produces answered on the direct-write
// path then cost one sendmsg, not one each. Whoever else completes a
// response meanwhile leaves it to that flush too, so no ready response
// waits longer than the loop's current read.
//
// # Pausing and resuming (backpressure)
//
// The event loop stops parsing a connection (conn.paused) when it has
// MaxInflightPerConn requests unanswered (Server.dispatch), or when a
// produce finds its writer shard's queue full (conn.roomOrPause). The frame
// it could not dispatch stays whole in conn.frame. The pause ends from
// the goroutine that made room: conn.finish once the in-flight count
// drops below the limit, or the shard's OnRoom callback once its queue
// drains; conn.resume clears the flag and wakes the event loop
// (gnet.Conn.Wake), whose OnTraffic dispatches conn.frame again from the
// start. While Server.Drain runs, no connection is parsed either.
//
// gnet cannot be told to stop reading a socket: it keeps reading a
// connection that is not being parsed, into an inbound buffer that grows
// without limit (a quarter at a time, its old buffers kept in a pool:
// four times the bytes in memory). Server.holdUnread therefore moves
// those bytes out of gnet, into the connection's overflow (overflow.go:
// fixed 16 KiB chunks of the server's pool, charged whole), and closes a
// connection whose client sends more than MaxRequestBytes while not read,
// or whose chunks would take the listener's total past MaxPausedBytes;
// once the connection is read again, the loop reads its overflow before
// gnet's buffer. Memory held for connections that are not read is thus
// at most, per listener, one frame per connection (conn.frame, at most
// MaxRequestBytes, as for any connection assembling a frame) plus
// MaxPausedBytes of overflow chunks.
//
// Before authentication a connection may have one request in flight
// (conn.inflightLimit), and everything of its bytes the broker holds,
// the frame in flight, the one in conn.frame and the unread ones
// (conn.preAuthHeld), stays within Security.MaxUnauthenticatedBytes: a
// larger frame, or unread bytes past it, close the connection.
//
// # Zero-copy fetch
//
// A Kafka fetch reads no record bytes: wal.Log.Read returns file ranges of
// whole batches, holding references on their segments; fetchwire.go
// encodes the response's header fields by hand around those ranges; the
// writer sends the bytes with sendmsg (MSG_MORE when a range follows) and
// each range with sendfile from the segment file to the socket, then
// releases the references. A partition's records shorter than
// Config.FetchCopyBelow are read into the header buffer instead and go
// with it in one sendmsg (small tail fetches: one system call and one TCP
// segment fewer). A native fetch, whose record format differs
// from the stored one, reads and re-encodes the records instead.
//
// # Closing
//
// Besides the client and write errors, the broker closes connections
// itself: OnOpen refuses those past MaxConnections (a TLS listener's
// accept loop also counts its handshakes in progress, against
// MaxConnections and Security.MaxUnauthenticatedConns, and displaces the
// oldest of them at either limit: tlsfront.go), and the listener's
// reaper goroutine (reaper.go) closes, with gnet's goroutine-safe Close,
// a connection idle longer than IdleTimeout (nothing received, nothing in
// flight, not paused) or one whose frame started more than
// RequestReadTimeout ago and is not whole (conn.lastRead and
// conn.frameStart, stored by the event loop).
//
// OnClose (event loop) returns the frame being assembled to the pool,
// drops the connection's unread count and closes conn.done, which ends a
// parked fetch, and wakes the writer goroutine, which waits for an inline
// writer to finish, releases what the unsent slots hold, closes the dup
// and exits. Slots completed after the close release their resources in
// conn.complete.
package netio
