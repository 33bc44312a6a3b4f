package main

// ringlog user add|list|delete: SCRAM credentials. Offline, on a stopped
// single broker's data directory (its security.json; the command takes
// the data directory's lock). Online, with --brokers, over the Kafka API
// (AlterUserScramCredentials, DescribeUserScramCredentials) of a running
// broker or cluster: the only way for a cluster, whose credentials live
// in the metadata quorum.

import (
	"bufio"
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/cluster"
	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/internal/cli"
	"github.com/ringlog/ringlog/internal/fsutil"
	"github.com/ringlog/ringlog/security"
)

func runUser(args []string, stdout, stderr io.Writer) error {
	return cli.Dispatch("ringlog", "user", "Adds, lists and deletes SASL/SCRAM users: of a stopped broker's data directory, or of a running broker or cluster (--brokers).", []cli.Subcommand{
		{Name: "add", Summary: "add a user, or set its password", Run: runUserAdd},
		{Name: "list", Summary: "list users and their mechanisms", Run: runUserList},
		{Name: "delete", Summary: "delete a user's credentials", Run: runUserDelete},
	}, args, stdout, stderr)
}

const userExamples = `
Examples:
  ringlog user add --data-dir ./data --name admin --password-file admin.pw
  echo -n secret | ringlog user add --name alice --password-file - --mechanism SCRAM-SHA-512
  ringlog user list
  ringlog user delete --name alice
  ringlog user add --brokers 127.0.0.1:9092 --name alice --password-file alice.pw

Without --brokers (or RINGLOG_BROKERS) they edit a stopped single broker's data directory
(they take its lock). With --brokers they go through the Kafka API
(AlterUserScramCredentials) of a running broker or cluster, as
kafka-configs.sh --alter --entity-type users --entity-name alice
  --add-config 'SCRAM-SHA-512=[password=secret]' does; a cluster's users
live in its metadata quorum, so that is the only way there. With the
authorizer on, changes need ALTER on the cluster (a super user).
Exit status: 0 done, 1 failed, 2 usage.
`

// userTarget is where a user command acts: a stopped broker's data
// directory, or a running broker over the Kafka API when --brokers is
// given.
type userTarget struct {
	dir string
	cf  connFlags
	fs  *flag.FlagSet
}

func (u *userTarget) register(fs *flag.FlagSet) {
	u.fs = fs
	fs.StringVar(&u.dir, "data-dir", "./data", "the stopped broker's data directory (without --brokers)")
	u.cf.Register(fs, 30*time.Second, "how long to wait for the broker (with --brokers)")
}

// online reports whether the command acts on a running broker: --brokers
// was given, or RINGLOG_BROKERS is set and --data-dir was not (a flag
// beats the environment, as everywhere).
func (u *userTarget) online() (bool, error) {
	brokers, dir := false, false
	u.fs.Visit(func(f *flag.Flag) {
		brokers = brokers || f.Name == "brokers"
		dir = dir || f.Name == "data-dir"
	})
	if brokers && dir {
		return false, cli.Usagef("give --data-dir (a stopped broker) or --brokers (a running one), not both")
	}
	if !brokers && !dir && os.Getenv(cli.BrokersEnv) != "" {
		return true, nil
	}
	return brokers, nil
}

// store opens the data directory's credentials, refusing a cluster
// member's (whose credentials are in the metadata quorum).
func (u *userTarget) store() (*security.Store, io.Closer, error) {
	if _, err := os.Stat(filepath.Join(u.dir, cluster.MetadataDir)); err == nil {
		return nil, nil, fmt.Errorf("%s belongs to a cluster member: its users live in the cluster's metadata quorum, not in this directory; manage them on the running cluster with --brokers HOST:PORT", u.dir)
	}
	// Owner-only, like the credentials it writes (security.json is 0600).
	lock, err := engine.LockDataDir(u.dir, fsutil.Perm{})
	if err != nil {
		return nil, nil, fmt.Errorf("%w (stop the broker first, or manage users on the running broker with --brokers)", err)
	}
	st, err := security.OpenStore(filepath.Join(u.dir, "security.json"))
	if err != nil {
		lock.Close()
		return nil, nil, err
	}
	return st, lock, nil
}

