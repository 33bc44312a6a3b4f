package main

// ringlog topic create|list|describe|delete|alter, over the Kafka admin
// APIs (CreateTopics, Metadata, ListOffsets, DescribeConfigs, DeleteTopics,
// IncrementalAlterConfigs, CreatePartitions).

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/binary"
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

const adminTimeoutHelp = "how long to wait for the broker before giving up"

func runTopic(args []string, stdout, stderr io.Writer) error {
	return cli.Dispatch("ringlog", "topic", "Creates, lists, describes, alters and deletes topics.", []cli.Subcommand{
		{Name: "create", Summary: "create a topic", Run: runTopicCreate},
		{Name: "list", Summary: "list topics", Run: runTopicList},
		{Name: "describe", Summary: "show partitions, offsets and configs of topics", Run: runTopicDescribe},
		{Name: "alter", Summary: "change configs of a topic or grow its partitions", Run: runTopicAlter},
		{Name: "delete", Summary: "delete topics", Run: runTopicDelete},
		{Name: "reassign", Summary: "move partitions between brokers (Kafka's reassignment plans)", Run: runTopicReassign},
	}, args, stdout, stderr)
}

// topicIDString renders a topic id as Kafka's tools do (URL-safe base64,
// no padding).
func topicIDString(id [16]byte) string {
	if id == [16]byte{} {
		return ""
	}
	return base64.RawURLEncoding.EncodeToString(id[:])
}

// ---- create ----

const topicCreateUsage = `
Usage: ringlog topic create NAME... [flags]

Creates topics. Partitions and replication factor default to the broker's
defaults; configs are checked by the broker.
`

const topicCreateExamples = `
Examples:
  ringlog topic create orders
  ringlog topic create orders --partitions 6 --config retention.ms=86400000 --config cleanup.policy=compact
  ringlog topic create orders --if-not-exists     # exit 0 when it already exists

Exit status: 0 created (or existed, with --if-not-exists), 1 failed, 2 usage.
`

func runTopicCreate(args []string, stdout, stderr io.Writer) error {
	var cf connFlags
	var partitions, rf int
	var configs kvFlag
	var ifNotExists bool
	fs := cli.NewFlagSet("topic create", topicCreateUsage, topicCreateExamples, stdout)
	cf.Register(fs, 30*time.Second, adminTimeoutHelp)
	fs.IntVar(&partitions, "partitions", -1, "number of partitions (-1: the broker's default)")
	fs.IntVar(&rf, "replication-factor", -1, "copies of each partition (-1: the broker's default: 1 on a single broker, --default-replication-factor in a cluster)")
	fs.Var(&configs, "config", "topic config `key=value` (repeatable), e.g. retention.ms=3600000")
	fs.BoolVar(&ifNotExists, "if-not-exists", false, "succeed when the topic already exists")
	names, err := cli.ParseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(names) == 0 {
		return cli.Usagef("topic create: give the name of the topic to create")
	}
	if partitions == 0 || partitions < -1 || partitions > 1<<20 {
		return cli.Usagef("--partitions must be at least 1 (or -1 for the broker's default), got %d", partitions)
	}
	if rf == 0 || rf < -1 || rf > 1<<15-1 {
		return cli.Usagef("--replication-factor must be at least 1 (or -1 for the broker's default), got %d", rf)
	}
	cfg := map[string]*string{}
	for i, k := range configs.keys {
		v := configs.vals[i]
		cfg[k] = &v
	}
	s, err := cf.connect(cf.Timeout)
	if err != nil {
		return err
	}
	defer s.Close()
	resps, err := s.adm.CreateTopics(s.ctx, int32(partitions), int16(rf), cfg, names...)
	if err != nil {
		return s.explain(err)
	}
	var errs []error
	var created []string
	for _, name := range names {
		r, ok := resps[name]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("topic %q: the broker did not answer for it", name))
		case errors.Is(r.Err, kerr.TopicAlreadyExists) && ifNotExists:
			fmt.Fprintf(stdout, "topic %q already exists\n", name)
		case r.Err != nil:
			errs = append(errs, cmp.Or(s.denied("topic create "+name, kmsg.CreateTopics, r.Err, topicResource(name)), createError(name, r.Err, r.ErrMessage)))
		default:
			what := ""
			if r.NumPartitions > 0 {
				what = fmt.Sprintf(" with %s, replication factor %d", plural(int(r.NumPartitions), "partition", "partitions"), r.ReplicationFactor)
			}
			fmt.Fprintf(stdout, "created topic %q%s\n", name, what)
			created = append(created, name)
		}
	}
	if len(created) > 0 {
		if lag := s.awaitTopics(created); lag != "" {
			fmt.Fprintf(stderr, "note: %s yet; commands sent there may not find it for a moment\n", lag)
		}
	}
	return errors.Join(errs...)
}

