package netio_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/ringlog/ringlog/broker"
	"github.com/ringlog/ringlog/internal/brokertest"
	"github.com/ringlog/ringlog/internal/testcerts"
	"github.com/ringlog/ringlog/netio"
	"github.com/ringlog/ringlog/security"
)

// secureBroker is a broker with every kind of listener, the authorizer
// on, User:admin a super user, and two users with SCRAM credentials.
type secureBroker struct {
	*brokertest.Broker
	certs                 *testcerts.Set
	saslSSL, ssl, saslTxt string // listener addresses
}

const (
	adminPass = "admin-secret"
	bobPass   = "bob-secret"
)

func startSecureBroker(t *testing.T, opts ...brokertest.Option) *secureBroker {
	t.Helper()
	certs := testcerts.New(t)
	base := []brokertest.Option{func(c *broker.Config) {
		c.Listeners = []broker.Listener{
			{Protocol: netio.SASLSSL, Addr: "127.0.0.1:0"},
			{Protocol: netio.SSL, Addr: "127.0.0.1:0"},
			{Protocol: netio.SASLPlaintext, Addr: "127.0.0.1:0"},
		}
		c.Security.TLS = security.TLSFiles{CertFile: certs.ServerCert, KeyFile: certs.ServerKey,
			ClientCAFile: certs.CAFile, ClientAuth: "requested"}
		c.Security.Authorizer = true
		c.Security.SuperUsers = []string{"User:admin"}
	}}
	b := brokertest.Start(t, append(base, opts...)...)
	ls := b.B.Listeners()
	sb := &secureBroker{Broker: b, certs: certs, saslSSL: ls[0].Addr().String(), ssl: ls[1].Addr().String(), saslTxt: ls[2].Addr().String()}
	for user, pass := range map[string]string{"admin": adminPass, "bob": bobPass} {
		for _, m := range []security.Mechanism{security.ScramSHA256, security.ScramSHA512} {
			cred, err := security.NewScramCredential(m, pass, 4096, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := b.B.Security().UpsertCredential(user, cred); err != nil {
				t.Fatal(err)
			}
		}
	}
	return sb
}

func (sb *secureBroker) tlsConfig() *tls.Config {
	return &tls.Config{RootCAs: sb.certs.CAPool, ServerName: "localhost"}
}

// client is a franz-go client of addr with extra options, closed at cleanup.
func (sb *secureBroker) client(t *testing.T, addr string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr), kgo.RequestRetries(1),
		kgo.RetryTimeout(3 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// adminClient is a super user over SASL_PLAINTEXT with SCRAM-SHA-256.
func (sb *secureBroker) adminClient(t *testing.T) *kgo.Client {
	return sb.client(t, sb.saslTxt, kgo.SASL(scram.Auth{User: "admin", Pass: adminPass}.AsSha256Mechanism()))
}

func (sb *secureBroker) admin(t *testing.T) *kadm.Client { return kadm.NewClient(sb.adminClient(t)) }

func produceConsume(t *testing.T, cl *kgo.Client, topic string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := 0; i < n; i++ {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: fmt.Appendf(nil, "v%d", i)}).FirstErr(); err != nil {
			t.Fatalf("produce %d to %s: %v", i, topic, err)
		}
	}
	cl.AddConsumeTopics(topic)
	got := 0
	for got < n {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consumed %d of %d from %s: %v", got, n, topic, err)
		}
		fs.EachError(func(tp string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", tp, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			if string(r.Value) != fmt.Sprintf("v%d", got) {
				t.Fatalf("record %d is %q", got, r.Value)
			}
			got++
		})
	}
}

func TestSASLSSLScramProduceConsume(t *testing.T) {
	sb := startSecureBroker(t)
	cl := sb.client(t, sb.saslSSL, kgo.DialTLSConfig(sb.tlsConfig()),
		kgo.SASL(scram.Auth{User: "admin", Pass: adminPass}.AsSha512Mechanism()), kgo.AllowAutoTopicCreation())
	produceConsume(t, cl, "secure", 50)
	// Metadata named this listener, not the plaintext one.
	brokers, err := kadm.NewClient(cl).ListBrokers(context.Background())
	if err != nil || len(brokers) != 1 || fmt.Sprintf("%s:%d", brokers[0].Host, brokers[0].Port) != sb.saslSSL {
		t.Fatalf("brokers %+v %v, want the SASL_SSL listener %s", brokers, err, sb.saslSSL)
	}
}

