package netio

import (
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/admin"
	"github.com/ringlog/ringlog/metadata"
	"github.com/ringlog/ringlog/metrics"
	"github.com/ringlog/ringlog/security"
)

// adminCluster is a Cluster on a broker that is not the controller:
// the controller it forwards to answers DeleteTopics from its image,
// recording what it was asked.
type adminCluster struct {
	catchUpCluster
	img *metadata.Image
	mu  sync.Mutex
	got []*kmsg.DeleteTopicsRequest
}

func (f *adminCluster) Image() *metadata.Image { return f.img }

func (f *adminCluster) TopicByID(id [16]byte) (admin.Topic, bool) {
	if t := f.img.TopicByID(metadata.UUID(id)); t != nil {
		return admin.Topic{Name: t.Name, ID: t.ID}, true
	}
	return admin.Topic{}, false
}

// Controller is another broker: every admin request is forwarded (Call).
func (f *adminCluster) Controller() (string, bool, error) { return "controller:9092", false, nil }

func (f *adminCluster) Call(_ context.Context, _ string, req kmsg.Request) (kmsg.Response, error) {
	dt := req.(*kmsg.DeleteTopicsRequest)
	f.mu.Lock()
	f.got = append(f.got, dt)
	f.mu.Unlock()
	resp := dt.ResponseKind().(*kmsg.DeleteTopicsResponse)
	answer := func(name *string, id [16]byte) {
		tr := kmsg.NewDeleteTopicsResponseTopic()
		tr.Topic, tr.TopicID = name, id
		var t *metadata.Topic
		if name != nil && *name != "" {
			t = f.img.Topic(*name)
		} else {
			t = f.img.TopicByID(metadata.UUID(id))
		}
		switch {
		case t == nil && name != nil && *name != "":
			tr.ErrorCode = kerr.UnknownTopicOrPartition.Code
		case t == nil:
			tr.ErrorCode = kerr.UnknownTopicID.Code
		default:
			tr.Topic, tr.TopicID = kmsg.StringPtr(t.Name), [16]byte(t.ID)
		}
		resp.Topics = append(resp.Topics, tr)
	}
	for _, n := range dt.TopicNames {
		answer(&n, [16]byte{})
	}
	if dt.Version >= 6 {
		for _, t := range dt.Topics {
			answer(t.Topic, t.TopicID)
		}
	}
	return resp, nil
}