// awaitTopics waits, within the command's --timeout, until every broker
// the cluster lists serves names with a leader for each partition: in a
// cluster a topic is created once the controller has committed it, and the
// other brokers learn of it a moment later, so a command run next (topic
// describe, produce) could otherwise be told it does not exist. It returns
// what still lags when the time is up ("" when nothing does).
func (s *session) awaitTopics(names []string) string {
	// Brokers learn of a topic within moments; a wait this long means
	// something else (a replica that died at once), which the note says.
	ctx, cancel := context.WithTimeout(s.ctx, topicPropagationWait)
	defer cancel()
	sub := *s
	sub.ctx = ctx
	lag := ""
	for pause := 10 * time.Millisecond; ; pause = min(2*pause, 200*time.Millisecond) {
		lag = sub.topicsLag(names)
		if lag == "" {
			return ""
		}
		select {
		case <-ctx.Done():
			return lag
		case <-time.After(pause):
		}
	}
}

// topicPropagationWait bounds how long topic create waits for every
// broker to serve a new topic.
const topicPropagationWait = 10 * time.Second

// topicsLag asks every broker for names' metadata and names the first
// broker that does not serve one of them with leaders yet ("" when all
// do).
func (s *session) topicsLag(names []string) string {
	brokers, err := s.adm.BrokerMetadata(s.ctx)
	if err != nil {
		return "the brokers could not be listed to check that they serve the topic"
	}
	for _, b := range brokers.Brokers {
		req := kmsg.NewPtrMetadataRequest()
		req.AllowAutoTopicCreation = false
		for _, n := range names {
			rt := kmsg.NewMetadataRequestTopic()
			rt.Topic = kmsg.StringPtr(n)
			req.Topics = append(req.Topics, rt)
		}
		resp, err := req.RequestWith(s.ctx, s.cl.Broker(int(b.NodeID)))
		if err != nil {
			return fmt.Sprintf("broker %d did not answer whether it serves the topic", b.NodeID)
		}
		for _, t := range resp.Topics {
			if t.ErrorCode == kerr.TopicAuthorizationFailed.Code {
				continue // created, but not ours to describe: nothing to wait for
			}
			lagging := t.ErrorCode != 0 || len(t.Partitions) == 0
			for _, p := range t.Partitions {
				lagging = lagging || p.ErrorCode != 0 || p.Leader < 0
			}
			if lagging {
				name := ""
				if t.Topic != nil {
					name = *t.Topic
				}
				return fmt.Sprintf("broker %d does not serve topic %q with its leaders", b.NodeID, name)
			}
		}
	}
	return ""
}

