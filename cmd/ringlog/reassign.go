package main

// ringlog topic reassign: Kafka's AlterPartitionReassignments and
// ListPartitionReassignments (KIP-455), with kafka-reassign-partitions.sh's
// JSON plans.

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/internal/bytopic"
	"github.com/ringlog/ringlog/internal/cli"
)

const topicReassignUsage = `
Usage: ringlog topic reassign (--plan FILE [--cancel] [--wait] | --generate --topic T --broker-list IDS | --list) [flags]

Moves partitions between brokers. A plan is the JSON file of Kafka's
kafka-reassign-partitions.sh:

  {"version":1,"partitions":[{"topic":"orders","partition":0,"replicas":[2,3,4]}]}

each partition's new replicas, preferred leader first. The controller
records the moves at once; each new replica then copies the partition from
its leader, joins the in-sync replicas, and the move completes: the
replicas left out are removed from their brokers (their data deleted), and
leadership leaves a removed leader. Producers and consumers go on
meanwhile. --wait waits until every move of the plan has completed.

--generate prints a plan that moves the named topics' partitions onto
--broker-list, moving as few replicas as it can and spreading them evenly
(over racks first, when the brokers have --rack);
--rollback FILE also saves the current assignment, a plan that moves them
back. --list shows the moves in progress; --cancel stops the plan's moves
and returns those partitions to the replicas they had.

After the moves, 'ringlog cluster elect-leaders' gives each partition to
its preferred (first) replica.
`

const topicReassignExamples = `
Examples:
  ringlog topic reassign --generate --topic orders --broker-list 2,3,4 --rollback back.json > plan.json
  ringlog topic reassign --plan plan.json --wait
  ringlog topic reassign --list
  ringlog topic reassign --plan plan.json --cancel

Exit status: 0 done, 1 a move was refused (or --wait timed out), 2 usage.
`

// reassignPlan is kafka-reassign-partitions.sh's plan file.
type reassignPlan struct {
	Version    int              `json:"version"`
	Partitions []reassignTarget `json:"partitions"`
}

type reassignTarget struct {
	Topic     string   `json:"topic"`
	Partition int32    `json:"partition"`
	Replicas  []int32  `json:"replicas"`
	LogDirs   []string `json:"log_dirs,omitempty"`
}

func runTopicReassign(args []string, stdout, stderr io.Writer) error {
	var cf connFlags
	var planFile, brokers, rollback string
	var topics []string
	var generate, list, cancel, wait, noRFChange bool
	fs := cli.NewFlagSet("topic reassign", topicReassignUsage, topicReassignExamples, stdout)
	cf.Register(fs, 30*time.Second, "how long to wait for the brokers (and with --wait, for the moves)")
	fs.StringVar(&planFile, "plan", "", "the plan to carry out (or with --cancel, to stop): a JSON file, - for stdin")
	fs.BoolVar(&generate, "generate", false, "print a plan that moves --topic's partitions onto --broker-list")
	fs.Func("topic", "with --generate: a topic to move (repeat, or comma-separated)", func(v string) error {
		for _, t := range strings.Split(v, ",") {
			if t = strings.TrimSpace(t); t != "" {
				topics = append(topics, t)
			}
		}
		return nil
	})
	fs.StringVar(&brokers, "broker-list", "", "with --generate: the broker ids to place the replicas on, comma-separated")
	fs.StringVar(&rollback, "rollback", "", "with --generate: also write the current assignment to this file (a plan that undoes the move)")
	fs.BoolVar(&list, "list", false, "list the moves in progress")
	fs.BoolVar(&cancel, "cancel", false, "with --plan: cancel the plan's moves in progress")
	fs.BoolVar(&wait, "wait", false, "with --plan: wait until every move of the plan has completed")
	fs.BoolVar(&noRFChange, "disallow-replication-factor-change", false, "with --plan: refuse moves that change a partition's replica count")
	rest, err := cli.ParseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return cli.Usagef("topic reassign takes no arguments, got %q", rest)
	}
	modes := 0
	for _, on := range []bool{planFile != "", generate, list} {
		if on {
			modes++
		}
	}
	if modes != 1 {
		return cli.Usagef("name exactly one of --plan FILE, --generate or --list")
	}
	if (cancel || wait || noRFChange) && planFile == "" {
		return cli.Usagef("--cancel, --wait and --disallow-replication-factor-change go with --plan")
	}
	if cancel && wait {
		return cli.Usagef("--cancel and --wait exclude each other")
	}
	if (len(topics) > 0 || brokers != "" || rollback != "") && !generate {
		return cli.Usagef("--topic, --broker-list and --rollback go with --generate")
	}
	var plan reassignPlan
	if planFile != "" {
		if plan, err = readReassignPlan(planFile); err != nil {
			return err
		}
	}
	var ids []int32
	if generate {
		if len(topics) == 0 || brokers == "" {
			return cli.Usagef("--generate needs --topic and --broker-list")
		}
		if ids, err = parseBrokerIDs(brokers); err != nil {
			return err
		}
	}
	s, err := cf.connect(0)
	if err != nil {
		return err
	}
	defer s.Close()
	switch {
	case generate:
		return s.generateReassignment(topics, ids, rollback, stdout)
	case list:
		return s.listReassignments(nil, stdout)
	}
	if err := s.alterReassignments(plan, cancel, !noRFChange, stdout); err != nil || !wait {
		return err
	}
	return s.awaitReassignments(plan, cf.Timeout, stdout)
}