func TestSASLWrongPasswordIsRefusedQuickly(t *testing.T) {
	sb := startSecureBroker(t)
	for _, mech := range []string{"SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"} {
		var m kgo.Opt
		switch mech {
		case "SCRAM-SHA-512":
			m = kgo.SASL(scram.Auth{User: "admin", Pass: "wrong"}.AsSha512Mechanism())
		case "SCRAM-SHA-256":
			m = kgo.SASL(scram.Auth{User: "nobody", Pass: "wrong"}.AsSha256Mechanism())
		default:
			m = kgo.SASL(plain.Auth{User: "admin", Pass: "wrong"}.AsMechanism())
		}
		cl := sb.client(t, sb.saslSSL, kgo.DialTLSConfig(sb.tlsConfig()), m)
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := cl.Ping(ctx)
		cancel()
		if !errors.Is(err, kerr.SaslAuthenticationFailed) {
			t.Fatalf("%s with a wrong password: %v, want SASL_AUTHENTICATION_FAILED", mech, err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("%s: refused after %v", mech, d)
		}
	}
}

func TestMTLSPrincipalIsCheckedAgainstACLs(t *testing.T) {
	sb := startSecureBroker(t)
	ctx := context.Background()
	adm := sb.admin(t)
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "alice-orders"); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "payroll"); err != nil {
		t.Fatal(err)
	}
	alice := "User:CN=alice,O=ringlog-test"
	acl := kadm.NewACLs().Allow(alice).ResourcePatternType(kadm.ACLPatternPrefixed).
		Topics("alice-").Groups("alice-").Operations(kadm.OpRead, kadm.OpWrite)
	res, err := adm.CreateACLs(ctx, acl)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Err != nil {
			t.Fatalf("create ACL %+v: %v", r, r.Err)
		}
	}
	cert := sb.certs.Client("alice", false)
	tc := sb.tlsConfig()
	tc.Certificates = []tls.Certificate{cert}
	cl := sb.client(t, sb.ssl, kgo.DialTLSConfig(tc), kgo.ConsumerGroup("alice-g"))
	produceConsume(t, cl, "alice-orders", 10)

	other := sb.client(t, sb.ssl, kgo.DialTLSConfig(tc))
	err = other.ProduceSync(ctx, &kgo.Record{Topic: "payroll", Value: []byte("x")}).FirstErr()
	if !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("alice produces to payroll: %v, want TOPIC_AUTHORIZATION_FAILED", err)
	}
	// The SSL listener without a client certificate: ANONYMOUS, denied.
	anon := sb.client(t, sb.ssl, kgo.DialTLSConfig(sb.tlsConfig()))
	err = anon.ProduceSync(ctx, &kgo.Record{Topic: "alice-orders", Value: []byte("x")}).FirstErr()
	if !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("anonymous produce: %v, want TOPIC_AUTHORIZATION_FAILED", err)
	}
	// An expired certificate fails the handshake, fast.
	expired := sb.tlsConfig()
	expired.Certificates = []tls.Certificate{sb.certs.Client("old", true)}
	start := time.Now()
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := sb.client(t, sb.ssl, kgo.DialTLSConfig(expired)).Ping(pctx); err == nil {
		t.Fatal("a client with an expired certificate connected")
	} else if time.Since(start) > 5*time.Second {
		t.Fatalf("expired certificate refused after %v: %v", time.Since(start), err)
	}
}

func TestSaramaSASLPlain(t *testing.T) {
	sb := startSecureBroker(t)
	ctx := context.Background()
	adm := sb.admin(t)
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "bob-plain"); err != nil {
		t.Fatal(err)
	}
	res, err := adm.CreateACLs(ctx, kadm.NewACLs().Allow("User:bob").Topics("bob-plain").Operations(kadm.OpWrite))
	if err != nil || res[0].Err != nil {
		t.Fatalf("create ACL: %v %+v", err, res)
	}
	produce := func(pass string) error {
		cfg := saramaConfig()
		cfg.Net.SASL.Enable = true
		cfg.Net.SASL.Mechanism = sarama.SASLTypePlaintext
		cfg.Net.SASL.Version = sarama.SASLHandshakeV1
		cfg.Net.SASL.User, cfg.Net.SASL.Password = "bob", pass
		cfg.Producer.Return.Successes = true
		cfg.Producer.RequiredAcks = sarama.WaitForAll
		p, err := sarama.NewSyncProducer([]string{sb.saslTxt}, cfg)
		if err != nil {
			return err
		}
		defer p.Close()
		_, _, err = p.SendMessage(&sarama.ProducerMessage{Topic: "bob-plain", Value: sarama.StringEncoder("hi")})
		return err
	}
	if err := produce(bobPass); err != nil {
		t.Fatalf("sarama PLAIN produce: %v", err)
	}
	start := time.Now()
	err = produce("wrong")
	if err == nil || !errors.Is(err, sarama.ErrSASLAuthenticationFailed) && !strings.Contains(err.Error(), "SASL") {
		t.Fatalf("sarama with a wrong password: %v", err)
	}
	if time.Since(start) > 10*time.Second {
		t.Fatalf("sarama wrong password took %v", time.Since(start))
	}
	ends, err := adm.ListEndOffsets(ctx, "bob-plain")
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := ends.Lookup("bob-plain", 0); o.Offset != 1 {
		t.Fatalf("end offset %+v, want 1", o)
	}
}

func TestKcatSASLSSLScram512(t *testing.T) {
	kcatPath(t)
	sb := startSecureBroker(t)
	common := []string{"-b", sb.saslSSL, "-X", "security.protocol=SASL_SSL", "-X", "sasl.mechanisms=SCRAM-SHA-512",
		"-X", "sasl.username=admin", "-X", "ssl.ca.location=" + sb.certs.CAFile}
	runKcat(t, "a\nb\nc\n", append(common, "-X", "sasl.password="+adminPass, "-P", "-t", "kcat-secure")...)
	out := runKcat(t, "", append(common, "-X", "sasl.password="+adminPass, "-C", "-t", "kcat-secure", "-o", "beginning", "-e", "-q")...)
	if strings.Fields(out)[0] != "a" || len(strings.Fields(out)) != 3 {
		t.Fatalf("kcat consumed %q", out)
	}
	// A wrong password: kcat reports the authentication failure and exits.
	out, err := kcatOutput(t, "", append(common, "-X", "sasl.password=wrong", "-L", "-m", "5")...)
	if err == nil || !strings.Contains(out, "Authentication failed") {
		t.Fatalf("kcat with a wrong password: %v\n%s", err, out)
	}
}

