package netio_test

import (
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ringlog/ringlog/broker"
	"github.com/ringlog/ringlog/internal/nativeproto"
)

// rawNative is a native-protocol connection spoken byte by byte, with no
// SDK in between: what an attacker on the native port can send.
type rawNative struct {
	t  *testing.T
	nc net.Conn
}

func dialRawNative(t *testing.T, addr string) *rawNative {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &rawNative{t: t, nc: nc}
}

// call sends [len][key][payload] and returns the response payload after
// its api key.
func (rn *rawNative) call(key byte, payload []byte) []byte {
	rn.t.Helper()
	frame := binary.BigEndian.AppendUint32(nil, uint32(len(payload)+1))
	frame = append(append(frame, key), payload...)
	if _, err := rn.nc.Write(frame); err != nil {
		rn.t.Fatalf("native write: %v", err)
	}
	rn.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	var hdr [4]byte
	if _, err := io.ReadFull(rn.nc, hdr[:]); err != nil {
		rn.t.Fatalf("native read (api %d): %v", key, err)
	}
	resp := make([]byte, binary.BigEndian.Uint32(hdr[:]))
	if _, err := io.ReadFull(rn.nc, resp); err != nil || len(resp) < 2 || resp[0] != key {
		rn.t.Fatalf("native response (api %d): %v %v", key, resp, err)
	}
	return resp[1:]
}

func nstr(b []byte, s string) []byte {
	return append(binary.BigEndian.AppendUint16(b, uint16(len(s))), s...)
}

func (rn *rawNative) produce(topic, value string) byte {
	p := nstr(nil, topic)
	p = binary.BigEndian.AppendUint32(p, 0) // partition 0
	p = binary.BigEndian.AppendUint32(p, 1) // one record
	p = binary.BigEndian.AppendUint32(p, 0xffffffff)
	p = binary.BigEndian.AppendUint32(p, uint32(len(value)))
	return rn.call(nativeproto.KeyProduce, append(p, value...))[0]
}

// fetch returns the error code and the values fetched from offset 0.
func (rn *rawNative) fetch(topic string) (byte, []string) {
	p := nstr(nil, topic)
	p = binary.BigEndian.AppendUint32(p, 0)
	p = binary.BigEndian.AppendUint64(p, 0)
	p = binary.BigEndian.AppendUint32(p, 1<<20)
	resp := rn.call(nativeproto.KeyFetch, p)
	var vals []string
	rest := resp[nativeproto.FetchResponseHeaderLen:]
	for len(rest) > 0 {
		rec, tail, err := nativeproto.ReadRecord(rest)
		if err != nil {
			rn.t.Fatalf("fetched record: %v", err)
		}
		vals = append(vals, string(rec.Value))
		rest = tail
	}
	return resp[0], vals
}

func (rn *rawNative) create(topic string) byte {
	return rn.call(nativeproto.KeyCreateTopic, binary.BigEndian.AppendUint32(nstr(nil, topic), 1))[0]
}

func (rn *rawNative) commit(group, topic string, off int64) byte {
	p := nstr(nstr(nil, group), topic)
	p = binary.BigEndian.AppendUint32(p, 0)
	return rn.call(nativeproto.KeyCommitOffset, binary.BigEndian.AppendUint64(p, uint64(off)))[0]
}

func (rn *rawNative) fetchOffset(group, topic string) (byte, int64) {
	resp := rn.call(nativeproto.KeyFetchOffset, binary.BigEndian.AppendUint32(nstr(nstr(nil, group), topic), 0))
	return resp[0], int64(binary.BigEndian.Uint64(resp[1:]))
}

