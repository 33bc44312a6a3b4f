package netio

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/internal/keyhash"
	"github.com/ringlog/ringlog/wal"
	"github.com/ringlog/ringlog/wal/batch"
)

// The native protocol of the MyKafka design (seed 000 §3.1-3.3), served
// byte-exact on its own listener. Every frame, request and response:
//
//	+-----------+-----------+---------------------------+
//	| len:4     | apiKey:1  | payload (len-1 bytes)     |   big-endian;
//	+-----------+-----------+---------------------------+   len counts apiKey+payload
//
// A response carries its request's apiKey. Strings are [len:2][bytes],
// byte arrays [len:4][bytes] with -1 for null.
//
//	PRODUCE (0)       req  [topic:str][partition:4][recordCount:4]
//	                       recordCount × [keyLen:4][key][valLen:4][value]
//	                  resp [errCode:1][partition:4][baseOffset:8][count:4]
//	FETCH (1)         req  [topic:str][partition:4][offset:8][maxBytes:4]
//	                  resp [errCode:1][recordCount:4] recordCount × record
//	CREATE_TOPIC (2)  req  [topic:str][partitionCount:4]
//	                  resp [status:1]  0 OK, 1 ALREADY_EXISTS, 2 INVALID
//	COMMIT_OFFSET (3) req  [group:str][topic:str][partition:4][offset:8]
//	                  resp [errCode:1]
//	FETCH_OFFSET (4)  req  [group:str][topic:str][partition:4]
//	                  resp [errCode:1][offset:8]   -1: nothing committed
//
// A fetched record, self-delimiting, CRC32 (IEEE) over offset..value:
//
//	[offset:8][timestamp:8][keyLen:4][key][valueLen:4][value][crc:4]
//
// Semantics: partition -1 lets the broker pick (the first record's key by
// murmur2, as Kafka's default partitioner, so both protocols agree; null
// keys strict round-robin per topic). A produce is one Kafka record batch:
// all of its records are appended, or none. A fetch returns at least one
// record when there is one past the offset, even if it exceeds maxBytes.
// Topics, logs and committed offsets are the same as on the Kafka side. A
// native produce is acknowledged once in the log (page cache), like Kafka
// acks=1, plus the topic's flush policy.

// Native API keys.
const (
	NativeProduce      byte = 0
	NativeFetch        byte = 1
	NativeCreateTopic  byte = 2
	NativeCommitOffset byte = 3
	NativeFetchOffset  byte = 4
)

// Native error codes (errCode:1). The seed defines only CREATE_TOPIC's
// status; these are ringlog's, documented in the README.
const (
	NativeOK                byte = 0
	NativeUnknownTopic      byte = 1 // topic or partition does not exist
	NativeInvalidRequest    byte = 2 // the payload does not parse
	NativeOffsetOutOfRange  byte = 3 // fetch offset below the log start or past the end
	NativeMessageTooLarge   byte = 4 // the batch exceeds max.message.bytes
	NativeStorageError      byte = 5 // the partition's log is offline
	NativeInvalidTopic      byte = 6 // the topic name breaks the rules
	NativeUnknownAPI        byte = 7 // apiKey is not 0-4
	NativeInvalidRecord     byte = 8 // e.g. a null key on a compacted topic
	NativeGroupBusy         byte = 9 // the group has active Kafka members; commit through them
	NativeNotAvailable      byte = 10
	NativeCreateOK          byte = 0
	NativeCreateExists      byte = 1
	NativeCreateInvalid     byte = 2
	nativeMaxRecordsPerSend      = 1 << 20
)

