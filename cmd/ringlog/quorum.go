package main

// ringlog cluster quorum: Kafka's DescribeQuorum, as
// kafka-metadata-quorum.sh describe --status --replication shows it, and
// its add-controller / remove-controller (AddRaftVoter, RemoveRaftVoter).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/internal/cli"
)

const clusterQuorumUsage = `
Usage: ringlog cluster quorum [describe] [flags]
       ringlog cluster quorum add-voter NODE-ID [flags]
       ringlog cluster quorum remove-voter NODE-ID [flags]

describe (the default) shows the metadata quorum as its leader, the
controller, sees it: the leader, its term, the high watermark (the last
committed metadata index), and every voter and observer (broker-only
node) with the metadata index it has, how far behind that is, and when the
controller last heard from it. A voter whose LAG grows, or that has not
been heard from, is down or cut off; the quorum needs a majority of the
voters.

add-voter makes a running observer a voter (KIP-853's AddRaftVoter): a
broker-only node, or a voter that was removed and rejoined. The
controller waits for it to catch up with the metadata first (--timeout).
remove-voter takes a voter out (RemoveRaftVoter): a dead one, or one to
replace; refused when the voters left that are up would not be a
majority. A voter whose metadata directory was lost comes back as an
observer only after remove-voter; add-voter then makes it a voter again.
Every node keeps the --voters the cluster was founded with.
`

const clusterQuorumExamples = `
Examples:
  ringlog cluster quorum
  ringlog cluster quorum --brokers host1:9092
  ringlog cluster quorum remove-voter 1      # voter 1 lost its disk
  ringlog cluster quorum add-voter 1         # after it rejoined empty
  ringlog cluster quorum add-voter 4 --timeout 2m

Exit status: 0 shown or changed, 1 failed (no controller, refused, not a
cluster), 2 usage.
`

func runClusterQuorum(args []string, stdout, stderr io.Writer) error {
	op := "describe"
	if len(args) > 0 && (args[0] == "describe" || args[0] == "add-voter" || args[0] == "remove-voter") {
		op, args = args[0], args[1:]
	}
	var cf connFlags
	fs := cli.NewFlagSet("cluster quorum", clusterQuorumUsage, clusterQuorumExamples, stdout)
	cf.Register(fs, 30*time.Second, "how long to wait for the brokers (and, for add-voter, for the node to catch up)")
	rest, err := cli.ParseArgs(fs, args)
	if err != nil {
		return err
	}
	var id int32
	if op == "describe" {
		if len(rest) > 0 {
			return cli.Usagef("cluster quorum takes no arguments, got %q (add-voter or remove-voter first?)", rest)
		}
	} else {
		if len(rest) != 1 {
			return cli.Usagef("cluster quorum %s takes one node id, got %q", op, rest)
		}
		n, err := strconv.ParseInt(rest[0], 10, 32)
		if err != nil || n < 0 {
			return cli.Usagef("%q is not a node id", rest[0])
		}
		id = int32(n)
	}
	s, err := cf.connect(cf.Timeout)
	if err != nil {
		return err
	}
	defer s.Close()
	switch op {
	case "add-voter":
		req := kmsg.NewPtrAddRaftVoterRequest()
		req.VoterID = id
		req.TimeoutMillis = int32(min(max(cf.Timeout-5*time.Second, time.Second), time.Minute).Milliseconds())
		resp, err := whileNoController(s.ctx, func() (*kmsg.AddRaftVoterResponse, error) { return req.RequestWith(s.ctx, s.cl) },
			func(r *kmsg.AddRaftVoterResponse) int16 { return r.ErrorCode })
		if err != nil {
			return s.explain(quorumUnsupported(err))
		}
		switch err := kerr.ErrorForCode(resp.ErrorCode); {
		case errors.Is(err, kerr.DuplicateVoter):
			fmt.Fprintf(stdout, "Node %d is a voter already.\n", id)
			return nil
		case err != nil:
			return fmt.Errorf("node %d not added to the voters: %w%s", id, err, messageOf(resp.ErrorMessage))
		}
		fmt.Fprintf(stdout, "Node %d is a voter.\n", id)
		return nil
	case "remove-voter":
		req := kmsg.NewPtrRemoveRaftVoterRequest()
		req.VoterID = id
		resp, err := whileNoController(s.ctx, func() (*kmsg.RemoveRaftVoterResponse, error) { return req.RequestWith(s.ctx, s.cl) },
			func(r *kmsg.RemoveRaftVoterResponse) int16 { return r.ErrorCode })
		if err != nil {
			return s.explain(quorumUnsupported(err))
		}
		if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
			return fmt.Errorf("node %d not removed from the voters: %w%s", id, err, messageOf(resp.ErrorMessage))
		}
		fmt.Fprintf(stdout, "Node %d is no longer a voter.\n", id)
		return nil
	}
	req := kmsg.NewPtrDescribeQuorumRequest()
	rt := kmsg.NewDescribeQuorumRequestTopic()
	rt.Topic = "__cluster_metadata"
	rp := kmsg.NewDescribeQuorumRequestTopicPartition()
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(s.ctx, s.cl)
	if err != nil {
		return s.explain(quorumUnsupported(err))
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return fmt.Errorf("describing the quorum: %w%s", err, messageOf(resp.ErrorMessage))
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return fmt.Errorf("describing the quorum: an answer without the metadata partition")
	}
	p := resp.Topics[0].Partitions[0]
	if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
		return fmt.Errorf("describing the quorum: %w%s", err, messageOf(p.ErrorMessage))
	}
	fmt.Fprintf(stdout, "Controller (leader): %d   Term: %d   High watermark: %d   Voters: %d   Observers: %d\n\n",
		p.LeaderID, p.LeaderEpoch, p.HighWatermark, len(p.CurrentVoters), len(p.Observers))
	now := time.Now()
	ago := func(ms int64) string {
		if ms < 0 {
			return "never"
		}
		return now.Sub(time.UnixMilli(ms)).Round(time.Millisecond).String() + " ago"
	}
	tw := newTable(stdout)
	fmt.Fprintln(tw, "NODE\tROLE\tLOG END\tLAG\tLAST HEARD\tLAST CAUGHT UP\t")
	row := func(role string, r kmsg.DescribeQuorumResponseTopicPartitionReplicaState) {
		if r.ReplicaID == p.LeaderID {
			role = "leader"
		}
		lag := "-"
		if r.LogEndOffset >= 0 {
			lag = fmt.Sprint(max(p.HighWatermark-r.LogEndOffset, 0))
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%s\t\n", r.ReplicaID, role, r.LogEndOffset, lag, ago(r.LastFetchTimestamp), ago(r.LastCaughtUpTimestamp))
	}
	for _, r := range p.CurrentVoters {
		row("voter", r)
	}
	for _, r := range p.Observers {
		row("observer", r)
	}
	return tw.Flush()
}

