package perf

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// admin is a run's administrative client.
type admin struct {
	cl  *kgo.Client
	adm *kadm.Client
}

func newAdmin(c *Config) (*admin, error) {
	cl, err := kgo.NewClient(c.clientOpts("ringlog-perf-admin")...)
	if err != nil {
		return nil, err
	}
	return &admin{cl: cl, adm: kadm.NewClient(cl)}, nil
}

func (a *admin) close() { a.cl.Close() }

var topicSeq atomic.Int64

// uniqueTopic returns a topic name no other run uses.
func uniqueTopic(mode string) string {
	return fmt.Sprintf("perf-%s-%s-%d", mode, strconv.FormatInt(time.Now().UnixNano(), 36), topicSeq.Add(1))
}

// prepareTopic makes sure the run's topic exists. It returns the topic,
// its partition count, and whether the run created it.
func (a *admin) prepareTopic(ctx context.Context, c *Config) (string, int, bool, error) {
	topic := c.Topic
	if topic == "" {
		topic = uniqueTopic(c.Mode)
	} else {
		tds, err := a.adm.ListTopics(ctx, topic)
		if err != nil {
			return "", 0, false, fmt.Errorf("list topic %q: %w", topic, err)
		}
		if td, ok := tds[topic]; ok && td.Err == nil {
			return topic, len(td.Partitions), false, nil
		}
	}
	resp, err := a.adm.CreateTopic(ctx, int32(c.Partitions), int16(c.ReplicationFactor), nil, topic)
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return "", 0, false, fmt.Errorf("create topic %q (%d partitions): %w%s", topic, c.Partitions, err, msg(resp.ErrMessage))
	}
	if err := a.waitLeaders(ctx, topic, c.Partitions); err != nil {
		return "", 0, false, err
	}
	return topic, c.Partitions, true, nil
}

func msg(s string) string {
	if s == "" {
		return ""
	}
	return " (" + s + ")"
}

// waitLeaders waits until metadata shows every partition with a leader.
func (a *admin) waitLeaders(ctx context.Context, topic string, n int) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		tds, err := a.adm.ListTopics(ctx, topic)
		if err == nil {
			if td, ok := tds[topic]; ok && td.Err == nil && len(td.Partitions) >= n {
				ready := true
				for _, p := range td.Partitions {
					if p.Leader < 0 || p.Err != nil {
						ready = false
					}
				}
				if ready {
					return nil
				}
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("topic %q: partitions have no leader after 30s (last error: %v)", topic, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// deleteTopic deletes topic; errors are returned for the caller to report.
func (a *admin) deleteTopic(ctx context.Context, topic string) error {
	resp, err := a.adm.DeleteTopic(ctx, topic)
	if err != nil {
		return err
	}
	return resp.Err
}

// endOffsets returns the end offset of every partition of topic.
func (a *admin) endOffsets(ctx context.Context, topic string) (map[int32]int64, error) {
	lo, err := a.adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, err
	}
	out := map[int32]int64{}
	var firstErr error
	lo.Each(func(o kadm.ListedOffset) {
		if o.Err != nil && firstErr == nil {
			firstErr = o.Err
		}
		out[o.Partition] = o.Offset
	})
	if firstErr != nil {
		return nil, fmt.Errorf("end offsets of %q: %w", topic, firstErr)
	}
	return out, nil
}
