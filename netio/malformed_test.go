package netio_test

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/netio"
	"github.com/ringlog/ringlog/wal/batch"
)

// The malformed-request suite: hand-built frames over raw TCP. After every
// bad input the broker must still serve a fresh connection and a healthy
// connection opened before it.

// TestMalformedFraming covers what OnTraffic and handleFrame do with frames
// that cannot be requests.
func TestMalformedFraming(t *testing.T) {
	b := startBroker(t)
	h := newHealthCheck(t, b.Addr)

	t.Run("truncated frame then EOF", func(t *testing.T) {
		rc := dialWire(t, b.Addr)
		full := reqFrame(kmsg.NewPtrApiVersionsRequest(), 3, 1)
		rc.write(full[:len(full)-3])
		rc.expectQuiet("partial frame", 100*time.Millisecond)
		rc.c.(interface{ CloseWrite() error }).CloseWrite()
		rc.expectClosed("partial frame then EOF")
		h.check(t, "truncated frame")
	})

	t.Run("frame sent one byte at a time", func(t *testing.T) {
		rc := dialWire(t, b.Addr)
		full := reqFrame(kmsg.NewPtrApiVersionsRequest(), 3, 7)
		for i := range full {
			rc.write(full[i : i+1])
			if i%8 == 0 {
				time.Sleep(time.Millisecond)
			}
		}
		resp := rc.readResp(kmsg.NewPtrApiVersionsRequest(), 3, 7).(*kmsg.ApiVersionsResponse)
		if resp.ErrorCode != 0 || len(resp.ApiKeys) != len(apiTable) {
			t.Fatalf("ApiVersions: %+v", resp)
		}
	})

	t.Run("absurd sizes", func(t *testing.T) {
		for _, size := range []uint32{0x7fffffff, 0x80000000, 0xffffffff, 1 << 30} {
			var ms0, ms1 runtime.MemStats
			runtime.ReadMemStats(&ms0)
			rc := dialWire(t, b.Addr)
			frame := binary.BigEndian.AppendUint32(nil, size)
			frame = append(frame, 0, 18, 0, 3, 0, 0, 0, 1) // a plausible header
			rc.write(frame)
			rc.expectClosed("size " + itoa(int64(int32(size))))
			runtime.ReadMemStats(&ms1)
			if grew := ms1.TotalAlloc - ms0.TotalAlloc; grew > 64<<20 {
				t.Fatalf("size %d: the process allocated %d MiB while refusing it", int32(size), grew>>20)
			}
			h.check(t, "size "+itoa(int64(int32(size))))
		}
	})

	t.Run("size below 8", func(t *testing.T) {
		for _, size := range []uint32{0, 1, 7} {
			rc := dialWire(t, b.Addr)
			frame := binary.BigEndian.AppendUint32(nil, size)
			frame = append(frame, make([]byte, size)...)
			rc.write(frame)
			rc.expectClosed("size " + itoa(int64(size)))
			h.check(t, "size "+itoa(int64(size)))
		}
	})

	t.Run("header without client id", func(t *testing.T) {
		// size 8: key, version, correlation id, and no room for the
		// client id length.
		rc := dialWire(t, b.Addr)
		rc.write([]byte{0, 0, 0, 8, 0, 18, 0, 0, 0, 0, 0, 1})
		rc.expectClosed("8-byte frame")
		h.check(t, "8-byte frame")
	})

	t.Run("client id runs past the frame", func(t *testing.T) {
		rc := dialWire(t, b.Addr)
		rc.write([]byte{0, 0, 0, 12, 0, 18, 0, 0, 0, 0, 0, 1, 0, 50, 'a', 'b'})
		rc.expectClosed("client id length 50 in a 12-byte frame")
		h.check(t, "long client id")
	})

	t.Run("bad header tagged fields", func(t *testing.T) {
		rc := dialWire(t, b.Addr)
		// Metadata v12 is flexible: the header's tag section claims one
		// tag of 100 bytes that is not there.
		id := "x"
		rc.write(rawHeader(nil, 3, 12, 1, &id, false, []byte{1, 0, 100, 0, 0}))
		rc.expectClosed("bad header tags")
		h.check(t, "bad header tags")
	})

	t.Run("unknown API keys", func(t *testing.T) {
		for _, key := range []int16{9999, 128, 1000, -1, -32768} {
			rc := dialWire(t, b.Addr)
			rc.write(rawHeader(nil, key, 0, 1, &testClientID, false, []byte{0, 0, 0, 0}))
			rc.expectClosed("key " + itoa(int64(key)))
			h.check(t, "key "+itoa(int64(key)))
		}
	})

	t.Run("body that does not decode", func(t *testing.T) {
		// Read as an int32 array length or string length it is huge and
		// positive; as a uvarint (flexible versions) it is 126 with
		// nothing behind it. Either way the body runs out.
		garbage := []byte{0x7f, 0xff, 0xff, 0x00, 0x01}
		for _, kv := range []struct{ key, version int16 }{
			{0, 9},  // Produce (event loop)
			{0, 3},  // Produce non-flexible
			{1, 12}, // Fetch
			{2, 7},  // ListOffsets
			{3, 12}, // Metadata (async handler)
			{3, 1},  // Metadata non-flexible
			{19, 5}, // CreateTopics (async)
			{20, 4}, // DeleteTopics (async)
			{22, 4}, // InitProducerId (async)
			{23, 4}, // OffsetForLeaderEpoch
			{32, 4}, // DescribeConfigs (async)
			{33, 2}, // AlterConfigs (async)
			{37, 3}, // CreatePartitions (async)
			{44, 1}, // IncrementalAlterConfigs (async)
			{60, 1}, // DescribeCluster
		} {
			req := kmsg.RequestForKey(kv.key)
			req.SetVersion(kv.version)
			if err := req.ReadFrom(garbage); err == nil {
				t.Fatalf("key %d v%d: kmsg decodes the garbage; pick other bytes", kv.key, kv.version)
			}
			rc := dialWire(t, b.Addr)
			rc.write(rawHeader(nil, kv.key, kv.version, 1, &testClientID, req.IsFlexible(), garbage))
			what := "garbage body for key " + itoa(int64(kv.key)) + " v" + itoa(int64(kv.version))
			rc.expectClosed(what)
			h.check(t, what)
		}
	})

	t.Run("async handler body that does not decode, pipelined", func(t *testing.T) {
		// A Metadata body that does not decode (checked on the handler's
		// goroutine), then an ApiVersions on the same connection. Once
		// the connection is to be closed for the first, the second must
		// not be answered: a client pairs responses with requests in
		// order, so an answer for request 2 in place of request 1 is a
		// protocol violation (franz-go, sarama and kafka-go report a
		// correlation id mismatch rather than a closed connection).
		garbage := []byte{0x7f, 0xff, 0xff, 0x00, 0x01}
		answered := 0
		const tries = 20
		for i := 0; i < tries; i++ {
			rc := dialWire(t, b.Addr)
			wire := rawHeader(nil, 3, 12, 1, &testClientID, true, garbage)
			wire = append(wire, reqFrame(kmsg.NewPtrApiVersionsRequest(), 3, 2)...)
			rc.write(wire)
			if corr, _, err := rc.readFrame(3 * time.Second); err == nil {
				if corr != 2 {
					t.Fatalf("got an answer for correlation id %d", corr)
				}
				answered++
				continue
			}
			rc.expectClosed("pipelined after a malformed Metadata")
		}
		h.check(t, "async malformed, pipelined")
		if answered > 0 {
			t.Fatalf("in %d of %d tries the request pipelined after a Metadata whose body does not decode was answered "+
				"(out of order: nothing for the Metadata) before the connection closed", answered, tries)
		}
	})

	t.Run("ApiVersions body that does not decode", func(t *testing.T) {
		// Kafka answers INVALID_REQUEST rather than closing (k18).
		rc := dialWire(t, b.Addr)
		rc.write(rawHeader(nil, 18, 3, 5, &testClientID, true, []byte{0xff, 0xff, 0xff, 0x7f}))
		resp := rc.readResp(kmsg.NewPtrApiVersionsRequest(), 3, 5).(*kmsg.ApiVersionsResponse)
		if resp.ErrorCode != kerr.InvalidRequest.Code || len(resp.ApiKeys) != len(apiTable) {
			t.Fatalf("ApiVersions garbage: error %d, %d keys", resp.ErrorCode, len(resp.ApiKeys))
		}
		apiVersionsOK(t, rc, 6)
	})

	t.Run("ApiVersions newer than served", func(t *testing.T) {
		for _, v := range []int16{5, 99, 32767} {
			rc := dialWire(t, b.Addr)
			req := kmsg.NewPtrApiVersionsRequest()
			req.ClientSoftwareName, req.ClientSoftwareVersion = "raw", "1"
			// The body is whatever a newer client would send; we reuse
			// the v4 encoding with a flexible header.
			req.SetVersion(4)
			rc.write(rawHeader(nil, 18, v, 42, &testClientID, true, req.AppendTo(nil)))
			corr, body, err := rc.readFrame(3 * time.Second)
			if err != nil || corr != 42 {
				t.Fatalf("ApiVersions v%d: corr %d, %v", v, corr, err)
			}
			resp := kmsg.NewPtrApiVersionsResponse()
			resp.SetVersion(0)
			if err := resp.ReadFrom(body); err != nil {
				t.Fatalf("ApiVersions v%d: the answer is not a v0 response: %v", v, err)
			}
			if resp.ErrorCode != kerr.UnsupportedVersion.Code {
				t.Fatalf("ApiVersions v%d: error %d, want UNSUPPORTED_VERSION", v, resp.ErrorCode)
			}
			assertAPIRanges(t, resp.ApiKeys)
			// The client retries at a version we serve, on the same
			// connection.
			apiVersionsOK(t, rc, 43)
			h.check(t, "ApiVersions v"+itoa(int64(v)))
		}
	})

	t.Run("negative version of a served API", func(t *testing.T) {
		rc := dialWire(t, b.Addr)
		rc.write(rawHeader(nil, 3, -1, 1, &testClientID, false, []byte{0, 0, 0, 0}))
		rc.expectClosed("Metadata v-1")
		h.check(t, "Metadata v-1")
	})

	t.Run("served API at a version kmsg does not know", func(t *testing.T) {
		for _, kv := range []struct{ key, version int16 }{{3, 99}, {3, 14}, {1, 99}, {19, 8}, {32767 & 0x7f, 99}} {
			rc := dialWire(t, b.Addr)
			rc.write(rawHeader(nil, kv.key, kv.version, 1, &testClientID, true, []byte{0, 0, 0, 0}))
			what := "key " + itoa(int64(kv.key)) + " v" + itoa(int64(kv.version))
			rc.expectClosed(what)
			h.check(t, what)
		}
	})

	t.Run("served API above our max, response has a top-level error", func(t *testing.T) {
		// Fetch one version above ours (kmsg knows it). FetchResponse has
		// a top-level ErrorCode from v7: UNSUPPORTED_VERSION.
		rc := dialWire(t, b.Addr)
		req := kmsg.NewPtrFetchRequest()
		req.MaxWaitMillis, req.MinBytes, req.MaxBytes = 100, 1, 1<<20
		v := aboveServed(t, req)
		resp := rc.roundTrip(req, v, 9).(*kmsg.FetchResponse)
		if resp.ErrorCode != kerr.UnsupportedVersion.Code || len(resp.Topics) != 0 {
			t.Fatalf("Fetch v%d: error %d, %d topics; want UNSUPPORTED_VERSION", v, resp.ErrorCode, len(resp.Topics))
		}
		apiVersionsOK(t, rc, 10)
	})

	t.Run("served API above our max, response without a top-level error", func(t *testing.T) {
		// ListOffsets v11 exists in kmsg; we serve up to 10; the response
		// has no top-level error code: the connection is closed.
		rc := dialWire(t, b.Addr)
		req := kmsg.NewPtrListOffsetsRequest()
		rc.write(reqFrame(req, aboveServed(t, req), 1))
		rc.expectClosed("ListOffsets v11")
		h.check(t, "ListOffsets v11")
	})

	// notServed fails the test if key has become a served API (pick
	// another unimplemented one then).
	notServed := func(t *testing.T, key int16) {
		t.Helper()
		for _, h := range apiTable {
			if h.key == key {
				t.Fatalf("key %d is served now; this case needs an API ringlog does not implement", key)
			}
		}
	}

	t.Run("known but unimplemented API", func(t *testing.T) {
		// SaslHandshake (17) v0/v1 and UpdateFeatures (57) v1 (flexible)
		// have a top-level ErrorCode: UNSUPPORTED_VERSION, connection kept.
		notServed(t, 17)
		notServed(t, 57)
		rc := dialWire(t, b.Addr)
		sasl := kmsg.NewPtrSASLHandshakeRequest()
		sasl.Mechanism = "PLAIN"
		for v := int16(0); v <= 1; v++ {
			resp := rc.roundTrip(sasl, v, int32(20+v)).(*kmsg.SASLHandshakeResponse)
			if resp.ErrorCode != kerr.UnsupportedVersion.Code || len(resp.SupportedMechanisms) != 0 {
				t.Fatalf("SaslHandshake v%d: %+v", v, resp)
			}
		}
		uf := kmsg.NewPtrUpdateFeaturesRequest()
		uf.TimeoutMillis = 1000
		resp := rc.roundTrip(uf, 1, 30).(*kmsg.UpdateFeaturesResponse)
		if resp.ErrorCode != kerr.UnsupportedVersion.Code {
			t.Fatalf("UpdateFeatures v1: %+v", resp)
		}
		apiVersionsOK(t, rc, 31)
		// SaslHandshake past kmsg's versions: closed.
		rc2 := dialWire(t, b.Addr)
		rc2.write(rawHeader(nil, 17, 9, 1, &testClientID, false, []byte{0, 1, 'x'}))
		rc2.expectClosed("SaslHandshake v9")
		h.check(t, "unimplemented APIs")
	})

	t.Run("unimplemented API whose response has no top-level error", func(t *testing.T) {
		// WriteTxnMarkers (27, brokers' internal API) responses carry
		// per-partition errors only.
		notServed(t, 27)
		rc := dialWire(t, b.Addr)
		req := kmsg.NewPtrWriteTxnMarkersRequest()
		rc.write(reqFrame(req, 1, 1))
		rc.expectClosed("WriteTxnMarkers v1")
		h.check(t, "WriteTxnMarkers")
	})

	t.Run("unimplemented API at a version whose response cannot carry the error", func(t *testing.T) {
		// AlterReplicaLogDirs (34) has no top-level ErrorCode at all.
		// kafka.go's unsupported() answers "when the response type has a
		// top-level error code we can encode at the requested version;
		// otherwise the connection is closed".
		var answered []string
		for _, kv := range []struct {
			req     kmsg.Request
			version int16
		}{
			{kmsg.NewPtrAlterReplicaLogDirsRequest(), 0},
		} {
			notServed(t, kv.req.Key())
			rc := dialWire(t, b.Addr)
			rc.write(reqFrame(kv.req, kv.version, 1))
			if corr, body, err := rc.readFrame(3 * time.Second); err == nil {
				answered = append(answered, fmt.Sprintf("key %d v%d answered corr %d body % x", kv.req.Key(), kv.version, corr, body))
				h.check(t, "key "+itoa(int64(kv.req.Key())))
				continue
			}
			rc.expectClosed("key " + itoa(int64(kv.req.Key())))
			h.check(t, "key "+itoa(int64(kv.req.Key())))
		}
		if len(answered) > 0 {
			t.Fatalf("unimplemented APIs at versions whose response has no ErrorCode field are answered with "+
				"an error-free empty response (the client reads an empty success) instead of closing the connection "+
				"as kafka.go unsupported() documents: %s", strings.Join(answered, "; "))
		}
	})
}

