package perf

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"
)

// relayChildEnv makes the test binary a relay process (TestMain), so
// that StartRelayProcess is tested on a real process of its own.
const relayChildEnv = "RINGLOG_PERF_TEST_RELAY_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(relayChildEnv) == "1" {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
		defer stop()
		if err := ServeRelay(ctx, ln, func() { fmt.Printf("%s%s\n", RelayReadyPrefix, ln.Addr()) }); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestRelayFloor runs the relay floor against a relay process: every
// record due is sent, answered and consumed exactly once, latency is
// measured for the records after the warm-up, and the relay's CPU is
// read as a broker's would be.
func TestRelayFloor(t *testing.T) {
	t.Setenv(relayChildEnv, "1") // for the child only: TestMain has run
	relay, err := StartRelayProcess(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := relay.Stop(); err != nil {
			t.Errorf("stop the relay: %v", err)
		}
	}()
	c := DefaultConfig(ModeE2E)
	c.Rate, c.Duration, c.Warmup, c.ReportEvery = 4000, Duration(1500*time.Millisecond), Duration(500*time.Millisecond), 0
	c.BrokerPID = relay.PID
	res, err := RunRelayFloor(context.Background(), c, relay.Addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Mode != ModeFloor || res.Sent != 6000 || res.Acked != res.Sent || res.Consumed != res.Sent || res.Errors != 0 {
		t.Fatalf("%s run: sent %d, acked %d, consumed %d, errors %d (%s); want 6000 of each", res.Mode, res.Sent, res.Acked, res.Consumed, res.Errors, res.FirstError)
	}
	// Records due in the last second are measured; a few may arrive
	// after the measured window ends.
	if e := res.E2ELatency; e == nil || e.Count != 4000 || e.P50 <= 0 || e.Max < e.P99 {
		t.Fatalf("e2e latency %+v, want 4000 measured records", res.E2ELatency)
	}
	if res.ProduceLatency == nil || res.ProduceLatency.Count != 4000 || res.SendLag == nil {
		t.Fatalf("ack latency %+v, send lag %+v", res.ProduceLatency, res.SendLag)
	}
	// Records are sent at or after their due times, so latency from the
	// send is at most that from the due time.
	if f := res.E2EFromSend; f == nil || f.Count != 4000 || f.Max > res.E2ELatency.Max {
		t.Fatalf("e2e from send %+v, e2e %+v", f, res.E2ELatency)
	}
	if res.BrokerCores <= 0 {
		t.Fatalf("relay CPU %v cores: the relay process's CPU was not read", res.BrokerCores)
	}
	if _, err := RunRelayFloor(context.Background(), Config{Consumers: 2}, relay.Addr, nil); err == nil {
		t.Fatal("two consumers: no error")
	}
}

// TestRelayRejects checks that the relay ends a connection with an
// unknown role or poll byte or an oversized frame, and goes on serving
// the others.
func TestRelayRejects(t *testing.T) {
	for name, in := range map[string][]byte{
		"role":  {'x'},
		"poll":  {relayConsumer, 'x'},
		"frame": binary.BigEndian.AppendUint32([]byte{relayProducer}, relayMaxFrame+1),
	} {
		t.Run(name, func(t *testing.T) {
			rl := &relay{}
			a, b := net.Pipe()
			go io.Copy(io.Discard, a)
			go a.Write(in)
			done := make(chan error, 1)
			go func() { done <- rl.serve(b) }()
			select {
			case err := <-done:
				if err == nil {
					t.Fatal("served on")
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the relay still reads the connection")
			}
			a.Close()
		})
	}
}

// FuzzRelay feeds arbitrary bytes to the relay as one client's
// connection: it must answer or refuse them without panicking, and a
// producer's records must reach a waiting consumer intact.
func FuzzRelay(f *testing.F) {
	frame := binary.BigEndian.AppendUint32([]byte{relayProducer}, 16)
	frame = append(frame, bytes.Repeat([]byte{7}, 16)...)
	f.Add(frame)
	f.Add([]byte{relayConsumer, relayPoll, relayPoll})
	f.Add([]byte{relayProducer, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, in []byte) {
		rl := &relay{}
		// A consumer waits, so producer frames go straight to it.
		consumer, cside := net.Pipe()
		got := make(chan []byte, 1)
		go func() {
			b, _ := io.ReadAll(consumer)
			got <- b
		}()
		rl.waiting = cside
		a, b := net.Pipe()
		go io.Copy(io.Discard, a)
		go func() {
			a.Write(in)
			a.Close()
		}()
		rl.serve(b)
		b.Close()
		cside.Close()
		out := <-got
		if len(in) > 5 && in[0] == relayProducer {
			n := binary.BigEndian.Uint32(in[1:5])
			if n <= relayMaxFrame && uint64(len(in)) >= 5+uint64(n) {
				want := in[1 : 5+n]
				if !bytes.Equal(out, want) {
					t.Fatalf("the consumer got %d bytes, want the first frame's %d", len(out), len(want))
				}
			}
		}
	})
}

// TestRelayAnswersAreBounded queues producer frames with no consumer
// waiting, as when the consumer fell behind: each poll is answered with
// whole frames of at most relayMaxAnswer bytes (or one larger frame), in
// order, until nothing is left, and the relay keeps serving after that.
func TestRelayAnswersAreBounded(t *testing.T) {
	rl := &relay{}
	const m = relayMaxAnswer
	sizes := []int{m / 4 * 3, m / 2, 1024, m + 5, 7, m / 4}
	var all []byte
	for i, n := range sizes {
		rl.pending = append(rl.pending, bytes.Repeat([]byte{byte(i + 1)}, n)...)
		rl.frames = append(rl.frames, n)
	}
	all = append(all, rl.pending...)
	// Frames answered per poll: 3/4 of the bound alone (3/4 + 1/2 > 1),
	// 1/2 + 1 KiB, the larger-than-bound frame alone, then 7 bytes + 1/4.
	want := [][]int{{0}, {1, 2}, {3}, {4, 5}}
	var got []byte
	for poll, frames := range want {
		if len(rl.frames) == 0 {
			t.Fatalf("poll %d: nothing pending, want frames %v", poll, frames)
		}
		out := rl.take(nil)
		n := int(binary.BigEndian.Uint32(out))
		wantN := 0
		for _, f := range frames {
			wantN += sizes[f]
		}
		if n != wantN || len(out) != 4+n {
			t.Fatalf("poll %d: answer of %d bytes (%d with its prefix), want %d (frames %v)", poll, n, len(out), wantN, frames)
		}
		got = append(got, out[4:]...)
	}
	if len(rl.frames) != 0 || rl.head != 0 || len(rl.pending) != 0 {
		t.Fatalf("after the last answer: %d frames, head %d, %d bytes pending", len(rl.frames), rl.head, len(rl.pending))
	}
	if !bytes.Equal(got, all) {
		t.Fatal("the answers do not carry the frames' bytes in order")
	}
	// Queued again after being emptied.
	rl.pending, rl.frames = append(rl.pending, 9, 9), append(rl.frames, 2)
	if out := rl.take(nil); !bytes.Equal(out, []byte{0, 0, 0, 2, 9, 9}) {
		t.Fatalf("answer after emptying: % x", out)
	}
}
