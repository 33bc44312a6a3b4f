package main

// ringlog txn list: transactional ids and their transactions over
// ListTransactions and DescribeTransactions.

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/ringlog/ringlog/internal/cli"
)

func runTxn(args []string, stdout, stderr io.Writer) error {
	return cli.Dispatch("ringlog", "txn", "Shows transactional producers and their open transactions.", []cli.Subcommand{
		{Name: "list", Summary: "list transactional ids: producer id, epoch, state, age and partitions", Run: runTxnList},
	}, args, stdout, stderr)
}

const txnListUsage = `
Usage: ringlog txn list [flags]

Lists the broker's transactional ids with their producer id and epoch,
the state of their last transaction (Ongoing while one is open), how long
an open transaction has run and the partitions it wrote to. A transaction
that stays Ongoing holds back every read_committed consumer of its
partitions (the last stable offset stops at its first record) until it
ends or its transaction.timeout.ms aborts it.
`

const txnListExamples = `
Examples:
  ringlog txn list
  ringlog txn list --state Ongoing
  ringlog txn list --output json | jq -r '.[] | select(.age_ms > 60000) | .transactional_id'
`

type txnListJSON struct {
	ID         string   `json:"transactional_id"`
	ProducerID int64    `json:"producer_id"`
	Epoch      int16    `json:"producer_epoch"`
	State      string   `json:"state"`
	TimeoutMs  int32    `json:"timeout_ms"`
	AgeMs      int64    `json:"age_ms"` // of the open transaction; 0 when none
	Partitions []string `json:"partitions"`
}

func runTxnList(args []string, stdout, stderr io.Writer) error {
	var cf connFlags
	var out outputFlag
	var state string
	fs := cli.NewFlagSet("txn list", txnListUsage, txnListExamples, stdout)
	cf.Register(fs, 30*time.Second, adminTimeoutHelp)
	addOutputFlag(fs, &out)
	fs.StringVar(&state, "state", "", "only ids in this state: Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit or CompleteAbort")
	rest, err := cli.ParseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return cli.Usagef("txn list takes no arguments, got %q", rest)
	}
	var states []string
	if state != "" {
		states = []string{state}
	}
	s, err := cf.connect(cf.Timeout)
	if err != nil {
		return err
	}
	defer s.Close()
	listed, err := s.adm.ListTransactions(s.ctx, nil, states)
	if err != nil {
		return s.explain(err)
	}
	list := []txnListJSON{}
	if ids := listed.TransactionalIDs(); len(ids) > 0 {
		described, err := s.adm.DescribeTransactions(s.ctx, ids...)
		if err != nil {
			return s.explain(err)
		}
		now := time.Now().UnixMilli()
		for _, d := range described.Sorted() {
			if d.Err != nil {
				continue // expired or gone between the two calls
			}
			j := txnListJSON{ID: d.TxnID, ProducerID: d.ProducerID, Epoch: d.ProducerEpoch, State: d.State, TimeoutMs: d.TimeoutMillis, Partitions: []string{}}
			if d.StartTimestamp > 0 && d.State == "Ongoing" {
				j.AgeMs = max(now-d.StartTimestamp, 0)
			}
			d.Topics.Each(func(t string, p int32) { j.Partitions = append(j.Partitions, fmt.Sprintf("%s-%d", t, p)) })
			sort.Strings(j.Partitions)
			list = append(list, j)
		}
	}
	sort.Slice(list, func(i, j int) bool { return list[i].ID < list[j].ID })
	if out == "json" {
		return writeJSON(stdout, list)
	}
	tw := newTable(stdout)
	fmt.Fprintln(tw, "TRANSACTIONAL-ID\tPRODUCER-ID\tEPOCH\tSTATE\tAGE\tPARTITIONS\t")
	for _, j := range list {
		age := "-"
		if j.AgeMs > 0 {
			age = (time.Duration(j.AgeMs) * time.Millisecond).Round(time.Millisecond).String()
		}
		parts := strings.Join(j.Partitions, ",")
		if parts == "" {
			parts = "-"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t\n", j.ID, j.ProducerID, j.Epoch, j.State, age, parts)
	}
	return tw.Flush()
}
