package client_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ringlog/ringlog/client"
)

func ExampleProducer() {
	addr, stop := exampleBroker() // a broker on 127.0.0.1 for the example
	defer stop()
	ctx := context.Background()

	// The native protocol has no metadata request: create the topic and
	// tell the producer its partition count, so that it partitions by key
	// itself (Kafka's murmur2) and round-robins null keys.
	conn, err := client.Dial(ctx, addr)
	if err != nil {
		panic(err)
	}
	if err := conn.CreateTopic(ctx, "orders", 3); err != nil {
		panic(err)
	}
	conn.Close()

	p, err := client.NewProducer(addr,
		client.WithTopicPartitions("orders", 3),
		client.WithDeadLetterTopic("orders.dlq"),
		client.WithRetries(2), client.WithRetryBackoff(10*time.Millisecond, 100*time.Millisecond))
	if err != nil {
		panic(err)
	}
	defer p.Close(ctx)

	// Asynchronous: records are batched per partition; each gets a Result.
	keys := []string{"order-7", "order-8", "order-7"}
	results := make([]client.Result, len(keys))
	for i, key := range keys {
		rec := client.Record{Topic: "orders", Key: []byte(key), Value: []byte(fmt.Sprintf("event %d", i))}
		if err := p.Send(ctx, rec, func(r client.Result) { results[i] = r }); err != nil {
			panic(err)
		}
	}
	if err := p.Flush(ctx); err != nil { // every callback has run
		panic(err)
	}
	for i, r := range results {
		fmt.Printf("%s -> %s/%d@%d\n", keys[i], r.Topic, r.Partition, r.Offset)
	}

	// Synchronous.
	r, err := p.SendSync(ctx, client.Record{Topic: "orders", Key: []byte("order-7"), Value: []byte("shipped")})
	fmt.Printf("order-7 shipped -> %s/%d@%d %v\n", r.Topic, r.Partition, r.Offset, err)

	// A record that cannot be delivered (partition 9 does not exist) is
	// retried, then parked in the dead-letter topic as a JSON envelope.
	r, err = p.SendSync(ctx, client.Record{Topic: "orders", Key: []byte("order-9"), Value: []byte("lost")}, client.ToPartition(9))
	fmt.Println("error:", err)
	fmt.Printf("dead letter -> %s/%d@%d\n", r.DeadLetter.Topic, r.DeadLetter.Partition, r.DeadLetter.Offset)

	conn, _ = client.Dial(ctx, addr)
	defer conn.Close()
	recs, _ := conn.Fetch(ctx, "orders.dlq", 0, 0, 1<<20)
	d, _ := client.ParseDeadLetter(recs[0].Value)
	fmt.Printf("envelope: topic=%s partition=%d key=%s value=%s attempts=%d\n", d.Topic, d.Partition, d.Key, d.Value, d.Attempts)

	// Output:
	// order-7 -> orders/1@0
	// order-8 -> orders/2@0
	// order-7 -> orders/1@1
	// order-7 shipped -> orders/1@2 <nil>
	// error: ringlog produce: unknown topic or partition (code 1)
	// dead letter -> orders.dlq/0@0
	// envelope: topic=orders partition=9 key=order-9 value=lost attempts=3
}

func ExampleConsumer() {
	addr, stop := exampleBroker() // a broker on 127.0.0.1 for the example
	defer stop()
	ctx := context.Background()

	p, err := client.NewProducer(addr)
	if err != nil {
		panic(err)
	}
	for _, v := range []string{"seat A1", "seat A2", "seat A3"} {
		if err := p.Send(ctx, client.Record{Topic: "reservations", Value: []byte(v)}, nil); err != nil {
			panic(err)
		}
	}
	p.Close(ctx) // drains

	tps := []client.TopicPartition{{Topic: "reservations", Partition: 0}}
	c, err := client.NewConsumer(addr, "ticketing", tps)
	if err != nil {
		panic(err)
	}
	// Run commits each record's offset only after the handler returned
	// nil for it: a failed record is received again (at-least-once).
	runCtx, cancel := context.WithCancel(ctx)
	err = c.Run(runCtx, func(_ context.Context, r client.Record) error {
		if string(r.Value) == "seat A3" {
			cancel() // stop after this one
			return fmt.Errorf("payment service down")
		}
		fmt.Printf("handled %s@%d: %s\n", r.Topic, r.Offset, r.Value)
		return nil
	})
	fmt.Println("run:", err)
	c.Close(ctx) // commits what was handled

	// The group's next consumer resumes at the record that failed.
	c, err = client.NewConsumer(addr, "ticketing", tps)
	if err != nil {
		panic(err)
	}
	defer c.Close(ctx)
	recs, err := c.Poll(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Printf("next consumer got %s@%d: %s\n", recs[0].Topic, recs[0].Offset, recs[0].Value)

	// Output:
	// handled reservations@0: seat A1
	// handled reservations@1: seat A2
	// run: ringlog consumer: handler failed on reservations/0@2: payment service down
	// next consumer got reservations@2: seat A3
}
