package main

import (
	"crypto/rand"
	"crypto/tls"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// BenchmarkClusterInterBrokerTLS measures what TLS between the brokers
// costs replication: a client produces 1 KiB records with acks=all to a
// topic of replication factor 3 on a three-broker cluster, over a
// PLAINTEXT client listener in both cases, while the inter-broker
// listener (replica fetches) is PLAINTEXT or SSL with client
// certificates (and the Raft connections then mutual TLS too). Each
// iteration writes 8 MiB of random, uncompressed values; b.SetBytes makes
// the MB/s comparable.
//
//	go test -run XXX -bench ClusterInterBrokerTLS -count 3 ./cmd/ringlog/
func BenchmarkClusterInterBrokerTLS(b *testing.B) {
	for _, mode := range []string{"plaintext", "ssl"} {
		b.Run(mode, func(b *testing.B) {
			c := newSecureCluster(b, 3)
			bcert, bkey := c.certs.Broker("broker")
			seeds := c.kafka
			for id := 1; id <= 3; id++ {
				args := append(c.args(id, c.voters), "--shards", "2")
				if mode == "ssl" {
					// The client keeps a PLAINTEXT listener; only the
					// brokers' own links are TLS.
					args = append(args, "--kafka-security-protocol", "SSL", "--tls-cert", bcert, "--tls-key", bkey,
						"--tls-client-ca", c.certs.CAFile, "--listeners", "PLAINTEXT://"+c.saslSSL[id-1])
				}
				c.procs[id-1] = startServe(b, c.dirs[id-1], args...)
			}
			if mode == "ssl" {
				pair, err := tls.LoadX509KeyPair(bcert, bkey)
				if err != nil {
					b.Fatal(err)
				}
				c.clientOpts = []kgo.Opt{kgo.DialTLSConfig(&tls.Config{RootCAs: c.certs.CAPool, ServerName: "localhost", Certificates: []tls.Certificate{pair}})}
				seeds = c.saslSSL // the PLAINTEXT listeners, on these ports
			}
			ctx := deadlineCtx(b, 5*time.Minute)
			c.converge(ctx, 3)
			cl := procClient(b, seeds[0], kgo.SeedBrokers(seeds...), kgo.RequiredAcks(kgo.AllISRAcks()),
				kgo.DefaultProduceTopic("bench"), kgo.ProducerLinger(time.Millisecond), kgo.MaxBufferedRecords(1<<16),
				kgo.ProducerBatchCompression(kgo.NoCompression()))
			if r, err := kadm.NewClient(cl).CreateTopic(ctx, 3, 3, nil, "bench"); err != nil || r.Err != nil {
				b.Fatalf("create bench: %v %v", err, r.Err)
			}
			const perIter = 8 << 10 // records: 8 MiB
			// Random values, uncompressed: every byte crosses each link.
			values := make([]byte, perIter*1024)
			rand.Read(values)
			produce := func(n int) {
				for i := 0; i < n; i++ {
					cl.Produce(ctx, &kgo.Record{Key: []byte(strconv.Itoa(i)), Value: values[i*1024 : (i+1)*1024]}, func(_ *kgo.Record, err error) {
						if err != nil {
							b.Errorf("produce: %v", err)
						}
					})
				}
				if err := cl.Flush(ctx); err != nil {
					b.Fatal(err)
				}
			}
			produce(perIter) // warm: leaders, fetchers, connections
			b.SetBytes(perIter * 1024)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				produce(perIter)
			}
			b.StopTimer()
		})
	}
}
