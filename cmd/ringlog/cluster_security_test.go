package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/ringlog/ringlog/internal/testcerts"
	"github.com/ringlog/ringlog/internal/testenv"
)

// secureCluster is a testCluster whose brokers also have a SASL_SSL
// listener: --kafka-addr stays the PLAINTEXT inter-broker listener.
type secureCluster struct {
	*testCluster
	certs   *testcerts.Set
	saslSSL []string // by node id - 1
}

func newSecureCluster(t testing.TB, n int) *secureCluster {
	c := &secureCluster{testCluster: newTestCluster(t, n), certs: testcerts.New(t)}
	for _, p := range freePorts(t, n) {
		c.saslSSL = append(c.saslSSL, "127.0.0.1:"+strconv.Itoa(p))
	}
	return c
}

func (c *secureCluster) start(id int, extra ...string) *serveProc {
	// Advertised as localhost: Metadata must hand out the advertised
	// address, not the bound one.
	args := append(c.args(id, c.voters), "--listeners", "SASL_SSL://"+c.saslSSL[id-1],
		"--advertised-listeners", "SASL_SSL://"+strings.Replace(c.saslSSL[id-1], "127.0.0.1", "localhost", 1),
		"--tls-cert", c.certs.ServerCert, "--tls-key", c.certs.ServerKey, "--sasl-mechanisms", "SCRAM-SHA-512,PLAIN")
	c.procs[id-1] = startServe(c.t, c.dirs[id-1], append(args, extra...)...)
	return c.procs[id-1]
}

// saslClient connects to the SASL_SSL listeners as user.
func (c *secureCluster) saslClient(t *testing.T, user, pass string, opts ...kgo.Opt) *kgo.Client {
	return procClient(t, c.saslSSL[0], append([]kgo.Opt{kgo.SeedBrokers(c.saslSSL...),
		kgo.DialTLSConfig(&tls.Config{RootCAs: c.certs.CAPool, ServerName: "localhost"}),
		kgo.SASL(scram.Auth{User: user, Pass: pass}.AsSha512Mechanism())}, opts...)...)
}

// nonController is a broker id that is not the controller in v.
func nonController(v view) int {
	if v.Controller == 1 {
		return 2
	}
	return 1
}