// aboveServed is the version just above the highest we serve of req's
// API, skipping the test when kmsg knows no such version.
func aboveServed(t *testing.T, req kmsg.Request) int16 {
	t.Helper()
	for _, h := range apiTable {
		if h.key == req.Key() {
			if h.max >= req.MaxVersion() {
				t.Skipf("key %d: we serve up to v%d, all that kmsg knows", h.key, h.max)
			}
			return h.max + 1
		}
	}
	t.Fatalf("key %d is not served", req.Key())
	return 0
}

// assertAPIRanges checks ApiVersions keys against apiTable exactly.
func assertAPIRanges(t testing.TB, keys []kmsg.ApiVersionsResponseApiKey) {
	t.Helper()
	if len(keys) != len(apiTable) {
		t.Fatalf("%d API keys, want %d", len(keys), len(apiTable))
	}
	for i, h := range apiTable {
		k := keys[i]
		if k.ApiKey != h.key || k.MinVersion != h.advMin || k.MaxVersion != h.max {
			t.Fatalf("key %d: %d v%d-%d, want %d v%d-%d", i, k.ApiKey, k.MinVersion, k.MaxVersion, h.key, h.advMin, h.max)
		}
	}
}

func itoa(v int64) string {
	if v == 0 {
		return "0"
	}
	neg := v < 0
	var b []byte
	u := uint64(v)
	if neg {
		u = uint64(-v)
	}
	for u > 0 {
		b = append([]byte{byte('0' + u%10)}, b...)
		u /= 10
	}
	if neg {
		b = append([]byte{'-'}, b...)
	}
	return string(b)
}

