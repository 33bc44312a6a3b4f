package netio

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/internal/keyhash"
	"github.com/ringlog/ringlog/internal/nativeproto"
	"github.com/ringlog/ringlog/wal"
	"github.com/ringlog/ringlog/wal/batch"
)

// The native protocol of the MyKafka design (seed 000 §3.1-3.3), served
// byte-exact on its own listener; internal/nativeproto has the frame and
// record layouts, API keys and error codes, shared with the Go SDK.
//
// Semantics: partition -1 lets the broker pick (the first record's key by
// murmur2, as Kafka's default partitioner, so both protocols agree; null
// keys strict round-robin per topic). A produce is one Kafka record batch:
// all of its records are appended, or none. A fetch returns at least one
// record when there is one past the offset, even if it exceeds maxBytes.
// Topics, logs and committed offsets are the same as on the Kafka side. A
// native produce is acknowledged once in the log (page cache), like Kafka
// acks=1, plus the topic's flush policy.
//
// Authorization: the protocol authenticates nobody, so every request acts
// as the listener's Config.NativePrincipal (--native-principal, default
// User:ANONYMOUS) and is checked by the same authorizer and ACLs as the
// Kafka listeners, as Kafka checks the matching API: PRODUCE needs WRITE
// on the topic (and CREATE to auto-create it), FETCH READ on the topic,
// CREATE_TOPIC CREATE on the cluster or the topic, COMMIT_OFFSET READ on
// the group and the topic, FETCH_OFFSET DESCRIBE on both. A refusal is
// CodeNotAuthorized (CREATE_TOPIC: CreateNotAuthorized), whether or not
// the topic exists, so the answer tells nothing about topics the
// principal may not see.

// nativeMaxRecordsPerSend bounds a PRODUCE's recordCount.
const nativeMaxRecordsPerSend = 1 << 20

// NativeCodeFor maps an engine or Kafka error to a native error code. The
// outermost Kafka error decides (engine errors wrap their cause, which may
// hold other errors); an error without one is looked at for wal's.
func NativeCodeFor(err error) byte {
	var ke *kerr.Error
	switch {
	case err == nil:
		return nativeproto.CodeOK
	case errors.As(err, &ke):
		switch ke {
		case kerr.UnknownTopicOrPartition:
			return nativeproto.CodeUnknownTopic
		case kerr.OffsetOutOfRange:
			return nativeproto.CodeOffsetOutOfRange
		case kerr.MessageTooLarge:
			return nativeproto.CodeMessageTooLarge
		case kerr.KafkaStorageError:
			return nativeproto.CodeStorageError
		case kerr.InvalidTopicException:
			return nativeproto.CodeInvalidTopic
		case kerr.InvalidRecord, kerr.CorruptMessage:
			return nativeproto.CodeInvalidRecord
		case kerr.UnknownMemberID, kerr.IllegalGeneration, kerr.RebalanceInProgress, kerr.InvalidGroupID:
			return nativeproto.CodeGroupBusy
		}
	case errors.Is(err, wal.ErrOffsetOutOfRange):
		return nativeproto.CodeOffsetOutOfRange
	}
	return nativeproto.CodeNotAvailable
}

// nreader reads a native payload; any short read sets bad.
type nreader struct {
	b   []byte
	bad bool
}