// readReassignPlan reads and checks a plan file (- is stdin).
func readReassignPlan(name string) (reassignPlan, error) {
	var plan reassignPlan
	var b []byte
	var err error
	if name == "-" {
		b, err = io.ReadAll(io.LimitReader(os.Stdin, 64<<20))
	} else {
		b, err = os.ReadFile(name)
	}
	if err != nil {
		return plan, cli.Usagef("--plan: %v", err)
	}
	// (partition as a pointer: an entry without one is an error, not
	// partition 0)
	var raw struct {
		Version    int `json:"version"`
		Partitions []struct {
			Topic     string   `json:"topic"`
			Partition *int32   `json:"partition"`
			Replicas  []int32  `json:"replicas"`
			LogDirs   []string `json:"log_dirs"`
		} `json:"partitions"`
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	if err := dec.Decode(&raw); err != nil {
		return plan, cli.Usagef("--plan %s: not a reassignment plan: %v (want {\"version\":1,\"partitions\":[{\"topic\":…,\"partition\":…,\"replicas\":[…]}]})", name, err)
	}
	plan.Version = raw.Version
	for _, e := range raw.Partitions {
		if e.Partition == nil {
			return plan, cli.Usagef("--plan %s: an entry of topic %q has no partition", name, e.Topic)
		}
		plan.Partitions = append(plan.Partitions, reassignTarget{Topic: e.Topic, Partition: *e.Partition, Replicas: e.Replicas, LogDirs: e.LogDirs})
	}
	if plan.Version != 1 {
		return plan, cli.Usagef("--plan %s: version %d; this tool reads version 1", name, plan.Version)
	}
	if len(plan.Partitions) == 0 {
		return plan, cli.Usagef("--plan %s: no partitions", name)
	}
	seen := map[string]bool{}
	for _, p := range plan.Partitions {
		key := p.Topic + "-" + strconv.Itoa(int(p.Partition))
		switch {
		case p.Topic == "" || p.Partition < 0:
			return plan, cli.Usagef("--plan %s: an entry without a topic or with a negative partition", name)
		case seen[key]:
			return plan, cli.Usagef("--plan %s: %s appears twice", name, key)
		case len(p.Replicas) == 0:
			return plan, cli.Usagef("--plan %s: %s has no replicas", name, key)
		}
		for _, d := range p.LogDirs {
			if d != "any" {
				return plan, cli.Usagef("--plan %s: %s: log_dirs must be \"any\" (ringlog has one data directory per broker)", name, key)
			}
		}
		seen[key] = true
	}
	return plan, nil
}

func parseBrokerIDs(spec string) ([]int32, error) {
	var ids []int32
	for _, f := range strings.Split(spec, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.ParseInt(f, 10, 32)
		if err != nil || n < 0 {
			return nil, cli.Usagef("--broker-list: %q is not a broker id", f)
		}
		if !slices.Contains(ids, int32(n)) {
			ids = append(ids, int32(n))
		}
	}
	if len(ids) == 0 {
		return nil, cli.Usagef("--broker-list: no broker ids")
	}
	return ids, nil
}

// alterReassignments sends the plan's moves (or, with cancel, nulls that
// cancel them) and prints each partition's answer. Moves answered with a
// retriable error (the controller failing over: NOT_CONTROLLER, or
// REQUEST_TIMED_OUT when the commit's outcome is unknown) are sent again
// until the session's deadline: asking for the same target again is a
// no-op once it was recorded, and so is a second cancel.
func (s *session) alterReassignments(plan reassignPlan, cancel, allowRFChange bool, stdout io.Writer) error {
	done := "moving"
	if cancel {
		done = "cancelled"
	}
	results := map[string]string{}
	pending := plan.Partitions
	failed := 0
	for attempt := 0; len(pending) > 0; attempt++ {
		if attempt > 0 {
			select {
			case <-s.ctx.Done():
			case <-time.After(min(time.Duration(attempt)*250*time.Millisecond, 2*time.Second)):
			}
		}
		last := s.ctx.Err() != nil
		resp, err := s.sendReassignments(pending, cancel, allowRFChange)
		if err == nil {
			if err = kerr.ErrorForCode(resp.ErrorCode); err != nil {
				err = fmt.Errorf("the controller refused the moves: %w%s", err, messageOf(resp.ErrorMessage))
			}
		} else {
			err = s.explain(err)
		}
		switch {
		case err != nil && !last && kerr.IsRetriable(err):
			continue
		case err != nil:
			return cmp.Or(s.denied("reassign partitions", kmsg.AlterPartitionAssignments, err), err)
		}
		retry := map[string]bool{}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				key := fmt.Sprintf("%s-%d", t.Topic, p.Partition)
				err := kerr.ErrorForCode(p.ErrorCode)
				switch {
				case err == nil, attempt > 0 && cancel && errors.Is(err, kerr.NoReassignmentInProgress):
					results[key] = done
				case !last && kerr.IsRetriable(err):
					retry[key] = true
					results[key] = err.Error() + messageOf(p.ErrorMessage)
				default:
					results[key] = err.Error() + messageOf(p.ErrorMessage)
				}
			}
		}
		var next []reassignTarget
		for _, p := range pending {
			if retry[fmt.Sprintf("%s-%d", p.Topic, p.Partition)] {
				next = append(next, p)
			}
		}
		pending = next
	}
	var lines []string
	for key, what := range results {
		if what != done {
			failed++
		}
		lines = append(lines, key+"\t"+what)
	}
	sort.Strings(lines)
	tw := newTable(stdout)
	fmt.Fprintln(tw, "PARTITION\tREASSIGNMENT")
	for _, l := range lines {
		fmt.Fprintln(tw, l)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d moves refused", failed, len(lines))
	}
	return nil
}

