package main

// ringlog cluster status: the cluster at a glance (brokers, controller,
// leaderships per broker, under-replicated and offline partitions), and
// --wait for scripts that start brokers and then need them all serving.

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/ringlog/ringlog/internal/cli"
)

func runCluster(args []string, stdout, stderr io.Writer) error {
	return cli.Dispatch("ringlog", "cluster", "Shows and steers a running broker or cluster.", []cli.Subcommand{
		{Name: "status", Summary: "brokers, controller, leaders per broker, under-replicated and offline partitions", Run: runClusterStatus},
		{Name: "elect-leaders", Summary: "give partitions back to their preferred replicas (or, unclean, to an out-of-sync one)", Run: runElectLeaders},
		{Name: "drain", Summary: "move every replica off a broker", Run: runClusterDrain},
		{Name: "quorum", Summary: "the metadata quorum: leader, term, each voter's and observer's progress", Run: runClusterQuorum},
		{Name: "unregister", Summary: "remove a stopped, drained broker from the cluster for good", Run: runClusterUnregister},
	}, args, stdout, stderr)
}

const clusterStatusUsage = `
Usage: ringlog cluster status [flags]

Shows the cluster as the brokers serve it: the cluster id, the controller,
every live broker with the partitions it leads and holds, and the
partitions that are under-replicated (ISR smaller than the replicas) or
offline (no leader). A broker that is down, or fenced by the controller,
is not listed; the replicas it holds count as offline replicas.

The cluster is healthy when a controller is known, at least --min-brokers
brokers are live, and no partition is under-replicated or offline. With
--wait, the command waits (up to --timeout) until it is.
`

const clusterStatusExamples = `
Examples:
  ringlog cluster status
  ringlog cluster status --wait --min-brokers 3 --timeout 60s   # after starting three brokers
  ringlog cluster status --output json | jq '.under_replicated'

Exit status: 0 healthy, 1 not healthy (or failed), 2 usage.
`

// clusterStatusJSON is the --output json form of cluster status.
type clusterStatusJSON struct {
	ClusterID       string             `json:"cluster_id"`
	Controller      int32              `json:"controller"`
	Brokers         []brokerStatusJSON `json:"brokers"`
	Topics          int                `json:"topics"`
	Partitions      int                `json:"partitions"`
	UnderReplicated []string           `json:"under_replicated"`
	Offline         []string           `json:"offline"`
	OfflineReplicas int                `json:"offline_replicas"`
	Healthy         bool               `json:"healthy"`
	Problems        []string           `json:"problems"`
}

type brokerStatusJSON struct {
	ID       int32  `json:"id"`
	Address  string `json:"address"`
	Rack     string `json:"rack,omitempty"`
	Leaders  int    `json:"leaders"`
	Replicas int    `json:"replicas"`
}

func runClusterStatus(args []string, stdout, stderr io.Writer) error {
	var cf connFlags
	var out outputFlag
	var wait bool
	var minBrokers int
	fs := cli.NewFlagSet("cluster status", clusterStatusUsage, clusterStatusExamples, stdout)
	cf.Register(fs, 30*time.Second, "how long to wait for the brokers (and, with --wait, for the cluster to become healthy)")
	addOutputFlag(fs, &out)
	fs.BoolVar(&wait, "wait", false, "wait until the cluster is healthy (up to --timeout)")
	fs.IntVar(&minBrokers, "min-brokers", 1, "how many live brokers a healthy cluster has at least")
	rest, err := cli.ParseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return cli.Usagef("cluster status takes no arguments, got %q", rest)
	}
	if minBrokers < 1 {
		return cli.Usagef("--min-brokers must be at least 1, got %d", minBrokers)
	}
	s, err := cf.connect(cf.Timeout)
	if err != nil {
		return err
	}
	defer s.Close()
	st, err := pollStatus(s, minBrokers, wait)
	if err != nil {
		return s.explain(err)
	}
	if out == "json" {
		if err := writeJSON(stdout, st); err != nil {
			return err
		}
	} else {
		printClusterStatus(stdout, st)
	}
	if !st.Healthy {
		why := "not healthy: " + strings.Join(st.Problems, "; ")
		if wait {
			why = fmt.Sprintf("still %s after %v (--timeout)", why, cf.Timeout)
		}
		return fmt.Errorf("cluster %s", why)
	}
	return nil
}

