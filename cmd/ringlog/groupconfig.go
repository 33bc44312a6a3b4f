package main

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/internal/cli"
)

const groupAlterUsage = `
Usage: ringlog group alter GROUP [flags]

Changes a group's configs (Kafka's group configs, IncrementalAlterConfigs
on the GROUP resource): --set key=value, --delete key (back to the
broker's default). A group need not exist yet: share groups read them
when they start (share.auto.offset.reset: where a new share group starts
on a partition, earliest, latest or by_duration:PT1H), consumer groups at
each heartbeat.

Keys: share.auto.offset.reset, share.record.lock.duration.ms,
share.delivery.count.limit, share.session.timeout.ms,
share.heartbeat.interval.ms, share.isolation.level (share groups);
consumer.session.timeout.ms, consumer.heartbeat.interval.ms (KIP-848
consumer groups: they override the broker's --group-consumer-* flags).
`

const groupAlterExamples = `
Examples:
  ringlog group alter workers --set share.auto.offset.reset=earliest
  ringlog group alter workers --set share.record.lock.duration.ms=60000 --set share.delivery.count.limit=3
  ringlog group alter workers --delete share.delivery.count.limit

Exit status: 0 changed, 1 failed, 2 usage.
`

func runGroupAlter(args []string, stdout, stderr io.Writer) error {
	var cf connFlags
	var set kvFlag
	var del stringList
	fs := cli.NewFlagSet("group alter", groupAlterUsage, groupAlterExamples, stdout)
	cf.Register(fs, 30*time.Second, adminTimeoutHelp)
	fs.Var(&set, "set", "set a group config, `key=value` (repeatable)")
	fs.Var(&del, "delete", "return a group config `key` to the broker's default (repeatable)")
	names, err := cli.ParseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(names) != 1 || names[0] == "" {
		return cli.Usagef("group alter: give exactly one group name, got %d", len(names))
	}
	name := names[0]
	if len(set.keys) == 0 && len(del) == 0 {
		return cli.Usagef("group alter: nothing to change: give --set key=value or --delete key")
	}
	for _, k := range del {
		if slices.Contains(set.keys, k) {
			return cli.Usagef("group alter: %q is both --set and --delete", k)
		}
	}
	s, err := cf.connect(cf.Timeout)
	if err != nil {
		return err
	}
	defer s.Close()
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeGroupConfig, name
	for i, k := range set.keys {
		c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		c.Name, c.Op, c.Value = k, kmsg.IncrementalAlterConfigOpSet, &set.vals[i]
		res.Configs = append(res.Configs, c)
	}
	for _, k := range del {
		c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		c.Name, c.Op = k, kmsg.IncrementalAlterConfigOpDelete
		res.Configs = append(res.Configs, c)
	}
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(s.ctx, s.cl)
	if err != nil {
		return s.explain(err)
	}
	if len(resp.Resources) != 1 {
		return fmt.Errorf("group %q: the broker answered %d resources for 1", name, len(resp.Resources))
	}
	r := resp.Resources[0]
	if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
		if d := s.denied("group alter "+name, kmsg.IncrementalAlterConfigs, err, groupResource(name)); d != nil {
			return d
		}
		msg := ""
		if r.ErrorMessage != nil {
			msg = *r.ErrorMessage
		}
		if errors.Is(err, kerr.InvalidConfig) || errors.Is(err, kerr.InvalidRequest) {
			return fmt.Errorf("group %q: configs not changed: %s", name, detail(err, msg))
		}
		return fmt.Errorf("group %q: %s", name, detail(err, msg))
	}
	for i, k := range set.keys {
		fmt.Fprintf(stdout, "group %q: set %s=%s\n", name, k, set.vals[i])
	}
	for _, k := range del {
		fmt.Fprintf(stdout, "group %q: %s back to the broker's default\n", name, k)
	}
	return nil
}
