package quorum

import (
	"bytes"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
)

func TestParseVoters(t *testing.T) {
	vs, err := ParseVoters(" 3@h3:9093, 1@h1:9093 ,2@[::1]:9093")
	if err != nil {
		t.Fatal(err)
	}
	if got := vs.String(); got != "1@h1:9093,2@[::1]:9093,3@h3:9093" {
		t.Fatalf("canonical %q", got)
	}
	if v, ok := vs.Lookup(2); !ok || v.Addr != "[::1]:9093" {
		t.Fatalf("lookup 2: %+v %v", v, ok)
	}
	if _, ok := vs.Lookup(4); ok {
		t.Fatal("found 4")
	}
	back, err := votersOf(vs.configuration())
	if err != nil || back.String() != vs.String() {
		t.Fatalf("configuration round trip: %v %v", back, err)
	}
	for spec, want := range map[string]string{
		"":                      "empty",
		"1@h:1,1@h:2":           "node id 1 appears twice",
		"1@h:1,2@h:1":           "same address",
		"x@h:1":                 "non-negative integer",
		"-1@h:1":                "non-negative integer",
		"1@h":                   "missing port",
		"1@:1":                  "no host",
		"1@h:0":                 "1 to 65535",
		"1@h:65536":             "1 to 65535",
		"1h:1":                  "not id@host:port",
		"1@h:1,,2@h:2":          "not id@host:port",
		"99999999999@h:1":       "non-negative integer",
		"1@h:1, 2@h:2 , 3@h:1 ": "same address",
	} {
		_, err := ParseVoters(spec)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", spec, err, want)
		}
	}
}

func TestHelloRoundTrip(t *testing.T) {
	for _, h := range []hello{
		{NodeID: 1, Voters: "1@a:1,2@b:2"},
		{NodeID: -1, Refused: true, ClusterID: "c", Voters: "1@a:1", Reason: "no"},
		{NodeID: 7, ClusterID: strings.Repeat("x", 255), Voters: strings.Repeat("v", 65535), Reason: strings.Repeat("r", 65535)},
		{NodeID: 9, ClusterID: "c", Voters: "1@a:1", Join: "h:9"},
		{NodeID: 9, Voters: "1@a:1", Join: "h:9", Empty: true},
		{NodeID: 2, Refused: true, Voters: "1@a:1", Reason: "not the metadata leader", Established: true},
	} {
		got, err := readHello(bytes.NewReader(h.encode()))
		if err != nil || got != h {
			t.Fatalf("round trip of %+v: %+v %v", h, got, err)
		}
	}
	good := hello{NodeID: 1, ClusterID: "c", Voters: "1@a:1"}.encode()
	for i := 0; i < len(good); i++ {
		if _, err := readHello(bytes.NewReader(good[:i])); err == nil {
			t.Fatalf("truncated at %d: accepted", i)
		}
	}
	bad := func(at int, v byte) []byte {
		b := append([]byte(nil), good...)
		b[at] = v
		return b
	}
	for name, b := range map[string][]byte{
		"magic":                   bad(0, 'X'),
		"version":                 bad(4, 2),
		"flags":                   bad(9, 16),
		"empty without a join":    bad(9, flagEmpty),
		"join without an address": append(bad(9, flagJoin), 0, 0),
		"join address too long":   append(bad(9, flagJoin), 0xff, 0xff),
		"not utf8":                bad(11, 0xff),
		"http":                    []byte("GET / HTTP/1.1\r\n\r\n"),
	} {
		if _, err := readHello(bytes.NewReader(b)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// FuzzHello checks that readHello never panics or over-reads, and that
// what it accepts encodes back to the bytes it read.
func FuzzHello(f *testing.F) {
	f.Add(hello{NodeID: 1, Voters: "1@a:1,2@b:2"}.encode())
	f.Add(hello{NodeID: 3, Refused: true, ClusterID: "cid", Voters: "1@a:1", Reason: "voters differ"}.encode())
	f.Add([]byte("RLQR\x01\x00\x00\x00\x01\x00\xff"))
	f.Add(hello{NodeID: 9, ClusterID: "cid", Voters: "1@a:1", Join: "10.0.0.9:41000"}.encode())
	f.Add(hello{NodeID: 2, Voters: "1@a:1,2@b:2", Join: "b:2", Empty: true}.encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bytes.NewReader(b)
		h, err := readHello(r)
		if err != nil {
			return
		}
		used := len(b) - r.Len()
		if enc := h.encode(); !bytes.Equal(enc, b[:used]) {
			t.Fatalf("hello %+v re-encodes to %x, read from %x", h, enc, b[:used])
		}
	})
}

func TestHandshakeChecks(t *testing.T) {
	vs, _ := ParseVoters("1@a:1,2@b:2,3@c:3")
	cid := ""
	hs := &handshaker{nodeID: 1, voters: vs, clusterID: func() string { return cid }}
	ok := hello{NodeID: 2, Voters: vs.String()}
	if r := hs.check(ok, "b:2"); r != "" {
		t.Fatal(r)
	}
	cases := map[string]struct {
		h      hello
		dialed string
		cid    string
	}{
		"voters differ":                       {hello{NodeID: 2, Voters: "1@a:1,2@b:2"}, "", ""},
		"(a broker-only node's id)":           {hello{NodeID: 9, Voters: vs.String()}, "", ""},
		"is negative":                         {hello{NodeID: -1, Voters: vs.String()}, "", ""},
		"as this node itself":                 {hello{NodeID: 1, Voters: vs.String()}, "", ""},
		"but voter 2 answered":                {hello{NodeID: 2, Voters: vs.String()}, "z:9", ""},
		"(a broker-only node at its address)": {hello{NodeID: 9, Voters: vs.String()}, "z:9", ""},
		"but node 3 answered":                 {hello{NodeID: 3, Voters: vs.String()}, "b:2", ""},
		"cluster ids differ":                  {hello{NodeID: 2, Voters: vs.String(), ClusterID: "x"}, "", "y"},
		"":                                    {hello{NodeID: 2, Voters: vs.String(), ClusterID: "x"}, "", ""},
		"(unknown peer id is allowed)":        {hello{NodeID: 2, Voters: vs.String()}, "", "y"},
	}
	for want, c := range cases {
		cid = c.cid
		got := hs.check(c.h, c.dialed)
		if strings.HasPrefix(want, "(") || want == "" {
			if got != "" {
				t.Errorf("%s: refused: %s", want, got)
			}
			continue
		}
		if !strings.Contains(got, want) {
			t.Errorf("got %q, want %q", got, want)
		}
	}
}

func TestHclogAdapter(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug - 4}))
	h := newHclog(l, slog.LevelWarn).Named("raft").With("peer", 2)
	h.Info("chatty")
	h.Warn("heartbeat timeout", "term", 5)
	h.Named("x").Error("broken")
	h.StandardLogger(nil).Print("[ERROR] from the std logger")
	out := buf.String()
	for _, want := range []string{
		`level=WARN msg="heartbeat timeout" component=raft peer=2 term=5`,
		`level=ERROR msg=broken component=raft.x peer=2`,
		`level=ERROR msg="from the std logger" component=raft`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	if strings.Contains(out, "chatty") || h.IsInfo() || !h.IsWarn() || h.GetLevel() != hclog.Warn {
		t.Errorf("below-level message or level wrong:\n%s", out)
	}
	var _ io.Writer = h.StandardWriter(nil)
}