func TestUnauthenticatedLimits(t *testing.T) {
	sb := startSecureBroker(t, func(c *broker.Config) {
		c.Kafka.Security.MaxUnauthenticatedConns = 3
		c.Kafka.Security.AuthTimeout = 2 * time.Second
	})
	// ApiVersions is served before authentication, and advertises SASL.
	rc := dialWire(t, sb.saslTxt)
	av := rc.roundTrip(kmsg.NewPtrApiVersionsRequest(), 3, 1).(*kmsg.ApiVersionsResponse)
	keys := map[int16]bool{}
	for _, k := range av.ApiKeys {
		keys[k.ApiKey] = true
	}
	if !keys[17] || !keys[36] || !keys[29] || !keys[50] {
		t.Fatalf("SASL listener's ApiVersions %v lacks SaslHandshake, SaslAuthenticate, the ACL or credential APIs", av.ApiKeys)
	}
	// Anything else before authentication: the connection is closed.
	rc.write(reqFrame(kmsg.NewPtrMetadataRequest(), 12, 2))
	rc.expectClosed("Metadata before authentication")
	// A frame above the pre-authentication limit: closed unread.
	rc = dialWire(t, sb.saslTxt)
	rc.write([]byte{0, 0x10, 0, 0})
	rc.expectClosed("a 1 MiB frame before authentication")
	// SaslAuthenticate before SaslHandshake: ILLEGAL_SASL_STATE, closed.
	rc = dialWire(t, sb.saslTxt)
	auth := rc.roundTrip(&kmsg.SASLAuthenticateRequest{SASLAuthBytes: []byte("\x00bob\x00" + bobPass)}, 2, 3).(*kmsg.SASLAuthenticateResponse)
	if auth.ErrorCode != kerr.IllegalSaslState.Code {
		t.Fatalf("SaslAuthenticate first: code %d", auth.ErrorCode)
	}
	rc.expectClosed("after ILLEGAL_SASL_STATE")
	// An unknown mechanism: UNSUPPORTED_SASL_MECHANISM with the list.
	rc = dialWire(t, sb.saslTxt)
	hs := rc.roundTrip(&kmsg.SASLHandshakeRequest{Mechanism: "GSSAPI"}, 1, 4).(*kmsg.SASLHandshakeResponse)
	if hs.ErrorCode != kerr.UnsupportedSaslMechanism.Code || len(hs.SupportedMechanisms) != 3 {
		t.Fatalf("GSSAPI handshake: %+v", hs)
	}
	// Not authenticated within --auth-timeout: closed by the reaper.
	rc = dialWire(t, sb.saslTxt)
	if d := waitClosed(t, rc.c, 6*time.Second); d < 1900*time.Millisecond {
		t.Fatalf("an unauthenticated connection closed after %v, before the 2s auth timeout", d)
	}
	// Over the limit of unauthenticated connections: refused at accept;
	// a connection that authenticated no longer counts.
	plainAuth := func(rc *wireConn) {
		hs := rc.roundTrip(&kmsg.SASLHandshakeRequest{Mechanism: "PLAIN"}, 1, 5).(*kmsg.SASLHandshakeResponse)
		auth := rc.roundTrip(&kmsg.SASLAuthenticateRequest{SASLAuthBytes: []byte("\x00bob\x00" + bobPass)}, 2, 6).(*kmsg.SASLAuthenticateResponse)
		if hs.ErrorCode != 0 || auth.ErrorCode != 0 {
			t.Fatalf("PLAIN as bob: %d %d", hs.ErrorCode, auth.ErrorCode)
		}
	}
	authed := dialWire(t, sb.saslTxt)
	plainAuth(authed)
	var held []*wireConn
	for i := 0; i < 3; i++ {
		held = append(held, dialWire(t, sb.saslTxt))
		versionsOK(t, held[i], 7)
	}
	dialWire(t, sb.saslTxt).expectClosed("a fourth unauthenticated connection")
	versionsOK(t, authed, 8)
	held[0].c.Close()
	e2eWaitFor(t, 5*time.Second, "the closed unauthenticated connection to stop counting", func() bool {
		return sb.B.Listeners()[2].UnauthenticatedConns() < 3
	})
	plainAuth(dialWire(t, sb.saslTxt))
}

// versionsOK asserts an ApiVersions round trip succeeds on rc.
func versionsOK(t *testing.T, rc *wireConn, corr int32) {
	t.Helper()
	if resp := rc.roundTrip(kmsg.NewPtrApiVersionsRequest(), 3, corr).(*kmsg.ApiVersionsResponse); resp.ErrorCode != 0 {
		t.Fatalf("ApiVersions: error %d", resp.ErrorCode)
	}
}

// aclCase is one API in the ACL matrix: the binding that allows it, and
// a request whose answer says whether it was allowed.
type aclCase struct {
	api    string
	grant  kmsg.CreateACLsRequestCreation
	denied int16 // the error code a denied request gets
	call   func(ctx context.Context, cl *kgo.Client) (int16, error)
}

func grant(rt kmsg.ACLResourceType, name string, op kmsg.ACLOperation) kmsg.CreateACLsRequestCreation {
	c := kmsg.NewCreateACLsRequestCreation()
	c.ResourceType, c.ResourceName, c.ResourcePatternType = rt, name, kmsg.ACLResourcePatternTypeLiteral
	c.Principal, c.Host, c.Operation, c.PermissionType = "User:bob", "*", op, kmsg.ACLPermissionTypeAllow
	return c
}

