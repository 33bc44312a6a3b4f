package perf

import (
	"context"
	"fmt"
	"io"
	"time"
)

// RunE2E runs an end-to-end benchmark: consumers read the topic from its
// current end while producers send at Rate (or as fast as they can); each
// record carries its due time, and the consumers measure due time → record
// in hand. Produce-ack latency is measured as well. Throughput is what the
// consumers received during the measured window.
func RunE2E(ctx context.Context, c Config, progress io.Writer) (*Result, error) {
	r, err := startRun(ctx, &c, ModeE2E)
	if err != nil {
		return nil, err
	}
	defer r.close(ctx)
	ends, err := r.endOffsets(ctx)
	if err != nil {
		return nil, err
	}
	cg, err := newConsumerGroup(&c, r.topic, ends, nil, true)
	if err != nil {
		return nil, err
	}
	defer cg.close()
	pg, err := newProducerGroup(&c, r.topic)
	if err != nil {
		return nil, err
	}
	defer pg.close()
	if err := cg.warm(ctx); err != nil {
		return nil, err
	}
	if err := pg.warm(ctx); err != nil {
		return nil, err
	}
	start := time.Now()
	measureFrom := start.Add(c.Warmup.D())
	end := start.Add(c.Duration.D())
	var measureTo time.Time
	if c.Records == 0 {
		measureTo = end
	}
	cpu0 := sampleCPU(c.BrokerPID)
	cg.start(ctx, start, measureFrom, measureTo, 0)
	pg.start(ctx, start, measureFrom, end, c.Records)
	rep := startReporter(progress, c.ReportEvery.D(), plannedLength(c), func(d time.Duration, w window) string { return consumeLine(w, d) }, cg.takeWindow)
	ferr := pg.finish(ctx)
	// Wait for the consumers to see every acknowledged record.
	pt := pg.totals()
	deadline := time.Now().Add(c.Timeout.D())
	for cg.consumed.Load() < pt.acked && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
	cg.stopNow()
	rep.stop()
	ct := cg.totals()
	res := r.result(start)
	res.setCPU(cpu0, sampleCPU(c.BrokerPID))
	res.Sent = pg.sent()
	res.Acked = pt.acked
	res.Consumed = ct.total
	res.Errors = pt.errs + ct.errs
	switch {
	case pt.firstErr != nil:
		res.FirstError = pt.firstErr.Error()
	case ct.firstErr != nil:
		res.FirstError = ct.firstErr.Error()
	case ferr != nil:
		res.FirstError = ferr.Error()
	}
	window := end.Sub(measureFrom)
	if c.Records > 0 {
		window = ct.lastRecord.Sub(measureFrom)
	}
	res.setThroughput(ct.measured, ct.measuredBy, window)
	res.Timeline = ct.timeline
	res.TimelineP99, res.TimelineMax = ct.latTimeline.perSecond()
	res.ProduceLatency = pt.ack.Summary()
	res.E2ELatency = ct.hist.Summary()
	if c.Rate > 0 {
		res.SendLag = pt.lag.Summary()
	} else {
		const closed = "closed loop (rate=max): measured from the send call"
		if res.ProduceLatency != nil {
			res.ProduceLatency.Comment = closed
		}
		if res.E2ELatency != nil {
			res.E2ELatency.Comment = closed
		}
	}
	finalLine(progress, res)
	if ct.total < pt.acked {
		return res, fmt.Errorf("consumers saw %d of %d acknowledged records within %v", ct.total, pt.acked, c.Timeout.D())
	}
	if res.E2ELatency == nil {
		return res, fmt.Errorf("no record measured end to end: %s", res.FirstError)
	}
	return res, nil
}