// TestMalformedProduce covers per-partition validation of produced batches:
// a bad batch fails its partition only, and nothing of it is written.
func TestMalformedProduce(t *testing.T) {
	b := startBroker(t)
	h := newHealthCheck(t, b.Addr)
	if _, err := b.Eng.CreateTopic(engine.CreateTopicRequest{Name: "bad", Partitions: 2, ReplicationFactor: 1,
		Configs: map[string]string{"max.message.bytes": "1000"}}); err != nil {
		t.Fatal(err)
	}
	rc := dialWire(t, b.Addr)
	corr := int32(0)
	// produce sends req at v9 (flexible) and v7 (not) alternately and
	// returns the partitions' results.
	produce := func(t *testing.T, req *kmsg.ProduceRequest) []kmsg.ProduceResponseTopicPartition {
		t.Helper()
		corr++
		v := int16(9)
		if corr%2 == 0 {
			v = 7
		}
		rc.t = t
		resp := rc.roundTrip(req, v, corr).(*kmsg.ProduceResponse)
		if len(resp.Topics) != 1 || resp.Topics[0].Topic != req.Topics[0].Topic ||
			len(resp.Topics[0].Partitions) != len(req.Topics[0].Partitions) {
			t.Fatalf("produce response shape: %+v", resp)
		}
		return resp.Topics[0].Partitions
	}
	ends := [2]int64{}
	checkEnds := func(t *testing.T, what string) {
		t.Helper()
		for p := int32(0); p < 2; p++ {
			l, err := b.Eng.Topic("bad").Partition(p).Log()
			if err != nil {
				t.Fatal(err)
			}
			if got := l.EndOffset(); got != ends[p] {
				t.Fatalf("%s: partition %d ends at %d, want %d", what, p, got, ends[p])
			}
		}
		h.check(t, what)
	}
	expect := func(t *testing.T, what string, got kmsg.ProduceResponseTopicPartition, p int32, code int16, base int64) {
		t.Helper()
		if got.Partition != p || got.ErrorCode != code || got.BaseOffset != base {
			msg := ""
			if got.ErrorMessage != nil {
				msg = *got.ErrorMessage
			}
			t.Fatalf("%s: partition %d: error %d (%s) base %d; want partition %d error %d base %d",
				what, got.Partition, got.ErrorCode, msg, got.BaseOffset, p, code, base)
		}
	}

	t.Run("bad CRC fails its partition only", func(t *testing.T) {
		bad := testBatch(t, 3, batch.CodecNone, "crc")
		bad[len(bad)-1] ^= 0xff // a record byte, covered by the CRC
		good := testBatch(t, 2, batch.CodecNone, "good")
		res := produce(t, produceReq("bad", -1, bad, good))
		expect(t, "bad CRC", res[0], 0, kerr.CorruptMessage.Code, -1)
		expect(t, "good partition next to a bad one", res[1], 1, 0, 0)
		ends[1] += 2
		checkEnds(t, "bad CRC")
	})

	t.Run("CRC field itself wrong", func(t *testing.T) {
		bad := testBatch(t, 1, batch.CodecZstd, "crc2")
		binary.BigEndian.PutUint32(bad[17:], binary.BigEndian.Uint32(bad[17:])+1)
		res := produce(t, produceReq("bad", 1, bad))
		expect(t, "wrong CRC field", res[0], 0, kerr.CorruptMessage.Code, -1)
		checkEnds(t, "wrong CRC field")
	})

	t.Run("magic 1 in a v2-shaped batch", func(t *testing.T) {
		bad := testBatch(t, 2, batch.CodecNone, "m1")
		bad[16] = 1 // magic is not covered by the CRC
		good := testBatch(t, 1, batch.CodecGzip, "m1good")
		res := produce(t, produceReq("bad", -1, good, bad))
		expect(t, "good before magic 1", res[0], 0, 0, ends[0])
		expect(t, "magic 1", res[1], 1, kerr.UnsupportedForMessageFormat.Code, -1)
		ends[0]++
		checkEnds(t, "magic 1")
	})

	t.Run("a real magic 1 message set", func(t *testing.T) {
		// offset, size, crc, magic 1, attributes, timestamp, key -1, value
		var msg []byte
		msg = binary.BigEndian.AppendUint32(msg, 0) // crc (not checked first)
		msg = append(msg, 1, 0)
		msg = binary.BigEndian.AppendUint64(msg, uint64(time.Now().UnixMilli()))
		msg = binary.BigEndian.AppendUint32(msg, 0xffffffff)
		msg = binary.BigEndian.AppendUint32(msg, 5)
		msg = append(msg, "hello"...)
		set := binary.BigEndian.AppendUint64(nil, 0)
		set = binary.BigEndian.AppendUint32(set, uint32(len(msg)))
		set = append(set, msg...)
		res := produce(t, produceReq("bad", -1, set))
		expect(t, "magic 1 message set", res[0], 0, kerr.UnsupportedForMessageFormat.Code, -1)
		checkEnds(t, "magic 1 message set")
	})

	t.Run("record count mismatch", func(t *testing.T) {
		bad := testBatch(t, 3, batch.CodecNone, "cnt")
		binary.BigEndian.PutUint32(bad[57:], 4) // recordCount 4, lastOffsetDelta 2
		binary.BigEndian.PutUint32(bad[17:], batch.Checksum(bad))
		res := produce(t, produceReq("bad", -1, bad))
		expect(t, "record count 4 vs lastOffsetDelta 2", res[0], 0, kerr.InvalidRecord.Code, -1)

		// Count and delta agree, but the batch holds fewer records.
		bad = testBatch(t, 3, batch.CodecNone, "cnt2")
		binary.BigEndian.PutUint32(bad[57:], 4)
		binary.BigEndian.PutUint32(bad[23:], 3)
		binary.BigEndian.PutUint32(bad[17:], batch.Checksum(bad))
		res = produce(t, produceReq("bad", -1, bad))
		expect(t, "declares 4 records, holds 3", res[0], 0, kerr.InvalidRecord.Code, -1)

		// Declares 2 (delta 1), holds 3.
		bad = testBatch(t, 3, batch.CodecNone, "cnt3")
		binary.BigEndian.PutUint32(bad[57:], 2)
		binary.BigEndian.PutUint32(bad[23:], 1)
		binary.BigEndian.PutUint32(bad[17:], batch.Checksum(bad))
		res = produce(t, produceReq("bad", -1, bad))
		expect(t, "declares 2 records, holds 3", res[0], 0, kerr.InvalidRecord.Code, -1)

		// A record whose length varint runs past the batch, CRC intact.
		bad = testBatch(t, 2, batch.CodecNone, "cnt4")
		bad[batch.HeaderSize] = 0x7e // record length 63, more than is left
		binary.BigEndian.PutUint32(bad[17:], batch.Checksum(bad))
		res = produce(t, produceReq("bad", -1, bad))
		expect(t, "record longer than the batch", res[0], 0, kerr.InvalidRecord.Code, -1)
		checkEnds(t, "record count mismatch")
	})

	t.Run("batch larger than max.message.bytes", func(t *testing.T) {
		bl := batch.NewBuilder()
		bl.Add(time.Now().UnixMilli(), nil, make([]byte, 1500), nil)
		big, err := bl.Build(nil, batch.CodecNone)
		if err != nil {
			t.Fatal(err)
		}
		small := testBatch(t, 1, batch.CodecNone, "small")
		res := produce(t, produceReq("bad", -1, big, small))
		expect(t, "1.5 KB batch, max.message.bytes 1000", res[0], 0, kerr.MessageTooLarge.Code, -1)
		expect(t, "small batch beside it", res[1], 1, 0, ends[1])
		ends[1]++
		checkEnds(t, "too large")
	})

	t.Run("second batch of a partition bad: none of it written", func(t *testing.T) {
		good := testBatch(t, 2, batch.CodecNone, "two-a")
		bad := testBatch(t, 2, batch.CodecNone, "two-b")
		bad[70] ^= 1
		res := produce(t, produceReq("bad", -1, append(append([]byte{}, good...), bad...)))
		expect(t, "good then bad batch", res[0], 0, kerr.CorruptMessage.Code, -1)
		checkEnds(t, "two batches")
	})

	t.Run("trailing bytes after a batch", func(t *testing.T) {
		good := testBatch(t, 2, batch.CodecNone, "trail")
		res := produce(t, produceReq("bad", -1, append(good, 1, 2, 3)))
		expect(t, "batch + 3 bytes", res[0], 0, kerr.CorruptMessage.Code, -1)
		checkEnds(t, "trailing bytes")
	})

	t.Run("acks=5", func(t *testing.T) {
		res := produce(t, produceReq("bad", 5, testBatch(t, 1, batch.CodecNone, "acks"), testBatch(t, 1, batch.CodecNone, "acks")))
		expect(t, "acks=5 p0", res[0], 0, kerr.InvalidRequiredAcks.Code, -1)
		expect(t, "acks=5 p1", res[1], 1, kerr.InvalidRequiredAcks.Code, -1)
		// acks=5 on an unknown topic must not create it.
		res = produce(t, produceReq("acks-five-new", 5, testBatch(t, 1, batch.CodecNone, "acks")))
		expect(t, "acks=5 new topic", res[0], 0, kerr.InvalidRequiredAcks.Code, -1)
		if b.Eng.Topic("acks-five-new") != nil {
			t.Fatal("acks=5 created a topic")
		}
		checkEnds(t, "acks=5")
	})

	t.Run("unknown partition", func(t *testing.T) {
		req := produceReq("bad", -1, testBatch(t, 1, batch.CodecNone, "p"))
		req.Topics[0].Partitions[0].Partition = 7
		res := produce(t, req)
		expect(t, "partition 7 of 2", res[0], 7, kerr.UnknownTopicOrPartition.Code, -1)
		checkEnds(t, "unknown partition")
	})

	t.Run("produce v2 (message format v1)", func(t *testing.T) {
		// Advertised from v0 (k00_produce.go): "v0-2 requests (message
		// format v0/v1) are answered UNSUPPORTED_FOR_MESSAGE_FORMAT per
		// partition".
		// The handler's side: validateRecords refuses v0-2 whatever the
		// records hold.
		if _, _, err := validateRecords(testBatch(t, 1, batch.CodecNone, "v2"), batch.Limits{MaxBatchBytes: 1 << 20}, 2, nil, nil); errCode(err) != kerr.UnsupportedForMessageFormat.Code {
			t.Fatalf("validateRecords at v2: %v", err)
		}
		prc := dialWire(t, b.Addr)
		req := produceReq("bad", -1, testBatch(t, 1, batch.CodecNone, "v2"))
		prc.write(reqFrame(req, 2, 77))
		corr, body, err := prc.readFrame(3 * time.Second)
		if err != nil {
			checkEnds(t, "produce v2")
			t.Fatalf("Produce v2 (advertised: ApiVersions lists Produce from v0) closes the connection (%v) "+
				"instead of answering UNSUPPORTED_FOR_MESSAGE_FORMAT per partition as k00_produce.go documents: "+
				"handleFrame checks the version against apiTable min (3), not advMin (0), and never reaches handleProduce", err)
		}
		if corr != 77 {
			t.Fatalf("corr %d", corr)
		}
		resp := decodeResp(t, req, 2, body).(*kmsg.ProduceResponse)
		expect(t, "produce v2", resp.Topics[0].Partitions[0], 0, kerr.UnsupportedForMessageFormat.Code, -1)
		checkEnds(t, "produce v2")
	})
}