// TestACLMatrix: every API ringlog serves that the ACLs govern, as bob,
// denied without a binding (with Kafka's error code) and allowed with
// exactly the binding Kafka requires, which is then deleted again.
func TestACLMatrix(t *testing.T) {
	sb := startSecureBroker(t)
	ctx := context.Background()
	admCl := sb.adminClient(t)
	adm := kadm.NewClient(admCl)
	for _, topic := range []string{"m-produce", "m-fetch", "m-list", "m-meta", "m-commit", "m-delete", "m-parts", "m-dconf", "m-aconf", "m-iconf", "m-epoch", "m-idem"} {
		if _, err := adm.CreateTopic(ctx, 1, 1, nil, topic); err != nil {
			t.Fatal(err)
		}
	}
	topics, err := adm.ListTopics(ctx, "m-fetch")
	if err != nil {
		t.Fatal(err)
	}
	fetchID := topics["m-fetch"].ID
	topicT, groupT, clusterT := kmsg.ACLResourceTypeTopic, kmsg.ACLResourceTypeGroup, kmsg.ACLResourceTypeCluster
	tauth, gauth, cauth := kerr.TopicAuthorizationFailed.Code, kerr.GroupAuthorizationFailed.Code, kerr.ClusterAuthorizationFailed.Code
	seed := func(cl *kgo.Client) *kgo.Broker { return cl.SeedBrokers()[0] }
	req := func(ctx context.Context, cl *kgo.Client, r kmsg.Request) (kmsg.Response, error) {
		return seed(cl).Request(ctx, r)
	}
	cases := []aclCase{
		{"Produce", grant(topicT, "m-produce", kmsg.ACLOperationWrite), tauth, func(ctx context.Context, cl *kgo.Client) (int16, error) {
			r := produceReq("m-produce", 1, testBatch(t, 1, 0, "m"))
			resp, err := req(ctx, cl, r)
			if err != nil {
				return 0, err
			}
			return resp.(*kmsg.ProduceResponse).Topics[0].Partitions[0].ErrorCode, nil
		}},
		{"Fetch", grant(topicT, "m-fetch", kmsg.ACLOperationRead), tauth, func(ctx context.Context, cl *kgo.Client) (int16, error) {
			r := kmsg.NewPtrFetchRequest()
			r.ReplicaID, r.MaxBytes = -1, 1<<20
			ft := kmsg.NewFetchRequestTopic()
			ft.Topic, ft.TopicID = "m-fetch", fetchID
			fp := kmsg.NewFetchRequestTopicPartition()
			fp.PartitionMaxBytes = 1 << 20
			ft.Partitions = append(ft.Partitions, fp)
			r.Topics = append(r.Topics, ft)
			resp, err := req(ctx, cl, r)
			if err != nil {
				return 0, err
			}
			return resp.(*kmsg.FetchResponse).Topics[0].Partitions[0].ErrorCode, nil
		}},
		{"ListOffsets", grant(topicT, "m-list", kmsg.ACLOperationDescribe), tauth, func(ctx context.Context, cl *kgo.Client) (int16, error) {
			r := kmsg.NewPtrListOffsetsRequest()
			lt := kmsg.NewListOffsetsRequestTopic()
			lt.Topic = "m-list"
			lp := kmsg.NewListOffsetsRequestTopicPartition()
			lp.Timestamp = -1
			lt.Partitions = append(lt.Partitions, lp)
			r.Topics = append(r.Topics, lt)
			resp, err := req(ctx, cl, r)
			if err != nil {
				return 0, err
			}
			return resp.(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0].ErrorCode, nil
		}},
		{"Metadata", grant(topicT, "m-meta", kmsg.ACLOperationDescribe), tauth, func(ctx context.Context, cl *kgo.Client) (int16, error) {
			r := kmsg.NewPtrMetadataRequest()
			mt := kmsg.NewMetadataRequestTopic()
			mt.Topic = kmsg.StringPtr("m-meta")
			r.Topics = append(r.Topics, mt)
			resp, err := req(ctx, cl, r)
			if err != nil {
				return 0, err
			}
			return resp.(*kmsg.MetadataResponse).Topics[0].ErrorCode, nil
		}},
		{"OffsetCommit", grant(groupT, "m-group-commit", kmsg.ACLOperationRead), gauth, func(ctx context.Context, cl *kgo.Client) (int16, error) {
			r := kmsg.NewPtrOffsetCommitRequest()
			r.Group, r.Generation = "m-group-commit", -1
			ct := kmsg.NewOffsetCommitRequestTopic()
			ct.Topic = "m-commit"
			cp := kmsg.NewOffsetCommitRequestTopicPartition()
			ct.Partitions = append(ct.Partitions, cp)
			r.Topics = append(r.Topics, ct)
			resp, err := req(ctx, cl, r)
			if err != nil {
				return 0, err
			}
			code := resp.(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode
			if code == tauth {
				return 0, nil // the group passed; the topic's READ is another check
			}
			return code, nil
		}},
		{"OffsetFetch", grant(groupT, "m-group-fetch", kmsg.ACLOperationDescribe), gauth, func(ctx context.Context, cl *kgo.Client) (int16, error) {
			// Both layouts: the client picks the version.
			r := kmsg.NewPtrOffsetFetchRequest()
			r.Group = "m-group-fetch"
			rg := kmsg.NewOffsetFetchRequestGroup()
			rg.Group = "m-group-fetch"
			r.Groups = append(r.Groups, rg)
			resp, err := req(ctx, cl, r)
			if err != nil {
				return 0, err
			}
			if of := resp.(*kmsg.OffsetFetchResponse); len(of.Groups) > 0 {
				return of.Groups[0].ErrorCode, nil
			}
			return resp.(*kmsg.OffsetFetchResponse).ErrorCode, nil
		}},
		{"FindCoordinator", grant(groupT, "m-group-find", kmsg.ACLOperationDescribe), gauth, func(ctx context.Context, cl *kgo.Client) (int16, error) {
			r := kmsg.NewPtrFindCoordinatorRequest()
			r.CoordinatorKey, r.CoordinatorKeys = "m-group-find", []string{"m-group-find"}
			resp, err := req(ctx, cl, r)
			if err != nil {
				return 0, err
			}
			if fc := resp.(*kmsg.FindCoordinatorResponse); len(fc.Coordinators) > 0 {
				return fc.Coordinators[0].ErrorCode, nil
			}
			return resp.(*kmsg.FindCoordinatorResponse).ErrorCode, nil
		}},
		{"JoinGroup", grant(groupT, "m-group-join", kmsg.ACLOperationRead), gauth, func(ctx context.Context, cl *kgo.Client) (int16, error) {
			r := kmsg.NewPtrJoinGroupRequest()
			r.Group, r.ProtocolType, r.SessionTimeoutMillis, r.RebalanceTimeoutMillis = "m-group-join", "consumer", 30000, 1000
			p := kmsg.NewJoinGroupRequestProtocol()
			p.Name = "range"
			r.Protocols = append(r.Protocols, p)
			resp, err := req(ctx, cl, r)
			if err != nil {
				return 0, err
			}
			code := resp.(*kmsg.JoinGroupResponse).ErrorCode
			if code == kerr.MemberIDRequired.Code {
				return 0, nil // admitted: the first join asks for a member id
			}
			return code, nil
		}},
		{"DescribeGroups", grant(groupT, "m-group-desc", kmsg.ACLOperationDescribe), gauth, func(ctx context.Context, cl *kgo.Client) (int16, error) {
			r := kmsg.NewPtrDescribeGroupsRequest()
			r.Groups = []string{"m-group-desc"}
			resp, err := req(ctx, cl, r)
			if err != nil {
				return 0, err
			}
			return resp.(*kmsg.DescribeGroupsResponse).Groups[0].ErrorCode, nil
		}},
		{"DeleteShareGroupOffsets", grant(groupT, "m-share-del", kmsg.ACLOperationDelete), gauth, func(ctx context.Context, cl *kgo.Client) (int16, error) {
			r := kmsg.NewPtrDeleteShareGroupOffsetsRequest()
			r.GroupID = "m-share-del"
			resp, err := req(ctx, cl, r)
			if err != nil {
				return 0, err
			}
			code := resp.(*kmsg.DeleteShareGroupOffsetsResponse).ErrorCode
			if code == kerr.GroupIDNotFound.Code {
				return 0, nil // allowed; there was no such group
			}
			return code, nil
		}},
		{"DeleteGroups", grant(groupT, "m-group-del", kmsg.ACLOperationDelete), gauth, func(ctx context.Context, cl *kgo.Client) (int16, error) {
			r := kmsg.NewPtrDeleteGroupsRequest()
			r.Groups = []string{"m-group-del"}
			resp, err := req(ctx, cl, r)
			if err != nil {
				return 0, err
			}
			code := resp.(*kmsg.DeleteGroupsResponse).Groups[0].ErrorCode
			if code == kerr.GroupIDNotFound.Code {
				return 0, nil // allowed; there was no such group
			}
			return code, nil
		}},
		{"CreateTopics", grant(topicT, "m-created", kmsg.ACLOperationCreate), tauth, func(ctx context.Context, cl *kgo.Client) (int16, error) {
			r := kmsg.NewPtrCreateTopicsRequest()
			ct := kmsg.NewCreateTopicsRequestTopic()
			ct.Topic, ct.NumPartitions, ct.ReplicationFactor = "m-created", 1, 1
			r.Topics = append(r.Topics, ct)
			r.TimeoutMillis = 5000
			resp, err := req(ctx, cl, r)
			if err != nil {
				return 0, err
			}
			tr := resp.(*kmsg.CreateTopicsResponse).Topics[0]
			// CREATE without DESCRIBE_CONFIGS: the topic, not its
			// configs (they include the broker defaults), as Kafka.
			if tr.ErrorCode == 0 && (tr.ConfigErrorCode != kerr.TopicAuthorizationFailed.Code || len(tr.Configs) != 0) {
				t.Errorf("CreateTopics with CREATE only: config error %d, %d configs; want TOPIC_AUTHORIZATION_FAILED and none", tr.ConfigErrorCode, len(tr.Configs))
			}
			return tr.ErrorCode, nil
		}},
		{"DeleteTopics", grant(topicT, "m-delete", kmsg.ACLOperationDelete), tauth, func(ctx context.Context, cl *kgo.Client) (int16, error) {
			r := kmsg.NewPtrDeleteTopicsRequest()
			dt := kmsg.NewDeleteTopicsRequestTopic()
			dt.Topic = kmsg.StringPtr("m-delete")
			r.Topics = append(r.Topics, dt)
			r.TopicNames = []string{"m-delete"}
			r.TimeoutMillis = 5000
			resp, err := req(ctx, cl, r)
			if err != nil {
				return 0, err
			}
			return resp.(*kmsg.DeleteTopicsResponse).Topics[0].ErrorCode, nil
		}},
		{"CreatePartitions", grant(topicT, "m-parts", kmsg.ACLOperationAlter), tauth, func(ctx context.Context, cl *kgo.Client) (int16, error) {
			r := kmsg.NewPtrCreatePartitionsRequest()
			ct := kmsg.NewCreatePartitionsRequestTopic()
			ct.Topic, ct.Count = "m-parts", 2
			r.Topics = append(r.Topics, ct)
			r.TimeoutMillis = 5000
			resp, err := req(ctx, cl, r)
			if err != nil {
				return 0, err
			}
			return resp.(*kmsg.CreatePartitionsResponse).Topics[0].ErrorCode, nil
		}},
		{"DescribeConfigs", grant(topicT, "m-dconf", kmsg.ACLOperationDescribeConfigs), tauth, func(ctx context.Context, cl *kgo.Client) (int16, error) {
			r := kmsg.NewPtrDescribeConfigsRequest()
			rr := kmsg.NewDescribeConfigsRequestResource()
			rr.ResourceType, rr.ResourceName = kmsg.ConfigResourceTypeTopic, "m-dconf"
			r.Resources = append(r.Resources, rr)
			resp, err := req(ctx, cl, r)
			if err != nil {
				return 0, err
			}
			return resp.(*kmsg.DescribeConfigsResponse).Resources[0].ErrorCode, nil
		}},
		{"AlterConfigs", grant(topicT, "m-aconf", kmsg.ACLOperationAlterConfigs), tauth, func(ctx context.Context, cl *kgo.Client) (int16, error) {
			r := kmsg.NewPtrAlterConfigsRequest()
			rr := kmsg.NewAlterConfigsRequestResource()
			rr.ResourceType, rr.ResourceName = kmsg.ConfigResourceTypeTopic, "m-aconf"
			c := kmsg.NewAlterConfigsRequestResourceConfig()
			c.Name, c.Value = "retention.ms", kmsg.StringPtr("3600000")
			rr.Configs = append(rr.Configs, c)
			r.Resources = append(r.Resources, rr)
			resp, err := req(ctx, cl, r)
			if err != nil {
				return 0, err
			}
			return resp.(*kmsg.AlterConfigsResponse).Resources[0].ErrorCode, nil
		}},
		{"IncrementalAlterConfigs", grant(clusterT, "kafka-cluster", kmsg.ACLOperationAlterConfigs), cauth, func(ctx context.Context, cl *kgo.Client) (int16, error) {
			r := kmsg.NewPtrIncrementalAlterConfigsRequest()
			rr := kmsg.NewIncrementalAlterConfigsRequestResource()
			rr.ResourceType, rr.ResourceName = kmsg.ConfigResourceTypeBroker, ""
			c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
			c.Name, c.Value = "log.retention.ms", kmsg.StringPtr("86400000")
			rr.Configs = append(rr.Configs, c)
			r.Resources = append(r.Resources, rr)
			resp, err := req(ctx, cl, r)
			if err != nil {
				return 0, err
			}
			return resp.(*kmsg.IncrementalAlterConfigsResponse).Resources[0].ErrorCode, nil
		}},
		{"OffsetForLeaderEpoch", grant(topicT, "m-epoch", kmsg.ACLOperationDescribe), tauth, func(ctx context.Context, cl *kgo.Client) (int16, error) {
			r := kmsg.NewPtrOffsetForLeaderEpochRequest()
			r.ReplicaID = -1
			et := kmsg.NewOffsetForLeaderEpochRequestTopic()
			et.Topic = "m-epoch"
			ep := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
			ep.CurrentLeaderEpoch, ep.LeaderEpoch = -1, 0
			et.Partitions = append(et.Partitions, ep)
			r.Topics = append(r.Topics, et)
			resp, err := req(ctx, cl, r)
			if err != nil {
				return 0, err
			}
			return resp.(*kmsg.OffsetForLeaderEpochResponse).Topics[0].Partitions[0].ErrorCode, nil
		}},
		{"InitProducerId", grant(clusterT, "kafka-cluster", kmsg.ACLOperationIdempotentWrite), cauth, func(ctx context.Context, cl *kgo.Client) (int16, error) {
			resp, err := req(ctx, cl, kmsg.NewPtrInitProducerIDRequest())
			if err != nil {
				return 0, err
			}
			return resp.(*kmsg.InitProducerIDResponse).ErrorCode, nil
		}},
		{"DescribeCluster", grant(clusterT, "kafka-cluster", kmsg.ACLOperationDescribe), cauth, func(ctx context.Context, cl *kgo.Client) (int16, error) {
			resp, err := req(ctx, cl, kmsg.NewPtrDescribeClusterRequest())
			if err != nil {
				return 0, err
			}
			return resp.(*kmsg.DescribeClusterResponse).ErrorCode, nil
		}},
		{"DescribeAcls", grant(clusterT, "kafka-cluster", kmsg.ACLOperationDescribe), cauth, func(ctx context.Context, cl *kgo.Client) (int16, error) {
			r := kmsg.NewPtrDescribeACLsRequest()
			r.ResourceType, r.ResourcePatternType = kmsg.ACLResourceTypeAny, kmsg.ACLResourcePatternTypeAny
			r.Operation, r.PermissionType = kmsg.ACLOperationAny, kmsg.ACLPermissionTypeAny
			resp, err := req(ctx, cl, r)
			if err != nil {
				return 0, err
			}
			return resp.(*kmsg.DescribeACLsResponse).ErrorCode, nil
		}},
		{"CreateAcls", grant(clusterT, "kafka-cluster", kmsg.ACLOperationAlter), cauth, func(ctx context.Context, cl *kgo.Client) (int16, error) {
			r := kmsg.NewPtrCreateACLsRequest()
			r.Creations = append(r.Creations, grant(topicT, "m-unrelated", kmsg.ACLOperationRead))
			resp, err := req(ctx, cl, r)
			if err != nil {
				return 0, err
			}
			return resp.(*kmsg.CreateACLsResponse).Results[0].ErrorCode, nil
		}},
		{"DescribeUserScramCredentials", grant(clusterT, "kafka-cluster", kmsg.ACLOperationDescribe), cauth, func(ctx context.Context, cl *kgo.Client) (int16, error) {
			resp, err := req(ctx, cl, kmsg.NewPtrDescribeUserSCRAMCredentialsRequest())
			if err != nil {
				return 0, err
			}
			return resp.(*kmsg.DescribeUserSCRAMCredentialsResponse).ErrorCode, nil
		}},
		{"AlterUserScramCredentials", grant(clusterT, "kafka-cluster", kmsg.ACLOperationAlter), cauth, func(ctx context.Context, cl *kgo.Client) (int16, error) {
			r := kmsg.NewPtrAlterUserSCRAMCredentialsRequest()
			d := kmsg.NewAlterUserSCRAMCredentialsRequestDeletion()
			d.Name, d.Mechanism = "nobody", 1
			r.Deletions = append(r.Deletions, d)
			resp, err := req(ctx, cl, r)
			if err != nil {
				return 0, err
			}
			code := resp.(*kmsg.AlterUserSCRAMCredentialsResponse).Results[0].ErrorCode
			if code == kerr.ResourceNotFound.Code {
				return 0, nil // allowed; nobody had no credential
			}
			return code, nil
		}},
		{"ElectLeaders", grant(clusterT, "kafka-cluster", kmsg.ACLOperationAlter), cauth, func(ctx context.Context, cl *kgo.Client) (int16, error) {
			r := kmsg.NewPtrElectLeadersRequest()
			rt := kmsg.NewElectLeadersRequestTopic()
			rt.Topic, rt.Partitions = "m-epoch", []int32{0}
			r.Topics = append(r.Topics, rt)
			resp, err := req(ctx, cl, r)
			if err != nil {
				return 0, err
			}
			el := resp.(*kmsg.ElectLeadersResponse)
			if el.ErrorCode != 0 {
				return el.ErrorCode, nil
			}
			if code := el.Topics[0].Partitions[0].ErrorCode; code != kerr.ElectionNotNeeded.Code {
				return code, nil
			}
			return 0, nil // allowed; a single broker has nothing to elect
		}},
		{"AlterPartitionReassignments", grant(clusterT, "kafka-cluster", kmsg.ACLOperationAlter), cauth, func(ctx context.Context, cl *kgo.Client) (int16, error) {
			r := kmsg.NewPtrAlterPartitionAssignmentsRequest()
			rt := kmsg.NewAlterPartitionAssignmentsRequestTopic()
			rt.Topic = "m-epoch"
			rt.Partitions = append(rt.Partitions, kmsg.NewAlterPartitionAssignmentsRequestTopicPartition())
			r.Topics = append(r.Topics, rt)
			resp, err := req(ctx, cl, r)
			if err != nil {
				return 0, err
			}
			ar := resp.(*kmsg.AlterPartitionAssignmentsResponse)
			if ar.ErrorCode != 0 {
				return ar.ErrorCode, nil
			}
			if code := ar.Topics[0].Partitions[0].ErrorCode; code != kerr.NoReassignmentInProgress.Code {
				return code, nil
			}
			return 0, nil // allowed; a cancel of nothing
		}},
		{"ListPartitionReassignments", grant(clusterT, "kafka-cluster", kmsg.ACLOperationDescribe), cauth, func(ctx context.Context, cl *kgo.Client) (int16, error) {
			resp, err := req(ctx, cl, kmsg.NewPtrListPartitionReassignmentsRequest())
			if err != nil {
				return 0, err
			}
			return resp.(*kmsg.ListPartitionReassignmentsResponse).ErrorCode, nil
		}},
	}
	bob := sb.client(t, sb.saslTxt, kgo.SASL(scram.Auth{User: "bob", Pass: bobPass}.AsSha512Mechanism()))
	for _, c := range cases {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		code, err := c.call(cctx, bob)
		if err != nil || code != c.denied {
			t.Fatalf("%s without an ACL: code %d (%v), want %d", c.api, code, err, c.denied)
		}
		cr := kmsg.NewPtrCreateACLsRequest()
		cr.Creations = []kmsg.CreateACLsRequestCreation{c.grant}
		if resp, err := cr.RequestWith(cctx, admCl); err != nil || resp.Results[0].ErrorCode != 0 {
			t.Fatalf("%s: grant: %v %+v", c.api, err, resp)
		}
		code, err = c.call(cctx, bob)
		if err != nil || code != 0 {
			t.Fatalf("%s with %v %s on %v %q: code %d (%v), want 0", c.api, c.grant.PermissionType, c.grant.Operation, c.grant.ResourceType, c.grant.ResourceName, code, err)
		}
		dr := kmsg.NewPtrDeleteACLsRequest()
		df := kmsg.NewDeleteACLsRequestFilter()
		df.ResourceType, df.ResourcePatternType = kmsg.ACLResourceTypeAny, kmsg.ACLResourcePatternTypeAny
		df.Principal, df.Operation, df.PermissionType = kmsg.StringPtr("User:bob"), kmsg.ACLOperationAny, kmsg.ACLPermissionTypeAny
		dr.Filters = append(dr.Filters, df)
		if resp, err := dr.RequestWith(cctx, admCl); err != nil || resp.Results[0].ErrorCode != 0 || len(resp.Results[0].MatchingACLs) == 0 {
			t.Fatalf("%s: delete bob's ACLs: %v %+v", c.api, err, resp)
		}
		cancel()
	}
	// Metadata for every topic shows bob none of them, admin all.
	resp, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, bob)
	if err != nil || len(resp.Topics) != 0 {
		t.Fatalf("bob's all-topics metadata: %v %d topics", err, len(resp.Topics))
	}
}