// pollStatus asks for the cluster's status; with wait, again until it is
// healthy or the session's context ends (then the last status, or the
// last error). Only errors that asking again may cure are waited out.
func pollStatus(s *session, minBrokers int, wait bool) (clusterStatusJSON, error) {
	for pause := 50 * time.Millisecond; ; pause = min(2*pause, 500*time.Millisecond) {
		var st clusterStatusJSON
		md, err := s.adm.Metadata(s.ctx)
		if err == nil {
			if st = clusterStatus(md, minBrokers); st.Healthy || !wait {
				return st, nil
			}
		} else if !wait || !retriable(err) {
			return st, err
		}
		select {
		case <-s.ctx.Done():
			return st, err
		case <-time.After(pause):
		}
	}
}

// retriable reports whether err may go away by asking again (a broker
// starting, a network error, a Kafka error marked retriable), as opposed
// to a refused login or permission.
func retriable(err error) bool {
	var ne net.Error
	return !isDenied(err) && (kerr.IsRetriable(err) || errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNREFUSED))
}

// clusterStatus sums md up; minBrokers is the fewest live brokers a
// healthy cluster has.
func clusterStatus(md kadm.Metadata, minBrokers int) clusterStatusJSON {
	st := clusterStatusJSON{ClusterID: md.Cluster, Controller: md.Controller, Brokers: []brokerStatusJSON{},
		UnderReplicated: []string{}, Offline: []string{}, Problems: []string{}}
	byID := map[int32]int{}
	for _, b := range md.Brokers {
		bs := brokerStatusJSON{ID: b.NodeID, Address: b.Host + ":" + strconv.Itoa(int(b.Port))}
		if b.Rack != nil {
			bs.Rack = *b.Rack
		}
		st.Brokers = append(st.Brokers, bs)
	}
	slices.SortFunc(st.Brokers, func(a, b brokerStatusJSON) int { return int(a.ID) - int(b.ID) })
	for i, b := range st.Brokers {
		byID[b.ID] = i
	}
	for _, td := range md.Topics.Sorted() {
		if td.Err != nil {
			continue
		}
		st.Topics++
		for _, p := range td.Partitions.Sorted() {
			st.Partitions++
			name := td.Topic + "-" + strconv.Itoa(int(p.Partition))
			if i, ok := byID[p.Leader]; ok && p.Leader >= 0 {
				st.Brokers[i].Leaders++
			} else {
				st.Offline = append(st.Offline, name)
			}
			for _, r := range p.Replicas {
				if i, ok := byID[r]; ok {
					st.Brokers[i].Replicas++
				} else {
					st.OfflineReplicas++
				}
			}
			if len(p.ISR) < len(p.Replicas) {
				st.UnderReplicated = append(st.UnderReplicated, name)
			}
		}
	}
	if st.Controller < 0 {
		st.Problems = append(st.Problems, "no controller known")
	}
	if len(st.Brokers) < minBrokers {
		st.Problems = append(st.Problems, fmt.Sprintf("%s live, want at least %d (--min-brokers)", plural(len(st.Brokers), "broker", "brokers"), minBrokers))
	}
	if n := len(st.Offline); n > 0 {
		st.Problems = append(st.Problems, plural(n, "partition", "partitions")+" offline")
	}
	if n := len(st.UnderReplicated); n > 0 {
		st.Problems = append(st.Problems, plural(n, "partition", "partitions")+" under-replicated")
	}
	st.Healthy = len(st.Problems) == 0
	return st
}

func printClusterStatus(w io.Writer, st clusterStatusJSON) {
	controller := "none known"
	if st.Controller >= 0 {
		controller = strconv.Itoa(int(st.Controller))
	}
	fmt.Fprintf(w, "Cluster: %s\nController: %s\n%s, %s, %s\n\n", st.ClusterID, controller,
		plural(len(st.Brokers), "broker", "brokers"), plural(st.Topics, "topic", "topics"), plural(st.Partitions, "partition", "partitions"))
	tw := newTable(w)
	fmt.Fprintln(tw, "BROKER\tADDRESS\tRACK\tLEADERS\tREPLICAS\t")
	for _, b := range st.Brokers {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t\n", b.ID, b.Address, cmp.Or(b.Rack, "-"), b.Leaders, b.Replicas)
	}
	tw.Flush()
	fmt.Fprintf(w, "\nUnder-replicated: %s\nOffline: %s\nOffline replicas: %d\n", listOrNone(st.UnderReplicated), listOrNone(st.Offline), st.OfflineReplicas)
	if st.Healthy {
		fmt.Fprintln(w, "Healthy: yes")
	} else {
		fmt.Fprintf(w, "Healthy: no (%s)\n", strings.Join(st.Problems, "; "))
	}
}

// listOrNone is names joined, at most 10 and a count of the rest, or
// "none".
func listOrNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	if len(names) > 10 {
		return fmt.Sprintf("%s and %d more", strings.Join(names[:10], ", "), len(names)-10)
	}
	return strings.Join(names, ", ")
}
