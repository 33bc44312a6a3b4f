package main

// What the client tools (topic, group, produce, consume) share beyond
// internal/cli (flags, dispatch, usage errors): the --output flag, a
// franz-go client that first waits within --timeout for a broker that is
// not up yet (saying so on a terminal), and errors that say what to do
// next.

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/internal/cli"
)

// brokersEnv is the environment variable that overrides the default of
// --brokers (the messages and tests here name it).
const brokersEnv = cli.BrokersEnv

// connFlags are --brokers, --timeout and the security flags
// (clientsec.go), with the kgo client they lead to (connect).
type connFlags struct {
	cli.ConnFlags
	sec clientSecurity
}

// outputFlag is --output text|json.
type outputFlag string

func addOutputFlag(fs *flag.FlagSet, o *outputFlag) {
	*o = "text"
	fs.Var(o, "output", "output `format`: text (for people) or json (for scripts) (default text)")
}

func (o *outputFlag) String() string {
	if *o == "text" {
		return "" // the usage says the default
	}
	return string(*o)
}
func (o *outputFlag) Set(v string) error {
	switch v {
	case "text", "json":
		*o = outputFlag(v)
		return nil
	}
	return fmt.Errorf("want text or json, got %q", v)
}

// optInt is an integer flag that remembers whether it was given.
type optInt struct {
	v   int64
	set bool
}

func (o *optInt) String() string {
	if !o.set {
		return ""
	}
	return strconv.FormatInt(o.v, 10)
}

func (o *optInt) Set(s string) error {
	v, err := strconv.ParseInt(s, 0, 64)
	if err != nil {
		return errors.New("not an integer")
	}
	o.v, o.set = v, true
	return nil
}

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error {
	*s = append(*s, v)
	return nil
}

// kvFlag is a repeatable key=value flag that keeps its order and does no
// validation beyond the form (the broker checks names and values).
type kvFlag struct {
	keys, vals []string
}

func (k *kvFlag) String() string { return "" }
func (k *kvFlag) Set(v string) error {
	key, val, ok := strings.Cut(v, "=")
	if !ok || strings.TrimSpace(key) == "" {
		return fmt.Errorf("want key=value, got %q", v)
	}
	k.keys = append(k.keys, strings.TrimSpace(key))
	k.vals = append(k.vals, val)
	return nil
}

// dialWatch sees every connection attempt of a client. When every seed
// broker refuses the connection before any connection succeeded, it cancels
// the command's context at once (the broker is not running: waiting for
// the timeout would tell nothing more). It also remembers the last failure
// to explain a timeout.
type dialWatch struct {
	mu        sync.Mutex
	seeds     int
	failed    map[int32]bool
	connected bool
	lastErr   error
	lastAddr  string
	cancel    context.CancelCauseFunc
	// tlsHint explains a TLS failure that retrying cannot fix (nil for
	// other errors); the command ends at once with its explanation.
	tlsHint func(addr string, err error) error
}

var (
	_ kgo.HookBrokerConnect = (*dialWatch)(nil)
	_ kgo.HookBrokerRead    = (*dialWatch)(nil)
)

func (w *dialWatch) OnBrokerConnect(meta kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err == nil {
		w.connected = true
		return
	}
	w.lastErr = err
	w.lastAddr = net.JoinHostPort(meta.Host, strconv.Itoa(int(meta.Port)))
	if w.tlsFailed(w.lastAddr, err) {
		return
	}
	if meta.NodeID >= 0 || w.connected || !hopeless(err) {
		return
	}
	w.failed[meta.NodeID] = true
	if len(w.failed) >= w.seeds && w.cancel != nil {
		w.cancel(&unreachableError{addr: w.lastAddr, err: err, all: w.seeds > 1})
	}
}

// OnBrokerRead catches the TLS alerts a broker sends after the handshake
// (TLS 1.3 checks the client's certificate then): a refused certificate
// surfaces on the first read, not at the dial.
func (w *dialWatch) OnBrokerRead(meta kgo.BrokerMetadata, _ int16, _ int, _, _ time.Duration, err error) {
	if err == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.tlsFailed(net.JoinHostPort(meta.Host, strconv.Itoa(int(meta.Port))), err)
}