// TestMalformedLimits covers Config.MaxRequestBytes and MaxInflightPerConn.
func TestMalformedLimits(t *testing.T) {
	const maxReq = 4096
	const inflight = 4
	b := startBroker(t, withServer(func(c *netio.Config) {
		c.MaxRequestBytes = maxReq
		c.MaxInflightPerConn = inflight
	}))
	h := newHealthCheck(t, b.Addr)

	t.Run("frame larger than MaxRequestBytes", func(t *testing.T) {
		rc := dialWire(t, b.Addr)
		// A valid produce just over the limit: closed on its size alone.
		bl := batch.NewBuilder()
		bl.Add(1, nil, make([]byte, maxReq), nil)
		big, _ := bl.Build(nil, batch.CodecNone)
		rc.write(reqFrame(produceReq("limits", -1, big), 9, 1))
		rc.expectClosed("frame over MaxRequestBytes")
		if b.Eng.Topic("limits") != nil {
			t.Fatal("a refused frame created a topic")
		}
		h.check(t, "frame over MaxRequestBytes")

		// The header alone is enough to refuse it.
		rc = dialWire(t, b.Addr)
		rc.write(binary.BigEndian.AppendUint32(nil, maxReq+1))
		rc.expectClosed("size header over MaxRequestBytes")
		h.check(t, "size header over MaxRequestBytes")

		// Exactly at the limit is served.
		rc = dialWire(t, b.Addr)
		req := kmsg.NewPtrApiVersionsRequest()
		req.ClientSoftwareName, req.ClientSoftwareVersion = "x", "1"
		req.SetVersion(3)
		body := req.AppendTo(nil)
		frame := rawHeader(nil, 18, 3, 3, &testClientID, true, body)
		// Pad the client id so the frame is exactly maxReq.
		pad := maxReq - (len(frame) - 4)
		id := testClientID + string(make([]byte, pad))
		frame = rawHeader(nil, 18, 3, 3, &id, true, body)
		if len(frame)-4 != maxReq {
			t.Fatalf("frame size %d", len(frame)-4)
		}
		rc.write(frame)
		resp := rc.readResp(kmsg.NewPtrApiVersionsRequest(), 3, 3).(*kmsg.ApiVersionsResponse)
		if resp.ErrorCode != 0 {
			t.Fatalf("frame at the limit: %+v", resp)
		}
	})

	t.Run("more pipelined requests than MaxInflightPerConn", func(t *testing.T) {
		rc := dialWire(t, b.Addr)
		const n = 60
		type sent struct {
			req kmsg.Request
			v   int16
		}
		var reqs []sent
		var wire []byte
		for i := 0; i < n; i++ {
			var s sent
			switch i % 5 {
			case 0:
				s = sent{kmsg.NewPtrApiVersionsRequest(), 3}
			case 1:
				m := kmsg.NewPtrMetadataRequest() // async handler
				mt := kmsg.NewMetadataRequestTopic()
				name := "pipe"
				mt.Topic = &name
				m.Topics = append(m.Topics, mt)
				m.AllowAutoTopicCreation = true
				s = sent{m, 12}
			case 2:
				s = sent{kmsg.NewPtrDescribeClusterRequest(), 1}
			case 3:
				d := kmsg.NewPtrDescribeConfigsRequest() // async handler
				r := kmsg.NewDescribeConfigsRequestResource()
				r.ResourceType = kmsg.ConfigResourceTypeBroker
				d.Resources = append(d.Resources, r)
				s = sent{d, 4}
			case 4:
				p := produceReq("pipe", 1, testBatch(t, 1, batch.CodecNone, "pipe"))
				s = sent{p, 9}
			}
			reqs = append(reqs, s)
			wire = append(wire, reqFrame(s.req, s.v, int32(i))...)
		}
		rc.write(wire)
		produced := int64(0)
		for i, s := range reqs {
			resp := rc.readResp(s.req, s.v, int32(i))
			switch r := resp.(type) {
			case *kmsg.ApiVersionsResponse:
				if r.ErrorCode != 0 {
					t.Fatalf("request %d: %+v", i, r)
				}
			case *kmsg.MetadataResponse:
				if len(r.Topics) != 1 || r.Topics[0].ErrorCode != 0 {
					t.Fatalf("request %d: metadata %+v", i, r.Topics)
				}
			case *kmsg.DescribeClusterResponse:
				if r.ErrorCode != 0 || len(r.Brokers) != 1 {
					t.Fatalf("request %d: %+v", i, r)
				}
			case *kmsg.DescribeConfigsResponse:
				if len(r.Resources) != 1 || r.Resources[0].ErrorCode != 0 {
					t.Fatalf("request %d: %+v", i, r)
				}
			case *kmsg.ProduceResponse:
				p := r.Topics[0].Partitions[0]
				if p.ErrorCode != 0 || p.BaseOffset != produced {
					t.Fatalf("request %d: produce error %d base %d, want base %d", i, p.ErrorCode, p.BaseOffset, produced)
				}
				produced++
			}
		}
		h.check(t, "pipelining")
	})

	t.Run("a slow response holds back a ready one", func(t *testing.T) {
		if _, err := b.Eng.CreateTopic(engine.CreateTopicRequest{Name: "empty", Partitions: 1, ReplicationFactor: 1}); err != nil {
			t.Fatal(err)
		}
		rc := dialWire(t, b.Addr)
		f := kmsg.NewPtrFetchRequest()
		f.MaxWaitMillis, f.MinBytes, f.MaxBytes = 500, 1, 1<<20
		ft := kmsg.NewFetchRequestTopic()
		ft.Topic = "empty"
		fp := kmsg.NewFetchRequestTopicPartition()
		fp.PartitionMaxBytes = 1 << 20
		ft.Partitions = append(ft.Partitions, fp)
		f.Topics = append(f.Topics, ft)
		wire := reqFrame(f, 12, 100)
		wire = append(wire, reqFrame(kmsg.NewPtrApiVersionsRequest(), 3, 101)...)
		start := time.Now()
		rc.write(wire)
		corr, body, err := rc.readFrame(3 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		first := time.Since(start)
		if corr != 100 {
			t.Fatalf("first response has correlation id %d, want the fetch's (100)", corr)
		}
		fr := decodeResp(t, f, 12, body).(*kmsg.FetchResponse)
		if len(fr.Topics) != 1 || len(fr.Topics[0].Partitions) != 1 {
			t.Fatalf("fetch: %+v", fr)
		}
		if p := fr.Topics[0].Partitions[0]; p.ErrorCode != 0 || p.HighWatermark != 0 || len(p.RecordBatches) != 0 {
			t.Fatalf("fetch partition: %+v", p)
		}
		if first < 450*time.Millisecond {
			t.Fatalf("the fetch was answered after %v, before its 500ms MaxWait on an empty partition", first)
		}
		av := rc.readResp(kmsg.NewPtrApiVersionsRequest(), 3, 101).(*kmsg.ApiVersionsResponse)
		if av.ErrorCode != 0 {
			t.Fatalf("ApiVersions: %+v", av)
		}
		h.check(t, "ordering")
	})
}