// kadmMechanism is m as kadm names it.
func kadmMechanism(m security.Mechanism) kadm.ScramMechanism {
	if m == security.ScramSHA256 {
		return kadm.ScramSha256
	}
	return kadm.ScramSha512
}

// mechanismsFlag reads --mechanism: one mechanism, or "both".
func mechanismsFlag(v string) ([]security.Mechanism, error) {
	if strings.EqualFold(v, "both") {
		return []security.Mechanism{security.ScramSHA256, security.ScramSHA512}, nil
	}
	for _, m := range []security.Mechanism{security.ScramSHA256, security.ScramSHA512} {
		if strings.EqualFold(v, string(m)) {
			return []security.Mechanism{m}, nil
		}
	}
	return nil, cli.Usagef("--mechanism %q: SCRAM-SHA-256, SCRAM-SHA-512 or both", v)
}

func runUserAdd(args []string, stdout, stderr io.Writer) error {
	var t userTarget
	var name, passFile, mech string
	var iterations int
	fs := cli.NewFlagSet("user add", "\nUsage: ringlog user add --name NAME --password-file FILE [flags]\n\nAdds a user's SCRAM credentials (salted; the password is not stored), or replaces them.\n", userExamples, stdout)
	t.register(fs)
	fs.StringVar(&name, "name", "", "user name (the principal is User:NAME)")
	fs.StringVar(&passFile, "password-file", "", "file holding the password (its first line; - reads standard input)")
	fs.StringVar(&mech, "mechanism", "both", "SCRAM-SHA-256, SCRAM-SHA-512 or both (PLAIN logins check either)")
	fs.IntVar(&iterations, "iterations", 4096, "PBKDF2 iterations, 4096 to 16384")
	if _, err := cli.ParseArgs(fs, args); err != nil {
		return err
	}
	if name == "" || passFile == "" {
		return cli.Usagef("user add: give --name and --password-file")
	}
	mechs, err := mechanismsFlag(mech)
	if err != nil {
		return err
	}
	online, err := t.online()
	if err != nil {
		return err
	}
	pass, err := readPassword(passFile)
	if err != nil {
		return err
	}
	if online {
		s, err := t.cf.connect(t.cf.Timeout)
		if err != nil {
			return err
		}
		defer s.Close()
		// One request per mechanism: a request may name a user once.
		for _, m := range mechs {
			ups := []kadm.UpsertSCRAM{{User: name, Mechanism: kadmMechanism(m), Iterations: int32(iterations), Password: pass}}
			res, err := s.adm.AlterUserSCRAMs(s.ctx, nil, ups)
			if err == nil {
				err = res.Error()
			}
			if err != nil {
				return cmp.Or(s.denied("user add "+name, kmsg.AlterUserSCRAMCredentials, err), s.explain(err))
			}
			fmt.Fprintf(stdout, "user %s: %s credential set (%d iterations)\n", name, m, iterations)
		}
		return nil
	}
	st, lock, err := t.store()
	if err != nil {
		return err
	}
	defer lock.Close()
	for _, m := range mechs {
		cred, err := security.NewScramCredential(m, pass, iterations, nil)
		if err != nil {
			return cli.Usagef("user add: %v", err)
		}
		if err := st.UpsertCredential(name, cred); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "user %s: %s credential set (%d iterations)\n", name, m, iterations)
	}
	return nil
}

// readPassword reads the first line of path ("-": standard input).
func readPassword(path string) (string, error) {
	var r io.Reader = os.Stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return "", cli.Usagef("--password-file: %v", err)
		}
		defer f.Close()
		r = f
	}
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("read password: %w", err)
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", cli.Usagef("--password-file %s: the password is empty", path)
	}
	return line, nil
}

