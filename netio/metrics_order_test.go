package netio_test

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestRequestCountedBeforeAnswer: a request is in the metrics by the time
// its client has the answer (a test or a dashboard that reads /metrics
// right after a produce sees it). Fetches, ApiVersions and native
// answers count the same way, before their response is queued.
func TestRequestCountedBeforeAnswer(t *testing.T) {
	b := startBroker(t)
	createTopic(t, b, "counted", 1)
	ctx := testCtx(t, 30*time.Second)
	cl := b.client(kgo.DefaultProduceTopic("counted"), kgo.ProducerLinger(0))
	before := e2eMetric(t, b, "ringlog_requests_total", "Produce")
	for i := range 300 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("v")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if got := e2eMetric(t, b, "ringlog_requests_total", "Produce") - before; got < float64(i+1) {
			t.Fatalf("after %d acknowledged produces the metrics count %v", i+1, got)
		}
	}
}