// TestScramCredentialsAPI: a user created with AlterUserScramCredentials
// (kadm salts the password client-side) authenticates at once, is
// described without secrets, survives a restart, and is gone once
// deleted; per-user errors are Kafka's.
func TestScramCredentialsAPI(t *testing.T) {
	sb := startSecureBroker(t)
	ctx := context.Background()
	adm := sb.admin(t)
	res, err := adm.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{User: "carol", Mechanism: kadm.ScramSha512, Iterations: 8192, Password: "carol-pw"}})
	if err != nil || res["carol"].Err != nil {
		t.Fatalf("upsert carol: %v %+v", err, res)
	}
	carol := func(pass string) error {
		cl := sb.client(t, sb.saslSSL, kgo.DialTLSConfig(sb.tlsConfig()), kgo.SASL(scram.Auth{User: "carol", Pass: pass}.AsSha512Mechanism()))
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return cl.Ping(pctx)
	}
	if err := carol("carol-pw"); err != nil {
		t.Fatalf("carol authenticates: %v", err)
	}
	desc, err := adm.DescribeUserSCRAMs(ctx, "carol")
	if err != nil || len(desc["carol"].CredInfos) != 1 || desc["carol"].CredInfos[0].Iterations != 8192 || desc["carol"].CredInfos[0].Mechanism != kadm.ScramSha512 {
		t.Fatalf("describe carol: %v %+v", err, desc)
	}
	// Errors per user: unknown user described, a bad iteration count, a
	// user named twice, a missing credential deleted.
	desc, err = adm.DescribeUserSCRAMs(ctx, "nobody")
	if err != nil || !errors.Is(desc["nobody"].Err, kerr.ResourceNotFound) {
		t.Fatalf("describe nobody: %v %+v", err, desc)
	}
	// kadm checks iterations itself: the raw request shows the broker's.
	alter := kmsg.NewPtrAlterUserSCRAMCredentialsRequest()
	for _, u := range []struct {
		name  string
		mech  int8
		iters int32
	}{{"erin", 1, 100}, {"dave", 2, 4096}, {"frank", 9, 4096}} {
		up := kmsg.NewAlterUserSCRAMCredentialsRequestUpsertion()
		up.Name, up.Mechanism, up.Iterations = u.name, u.mech, u.iters
		up.Salt, up.SaltedPassword = make([]byte, 16), make([]byte, 64)
		alter.Upsertions = append(alter.Upsertions, up)
	}
	del := kmsg.NewAlterUserSCRAMCredentialsRequestDeletion()
	del.Name, del.Mechanism = "dave", 1
	alter.Deletions = append(alter.Deletions, del)
	aresp, err := alter.RequestWith(ctx, sb.adminClient(t))
	if err != nil {
		t.Fatal(err)
	}
	codes := map[string]int16{}
	for _, r := range aresp.Results {
		codes[r.User] = r.ErrorCode
	}
	if codes["erin"] != kerr.UnacceptableCredential.Code || codes["dave"] != kerr.DuplicateResource.Code || codes["frank"] != kerr.UnsupportedSaslMechanism.Code || len(codes) != 3 {
		t.Fatalf("bad upserts answered %v", codes)
	}
	res, err = adm.AlterUserSCRAMs(ctx, []kadm.DeleteSCRAM{{User: "dave", Mechanism: kadm.ScramSha256}}, nil)
	if err != nil || !errors.Is(res["dave"].Err, kerr.ResourceNotFound) {
		t.Fatalf("delete a missing credential: %v %+v", err, res)
	}

	sb.Restart()
	sb.saslSSL = sb.B.Listeners()[0].Addr().String()
	sb.saslTxt = sb.B.Listeners()[2].Addr().String()
	if err := carol("carol-pw"); err != nil {
		t.Fatalf("carol after a restart: %v", err)
	}
	adm = sb.admin(t)
	if res, err := adm.AlterUserSCRAMs(ctx, []kadm.DeleteSCRAM{{User: "carol", Mechanism: kadm.ScramSha512}}, nil); err != nil || res["carol"].Err != nil {
		t.Fatalf("delete carol: %v %+v", err, res)
	}
	if err := carol("carol-pw"); !errors.Is(err, kerr.SaslAuthenticationFailed) {
		t.Fatalf("carol after deletion: %v", err)
	}
}

