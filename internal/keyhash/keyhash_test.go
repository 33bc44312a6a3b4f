package keyhash

import (
	"fmt"
	"testing"
)

// Values computed with Kafka's Java Utils.murmur2 (and checked against
// franz-go's partitioner, which mirrors it).
func TestMurmur2MatchesKafka(t *testing.T) {
	cases := map[string]int32{
		"21":                         -973932308,
		"foobar":                     -790332482,
		"a-little-bit-long-string":   -985981536,
		"a-little-bit-longer-string": -1486304829,
		"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
		"abc": 479470107,
	}
	for in, want := range cases {
		if got := int32(Murmur2([]byte(in))); got != want {
			t.Errorf("murmur2(%q) = %d, want %d", in, got, want)
		}
	}
}

func TestPartitionSpread(t *testing.T) {
	counts := make([]int, 3)
	for i := 0; i < 3000; i++ {
		counts[Partition([]byte(fmt.Sprintf("key-%d", i)), 3)]++
	}
	for p, n := range counts {
		if n < 800 || n > 1200 {
			t.Fatalf("partition %d got %d of 3000 keys", p, n)
		}
	}
	if first, again := Partition([]byte("same"), 7), Partition([]byte("same"), 7); first != again {
		t.Fatal("not deterministic")
	}
}
