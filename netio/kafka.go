package netio

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"reflect"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/wal"
)

// apiHandler is one row of the Kafka API table: the versions served, the
// versions advertised in ApiVersions, and the handler.
type apiHandler struct {
	key    int16
	name   string
	min    int16 // lowest version served
	max    int16 // highest version served
	advMin int16 // lowest version advertised (Produce: 0, see its file)
	async  bool  // run the handler on its own goroutine (it blocks on disk)
	// clusterOnly rows are served in cluster mode only, and never
	// advertised in ApiVersions (internal calls between brokers).
	clusterOnly bool
	handler     func(s *Server, r *request) frameOutcome
}

const maxAPIKey = 127

// apiTable is the single source of truth for what ringlog serves; each
// handler file opens with its row's reasoning.
var apiTable = []apiHandler{
	{key: 0, name: "Produce", min: 0, max: 12, advMin: 0, handler: handleProduce},
	{key: 1, name: "Fetch", min: 4, max: 17, advMin: 4, handler: handleFetch},
	{key: 2, name: "ListOffsets", min: 0, max: 10, advMin: 0, async: true, handler: handleListOffsets},
	{key: 3, name: "Metadata", min: 0, max: 13, advMin: 0, async: true, handler: handleMetadata},
	{key: 8, name: "OffsetCommit", min: 0, max: 9, advMin: 0, async: true, handler: handleOffsetCommit},
	{key: 9, name: "OffsetFetch", min: 0, max: 9, advMin: 0, handler: handleOffsetFetch},
	{key: 10, name: "FindCoordinator", min: 0, max: 4, advMin: 0, handler: handleFindCoordinator},
	{key: 11, name: "JoinGroup", min: 0, max: 9, advMin: 0, handler: handleJoinGroup},
	{key: 12, name: "Heartbeat", min: 0, max: 4, advMin: 0, handler: handleHeartbeat},
	{key: 13, name: "LeaveGroup", min: 0, max: 5, advMin: 0, handler: handleLeaveGroup},
	{key: 14, name: "SyncGroup", min: 0, max: 5, advMin: 0, handler: handleSyncGroup},
	{key: 15, name: "DescribeGroups", min: 0, max: 5, advMin: 0, handler: handleDescribeGroups},
	{key: 16, name: "ListGroups", min: 0, max: 5, advMin: 0, handler: handleListGroups},
	{key: 18, name: "ApiVersions", min: 0, max: 4, advMin: 0, handler: handleAPIVersions},
	{key: 19, name: "CreateTopics", min: 0, max: 7, advMin: 0, async: true, handler: handleCreateTopics},
	{key: 20, name: "DeleteTopics", min: 0, max: 6, advMin: 0, async: true, handler: handleDeleteTopics},
	{key: 22, name: "InitProducerId", min: 0, max: 5, advMin: 0, async: true, handler: handleInitProducerID},
	{key: 23, name: "OffsetForLeaderEpoch", min: 0, max: 4, advMin: 0, handler: handleOffsetForLeaderEpoch},
	{key: 32, name: "DescribeConfigs", min: 0, max: 4, advMin: 0, async: true, handler: handleDescribeConfigs},
	{key: 33, name: "AlterConfigs", min: 0, max: 2, advMin: 0, async: true, handler: handleAlterConfigs},
	{key: 35, name: "DescribeLogDirs", min: 0, max: 4, advMin: 0, handler: handleDescribeLogDirs},
	{key: 37, name: "CreatePartitions", min: 0, max: 3, advMin: 0, async: true, handler: handleCreatePartitions},
	{key: 42, name: "DeleteGroups", min: 0, max: 2, advMin: 0, async: true, handler: handleDeleteGroups},
	{key: 43, name: "ElectLeaders", min: 0, max: 2, advMin: 0, async: true, handler: handleElectLeaders},
	{key: 44, name: "IncrementalAlterConfigs", min: 0, max: 1, advMin: 0, async: true, handler: handleIncrementalAlterConfigs},
	{key: 45, name: "AlterPartitionReassignments", min: 0, max: 1, advMin: 0, async: true, handler: handleAlterPartitionReassignments},
	{key: 46, name: "ListPartitionReassignments", min: 0, max: 0, advMin: 0, async: true, handler: handleListPartitionReassignments},
	{key: 47, name: "OffsetDelete", min: 0, max: 0, advMin: 0, async: true, handler: handleOffsetDelete},
	{key: 60, name: "DescribeCluster", min: 0, max: 2, advMin: 0, handler: handleDescribeCluster},
	{key: 61, name: "DescribeProducers", min: 0, max: 0, advMin: 0, async: true, handler: handleDescribeProducers},
	{key: 68, name: "ConsumerGroupHeartbeat", min: 0, max: 1, advMin: 0, async: true, handler: handleConsumerGroupHeartbeat},
	{key: 69, name: "ConsumerGroupDescribe", min: 0, max: 1, advMin: 0, handler: handleConsumerGroupDescribe},
}