func (r *nreader) take(n int) []byte {
	if r.bad || n < 0 || n > len(r.b) {
		r.bad = true
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}
func (r *nreader) u16() int {
	b := r.take(2)
	if b == nil {
		return 0
	}
	return int(binary.BigEndian.Uint16(b))
}
func (r *nreader) i32() int32 {
	b := r.take(4)
	if b == nil {
		return 0
	}
	return int32(binary.BigEndian.Uint32(b))
}
func (r *nreader) i64() int64 {
	b := r.take(8)
	if b == nil {
		return 0
	}
	return int64(binary.BigEndian.Uint64(b))
}
func (r *nreader) str() string { return string(r.take(r.u16())) }

// bytes reads [len:4][bytes] with -1 as null.
func (r *nreader) bytes() []byte {
	n := r.i32()
	if n == -1 {
		return nil
	}
	if n < 0 {
		r.bad = true
		return nil
	}
	b := r.take(int(n))
	if b == nil {
		return nil
	}
	if len(b) == 0 {
		return []byte{}
	}
	return b
}

// done reports whether the payload was read exactly.
func (r *nreader) done() bool { return !r.bad && len(r.b) == 0 }

// nativeFrame starts a response frame for apiKey; finish it with
// nativeEnd.
func nativeFrame(apiKey byte, capacity int) []byte {
	b := make([]byte, nativeproto.HeaderLen, nativeproto.HeaderLen+capacity)
	b[nativeproto.HeaderLen-1] = apiKey
	return b
}

func nativeEnd(b []byte) []byte {
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return b
}

// handleNativeFrame dispatches one native request (event loop). frame is
// [apiKey][payload].
func (s *Server) handleNativeFrame(c *conn, frame []byte) frameOutcome {
	key := frame[0]
	rd := &nreader{b: frame[1:]}
	r := &request{conn: c, frame: frame, arrived: time.Now(), key: -1}
	switch key {
	case nativeproto.KeyProduce:
		return s.nativeProduce(r, rd)
	case nativeproto.KeyFetch:
		// Reading, decompressing and re-encoding records is work for
		// another core, not the event loop; the slot keeps the
		// connection's responses in order.
		r.resp = c.slot()
		go s.nativeFetch(r, rd)
	case nativeproto.KeyCreateTopic:
		r.resp = c.slot()
		go s.nativeCreateTopic(r, rd)
	case nativeproto.KeyCommitOffset:
		r.resp = c.slot()
		go s.nativeCommit(r, rd)
	case nativeproto.KeyFetchOffset:
		r.resp = c.slot()
		s.nativeFetchOffset(r, rd)
	default:
		r.resp = c.slot()
		s.logger.Debug("native: unknown api key", "remote", c.remote, "api_key", key)
		r.nativeRespond(append(nativeFrame(key, 1), nativeproto.CodeUnknownAPI))
	}
	return frameDone
}

// nativeDenied logs a refused native request (debug: a client without
// rights can send many) and counts it.
func (s *Server) nativeDenied(r *request, api, needs string) {
	s.metrics.NativeDenied.Inc()
	s.logger.Debug("native: request denied by the ACLs", "remote", r.conn.remote, "principal", r.conn.principal(), "api", api, "needs", needs)
}

func (r *request) nativeRespond(frame []byte) {
	r.count()
	r.conn.completeBytes(r.resp, nativeEnd(frame))
	r.finish()
}

// nativeProduceResp encodes PRODUCE's answer.
func nativeProduceResp(code byte, partition int32, base int64, count int32) []byte {
	b := nativeFrame(nativeproto.KeyProduce, nativeproto.ProduceResponseLen)
	b = append(b, code)
	b = binary.BigEndian.AppendUint32(b, uint32(partition))
	b = binary.BigEndian.AppendUint64(b, uint64(base))
	return binary.BigEndian.AppendUint32(b, uint32(count))
}

// roundRobin is the per-topic counter for null-key produces with
// partition -1.
func (s *Server) roundRobin(topic string) int32 {
	v, _ := s.rr.LoadOrStore(topic, new(atomic.Uint32))
	return int32(v.(*atomic.Uint32).Add(1) - 1)
}

func (s *Server) nativeProduce(r *request, rd *nreader) frameOutcome {
	topic := rd.str()
	partition := rd.i32()
	count := rd.i32()
	// Each record takes at least its two lengths: a count the payload
	// cannot hold is refused before anything is allocated for it.
	if rd.bad || count < 0 || count > nativeMaxRecordsPerSend || int(count) > len(rd.b)/8 {
		r.resp = r.conn.slot()
		r.nativeRespond(nativeProduceResp(nativeproto.CodeInvalidRequest, partition, -1, 0))
		return frameDone
	}
	// Every record takes at least 8 bytes: a count the payload cannot
	// hold allocates no more than the payload could.
	recs := make([]nativeRec, 0, min(int(count), len(rd.b)/8))
	for i := int32(0); i < count && !rd.bad; i++ {
		k := rd.bytes()
		v := rd.bytes()
		recs = append(recs, nativeRec{k, v})
	}
	if !rd.done() || count == 0 {
		r.resp = r.conn.slot()
		r.nativeRespond(nativeProduceResp(nativeproto.CodeInvalidRequest, partition, -1, 0))
		return frameDone
	}
	c := r.conn
	if !r.topicAllowed(kmsg.ACLOperationWrite, topic) {
		s.nativeDenied(r, "PRODUCE", "WRITE on topic "+topic)
		r.resp = c.slot()
		r.nativeRespond(nativeProduceResp(nativeproto.CodeNotAuthorized, partition, -1, 0))
		return frameDone
	}
	t := s.eng.Topic(topic)
	if t == nil && s.eng.AutoCreateTopics() && !r.mayCreateTopic(topic) {
		r.resp = c.slot()
		r.nativeRespond(nativeProduceResp(nativeproto.CodeUnknownTopic, partition, -1, 0))
		return frameDone
	}
	if t == nil && s.eng.AutoCreateTopics() || c.serialBusy() {
		// Creating the topic is disk work: off the event loop, with the
		// produces behind it on this connection (see handleProduce).
		r.resp = c.slot()
		c.serial(func() {
			t, err := s.eng.GetOrCreateTopic(topic)
			s.nativeProduceTo(r, t, err, partition, count, recs, true)
		})
		return frameDone
	}
	var err error
	if t == nil {
		err = fmt.Errorf("%w: topic %q", kerr.UnknownTopicOrPartition, topic)
	}
	return s.nativeProduceTo(r, t, err, partition, count, recs, false)
}

// nativeRec is one record of a native produce (aliasing the request).
type nativeRec struct{ key, value []byte }

// nativeProduceTo appends a native produce's records to topic t (or
// answers terr). On the event loop a full shard pauses the connection and
// the response slot is taken once the produce is admitted; off it
// (offLoop: conn.serial, slot already taken) the produce waits for room.
func (s *Server) nativeProduceTo(r *request, t *engine.Topic, terr error, partition, count int32, recs []nativeRec, offLoop bool) frameOutcome {
	respond := func(b []byte) frameOutcome {
		if !offLoop {
			r.resp = r.conn.slot()
		}
		r.nativeRespond(b)
		return frameDone
	}
	if terr != nil {
		return respond(nativeProduceResp(NativeCodeFor(terr), partition, -1, 0))
	}
	n := int32(len(t.Partitions()))
	if partition == -1 {
		if recs[0].key != nil {
			partition = keyhash.Partition(recs[0].key, n)
		} else {
			partition = s.roundRobin(t.Name) % n
		}
	}
	p := t.Partition(partition)
	if p == nil {
		return respond(nativeProduceResp(nativeproto.CodeUnknownTopic, partition, -1, 0))
	}
	if offLoop {
		waitRoom(p.Shard())
	} else if !r.conn.roomOrPause(p.Shard()) {
		return framePaused
	}
	b := batch.NewBuilder()
	now := time.Now().UnixMilli()
	for _, rc := range recs {
		if rc.key == nil && t.Config().Compact() {
			return respond(nativeProduceResp(nativeproto.CodeInvalidRecord, partition, -1, 0))
		}
		b.Add(now, rc.key, rc.value, nil)
	}
	data, err := b.Build(nil, batch.CodecNone)
	if err == nil && len(data) > t.Config().MaxMessageBytes() {
		err = fmt.Errorf("%w: %d bytes", kerr.MessageTooLarge, len(data))
	}
	if err != nil {
		return respond(nativeProduceResp(NativeCodeFor(err), partition, -1, 0))
	}
	if !offLoop {
		r.resp = r.conn.slot()
	}
	h, _ := batch.ParseHeader(data)
	p.Shard().Append(&engine.AppendRequest{Partition: p, Batches: [][]byte{data}, Headers: []batch.Header{h}, Acks: 1, Bytes: len(data), Inline: true,
		Done: func(res engine.AppendResult) {
			if res.Err != nil {
				r.nativeRespond(nativeProduceResp(NativeCodeFor(res.Err), partition, -1, 0))
				return
			}
			r.nativeRespond(nativeProduceResp(nativeproto.CodeOK, partition, res.BaseOffset, count))
		}})
	return frameDone
}

func (s *Server) nativeFetch(r *request, rd *nreader) {
	topic := rd.str()
	partition := rd.i32()
	offset := rd.i64()
	maxBytes := rd.i32()
	fail := func(code byte) {
		b := nativeFrame(nativeproto.KeyFetch, nativeproto.FetchResponseHeaderLen)
		b = append(b, code)
		r.nativeRespond(binary.BigEndian.AppendUint32(b, 0))
	}
	if !rd.done() {
		fail(nativeproto.CodeInvalidRequest)
		return
	}
	if !r.topicAllowed(kmsg.ACLOperationRead, topic) {
		s.nativeDenied(r, "FETCH", "READ on topic "+topic)
		fail(nativeproto.CodeNotAuthorized)
		return
	}
	t := s.eng.Topic(topic)
	if t == nil || t.Partition(partition) == nil {
		fail(nativeproto.CodeUnknownTopic)
		return
	}
	p := t.Partition(partition)
	l, err := p.Log()
	if err != nil {
		fail(NativeCodeFor(err))
		return
	}
	hw := p.HighWatermark()
	budget := max(int(maxBytes), 1)
	// Read whole batches from the offset (at least one), then re-encode.
	buf, err := l.ReadBytes(nil, offset, budget, hw)
	if err != nil {
		fail(NativeCodeFor(err))
		return
	}
	out := nativeFrame(nativeproto.KeyFetch, nativeproto.FetchResponseHeaderLen+len(buf))
	out = append(out, nativeproto.CodeOK, 0, 0, 0, 0)
	count := uint32(0)
	used := 0
	// Compressed batches are walked as streams: a fetch decompresses
	// only as far as its records go (maxBytes, at least one record), and
	// holds a window and one record, not the batch.
	var st batch.Stream
	defer st.Close()
decode:
	for len(buf) > 0 {
		n := int(batch.BatchLength(buf)) + batch.LogOverhead
		h, err := batch.CheckStored(buf[:n])
		if err == nil && h.Control() {
			// A transaction marker: no records for a native consumer.
			buf = buf[n:]
			continue
		}
		if err == nil {
			err = st.Reset(buf[:n], &h, s.cfg.MaxUncompressedBatchBytes)
		}
		if err != nil {
			s.logger.Warn("native fetch: a stored batch cannot be read", "partition", p.String(), "offset", h.BaseOffset, "err", err)
			fail(nativeproto.CodeStorageError)
			return
		}
		for {
			rec, ok := st.Next()
			if !ok {
				break
			}
			off := h.BaseOffset + int64(rec.OffsetDelta)
			if off < offset {
				continue
			}
			ts := h.BaseTimestamp + rec.TimestampDelta
			if h.LogAppendTime() {
				ts = h.MaxTimestamp
			}
			size := nativeproto.RecordOverhead + len(rec.Key) + len(rec.Value)
			if count > 0 && used+size > int(maxBytes) {
				break decode
			}
			out = nativeproto.AppendRecord(out, off, ts, rec.Key, rec.Value)
			used += size
			count++
		}
		if err := st.Err(); err != nil {
			s.logger.Warn("native fetch: a stored batch's records cannot be read", "partition", p.String(), "offset", h.BaseOffset, "err", err)
			fail(nativeproto.CodeStorageError)
			return
		}
		buf = buf[n:]
	}
	binary.BigEndian.PutUint32(out[nativeproto.HeaderLen+1:], count) // recordCount, after errCode
	p.BytesOut.Add(int64(used))
	p.RecordsOut.Add(int64(count))
	s.metrics.CopiedBytes.Add(float64(used))
	r.nativeRespond(out)
}

func (s *Server) nativeCreateTopic(r *request, rd *nreader) {
	topic := rd.str()
	partitions := rd.i32()
	status := nativeproto.CreateOK
	if !rd.done() || partitions <= 0 {
		status = nativeproto.CreateInvalid
	} else if !r.mayCreateTopic(topic) {
		s.nativeDenied(r, "CREATE_TOPIC", "CREATE on the cluster or topic "+topic)
		status = nativeproto.CreateNotAuthorized
	} else if _, err := s.eng.CreateTopic(engine.CreateTopicRequest{Name: topic, Partitions: partitions, ReplicationFactor: 1}); err != nil {
		switch {
		case errors.Is(err, kerr.TopicAlreadyExists):
			status = nativeproto.CreateExists
		default:
			status = nativeproto.CreateInvalid
		}
	}
	r.nativeRespond(append(nativeFrame(nativeproto.KeyCreateTopic, 1), status))
}

func (s *Server) nativeCommit(r *request, rd *nreader) {
	group := rd.str()
	topic := rd.str()
	partition := rd.i32()
	offset := rd.i64()
	code := nativeproto.CodeOK
	if !rd.done() || group == "" {
		code = nativeproto.CodeInvalidRequest
	} else if !r.groupAllowed(kmsg.ACLOperationRead, group) || !r.topicAllowed(kmsg.ACLOperationRead, topic) {
		s.nativeDenied(r, "COMMIT_OFFSET", "READ on group "+group+" and topic "+topic)
		code = nativeproto.CodeNotAuthorized
	} else {
		errs, err := s.eng.Coordinator().CommitOffsets(group, "", nil, -1, []engine.OffsetCommit{{Topic: topic, Partition: partition, Offset: offset, LeaderEpoch: -1}})
		if err == nil {
			err = errs[0]
		}
		code = NativeCodeFor(err)
	}
	r.nativeRespond(append(nativeFrame(nativeproto.KeyCommitOffset, 1), code))
}

func (s *Server) nativeFetchOffset(r *request, rd *nreader) {
	group := rd.str()
	topic := rd.str()
	partition := rd.i32()
	code, off := nativeproto.CodeOK, int64(-1)
	if !rd.done() || group == "" {
		code = nativeproto.CodeInvalidRequest
	} else if !r.groupAllowed(kmsg.ACLOperationDescribe, group) || !r.topicAllowed(kmsg.ACLOperationDescribe, topic) {
		s.nativeDenied(r, "FETCH_OFFSET", "DESCRIBE on group "+group+" and topic "+topic)
		code = nativeproto.CodeNotAuthorized
	} else if got, err := s.eng.Coordinator().FetchOffsets(group, map[string][]int32{topic: {partition}}); err != nil {
		code = NativeCodeFor(err)
	} else if len(got) == 1 && got[0].Found {
		off = got[0].Offset
	}
	b := append(nativeFrame(nativeproto.KeyFetchOffset, 9), code)
	r.nativeRespond(binary.BigEndian.AppendUint64(b, uint64(off)))
}