// TestClusterSCRAMOverSASLSSL: credentials created through one broker
// are committed to the metadata quorum and authenticate clients on every
// broker's SASL_SSL listener, and Metadata on that listener sends clients
// to the other brokers' SASL_SSL listeners (never the PLAINTEXT ones).
func TestClusterSCRAMOverSASLSSL(t *testing.T) {
	c := newSecureCluster(t, 3)
	for id := 1; id <= 3; id++ {
		c.start(id)
	}
	ctx := deadlineCtx(t, 3*time.Minute)
	v := c.converge(ctx, 3)

	// A user created on a broker that is not the controller (forwarded).
	other := nonController(v)
	adm := kadm.NewClient(procClient(t, c.kafka[other-1]))
	res, err := adm.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{User: "alice", Mechanism: kadm.ScramSha512, Iterations: 4096, Password: "alice-secret"}})
	if err != nil || res.Error() != nil {
		t.Fatalf("create alice through broker %d: %v %v", other, err, res.Error())
	}
	for i, addr := range c.kafka {
		adm := kadm.NewClient(procClient(t, addr))
		waitFor(t, ctx, fmt.Sprintf("broker %d to describe alice's credential", i+1), func() bool {
			d, err := adm.DescribeUserSCRAMs(ctx, "alice")
			return err == nil && d.Error() == nil && len(d["alice"].CredInfos) == 1 && d["alice"].CredInfos[0].Iterations == 4096
		})
	}

	// The CLI manages a cluster's users over the Kafka API; a cluster
	// member's data directory has none to edit.
	pw := filepath.Join(t.TempDir(), "bob.pw")
	if err := os.WriteFile(pw, []byte("bob-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := runBinary(t, time.Minute, "user", "add", "--brokers", c.kafka[other-1], "--name", "bob",
		"--password-file", pw); code != 0 || !strings.Contains(out, "user bob: SCRAM-SHA-256 credential set") ||
		!strings.Contains(out, "user bob: SCRAM-SHA-512 credential set") {
		t.Fatalf("user add --brokers: exit %d, %q %q", code, out, errOut)
	}
	waitFor(t, ctx, "user list --brokers to show alice and bob", func() bool {
		code, out, _ := runBinary(t, time.Minute, "user", "list", "--brokers", c.kafka[v.Controller-1])
		return code == 0 && strings.Contains(out, "alice") && strings.Contains(out, "bob")
	})
	if code, _, errOut := runBinary(t, time.Minute, "user", "list", "--data-dir", c.dirs[0]); code != 1 || !strings.Contains(errOut, "--brokers") {
		t.Fatalf("user list on a cluster member's data directory: exit %d, %q; want 1 and a pointer to --brokers", code, errOut)
	}
	if code, out, errOut := runBinary(t, time.Minute, "user", "delete", "--brokers", c.kafka[2], "--name", "bob"); code != 0 || !strings.Contains(out, "SCRAM-SHA-512 credential deleted") {
		t.Fatalf("user delete --brokers: exit %d, %q %q", code, out, errOut)
	}

	// Every broker's SASL_SSL listener knows alice; Metadata on it lists
	// the SASL_SSL addresses.
	for i, addr := range c.saslSSL {
		cl := procClient(t, addr, kgo.DialTLSConfig(&tls.Config{RootCAs: c.certs.CAPool, ServerName: "localhost"}),
			kgo.SASL(scram.Auth{User: "alice", Pass: "alice-secret"}.AsSha512Mechanism()))
		m, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl.Broker(-2147483648))
		if err != nil {
			t.Fatalf("Metadata over SASL_SSL on broker %d: %v", i+1, err)
		}
		var got []string
		for _, b := range m.Brokers {
			got = append(got, fmt.Sprintf("%s:%d", b.Host, b.Port))
		}
		slices.Sort(got)
		var want []string
		for _, a := range c.saslSSL {
			want = append(want, strings.Replace(a, "127.0.0.1", "localhost", 1))
		}
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("broker %d's SASL_SSL Metadata lists %v, want the advertised SASL_SSL listeners %v", i+1, got, want)
		}
	}
	// Produce with acks=all to a replicated topic and read it back, all
	// over SASL_SSL.
	if r, err := adm.CreateTopic(ctx, 3, 3, nil, "secure"); err != nil || r.Err != nil {
		t.Fatalf("create secure: %v %v", err, r.Err)
	}
	cl := c.saslClient(t, "alice", "alice-secret", kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DefaultProduceTopic("secure"))
	const n = 60
	for i := 0; i < n; i++ {
		cl.Produce(ctx, kgo.StringRecord("r"+strconv.Itoa(i)), func(_ *kgo.Record, err error) {
			if err != nil {
				t.Errorf("produce over SASL_SSL: %v", err)
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	consumer := c.saslClient(t, "alice", "alice-secret", kgo.ConsumeTopics("secure"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	seen := map[string]bool{}
	for len(seen) < n && ctx.Err() == nil {
		consumer.PollFetches(ctx).EachRecord(func(r *kgo.Record) { seen[string(r.Value)] = true })
	}
	if len(seen) != n {
		t.Fatalf("read %d of %d records back over SASL_SSL", len(seen), n)
	}

	// librdkafka (kcat) over SASL_SSL with SCRAM-SHA-512: it follows
	// Metadata to each partition leader's SASL_SSL listener.
	kc := []string{"-b", c.saslSSL[2], "-X", "security.protocol=SASL_SSL", "-X", "sasl.mechanisms=SCRAM-SHA-512",
		"-X", "sasl.username=alice", "-X", "sasl.password=alice-secret", "-X", "ssl.ca.location=" + c.certs.CAFile}
	testenv.RunKcat(t, "k1\nk2\nk3\nk4\nk5\nk6\n", append(kc, "-P", "-t", "secure", "-X", "acks=all")...)
	kout := testenv.RunKcat(t, "", append(kc, "-C", "-t", "secure", "-o", "beginning", "-e", "-q")...)
	for i := 1; i <= 6; i++ {
		if !strings.Contains(kout, "k"+strconv.Itoa(i)+"\n") {
			t.Fatalf("kcat read back %q over SASL_SSL, want k1..k6", kout)
		}
	}
	if out, err := testenv.KcatOutput(t, "", append(kc[:len(kc)-4], "-X", "sasl.password=wrong", "-X", "ssl.ca.location="+c.certs.CAFile, "-L", "-m", "5")...); err == nil ||
		!strings.Contains(out, "Authentication failed") {
		t.Fatalf("kcat with a wrong password: %v\n%s", err, out)
	}

	// A wrong password fails fast on any broker.
	bad := c.saslClient(t, "alice", "wrong")
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := kmsg.NewPtrMetadataRequest().RequestWith(wctx, bad.Broker(-2147483648)); !errors.Is(err, kerr.SaslAuthenticationFailed) {
		t.Fatalf("wrong password: got %v, want SASL_AUTHENTICATION_FAILED", err)
	}

	// Deleting the credential (through another broker) locks alice out
	// everywhere.
	adm = kadm.NewClient(procClient(t, c.kafka[v.Controller-1]))
	res, err = adm.AlterUserSCRAMs(ctx, []kadm.DeleteSCRAM{{User: "alice", Mechanism: kadm.ScramSha512}}, nil)
	if err != nil || res.Error() != nil {
		t.Fatalf("delete alice: %v %v", err, res.Error())
	}
	res, _ = adm.AlterUserSCRAMs(ctx, []kadm.DeleteSCRAM{{User: "alice", Mechanism: kadm.ScramSha512}}, nil)
	if err := res.Error(); !errors.Is(err, kerr.ResourceNotFound) {
		t.Fatalf("deleting alice twice: got %v, want RESOURCE_NOT_FOUND", err)
	}
	for i, addr := range c.saslSSL {
		waitFor(t, ctx, fmt.Sprintf("broker %d to refuse alice", i+1), func() bool {
			cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DialTLSConfig(&tls.Config{RootCAs: c.certs.CAPool, ServerName: "localhost"}),
				kgo.SASL(scram.Auth{User: "alice", Pass: "alice-secret"}.AsSha512Mechanism()))
			if err != nil {
				return false
			}
			defer cl.Close()
			_, err = kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl.Broker(-2147483648))
			return errors.Is(err, kerr.SaslAuthenticationFailed)
		})
	}
}

// TestClusterAuthorizerWithMTLSBetweenBrokers runs three brokers whose
// inter-broker listener is SSL with required client certificates, the
// brokers' certificate principal a super user, and the authorizer on:
// replication and forwarding work as that principal, ACLs created on one
// broker reach every broker, and a SASL_SSL client gets exactly what its
// ACLs allow, resource by resource, whichever broker it asks.
func TestClusterAuthorizerWithMTLSBetweenBrokers(t *testing.T) {
	c := newSecureCluster(t, 3)
	bcert, bkey := c.certs.Broker("broker")
	pair, err := tls.LoadX509KeyPair(bcert, bkey)
	if err != nil {
		t.Fatal(err)
	}
	mtls := kgo.DialTLSConfig(&tls.Config{RootCAs: c.certs.CAPool, ServerName: "localhost", Certificates: []tls.Certificate{pair}})
	c.clientOpts = []kgo.Opt{mtls}
	for id := 1; id <= 3; id++ {
		c.start(id, "--kafka-security-protocol", "SSL", "--tls-cert", bcert, "--tls-key", bkey, "--tls-client-ca", c.certs.CAFile,
			"--tls-client-auth", "required", "--authorizer", "--super-users", "User:CN=broker,O=ringlog-test;User:admin")
	}
	ctx := deadlineCtx(t, 3*time.Minute)
	v := c.converge(ctx, 3)
	other := nonController(v)

	// The first user and its ACLs come from a super user (here the
	// brokers' own certificate), through a broker that is not the
	// controller.
	super := kadm.NewClient(procClient(t, c.kafka[other-1], mtls))
	res, err := super.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{User: "alice", Mechanism: kadm.ScramSha512, Iterations: 4096, Password: "alice-secret"}})
	if err != nil || res.Error() != nil {
		t.Fatalf("create alice: %v %v", err, res.Error())
	}
	acl := kadm.NewACLs().Allow("User:alice").Topics("team-").ResourcePatternType(kadm.ACLPatternPrefixed).
		Operations(kadm.OpDescribe, kadm.OpWrite, kadm.OpCreate, kadm.OpRead)
	cr, err := super.CreateACLs(ctx, acl)
	if err != nil || len(cr) != 4 {
		t.Fatalf("create alice's ACLs: %v %+v", err, cr)
	}
	for _, r := range cr {
		if r.Err != nil {
			t.Fatalf("create alice's ACLs: %v", r.Err)
		}
	}
	var secretID [16]byte
	for _, topic := range []string{"team-orders", "secret"} {
		r, err := super.CreateTopic(ctx, 3, 3, nil, topic)
		if err != nil || r.Err != nil {
			t.Fatalf("create %s: %v %v", topic, err, r.Err)
		}
		secretID = r.ID
	}
	// waitACLs waits until every broker describes one resource of typ
	// with n ACLs.
	waitACLs := func(what string, typ kmsg.ACLResourceType, n int) {
		for i, addr := range c.kafka {
			cl := procClient(t, addr, mtls)
			waitFor(t, ctx, fmt.Sprintf("broker %d to describe %s", i+1, what), func() bool {
				req := kmsg.NewPtrDescribeACLsRequest()
				req.ResourceType, req.ResourcePatternType = typ, kmsg.ACLResourcePatternTypeAny
				req.Operation, req.PermissionType = kmsg.ACLOperationAny, kmsg.ACLPermissionTypeAny
				resp, err := req.RequestWith(ctx, cl.Broker(-2147483648))
				return err == nil && resp.ErrorCode == 0 && len(resp.Resources) == 1 && len(resp.Resources[0].ACLs) == n
			})
		}
	}
	waitACLs("alice's 4 ACLs", kmsg.ACLResourceTypeAny, 4)

	// ringlog acl manages a cluster's ACLs over the same APIs: added
	// through one broker, listed by every broker once committed, deleted
	// through another.
	cliTLS := []string{"--security-protocol", "SSL", "--tls-ca", c.certs.CAFile, "--tls-cert", bcert, "--tls-key", bkey, "--tls-server-name", "localhost"}
	aclCLI := func(broker int, args ...string) (int, string, string) {
		return runBinary(t, time.Minute, append(append(args, "--brokers", c.kafka[broker-1]), cliTLS...)...)
	}
	if code, out, errOut := aclCLI(other, "acl", "add", "--principal", "User:carol", "--operation", "read", "--group", "team-billing"); code != 0 || !strings.Contains(out, "added 1 ACL") {
		t.Fatalf("ringlog acl add through broker %d: exit %d\n%s%s", other, code, out, errOut)
	}
	for id := 1; id <= 3; id++ {
		waitFor(t, ctx, fmt.Sprintf("ringlog acl list on broker %d to show carol's ACL", id), func() bool {
			code, out, _ := aclCLI(id, "acl", "list", "--principal", "User:carol")
			return code == 0 && strings.Contains(out, "team-billing")
		})
	}
	if code, out, errOut := aclCLI(int(v.Controller), "acl", "delete", "--principal", "User:carol"); code != 0 || !strings.Contains(out, "deleted 1 ACL") {
		t.Fatalf("ringlog acl delete through broker %d: exit %d\n%s%s", v.Controller, code, out, errOut)
	}
	waitACLs("alice's 4 ACLs and no more", kmsg.ACLResourceTypeAny, 4)

	// alice sees and writes team-* only, on every broker.
	alice := c.saslClient(t, "alice", "alice-secret", kgo.RequiredAcks(kgo.AllISRAcks()))
	m, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, alice.Broker(-2147483648))
	if err != nil {
		t.Fatal(err)
	}
	var topics []string
	for _, mt := range m.Topics {
		topics = append(topics, *mt.Topic)
	}
	if !slices.Equal(topics, []string{"team-orders"}) {
		t.Fatalf("alice's Metadata lists %v, want only team-orders", topics)
	}
	for i := 0; i < 30; i++ {
		if err := alice.ProduceSync(ctx, &kgo.Record{Topic: "team-orders", Value: []byte("v" + strconv.Itoa(i))}).FirstErr(); err != nil {
			t.Fatalf("alice's acks=all produce to team-orders (replicated over mTLS): %v", err)
		}
	}
	if err := alice.ProduceSync(ctx, &kgo.Record{Topic: "secret", Value: []byte("x")}).FirstErr(); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("alice's produce to secret: got %v, want TOPIC_AUTHORIZATION_FAILED", err)
	}
	// DeleteTopics tells alice nothing about secret, which she may not
	// DESCRIBE: the same answer as for a topic that does not exist, and
	// by id no name.
	del, err := kadm.NewClient(alice).DeleteTopics(ctx, "secret", "secreu")
	if err != nil {
		t.Fatal(err)
	}
	hidden, absent := del["secret"], del["secreu"]
	if hidden.Topic = absent.Topic; !errors.Is(hidden.Err, kerr.TopicAuthorizationFailed) || hidden != absent {
		t.Fatalf("alice deletes secret and a missing topic: %+v and %+v, want the same TOPIC_AUTHORIZATION_FAILED", del["secret"], absent)
	}
	dreq := kmsg.NewPtrDeleteTopicsRequest()
	dt := kmsg.NewDeleteTopicsRequestTopic()
	dt.TopicID = secretID
	dreq.Topics, dreq.TimeoutMillis = append(dreq.Topics, dt), 5000
	if dresp, err := dreq.RequestWith(ctx, alice); err != nil || dresp.Topics[0].ErrorCode != kerr.TopicAuthorizationFailed.Code || dresp.Topics[0].Topic != nil {
		t.Fatalf("alice deletes secret by id: %v %+v, want TOPIC_AUTHORIZATION_FAILED without its name", err, dresp)
	}

	// Transactions with the authorizer and mTLS between the brokers: the
	// partition leaders verify alice's produce with her coordinator and
	// the coordinator writes markers to the other leaders, as the
	// brokers' super-user principal.
	tacl := kadm.NewACLs().Allow("User:alice").TransactionalIDs("team-").ResourcePatternType(kadm.ACLPatternPrefixed).
		Operations(kadm.OpWrite, kadm.OpDescribe)
	if cr, err := super.CreateACLs(ctx, tacl); err != nil || len(cr) != 2 || cr[0].Err != nil || cr[1].Err != nil {
		t.Fatalf("create alice's transactional-id ACLs: %v %+v", err, cr)
	}
	waitACLs("alice's transactional-id ACLs", kmsg.ACLResourceTypeTransactionalId, 2)
	txn := c.saslClient(t, "alice", "alice-secret", kgo.TransactionalID("team-txn"), kgo.DefaultProduceTopic("team-orders"),
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	if err := txn.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 6; i++ {
		if err := txn.ProduceSync(ctx, &kgo.Record{Value: []byte("t" + strconv.Itoa(i))}).FirstErr(); err != nil {
			t.Fatalf("alice's transactional produce: %v", err)
		}
	}
	if err := txn.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatalf("alice's commit (markers to the other leaders over mTLS): %v", err)
	}
	rc := c.saslClient(t, "alice", "alice-secret", kgo.ConsumeTopics("team-orders"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	seen := 0
	for seen < 36 && ctx.Err() == nil {
		fs := rc.PollFetches(ctx)
		seen += fs.NumRecords()
	}
	if seen != 36 {
		t.Fatalf("alice's read_committed consumer saw %d records, want the 30 plain and 6 committed", seen)
	}
	unlisted := c.saslClient(t, "alice", "alice-secret", kgo.TransactionalID("other-txn"), kgo.DefaultProduceTopic("team-orders"))
	if err := unlisted.BeginTransaction(); err == nil {
		err = unlisted.ProduceSync(ctx, &kgo.Record{Value: []byte("x")}).FirstErr()
		if !errors.Is(err, kerr.TransactionalIDAuthorizationFailed) {
			t.Fatalf("a transactional id without ACLs: got %v, want TRANSACTIONAL_ID_AUTHORIZATION_FAILED", err)
		}
	} else if !errors.Is(err, kerr.TransactionalIDAuthorizationFailed) {
		t.Fatalf("a transactional id without ACLs: got %v, want TRANSACTIONAL_ID_AUTHORIZATION_FAILED", err)
	}

	// CreateTopics on a broker that is not the controller: the allowed
	// topic is created (forwarded), the other refused here, in order.
	direct := procClient(t, c.saslSSL[other-1], kgo.DialTLSConfig(&tls.Config{RootCAs: c.certs.CAPool, ServerName: "localhost"}),
		kgo.SASL(scram.Auth{User: "alice", Pass: "alice-secret"}.AsSha512Mechanism()))
	ct := kmsg.NewPtrCreateTopicsRequest()
	for _, name := range []string{"team-new", "other-new"} {
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, 1, 3
		ct.Topics = append(ct.Topics, rt)
	}
	ctr, err := ct.RequestWith(ctx, direct.Broker(-2147483648))
	if err != nil || len(ctr.Topics) != 2 || ctr.Topics[0].Topic != "team-new" || ctr.Topics[0].ErrorCode != 0 ||
		ctr.Topics[1].Topic != "other-new" || ctr.Topics[1].ErrorCode != kerr.TopicAuthorizationFailed.Code {
		t.Fatalf("alice's CreateTopics [team-new other-new] on broker %d: %v %+v", other, err, ctr)
	}
	// Cluster-level changes need ALTER on the cluster.
	ares, err := kadm.NewClient(direct).AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{User: "mallory", Mechanism: kadm.ScramSha512, Iterations: 4096, Password: "x"}})
	if err == nil {
		err = ares.Error()
	}
	if !errors.Is(err, kerr.ClusterAuthorizationFailed) {
		t.Fatalf("alice creating a user: got %v, want CLUSTER_AUTHORIZATION_FAILED", err)
	}

	// Deleting the ACLs (through a broker that is not the controller)
	// takes team-orders away from alice everywhere.
	dr, err := super.DeleteACLs(ctx, kadm.NewACLs().Allow("User:alice").AllowHosts("*").Topics("team-").ResourcePatternType(kadm.ACLPatternPrefixed).Operations(kadm.OpAny))
	if err != nil || len(dr) != 1 || dr[0].Err != nil || len(dr[0].Deleted) != 4 {
		t.Fatalf("delete alice's ACLs: %v %+v", err, dr)
	}
	for i, addr := range c.saslSSL {
		waitFor(t, ctx, fmt.Sprintf("broker %d to hide team-orders from alice", i+1), func() bool {
			cl := procClient(t, addr, kgo.DialTLSConfig(&tls.Config{RootCAs: c.certs.CAPool, ServerName: "localhost"}),
				kgo.SASL(scram.Auth{User: "alice", Pass: "alice-secret"}.AsSha512Mechanism()))
			defer cl.Close()
			m, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl.Broker(-2147483648))
			return err == nil && len(m.Topics) == 0
		})
	}
}