func createError(name string, err error, msg string) error {
	switch {
	case errors.Is(err, kerr.InvalidConfig):
		return fmt.Errorf("topic %q: --config rejected: %s", name, detail(err, msg))
	case errors.Is(err, kerr.InvalidReplicationFactor):
		return fmt.Errorf("topic %q: --replication-factor rejected: %s", name, detail(err, msg))
	case errors.Is(err, kerr.InvalidPartitions):
		return fmt.Errorf("topic %q: --partitions rejected: %s", name, detail(err, msg))
	case errors.Is(err, kerr.InvalidTopicException) && cleanMessage(err, msg) != "":
		// The broker says why (a collision with an existing topic, an
		// internal topic's name): that beats the generic rules.
		return fmt.Errorf("topic %q: %s", name, cleanMessage(err, msg))
	case errors.Is(err, kerr.TopicAlreadyExists), errors.Is(err, kerr.InvalidTopicException):
		return topicError(name, err)
	}
	return withMessage(topicError(name, err), msg)
}

// ---- list ----

const topicListUsage = `
Usage: ringlog topic list [flags]

Lists topics with their partition count and replication factor. Internal
topics (__consumer_offsets) are left out unless --internal is given.
`

const topicListExamples = `
Examples:
  ringlog topic list
  ringlog topic list --internal --output json | jq -r '.[].name'
`

type topicListJSON struct {
	Name              string `json:"name"`
	ID                string `json:"id,omitempty"`
	Partitions        int    `json:"partitions"`
	ReplicationFactor int    `json:"replication_factor"`
	Internal          bool   `json:"internal"`
}

func runTopicList(args []string, stdout, stderr io.Writer) error {
	var cf connFlags
	var out outputFlag
	var internal bool
	fs := cli.NewFlagSet("topic list", topicListUsage, topicListExamples, stdout)
	cf.Register(fs, 30*time.Second, adminTimeoutHelp)
	addOutputFlag(fs, &out)
	fs.BoolVar(&internal, "internal", false, "include internal topics such as __consumer_offsets")
	rest, err := cli.ParseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return cli.Usagef("topic list takes no arguments, got %q (describe topics with 'ringlog topic describe NAME')", rest)
	}
	s, err := cf.connect(cf.Timeout)
	if err != nil {
		return err
	}
	defer s.Close()
	tds, err := s.adm.ListTopicsWithInternal(s.ctx)
	if err != nil {
		return s.explain(err)
	}
	list := []topicListJSON{}
	for _, td := range tds.Sorted() {
		if td.IsInternal && !internal {
			continue
		}
		list = append(list, topicListJSON{Name: td.Topic, ID: topicIDString(td.ID), Partitions: len(td.Partitions),
			ReplicationFactor: td.Partitions.NumReplicas(), Internal: td.IsInternal})
	}
	if out == "json" {
		return writeJSON(stdout, list)
	}
	tw := newTable(stdout)
	fmt.Fprintln(tw, "TOPIC\tPARTITIONS\tREPLICATION\t")
	for _, t := range list {
		name := t.Name
		if t.Internal {
			name += " (internal)"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t\n", name, t.Partitions, t.ReplicationFactor)
	}
	return tw.Flush()
}

// ---- describe ----

const topicDescribeUsage = `
Usage: ringlog topic describe NAME... [flags]

Shows each topic's partitions (leader, leader epoch, replicas, in-sync
replicas, log start and end offsets) and its configs with where each value
comes from (DYNAMIC_TOPIC_CONFIG: set on the topic; DEFAULT_CONFIG: built-in
default; STATIC_BROKER_CONFIG / DYNAMIC_DEFAULT_BROKER_CONFIG: a broker
default).
`

const topicDescribeExamples = `
Examples:
  ringlog topic describe orders
  ringlog topic describe orders payments --output json

Exit status: 0 when every topic was described, 1 if any does not exist.
`

type partitionJSON struct {
	Partition   int32   `json:"partition"`
	Leader      int32   `json:"leader"`
	LeaderEpoch int32   `json:"leader_epoch"`
	Replicas    []int32 `json:"replicas"`
	ISR         []int32 `json:"isr"`
	Offline     []int32 `json:"offline_replicas"`
	StartOffset int64   `json:"start_offset"`
	// LocalStartOffset and TieredEndOffset (tiered topics): the local
	// log's first offset (ListOffsets -4) and the offset after the last
	// one in the object store (-5 plus one; 0: none there yet).
	LocalStartOffset *int64 `json:"local_start_offset,omitempty"`
	TieredEndOffset  *int64 `json:"tiered_end_offset,omitempty"`
	// LocalBytes and RemoteBytes (tiered topics): the size of the
	// leader's local log and of the partition's segments in the object
	// store (DescribeLogDirs of the leader).
	LocalBytes  *int64 `json:"local_bytes,omitempty"`
	RemoteBytes *int64 `json:"remote_bytes,omitempty"`
	EndOffset   int64  `json:"end_offset"`
	Error       string `json:"error,omitempty"`
}