// tlsFailed cancels the command with the explanation of err when it is a
// TLS failure a flag or a certificate fixes (any broker's: the client's
// TLS settings are the same for all). Called with mu held.
func (w *dialWatch) tlsFailed(addr string, err error) bool {
	if w.tlsHint == nil || w.cancel == nil {
		return false
	}
	hint := w.tlsHint(addr, err)
	if hint == nil {
		return false
	}
	w.cancel(hint)
	return true
}

func (w *dialWatch) last() (string, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.connected {
		return "", nil
	}
	return w.lastAddr, w.lastErr
}

// hopeless reports whether a dial error means nothing is listening there
// (as opposed to a slow network, worth waiting for).
func hopeless(err error) bool {
	var dnsErr *net.DNSError
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, syscall.ENETUNREACH) || (errors.As(err, &dnsErr) && dnsErr.IsNotFound)
}

// unreachableError is what a command reports when it cannot connect.
type unreachableError struct {
	addr    string
	err     error
	all     bool
	timeout time.Duration // non-zero: we waited this long
}

func (e *unreachableError) Error() string {
	what := "the broker at " + e.addr
	if e.all {
		what = "any of the brokers (last tried " + e.addr + ")"
	}
	msg := fmt.Sprintf("cannot connect to %s (%s)", what, dialReason(e.err))
	if e.timeout > 0 {
		msg = fmt.Sprintf("no broker answered within %v; %s", e.timeout, msg)
	}
	return msg + ": is the broker running? start it with 'ringlog serve', or point --brokers (or " + brokersEnv + ") at a running one"
}

func (e *unreachableError) Unwrap() error { return e.err }

// dialReason is a dial error in a few words.
func dialReason(err error) string {
	var dnsErr *net.DNSError
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.As(err, &dnsErr) && dnsErr.IsNotFound:
		return "no such host"
	}
	return err.Error()
}

// awaitBroker waits up to limit until one of seeds accepts a TCP
// connection (then closed: the client makes its own). A broker that is
// starting refuses connections for a moment, and scripts start brokers and
// run commands right after; this turns that moment into a wait instead of
// an error. With announce, one line on stderr says what it waits for.
func awaitBroker(seeds []string, limit time.Duration, announce bool) error {
	deadline := time.Now().Add(limit)
	announced := false
	var lastAddr string
	var lastErr error
	// A host that does not resolve is waited for too: in a compose file
	// or a cluster manager, a broker's name resolves once it starts.
	for pause := 20 * time.Millisecond; ; pause = min(2*pause, 500*time.Millisecond) {
		for _, addr := range seeds {
			conn, err := net.DialTimeout("tcp", addr, max(min(time.Until(deadline), 2*time.Second), 10*time.Millisecond))
			if err == nil {
				conn.Close()
				return nil
			}
			lastAddr, lastErr = addr, err
		}
		if !time.Now().Before(deadline) {
			return &unreachableError{addr: lastAddr, err: lastErr, all: len(seeds) > 1, timeout: limit}
		}
		if announce && !announced {
			announced = true
			fmt.Fprintf(os.Stderr, "waiting up to %v (--timeout) for the broker at %s (%s); start it with 'ringlog serve', or press Ctrl-C\n",
				limit, strings.Join(seeds, ","), dialReason(lastErr))
		}
		time.Sleep(min(pause, time.Until(deadline)))
	}
}