// sendReassignments sends one AlterPartitionReassignments of parts.
func (s *session) sendReassignments(parts []reassignTarget, cancel, allowRFChange bool) (*kmsg.AlterPartitionAssignmentsResponse, error) {
	req := kmsg.NewPtrAlterPartitionAssignmentsRequest()
	req.TimeoutMillis = 30000
	req.AllowReplicationFactorChange = allowRFChange
	byTopic := map[string]int{}
	for _, p := range parts {
		i := bytopic.Index(byTopic, &req.Topics, p.Topic, func(name string) kmsg.AlterPartitionAssignmentsRequestTopic {
			rt := kmsg.NewAlterPartitionAssignmentsRequestTopic()
			rt.Topic = name
			return rt
		})
		rp := kmsg.NewAlterPartitionAssignmentsRequestTopicPartition()
		rp.Partition = p.Partition
		if !cancel {
			rp.Replicas = p.Replicas
		}
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, rp)
	}
	return req.RequestWith(s.ctx, s.cl)
}

// listReassignments prints the moves in progress (of parts; nil: all)
// and returns how many there are.
func (s *session) listReassignments(parts map[string][]int32, stdout io.Writer) error {
	moving, err := s.ongoingReassignments(parts)
	if err != nil {
		return err
	}
	if len(moving) == 0 {
		fmt.Fprintln(stdout, "No partition is being reassigned.")
		return nil
	}
	tw := newTable(stdout)
	fmt.Fprintln(tw, "PARTITION\tREPLICAS\tADDING\tREMOVING")
	for _, m := range moving {
		fmt.Fprintf(tw, "%s-%d\t%s\t%s\t%s\n", m.topic, m.partition, ints(m.replicas), ints(m.adding), ints(m.removing))
	}
	return tw.Flush()
}

type ongoingMove struct {
	topic                      string
	partition                  int32
	replicas, adding, removing []int32
}