type configJSON struct {
	Name      string  `json:"name"`
	Value     *string `json:"value"`
	Source    string  `json:"source"`
	Sensitive bool    `json:"sensitive,omitempty"`
}

type topicDescribeJSON struct {
	Name              string          `json:"name"`
	ID                string          `json:"id,omitempty"`
	Internal          bool            `json:"internal"`
	ReplicationFactor int             `json:"replication_factor"`
	Partitions        []partitionJSON `json:"partitions"`
	Configs           []configJSON    `json:"configs"`
	// Tiered: remote.storage.enable is on.
	Tiered bool `json:"tiered,omitempty"`
}

func runTopicDescribe(args []string, stdout, stderr io.Writer) error {
	s, names, out, err := namesCommand{name: "topic describe", usage: topicDescribeUsage, examples: topicDescribeExamples,
		none: "give one or more topic names (list them with 'ringlog topic list')"}.start(args, stdout)
	if err != nil {
		return err
	}
	defer s.Close()
	tds, err := askEach(s, names, s.adm.ListTopicsWithInternal, func(n string, err error) kadm.TopicDetail { return kadm.TopicDetail{Topic: n, Err: err} })
	if err != nil {
		return s.explain(err)
	}
	var errs []error
	var found []string
	for _, n := range names {
		td, ok := tds[n]
		switch {
		case !ok:
			errs = append(errs, topicError(n, kerr.UnknownTopicOrPartition))
		case td.Err != nil:
			errs = append(errs, cmp.Or(s.denied("topic describe "+n, kmsg.Metadata, td.Err, topicResource(n)), topicError(n, td.Err)))
		case !slices.Contains(found, n):
			found = append(found, n)
		}
	}
	var result []topicDescribeJSON
	if len(found) > 0 {
		// The offsets come from each partition's leader. During a
		// failover a leader may be unreachable: describe shows what it
		// has ('-' for the offsets that did not come, and why) rather
		// than nothing, within a few seconds.
		octx, cancel := context.WithTimeout(s.ctx, min(cmp.Or(s.timeout, offsetsWait), offsetsWait))
		starts, err := s.adm.ListStartOffsets(octx, found...)
		if err = partialOK(err); err != nil {
			cancel()
			return s.explain(err)
		}
		ends, err := s.adm.ListEndOffsets(octx, found...)
		cancel()
		var se *kadm.ShardErrors
		if errors.As(err, &se) && se.AllFailed && octx.Err() != nil {
			fmt.Fprintf(stderr, "note: no partition leader gave its offsets within %v (a failover, or a slow cluster): they show as '-'\n", offsetsWait)
		}
		if err = partialOK(err); err != nil {
			return s.explain(err)
		}
		rcs, err := s.adm.DescribeTopicConfigs(s.ctx, found...)
		if isDenied(err) {
			// As Metadata above: one refused topic fails the answer.
			rcs, err = nil, nil
			for _, n := range found {
				rc, cerr := s.adm.DescribeTopicConfigs(s.ctx, n)
				switch {
				case isDenied(cerr):
					rcs = append(rcs, kadm.ResourceConfig{Name: n, Err: cerr})
				case cerr != nil:
					return s.explain(cerr)
				default:
					rcs = append(rcs, rc...)
				}
			}
		}
		if err != nil {
			return s.explain(err)
		}
		for _, n := range found {
			td := tds[n]
			d := topicDescribeJSON{Name: n, ID: topicIDString(td.ID), Internal: td.IsInternal,
				ReplicationFactor: td.Partitions.NumReplicas(), Partitions: []partitionJSON{}, Configs: []configJSON{}}
			for _, p := range td.Partitions.Sorted() {
				pj := partitionJSON{Partition: p.Partition, Leader: p.Leader, LeaderEpoch: p.LeaderEpoch,
					Replicas: nonNil(p.Replicas), ISR: nonNil(p.ISR), Offline: nonNil(p.OfflineReplicas), StartOffset: -1, EndOffset: -1}
				var perrs []string
				if p.Err != nil {
					perrs = append(perrs, p.Err.Error())
				}
				switch lo, ok := starts.Lookup(n, p.Partition); {
				case ok && lo.Err == nil:
					pj.StartOffset = lo.Offset
				case ok:
					perrs = append(perrs, "start offset: "+lo.Err.Error())
				case p.Err == nil:
					perrs = append(perrs, "offsets: the leader did not answer")
				}
				if lo, ok := ends.Lookup(n, p.Partition); ok && lo.Err == nil {
					pj.EndOffset = lo.Offset
				} else if ok {
					perrs = append(perrs, "end offset: "+lo.Err.Error())
				}
				pj.Error = strings.Join(perrs, "; ")
				d.Partitions = append(d.Partitions, pj)
			}
			for _, rc := range rcs {
				if rc.Name != n {
					continue
				}
				if rc.Err != nil {
					errs = append(errs, cmp.Or(s.denied("topic describe "+n, kmsg.DescribeConfigs, rc.Err, topicResource(n)),
						withMessage(fmt.Errorf("topic %q: describe configs: %w", n, rc.Err), rc.ErrMessage)))
				}
				for _, c := range rc.Configs {
					d.Configs = append(d.Configs, configJSON{Name: c.Key, Value: c.Value, Source: c.Source.String(), Sensitive: c.Sensitive})
				}
			}
			slices.SortFunc(d.Configs, func(a, b configJSON) int { return strings.Compare(a.Name, b.Name) })
			for _, c := range d.Configs {
				d.Tiered = d.Tiered || c.Name == "remote.storage.enable" && c.Value != nil && *c.Value == "true"
			}
			if d.Tiered {
				s.tieredOffsets(&d)
				s.tieredBytes(&d)
			}
			result = append(result, d)
		}
	}
	if out == "json" {
		if result == nil {
			result = []topicDescribeJSON{}
		}
		if err := writeJSON(stdout, result); err != nil {
			return err
		}
	} else {
		for i, d := range result {
			if i > 0 {
				fmt.Fprintln(stdout)
			}
			printTopic(stdout, d)
		}
	}
	return errors.Join(errs...)
}

