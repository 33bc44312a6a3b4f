package security

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"errors"
	"hash"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/sasl"
	kscram "github.com/twmb/franz-go/pkg/sasl/scram"
	"github.com/xdg-go/pbkdf2"
	"github.com/xdg-go/scram"
)

var bothScram = []Mechanism{ScramSHA256, ScramSHA512}

// xdgExchange runs xdg-go/scram's client against a server exchange and
// returns the principal, or the server's error. The client must accept
// the server's signature.
func xdgExchange(t *testing.T, s *Store, m Mechanism, user, pass string) (string, error) {
	t.Helper()
	gen := scram.SHA256
	if m == ScramSHA512 {
		gen = scram.SHA512
	}
	cl, err := gen.NewClient(user, pass, "")
	if err != nil {
		t.Fatal(err)
	}
	conv := cl.NewConversation()
	ex := NewScram(s, m)
	c1, err := conv.Step("")
	if err != nil {
		t.Fatal(err)
	}
	s1, done, err := ex.Step([]byte(c1))
	if err != nil {
		return "", err
	}
	if done {
		t.Fatal("done after client-first")
	}
	c2, err := conv.Step(string(s1))
	if err != nil {
		t.Fatalf("client rejects server-first %q: %v", s1, err)
	}
	s2, done, err := ex.Step([]byte(c2))
	if err != nil {
		if ex.Principal() != "" {
			t.Fatalf("failed exchange has principal %q", ex.Principal())
		}
		return "", err
	}
	if !done {
		t.Fatal("not done after client-final")
	}
	if _, err := conv.Step(string(s2)); err != nil || !conv.Valid() {
		t.Fatalf("client rejects server-final %q: %v", s2, err)
	}
	if _, _, err := ex.Step([]byte(c2)); !errors.Is(err, ErrExchangeOver) {
		t.Fatalf("a third step: %v", err)
	}
	return ex.Principal(), nil
}

func TestScramWithXdgClient(t *testing.T) {
	s := newStore(t)
	addUser(t, s, "alice", "pässwörd", bothScram...)
	addUser(t, s, "we,ird=name", "pw", bothScram...)
	addUser(t, s, "only256", "pw", ScramSHA256)
	for _, m := range bothScram {
		if p, err := xdgExchange(t, s, m, "alice", "pässwörd"); err != nil || p != "User:alice" {
			t.Errorf("%s right password: %q, %v", m, p, err)
		}
		if p, err := xdgExchange(t, s, m, "we,ird=name", "pw"); err != nil || p != "User:we,ird=name" {
			t.Errorf("%s escaped name: %q, %v", m, p, err)
		}
		for _, c := range []struct{ user, pass string }{{"alice", "wrong"}, {"alice", "pässwörd "}, {"mallory", "pässwörd"}, {"Alice", "pässwörd"}} {
			if _, err := xdgExchange(t, s, m, c.user, c.pass); !errors.Is(err, ErrAuthenticationFailed) {
				t.Errorf("%s %s/%s: %v, want ErrAuthenticationFailed", m, c.user, c.pass, err)
			}
		}
	}
	if _, err := xdgExchange(t, s, ScramSHA512, "only256", "pw"); !errors.Is(err, ErrAuthenticationFailed) {
		t.Errorf("a user without a SCRAM-SHA-512 credential: %v", err)
	}
}

// franzExchange drives the exchange with franz-go's client, the one the
// e2e tests use, and returns the server's error.
func franzExchange(t *testing.T, s *Store, m Mechanism, user, pass string) (string, error) {
	t.Helper()
	auth := kscram.Auth{User: user, Pass: pass}
	var mech sasl.Mechanism = auth.AsSha256Mechanism()
	if m == ScramSHA512 {
		mech = auth.AsSha512Mechanism()
	}
	if mech.Name() != string(m) {
		t.Fatalf("franz-go names %s %q", m, mech.Name())
	}
	sess, msg, err := mech.Authenticate(context.Background(), "localhost:9092")
	if err != nil {
		t.Fatal(err)
	}
	ex := NewScram(s, m)
	for step := 0; ; step++ {
		out, done, err := ex.Step(msg)
		if err != nil {
			return "", err
		}
		cdone, next, cerr := sess.Challenge(out)
		if cerr != nil {
			t.Fatalf("franz-go rejects %q: %v", out, cerr)
		}
		if done != cdone {
			t.Fatalf("step %d: server done %v, client done %v", step, done, cdone)
		}
		if done {
			return ex.Principal(), nil
		}
		msg = next
	}
}

