package main

// ringlog group list|describe: consumer groups over ListGroups,
// DescribeGroups, OffsetFetch and ListOffsets. The administrative verbs
// are in groupadmin.go.

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/internal/cli"
	"github.com/ringlog/ringlog/netio"
)

func runGroup(args []string, stdout, stderr io.Writer) error {
	return cli.Dispatch("ringlog", "group", "Lists, describes and administers consumer groups.", []cli.Subcommand{
		{Name: "list", Summary: "list consumer groups", Run: runGroupList},
		{Name: "describe", Summary: "show members, assignments, committed offsets and lag", Run: runGroupDescribe},
		{Name: "alter", Summary: "change a group's configs (share groups: where they start, lock duration, delivery limit)", Run: runGroupAlter},
		{Name: "reset-offsets", Summary: "move a group's committed offsets (earliest, latest, an offset, a time)", Run: runGroupResetOffsets},
		{Name: "delete", Summary: "delete groups and their committed offsets", Run: runGroupDelete},
		{Name: "delete-offsets", Summary: "delete a group's committed offsets of a topic", Run: runGroupDeleteOffsets},
	}, args, stdout, stderr)
}

// ---- list ----

const groupListUsage = `
Usage: ringlog group list [flags]

Lists consumer groups with their type (classic, or consumer: KIP-848), state
and protocol type.
`

const groupListExamples = `
Examples:
  ringlog group list
  ringlog group list --output json | jq -r '.[] | select(.state == "Stable") | .group'
`

type groupListJSON struct {
	Group string `json:"group"`
	// Type is the group protocol: "classic" or "consumer" (KIP-848).
	Type         string `json:"group_type"`
	State        string `json:"state"`
	ProtocolType string `json:"protocol_type"`
	Coordinator  int32  `json:"coordinator"`
}

func runGroupList(args []string, stdout, stderr io.Writer) error {
	var cf connFlags
	var out outputFlag
	fs := cli.NewFlagSet("group list", groupListUsage, groupListExamples, stdout)
	cf.Register(fs, 30*time.Second, adminTimeoutHelp)
	addOutputFlag(fs, &out)
	rest, err := cli.ParseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return cli.Usagef("group list takes no arguments, got %q (describe groups with 'ringlog group describe GROUP')", rest)
	}
	s, err := cf.connect(cf.Timeout)
	if err != nil {
		return err
	}
	defer s.Close()
	groups, err := s.adm.ListGroups(s.ctx)
	if err != nil {
		// Partial answers (some coordinators failed) still list what came.
		var se *kadm.ShardErrors
		if !errors.As(err, &se) || se.AllFailed {
			return s.explain(err)
		}
		defer fmt.Fprintf(stderr, "ringlog: warning: some brokers did not answer: %v\n", err)
	}
	list := []groupListJSON{}
	for _, g := range groups.Sorted() {
		list = append(list, groupListJSON{Group: g.Group, Type: g.GroupType, State: g.State, ProtocolType: g.ProtocolType, Coordinator: g.Coordinator})
	}
	if out == "json" {
		return writeJSON(stdout, list)
	}
	tw := newTable(stdout)
	fmt.Fprintln(tw, "GROUP\tTYPE\tSTATE\tPROTOCOL-TYPE\t")
	for _, g := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t\n", g.Group, g.Type, g.State, g.ProtocolType)
	}
	return tw.Flush()
}

// ---- describe ----

const groupDescribeUsage = `
Usage: ringlog group describe GROUP... [flags]

Shows each group's type (classic, or consumer: the KIP-848 protocol, where
the broker assigns), state, protocol, members (client id, host and assigned
partitions; in a consumer group migrating between the protocols, which
protocol each member speaks) and, per partition, the committed offset, the log end offset
and the lag (records not yet consumed by the group). Every partition of
every topic the group has a commit in or subscribes to is listed; one
without a commit ("-") lags by every record in its log (log end - log
start), where a consumer with auto.offset.reset=earliest starts. The
broker's ringlog_group_lag metric reports the same numbers.
`

const groupDescribeExamples = `
Examples:
  ringlog group describe billing
  ringlog group describe billing --output json | jq '.[0].total_lag'

Exit status: 0 when every group was described, 1 if any does not exist.
`

type groupAssignmentJSON struct {
	Topic      string  `json:"topic"`
	Partitions []int32 `json:"partitions"`
}