// tieredOffsets fills a tiered topic's partitions' local start and
// tiered end (ListOffsets -4 and -5, KIP-1005); what does not come
// stays unset.
func (s *session) tieredOffsets(d *topicDescribeJSON) {
	ctx, cancel := context.WithTimeout(s.ctx, offsetsWait)
	defer cancel()
	locals, _ := s.adm.ListOffsetsAfterMilli(ctx, -4, d.Name)
	tiered, _ := s.adm.ListOffsetsAfterMilli(ctx, -5, d.Name)
	for i := range d.Partitions {
		p := &d.Partitions[i]
		if lo, ok := locals.Lookup(d.Name, p.Partition); ok && lo.Err == nil {
			p.LocalStartOffset = &lo.Offset
		}
		if lo, ok := tiered.Lookup(d.Name, p.Partition); ok && lo.Err == nil {
			end := lo.Offset + 1
			p.TieredEndOffset = &end
		}
	}
}

// tieredBytes fills a tiered topic's partitions' local and remote bytes,
// as their leaders' DescribeLogDirs answers say (the remote bytes in
// ringlog's tagged field); what does not come stays unset.
func (s *session) tieredBytes(d *topicDescribeJSON) {
	ctx, cancel := context.WithTimeout(s.ctx, offsetsWait)
	defer cancel()
	req := kmsg.NewPtrDescribeLogDirsRequest()
	rt := kmsg.NewDescribeLogDirsRequestTopic()
	rt.Topic = d.Name
	for _, p := range d.Partitions {
		rt.Partitions = append(rt.Partitions, p.Partition)
	}
	req.Topics = append(req.Topics, rt)
	leaders := map[int32]int32{}
	for _, p := range d.Partitions {
		leaders[p.Partition] = p.Leader
	}
	for _, shard := range s.cl.RequestSharded(ctx, req) {
		resp, ok := shard.Resp.(*kmsg.DescribeLogDirsResponse)
		if shard.Err != nil || !ok {
			continue
		}
		for _, dir := range resp.Dirs {
			for _, t := range dir.Topics {
				if t.Topic != d.Name {
					continue
				}
				for _, rp := range t.Partitions {
					if leader, ok := leaders[rp.Partition]; !ok || leader != shard.Meta.NodeID {
						continue
					}
					p := &d.Partitions[slices.IndexFunc(d.Partitions, func(x partitionJSON) bool { return x.Partition == rp.Partition })]
					size := rp.Size
					p.LocalBytes = &size
					rp.UnknownTags.Each(func(k uint32, v []byte) {
						if k == netio.RemoteBytesTag && len(v) == 8 {
							rb := int64(binary.BigEndian.Uint64(v))
							p.RemoteBytes = &rb
						}
					})
				}
			}
		}
	}
}

