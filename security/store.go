package security

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/ringlog/ringlog/internal/fsutil"
)

// ErrNoSuchCredential is a delete of a credential the user does not have.
var ErrNoSuchCredential = errors.New("no such SCRAM credential")

// Store keeps a broker's SCRAM credentials and ACL bindings in one JSON
// file. Every change is saved before it becomes visible, atomically (a
// crash leaves the old file or the new one) and durably (fsynced), and a
// change whose save fails leaves the store as it was. Changes are
// serialised; readers take no lock: the users and the ACLs are immutable
// snapshots behind atomic pointers, replaced whole by each change, so the
// authorizer on every request and SASL exchanges never wait for a save.
type Store struct {
	Decoys // the made-up credentials of unknown users
	path   string

	mu    sync.Mutex // held by changes, across their save
	users atomic.Pointer[userMap]
	acls  atomic.Pointer[[]ACL]
}

// userMap is each user's credentials by mechanism. A published one is
// never modified: changes publish a modified copy.
type userMap = map[string]map[Mechanism]ScramCredential

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
	Version int     `json:"version"`
	Users   userMap `json:"users"`
	ACLs    []ACL   `json:"acls"`
}

// storeVersion is the layout this package reads and writes.
const storeVersion = 1

// OpenStore loads the store kept at path; a missing file is an empty
// store (the file appears with the first change).
func OpenStore(path string) (*Store, error) {
	if path == "" {
		return nil, errors.New("security store: empty path")
	}
	decoys, err := NewDecoys()
	if err != nil {
		return nil, err
	}
	s := &Store{Decoys: decoys, path: path}
	users, acls := userMap{}, []ACL{}
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("security store: %w", err)
	default:
		f, err := decodeStore(b)
		if err != nil {
			return nil, fmt.Errorf("security store %s is damaged (%w): restore it from a backup, or move it aside to start with no users and no ACLs", path, err)
		}
		users, acls = f.Users, f.ACLs
	}
	s.users.Store(&users)
	s.acls.Store(&acls)
	return s, nil
}

// decodeStore parses and checks a store file's contents. It drops users
// without credentials and repeated bindings, which a hand edit may leave.
func decodeStore(b []byte) (storeFile, error) {
	var f storeFile
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return f, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return f, errors.New("data after the JSON object")
	}
	if f.Version != storeVersion {
		return f, fmt.Errorf("version %d, this broker reads version %d", f.Version, storeVersion)
	}
	users := make(userMap, len(f.Users))
	for name, creds := range f.Users {
		if err := CheckUserName(name); err != nil {
			return f, err
		}
		for m, c := range creds {
			if c.Mechanism != m {
				return f, fmt.Errorf("user %q: a %s credential filed under %s", name, c.Mechanism, m)
			}
			if err := c.Check(); err != nil {
				return f, fmt.Errorf("user %q: %w", name, err)
			}
		}
		if len(creds) > 0 {
			users[name] = creds
		}
	}
	acls := make([]ACL, 0, len(f.ACLs))
	for i, a := range f.ACLs {
		if err := a.Validate(); err != nil {
			return f, fmt.Errorf("ACL %d: %w", i, err)
		}
		if !slices.Contains(acls, a) {
			acls = append(acls, a)
		}
	}
	f.Users, f.ACLs = users, acls
	return f, nil
}

// CheckUserName refuses a name no credential can be kept under: empty,
// or not UTF-8 (JSON would change it).
func CheckUserName(name string) error {
	if name == "" || !utf8.ValidString(name) {
		return fmt.Errorf("user name %q: want a non-empty UTF-8 name", name)
	}
	return nil
}

// save writes users and acls to the file; the caller holds mu and
// publishes them only once save succeeded.
func (s *Store) save(users userMap, acls []ACL) error {
	b, err := json.MarshalIndent(storeFile{Version: storeVersion, Users: users, ACLs: acls}, "", "  ")
	if err != nil {
		return fmt.Errorf("security store: encode: %w", err)
	}
	if err := fsutil.WriteFileAtomic(s.path, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("security store: save %s: %w", s.path, err)
	}
	return nil
}