type groupMemberJSON struct {
	MemberID   string                `json:"member_id"`
	InstanceID *string               `json:"instance_id,omitempty"`
	ClientID   string                `json:"client_id"`
	Host       string                `json:"host"`
	Assigned   []groupAssignmentJSON `json:"assigned"`
	// Protocol is, in a consumer group, the protocol the member speaks:
	// "consumer", or "classic" while the group migrates between them.
	Protocol string `json:"protocol,omitempty"`
}

type groupOffsetJSON struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Committed *int64 `json:"committed"` // null: nothing committed
	LogStart  *int64 `json:"log_start"`
	LogEnd    *int64 `json:"log_end"`
	Lag       *int64 `json:"lag"`
	MemberID  string `json:"member_id,omitempty"`
	Error     string `json:"error,omitempty"`
}

// shareOffsetJSON is one partition of a share group: its start offset
// (every record below is acknowledged or archived), the log end, the
// records between not yet done, and, when the broker holds the partition's
// state live, the records locked to members now and those waiting for
// another delivery.
type shareOffsetJSON struct {
	Topic       string `json:"topic"`
	Partition   int32  `json:"partition"`
	StartOffset int64  `json:"start_offset"`
	LogEnd      *int64 `json:"log_end"`
	Lag         int64  `json:"lag"`
	Acquired    *int   `json:"acquired,omitempty"`
	Redeliver   *int   `json:"redeliver,omitempty"`
	Error       string `json:"error,omitempty"`
}

type groupDescribeJSON struct {
	Group string `json:"group"`
	// Type is the group protocol: "classic" or "consumer" (KIP-848).
	Type         string            `json:"group_type"`
	State        string            `json:"state"`
	ProtocolType string            `json:"protocol_type"`
	Protocol     string            `json:"protocol"`
	Coordinator  string            `json:"coordinator"`
	Members      []groupMemberJSON `json:"members"`
	Offsets      []groupOffsetJSON `json:"offsets"`
	TotalLag     int64             `json:"total_lag"`
	// Share are a share group's (KIP-932) offsets: where each partition's
	// delivery stands, instead of commits.
	Share []shareOffsetJSON `json:"share_offsets,omitempty"`

	// topics are those the group has a commit in, is assigned or its
	// members subscribe to.
	topics []string
}

func runGroupDescribe(args []string, stdout, stderr io.Writer) error {
	s, names, out, err := namesCommand{name: "group describe", usage: groupDescribeUsage, examples: groupDescribeExamples,
		none: "give one or more group names (list them with 'ringlog group list')"}.start(args, stdout)
	if err != nil {
		return err
	}
	defer s.Close()
	lags, err := askEach(s, names, s.adm.Lag, func(n string, err error) kadm.DescribedGroupLag {
		return kadm.DescribedGroupLag{Group: n, DescribeErr: err}
	})
	if err != nil {
		return s.explain(err)
	}
	var errs []error
	result := []groupDescribeJSON{}
	var seen []string
	for _, name := range names {
		if slices.Contains(seen, name) {
			continue
		}
		seen = append(seen, name)
		l, ok := lags[name]
		if !ok {
			errs = append(errs, fmt.Errorf("group %q: the broker did not answer for it", name))
			continue
		}
		if l.DescribeErr != nil {
			errs = append(errs, cmp.Or(s.denied("group describe "+name, kmsg.DescribeGroups, l.DescribeErr, groupResource(name)),
				fmt.Errorf("group %q: %w", name, s.explain(l.DescribeErr))))
			continue
		}
		if l.FetchErr != nil {
			errs = append(errs, cmp.Or(s.denied("group describe "+name, kmsg.OffsetFetch, l.FetchErr, groupResource(name)),
				fmt.Errorf("group %q: committed offsets: %w", name, s.explain(l.FetchErr))))
			continue
		}
		// Kafka describes a group it does not know as Dead with nothing
		// in it.
		if (l.State == "Dead" || l.State == "") && len(l.Members) == 0 && len(l.Lag) == 0 {
			errs = append(errs, fmt.Errorf("group %q does not exist (list groups with 'ringlog group list'; a group appears once a consumer joins it or commits with --group)", name))
			continue
		}
		result = append(result, describedGroup(l))
	}
	if err := s.addUncommitted(result); err != nil {
		return err
	}
	if listed, lerr := s.adm.ListGroups(s.ctx); lerr == nil || isShardErr(lerr) {
		for i := range result {
			result[i].Type = listed[result[i].Group].GroupType
			if result[i].Type == "share" {
				if err := s.addShare(&result[i]); err != nil {
					errs = append(errs, fmt.Errorf("group %q: %w", result[i].Group, s.explain(err)))
				}
			}
			if result[i].Type == "consumer" {
				s.addMemberProtocols(&result[i])
			}
		}
	}
	if out == "json" {
		if err := writeJSON(stdout, result); err != nil {
			return err
		}
	} else {
		for i, g := range result {
			if i > 0 {
				fmt.Fprintln(stdout)
			}
			printGroup(stdout, g)
		}
	}
	return errors.Join(errs...)
}

