package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestGroupDescribeMigrating: while a group migrates between the classic
// and consumer protocols, 'group describe' says which protocol each
// member speaks, in text and JSON.
func TestGroupDescribeMigrating(t *testing.T) {
	t.Parallel()
	b := startToolBroker(t)
	b.run(t, 0, "", "topic", "create", "mixed", "--partitions", "4")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	poll := func(cl *kgo.Client) {
		go func() {
			for ctx.Err() == nil {
				if cl.PollFetches(ctx).IsClientClosed() {
					return
				}
			}
		}()
	}
	// describe is 'group describe' in JSON; ok is false while the group
	// does not exist yet.
	describe := func() ([]groupDescribeJSON, bool) {
		r := tool(t, "", nil, "group", "describe", "mixed-g", "--output", "json", "--brokers", b.Addr)
		if r.code != 0 {
			return nil, false
		}
		return decodeJSON[[]groupDescribeJSON](t, r.stdout), true
	}
	classic := procClient(t, b.Addr, kgo.ConsumerGroup("mixed-g"), kgo.ConsumeTopics("mixed"), kgo.ClientID("old-app"), kgo.HeartbeatInterval(300*time.Millisecond))
	poll(classic)
	waitFor(t, ctx, "the classic member in the group", func() bool {
		gs, ok := describe()
		return ok && gs[0].State == "Stable" && len(gs[0].Members) == 1
	})
	modern := procClient(t, b.Addr, kgo.ConsumerGroup("mixed-g"), kgo.ConsumeTopics("mixed"), kgo.ClientID("new-app"), kgo.ServerSideBalancer())
	poll(modern)
	var gs []groupDescribeJSON
	waitFor(t, ctx, "both members in the consumer group", func() bool {
		var ok bool
		gs, ok = describe()
		return ok && gs[0].Type == "consumer" && len(gs[0].Members) == 2
	})
	for _, m := range gs[0].Members {
		want := map[string]string{"old-app": "classic", "new-app": "consumer"}[m.ClientID]
		if m.Protocol != want {
			t.Fatalf("member %s (%s): protocol %q, want %q", m.MemberID, m.ClientID, m.Protocol, want)
		}
	}
	text := b.run(t, 0, "", "group", "describe", "mixed-g").stdout
	if !strings.Contains(text, "PROTOCOL") || !strings.Contains(text, "classic") {
		t.Fatalf("group describe of a migrating group:\n%s", text)
	}
	modern.Close()
	waitFor(t, ctx, "the group classic again", func() bool {
		var ok bool
		gs, ok = describe()
		return ok && gs[0].Type == "classic" && len(gs[0].Members) == 1 && gs[0].Members[0].Protocol == ""
	})
	classic.Close()
}
