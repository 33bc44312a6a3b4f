package perf

import (
	"context"
	"fmt"
	"net"

	"github.com/twmb/franz-go/pkg/kfake"
)

// ServeKfake runs franz-go's in-memory fake Kafka (kfake: one broker, the
// records kept in memory, nothing written) on ln until ctx ends, calling
// ready once it serves. It is the suite's CPU reference: a broker that
// does the protocol work and none of the storage, so that ringlog's CPU
// per record can be judged against it on the same cores in the same run.
func ServeKfake(ctx context.Context, ln net.Listener, ready func()) error {
	used := false
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.ListenFn(func(string, string) (net.Listener, error) {
		if used {
			return nil, fmt.Errorf("kfake asked for a second listener")
		}
		used = true
		return ln, nil
	}))
	if err != nil {
		ln.Close()
		return fmt.Errorf("kfake: %w", err)
	}
	ready()
	<-ctx.Done()
	c.Close()
	return nil
}