func runUserList(args []string, stdout, stderr io.Writer) error {
	var t userTarget
	fs := cli.NewFlagSet("user list", "\nUsage: ringlog user list [--data-dir DIR | --brokers HOST:PORT]\n\nLists users with SCRAM credentials: mechanisms and iterations.\n", userExamples, stdout)
	t.register(fs)
	if _, err := cli.ParseArgs(fs, args); err != nil {
		return err
	}
	online, err := t.online()
	if err != nil {
		return err
	}
	var users []security.UserInfo
	if online {
		s, err := t.cf.connect(t.cf.Timeout)
		if err != nil {
			return err
		}
		defer s.Close()
		described, err := s.adm.DescribeUserSCRAMs(s.ctx)
		if err == nil {
			err = described.Error()
		}
		if err != nil {
			return cmp.Or(s.denied("user list", kmsg.DescribeUserSCRAMCredentials, err), s.explain(err))
		}
		for _, d := range described.Sorted() {
			u := security.UserInfo{Name: d.User}
			for _, ci := range d.CredInfos {
				if m, ok := security.MechanismFromCode(int8(ci.Mechanism)); ok {
					u.Mechanisms = append(u.Mechanisms, security.MechanismInfo{Mechanism: m, Iterations: int(ci.Iterations)})
				}
			}
			users = append(users, u)
		}
	} else {
		st, lock, err := t.store()
		if err != nil {
			return err
		}
		defer lock.Close()
		users = st.Users()
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "USER\tMECHANISM\tITERATIONS")
	for _, u := range users {
		for _, m := range u.Mechanisms {
			fmt.Fprintf(tw, "%s\t%s\t%d\n", u.Name, m.Mechanism, m.Iterations)
		}
	}
	return tw.Flush()
}

func runUserDelete(args []string, stdout, stderr io.Writer) error {
	var t userTarget
	var name, mech string
	fs := cli.NewFlagSet("user delete", "\nUsage: ringlog user delete --name NAME [flags]\n\nDeletes a user's SCRAM credentials.\n", userExamples, stdout)
	t.register(fs)
	fs.StringVar(&name, "name", "", "user name")
	fs.StringVar(&mech, "mechanism", "both", "SCRAM-SHA-256, SCRAM-SHA-512 or both")
	if _, err := cli.ParseArgs(fs, args); err != nil {
		return err
	}
	if name == "" {
		return cli.Usagef("user delete: give --name")
	}
	mechs, err := mechanismsFlag(mech)
	if err != nil {
		return err
	}
	online, err := t.online()
	if err != nil {
		return err
	}
	// deleteOne deletes one credential; false: the user had none.
	var deleteOne func(m security.Mechanism) (bool, error)
	if online {
		s, err := t.cf.connect(t.cf.Timeout)
		if err != nil {
			return err
		}
		defer s.Close()
		deleteOne = func(m security.Mechanism) (bool, error) {
			res, err := s.adm.AlterUserSCRAMs(s.ctx, []kadm.DeleteSCRAM{{User: name, Mechanism: kadmMechanism(m)}}, nil)
			if err == nil {
				err = res.Error()
			}
			if errors.Is(err, kerr.ResourceNotFound) {
				return false, nil
			}
			if err != nil {
				return false, cmp.Or(s.denied("user delete "+name, kmsg.AlterUserSCRAMCredentials, err), s.explain(err))
			}
			return true, nil
		}
	} else {
		st, lock, err := t.store()
		if err != nil {
			return err
		}
		defer lock.Close()
		deleteOne = func(m security.Mechanism) (bool, error) {
			err := st.DeleteCredential(name, m)
			if errors.Is(err, security.ErrNoSuchCredential) {
				return false, nil
			}
			return err == nil, err
		}
	}
	deleted := 0
	for _, m := range mechs {
		ok, err := deleteOne(m)
		if err != nil {
			return err
		}
		if ok {
			deleted++
			fmt.Fprintf(stdout, "user %s: %s credential deleted\n", name, m)
		}
	}
	if deleted == 0 {
		return fmt.Errorf("user %s has no %s credential", name, mech)
	}
	return nil
}