func (s *session) ongoingReassignments(parts map[string][]int32) ([]ongoingMove, error) {
	req := kmsg.NewPtrListPartitionReassignmentsRequest()
	req.TimeoutMillis = 30000
	if parts != nil {
		req.Topics = []kmsg.ListPartitionReassignmentsRequestTopic{}
		for t, ps := range parts {
			rt := kmsg.NewListPartitionReassignmentsRequestTopic()
			rt.Topic, rt.Partitions = t, ps
			req.Topics = append(req.Topics, rt)
		}
	}
	resp, err := req.RequestWith(s.ctx, s.cl)
	if err != nil {
		return nil, cmp.Or(s.denied("list reassignments", kmsg.ListPartitionReassignments, err), s.explain(err))
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return nil, cmp.Or(s.denied("list reassignments", kmsg.ListPartitionReassignments, err), fmt.Errorf("listing reassignments: %w%s", err, messageOf(resp.ErrorMessage)))
	}
	var out []ongoingMove
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			out = append(out, ongoingMove{topic: t.Topic, partition: p.Partition, replicas: p.Replicas, adding: p.AddingReplicas, removing: p.RemovingReplicas})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].topic != out[j].topic {
			return out[i].topic < out[j].topic
		}
		return out[i].partition < out[j].partition
	})
	return out, nil
}