// clusterAPITable are the internal APIs of cluster mode (cluster.go):
// served only there, never advertised in ApiVersions.
var clusterAPITable = []apiHandler{
	{key: 62, name: "BrokerRegistration", min: 0, max: 4, advMin: 0, async: true, clusterOnly: true, handler: handleClusterInternal},
	{key: 63, name: "BrokerHeartbeat", min: 0, max: 1, advMin: 0, async: true, clusterOnly: true, handler: handleClusterInternal},
	{key: 67, name: "AllocateProducerIds", min: 0, max: 0, advMin: 0, async: true, clusterOnly: true, handler: handleClusterInternal},
	{key: 56, name: "AlterPartition", min: 2, max: 3, advMin: 2, async: true, clusterOnly: true, handler: handleClusterInternal},
	{key: 27, name: "WriteTxnMarkers", min: 0, max: 1, advMin: 0, async: true, clusterOnly: true, handler: handleWriteTxnMarkers},
}

// saslAPITable is served on SASL listeners only (auth.go).
var saslAPITable = []apiHandler{
	{key: 17, name: "SaslHandshake", min: 0, max: 1, advMin: 0, handler: handleSaslHandshake},
	{key: 36, name: "SaslAuthenticate", min: 0, max: 2, advMin: 0, async: true, handler: handleSaslAuthenticate},
}

// credentialAPITable is served when the broker keeps credentials
// (Security.Source), aclAPITable when the authorizer is on.
var credentialAPITable = []apiHandler{
	{key: 50, name: "DescribeUserScramCredentials", min: 0, max: 0, advMin: 0, async: true, handler: handleDescribeUserScramCredentials},
	{key: 51, name: "AlterUserScramCredentials", min: 0, max: 0, advMin: 0, async: true, handler: handleAlterUserScramCredentials},
}

var aclAPITable = []apiHandler{
	{key: 29, name: "DescribeAcls", min: 0, max: 3, advMin: 0, async: true, handler: handleDescribeAcls},
	{key: 30, name: "CreateAcls", min: 0, max: 3, advMin: 0, async: true, handler: handleCreateAcls},
	{key: 31, name: "DeleteAcls", min: 0, max: 3, advMin: 0, async: true, handler: handleDeleteAcls},
}

// request is one parsed Kafka request.
type request struct {
	conn     *conn
	key      int16
	version  int16
	corr     int32
	clientID *string
	flexible bool   // request header v2 (tagged fields)
	body     []byte // the request body (after the header)
	frame    []byte // pooled buffer holding the whole request
	resp     *response
	// own backs resp (slot): one allocation for the request and its
	// place in the connection's response FIFO.
	own     response
	arrived time.Time
	failed  bool // some error code was returned (metrics)
	counted bool // count ran: the metrics have the request
}

