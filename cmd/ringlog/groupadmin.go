package main

// ringlog group reset-offsets|delete|delete-offsets: move or drop a
// consumer group's committed offsets (OffsetCommit, DeleteGroups,
// OffsetDelete), as Kafka's kafka-consumer-groups does.

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
)

// ---- reset-offsets ----

const groupResetUsage = `
Usage: ringlog group reset-offsets GROUP --topic T (--to-earliest | --to-latest | --to-offset N | --to-datetime TIME) [flags]

Sets the committed offsets of GROUP for the partitions of topic T (all of
them, or --partitions), so that its consumers start there next time:
  --to-earliest     the oldest record still in the log
  --to-latest       the log end (skip everything there is now)
  --to-offset N     offset N (clamped to the log's start and end)
  --to-datetime T   the first record at or after time T (RFC 3339, such as
                    2026-01-02T15:04:05Z, or Unix milliseconds); the log
                    end when no record is that new
It refuses while the group has active members (their commits would
overwrite the reset): stop the consumers first. --dry-run shows the new
offsets without committing them.
`

const groupResetExamples = `
Examples:
  ringlog group reset-offsets billing --topic orders --to-earliest --dry-run
  ringlog group reset-offsets billing --topic orders --to-earliest
  ringlog group reset-offsets billing --topic orders --partitions 0,2 --to-offset 100
  ringlog group reset-offsets billing --topic orders --to-datetime 2026-01-02T15:04:05Z --output json

Exit status: 0 when every offset was set (or shown, with --dry-run), 1 when
the group has active members, the topic does not exist or a commit
failed, 2 usage.
`

// groupResetJSON is one partition of reset-offsets --output json.
type groupResetJSON struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Previous  *int64 `json:"previous"` // null: nothing was committed
	New       int64  `json:"new"`
	Error     string `json:"error,omitempty"`
}

// groupResetResultJSON is the whole --output json answer.
type groupResetResultJSON struct {
	Group   string           `json:"group"`
	DryRun  bool             `json:"dry_run"`
	Offsets []groupResetJSON `json:"offsets"`
}

// partitionList is --partitions 0,1,2.
type partitionList []int32

func (p *partitionList) String() string {
	var s []string
	for _, v := range *p {
		s = append(s, strconv.Itoa(int(v)))
	}
	return strings.Join(s, ",")
}

func (p *partitionList) Set(v string) error {
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.ParseInt(strings.TrimSpace(f), 10, 32)
		if err != nil || n < 0 {
			return fmt.Errorf("want partition numbers like 0,1,2, got %q", f)
		}
		if !slices.Contains(*p, int32(n)) {
			*p = append(*p, int32(n))
		}
	}
	return nil
}

// parseDatetime reads --to-datetime: RFC 3339 (with or without a zone,
// UTC when none) or Unix milliseconds.
func parseDatetime(s string) (int64, error) {
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		return ms, nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UnixMilli(), nil
		}
	}
	return 0, fmt.Errorf("want RFC 3339 (2006-01-02T15:04:05Z) or Unix milliseconds, got %q", s)
}