// memberAssignment decodes what a member was assigned, for the consumer
// protocol.
func memberAssignment(m kadm.DescribedGroupMember) []groupAssignmentJSON {
	a, ok := m.Assigned.AsConsumer()
	if !ok {
		raw, isRaw := m.Assigned.Raw()
		if !isRaw || len(raw) == 0 {
			return []groupAssignmentJSON{}
		}
		var dec kmsg.ConsumerMemberAssignment
		if err := dec.ReadFrom(raw); err != nil {
			return []groupAssignmentJSON{}
		}
		a = &dec
	}
	out := []groupAssignmentJSON{}
	for _, t := range a.Topics {
		ps := slices.Clone(t.Partitions)
		slices.Sort(ps)
		out = append(out, groupAssignmentJSON{Topic: t.Topic, Partitions: ps})
	}
	slices.SortFunc(out, func(a, b groupAssignmentJSON) int { return strings.Compare(a.Topic, b.Topic) })
	return out
}

func describedGroup(l kadm.DescribedGroupLag) groupDescribeJSON {
	g := groupDescribeJSON{Group: l.Group, State: l.State, ProtocolType: l.ProtocolType, Protocol: l.Protocol,
		Coordinator: fmt.Sprintf("%d (%s:%d)", l.Coordinator.NodeID, l.Coordinator.Host, l.Coordinator.Port),
		Members:     []groupMemberJSON{}, Offsets: []groupOffsetJSON{}}
	for _, m := range l.Members {
		g.Members = append(g.Members, groupMemberJSON{MemberID: m.MemberID, InstanceID: m.InstanceID, ClientID: m.ClientID,
			Host: m.ClientHost, Assigned: memberAssignment(m)})
	}
	for t := range l.Lag {
		g.topics = append(g.topics, t)
	}
	for _, ml := range l.Lag.Sorted() {
		o := groupOffsetJSON{Topic: ml.Topic, Partition: ml.Partition}
		if ml.Commit.At >= 0 {
			o.Committed = ptr(ml.Commit.At)
		}
		if ml.Start.Err == nil {
			o.LogStart = ptr(ml.Start.Offset)
		}
		if ml.End.Err == nil {
			o.LogEnd = ptr(ml.End.Offset)
		}
		if ml.Err == nil && ml.Lag >= 0 {
			o.Lag = ptr(ml.Lag)
			g.TotalLag += ml.Lag
		}
		if ml.Err != nil {
			o.Error = ml.Err.Error()
		}
		if ml.Member != nil {
			o.MemberID = ml.Member.MemberID
		}
		g.Offsets = append(g.Offsets, o)
	}
	return g
}

// addUncommitted adds to each group the partitions of its topics (those
// it has a commit in, is assigned or is subscribed to) that it has no
// commit in and no member is assigned: their lag is every record in the
// log (log end - log start), which is where a consumer starting with
// auto.offset.reset=earliest would begin. The broker's ringlog_group_lag
// metric covers the same partitions with the same lag.
func (s *session) addUncommitted(groups []groupDescribeJSON) error {
	var topics []string
	for _, g := range groups {
		for _, t := range g.topics {
			if !slices.Contains(topics, t) {
				topics = append(topics, t)
			}
		}
	}
	if len(topics) == 0 {
		return nil
	}
	starts, err := s.adm.ListStartOffsets(s.ctx, topics...)
	if err != nil && !isShardErr(err) {
		return s.explain(err)
	}
	ends, err := s.adm.ListEndOffsets(s.ctx, topics...)
	if err != nil && !isShardErr(err) {
		return s.explain(err)
	}
	for i := range groups {
		g := &groups[i]
		seen := map[string]bool{}
		for _, o := range g.Offsets {
			seen[o.Topic+"\x00"+strconv.Itoa(int(o.Partition))] = true
		}
		mine := map[string]bool{}
		for _, t := range g.topics {
			mine[t] = true
		}
		ends.Each(func(en kadm.ListedOffset) {
			if !mine[en.Topic] || en.Partition < 0 || seen[en.Topic+"\x00"+strconv.Itoa(int(en.Partition))] {
				return
			}
			o := groupOffsetJSON{Topic: en.Topic, Partition: en.Partition}
			st, ok := starts.Lookup(en.Topic, en.Partition)
			switch {
			case en.Err != nil:
				o.Error = en.Err.Error()
			case !ok || st.Err != nil:
				o.LogEnd = ptr(en.Offset)
				o.Error = "log start offset unknown"
			default:
				o.LogStart, o.LogEnd, o.Lag = ptr(st.Offset), ptr(en.Offset), ptr(max(en.Offset-st.Offset, 0))
				g.TotalLag += *o.Lag
			}
			g.Offsets = append(g.Offsets, o)
		})
		slices.SortFunc(g.Offsets, func(a, b groupOffsetJSON) int {
			if c := strings.Compare(a.Topic, b.Topic); c != 0 {
				return c
			}
			return int(a.Partition - b.Partition)
		})
	}
	return nil
}

