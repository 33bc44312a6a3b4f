package cluster

import (
	"testing"

	"github.com/ringlog/ringlog/internal/peer"
)

// The index a heartbeat's answer gives SyncMetadata: the controller's
// own when it sends one; this broker's when an older controller (no
// index) answers CaughtUp; none otherwise.
func TestControllerIndex(t *testing.T) {
	for _, c := range []struct {
		name   string
		ans    peer.HeartbeatAnswer
		want   int64
		wantOK bool
	}{
		{"the controller's index", peer.HeartbeatAnswer{MetadataIndex: 42, CaughtUp: false}, 42, true},
		{"its index, caught up too", peer.HeartbeatAnswer{MetadataIndex: 42, CaughtUp: true}, 42, true},
		{"an older controller, caught up", peer.HeartbeatAnswer{CaughtUp: true}, 17, true},
		{"an older controller, behind", peer.HeartbeatAnswer{}, 0, false},
	} {
		got, ok := controllerIndex(c.ans, 17)
		if got != c.want || ok != c.wantOK {
			t.Errorf("%s: %d %v, want %d %v", c.name, got, ok, c.want, c.wantOK)
		}
	}
}