func runGroupResetOffsets(args []string, stdout, stderr io.Writer) error {
	var cf connFlags
	var out outputFlag
	var topic, datetime string
	var parts partitionList
	var toEarliest, toLatest, dryRun bool
	var toOffset optInt
	fs := cli.NewFlagSet("group reset-offsets", groupResetUsage, groupResetExamples, stdout)
	cf.Register(fs, 30*time.Second, adminTimeoutHelp)
	addOutputFlag(fs, &out)
	fs.StringVar(&topic, "topic", "", "the topic `T` whose offsets to reset")
	fs.Var(&parts, "partitions", "only these partitions, `0,1,...` (default: all of the topic's)")
	fs.BoolVar(&toEarliest, "to-earliest", false, "reset to the oldest record still in the log")
	fs.BoolVar(&toLatest, "to-latest", false, "reset to the log end")
	fs.Var(&toOffset, "to-offset", "reset to offset `N` (clamped to the log's start and end)")
	fs.StringVar(&datetime, "to-datetime", "", "reset to the first record at or after `TIME` (RFC 3339 or Unix ms)")
	fs.BoolVar(&dryRun, "dry-run", false, "show the new offsets, commit nothing")
	rest, err := cli.ParseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return cli.Usagef("group reset-offsets: give exactly one group, got %d arguments", len(rest))
	}
	group := rest[0]
	if topic == "" {
		return cli.Usagef("group reset-offsets: give --topic")
	}
	n := 0
	for _, b := range []bool{toEarliest, toLatest, toOffset.set, datetime != ""} {
		if b {
			n++
		}
	}
	if n != 1 {
		return cli.Usagef("group reset-offsets: give exactly one of --to-earliest, --to-latest, --to-offset N, --to-datetime TIME")
	}
	if toOffset.set && toOffset.v < 0 {
		return cli.Usagef("--to-offset must be 0 or more, got %d", toOffset.v)
	}
	var ms int64
	if datetime != "" {
		if ms, err = parseDatetime(datetime); err != nil {
			return cli.Usagef("--to-datetime: %v", err)
		}
	}

	s, err := cf.connect(cf.Timeout)
	if err != nil {
		return err
	}
	defer s.Close()
	if err := requireNoMembers(s, "group reset-offsets "+group, kmsg.OffsetCommit, group); err != nil {
		return err
	}
	all, err := s.requireTopic("group reset-offsets "+group, kmsg.OffsetCommit, topic)
	if err != nil {
		return err
	}
	if len(parts) == 0 {
		parts = all
	}
	for _, p := range parts {
		if !slices.Contains(all, p) {
			return fmt.Errorf("--partitions: topic %q has no partition %d (it has %s)", topic, p, plural(len(all), "partition", "partitions"))
		}
	}
	slices.Sort(parts)
	starts, err := s.adm.ListStartOffsets(s.ctx, topic)
	if err != nil {
		return s.explain(err)
	}
	ends, err := s.adm.ListEndOffsets(s.ctx, topic)
	if err != nil {
		return s.explain(err)
	}
	var after kadm.ListedOffsets
	if datetime != "" {
		if after, err = s.adm.ListOffsetsAfterMilli(s.ctx, ms, topic); err != nil {
			return s.explain(err)
		}
	}
	prev, err := s.adm.FetchOffsets(s.ctx, group)
	if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		return cmp.Or(s.denied("group reset-offsets "+group, kmsg.OffsetCommit, err, groupResource(group), topicResource(topic)), s.explain(err))
	}
	res := groupResetResultJSON{Group: group, DryRun: dryRun, Offsets: []groupResetJSON{}}
	var commit kadm.Offsets
	for _, p := range parts {
		st, ok1 := starts.Lookup(topic, p)
		en, ok2 := ends.Lookup(topic, p)
		if !ok1 || !ok2 || st.Err != nil || en.Err != nil {
			return fmt.Errorf("topic %q partition %d: cannot list its offsets: %v", topic, p, errors.Join(st.Err, en.Err))
		}
		var to int64
		switch {
		case toEarliest:
			to = st.Offset
		case toLatest:
			to = en.Offset
		case toOffset.set:
			to = min(max(toOffset.v, st.Offset), en.Offset)
		default:
			a, ok := after.Lookup(topic, p)
			if !ok || a.Err != nil {
				return fmt.Errorf("topic %q partition %d: cannot find the offset at %s: %v", topic, p, datetime, a.Err)
			}
			to = a.Offset
			if to < 0 {
				to = en.Offset
			}
		}
		r := groupResetJSON{Topic: topic, Partition: p, New: to}
		if o, ok := prev.Lookup(topic, p); ok && o.Err == nil && o.At >= 0 {
			r.Previous = ptr(o.At)
		}
		res.Offsets = append(res.Offsets, r)
		commit.AddOffset(topic, p, to, -1)
	}
	var errs []error
	if !dryRun {
		resp, err := s.adm.CommitOffsets(s.ctx, group, commit)
		if err != nil {
			return cmp.Or(s.denied("group reset-offsets "+group, kmsg.OffsetCommit, err, groupResource(group), topicResource(topic)),
				fmt.Errorf("committing offsets of group %q: %w", group, s.explain(err)))
		}
		for i, r := range res.Offsets {
			if c, ok := resp.Lookup(r.Topic, r.Partition); ok && c.Err != nil {
				res.Offsets[i].Error = c.Err.Error()
				if d := s.denied("group reset-offsets "+group, kmsg.OffsetCommit, c.Err, groupResource(group), topicResource(topic)); d != nil {
					errs = appendUnique(errs, d)
					continue
				}
				errs = append(errs, fmt.Errorf("group %q: %s[%d]: %w", group, r.Topic, r.Partition, groupError(group, c.Err)))
			}
		}
	}
	if out == "json" {
		if err := writeJSON(stdout, res); err != nil {
			return err
		}
		return errors.Join(errs...)
	}
	tw := newTable(stdout)
	fmt.Fprintln(tw, "TOPIC\tPARTITION\tPREVIOUS\tNEW\t")
	for _, r := range res.Offsets {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t", r.Topic, r.Partition, optInt64(r.Previous), r.New)
		if r.Error != "" {
			fmt.Fprintf(tw, "error: %s", r.Error)
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	if dryRun {
		fmt.Fprintf(stdout, "Dry run: nothing committed (run again without --dry-run to reset group %s).\n", group)
	} else if len(errs) == 0 {
		fmt.Fprintf(stdout, "Reset %s of group %s.\n", plural(len(res.Offsets), "offset", "offsets"), group)
	}
	return errors.Join(errs...)
}

// requireNoMembers fails when group has active members: a reset or a
// delete under them would be overwritten or refused. action and api are
// what the command does to the group, for the message of an
// authorization failure (its operation implies the DESCRIBE this needs).
func requireNoMembers(s *session, action string, api kmsg.Key, group string) error {
	gs, err := s.adm.DescribeGroups(s.ctx, group)
	if d := s.denied(action, api, err, groupResource(group)); d != nil {
		return d
	}
	if err != nil {
		var se *kadm.ShardErrors
		if !errors.As(err, &se) {
			return s.explain(err)
		}
	}
	g, ok := gs[group]
	if !ok {
		return nil
	}
	if g.Err != nil && !errors.Is(g.Err, kerr.GroupIDNotFound) {
		return cmp.Or(s.denied(action, api, g.Err, groupResource(group)), fmt.Errorf("group %q: %w", group, s.explain(g.Err)))
	}
	if len(g.Members) > 0 {
		return fmt.Errorf("group %q has %s (state %s): stop its consumers first (see 'ringlog group describe %s')",
			group, plural(len(g.Members), "active member", "active members"), g.State, group)
	}
	return nil
}

// groupError says what to do about a group-level Kafka error.
func groupError(group string, err error) error {
	switch {
	case errors.Is(err, kerr.NonEmptyGroup):
		return fmt.Errorf("group %q has active members: stop its consumers first (%w)", group, err)
	case errors.Is(err, kerr.GroupIDNotFound):
		return fmt.Errorf("group %q does not exist (list groups with 'ringlog group list') (%w)", group, err)
	case errors.Is(err, kerr.GroupSubscribedToTopic):
		return fmt.Errorf("group %q has members subscribed to the topic: stop them first (%w)", group, err)
	case errors.Is(err, kerr.UnknownMemberID), errors.Is(err, kerr.IllegalGeneration), errors.Is(err, kerr.RebalanceInProgress):
		return fmt.Errorf("group %q has active members: stop its consumers first (%w)", group, err)
	}
	return err
}

// ---- delete ----

const groupDeleteUsage = `
Usage: ringlog group delete GROUP... [flags]

Deletes consumer groups with their committed offsets (DeleteGroups). A
group with active members is refused: stop its consumers first.
`

const groupDeleteExamples = `
Examples:
  ringlog group delete billing
  ringlog group delete billing audit --output json

Exit status: 0 when every group was deleted, 1 when any was not (missing,
or with active members), 2 usage.
`

type groupDeleteJSON struct {
	Group   string `json:"group"`
	Deleted bool   `json:"deleted"`
	Error   string `json:"error,omitempty"`
}

func runGroupDelete(args []string, stdout, stderr io.Writer) error {
	s, names, out, err := namesCommand{name: "group delete", usage: groupDeleteUsage, examples: groupDeleteExamples,
		none: "give one or more group names (list them with 'ringlog group list')"}.start(args, stdout)
	if err != nil {
		return err
	}
	defer s.Close()
	resp, err := askEach(s, names, s.adm.DeleteGroups, func(n string, err error) kadm.DeleteGroupResponse {
		return kadm.DeleteGroupResponse{Group: n, Err: err}
	})
	if err != nil {
		var se *kadm.ShardErrors
		if !errors.As(err, &se) || se.AllFailed {
			return s.explain(err)
		}
	}
	var errs []error
	res := []groupDeleteJSON{}
	for _, name := range slices.Compact(slices.Sorted(slices.Values(names))) {
		r := groupDeleteJSON{Group: name}
		gr, ok := resp[name]
		// Each error names the group once.
		var e error
		switch {
		case !ok:
			e = fmt.Errorf("group %q: the broker did not answer for it", name)
		case gr.Err != nil:
			if e = s.denied("group delete "+name, kmsg.DeleteGroups, gr.Err, groupResource(name)); e == nil {
				if e = groupError(name, gr.Err); e == gr.Err {
					e = fmt.Errorf("group %q: %w", name, gr.Err)
				}
			}
		default:
			r.Deleted = true
		}
		if e != nil {
			r.Error = e.Error()
			errs = append(errs, e)
		}
		res = append(res, r)
	}
	if out == "json" {
		if err := writeJSON(stdout, res); err != nil {
			return err
		}
	} else {
		for _, r := range res {
			if r.Deleted {
				fmt.Fprintf(stdout, "deleted group %s\n", r.Group)
			}
		}
	}
	return errors.Join(errs...)
}

// ---- delete-offsets ----

const groupDeleteOffsetsUsage = `
Usage: ringlog group delete-offsets GROUP --topic T [--partitions 0,1,...] [flags]

Deletes the committed offsets of GROUP for topic T (all its partitions,
or --partitions) (OffsetDelete); the group's consumers then start those
partitions at their reset offset (earliest, for 'ringlog consume'). The
broker refuses while members of the group are subscribed to the topic.
`

const groupDeleteOffsetsExamples = `
Examples:
  ringlog group delete-offsets billing --topic orders
  ringlog group delete-offsets billing --topic orders --partitions 1 --output json

Exit status: 0 when every offset was deleted, 1 otherwise, 2 usage.
`

type groupDeleteOffsetJSON struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Deleted   bool   `json:"deleted"`
	Error     string `json:"error,omitempty"`
}

