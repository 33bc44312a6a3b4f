package security

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
)

// ErrNoSuchCredential: the user has no credential of that mechanism.
var ErrNoSuchCredential = errors.New("no such SCRAM credential")

// Store keeps the SCRAM credentials and the ACLs of a broker in one JSON
// file, rewritten atomically (temporary file, fsync, rename, directory
// fsync) on every change before the change is visible: a crash leaves
// the old file or the new one. Readers (the authorizer on every request)
// see the ACLs through an atomic snapshot; changes take mu.
type Store struct {
	path string

	mu    sync.Mutex
	users map[string]map[Mechanism]ScramCredential
	acls  atomic.Pointer[[]ACL] // immutable; replaced whole
}

// UserInfo describes a user's credentials without their secrets.
type UserInfo struct {
	Name       string
	Mechanisms []MechanismInfo
}

// MechanismInfo is one credential's mechanism and iteration count.
type MechanismInfo struct {
	Mechanism  Mechanism
	Iterations int
}

// storeFile is the file's layout.
type storeFile struct {
	Version int                                      `json:"version"`
	Users   map[string]map[Mechanism]ScramCredential `json:"users"`
	ACLs    []ACL                                    `json:"acls"`
}

const storeVersion = 1

// OpenStore loads path; a missing file is an empty store.
func OpenStore(path string) (*Store, error) {
	s := &Store{path: path, users: map[string]map[Mechanism]ScramCredential{}}
	empty := []ACL{}
	s.acls.Store(&empty)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("security store %s: %w", path, err)
	}
	f, err := decodeStore(b)
	if err != nil {
		return nil, fmt.Errorf("security store %s is damaged (%w): restore it from a backup, or move it aside to start with no users and no ACLs", path, err)
	}
	if f.Users != nil {
		s.users = f.Users
	}
	acls := slices.Clone(f.ACLs)
	if acls == nil {
		acls = []ACL{}
	}
	s.acls.Store(&acls)
	return s, nil
}

// decodeStore parses and checks a store file.
func decodeStore(b []byte) (storeFile, error) {
	var f storeFile
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return f, err
	}
	if dec.More() {
		return f, errors.New("data after the JSON object")
	}
	if f.Version != storeVersion {
		return f, fmt.Errorf("version %d, this broker reads %d", f.Version, storeVersion)
	}
	for user, creds := range f.Users {
		if user == "" {
			return f, errors.New("a user with an empty name")
		}
		for m, c := range creds {
			if c.Mechanism != m {
				return f, fmt.Errorf("user %s: a %s credential filed under %s", user, c.Mechanism, m)
			}
			if err := c.check(); err != nil {
				return f, fmt.Errorf("user %s %s: %w", user, m, err)
			}
		}
	}
	for i, a := range f.ACLs {
		if err := a.validate(); err != nil {
			return f, fmt.Errorf("ACL %d: %w", i, err)
		}
	}
	return f, nil
}

// save writes users and acls; the caller holds mu and publishes only
// after it succeeded.
func (s *Store) save(users map[string]map[Mechanism]ScramCredential, acls []ACL) error {
	b, err := json.MarshalIndent(storeFile{Version: storeVersion, Users: users, ACLs: acls}, "", "  ")
	if err != nil {
		return fmt.Errorf("security store: encode: %w", err)
	}
	if err := writeFileAtomic(s.path, append(b, '\n')); err != nil {
		return fmt.Errorf("security store %s: %w", s.path, err)
	}
	return nil
}