// NativeCodeFor maps an engine or Kafka error to a native error code. The
// outermost Kafka error decides (engine errors wrap their cause, which may
// hold other errors); an error without one is looked at for wal's.
func NativeCodeFor(err error) byte {
	var ke *kerr.Error
	switch {
	case err == nil:
		return NativeOK
	case errors.As(err, &ke):
		switch ke {
		case kerr.UnknownTopicOrPartition:
			return NativeUnknownTopic
		case kerr.OffsetOutOfRange:
			return NativeOffsetOutOfRange
		case kerr.MessageTooLarge:
			return NativeMessageTooLarge
		case kerr.KafkaStorageError:
			return NativeStorageError
		case kerr.InvalidTopicException:
			return NativeInvalidTopic
		case kerr.InvalidRecord, kerr.CorruptMessage:
			return NativeInvalidRecord
		case kerr.UnknownMemberID, kerr.IllegalGeneration, kerr.RebalanceInProgress, kerr.InvalidGroupID:
			return NativeGroupBusy
		}
	case errors.Is(err, wal.ErrOffsetOutOfRange):
		return NativeOffsetOutOfRange
	}
	return NativeNotAvailable
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
	b := make([]byte, 5, 5+capacity)
	b[4] = apiKey
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
	case NativeProduce:
		return s.nativeProduce(r, rd)
	case NativeFetch:
		// Reading, decompressing and re-encoding records is work for
		// another core, not the event loop; the slot keeps the
		// connection's responses in order.
		r.resp = c.slot()
		go s.nativeFetch(r, rd)
	case NativeCreateTopic:
		r.resp = c.slot()
		go s.nativeCreateTopic(r, rd)
	case NativeCommitOffset:
		r.resp = c.slot()
		go s.nativeCommit(r, rd)
	case NativeFetchOffset:
		r.resp = c.slot()
		s.nativeFetchOffset(r, rd)
	default:
		r.resp = c.slot()
		s.logger.Debug("native: unknown api key", "remote", c.remote, "api_key", key)
		r.nativeRespond(append(nativeFrame(key, 1), NativeUnknownAPI))
	}
	return frameDone
}

func (r *request) nativeRespond(frame []byte) {
	r.conn.completeBytes(r.resp, nativeEnd(frame))
	r.finish()
}

// nativeProduceResp encodes PRODUCE's answer.
func nativeProduceResp(code byte, partition int32, base int64, count int32) []byte {
	b := nativeFrame(NativeProduce, 17)
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
	if rd.bad || count < 0 || count > nativeMaxRecordsPerSend {
		r.resp = r.conn.slot()
		r.nativeRespond(nativeProduceResp(NativeInvalidRequest, partition, -1, 0))
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
		r.nativeRespond(nativeProduceResp(NativeInvalidRequest, partition, -1, 0))
		return frameDone
	}
	c := r.conn
	t := s.eng.Topic(topic)
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
		return respond(nativeProduceResp(NativeUnknownTopic, partition, -1, 0))
	}
	if offLoop {
		waitRoom(p.Shard())
	} else if sh := p.Shard(); !sh.HasRoom() {
		r.conn.paused.Store(true)
		sh.OnRoom(r.conn.resume)
		return framePaused
	}
	b := batch.NewBuilder()
	now := time.Now().UnixMilli()
	for _, rc := range recs {
		if rc.key == nil && t.Config().Compact() {
			return respond(nativeProduceResp(NativeInvalidRecord, partition, -1, 0))
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
	p.Shard().Append(&engine.AppendRequest{Partition: p, Batches: [][]byte{data}, Headers: []batch.Header{h}, Acks: 1, Bytes: len(data),
		Done: func(res engine.AppendResult) {
			if res.Err != nil {
				r.nativeRespond(nativeProduceResp(NativeCodeFor(res.Err), partition, -1, 0))
				return
			}
			r.nativeRespond(nativeProduceResp(NativeOK, partition, res.BaseOffset, count))
		}})
	return frameDone
}

var ieee = crc32.MakeTable(crc32.IEEE)

// AppendNativeRecord encodes one record in the seed's format, CRC32 (IEEE)
// over offset..value.
func AppendNativeRecord(dst []byte, offset, ts int64, key, value []byte) []byte {
	start := len(dst)
	dst = binary.BigEndian.AppendUint64(dst, uint64(offset))
	dst = binary.BigEndian.AppendUint64(dst, uint64(ts))
	if key == nil {
		dst = binary.BigEndian.AppendUint32(dst, 0xffffffff)
	} else {
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(key)))
		dst = append(dst, key...)
	}
	if value == nil {
		dst = binary.BigEndian.AppendUint32(dst, 0xffffffff)
	} else {
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(value)))
		dst = append(dst, value...)
	}
	return binary.BigEndian.AppendUint32(dst, crc32.Checksum(dst[start:], ieee))
}