// handleFrame parses a request frame and dispatches it (event loop).
func (s *Server) handleFrame(c *conn, frame []byte) frameOutcome {
	r := &request{conn: c, frame: frame, arrived: time.Now()}
	b := frame
	r.key = int16(binary.BigEndian.Uint16(b))
	r.version = int16(binary.BigEndian.Uint16(b[2:]))
	r.corr = int32(binary.BigEndian.Uint32(b[4:]))
	b = b[8:]
	if len(b) < 2 {
		return s.malformed(c, r, "truncated client id")
	}
	idLen := int16(binary.BigEndian.Uint16(b))
	b = b[2:]
	if idLen >= 0 {
		if int(idLen) > len(b) {
			return s.malformed(c, r, "client id runs past the frame")
		}
		// A client sends the same id on every request: reuse the
		// connection's last one rather than allocate it each time.
		raw := b[:idLen]
		if last := c.clientID.Load(); last != nil && *last == string(raw) {
			r.clientID = last
		} else {
			id := string(raw)
			r.clientID = &id
			c.clientID.Store(r.clientID)
		}
		b = b[idLen:]
	}
	if !c.auth.done.Load() && (c.auth.failed.Load() || !preAuthAllowed(r.key)) {
		s.logger.Warn("closing connection: request before SASL authentication completed", "remote", c.remote, "api_key", r.key, "client", clientName(r))
		return frameClose
	}
	if s.cfg.Cluster != nil && s.staleSecurity(c) {
		s.logger.Debug("closing connection: this broker has not caught up with the cluster's credentials and ACLs yet", "remote", c.remote, "client", clientName(r))
		return frameClose
	}
	var h *apiHandler
	if r.key >= 0 && r.key <= maxAPIKey {
		h = s.handlers[r.key]
	}
	if h == nil {
		kreq := kmsg.RequestForKey(r.key)
		if kreq == nil {
			s.logger.Warn("closing connection: unknown API key", "remote", c.remote, "api_key", r.key, "client", clientName(r))
			return frameClose
		}
		return s.unsupported(c, r, kreq, "API not supported by ringlog")
	}
	if r.key == 18 && r.version > h.max {
		// A newer ApiVersions than we know: the v0-format answer with
		// our ranges lets the client retry with a version we serve.
		r.resp = r.slot()
		r.respondAPIVersionsUnsupported()
		return frameDone
	}
	if r.version < h.min || r.version > h.max {
		return s.unsupported(c, r, kmsg.RequestForKey(r.key), "version not supported")
	}
	if from := s.flexibleFrom[r.key]; from >= 0 && r.version >= from {
		r.flexible = true
		rest, ok := skipTags(b)
		if !ok {
			return s.malformed(c, r, "bad header tagged fields")
		}
		b = rest
	}
	r.body = b
	if groupOrdered(r.key) {
		return s.dispatchOrdered(c, r, h)
	}
	if h.async {
		if err := r.checkDecodes(); err != nil {
			return s.malformed(c, r, err.Error())
		}
		r.resp = r.slot()
		go h.handler(s, r)
		return frameDone
	}
	if r.key != 0 {
		r.resp = r.slot()
	}
	return h.handler(s, r)
}

// groupOrdered reports whether API key is one of the group coordinator's
// that change or read a group's state: a connection's requests of these
// are processed one after another, in the order they arrived, as Kafka
// processes a connection's requests. Clients pipeline them and rely on
// it: franz-go sends a revoked partition's last OffsetCommit before the
// ConsumerGroupHeartbeat that gives the partition up (processed the other
// way round, the commit is refused STALE_MEMBER_EPOCH and the partition's
// next owner consumes again what was processed), and an OffsetFetch after
// the OffsetCommit it must see. A classic Heartbeat is left out: it only
// keeps a member's session, and waiting behind its own commit on a slow
// disk it would let the session expire.
func groupOrdered(key int16) bool {
	switch key {
	case 8, 9, 11, 13, 14, 28, 42, 47, 68, 76:
		return true
	}
	return false
}

// dispatchOrdered runs a group coordinator request once the connection's
// previous one has been processed (c.groupTail, event loop only): at once
// on the event loop when that one is done and the handler runs there,
// else on a goroutine that waits for it.
func (s *Server) dispatchOrdered(c *conn, r *request, h *apiHandler) frameOutcome {
	prev := c.groupTail
	if !h.async && (prev == nil || isClosed(prev)) {
		r.resp = r.slot()
		return h.handler(s, r)
	}
	if err := r.checkDecodes(); err != nil {
		return s.malformed(c, r, err.Error())
	}
	r.resp = r.slot()
	next := make(chan struct{})
	c.groupTail = next
	go func() {
		defer close(next)
		if prev != nil {
			<-prev
		}
		if out := h.handler(s, r); out != frameDone {
			// The event loop's handlers answer frameDone; one that
			// did not, off the loop, cannot pause or close it.
			s.logger.Warn("closing connection: a group request's handler could not finish off the event loop", "remote", c.remote, "api_key", r.key)
			c.skip(r.resp, nil)
			r.finish()
			c.gc.Close()
		}
	}()
	return frameDone
}

