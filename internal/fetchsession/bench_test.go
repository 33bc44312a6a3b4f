package fetchsession

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// BenchmarkIncremental128 is one incremental fetch of a 128-partition
// session where one partition moved: decode the request, Begin (update,
// expand), and Report every partition. (The loop also builds and encodes
// the one-partition request, the client's share.) BenchmarkFull128 is
// what a sessionless fetch of the same partitions costs the broker to
// decode alone.
func BenchmarkIncremental128(b *testing.B) {
	c := NewCache(10, 0, Observer{})
	parts := make([]int32, 128)
	for i := range parts {
		parts[i] = int32(i)
	}
	x, _, _ := c.Begin(req(0, InitialEpoch, parts...), 12, nil)
	id := x.ID()
	var sc Scratch
	var into kmsg.FetchRequest
	epoch := int32(1)
	b.ReportAllocs()
	for b.Loop() {
		r := req(id, epoch, 3)
		r.SetVersion(12)
		wire := r.AppendTo(nil)
		into = kmsg.FetchRequest{Topics: into.Topics[:0]}
		into.SetVersion(12)
		if err := into.ReadFrom(wire); err != nil {
			b.Fatal(err)
		}
		x, want, _ := c.Begin(&into, 12, &sc)
		x.StartReport()
		k := 0
		for _, rt := range want {
			for range rt.Partitions {
				x.Report(k, Result{HighWatermark: 5})
				k++
			}
		}
		x.EndReport()
		epoch++
	}
}

// BenchmarkFull128 decodes the full 128-partition request a client sends
// every time without a session.
func BenchmarkFull128(b *testing.B) {
	parts := make([]int32, 128)
	for i := range parts {
		parts[i] = int32(i)
	}
	r := req(0, FinalEpoch, parts...)
	r.SetVersion(12)
	wire := r.AppendTo(nil)
	var into kmsg.FetchRequest
	b.ReportAllocs()
	for b.Loop() {
		into = kmsg.FetchRequest{Topics: into.Topics[:0]}
		into.SetVersion(12)
		if err := into.ReadFrom(wire); err != nil {
			b.Fatal(err)
		}
	}
}
