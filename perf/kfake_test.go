package perf

import (
	"context"
	"net"
	"testing"
	"time"
)

// TestServeKfake: the CPU reference serves a produce run as the suite
// makes it (a fresh topic, created and deleted), and stops with its
// context.
func TestServeKfake(t *testing.T) {
	if testing.Short() {
		t.Skip("kfake run skipped in -short")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	serving, ready := make(chan error, 1), make(chan struct{})
	sctx, stop := context.WithCancel(ctx)
	go func() { serving <- ServeKfake(sctx, ln, func() { close(ready) }) }()
	select {
	case <-ready:
	case err := <-serving:
		t.Fatalf("kfake ended before it served: %v", err)
	}
	res, err := RunProduce(ctx, smokeConfig(ln.Addr().String(), ModeProduce), nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Acked == 0 || res.Acked != res.Sent || res.Errors != 0 {
		t.Errorf("against kfake: sent %d, acked %d, %d errors (%s)", res.Sent, res.Acked, res.Errors, res.FirstError)
	}
	stop()
	if err := <-serving; err != nil {
		t.Fatal(err)
	}
}