// writeFileAtomic replaces path with data durably: a temporary file in
// the same directory, fsynced, renamed over path, then the directory
// fsynced.
func writeFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	done := false
	defer func() {
		if !done {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := tmp.Chmod(0o600); err != nil {
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	done = true
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Credential returns user's credential for m.
func (s *Store) Credential(user string, m Mechanism) (ScramCredential, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.users[user][m]
	return c, ok
}

// Users lists the users with credentials, by name, each with its
// mechanisms in order.
func (s *Store) Users() []UserInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]UserInfo, 0, len(s.users))
	for name, creds := range s.users {
		u := UserInfo{Name: name}
		for m, c := range creds {
			u.Mechanisms = append(u.Mechanisms, MechanismInfo{Mechanism: m, Iterations: c.Iterations})
		}
		sort.Slice(u.Mechanisms, func(i, j int) bool { return u.Mechanisms[i].Mechanism < u.Mechanisms[j].Mechanism })
		out = append(out, u)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// withUsers returns a copy of the users map with user's credentials
// replaced by creds (deleted when empty).
func (s *Store) withUsers(user string, creds map[Mechanism]ScramCredential) map[string]map[Mechanism]ScramCredential {
	next := make(map[string]map[Mechanism]ScramCredential, len(s.users)+1)
	for k, v := range s.users {
		next[k] = v
	}
	if len(creds) == 0 {
		delete(next, user)
	} else {
		next[user] = creds
	}
	return next
}

// UpsertCredential sets user's credential for c.Mechanism, durably.
func (s *Store) UpsertCredential(user string, c ScramCredential) error {
	if user == "" {
		return errors.New("empty user name")
	}
	if err := c.check(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	creds := make(map[Mechanism]ScramCredential, 2)
	for m, old := range s.users[user] {
		creds[m] = old
	}
	creds[c.Mechanism] = c
	next := s.withUsers(user, creds)
	if err := s.save(next, *s.acls.Load()); err != nil {
		return err
	}
	s.users = next
	return nil
}

// DeleteCredential removes user's credential for m, durably; a missing
// one is ErrNoSuchCredential.
func (s *Store) DeleteCredential(user string, m Mechanism) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.users[user][m]; !ok {
		return fmt.Errorf("%w: user %q, %s", ErrNoSuchCredential, user, m)
	}
	creds := make(map[Mechanism]ScramCredential, 2)
	for k, v := range s.users[user] {
		if k != m {
			creds[k] = v
		}
	}
	next := s.withUsers(user, creds)
	if err := s.save(next, *s.acls.Load()); err != nil {
		return err
	}
	s.users = next
	return nil
}

// ACLs returns the bindings (shared and immutable: do not modify).
func (s *Store) ACLs() []ACL { return *s.acls.Load() }

// CreateACLs adds bindings, durably, with one result per input: an
// invalid one (ErrInvalidACL) is not added, a duplicate is not added
// twice. A failed save fails every valid one and changes nothing.
func (s *Store) CreateACLs(add []ACL) []error {
	errs := make([]error, len(add))
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := *s.acls.Load()
	next := slices.Clone(cur)
	for i, a := range add {
		if errs[i] = a.validate(); errs[i] != nil {
			continue
		}
		if !slices.Contains(next, a) {
			next = append(next, a)
		}
	}
	if len(next) == len(cur) {
		return errs
	}
	if err := s.save(s.users, next); err != nil {
		for i := range errs {
			if errs[i] == nil {
				errs[i] = err
			}
		}
		return errs
	}
	s.acls.Store(&next)
	return errs
}

// DeleteACLs removes every binding any filter matches, durably, and
// returns per filter the bindings it matched (a binding matched by two
// filters is listed under both, as in Kafka).
func (s *Store) DeleteACLs(filters []ACLFilter) ([][]ACL, error) {
	for _, f := range filters {
		if err := ValidateFilter(f); err != nil {
			return nil, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := *s.acls.Load()
	matched := make([][]ACL, len(filters))
	next := make([]ACL, 0, len(cur))
	for _, a := range cur {
		hit := false
		for i, f := range filters {
			if f.Matches(a) {
				matched[i] = append(matched[i], a)
				hit = true
			}
		}
		if !hit {
			next = append(next, a)
		}
	}
	if len(next) == len(cur) {
		return matched, nil
	}
	if err := s.save(s.users, next); err != nil {
		return nil, err
	}
	s.acls.Store(&next)
	return matched, nil
}
