package perf

import (
	"bufio"
	"context"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync"

	"github.com/twmb/franz-go/pkg/kadm"
	"golang.org/x/sys/unix"
)

// Env is the environment a result was measured in.
type Env struct {
	// Host, CPU model, logical CPUs, GOMAXPROCS, kernel (uname), OS,
	// architecture and Go version of the load generator's machine.
	Host       string `json:"host"`
	CPUModel   string `json:"cpu_model"`
	Cores      int    `json:"cores"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	Kernel     string `json:"kernel"`
	OS         string `json:"os"`
	Arch       string `json:"arch"`
	GoVersion  string `json:"go_version"`
	// Broker facts, read over the Kafka protocol. BrokerVersion is
	// franz-go's guess of the Kafka release whose API versions the
	// broker's ApiVersions answer matches (for a non-Kafka broker such as
	// ringlog only a hint at its protocol level).
	BrokerVersion string `json:"broker_version_guess,omitempty"`
	// BrokerBackend is the read-only broker config "io.backend"
	// (ringlog's I/O backend); BrokerCount the brokers in metadata.
	BrokerBackend string `json:"broker_backend,omitempty"`
	BrokerCount   int    `json:"broker_count,omitempty"`
	// BrokerError says why the broker facts are missing.
	BrokerError string `json:"broker_error,omitempty"`
	// Note is free text (e.g. that broker and load generator share the
	// cores).
	Note string `json:"note,omitempty"`
}

var (
	hostEnvOnce sync.Once
	hostEnv     Env
)

// HostEnv returns the facts of this machine (cached).
func HostEnv() Env {
	hostEnvOnce.Do(func() {
		h, _ := os.Hostname()
		hostEnv = Env{
			Host:       h,
			CPUModel:   cpuModel(),
			Cores:      runtime.NumCPU(),
			GOMAXPROCS: runtime.GOMAXPROCS(0),
			OS:         runtime.GOOS,
			Arch:       runtime.GOARCH,
			GoVersion:  runtime.Version(),
		}
		var u unix.Utsname
		if unix.Uname(&u) == nil {
			hostEnv.Kernel = unix.ByteSliceToString(u.Sysname[:]) + " " + unix.ByteSliceToString(u.Release[:])
		}
	})
	return hostEnv
}

// cpuModel is the first "model name" of /proc/cpuinfo.
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// BrokerEnv adds to env what the cluster says about itself: the number of
// brokers, a version guess from ApiVersions, and the I/O backend from the
// read-only broker config "io.backend" (ringlog only; other brokers leave
// it empty).
func BrokerEnv(ctx context.Context, adm *kadm.Client, env Env) Env {
	brokers, err := adm.ListBrokers(ctx)
	if err != nil {
		env.BrokerError = err.Error()
		return env
	}
	env.BrokerCount = len(brokers)
	ids := brokers.NodeIDs()
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	if vs, err := adm.ApiVersions(ctx); err == nil {
		for _, v := range vs.Sorted() {
			if v.Err == nil {
				env.BrokerVersion = v.VersionGuess()
				break
			}
		}
	}
	if len(ids) > 0 {
		rcs, err := adm.DescribeBrokerConfigs(ctx, ids[0])
		if err == nil {
			for _, rc := range rcs {
				for _, c := range rc.Configs {
					if c.Key == "io.backend" {
						env.BrokerBackend = c.MaybeValue()
					}
				}
			}
		}
	}
	return env
}