// quorumUnsupported says what kgo's error for an API the broker does not
// list means here (its error is unexported).
func quorumUnsupported(err error) error {
	if errors.Is(err, kerr.UnsupportedVersion) || strings.Contains(err.Error(), "broker is too old") {
		return fmt.Errorf("the broker has no metadata quorum: it is a single broker (start brokers with --voters for a cluster)")
	}
	return err
}

const clusterUnregisterUsage = `
Usage: ringlog cluster unregister BROKER-ID [flags]

Removes a broker from the cluster for good (Kafka's UnregisterBroker, as
kafka-cluster.sh unregister sends it): after 'ringlog cluster drain' moved
its replicas away and the broker was stopped. The controller refuses a
broker that still runs or still holds a replica. A broker-only node also
leaves the metadata quorum. The id may register again later.
`

const clusterUnregisterExamples = `
Examples:
  ringlog cluster drain 4 && ssh host4 systemctl stop ringlog && ringlog cluster unregister 4

Exit status: 0 unregistered, 1 refused, 2 usage.
`

func runClusterUnregister(args []string, stdout, stderr io.Writer) error {
	var cf connFlags
	fs := cli.NewFlagSet("cluster unregister", clusterUnregisterUsage, clusterUnregisterExamples, stdout)
	cf.Register(fs, 30*time.Second, "how long to wait for the brokers")
	rest, err := cli.ParseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return cli.Usagef("cluster unregister takes one broker id, got %q", rest)
	}
	id, err := strconv.ParseInt(rest[0], 10, 32)
	if err != nil || id < 0 {
		return cli.Usagef("%q is not a broker id", rest[0])
	}
	s, err := cf.connect(cf.Timeout)
	if err != nil {
		return err
	}
	defer s.Close()
	req := kmsg.NewPtrUnregisterBrokerRequest()
	req.BrokerID = int32(id)
	resp, err := req.RequestWith(s.ctx, s.cl)
	if err != nil {
		return s.explain(err)
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return fmt.Errorf("broker %d not unregistered: %w%s", id, err, messageOf(resp.ErrorMessage))
	}
	fmt.Fprintf(stdout, "Broker %d unregistered.\n", id)
	return nil
}

// whileNoController sends a request to the controller again while the
// answer is NOT_CONTROLLER (an election under way, after a voter change
// or a controller's death), every 250 ms until ctx ends; the last answer
// comes back. code reads an answer's error code.
func whileNoController[R any](ctx context.Context, send func() (R, error), code func(R) int16) (R, error) {
	for {
		resp, err := send()
		if err != nil || code(resp) != kerr.NotController.Code {
			return resp, err
		}
		select {
		case <-ctx.Done():
			return resp, nil
		case <-time.After(250 * time.Millisecond):
		}
	}
}
