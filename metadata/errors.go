package metadata

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
)

// RefusedError is why Apply refused a record: a precondition did not hold.
// The record stays in the Raft log and every node refuses it identically
// (same code, same text), so a refusal is a definite answer: the record
// changed nothing, anywhere.
//
// It unwraps to its Kafka error, so errors.Is(err, kerr.TopicAlreadyExists)
// works and the Kafka handlers' error mapping returns Code.
type RefusedError struct {
	Code   *kerr.Error
	Reason string
}

// Error is the Kafka error's text and the reason, as the codebase's
// other errors ("NAME: description: reason").
func (e *RefusedError) Error() string { return e.Code.Error() + ": " + e.Reason }

// Unwrap returns the Kafka error.
func (e *RefusedError) Unwrap() error { return e.Code }

func refuse(code *kerr.Error, format string, args ...any) *RefusedError {
	return &RefusedError{Code: code, Reason: fmt.Sprintf(format, args...)}
}
