package netio_test

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ringlog/ringlog/broker"
	"github.com/ringlog/ringlog/internal/brokertest"
	"github.com/ringlog/ringlog/internal/testcerts"
	"github.com/ringlog/ringlog/netio"
	"github.com/ringlog/ringlog/security"
)

// BenchmarkListenerTLS: franz-go producing (acks=1) and consuming 1 KiB
// records over the PLAINTEXT listener and over an SSL listener of the
// same broker. Fetches over TLS lose sendfile's zero copy: compare the
// pairs within one run (go test -bench ListenerTLS -count 5).
func BenchmarkListenerTLS(b *testing.B) {
	certs := testcerts.New(b)
	br := brokertest.Start(b, func(c *broker.Config) {
		c.Listeners = []broker.Listener{{Protocol: netio.SSL, Addr: "127.0.0.1:0"}}
		c.Security.TLS = security.TLSFiles{CertFile: certs.ServerCert, KeyFile: certs.ServerKey}
	})
	tlsCfg := &tls.Config{RootCAs: certs.CAPool, ServerName: "localhost"}
	listeners := []struct {
		name string
		opts []kgo.Opt
	}{
		{"PLAINTEXT", []kgo.Opt{kgo.SeedBrokers(br.Addr)}},
		{"SSL", []kgo.Opt{kgo.SeedBrokers(br.B.Listeners()[0].Addr().String()), kgo.DialTLSConfig(tlsCfg)}},
	}
	ctx := context.Background()
	adm := kadm.NewClient(br.Client())
	const parts = 8
	val := make([]byte, 1024)
	rand.Read(val)
	for _, l := range listeners {
		topic := "tls-bench-" + l.name
		if _, err := adm.CreateTopic(ctx, parts, 1, nil, topic); err != nil {
			b.Fatal(err)
		}
		b.Run("produce/"+l.name, func(b *testing.B) {
			cl, err := kgo.NewClient(append(l.opts, kgo.DefaultProduceTopic(topic), kgo.RequiredAcks(kgo.LeaderAck()),
				kgo.DisableIdempotentWrite(), kgo.ProducerLinger(time.Millisecond), kgo.ProducerBatchCompression(kgo.NoCompression()),
				kgo.RecordPartitioner(kgo.RoundRobinPartitioner()), kgo.MaxBufferedRecords(1<<16))...)
			if err != nil {
				b.Fatal(err)
			}
			defer cl.Close()
			b.SetBytes(int64(len(val)))
			for b.Loop() {
				cl.Produce(ctx, &kgo.Record{Value: val}, func(_ *kgo.Record, err error) {
					if err != nil {
						b.Error(err)
					}
				})
			}
			if err := cl.Flush(ctx); err != nil {
				b.Fatal(err)
			}
		})
	}
	// Fill one topic once; each listener reads all of it per iteration.
	const n = 100_000
	prod := br.Client(kgo.DefaultProduceTopic("tls-bench-read"), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()),
		kgo.DisableIdempotentWrite(), kgo.RequiredAcks(kgo.LeaderAck()), kgo.ProducerBatchCompression(kgo.NoCompression()))
	if _, err := adm.CreateTopic(ctx, parts, 1, nil, "tls-bench-read"); err != nil {
		b.Fatal(err)
	}
	for i := 0; i < n; i++ {
		prod.Produce(ctx, &kgo.Record{Value: val}, nil)
	}
	if err := prod.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	for _, l := range listeners {
		b.Run("fetch/"+l.name, func(b *testing.B) {
			b.SetBytes(int64(n * len(val)))
			for b.Loop() {
				cl, err := kgo.NewClient(append(l.opts, kgo.ConsumeTopics("tls-bench-read"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
					kgo.FetchMaxBytes(64<<20), kgo.FetchMaxPartitionBytes(8<<20))...)
				if err != nil {
					b.Fatal(err)
				}
				for got := 0; got < n; {
					fs := cl.PollFetches(ctx)
					if err := fs.Err(); err != nil {
						b.Fatal(err)
					}
					got += fs.NumRecords()
				}
				cl.Close()
			}
		})
	}
}
