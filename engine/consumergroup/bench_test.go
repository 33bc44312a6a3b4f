package consumergroup

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkSteadyHeartbeat: a keepalive heartbeat of one member of a
// stable group of 100 members subscribed by regex to 5,000 topics (the
// filter, the union and the metadata hash are cached: nothing of that
// is recomputed while nothing changes).
func BenchmarkSteadyHeartbeat(b *testing.B) {
	topics := fakeTopics{}
	for i := 0; i < 5000; i++ {
		topics[fmt.Sprintf("topic-%04d", i)] = 1
	}
	g := New("g", cfg())
	allow := func(string) bool { return true }
	cs := make([]*client, 100)
	for i := range cs {
		cs[i] = &client{id: fmt.Sprintf("m%03d", i), regex: str(".*")}
		r := Request{MemberID: cs[i].id, RebalanceTimeout: time.Second, SubscribedRegex: cs[i].regex, Owned: Assignment{}, RegexAllowed: allow}
		resp, err := g.Heartbeat(t0, topics, r)
		if err != nil {
			b.Fatal(err)
		}
		cs[i].epoch = resp.Epoch
	}
	for round := 0; round < 3; round++ {
		for _, c := range cs {
			resp, err := g.Heartbeat(t0, topics, Request{MemberID: c.id, Epoch: c.epoch, RebalanceTimeout: -1, RegexAllowed: allow})
			if err != nil {
				b.Fatal(err)
			}
			c.epoch = resp.Epoch
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c := cs[i%len(cs)]
		resp, err := g.Heartbeat(t0, topics, Request{MemberID: c.id, Epoch: c.epoch, RebalanceTimeout: -1, RegexAllowed: allow})
		if err != nil {
			b.Fatal(err)
		}
		c.epoch = resp.Epoch
	}
}