// awaitReassignments polls until no partition of the plan is moving, or
// the timeout; retriable errors (a controller failing over) are asked
// again.
func (s *session) awaitReassignments(plan reassignPlan, timeout time.Duration, stdout io.Writer) error {
	parts := map[string][]int32{}
	for _, p := range plan.Partitions {
		parts[p.Topic] = append(parts[p.Topic], p.Partition)
	}
	deadline := time.Now().Add(timeout)
	for {
		moving, err := s.ongoingReassignments(parts)
		switch {
		case kerr.IsRetriable(err) && time.Now().Before(deadline):
			// The controller failing over: ask again.
			select {
			case <-s.base.Done():
				return errInterrupted
			case <-time.After(500 * time.Millisecond):
			}
			continue
		case err != nil:
			return err
		}
		if len(moving) == 0 {
			return s.verifyPlan(plan, deadline, stdout)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s still moving after %s (see 'ringlog topic reassign --list'; a larger --timeout waits longer)",
				plural(len(moving), "partition", "partitions"), timeout)
		}
		select {
		case <-s.base.Done():
			return errInterrupted
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// verifyPlan checks, once nothing of plan moves any more, that its
// partitions have the replicas it asked for (someone may have cancelled
// or replaced a move), retrying until deadline (clients cache metadata
// for a few seconds).
func (s *session) verifyPlan(plan reassignPlan, deadline time.Time, stdout io.Writer) error {
	var topics []string
	for _, p := range plan.Partitions {
		if !slices.Contains(topics, p.Topic) {
			topics = append(topics, p.Topic)
		}
	}
	var off []string
	for {
		tds, err := s.adm.ListTopics(s.ctx, topics...)
		if err != nil {
			return s.explain(err)
		}
		off = off[:0]
		for _, p := range plan.Partitions {
			have := tds[p.Topic].Partitions[p.Partition].Replicas
			if !slices.Equal(have, p.Replicas) {
				off = append(off, fmt.Sprintf("%s-%d has %s, not %s", p.Topic, p.Partition, ints(have), ints(p.Replicas)))
			}
		}
		if len(off) == 0 {
			fmt.Fprintf(stdout, "Every move of the plan has completed (%s).\n", plural(len(plan.Partitions), "partition", "partitions"))
			return nil
		}
		if time.Now().After(deadline.Add(10 * time.Second)) {
			return fmt.Errorf("nothing of the plan is moving, but %s (a move cancelled or replaced meanwhile?)", strings.Join(off, "; "))
		}
		select {
		case <-s.base.Done():
			return errInterrupted
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// refuseMoving refuses to plan for partitions being reassigned: their
// Metadata replicas hold the target and the replicas leaving, so a plan
// made from them would grow the partitions.
func (s *session) refuseMoving(plan reassignPlan) error {
	moving, err := s.ongoingReassignments(nil)
	if err != nil {
		return err
	}
	var named []string
	for _, m := range moving {
		if slices.ContainsFunc(plan.Partitions, func(p reassignTarget) bool { return p.Topic == m.topic && p.Partition == m.partition }) {
			named = append(named, fmt.Sprintf("%s-%d", m.topic, m.partition))
		}
	}
	if len(named) > 0 {
		return fmt.Errorf("%s being reassigned (%s): wait for the moves (topic reassign --list) or cancel them first",
			plural(len(named), "partition is", "partitions are"), strings.Join(named, ", "))
	}
	return nil
}

// generateReassignment prints a plan moving topics' partitions onto ids:
// each partition keeps the replicas it has on those brokers and gets the
// least loaded others, so that as little data as possible moves.
func (s *session) generateReassignment(topics []string, ids []int32, rollback string, stdout io.Writer) error {
	current := reassignPlan{Version: 1}
	for _, topic := range topics {
		if _, err := s.requireTopic("reassign", kmsg.AlterPartitionAssignments, topic); err != nil {
			return err
		}
	}
	tds, err := s.adm.ListTopics(s.ctx, topics...)
	if err != nil {
		return s.explain(err)
	}
	for _, topic := range topics {
		td := tds[topic]
		for _, p := range td.Partitions.Sorted() {
			current.Partitions = append(current.Partitions, reassignTarget{Topic: topic, Partition: p.Partition, Replicas: p.Replicas})
		}
	}
	if err := s.refuseMoving(current); err != nil {
		return err
	}
	md, err := s.adm.BrokerMetadata(s.ctx)
	if err != nil {
		return s.explain(err)
	}
	proposed, err := placeReassignment(current, ids, racksOf(md.Brokers))
	if err != nil {
		return err
	}
	if rollback != "" {
		b, err := json.Marshal(current)
		if err != nil {
			return err
		}
		if err := writeFileSynced(rollback, append(b, '\n')); err != nil {
			return fmt.Errorf("--rollback %s: %w", rollback, err)
		}
	}
	return writeJSON(stdout, proposed)
}

// racksOf maps broker ids to racks (brokers without one left out).
func racksOf(brokers kadm.BrokerDetails) map[int32]string {
	out := map[int32]string{}
	for _, b := range brokers {
		if b.Rack != nil && *b.Rack != "" {
			out[b.NodeID] = *b.Rack
		}
	}
	return out
}

// better reports whether broker id is a better home than best (-1: none
// yet) for a replica of a partition on reps: one on a rack reps do not
// use comes first, then the less loaded.
func better(id, best int32, reps []int32, racks map[int32]string, load map[int32]int) bool {
	if best < 0 {
		return true
	}
	onNewRack := func(b int32) bool {
		for _, r := range reps {
			if r != b && racks[r] == racks[b] {
				return false
			}
		}
		return true
	}
	if n, b := onNewRack(id), onNewRack(best); n != b {
		return n
	}
	return load[id] < load[best]
}

// placeReassignment computes --generate's plan from the current one.
func placeReassignment(current reassignPlan, ids []int32, racks map[int32]string) (reassignPlan, error) {
	load := map[int32]int{}
	leaders := map[int32]int{}
	out := reassignPlan{Version: 1}
	for _, p := range current.Partitions {
		rf := len(p.Replicas)
		if rf > len(ids) {
			return out, cli.Usagef("--broker-list: %s-%d has %d replicas, more than the %d brokers named", p.Topic, p.Partition, rf, len(ids))
		}
		var keep []int32
		for _, id := range p.Replicas {
			if slices.Contains(ids, id) {
				keep = append(keep, id)
			}
		}
		for len(keep) < rf {
			best := int32(-1)
			for _, id := range ids {
				if !slices.Contains(keep, id) && better(id, best, keep, racks, load) {
					best = id
				}
			}
			keep = append(keep, best)
		}
		// The least-leading of the replicas leads, so that a preferred
		// election spreads leadership.
		lead := 0
		for i, id := range keep {
			if leaders[id] < leaders[keep[lead]] {
				lead = i
			}
		}
		keep[0], keep[lead] = keep[lead], keep[0]
		leaders[keep[0]]++
		for _, id := range keep {
			load[id]++
		}
		out.Partitions = append(out.Partitions, reassignTarget{Topic: p.Topic, Partition: p.Partition, Replicas: keep})
	}
	return out, nil
}

// messageOf is ": msg" for a non-empty error message, else "".
func messageOf(msg *string) string {
	if msg == nil || *msg == "" {
		return ""
	}
	return ": " + *msg
}

// writeFileSynced writes b to a new file name, synced to disk.
func writeFileSynced(name string, b []byte) error {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		return errors.Join(err, f.Close())
	}
	if err := f.Sync(); err != nil {
		return errors.Join(err, f.Close())
	}
	return f.Close()
}

const clusterDrainUsage = `
Usage: ringlog cluster drain BROKER-ID [flags]

Moves every replica off a broker (every topic, the internal ones too),
onto the other live brokers, and waits until the moves completed: each
replica goes to the least loaded broker that does not hold the partition
yet, in the drained broker's place in the replica list. The broker then
holds nothing and can be stopped for good, or have its disk replaced.

Afterwards 'ringlog cluster elect-leaders' gives leadership back to each
partition's first replica. Moves the brokers cannot complete (the cluster
has fewer live brokers than a partition has replicas) are refused.
`

const clusterDrainExamples = `
Examples:
  ringlog cluster drain 3
  ringlog cluster drain 3 --dry-run > plan.json     # the plan, for 'topic reassign --plan'
  ringlog cluster drain 3 --timeout 1h              # wait longer for large partitions

Exit status: 0 drained, 1 a move was refused or did not complete in time, 2 usage.
`

func runClusterDrain(args []string, stdout, stderr io.Writer) error {
	var cf connFlags
	var dryRun bool
	fs := cli.NewFlagSet("cluster drain", clusterDrainUsage, clusterDrainExamples, stdout)
	cf.Register(fs, 10*time.Minute, "how long to wait for the brokers and the moves")
	fs.BoolVar(&dryRun, "dry-run", false, "print the plan (a reassignment plan file) and move nothing")
	rest, err := cli.ParseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return cli.Usagef("cluster drain takes one broker id, got %q", rest)
	}
	id64, err := strconv.ParseInt(rest[0], 10, 32)
	if err != nil || id64 < 0 {
		return cli.Usagef("%q is not a broker id", rest[0])
	}
	drained := int32(id64)
	s, err := cf.connect(0)
	if err != nil {
		return err
	}
	defer s.Close()
	md, err := s.adm.Metadata(s.ctx)
	if err != nil {
		return s.explain(err)
	}
	var live []int32
	for _, b := range md.Brokers {
		if b.NodeID != drained {
			live = append(live, b.NodeID)
		}
	}
	slices.Sort(live)
	plan, err := drainPlan(md.Topics, drained, live, racksOf(md.Brokers))
	if err != nil {
		return err
	}
	if err := s.refuseMoving(plan); err != nil {
		return err
	}
	if dryRun {
		return writeJSON(stdout, plan)
	}
	if len(plan.Partitions) == 0 {
		fmt.Fprintf(stdout, "Broker %d holds no replica.\n", drained)
		return nil
	}
	if err := s.alterReassignments(plan, false, false, stdout); err != nil {
		return err
	}
	return s.awaitReassignments(plan, cf.Timeout, stdout)
}

// drainPlan moves every replica on broker drained to one of live that
// does not hold the partition: one on a rack the partition's other
// replicas do not use first, then the least loaded; in its place in the
// replica list.
func drainPlan(topics kadm.TopicDetails, drained int32, live []int32, racks map[int32]string) (reassignPlan, error) {
	plan := reassignPlan{Version: 1}
	load := map[int32]int{}
	for _, td := range topics {
		for _, p := range td.Partitions {
			for _, id := range p.Replicas {
				load[id]++
			}
		}
	}
	for _, td := range topics.Sorted() {
		for _, p := range td.Partitions.Sorted() {
			i := slices.Index(p.Replicas, drained)
			if i < 0 {
				continue
			}
			others := slices.DeleteFunc(slices.Clone(p.Replicas), func(id int32) bool { return id == drained })
			best := int32(-1)
			for _, id := range live {
				if !slices.Contains(p.Replicas, id) && better(id, best, others, racks, load) {
					best = id
				}
			}
			if best < 0 {
				return plan, fmt.Errorf("%s-%d has %d replicas and only %d other live brokers: no broker can take broker %d's replica",
					td.Topic, p.Partition, len(p.Replicas), len(live), drained)
			}
			load[best]++
			to := slices.Clone(p.Replicas)
			to[i] = best
			plan.Partitions = append(plan.Partitions, reassignTarget{Topic: td.Topic, Partition: p.Partition, Replicas: to})
		}
	}
	return plan, nil
}