func TestScramWithFranzGo(t *testing.T) {
	s := newStore(t)
	addUser(t, s, "bob", "hunter2", bothScram...)
	addUser(t, s, "a=b,c", "pw", ScramSHA512)
	// Not SASLprep'd by franz-go (nor by Kafka): see credentials.go.
	addUser(t, s, "wide", "ｐａｓｓ", bothScram...)
	for _, m := range bothScram {
		for _, c := range []struct{ user, pass string }{{"bob", "hunter2"}, {"wide", "ｐａｓｓ"}} {
			if p, err := franzExchange(t, s, m, c.user, c.pass); err != nil || p != "User:"+c.user {
				t.Errorf("%s %s: %q, %v", m, c.user, p, err)
			}
		}
		for _, c := range []struct{ user, pass string }{{"bob", "hunter3"}, {"carol", "hunter2"}, {"wide", "pass"}} {
			if _, err := franzExchange(t, s, m, c.user, c.pass); !errors.Is(err, ErrAuthenticationFailed) {
				t.Errorf("%s %s/%s: %v, want ErrAuthenticationFailed", m, c.user, c.pass, err)
			}
		}
	}
	if p, err := franzExchange(t, s, ScramSHA512, "a=b,c", "pw"); err != nil || p != "User:a=b,c" {
		t.Errorf("escaped name: %q, %v", p, err)
	}
}

// TestScramRFC7677 replays RFC 7677's SCRAM-SHA-256 example, with the
// server's nonce fixed to the RFC's.
func TestScramRFC7677(t *testing.T) {
	s := newStore(t)
	salt, _ := base64.StdEncoding.DecodeString("W22ZaJ0SNY7soEsUEjb6gQ==")
	c, err := NewScramCredential(ScramSHA256, "pencil", 4096, salt)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.UpsertCredential("user", c); err != nil {
		t.Fatal(err)
	}
	ex := NewScram(s, ScramSHA256).(*scramExchange)
	ex.newNonce = func() (string, error) { return "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0", nil }
	out, done, err := ex.Step([]byte("n,,n=user,r=rOprNGfwEbeRWgbNEkqO"))
	if want := "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"; err != nil || done || string(out) != want {
		t.Fatalf("server-first %q %v %v, want %q", out, done, err, want)
	}
	out, done, err = ex.Step([]byte("c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="))
	if want := "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="; err != nil || !done || string(out) != want {
		t.Fatalf("server-final %q %v %v, want %q", out, done, err, want)
	}
	if ex.Principal() != "User:user" {
		t.Fatalf("principal %q", ex.Principal())
	}
}

// handClient is a SCRAM client written out in the test, to send what
// the library clients do not: librdkafka's repeated nonce, altered
// proofs, other gs2 headers.
type handClient struct {
	m          Mechanism
	pass       string
	gs2, cbare string
}

// final builds the client-final-message for serverFirst with nonce as
// the r= value, or the server's own nonce when nonce is "".
func (c handClient) final(t *testing.T, serverFirst, nonce string) string {
	t.Helper()
	var h func() hash.Hash = sha256.New
	if c.m == ScramSHA512 {
		h = sha512.New
	}
	attrs := map[string]string{}
	for _, f := range strings.Split(serverFirst, ",") {
		k, v, _ := strings.Cut(f, "=")
		attrs[k] = v
	}
	if nonce == "" {
		nonce = attrs["r"]
	}
	salt, err := base64.StdEncoding.DecodeString(attrs["s"])
	if err != nil || attrs["i"] != "4096" {
		t.Fatalf("server-first %q", serverFirst)
	}
	mac := func(key []byte, msg string) []byte {
		m := hmac.New(h, key)
		m.Write([]byte(msg))
		return m.Sum(nil)
	}
	salted := pbkdf2.Key([]byte(c.pass), salt, 4096, h().Size(), h)
	clientKey := mac(salted, "Client Key")
	d := h()
	d.Write(clientKey)
	withoutProof := "c=" + base64.StdEncoding.EncodeToString([]byte(c.gs2)) + ",r=" + nonce
	sig := mac(d.Sum(nil), c.cbare+","+serverFirst+","+withoutProof)
	for i := range sig {
		sig[i] ^= clientKey[i]
	}
	return withoutProof + ",p=" + base64.StdEncoding.EncodeToString(sig)
}

