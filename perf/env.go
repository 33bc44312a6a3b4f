package perf

import (
	"bufio"
	"context"
	"fmt"
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
	// Broker facts, read over the Kafka protocol. BrokerAPIs lists the
	// highest version the broker serves of the requests that say what it
	// speaks ("Produce v12, Fetch v16, ..."), from its ApiVersions
	// answer. (A Kafka release guessed from the whole answer, as
	// kversion does, compares every API Kafka has: a broker serving a
	// subset, as ringlog does, comes out as an ancient release.)
	BrokerAPIs string `json:"broker_api_versions,omitempty"`
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
// brokers, the versions of the key APIs from ApiVersions, and the I/O backend from the
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
				env.BrokerAPIs = apiLevel(v.KeyMaxVersion)
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

// keyAPIs are the requests whose versions tell what a broker speaks to a
// producer and a consumer (Kafka API keys).
var keyAPIs = []struct {
	key  int16
	name string
}{
	{0, "Produce"}, {1, "Fetch"}, {2, "ListOffsets"}, {3, "Metadata"},
	{8, "OffsetCommit"}, {11, "JoinGroup"}, {18, "ApiVersions"},
}

// apiLevel lists the highest version of each key API that maxOf reports
// ("Produce v12, Fetch v16, ..."; "-" for one the broker lacks).
func apiLevel(maxOf func(key int16) (int16, bool)) string {
	parts := make([]string, len(keyAPIs))
	for i, a := range keyAPIs {
		if v, ok := maxOf(a.key); ok {
			parts[i] = fmt.Sprintf("%s v%d", a.name, v)
		} else {
			parts[i] = a.name + " -"
		}
	}
	return strings.Join(parts, ", ")
}