// offsetsWait bounds how long topic describe waits for partition leaders'
// offsets (a leader being replaced answers only after the failover).
const offsetsWait = 5 * time.Second

// partialOK drops the error of a sharded request (kadm's ShardErrors)
// whose failed shards only leave some partitions without an answer: the
// caller shows what came. Other errors come back as they are.
func partialOK(err error) error {
	var se *kadm.ShardErrors
	if errors.As(err, &se) && !isDenied(err) {
		return nil
	}
	return err
}

func nonNil(s []int32) []int32 {
	if s == nil {
		return []int32{}
	}
	return s
}

func printTopic(w io.Writer, d topicDescribeJSON) {
	fmt.Fprintf(w, "Topic: %s\n", d.Name)
	if d.ID != "" {
		fmt.Fprintf(w, "ID: %s\n", d.ID)
	}
	internal := ""
	if d.Internal {
		internal = ", internal"
	}
	fmt.Fprintf(w, "%s, replication factor %d%s\n\n", plural(len(d.Partitions), "partition", "partitions"), d.ReplicationFactor, internal)
	tw := newTable(w)
	tieredCols := ""
	if d.Tiered {
		// START is the first offset anywhere, in the object store when
		// it holds older data; LOCAL START the local log's first.
		tieredCols = "LOCAL START\tTIERED END\tLOCAL BYTES\tREMOTE BYTES\t"
	}
	fmt.Fprintln(tw, "PARTITION\tLEADER\tEPOCH\tREPLICAS\tISR\tOFFLINE\tSTART\t"+tieredCols+"END\tRECORDS\t")
	for _, p := range d.Partitions {
		records := "-"
		if p.StartOffset >= 0 && p.EndOffset >= 0 {
			records = strconv.FormatInt(p.EndOffset-p.StartOffset, 10)
		}
		leader := "none"
		if p.Leader >= 0 {
			leader = strconv.Itoa(int(p.Leader))
		}
		tiered := ""
		if d.Tiered {
			opt := func(v *int64) string {
				if v == nil {
					return "-"
				}
				return offsetString(*v)
			}
			size := func(v *int64) string {
				if v == nil {
					return "-"
				}
				return strconv.FormatInt(*v, 10)
			}
			tiered = opt(p.LocalStartOffset) + "\t" + opt(p.TieredEndOffset) + "\t" + size(p.LocalBytes) + "\t" + size(p.RemoteBytes) + "\t"
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%s\t%s\t%s%s\t%s\t", p.Partition, leader, p.LeaderEpoch, ints(p.Replicas), ints(p.ISR),
			cmp.Or(ints(p.Offline), "-"), offsetString(p.StartOffset), tiered, offsetString(p.EndOffset), records)
		if p.Error != "" {
			fmt.Fprintf(tw, "error: %s", p.Error)
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	fmt.Fprintf(w, "\nConfigs:\n")
	tw = newTable(w)
	fmt.Fprintln(tw, "  NAME\tVALUE\tSOURCE\t")
	for _, c := range d.Configs {
		v := "(null)"
		if c.Sensitive {
			v = "(sensitive)"
		} else if c.Value != nil {
			v = *c.Value
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t\n", c.Name, v, c.Source)
	}
	tw.Flush()
}

func ints(s []int32) string {
	parts := make([]string, len(s))
	for i, v := range s {
		parts[i] = strconv.Itoa(int(v))
	}
	return strings.Join(parts, ",")
}

func offsetString(o int64) string {
	if o < 0 {
		return "-"
	}
	return strconv.FormatInt(o, 10)
}

// ---- delete ----

const topicDeleteUsage = `
Usage: ringlog topic delete NAME... [flags]

Deletes topics and all their records.
`

const topicDeleteExamples = `
Examples:
  ringlog topic delete orders
  ringlog topic delete orders payments --if-exists   # exit 0 when already gone

Exit status: 0 deleted (or absent, with --if-exists), 1 failed, 2 usage.
`

func runTopicDelete(args []string, stdout, stderr io.Writer) error {
	var cf connFlags
	var ifExists bool
	fs := cli.NewFlagSet("topic delete", topicDeleteUsage, topicDeleteExamples, stdout)
	cf.Register(fs, 30*time.Second, adminTimeoutHelp)
	fs.BoolVar(&ifExists, "if-exists", false, "succeed when a topic does not exist")
	names, err := cli.ParseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(names) == 0 {
		return cli.Usagef("topic delete: give the names of the topics to delete")
	}
	s, err := cf.connect(cf.Timeout)
	if err != nil {
		return err
	}
	defer s.Close()
	resps, err := s.adm.DeleteTopics(s.ctx, names...)
	if err != nil {
		return s.explain(err)
	}
	var errs []error
	for _, n := range names {
		r, ok := resps[n]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("topic %q: the broker did not answer for it", n))
		case errors.Is(r.Err, kerr.UnknownTopicOrPartition) && ifExists:
			fmt.Fprintf(stdout, "topic %q does not exist\n", n)
		case errors.Is(r.Err, kerr.UnknownTopicOrPartition):
			errs = append(errs, fmt.Errorf("topic %q does not exist (add --if-exists to accept that; list topics with 'ringlog topic list')", n))
		case errors.Is(r.Err, kerr.InvalidTopicException):
			errs = append(errs, fmt.Errorf("topic %q cannot be deleted: %s", n, detail(r.Err, r.ErrMessage)))
		case r.Err != nil:
			errs = append(errs, cmp.Or(s.denied("topic delete "+n, kmsg.DeleteTopics, r.Err, topicResource(n)), withMessage(topicError(n, r.Err), r.ErrMessage)))
		default:
			fmt.Fprintf(stdout, "deleted topic %q\n", n)
		}
	}
	return errors.Join(errs...)
}

// ---- alter ----

const topicAlterUsage = `
Usage: ringlog topic alter NAME [flags]

Changes a topic: sets configs (--set), returns configs to their default
(--delete, or --unset), and grows the partition count (--partitions; partitions can
never be removed, and existing keys then map to other partitions).
`

const topicAlterExamples = `
Examples:
  ringlog topic alter orders --set retention.ms=3600000 --set segment.bytes=67108864
  ringlog topic alter orders --delete retention.ms           # back to the default
  ringlog topic alter orders --partitions 12

Exit status: 0 changed (or already so), 1 failed, 2 usage.
`

func runTopicAlter(args []string, stdout, stderr io.Writer) error {
	var cf connFlags
	var set kvFlag
	var del stringList
	var partitions int
	fs := cli.NewFlagSet("topic alter", topicAlterUsage, topicAlterExamples, stdout)
	cf.Register(fs, 30*time.Second, adminTimeoutHelp)
	fs.Var(&set, "set", "set a config, `key=value` (repeatable)")
	fs.Var(&del, "delete", "return a config `key` to its default (repeatable)")
	fs.Var(&del, "unset", "the same as --delete")
	fs.IntVar(&partitions, "partitions", 0, "grow the topic to `N` partitions")
	names, err := cli.ParseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(names) != 1 {
		return cli.Usagef("topic alter: give exactly one topic name, got %d", len(names))
	}
	name := names[0]
	if len(set.keys) == 0 && len(del) == 0 && partitions == 0 {
		return cli.Usagef("topic alter: nothing to change: give --set key=value, --delete key or --partitions N")
	}
	if partitions < 0 {
		return cli.Usagef("--partitions must be positive, got %d", partitions)
	}
	for _, k := range del {
		if slices.Contains(set.keys, k) {
			return cli.Usagef("topic alter: %q is both --set and --delete", k)
		}
	}
	s, err := cf.connect(cf.Timeout)
	if err != nil {
		return err
	}
	defer s.Close()
	// ALTER_CONFIGS does not imply DESCRIBE: the check needs it as such.
	parts, err := s.requireTopic("topic alter "+name, kmsg.Metadata, name)
	if err != nil {
		return err
	}
	if len(set.keys) > 0 || len(del) > 0 {
		var alters []kadm.AlterConfig
		for i, k := range set.keys {
			v := set.vals[i]
			alters = append(alters, kadm.AlterConfig{Op: kadm.SetConfig, Name: k, Value: &v})
		}
		for _, k := range del {
			alters = append(alters, kadm.AlterConfig{Op: kadm.DeleteConfig, Name: k})
		}
		resps, err := s.adm.AlterTopicConfigs(s.ctx, alters, name)
		if err != nil {
			return s.explain(err)
		}
		for _, r := range resps {
			if d := s.denied("topic alter "+name, kmsg.IncrementalAlterConfigs, r.Err, topicResource(name)); d != nil {
				return d
			}
			if r.Err != nil {
				if errors.Is(r.Err, kerr.InvalidConfig) || errors.Is(r.Err, kerr.InvalidRequest) {
					return fmt.Errorf("topic %q: configs not changed: %s", name, detail(r.Err, r.ErrMessage))
				}
				return withMessage(topicError(name, r.Err), r.ErrMessage)
			}
		}
		for i, k := range set.keys {
			fmt.Fprintf(stdout, "topic %q: set %s=%s\n", name, k, set.vals[i])
		}
		for _, k := range del {
			fmt.Fprintf(stdout, "topic %q: %s back to its default\n", name, k)
		}
	}
	if partitions > 0 {
		switch cur := len(parts); {
		case partitions == cur:
			fmt.Fprintf(stdout, "topic %q already has %s\n", name, plural(cur, "partition", "partitions"))
		case partitions < cur:
			return fmt.Errorf("topic %q has %d partitions: partitions can only be added, not removed (to have fewer, recreate the topic)", name, cur)
		default:
			resps, err := s.adm.UpdatePartitions(s.ctx, partitions, name)
			if err != nil {
				return s.explain(err)
			}
			if r, ok := resps[name]; !ok {
				return fmt.Errorf("topic %q: the broker did not answer for it", name)
			} else if r.Err != nil {
				return cmp.Or(s.denied("topic alter "+name, kmsg.CreatePartitions, r.Err, topicResource(name)), withMessage(topicError(name, r.Err), r.ErrMessage))
			}
			fmt.Fprintf(stdout, "topic %q: grew from %d to %d partitions\n", name, cur, partitions)
		}
	}
	return nil
}