func (s *Server) nativeFetch(r *request, rd *nreader) {
	topic := rd.str()
	partition := rd.i32()
	offset := rd.i64()
	maxBytes := rd.i32()
	fail := func(code byte) {
		b := nativeFrame(NativeFetch, 5)
		b = append(b, code)
		r.nativeRespond(binary.BigEndian.AppendUint32(b, 0))
	}
	if !rd.done() {
		fail(NativeInvalidRequest)
		return
	}
	t := s.eng.Topic(topic)
	if t == nil || t.Partition(partition) == nil {
		fail(NativeUnknownTopic)
		return
	}
	p := t.Partition(partition)
	l, err := p.Log()
	if err != nil {
		fail(NativeCodeFor(err))
		return
	}
	hw := l.EndOffset()
	budget := max(int(maxBytes), 1)
	// Read whole batches from the offset (at least one), then re-encode.
	buf, err := l.ReadBytes(nil, offset, budget, hw)
	if err != nil {
		fail(NativeCodeFor(err))
		return
	}
	out := nativeFrame(NativeFetch, 5+len(buf))
	out = append(out, NativeOK, 0, 0, 0, 0)
	count := uint32(0)
	var scratch []byte
	used := 0
decode:
	for len(buf) > 0 {
		n := int(batch.BatchLength(buf)) + batch.LogOverhead
		h, err := batch.CheckStored(buf[:n])
		if err != nil {
			fail(NativeStorageError)
			return
		}
		it, sc, err := batch.Records(buf[:n], &h, scratch)
		scratch = sc
		if err != nil {
			fail(NativeStorageError)
			return
		}
		for {
			rec, ok := it.Next()
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
			size := 28 + len(rec.Key) + len(rec.Value)
			if count > 0 && used+size > int(maxBytes) {
				break decode
			}
			out = AppendNativeRecord(out, off, ts, rec.Key, rec.Value)
			used += size
			count++
		}
		buf = buf[n:]
	}
	binary.BigEndian.PutUint32(out[6:], count)
	p.BytesOut.Add(int64(used))
	p.RecordsOut.Add(int64(count))
	s.metrics.CopiedBytes.Add(float64(used))
	r.nativeRespond(out)
}

func (s *Server) nativeCreateTopic(r *request, rd *nreader) {
	topic := rd.str()
	partitions := rd.i32()
	status := NativeCreateOK
	if !rd.done() || partitions <= 0 {
		status = NativeCreateInvalid
	} else if _, err := s.eng.CreateTopic(engine.CreateTopicRequest{Name: topic, Partitions: partitions, ReplicationFactor: 1}); err != nil {
		switch {
		case errors.Is(err, kerr.TopicAlreadyExists):
			status = NativeCreateExists
		default:
			status = NativeCreateInvalid
		}
	}
	r.nativeRespond(append(nativeFrame(NativeCreateTopic, 1), status))
}

func (s *Server) nativeCommit(r *request, rd *nreader) {
	group := rd.str()
	topic := rd.str()
	partition := rd.i32()
	offset := rd.i64()
	code := NativeOK
	if !rd.done() || group == "" {
		code = NativeInvalidRequest
	} else {
		errs, err := s.eng.Coordinator().CommitOffsets(group, "", nil, -1, []engine.OffsetCommit{{Topic: topic, Partition: partition, Offset: offset, LeaderEpoch: -1}})
		if err == nil {
			err = errs[0]
		}
		code = NativeCodeFor(err)
	}
	r.nativeRespond(append(nativeFrame(NativeCommitOffset, 1), code))
}

func (s *Server) nativeFetchOffset(r *request, rd *nreader) {
	group := rd.str()
	topic := rd.str()
	partition := rd.i32()
	code, off := NativeOK, int64(-1)
	if !rd.done() || group == "" {
		code = NativeInvalidRequest
	} else if got, err := s.eng.Coordinator().FetchOffsets(group, map[string][]int32{topic: {partition}}); err != nil {
		code = NativeCodeFor(err)
	} else if len(got) == 1 && got[0].Found {
		off = got[0].Offset
	}
	b := append(nativeFrame(NativeFetchOffset, 9), code)
	r.nativeRespond(binary.BigEndian.AppendUint64(b, uint64(off)))
}