// TestScramLibrdkafkaNonce: librdkafka's client-final nonce is its own
// nonce followed by the combined one; Kafka accepts that, and so must we.
func TestScramLibrdkafkaNonce(t *testing.T) {
	s := newStore(t)
	addUser(t, s, "kcat", "pw", bothScram...)
	for _, m := range bothScram {
		c := handClient{m: m, pass: "pw", gs2: "n,,", cbare: "n=kcat,r=librdkafkaNonce"}
		for _, tc := range []struct {
			prefix string
			ok     bool
		}{{"", true}, {"librdkafkaNonce", true}, {"x", true}} {
			ex := NewScram(s, m)
			first, _, err := ex.Step([]byte(c.gs2 + c.cbare))
			if err != nil {
				t.Fatal(err)
			}
			nonce := tc.prefix + strings.TrimPrefix(strings.Split(string(first), ",")[0], "r=")
			out, done, err := ex.Step([]byte(c.final(t, string(first), nonce)))
			if err != nil || !done || !bytes.HasPrefix(out, []byte("v=")) || ex.Principal() != "User:kcat" {
				t.Errorf("%s nonce prefix %q: %q %v %v", m, tc.prefix, out, done, err)
			}
		}
		// A nonce that does not end with the server's fails even with a
		// proof computed over it.
		ex := NewScram(s, m)
		first, _, _ := ex.Step([]byte(c.gs2 + c.cbare))
		if _, _, err := ex.Step([]byte(c.final(t, string(first), "librdkafkaNonce"))); !errors.Is(err, ErrAuthenticationFailed) {
			t.Errorf("%s the client's nonce alone: %v", m, err)
		}
	}
}

// TestScramFinalChecks alters one thing at a time in an otherwise right
// client-final-message.
func TestScramFinalChecks(t *testing.T) {
	s := newStore(t)
	addUser(t, s, "dora", "pw", ScramSHA256)
	c := handClient{m: ScramSHA256, pass: "pw", gs2: "n,,", cbare: "n=dora,r=clientnonce"}
	run := func(gs2 string, edit func(final string) string) error {
		ex := NewScram(s, ScramSHA256)
		first, _, err := ex.Step([]byte(gs2 + c.cbare))
		if err != nil {
			t.Fatal(err)
		}
		cc := c
		cc.gs2 = gs2
		_, done, err := ex.Step([]byte(edit(cc.final(t, string(first), ""))))
		if !done {
			t.Fatal("not done after client-final")
		}
		if err != nil && ex.Principal() != "" {
			t.Fatalf("a failed exchange has principal %q", ex.Principal())
		}
		return err
	}
	same := func(f string) string { return f }
	for _, gs2 := range []string{"n,,", "y,,", "n,a=dora,"} {
		if err := run(gs2, same); err != nil {
			t.Errorf("gs2 header %q: %v", gs2, err)
		}
	}
	flipProof := func(f string) string {
		i := strings.LastIndex(f, ",p=")
		proof, _ := base64.StdEncoding.DecodeString(f[i+3:])
		proof[0] ^= 1
		return f[:i+3] + base64.StdEncoding.EncodeToString(proof)
	}
	for name, tc := range map[string]struct {
		edit func(string) string
		want error
	}{
		"flipped proof bit": {flipProof, ErrAuthenticationFailed},
		"short proof":       {func(f string) string { return f[:strings.LastIndex(f, ",p=")] + ",p=AAAA" }, ErrAuthenticationFailed},
		"empty proof":       {func(f string) string { return f[:strings.LastIndex(f, ",p=")] + ",p=" }, ErrAuthenticationFailed},
		"no proof":          {func(f string) string { return f[:strings.LastIndex(f, ",p=")] }, ErrMalformedSASL},
		"proof not base64":  {func(f string) string { return f + "!" }, ErrMalformedSASL},
		"other binding":     {func(f string) string { return strings.Replace(f, "c=biws", "c=eSws", 1) }, ErrMalformedSASL},
		"binding not b64":   {func(f string) string { return strings.Replace(f, "c=biws", "c=b!ws", 1) }, ErrMalformedSASL},
		"no binding":        {func(f string) string { return strings.Replace(f, "c=biws,", "", 1) }, ErrMalformedSASL},
		"nonce altered":     {func(f string) string { return strings.Replace(f, ",r=client", ",r=Client", 1) }, ErrAuthenticationFailed},
		"extension added":   {func(f string) string { return strings.Replace(f, ",p=", ",x=1,p=", 1) }, ErrAuthenticationFailed},
	} {
		if err := run("n,,", tc.edit); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
	}
}

