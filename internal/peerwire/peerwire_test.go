package peerwire_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/broker"
	"github.com/ringlog/ringlog/internal/brokertest"
	"github.com/ringlog/ringlog/internal/peerwire"
)

// A broker that restarted (or closed its idle connections) leaves the
// pool with dead connections: the next calls redial instead of failing,
// however many were kept.
func TestCallAfterTheBrokerRestarted(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	b := brokertest.Start(t, func(c *broker.Config) { c.Kafka.Addr = addr })
	cl := peerwire.New(nil, nil)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	call := func() error {
		_, err := cl.Call(ctx, b.Addr, kmsg.NewPtrMetadataRequest())
		return err
	}
	// Four at once: four connections kept.
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = call() }()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	b.Restart()
	for i := range 4 {
		if err := call(); err != nil {
			t.Fatalf("call %d after the restart: %v", i, err)
		}
	}
}
