package main

// ringlog cluster elect-leaders: Kafka's ElectLeaders, as
// kafka-leader-election.sh sends it.

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/internal/cli"
)

const electLeadersUsage = `
Usage: ringlog cluster elect-leaders [flags]

Asks the controller for leader elections. A preferred election (the
default) gives each partition back to its preferred replica, the first of
its replicas, when that broker is live and in sync: after a broker
restarts, its partitions stay led by others until then. An unclean
election gives a partition that has no live in-sync replica to a live
replica that is out of sync: the partition comes back, and the records
only the old in-sync replicas had are lost.

Without --topic, a preferred election covers every partition of the
cluster, and the answer lists only the partitions whose leader moved or
could not; an unclean one needs --topic or --all-topic-partitions.
`

const electLeadersExamples = `
Examples:
  ringlog cluster elect-leaders                                  # after a rolling restart
  ringlog cluster elect-leaders --topic orders --partitions 0,3
  ringlog cluster elect-leaders --type unclean --topic orders --partitions 2

Exit status: 0 every election done or not needed, 1 one failed, 2 usage.
`

func runElectLeaders(args []string, stdout, stderr io.Writer) error {
	var cf connFlags
	var typ, topic, parts string
	var all bool
	fs := cli.NewFlagSet("cluster elect-leaders", electLeadersUsage, electLeadersExamples, stdout)
	cf.Register(fs, 30*time.Second, "how long to wait for the brokers and the elections")
	fs.StringVar(&typ, "type", "preferred", "preferred or unclean")
	fs.StringVar(&topic, "topic", "", "only this topic's partitions (default: every partition)")
	fs.StringVar(&parts, "partitions", "", "with --topic: only these partitions, comma-separated (default: all of the topic's)")
	fs.BoolVar(&all, "all-topic-partitions", false, "every partition of the cluster (the default of a preferred election; an unclean one needs it or --topic)")
	rest, err := cli.ParseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return cli.Usagef("cluster elect-leaders takes no arguments, got %q (name a topic with --topic)", rest)
	}
	var et int8
	switch typ {
	case "preferred":
	case "unclean":
		et = 1
		if topic == "" && !all {
			return cli.Usagef("--type unclean loses the records only the old in-sync replicas had: name the partitions (--topic, --partitions), or pass --all-topic-partitions")
		}
	default:
		return cli.Usagef("--type %q: use preferred or unclean", typ)
	}
	if parts != "" && topic == "" {
		return cli.Usagef("--partitions needs --topic")
	}
	if all && topic != "" {
		return cli.Usagef("--all-topic-partitions and --topic exclude each other")
	}
	var nums []int32
	for _, f := range strings.Split(parts, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.ParseInt(f, 10, 32)
		if err != nil || n < 0 {
			return cli.Usagef("--partitions: %q is not a partition number", f)
		}
		if !slices.Contains(nums, int32(n)) {
			nums = append(nums, int32(n))
		}
	}
	s, err := cf.connect(cf.Timeout)
	if err != nil {
		return err
	}
	defer s.Close()
	req := kmsg.NewPtrElectLeadersRequest()
	req.ElectionType = et
	req.TimeoutMillis = int32(cf.Timeout / time.Millisecond)
	if topic != "" {
		if len(nums) == 0 {
			if nums, err = s.requireTopic("elect leaders of", kmsg.ElectLeaders, topic); err != nil {
				return err
			}
		}
		rt := kmsg.NewElectLeadersRequestTopic()
		rt.Topic, rt.Partitions = topic, nums
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(s.ctx, s.cl)
	if err != nil {
		return s.explain(err)
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return s.explain(err)
	}
	var lines []string
	failed := 0
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			what := "elected"
			switch err := kerr.ErrorForCode(p.ErrorCode); {
			case errors.Is(err, kerr.ElectionNotNeeded):
				what = "not needed"
			case err != nil:
				what = err.Error()
				if p.ErrorMessage != nil && *p.ErrorMessage != "" {
					what += " (" + *p.ErrorMessage + ")"
				}
				failed++
			}
			lines = append(lines, fmt.Sprintf("%s-%d\t%s", t.Topic, p.Partition, what))
		}
	}
	slices.Sort(lines)
	if len(lines) > 0 {
		tw := newTable(stdout)
		fmt.Fprintln(tw, "PARTITION\tELECTION")
		for _, l := range lines {
			fmt.Fprintln(tw, l)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(lines) == 0 {
		fmt.Fprintln(stdout, "No partition needed an election.")
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d elections failed", failed, len(lines))
	}
	return nil
}
