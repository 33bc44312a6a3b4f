package main

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

// add-voter and remove-voter ask again while the answer is NOT_CONTROLLER
// (an election under way), and give the last answer back when their time
// is up; any other answer ends them at once.
func TestWhileNoController(t *testing.T) {
	calls := 0
	code := func(n int) int16 {
		if n < 3 {
			return kerr.NotController.Code
		}
		return kerr.DuplicateVoter.Code
	}
	got, err := whileNoController(context.Background(), func() (int, error) {
		calls++
		return calls, nil
	}, code)
	if err != nil || got != 3 || calls != 3 {
		t.Fatalf("got answer %d after %d calls, %v; want the third", got, calls, err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel()
	calls = 0
	got, err = whileNoController(ctx, func() (int, error) {
		calls++
		return calls, nil
	}, func(int) int16 { return kerr.NotController.Code })
	if err != nil || calls < 2 || got != calls {
		t.Fatalf("until the timeout: answer %d after %d calls, %v", got, calls, err)
	}
}
