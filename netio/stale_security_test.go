package netio

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/ringlog/ringlog/admin"
	"github.com/ringlog/ringlog/internal/peer"
	"github.com/ringlog/ringlog/metadata"
	"github.com/ringlog/ringlog/security"
)

// catchUpCluster is a Cluster that only answers CaughtUp (and has no
// admin side).
type catchUpCluster struct {
	admin.Service
	caughtUp bool
}

func (f *catchUpCluster) Image() *metadata.Image            { return metadata.NewImage() }
func (f *catchUpCluster) ControllerID() int32               { return -1 }
func (f *catchUpCluster) Controller() (string, bool, error) { return "", true, nil }
func (f *catchUpCluster) AnswerRegistration(context.Context, peer.Registration) (int64, error) {
	return -1, kerr.NotController
}
func (f *catchUpCluster) AnswerHeartbeat(context.Context, peer.Heartbeat) (peer.HeartbeatAnswer, error) {
	return peer.HeartbeatAnswer{Fenced: true}, kerr.NotController
}
func (f *catchUpCluster) AnswerAllocateProducerIDs(context.Context, int32, int64) (peer.ProducerIDs, error) {
	return peer.ProducerIDs{}, kerr.NotController
}
func (f *catchUpCluster) AnswerAlterPartition(context.Context, peer.AlterPartition) ([]peer.ISRChangeAnswer, error) {
	return nil, kerr.NotController
}
func (f *catchUpCluster) AnswerSetRemoteLog(context.Context, peer.RemoteLog) error {
	return kerr.NotController
}
func (f *catchUpCluster) CoordinatorFor(string) int32    { return -1 }
func (f *catchUpCluster) TxnCoordinatorFor(string) int32 { return -1 }
func (f *catchUpCluster) CaughtUp() bool                 { return f.caughtUp }
func (f *catchUpCluster) MayLead() bool                  { return true }
func (f *catchUpCluster) DescribeQuorum(context.Context) (admin.Quorum, error) {
	return admin.Quorum{}, kerr.NotController
}
func (f *catchUpCluster) UnregisterBroker(context.Context, int32) error { return kerr.NotController }
func (f *catchUpCluster) AddVoter(context.Context, int32, string) error { return kerr.NotController }
func (f *catchUpCluster) RemoveVoter(context.Context, int32) error      { return kerr.NotController }

// TestStaleSecurityTurnsAwayUntilCaughtUp: until the image has caught
// up, a cluster broker with the authorizer (or a SASL listener) serves
// only super users it knows without SASL; afterwards everyone.
func TestStaleSecurityTurnsAwayUntilCaughtUp(t *testing.T) {
	store, err := security.OpenStore(t.TempDir() + "/security.json")
	if err != nil {
		t.Fatal(err)
	}
	authz := security.NewAuthorizer(store, []string{"User:CN=broker", "User:ANONYMOUS"})
	strict := security.NewAuthorizer(store, []string{"User:CN=broker"})
	for _, tc := range []struct {
		name         string
		protocol     SecurityProtocol
		authorizer   *security.Authorizer
		cert         string
		caughtUp     bool
		wantTurnAway bool
	}{
		{"plaintext, no authorizer", Plaintext, nil, "", false, false},
		{"SASL listener, no authorizer", SASLSSL, nil, "", false, true},
		{"SASL listener, caught up", SASLSSL, nil, "", true, false},
		{"SSL, authorizer, a client", SSL, authz, "User:CN=alice", false, true},
		{"SSL, authorizer, a broker", SSL, authz, "User:CN=broker", false, false},
		{"SSL, authorizer, caught up", SSL, authz, "User:CN=alice", true, false},
		{"PLAINTEXT, authorizer, ANONYMOUS super", Plaintext, authz, "", false, false},
		{"SASL, authorizer, before SASL", SASLPlaintext, authz, "", false, false}, // ANONYMOUS is super here
		{"SASL, strict authorizer, before SASL", SASLPlaintext, strict, "", false, true},
		{"PLAINTEXT, strict authorizer", Plaintext, strict, "", false, true},
	} {
		s := &Server{cfg: Config{Protocol: tc.protocol, Cluster: &catchUpCluster{caughtUp: tc.caughtUp},
			Security: Security{Authorizer: tc.authorizer}}}
		c := &conn{srv: s, certPrincipal: tc.cert}
		if got := s.staleSecurity(c); got != tc.wantTurnAway {
			t.Errorf("%s: staleSecurity = %v, want %v", tc.name, got, tc.wantTurnAway)
		}
	}
}
