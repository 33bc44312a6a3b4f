package cluster

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/internal/testenv"
	"github.com/ringlog/ringlog/metadata"
	"github.com/ringlog/ringlog/quorum"
)

// openSingle opens a one-voter cluster (not started: no control loop)
// on a fresh directory and waits until its node leads.
func openSingle(t *testing.T) *Cluster {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	voters, err := quorum.ParseVoters("1@" + addr)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ecfg := engine.DefaultConfig()
	ecfg.DataDir = filepath.Join(dir, "data")
	ecfg.Shards = 1
	eng, err := engine.Open(ecfg)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Open(Config{NodeID: 1, Voters: voters, ControllerAddr: addr, DataDir: dir}, eng)
	if err != nil {
		eng.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
		if err := eng.Close(); err != nil {
			t.Error(err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, _, err := c.node.WaitForLeader(ctx); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 20*time.Second, "the single voter to lead", c.node.IsLeader)
	return c
}

// TestTakeOfficeAfterATimedOutProposal: a controller whose TakeOffice
// committed although its proposal reported a failure (a timeout) takes
// office on its next try in the same term, instead of being refused
// STALE_CONTROLLER_EPOCH on every try and never answering a heartbeat.
// Its fencing batches carry InOffice and apply only while it is in
// office.
func TestTakeOfficeAfterATimedOutProposal(t *testing.T) {
	c := openSingle(t)
	term := c.node.Term()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// The image names the controller before, whatever the terms between
	// (a split vote): node 2, say, took office in an earlier term. This
	// one fences that one's broker early (prev), having seen it lead or not.
	if term < 2 {
		t.Fatalf("the first election is in term %d", term)
	}
	if _, err := c.propose(ctx, metadata.TakeOffice{Controller: 2, Term: term - 1}); err != nil {
		t.Fatal(err)
	}
	if prev, err := c.takeOffice(term); err != nil || prev != 2 || !c.inOffice() {
		t.Fatalf("first takeOffice: prev %d (want 2, from the image), err %v, in office %v", prev, err, c.inOffice())
	}
	if o, ok := c.Image().Office(); !ok || o != (metadata.Office{Controller: 1, Term: term}) {
		t.Fatalf("image office %+v %v, want controller 1 in term %d", o, ok, term)
	}
	// As if the proposal's answer had been lost: committed, not known.
	c.officeTerm.Store(0)
	if prev, err := c.takeOffice(term); err != nil || prev != -1 || !c.inOffice() {
		t.Fatalf("takeOffice again in the same term: prev %d, err %v, in office %v", prev, err, c.inOffice())
	}

	if _, err := c.propose(ctx, metadata.Batch{Records: []metadata.Record{metadata.InOffice{Controller: 2, Term: term}}}); !errors.Is(err, kerr.NotController) {
		t.Fatalf("a batch guarded by another controller's office: %v, want NOT_CONTROLLER", err)
	}
	if _, err := c.propose(ctx, metadata.Batch{Records: []metadata.Record{metadata.InOffice{Controller: 1, Term: term}}}); err != nil {
		t.Fatalf("a batch guarded by this controller's office: %v", err)
	}
}