// TestTLSCertificateReload: ReloadTLS (SIGHUP) serves a new certificate
// to new handshakes; a bad file keeps the old one.
func TestTLSCertificateReload(t *testing.T) {
	sb := startSecureBroker(t)
	serial := func() string {
		c, err := tls.Dial("tcp", sb.ssl, sb.tlsConfig())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	before := serial()
	cert, key := sb.certs.Server("renewed")
	for from, to := range map[string]string{cert: sb.certs.ServerCert, key: sb.certs.ServerKey} {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := sb.B.ReloadTLS(); err != nil {
		t.Fatal(err)
	}
	after := serial()
	if after == before {
		t.Fatalf("serial %s before and after the reload", before)
	}
	if err := os.WriteFile(sb.certs.ServerCert, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := sb.B.ReloadTLS(); err == nil {
		t.Fatal("reloading a broken certificate succeeded")
	}
	if s := serial(); s != after {
		t.Fatalf("after a failed reload the serial is %s, want %s", s, after)
	}
}

// TestTLSHandshakesCountAgainstMaxConnections: connections still in
// their TLS handshake count toward --max-connections, so a flood of
// silent TCP connections cannot hold unbounded goroutines and sockets: at
// the limit a new connection displaces the oldest handshake. One that
// never completes its handshake is closed after --request-read-timeout
// when that is shorter than --auth-timeout.
func TestTLSHandshakesCountAgainstMaxConnections(t *testing.T) {
	sb := startSecureBroker(t, func(c *broker.Config) {
		c.Kafka.MaxConnections = 3
		c.Kafka.RequestReadTimeout = 500 * time.Millisecond
	})
	oldest := dialWire(t, sb.ssl)
	for i := 0; i < 2; i++ {
		dialWire(t, sb.ssl)
	}
	e2eWaitFor(t, 5*time.Second, "three connections handshaking", func() bool { return sb.B.Listeners()[1].HandshakingConns() == 3 })
	dialWire(t, sb.ssl)
	if d := waitClosed(t, oldest.c, 300*time.Millisecond); d > 250*time.Millisecond {
		t.Fatalf("the oldest handshake closed %v after a fourth connection came, want at once", d)
	}
	// The others time out (the read timeout is 500 ms).
	e2eWaitFor(t, 3*time.Second, "the handshakes to time out", func() bool { return sb.B.Listeners()[1].HandshakingConns() == 0 })
	c, err := tls.Dial("tcp", sb.ssl, sb.tlsConfig())
	if err != nil {
		t.Fatalf("a handshake after the silent ones timed out: %v", err)
	}
	c.Close()
}
