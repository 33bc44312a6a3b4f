#!/usr/bin/env bash
# Usage: perf/with-broker.sh RINGLOG_BIN COMMAND [ARGS...]
#
# Starts a fresh ringlog broker on a temporary data directory (Kafka and
# HTTP on free ports, native protocol off), waits for its ready line
#   ringlog ready kafka=HOST:PORT native=off http=HOST:PORT
# and runs COMMAND with
#   RINGLOG_BROKERS   the Kafka address
#   RINGLOG_HTTP      the HTTP address (/metrics, /debug/pprof)
#   RINGLOG_DATA_DIR  the broker's data directory
#   RINGLOG_PID       the broker's process id
# Then stops the broker (SIGTERM) and removes the data directory. The exit
# status is COMMAND's. PERF_TMPDIR chooses where the data directory goes
# (default $TMPDIR or /tmp); the broker's log is kept in
# ${PERF_BROKER_LOG:-/dev/null} (set it to keep it).
set -euo pipefail

if [ $# -lt 2 ]; then
	echo "usage: $0 RINGLOG_BIN COMMAND [ARGS...]" >&2
	exit 2
fi
bin=$1
shift

tmp=$(mktemp -d "${PERF_TMPDIR:-${TMPDIR:-/tmp}}/ringlog-perf.XXXXXX")
"$bin" serve --data-dir "$tmp/data" --kafka-addr 127.0.0.1:0 --native-addr "" \
	--http-addr 127.0.0.1:0 --log-level warn >"$tmp/ready" 2>"$tmp/broker.log" &
pid=$!

cleanup() {
	if kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	if [ -n "${PERF_BROKER_LOG:-}" ]; then
		cp "$tmp/broker.log" "$PERF_BROKER_LOG" 2>/dev/null || true
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

line=""
for _ in $(seq 1 300); do
	line=$(grep -m1 '^ringlog ready ' "$tmp/ready" 2>/dev/null || true)
	[ -n "$line" ] && break
	if ! kill -0 "$pid" 2>/dev/null; then
		echo "perf: the broker exited before it was ready:" >&2
		cat "$tmp/broker.log" >&2
		exit 1
	fi
	sleep 0.1
done
if [ -z "$line" ]; then
	echo "perf: no ready line from the broker after 30s" >&2
	exit 1
fi
kafka=${line#*kafka=}
kafka=${kafka%% *}
http=${line#*http=}
http=${http%% *}
echo "perf: broker $pid ready: kafka=$kafka http=$http data=$tmp/data" >&2

export RINGLOG_BROKERS=$kafka RINGLOG_HTTP=$http RINGLOG_DATA_DIR=$tmp/data RINGLOG_PID=$pid
set +e
"$@"
status=$?
set -e
exit $status