// TestNativeListenerIsAuthorized: with the authorizer on (the README's
// security example: SASL_SSL listeners, a super user, the native listener
// left at its default), a raw native client has only the rights its
// principal's ACLs give it: none at first, for every API, whether the
// topic exists or not; then exactly those granted.
func TestNativeListenerIsAuthorized(t *testing.T) {
	sb := startSecureBroker(t)
	ctx := testCtx(t, 30*time.Second)
	adm := sb.admin(t)
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "paid"); err != nil {
		t.Fatal(err)
	}
	if err := sb.adminClient(t).ProduceSync(ctx, &kgo.Record{Topic: "paid", Value: []byte("secret")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	rn := dialRawNative(t, sb.NativeAddr)
	denied := nativeproto.CodeNotAuthorized
	if code, vals := rn.fetch("paid"); code != denied || vals != nil {
		t.Fatalf("fetch without READ: code %d, records %q", code, vals)
	}
	if code := rn.produce("paid", "forged"); code != denied {
		t.Fatalf("produce without WRITE: code %d", code)
	}
	if code := rn.produce("not-there", "x"); code != denied {
		t.Fatalf("produce to a missing topic without WRITE: code %d, want %d as for an existing one", code, denied)
	}
	if code := rn.create("sneaky"); code != nativeproto.CreateNotAuthorized {
		t.Fatalf("create without CREATE: status %d", code)
	}
	if code := rn.commit("g", "paid", 1); code != denied {
		t.Fatalf("commit without group READ: code %d", code)
	}
	if code, _ := rn.fetchOffset("g", "paid"); code != denied {
		t.Fatalf("fetch offset without group DESCRIBE: code %d", code)
	}
	topics, err := adm.ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if topics.Has("sneaky") || topics.Has("not-there") {
		t.Fatalf("a refused native client created topics: %v", topics.Names())
	}
	if n := testutil.ToFloat64(sb.Metrics.NativeDenied); n < 6 {
		t.Fatalf("ringlog_native_requests_denied_total = %v, want at least 6", n)
	}

	// Granted to User:ANONYMOUS, the native listener's principal.
	acls := kadm.NewACLs().Allow("User:ANONYMOUS").AllowHosts().
		Topics("paid").Groups("g").Operations(kadm.OpRead, kadm.OpWrite)
	if _, err := adm.CreateACLs(ctx, acls); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateACLs(ctx, kadm.NewACLs().Allow("User:ANONYMOUS").AllowHosts().Topics("fresh").Operations(kadm.OpCreate)); err != nil {
		t.Fatal(err)
	}
	if code, vals := rn.fetch("paid"); code != nativeproto.CodeOK || len(vals) != 1 || vals[0] != "secret" {
		t.Fatalf("fetch with READ: code %d, records %q", code, vals)
	}
	if code := rn.produce("paid", "allowed"); code != nativeproto.CodeOK {
		t.Fatalf("produce with WRITE: code %d", code)
	}
	if code := rn.create("fresh"); code != nativeproto.CreateOK {
		t.Fatalf("create with CREATE on the topic: status %d", code)
	}
	if code := rn.create("other"); code != nativeproto.CreateNotAuthorized {
		t.Fatalf("create of a topic CREATE does not name: status %d", code)
	}
	if code := rn.commit("g", "paid", 2); code != nativeproto.CodeOK {
		t.Fatalf("commit with READ on group and topic: code %d", code)
	}
	if code, off := rn.fetchOffset("g", "paid"); code != nativeproto.CodeOK || off != 2 {
		t.Fatalf("fetch offset: code %d offset %d", code, off)
	}
	if code := rn.commit("h", "paid", 2); code != denied {
		t.Fatalf("commit for a group without READ: code %d", code)
	}
	if code, vals := rn.fetch("paid"); code != nativeproto.CodeOK || len(vals) != 2 || vals[1] != "allowed" {
		t.Fatalf("records after the allowed produce: %d %q", code, vals)
	}
}

// TestNativePrincipalOfItsOwn: --native-principal names who native
// requests act as; ACLs for User:ANONYMOUS no longer apply to them.
func TestNativePrincipalOfItsOwn(t *testing.T) {
	sb := startSecureBroker(t, func(c *broker.Config) { c.Security.NativePrincipal = "User:native" })
	ctx := testCtx(t, 30*time.Second)
	adm := sb.admin(t)
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "n"); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateACLs(ctx, kadm.NewACLs().Allow("User:ANONYMOUS").AllowHosts().Topics("n").Operations(kadm.OpWrite)); err != nil {
		t.Fatal(err)
	}
	rn := dialRawNative(t, sb.NativeAddr)
	if code := rn.produce("n", "x"); code != nativeproto.CodeNotAuthorized {
		t.Fatalf("produce as User:native with an ACL for ANONYMOUS only: code %d", code)
	}
	if _, err := adm.CreateACLs(ctx, kadm.NewACLs().Allow("User:native").AllowHosts().Topics("n").Operations(kadm.OpWrite)); err != nil {
		t.Fatal(err)
	}
	if code := rn.produce("n", "x"); code != nativeproto.CodeOK {
		t.Fatalf("produce as User:native with its ACL: code %d", code)
	}
	if code, _ := rn.fetch("n"); code != nativeproto.CodeNotAuthorized {
		t.Fatalf("fetch as User:native without READ: code %d", code)
	}
}
