//go:build !linux

package ring

import (
	"errors"
	"fmt"
)

// errNoURing is why io_uring is not available off Linux.
var errNoURing = fmt.Errorf("ring: io_uring: %w on this OS", errors.ErrUnsupported)

// URing is the io_uring Backend. Off Linux it cannot be created: NewURing
// always fails, and New falls back to the portable backend.
type URing struct{}

// NewURing fails off Linux.
func NewURing(Options) (*URing, error) { return nil, errNoURing }

// Probe reports that io_uring is not available off Linux.
func Probe() (features uint32, err error) { return 0, errNoURing }

// Run returns ErrClosed: a URing cannot exist off Linux.
func (u *URing) Run([]Op) error { return ErrClosed }

// Name returns "io_uring".
func (u *URing) Name() string { return string(KindIOUring) }

// Close does nothing.
func (u *URing) Close() error { return nil }

// Features returns 0.
func (u *URing) Features() uint32 { return 0 }

// Entries returns 0.
func (u *URing) Entries() uint32 { return 0 }

// SingleIssuer returns false.
func (u *URing) SingleIssuer() bool { return false }

var _ Backend = (*URing)(nil)

// StartWriteback returns ErrClosed: a URing cannot exist off Linux.
func (u *URing) StartWriteback(int, int64, int64) error { return ErrClosed }

// DropCache returns ErrClosed: a URing cannot exist off Linux.
func (u *URing) DropCache(int, int64, int64) error { return ErrClosed }
