package perf

import (
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// cpuSample is the CPU time used so far by this process (the load
// generator) and, when its pid is known, by the broker.
type cpuSample struct {
	at      time.Time
	self    time.Duration
	broker  time.Duration
	brokerK bool
	steal   time.Duration // the machine's steal time so far, all CPUs
	// selfWait and brokerWait are the time the threads of each process
	// spent runnable without a CPU so far (runDelay); the bools say
	// whether it could be read.
	selfWait, brokerWait   time.Duration
	selfWaitK, brokerWaitK bool
}

// clockTick is USER_HZ, the unit of /proc/PID/stat times (100 on Linux).
const clockTick = 10 * time.Millisecond

func sampleCPU(brokerPID int) cpuSample {
	s := cpuSample{at: time.Now()}
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) == nil {
		s.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	s.selfWait, s.selfWaitK = runDelay(os.Getpid())
	if brokerPID > 0 {
		s.broker, s.brokerK = procCPU(brokerPID)
		s.brokerWait, s.brokerWaitK = runDelay(brokerPID)
	}
	s.steal = stealTime()
	return s
}

// runDelay is the time the threads of process pid spent runnable but
// waiting for a CPU so far: the sum of the run_delay field (the second) of
// each /proc/PID/task/TID/schedstat. A thread that exited takes its share
// with it (Go's threads rarely do). False where the files cannot be read
// (a kernel without CONFIG_SCHED_INFO, off Linux).
func runDelay(pid int) (time.Duration, bool) {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0, false
	}
	var sum int64
	read := false
	for _, t := range tasks {
		b, err := os.ReadFile(dir + "/" + t.Name() + "/schedstat")
		if err != nil {
			continue // exited meanwhile
		}
		f := strings.Fields(string(b))
		if len(f) < 2 {
			continue
		}
		if v, err := strconv.ParseInt(f[1], 10, 64); err == nil {
			sum += v
			read = true
		}
	}
	return time.Duration(sum), read
}

// stealTime is the steal column of /proc/stat's cpu line: time the
// hypervisor ran other guests while this one had work (0 off Linux or on
// bare metal).
func stealTime() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	// cpu user nice system idle iowait irq softirq steal ...
	if len(f) < 9 || f[0] != "cpu" {
		return 0
	}
	v, err := strconv.ParseInt(f[8], 10, 64)
	if err != nil {
		return 0
	}
	return time.Duration(v) * clockTick
}

// procCPU reads utime+stime of a process from /proc/PID/stat.
func procCPU(pid int) (time.Duration, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// The command name may hold spaces: the fields after it start at
	// the last ')'. utime and stime are fields 14 and 15 (1-based), so
	// 12 and 13 after the name.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, false
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(u+st) * clockTick, true
}

// setCPU records the cores used between two samples.
func (res *Result) setCPU(a, b cpuSample) {
	wall := b.at.Sub(a.at).Seconds()
	if wall <= 0 {
		return
	}
	res.LoadGenCores = (b.self - a.self).Seconds() / wall
	res.StealCores = (b.steal - a.steal).Seconds() / wall
	if a.brokerK && b.brokerK {
		res.BrokerCores = (b.broker - a.broker).Seconds() / wall
	}
	if a.selfWaitK && b.selfWaitK {
		res.LoadGenRunWait = max(0, (b.selfWait-a.selfWait).Seconds()/wall)
	}
	if a.brokerWaitK && b.brokerWaitK {
		res.BrokerRunWait = max(0, (b.brokerWait-a.brokerWait).Seconds()/wall)
	}
}
