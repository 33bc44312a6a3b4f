#!/usr/bin/env bash
# perf/partitions.sh: what idle partitions cost one broker (issue 42).
# For each count in COUNTS (default "1 10 100 1000 10000"): a fresh broker,
# one topic with that many partitions, then RSS and file descriptors of the
# broker, disk used, the time to create them, to describe them (Metadata +
# ListOffsets through the CLI), to stop cleanly, to restart after a clean
# stop and after kill -9 (until the ready line). Prints one table row per
# count. Needs bin/ringlog (make build).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-./bin/ringlog}
COUNTS=${COUNTS:-"1 10 100 1000 10000"}
PORT=${PORT:-19392}
# 1 descriptor per partition (its log; the indexes are mapped): raise the
# soft limit to the hard one.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
work=$(mktemp -d)
trap 'kill -9 $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.2f", b-a}'; }
rss_kib() { awk '/^VmRSS/{print $2}' /proc/"$1"/status; }
# gone: the process has exited. It is not this shell's child (started in a
# command substitution), so it may linger as a zombie until PID 1 reaps it;
# a zombie counts as gone.
gone() { [ ! -e /proc/"$1"/stat ] || awk '{exit !($3 == "Z")}' /proc/"$1"/stat 2>/dev/null; }
# portfree: nothing listens on PORT any more. A killed broker's main thread
# is a zombie before its other threads have exited and closed its sockets
# (seconds with 10,000 partitions), so gone alone does not free the port.
portfree() { until ! (exec 3<>/dev/tcp/127.0.0.1/$PORT) 2>/dev/null; do sleep 0.02; done; }

start() { # data dir; prints the pid once the ready line is out
	"$BIN" serve --data-dir "$1" --kafka-addr 127.0.0.1:$PORT --native-addr '' --http-addr '' \
		--max-partitions 200000 > "$work/out" 2> "$work/err" &
	local pid=$!
	for _ in $(seq 1 1200); do
		grep -q "ringlog ready" "$work/out" 2>/dev/null && { echo $pid; return; }
		gone $pid && { cat "$work/err" >&2; exit 1; }
		sleep 0.05
	done
	echo "no ready line in 60 s" >&2; exit 1
}

echo "| partitions | create s | RSS MiB | RSS KiB/partition | fds | disk MiB | describe s | clean stop s | restart s | restart after kill -9 s |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for n in $COUNTS; do
	dir="$work/d$n"
	pid=$(start "$dir")
	base=$(rss_kib $pid)
	t=$(now); "$BIN" topic create p --partitions "$n" --brokers 127.0.0.1:$PORT --timeout 300s >/dev/null; create=$(since $t)
	sleep 2
	rss=$(rss_kib $pid); fds=$(ls /proc/$pid/fd | wc -l)
	t=$(now); "$BIN" topic describe p --brokers 127.0.0.1:$PORT --timeout 300s --output json >/dev/null; describe=$(since $t)
	disk=$(du -sm "$dir" | cut -f1)
	t=$(now); kill -TERM $pid; until gone $pid; do sleep 0.02; done; stop=$(since $t); portfree
	t=$(now); pid=$(start "$dir"); restart=$(since $t)
	kill -9 $pid; until gone $pid; do sleep 0.02; done; portfree
	t=$(now); pid=$(start "$dir"); crash=$(since $t)
	kill -TERM $pid; until gone $pid; do sleep 0.02; done; portfree
	per=$(awk -v r="$rss" -v b="$base" -v n="$n" 'BEGIN{printf "%.1f", (r-b)/n}')
	echo "| $n | $create | $((rss/1024)) | $per | $fds | $disk | $describe | $stop | $restart | $crash |"
	rm -rf "$dir"
done
