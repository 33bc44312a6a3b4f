package main

// ringlog user add|list|delete: SCRAM credentials in a data directory's
// security.json, offline (the broker must be stopped: the command takes
// the data directory's lock). A running broker's credentials are managed
// over the Kafka API instead (AlterUserScramCredentials), e.g. with
// kafka-configs.sh or kadm.

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/internal/cli"
	"github.com/ringlog/ringlog/security"
)

func runUser(args []string, stdout, stderr io.Writer) error {
	return cli.Dispatch("ringlog", "user", "Adds, lists and deletes SASL/SCRAM users of a stopped broker's data directory.", []cli.Subcommand{
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

The broker must be stopped (these commands take the data directory's
lock); for a running broker use AlterUserScramCredentials, e.g.
kafka-configs.sh --alter --entity-type users --entity-name alice \
  --add-config 'SCRAM-SHA-512=[password=secret]'.
Exit status: 0 done, 1 failed, 2 usage.
`

// openUserStore locks dir and opens its security.json.
func openUserStore(dir string) (*security.Store, io.Closer, error) {
	lock, err := engine.LockDataDir(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("%w (stop the broker first, or manage users over the Kafka API: AlterUserScramCredentials)", err)
	}
	st, err := security.OpenStore(filepath.Join(dir, "security.json"))
	if err != nil {
		lock.Close()
		return nil, nil, err
	}
	return st, lock, nil
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
	var dir, name, passFile, mech string
	var iterations int
	fs := cli.NewFlagSet("user add", "\nUsage: ringlog user add --name NAME --password-file FILE [flags]\n\nAdds a user's SCRAM credentials (salted; the password is not stored), or replaces them.\n", userExamples, stderr)
	fs.StringVar(&dir, "data-dir", "./data", "the broker's data directory")
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
	pass, err := readPassword(passFile)
	if err != nil {
		return err
	}
	st, lock, err := openUserStore(dir)
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
	var dir string
	fs := cli.NewFlagSet("user list", "\nUsage: ringlog user list [--data-dir DIR]\n\nLists users with SCRAM credentials: mechanisms and iterations.\n", userExamples, stderr)
	fs.StringVar(&dir, "data-dir", "./data", "the broker's data directory")
	if _, err := cli.ParseArgs(fs, args); err != nil {
		return err
	}
	st, lock, err := openUserStore(dir)
	if err != nil {
		return err
	}
	defer lock.Close()
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "USER\tMECHANISM\tITERATIONS")
	for _, u := range st.Users() {
		for _, m := range u.Mechanisms {
			fmt.Fprintf(tw, "%s\t%s\t%d\n", u.Name, m.Mechanism, m.Iterations)
		}
	}
	return tw.Flush()
}

func runUserDelete(args []string, stdout, stderr io.Writer) error {
	var dir, name, mech string
	fs := cli.NewFlagSet("user delete", "\nUsage: ringlog user delete --name NAME [flags]\n\nDeletes a user's SCRAM credentials.\n", userExamples, stderr)
	fs.StringVar(&dir, "data-dir", "./data", "the broker's data directory")
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
	st, lock, err := openUserStore(dir)
	if err != nil {
		return err
	}
	defer lock.Close()
	deleted := 0
	for _, m := range mechs {
		err := st.DeleteCredential(name, m)
		if errors.Is(err, security.ErrNoSuchCredential) {
			continue
		}
		if err != nil {
			return err
		}
		deleted++
		fmt.Fprintf(stdout, "user %s: %s credential deleted\n", name, m)
	}
	if deleted == 0 {
		return fmt.Errorf("user %s has no %s credential", name, mech)
	}
	return nil
}
