package quorum

import (
	"errors"
	"testing"

	"github.com/hashicorp/raft"
)

// After Shutdown closed it, the stable store drops writes instead of
// failing them (Raft would panic on a heartbeat's term it cannot save)
// and refuses reads.
func TestStableStoreAfterClose(t *testing.T) {
	inner := raft.NewInmemStore()
	s := &stableStore{s: inner}
	if err := s.SetUint64([]byte("term"), 3); err != nil {
		t.Fatal(err)
	}
	s.close()
	if err := s.SetUint64([]byte("term"), 4); err != nil {
		t.Fatalf("a write after close: %v", err)
	}
	if err := s.Set([]byte("k"), []byte("v")); err != nil {
		t.Fatalf("a write after close: %v", err)
	}
	if v, _ := inner.GetUint64([]byte("term")); v != 3 {
		t.Fatalf("a write after close reached the store: term %d", v)
	}
	if _, err := s.GetUint64([]byte("term")); !errors.Is(err, errStableClosed) {
		t.Fatalf("a read after close: %v", err)
	}
	if _, err := s.Get([]byte("k")); !errors.Is(err, errStableClosed) {
		t.Fatalf("a read after close: %v", err)
	}
}