// stderrIsTerminal reports whether stderr is a terminal (a character
// device), where a progress line helps and nothing parses it.
func stderrIsTerminal() bool {
	fi, err := os.Stderr.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// errInterrupted is the cause of a command's context when SIGINT or
// SIGTERM arrives.
var errInterrupted = errors.New("interrupted")

// session is one command's connection to the cluster.
type session struct {
	ctx         context.Context // canceled at the timeout, on a hopeless dial, or by stop
	base        context.Context // ctx without the timeout
	stop        context.CancelCauseFunc
	cancelTimer context.CancelFunc
	cl          *kgo.Client
	adm         *kadm.Client
	watch       *dialWatch
	brokers     string
	timeout     time.Duration
	sec         clientSecurity // the flags it connected with (principal, TLS hints)
}

// connect makes a client for the command, once a seed broker accepts
// connections: it waits for one up to limit (else --timeout, else 30 s),
// since a broker may be starting (on a terminal, one line on stderr says
// so). The session's context ends after limit (none when 0), or as soon
// as every seed refuses the connection again. Close it when done.
func (c *connFlags) connect(limit time.Duration, opts ...kgo.Opt) (*session, error) {
	seeds, err := c.Seeds()
	if err != nil {
		return nil, err
	}
	if c.Timeout < 0 {
		return nil, cli.Usagef("--timeout must not be negative")
	}
	secOpts, err := c.sec.options()
	if err != nil {
		return nil, err
	}
	started := time.Now()
	if err := awaitBroker(seeds, cmp.Or(limit, c.Timeout, 30*time.Second), stderrIsTerminal()); err != nil {
		return nil, err
	}
	if limit > 0 {
		// The wait counts against the command's --timeout.
		limit = max(limit-time.Since(started), time.Second)
	}
	opts = append(secOpts, opts...)
	base, stop := context.WithCancelCause(context.Background())
	ctx, cancelTimer := base, context.CancelFunc(func() {})
	if limit > 0 {
		ctx, cancelTimer = context.WithTimeout(base, limit)
	}
	w := &dialWatch{seeds: len(seeds), failed: map[int32]bool{}, cancel: stop, tlsHint: c.sec.tlsHint}
	dial := 10 * time.Second
	if limit > 0 {
		dial = min(dial, max(limit, time.Second))
	}
	all := append([]kgo.Opt{
		kgo.SeedBrokers(seeds...),
		kgo.ClientID("ringlog-cli"),
		kgo.WithHooks(w),
		kgo.DialTimeout(dial),
		kgo.RetryBackoffFn(func(n int) time.Duration { return min(time.Duration(n)*50*time.Millisecond, time.Second) }),
	}, opts...)
	cl, err := kgo.NewClient(all...)
	if err != nil {
		cancelTimer()
		stop(nil)
		return nil, cli.Usagef("--brokers %q: %v", c.Brokers, err)
	}
	return &session{ctx: ctx, base: base, stop: stop, cancelTimer: cancelTimer, cl: cl, adm: kadm.NewClient(cl), watch: w, brokers: strings.Join(seeds, ","), timeout: limit, sec: c.sec}, nil
}

func (s *session) Close() {
	s.cl.Close()
	s.cancelTimer()
	s.stop(nil)
}

// explain turns an error of a request into one that says what happened and
// what to do: the broker is not running, TLS failed (and which flag or
// certificate to fix), it did not answer in time, or the command was
// interrupted. Other errors come back as they are.
func (s *session) explain(err error) error {
	if err == nil {
		return nil
	}
	var te *tlsError
	if errors.As(err, &te) {
		return te
	}
	if hint := s.sec.tlsHint(s.brokers, err); hint != nil {
		return hint
	}
	if s.ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
		return err
	}
	cause := context.Cause(s.ctx)
	var ue *unreachableError
	switch {
	case errors.As(cause, &ue):
		return ue
	case errors.As(cause, &te):
		return te
	case errors.Is(cause, errInterrupted):
		return errInterrupted
	}
	if addr, lerr := s.watch.last(); lerr != nil {
		return &unreachableError{addr: addr, err: lerr, timeout: s.timeout}
	}
	if s.timeout > 0 {
		return fmt.Errorf("the broker (%s) did not answer within %v: try again with a longer --timeout", s.brokers, s.timeout)
	}
	return err
}

// namesCommand is an admin command that acts on the names it is given
// (topics, groups), with --brokers, --timeout, the security flags and
// --output.
type namesCommand struct {
	name, usage, examples string
	// none is the usage error when no name is given: what to give and
	// how to list them.
	none string
}