// checkDecodes decodes the body of a request whose handler runs later, off
// the event loop, here and in order: a body that does not decode closes
// the connection before anything pipelined after it is parsed (the
// handler decodes again on its goroutine).
func (r *request) checkDecodes() error {
	kreq := kmsg.RequestForKey(r.key)
	kreq.SetVersion(r.version)
	return kreq.ReadFrom(r.body)
}

// isClosed reports whether ch is closed (it is only ever closed, never
// sent on).
func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func clientName(r *request) string {
	if r.clientID == nil {
		return ""
	}
	return *r.clientID
}

func (s *Server) malformed(c *conn, r *request, why string) frameOutcome {
	s.logger.Warn("closing connection: malformed request", "remote", c.remote, "api_key", r.key, "version", r.version, "why", why)
	return frameClose
}

// unsupported answers a request we cannot serve with UNSUPPORTED_VERSION
// when the response type has a top-level error code we can encode at the
// requested version; otherwise the connection is closed (logged), as Kafka
// does.
func (s *Server) unsupported(c *conn, r *request, kreq kmsg.Request, why string) frameOutcome {
	if kreq != nil && r.version >= 0 && r.version <= kreq.MaxVersion() {
		resp := kreq.ResponseKind()
		if setTopLevelError(resp, kerr.UnsupportedVersion.Code) && errorEncoded(resp, r.version) {
			kreq.SetVersion(r.version)
			r.flexible = kreq.IsFlexible()
			r.resp = r.slot()
			s.logger.Debug("answering UNSUPPORTED_VERSION", "remote", c.remote, "api_key", r.key, "version", r.version, "why", why)
			r.failed = true
			r.respond(resp)
			return frameDone
		}
	}
	s.logger.Warn("closing connection: unsupported request", "remote", c.remote, "api_key", r.key, "version", r.version, "why", why, "client", clientName(r))
	return frameClose
}

// errorEncoded reports whether resp's top-level error code is part of its
// encoding at version v (some versions of a response type omit it; an
// answer without it would read as success).
func errorEncoded(resp kmsg.Response, v int16) bool {
	resp.SetVersion(v)
	with := resp.AppendTo(nil)
	setTopLevelError(resp, 0)
	without := resp.AppendTo(nil)
	setTopLevelError(resp, kerr.UnsupportedVersion.Code)
	return !bytes.Equal(with, without)
}

// setTopLevelError sets the response's top-level ErrorCode field, if the
// type has one.
func setTopLevelError(resp kmsg.Response, code int16) bool {
	v := reflect.ValueOf(resp)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return false
	}
	f := v.Elem().FieldByName("ErrorCode")
	if !f.IsValid() || f.Kind() != reflect.Int16 || !f.CanSet() {
		return false
	}
	f.SetInt(int64(code))
	return true
}

// skipTags skips a tagged-fields section.
func skipTags(b []byte) ([]byte, bool) {
	n, used := binary.Uvarint(b)
	if used <= 0 {
		return nil, false
	}
	b = b[used:]
	for i := uint64(0); i < n; i++ {
		if _, used = binary.Uvarint(b); used <= 0 {
			return nil, false
		}
		b = b[used:]
		size, used := binary.Uvarint(b)
		if used <= 0 || size > uint64(len(b)-used) {
			return nil, false
		}
		b = b[used+int(size):]
	}
	return b, true
}

// decode reads the body into req (set to the request's version).
func (r *request) decode(req kmsg.Request) error {
	req.SetVersion(r.version)
	return req.ReadFrom(r.body)
}

// slot queues the request's own response as the connection's next slot
// (event loop; once per request).
func (r *request) slot() *response { return r.conn.queueSlot(&r.own) }

// flexibleFrom returns the first version of API key's requests that has
// the flexible (tagged-field) header, or -1 for none or an unknown key.
// The server asks once per served key, so that a frame needs no request
// object to tell (kmsg only answers on one).
func flexibleFrom(key int16) int16 {
	req := kmsg.RequestForKey(key)
	if req == nil {
		return -1
	}
	for v := int16(0); v <= req.MaxVersion(); v++ {
		req.SetVersion(v)
		if req.IsFlexible() {
			return v
		}
	}
	return -1
}