func isShardErr(err error) bool {
	var se *kadm.ShardErrors
	return errors.As(err, &se) && !se.AllFailed
}

func ptr[T any](v T) *T { return &v }

// addShare fills in a share group's assignments (ShareGroupDescribe) and
// offsets (DescribeShareGroupOffsets, with ringlog's in-flight counts).
// addMemberProtocols marks which protocol each member of a consumer
// group speaks (ConsumerGroupDescribe's member type): a group migrating
// between the protocols has classic members too. Best effort: without an
// answer the members are shown without it.
func (s *session) addMemberProtocols(g *groupDescribeJSON) {
	req := kmsg.NewPtrConsumerGroupDescribeRequest()
	req.Groups = []string{g.Group}
	resp, err := req.RequestWith(s.ctx, s.cl)
	if err != nil || len(resp.Groups) != 1 || resp.Groups[0].ErrorCode != 0 {
		return
	}
	types := map[string]int8{}
	for _, m := range resp.Groups[0].Members {
		types[m.MemberID] = m.MemberType
	}
	for i := range g.Members {
		switch t, ok := types[g.Members[i].MemberID]; {
		case !ok:
		case t == 0:
			g.Members[i].Protocol = "classic"
		default:
			g.Members[i].Protocol = "consumer"
		}
	}
}

