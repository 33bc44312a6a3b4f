package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestToolsTxnList: `ringlog txn list` shows an open transaction with its
// partitions and age, and the same id once it committed.
func TestToolsTxnList(t *testing.T) {
	t.Parallel()
	b := startToolBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b.run(t, 0, "", "topic", "create", "txn-tool", "--partitions", "2")
	prod := b.Client(kgo.TransactionalID("tool-producer"), kgo.DefaultProduceTopic("txn-tool"))
	if err := prod.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := prod.ProduceSync(ctx, &kgo.Record{Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	r := b.run(t, 0, "", "txn", "list")
	wantContains(t, "txn list", r.stdout, "TRANSACTIONAL-ID", "tool-producer", "Ongoing", "txn-tool-")
	list := decodeJSON[[]txnListJSON](t, b.run(t, 0, "", "txn", "list", "--state", "Ongoing", "--output", "json").stdout)
	if len(list) != 1 || list[0].ID != "tool-producer" || list[0].State != "Ongoing" || len(list[0].Partitions) != 1 || list[0].TimeoutMs <= 0 {
		t.Fatalf("txn list --state Ongoing: %+v", list)
	}
	if err := prod.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	list = decodeJSON[[]txnListJSON](t, b.run(t, 0, "", "txn", "list", "--output", "json").stdout)
	if len(list) != 1 || list[0].State != "CompleteCommit" || len(list[0].Partitions) != 0 || list[0].AgeMs != 0 {
		t.Fatalf("txn list after the commit: %+v", list)
	}
	if r := b.run(t, 0, "", "txn", "list", "--state", "Ongoing"); strings.Contains(r.stdout, "tool-producer") {
		t.Fatalf("a committed id listed as Ongoing:\n%s", r.stdout)
	}
}
