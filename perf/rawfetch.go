package perf

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// RunRawFetch reads a topic from offset 0 to its end with plain Fetch
// requests, counting the record batches' bytes and records from their
// headers without decoding any record. It measures what the broker
// delivers: a client library's record decoding (which, on a machine the
// broker shares, competes with it for the same cores) is left out. Each of
// c.Consumers fetchers reads its own share of the partitions; c.FetchBytes
// is the per-partition fetch size.
func RunRawFetch(ctx context.Context, c Config, progress io.Writer) (*Result, error) {
	r, err := startRun(ctx, &c, ModeConsume)
	if err != nil {
		return nil, err
	}
	defer r.close(ctx)
	if err := r.prefill(ctx, progress); err != nil {
		return nil, err
	}
	ends, err := r.endOffsets(ctx)
	if err != nil {
		return nil, err
	}
	shares := make([]map[int32]int64, c.Consumers)
	for i := range shares {
		shares[i] = map[int32]int64{}
	}
	for p, e := range ends {
		if e > 0 {
			shares[int(p)%c.Consumers][p] = e
		}
	}
	start := time.Now()
	cpu0 := sampleCPU(c.BrokerPID)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var bytes, records int64
	var firstErr error
	dctx, dcancel := context.WithCancel(ctx)
	if d := c.Duration.D(); d > 0 {
		dctx, dcancel = context.WithTimeout(ctx, d)
	}
	defer dcancel()
	for _, share := range shares {
		if len(share) == 0 {
			continue
		}
		wg.Add(1)
		go func(share map[int32]int64) {
			defer wg.Done()
			b, n, err := rawFetchShare(dctx, c, r.topic, share)
			mu.Lock()
			bytes += b
			records += n
			if err != nil && firstErr == nil {
				firstErr = err
			}
			mu.Unlock()
		}(share)
	}
	wg.Wait()
	elapsed := time.Since(start)
	res := r.result(start)
	res.Label = c.Label
	res.setCPU(cpu0, sampleCPU(c.BrokerPID))
	res.Consumed = records
	res.setThroughput(records, bytes, elapsed)
	if firstErr != nil {
		res.Errors = 1
		res.FirstError = firstErr.Error()
	}
	if progress != nil {
		fmt.Fprintf(progress, "raw fetch: %d records, %d bytes of batches in %v (%.1f MB/s)\n", records, bytes, elapsed.Round(time.Millisecond), res.MBPerSec)
	}
	if records == 0 {
		return res, fmt.Errorf("raw fetch read nothing: %v", firstErr)
	}
	return res, firstErr
}

// rawFetchShare fetches the given partitions from 0 to their end offsets
// and returns the batch bytes and records read.
func rawFetchShare(ctx context.Context, c Config, topic string, ends map[int32]int64) (bytes, records int64, err error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Brokers...))
	if err != nil {
		return 0, 0, err
	}
	defer cl.Close()
	// kgo sends the newest Fetch version both sides know, which names
	// topics by id (v13+): look it up.
	mreq := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(topic)
	mreq.Topics = append(mreq.Topics, mt)
	meta, err := mreq.RequestWith(ctx, cl)
	if err != nil {
		return 0, 0, err
	}
	if len(meta.Topics) != 1 || meta.Topics[0].ErrorCode != 0 {
		return 0, 0, fmt.Errorf("metadata of %s: %+v", topic, meta.Topics)
	}
	topicID := meta.Topics[0].TopicID
	next := map[int32]int64{}
	for p := range ends {
		next[p] = 0
	}
	for len(next) > 0 {
		req := kmsg.NewPtrFetchRequest()
		req.MaxWaitMillis, req.MinBytes, req.MaxBytes = 500, 1, 256<<20
		req.SessionEpoch = -1
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic, rt.TopicID = topic, topicID
		for p, off := range next {
			rp := kmsg.NewFetchRequestTopicPartition()
			rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = p, off, int32(c.FetchBytes)
			rp.CurrentLeaderEpoch, rp.LogStartOffset = -1, -1
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = []kmsg.FetchRequestTopic{rt}
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return bytes, records, err
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if p.ErrorCode != 0 {
					return bytes, records, fmt.Errorf("fetch %s-%d: error code %d", topic, p.Partition, p.ErrorCode)
				}
				off, nb, nr := walkBatches(p.RecordBatches, next[p.Partition])
				bytes += nb
				records += nr
				next[p.Partition] = off
				if off >= ends[p.Partition] {
					delete(next, p.Partition)
				}
			}
		}
	}
	return bytes, records, nil
}

// walkBatches counts the whole batches in b (headers only) and returns the
// offset after the last one (or from when there is none).
func walkBatches(b []byte, from int64) (next, bytes, records int64) {
	next = from
	for len(b) >= 61 {
		size := int64(binary.BigEndian.Uint32(b[8:])) + 12
		if size > int64(len(b)) {
			break // a partial batch at the end of a fetch
		}
		base := int64(binary.BigEndian.Uint64(b))
		lastDelta := int64(binary.BigEndian.Uint32(b[23:]))
		count := int64(binary.BigEndian.Uint32(b[57:]))
		bytes += size
		records += count
		next = base + lastDelta + 1
		b = b[size:]
	}
	return next, bytes, records
}