// start parses args and connects: the session (Close it), the names and
// --output.
func (c namesCommand) start(args []string, stdout io.Writer) (*session, []string, outputFlag, error) {
	var cf connFlags
	var out outputFlag
	fs := cli.NewFlagSet(c.name, c.usage, c.examples, stdout)
	cf.Register(fs, 30*time.Second, adminTimeoutHelp)
	addOutputFlag(fs, &out)
	names, err := cli.ParseArgs(fs, args)
	if err != nil {
		return nil, nil, "", err
	}
	if len(names) == 0 {
		return nil, nil, "", cli.Usagef("%s: %s", c.name, c.none)
	}
	s, err := cf.connect(cf.Timeout)
	if err != nil {
		return nil, nil, "", err
	}
	return s, names, out, nil
}

// askEach asks for all names at once. kadm fails a whole answer when the
// broker (or a group's coordinator) refuses one name, so then it asks name
// by name, recording each refused one as refused(name, err). Other errors
// come back as they are.
func askEach[M ~map[string]V, V any](s *session, names []string, ask func(context.Context, ...string) (M, error), refused func(string, error) V) (M, error) {
	all, err := ask(s.ctx, names...)
	if !isDenied(err) {
		return all, err
	}
	all = M{}
	for _, n := range names {
		one, err := ask(s.ctx, n)
		switch {
		case isDenied(err):
			all[n] = refused(n, err)
		case err != nil:
			return nil, err
		default:
			maps.Copy(all, one)
		}
	}
	return all, nil
}

// topicError says what to do about a per-topic error.
func topicError(topic string, err error) error {
	switch {
	case errors.Is(err, kerr.UnknownTopicOrPartition):
		return fmt.Errorf("topic %q does not exist: create it with 'ringlog topic create %s' (or list topics with 'ringlog topic list')", topic, topic)
	case errors.Is(err, kerr.TopicAlreadyExists):
		return fmt.Errorf("topic %q already exists (add --if-not-exists to accept that)", topic)
	case errors.Is(err, kerr.InvalidTopicException):
		return fmt.Errorf("topic %q: invalid topic name: use up to 249 letters, digits, '.', '_' and '-'", topic)
	}
	return fmt.Errorf("topic %q: %w", topic, err)
}

// withMessage adds a broker's error message to err when it says more.
func withMessage(err error, msg string) error {
	msg = cleanMessage(err, msg)
	if err == nil || msg == "" || strings.Contains(err.Error(), msg) {
		return err
	}
	return fmt.Errorf("%w (%s)", err, msg)
}

// cleanMessage strips from a broker's error message the code and
// description of the Kafka error in err, which some brokers repeat at its
// start.
func cleanMessage(err error, msg string) string {
	var ke *kerr.Error
	if !errors.As(err, &ke) {
		return msg
	}
	prefix := ke.Error()
	for strings.HasPrefix(msg, prefix) {
		msg = strings.TrimLeft(msg[len(prefix):], ": ")
	}
	return msg
}

// detail is the broker's message for err, or err itself.
func detail(err error, msg string) string {
	if m := cleanMessage(err, msg); m != "" {
		return m
	}
	return err.Error()
}

// requireTopic checks that topic exists and returns its partitions
// (sorted). action and api are what the command does with it ("produce
// orders", Produce), for the message of an authorization failure: the
// operation the command needs implies the DESCRIBE the check needs.
func (s *session) requireTopic(action string, api kmsg.Key, topic string) ([]int32, error) {
	tds, err := s.adm.ListTopics(s.ctx, topic)
	if err != nil {
		return nil, cmp.Or(s.denied(action, api, err, topicResource(topic)), s.explain(err))
	}
	td, ok := tds[topic]
	if !ok {
		return nil, topicError(topic, kerr.UnknownTopicOrPartition)
	}
	if td.Err != nil {
		return nil, cmp.Or(s.denied(action, api, td.Err, topicResource(topic)), topicError(topic, td.Err))
	}
	return td.Partitions.Numbers(), nil
}

// newTable returns a tabwriter for aligned text columns; Flush it.
func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
}

// writeJSON prints v indented, with a final newline.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// plural is "1 thing" or "n things".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}
