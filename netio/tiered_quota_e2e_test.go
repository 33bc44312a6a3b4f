package netio_test

import (
	"context"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/broker"
	"github.com/ringlog/ringlog/internal/s3test"
	"github.com/ringlog/ringlog/internal/testenv"
)

// One client that pipelines fetches of remote data and never reads its
// socket holds at most its connection's share of the remote bytes
// fetches may hold: the other consumers' remote fetches go on.
func TestTieredUnreadSocketDoesNotStarveOthers(t *testing.T) {
	s3 := s3test.Start(t)
	b := startBroker(t, func(c *broker.Config) {
		c.Engine.Tier.Store = s3.Store(t)
		c.Engine.Tier.Interval = 50 * time.Millisecond
		c.Engine.Tier.MaxBackoff = 500 * time.Millisecond
		c.Engine.Tier.CacheBytes = 4 << 20 // heldMax 4 MiB
		c.Engine.RetentionCheckInterval = 50 * time.Millisecond
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := func(v string) *string { return &v }
	b.e2eCreate(ctx, "pin", 1, map[string]*string{"remote.storage.enable": s("true"), "segment.bytes": s("1048576"), "local.retention.bytes": s("1048576")})
	produceTiered(t, ctx, b.client(), "pin", 0, 6*(1<<20)/230)
	p := b.e2ePart("pin", 0)
	l, _ := p.Log()
	e2eWaitFor(t, 30*time.Second, "offset 0 only in the store", func() bool { return l.StartOffset() > 0 && p.LogStartOffset() == 0 })
	id := b.Eng.Topic("pin").ID

	victim := b.e2eRaw()
	fetch0 := func() int {
		return len(victim.rawFetch(13, "pin", id, 0, 0).RecordBatches)
	}
	e2eWaitFor(t, 10*time.Second, "remote offset 0 cached and readable", func() bool { return fetch0() > 0 })

	// The attacker: a tiny receive buffer, 100 pipelined fetches, never read.
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	ac, err := d.Dial("tcp", b.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer ac.Close()
	f := kmsg.NewRequestFormatter(kmsg.FormatterClientID("attacker"))
	for i := range 100 {
		req := kmsg.NewPtrFetchRequest()
		req.SetVersion(13)
		req.ReplicaID, req.MaxBytes, req.SessionEpoch = -1, 64<<20, -1
		rt := kmsg.NewFetchRequestTopic()
		rt.TopicID = id
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.FetchOffset, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch, rp.LogStartOffset = 0, 64<<20, -1, -1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		ac.SetWriteDeadline(time.Now().Add(5 * time.Second))
		if _, err := ac.Write(f.AppendRequest(nil, req, int32(i+1))); err != nil {
			break // the broker stopped reading us: enough in flight
		}
	}
	time.Sleep(500 * time.Millisecond)
	served := testenv.Eventually(3*time.Second, func() bool { return fetch0() > 0 })
	ac.Close()
	e2eWaitFor(t, 10*time.Second, "remote reads again once the attacker is gone", func() bool { return fetch0() > 0 })
	if !served {
		t.Fatalf("for 3 s, while one connection does not read its responses, no other fetch of remote data got any record")
	}
}