// Credential returns user's credential for m (a copy).
func (s *Store) Credential(user string, m Mechanism) (ScramCredential, bool) {
	c, ok := (*s.users.Load())[user][m]
	return c.clone(), ok
}

// Users lists the users with credentials, by name, each with its
// mechanisms in order.
func (s *Store) Users() []UserInfo {
	users := *s.users.Load()
	out := make([]UserInfo, 0, len(users))
	for name, creds := range users {
		u := UserInfo{Name: name}
		for _, m := range slices.Sorted(maps.Keys(creds)) {
			u.Mechanisms = append(u.Mechanisms, MechanismInfo{Mechanism: m, Iterations: creds[m].Iterations})
		}
		out = append(out, u)
	}
	SortUsers(out)
	return out
}

// UpsertCredential sets user's credential for c.Mechanism, replacing any
// it had, and saves the store.
func (s *Store) UpsertCredential(user string, c ScramCredential) error {
	if err := CheckUserName(user); err != nil {
		return fmt.Errorf("security store: %w", err)
	}
	if err := c.Check(); err != nil {
		return fmt.Errorf("security store: user %q: %w", user, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	creds := maps.Clone((*s.users.Load())[user])
	if creds == nil {
		creds = map[Mechanism]ScramCredential{}
	}
	creds[c.Mechanism] = c.clone()
	return s.setUser(user, creds)
}

// DeleteCredential removes user's credential for m and saves the store;
// a credential the user does not have is an error wrapping
// ErrNoSuchCredential. A user left without credentials is gone.
func (s *Store) DeleteCredential(user string, m Mechanism) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := *s.users.Load()
	if _, ok := cur[user][m]; !ok {
		return fmt.Errorf("security store: user %q, %s: %w", user, m, ErrNoSuchCredential)
	}
	creds := maps.Clone(cur[user])
	delete(creds, m)
	return s.setUser(user, creds)
}

// setUser saves the users with user's credentials replaced by creds (the
// user removed when there are none) and then publishes them. The caller
// holds mu.
func (s *Store) setUser(user string, creds map[Mechanism]ScramCredential) error {
	next := maps.Clone(*s.users.Load())
	if len(creds) == 0 {
		delete(next, user)
	} else {
		next[user] = creds
	}
	if err := s.save(next, *s.acls.Load()); err != nil {
		return err
	}
	s.users.Store(&next)
	return nil
}

// ACLs returns the current bindings. The slice is shared and immutable:
// read it, do not modify it.
func (s *Store) ACLs() []ACL { return *s.acls.Load() }

// CreateACLs adds bindings and saves the store once, with one result per
// input: an invalid binding (an error wrapping ErrInvalidACL) is not
// added, and one already there is not added twice. If the save fails
// every valid input gets that error and nothing is added.
func (s *Store) CreateACLs(add []ACL) []error {
	errs := make([]error, len(add))
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := *s.acls.Load()
	next := slices.Clip(cur) // appends copy: cur stays as readers see it
	for i, a := range add {
		if errs[i] = a.Validate(); errs[i] != nil {
			continue
		}
		if !slices.Contains(next, a) {
			next = append(next, a)
		}
	}
	if len(next) == len(cur) {
		return errs
	}
	if err := s.save(*s.users.Load(), next); err != nil {
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

// DeleteACLs removes every binding any of filters matches and saves the
// store once. It returns, per filter, the bindings that filter matched (a
// binding two filters match is listed under both). An invalid filter (see
// ValidateFilter) fails the whole call before anything is deleted, as
// does a failed save.
func (s *Store) DeleteACLs(filters []ACLFilter) ([][]ACL, error) {
	for i, f := range filters {
		if err := ValidateFilter(f); err != nil {
			return nil, fmt.Errorf("security store: filter %d: %w", i, err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := *s.acls.Load()
	matched, next, _ := MatchFilters(cur, filters)
	if len(next) == len(cur) {
		return matched, nil
	}
	if err := s.save(*s.users.Load(), next); err != nil {
		return nil, err
	}
	s.acls.Store(&next)
	return matched, nil
}