// TestClusterDeleteTopicsIsNoExistenceOracle: in cluster mode with the
// authorizer, the broker a client asks refuses a topic the client may
// not DESCRIBE alike whether the topic exists or not, never forwards it
// to the controller (whose answer would tell), and names a topic asked
// for by id only to a client that may DESCRIBE it.
func TestClusterDeleteTopicsIsNoExistenceOracle(t *testing.T) {
	img, res := metadata.NewImage().Apply(1, metadata.RegisterBroker{ID: 1, Incarnation: metadata.NewUUID(), KafkaAddr: "127.0.0.1:1"})
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	if img, res = img.Apply(2, metadata.UnfenceBroker{ID: 1, Epoch: res.BrokerEpoch}); res.Err != nil {
		t.Fatal(res.Err)
	}
	secretID := metadata.NewUUID()
	if img, res = img.Apply(3, metadata.CreateTopic{Name: "secret", ID: secretID, Replicas: [][]int32{{1}}}); res.Err != nil {
		t.Fatal(res.Err)
	}
	store, err := security.OpenStore(t.TempDir() + "/security.json")
	if err != nil {
		t.Fatal(err)
	}
	describe := security.ACL{ResourceType: kmsg.ACLResourceTypeTopic, ResourceName: "secret", PatternType: kmsg.ACLResourcePatternTypeLiteral,
		Principal: "User:CN=carol", Host: "*", Operation: kmsg.ACLOperationDescribe, Permission: kmsg.ACLPermissionTypeAllow}
	if errs := store.CreateACLs([]security.ACL{describe}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	cl := &adminCluster{img: img}
	s := &Server{cfg: Config{Protocol: SSL, Cluster: cl, Peers: cl, Security: Security{Authorizer: security.NewAuthorizer(store, nil)}}, admin: cl,
		logger: slog.New(slog.NewTextHandler(io.Discard, nil)), metrics: metrics.New(APIs()...)}

	// deleteTopics runs DeleteTopics at version v as principal and
	// returns its answer.
	deleteTopics := func(principal string, v int16, req *kmsg.DeleteTopicsRequest) *kmsg.DeleteTopicsResponse {
		t.Helper()
		req.SetVersion(v)
		r := &request{conn: &conn{srv: s, certPrincipal: principal, remote: "10.0.0.1:5000"}, key: 20, version: v,
			flexible: req.IsFlexible(), body: req.AppendTo(nil), arrived: time.Now()}
		r.resp = &r.own
		handleDeleteTopics(s, r)
		if len(r.own.parts) != 1 {
			t.Fatalf("DeleteTopics v%d: %d parts answered", v, len(r.own.parts))
		}
		b := r.own.parts[0].b
		if binary.BigEndian.Uint32(b) != uint32(len(b)-4) {
			t.Fatalf("DeleteTopics v%d: bad frame", v)
		}
		b = b[8:] // size, correlation id
		if r.flexible {
			b = b[1:]
		}
		resp := req.ResponseKind().(*kmsg.DeleteTopicsResponse)
		resp.SetVersion(v)
		if err := resp.ReadFrom(b); err != nil {
			t.Fatalf("DeleteTopics v%d: %v", v, err)
		}
		return resp
	}
	byNames := func(names ...string) *kmsg.DeleteTopicsRequest {
		req := kmsg.NewPtrDeleteTopicsRequest()
		req.TopicNames = names
		for _, n := range names {
			rt := kmsg.NewDeleteTopicsRequestTopic()
			rt.Topic = kmsg.StringPtr(n)
			req.Topics = append(req.Topics, rt)
		}
		return req
	}
	byIDs := func(ids ...[16]byte) *kmsg.DeleteTopicsRequest {
		req := kmsg.NewPtrDeleteTopicsRequest()
		for _, id := range ids {
			rt := kmsg.NewDeleteTopicsRequestTopic()
			rt.TopicID = id
			req.Topics = append(req.Topics, rt)
		}
		return req
	}
	same := func(what string, a, b kmsg.DeleteTopicsResponseTopic) {
		t.Helper()
		a.Topic = b.Topic
		if a.ErrorCode != b.ErrorCode || a.TopicID != b.TopicID || (a.ErrorMessage == nil) != (b.ErrorMessage == nil) ||
			a.ErrorMessage != nil && *a.ErrorMessage != *b.ErrorMessage {
			t.Errorf("%s: an existing topic and a missing one answered differently: %+v and %+v", what, a, b)
		}
	}

	for _, v := range []int16{5, 6} {
		resp := deleteTopics("User:CN=mallory", v, byNames("secret", "ghost"))
		if len(resp.Topics) != 2 || resp.Topics[0].ErrorCode != kerr.TopicAuthorizationFailed.Code {
			t.Fatalf("mallory, v%d: %+v", v, resp.Topics)
		}
		same("mallory by name", resp.Topics[0], resp.Topics[1])
	}
	resp := deleteTopics("User:CN=mallory", 6, byIDs([16]byte(secretID), [16]byte{9}))
	if tr := resp.Topics[0]; tr.ErrorCode != kerr.TopicAuthorizationFailed.Code || tr.Topic != nil {
		t.Errorf("mallory by the topic's id: code %d, name %v; want TOPIC_AUTHORIZATION_FAILED without the name", tr.ErrorCode, tr.Topic)
	}
	if tr := resp.Topics[1]; tr.ErrorCode != kerr.UnknownTopicID.Code {
		t.Errorf("mallory by an unknown id: code %d, want UNKNOWN_TOPIC_ID", tr.ErrorCode)
	}
	// carol may DESCRIBE secret, not DELETE it: refused, by its name.
	resp = deleteTopics("User:CN=carol", 6, byIDs([16]byte(secretID)))
	if tr := resp.Topics[0]; tr.ErrorCode != kerr.TopicAuthorizationFailed.Code || tr.Topic == nil || *tr.Topic != "secret" {
		t.Errorf("carol by the topic's id: code %d, name %v; want TOPIC_AUTHORIZATION_FAILED naming it", tr.ErrorCode, tr.Topic)
	}
	if len(cl.got) != 0 {
		t.Fatalf("refused deletions were forwarded to the controller: %+v", cl.got)
	}
	// A super user's deletion goes to the controller.
	s.cfg.Security.Authorizer = security.NewAuthorizer(store, []string{"User:CN=admin"})
	resp = deleteTopics("User:CN=admin", 6, byNames("secret"))
	if len(cl.got) != 1 || resp.Topics[0].ErrorCode != 0 || resp.Topics[0].TopicID != [16]byte(secretID) {
		t.Fatalf("admin deletes secret: forwarded %d, answer %+v", len(cl.got), resp.Topics)
	}
}