func TestScramFirstRefusals(t *testing.T) {
	s := newStore(t)
	addUser(t, s, "bob", "pw", ScramSHA256)
	for first, want := range map[string]string{
		"":                               "no gs2 header",
		"n":                              "no gs2 header",
		"n,,":                            "want n=USER",
		",,n=bob,r=abc":                  "gs2 flag",
		"x,,n=bob,r=abc":                 "gs2 flag",
		"p=tls-unique,,n=bob,r=abc":      "channel binding",
		"n,,n=bob,r=abc,tokenauth=true":  "extension",
		"n,,m=ext,n=bob,r=abc":           "mandatory extension",
		"n,,r=abc":                       "want n=USER",
		"n,,n=bob":                       "want n=USER",
		"n,,n=,r=abc":                    "empty name",
		"n,,n=b=4ob,r=abc":               "bad escape",
		"n,,n=bob=2,r=abc":               "bad escape",
		"n,a=eve,n=bob,r=abc":            "authorization id",
		"n,a=,n=bob,r=abc":               "authorization id",
		"n,bob,n=bob,r=abc":              "authorization field",
		"n,,n=bob,r=":                    "nonce",
		"n,,n=bob,r=a b":                 "nonce",
		"n,,n=bob,r=\x7f":                "nonce",
		"n,,n=bob,r=abc\x00":             "nonce",
		"n,,n=bob,r=abc,":                "extension",
		"n,,n=bob,r=abc,r=def":           "extension",
		"p=tls-server-end-point,,n=bob,": "channel binding",
	} {
		ex := NewScram(s, ScramSHA256)
		_, done, err := ex.Step([]byte(first))
		if !errors.Is(err, ErrMalformedSASL) || !strings.Contains(err.Error(), want) || !done {
			t.Errorf("%q: %v (done %v), want ErrMalformedSASL about %q", first, err, done, want)
		}
		if _, _, err := ex.Step([]byte("c=biws,r=abc,p=AAAA")); !errors.Is(err, ErrExchangeOver) {
			t.Errorf("%q: a step after the failure: %v", first, err)
		}
	}
	if _, _, err := NewScram(s, "SCRAM-SHA-1").Step([]byte("n,,n=bob,r=abc")); !errors.Is(err, ErrUnsupportedMechanism) {
		t.Errorf("SCRAM-SHA-1: %v", err)
	}
}

// TestScramUnknownUserLooksKnown: an unknown user's server-first-message
// has the shape of a real one, the same salt every time, and differs
// between names, so it does not tell who exists.
func TestScramUnknownUserLooksKnown(t *testing.T) {
	s := newStore(t)
	addUser(t, s, "real", "pw", ScramSHA512)
	saltOf := func(user string) string {
		out, done, err := NewScram(s, ScramSHA512).Step([]byte("n,,n=" + user + ",r=abc"))
		if err != nil || done {
			t.Fatalf("%s: %v %v", user, done, err)
		}
		f := strings.Split(string(out), ",")
		if len(f) != 3 || f[2] != "i=4096" {
			t.Fatalf("%s: server-first %q", user, out)
		}
		return f[1]
	}
	if g1, g2, r1, r2 := saltOf("ghost"), saltOf("ghost"), saltOf("real"), saltOf("real"); g1 != g2 || r1 != r2 {
		t.Error("salts change between attempts")
	}
	if saltOf("ghost") == saltOf("ghost2") || saltOf("ghost") == saltOf("real") {
		t.Error("different users share a salt")
	}
	salt, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(saltOf("ghost"), "s="))
	if len(salt) != 32 {
		t.Errorf("decoy salt of %d bytes, real ones have 32", len(salt))
	}
}

func TestNewExchange(t *testing.T) {
	s := newStore(t)
	want := []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}
	if got := SupportedMechanisms(); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("SupportedMechanisms() = %v", got)
	}
	for _, m := range want {
		if ex, err := NewExchange(s, m); err != nil || ex == nil {
			t.Errorf("%s: %v", m, err)
		}
	}
	for _, m := range []string{"", "plain", "GSSAPI", "OAUTHBEARER", "SCRAM-SHA-1", "scram-sha-256"} {
		if _, err := NewExchange(s, m); !errors.Is(err, ErrUnsupportedMechanism) {
			t.Errorf("%q: %v", m, err)
		}
	}
}