func (s *session) addShare(g *groupDescribeJSON) error {
	g.Offsets, g.TotalLag = []groupOffsetJSON{}, 0
	dreq := kmsg.NewPtrShareGroupDescribeRequest()
	dreq.GroupIDs = []string{g.Group}
	dresp, err := dreq.RequestWith(s.ctx, s.cl)
	if err != nil {
		return err
	}
	if len(dresp.Groups) == 1 {
		dg := dresp.Groups[0]
		if err := kerr.ErrorForCode(dg.ErrorCode); err != nil {
			return err
		}
		g.Members = []groupMemberJSON{}
		for _, m := range dg.Members {
			gm := groupMemberJSON{MemberID: m.MemberID, ClientID: m.ClientID, Host: m.ClientHost}
			for _, a := range m.Assignment.TopicPartitions {
				gm.Assigned = append(gm.Assigned, groupAssignmentJSON{Topic: a.Topic, Partitions: a.Partitions})
			}
			g.Members = append(g.Members, gm)
		}
	}
	oreq := kmsg.NewPtrDescribeShareGroupOffsetsRequest()
	og := kmsg.NewDescribeShareGroupOffsetsRequestGroup()
	og.GroupID = g.Group
	oreq.Groups = append(oreq.Groups, og)
	oresp, err := oreq.RequestWith(s.ctx, s.cl)
	if err != nil {
		return err
	}
	g.Share = []shareOffsetJSON{}
	for _, rg := range oresp.Groups {
		if err := kerr.ErrorForCode(rg.ErrorCode); err != nil {
			return err
		}
		for _, t := range rg.Topics {
			for _, p := range t.Partitions {
				o := shareOffsetJSON{Topic: t.Topic, Partition: p.Partition, StartOffset: p.StartOffset, Lag: max(p.Lag, 0)}
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
					o.Error = err.Error()
				} else if p.StartOffset >= 0 && p.Lag >= 0 {
					o.LogEnd = ptr(p.StartOffset + p.Lag)
				}
				p.UnknownTags.Each(func(tag uint32, v []byte) {
					if tag == netio.InFlightTag {
						if a, r, ok := netio.ReadInFlight(v); ok {
							o.Acquired, o.Redeliver = ptr(a), ptr(r)
						}
					}
				})
				g.TotalLag += o.Lag
				g.Share = append(g.Share, o)
			}
		}
	}
	slices.SortFunc(g.Share, func(a, b shareOffsetJSON) int {
		return cmp.Or(strings.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
	return nil
}

func printGroup(w io.Writer, g groupDescribeJSON) {
	fmt.Fprintf(w, "Group: %s\n", g.Group)
	switch g.Type {
	case "consumer":
		fmt.Fprintf(w, "Type: consumer (the KIP-848 protocol: the broker assigns)\n")
	case "":
	default:
		fmt.Fprintf(w, "Type: %s\n", g.Type)
	}
	fmt.Fprintf(w, "State: %s\n", g.State)
	proto := g.ProtocolType
	if g.Protocol != "" {
		proto += " (" + g.Protocol + ")"
	}
	if proto != "" {
		fmt.Fprintf(w, "Protocol: %s\n", proto)
	}
	fmt.Fprintf(w, "Coordinator: %s\n", g.Coordinator)
	fmt.Fprintf(w, "\nMembers (%d):\n", len(g.Members))
	if len(g.Members) > 0 {
		tw := newTable(w)
		migrating := slices.ContainsFunc(g.Members, func(m groupMemberJSON) bool { return m.Protocol == "classic" })
		if migrating {
			fmt.Fprintln(tw, "  MEMBER-ID\tPROTOCOL\tCLIENT-ID\tHOST\tASSIGNED\t")
		} else {
			fmt.Fprintln(tw, "  MEMBER-ID\tCLIENT-ID\tHOST\tASSIGNED\t")
		}
		for _, m := range g.Members {
			var as []string
			for _, a := range m.Assigned {
				as = append(as, a.Topic+"["+ints(a.Partitions)+"]")
			}
			assigned := strings.Join(as, " ")
			if assigned == "" {
				assigned = "-"
			}
			if migrating {
				fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t\n", m.MemberID, m.Protocol, m.ClientID, m.Host, assigned)
				continue
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t\n", m.MemberID, m.ClientID, m.Host, assigned)
		}
		tw.Flush()
	}
	if g.Type == "share" {
		printShareOffsets(w, g)
		return
	}
	fmt.Fprintf(w, "\nOffsets:\n")
	if len(g.Offsets) == 0 {
		fmt.Fprintf(w, "  (none committed or assigned)\n")
	} else {
		tw := newTable(w)
		fmt.Fprintln(tw, "  TOPIC\tPARTITION\tCOMMITTED\tLOG-END\tLAG\tMEMBER-ID\t")
		for _, o := range g.Offsets {
			member := o.MemberID
			if member == "" {
				member = "-"
			}
			fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\t%s\t%s\t", o.Topic, o.Partition, optInt64(o.Committed), optInt64(o.LogEnd), optInt64(o.Lag), member)
			if o.Error != "" {
				fmt.Fprintf(tw, "error: %s", o.Error)
			}
			fmt.Fprintln(tw)
		}
		tw.Flush()
	}
	fmt.Fprintf(w, "\nTotal lag: %d\n", g.TotalLag)
}

// printShareOffsets prints a share group's partitions: where delivery
// stands and what is in flight.
func printShareOffsets(w io.Writer, g groupDescribeJSON) {
	fmt.Fprintf(w, "\nShare offsets (every record below START is acknowledged or archived):\n")
	if len(g.Share) == 0 {
		fmt.Fprintf(w, "  (no partition fetched yet)\n")
	} else {
		tw := newTable(w)
		fmt.Fprintln(tw, "  TOPIC\tPARTITION\tSTART\tLOG-END\tLAG\tACQUIRED\tREDELIVER\t")
		opt := func(v *int) string {
			if v == nil {
				return "-"
			}
			return strconv.Itoa(*v)
		}
		for _, o := range g.Share {
			fmt.Fprintf(tw, "  %s\t%d\t%d\t%s\t%d\t%s\t%s\t", o.Topic, o.Partition, o.StartOffset, optInt64(o.LogEnd), o.Lag, opt(o.Acquired), opt(o.Redeliver))
			if o.Error != "" {
				fmt.Fprintf(tw, "error: %s", o.Error)
			}
			fmt.Fprintln(tw)
		}
		tw.Flush()
	}
	fmt.Fprintf(w, "\nTotal lag: %d (records not yet acknowledged or archived, in flight included)\n", g.TotalLag)
}

func optInt64(v *int64) string {
	if v == nil {
		return "-"
	}
	return strconv.FormatInt(*v, 10)
}