// header appends the response header: correlation id, and the empty
// tagged-fields section of response header v1 for flexible versions
// (never for ApiVersions, whose response header is always v0).
func (r *request) header(dst []byte) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(r.corr))
	if r.flexible && r.key != 18 {
		dst = append(dst, 0)
	}
	return dst
}

// respond encodes resp at the request's version and queues it. The
// buffer comes from the server's pool and goes back once written: most
// responses fit the smallest class, so a produce's answer allocates
// nothing here.
func (r *request) respond(resp kmsg.Response) {
	resp.SetVersion(r.version)
	buf := r.conn.srv.pool.get(4)
	buf = r.header(buf)
	buf = resp.AppendTo(buf)
	binary.BigEndian.PutUint32(buf, uint32(len(buf)-4))
	r.count()
	r.conn.completePooled(r.resp, buf)
	r.finish()
}

// count records the request in the metrics, once. The paths that answer
// call it before queuing the response: a client that has its answer
// finds the request counted (/metrics read right after a produce).
func (r *request) count() {
	if !r.counted {
		r.counted = true
		r.conn.srv.metrics.Request(r.key, time.Since(r.arrived), r.failed)
	}
}

// finish records metrics (if count did not) and returns the request
// buffer to the pool.
func (r *request) finish() {
	s := r.conn.srv
	r.count()
	if r.frame != nil {
		s.pool.put(r.frame)
		r.frame = nil
	}
}

// closeMalformed is for async handlers that find the body malformed:
// the slot is answered with nothing and the connection closed.
func (r *request) closeMalformed(err error) {
	s := r.conn.srv
	s.logger.Warn("closing connection: malformed request body", "remote", r.conn.remote, "api_key", r.key, "version", r.version, "err", err)
	r.conn.skip(r.resp, nil)
	r.finish()
	r.conn.gc.Close()
}

// partitionOutcomes hands out each partition's error code in the answer to
// a request the group coordinator served in one call (offset commits and
// deletes): the call's own error for every partition, otherwise
// TOPIC_AUTHORIZATION_FAILED for a denied topic (left out of the call),
// otherwise the call's next per-partition error, errs holding one for
// each allowed partition in the request's order.
type partitionOutcomes struct {
	err    error
	errs   []error
	denied map[string]bool
	next   int
}

// code is the error code of the request's next partition, of topic.
func (o *partitionOutcomes) code(topic string) int16 {
	switch {
	case o.err != nil:
		return errCode(o.err)
	case o.denied[topic]:
		return kerr.TopicAuthorizationFailed.Code
	}
	o.next++
	return errCode(o.errs[o.next-1])
}

// errCode maps an engine or wal error to a Kafka error code. Engine errors
// wrap a Kafka error first and their cause after it (which may hold other
// Kafka errors): errors.As searches depth first, in wrapping order, so the
// outermost Kafka error decides.
func errCode(err error) int16 {
	if err == nil {
		return 0
	}
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke.Code
	}
	if errors.Is(err, wal.ErrOffsetOutOfRange) {
		return kerr.OffsetOutOfRange.Code
	}
	if errors.Is(err, context.DeadlineExceeded) {
		// A request that ran out of its time (an admin change the
		// quorum did not commit in time): clients retry and check.
		return kerr.RequestTimedOut.Code
	}
	if errors.Is(err, wal.ErrClosed) {
		return kerr.NotLeaderForPartition.Code
	}
	if errors.Is(err, wal.ErrCorrupt) {
		// Damaged stored bytes (the scrubber's find, or a read that
		// met them): the partition's storage failed there.
		return kerr.KafkaStorageError.Code
	}
	return kerr.UnknownServerError.Code
}

// errMessage is the text for responses that carry an error message.
func errMessage(err error) *string {
	if err == nil {
		return nil
	}
	m := err.Error()
	// Errors wrap a kerr.Error, whose text ("NAME: description") repeats
	// what the error code already says: keep only our detail.
	var ke *kerr.Error
	if errors.As(err, &ke) {
		m = strings.TrimPrefix(m, ke.Error())
		m = strings.TrimPrefix(m, ": ")
		if m == "" {
			return nil
		}
	}
	return &m
}