func runGroupDeleteOffsets(args []string, stdout, stderr io.Writer) error {
	var cf connFlags
	var out outputFlag
	var topic string
	var parts partitionList
	fs := cli.NewFlagSet("group delete-offsets", groupDeleteOffsetsUsage, groupDeleteOffsetsExamples, stdout)
	cf.Register(fs, 30*time.Second, adminTimeoutHelp)
	addOutputFlag(fs, &out)
	fs.StringVar(&topic, "topic", "", "the topic `T` whose committed offsets to delete")
	fs.Var(&parts, "partitions", "only these partitions, `0,1,...` (default: all of the topic's)")
	rest, err := cli.ParseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return cli.Usagef("group delete-offsets: give exactly one group, got %d arguments", len(rest))
	}
	if topic == "" {
		return cli.Usagef("group delete-offsets: give --topic")
	}
	group := rest[0]
	s, err := cf.connect(cf.Timeout)
	if err != nil {
		return err
	}
	defer s.Close()
	if len(parts) == 0 {
		if parts, err = s.requireTopic("group delete-offsets "+group, kmsg.OffsetDelete, topic); err != nil {
			return err
		}
	}
	slices.Sort(parts)
	set := kadm.TopicsSet{}
	set.Add(topic, parts...)
	resp, err := s.adm.DeleteOffsets(s.ctx, group, set)
	if err != nil {
		return cmp.Or(s.denied("group delete-offsets "+group, kmsg.OffsetDelete, err, groupResource(group), topicResource(topic)),
			fmt.Errorf("deleting offsets of group %q: %w", group, groupError(group, s.explain(err))))
	}
	var errs []error
	res := []groupDeleteOffsetJSON{}
	for _, p := range parts {
		r := groupDeleteOffsetJSON{Topic: topic, Partition: p}
		perr, ok := resp.Lookup(topic, p)
		switch {
		case !ok:
			r.Error = "the broker did not answer for it"
		case perr != nil:
			if d := s.denied("group delete-offsets "+group, kmsg.OffsetDelete, perr, groupResource(group), topicResource(topic)); d != nil {
				r.Error = d.Error()
				errs = appendUnique(errs, d)
				res = append(res, r)
				continue
			}
			r.Error = groupError(group, perr).Error()
		default:
			r.Deleted = true
		}
		if r.Error != "" {
			errs = append(errs, fmt.Errorf("group %q: %s[%d]: %s", group, topic, p, r.Error))
		}
		res = append(res, r)
	}
	if out == "json" {
		if err := writeJSON(stdout, res); err != nil {
			return err
		}
	} else {
		n := 0
		for _, r := range res {
			if r.Deleted {
				n++
			}
		}
		fmt.Fprintf(stdout, "deleted %s of group %s on topic %s\n", plural(n, "committed offset", "committed offsets"), group, topic)
	}
	return errors.Join(errs...)
}
