#!/usr/bin/env bash
# perf/tiered.sh: tiered storage's numbers on one machine (issue 43).
#
# One broker with tiered storage on `ringlog dev-s3` (an S3-compatible
# store on the same machine, over loopback HTTP, objects in files), two
# topics of SIZE MiB each (PARTS partitions, 1 KiB records, 16 MiB
# segments): "local" (not tiered) and "tiered" (remote.storage.enable,
# local.retention.bytes 16 MiB a partition). It measures:
#   - upload: the store is down while "tiered" is produced; once it is up,
#     the bytes the uploader copies a second until it caught up;
#   - fetch (ringlog-perf fetch, plain Fetch requests, one fetcher, 4 MiB a
#     partition) of "local" (page cache warm), of "tiered" after a restart
#     (the broker's chunk cache empty: every byte from the store: cold) and
#     again (every byte from the cache: warm).
# The store serves from its own files' page cache on the same two cores:
# "cold" is the broker's cost of going through an S3 client and HTTP, not
# a real object store's latency. Prints a table; RESULTS=dir also keeps
# the raw JSON lines there. Needs bin/ringlog and bin/ringlog-perf.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-./bin/ringlog}
PERF=${PERF:-./bin/ringlog-perf}
SIZE=${SIZE:-256}   # MiB per topic
PARTS=${PARTS:-4}
PORT=${PORT:-19492}
S3PORT=${S3PORT:-19500}
HTTP=127.0.0.1:$((PORT + 2))
work=$(mktemp -d)
trap 'kill -9 $(jobs -p) 2>/dev/null || true; wait 2>/dev/null; rm -rf "$work"' EXIT
export AWS_ACCESS_KEY_ID=perf AWS_SECRET_ACCESS_KEY=perf

now() { date +%s.%N; }
metric() { curl -s "http://$HTTP/metrics" | awk -v m="$1" '$1 == m {printf "%.0f\n", $2; f=1} END {if (!f) print 0}'; }
sum_metric() { curl -s "http://$HTTP/metrics" | awk -v m="$1" 'index($1, m"{") == 1 {s += $2} END {printf "%.0f", s}'; }

start_broker() {
	"$BIN" serve --data-dir "$work/data" --kafka-addr 127.0.0.1:$PORT --native-addr '' --http-addr "$HTTP" \
		--remote-storage-endpoint "http://127.0.0.1:$S3PORT" --remote-storage-bucket perf \
		--remote-log-manager-interval 500ms --retention-check-interval 1s \
		--remote-fetch-cache-bytes $(((SIZE + 64) << 20)) > "$work/out" 2>> "$work/err" &
	broker=$!
	for _ in $(seq 1 600); do
		grep -q "ringlog ready" "$work/out" 2>/dev/null && return
		sleep 0.05
	done
	cat "$work/err" >&2
	exit 1
}
stop_broker() {
	kill -TERM $broker
	wait $broker || true
	: > "$work/out"
}
fetch() { # topic label: MB/s of one fetch run over the whole topic
	"$PERF" fetch --brokers 127.0.0.1:$PORT --topic "$1" --consumers 1 --fetch-bytes 4194304 --duration 10m \
		--report-every 0 --label "$2" --broker-pid $broker | tail -1 | tee -a "$work/results.jsonl" |
		python3 -c 'import json,sys; r=json.load(sys.stdin); print("%.1f" % r["mb_per_sec"])'
}

start_broker
"$BIN" topic create local --partitions $PARTS --brokers 127.0.0.1:$PORT --config segment.bytes=16777216 >/dev/null
"$BIN" topic create tiered --partitions $PARTS --brokers 127.0.0.1:$PORT --config segment.bytes=16777216 \
	--config remote.storage.enable=true --config local.retention.bytes=16777216 >/dev/null
records=$((SIZE * 1024))
for t in local tiered; do
	"$PERF" produce --brokers 127.0.0.1:$PORT --topic $t --records $records --record-size 1024 --acks 1 \
		--report-every 0 >/dev/null
done

# Upload: the store comes up now; measure from the first copied byte to
# the last (every sealed segment: all but the active one of each
# partition).
"$BIN" dev-s3 --addr 127.0.0.1:$S3PORT --dir "$work/s3" --bucket perf > /dev/null &
first="" last="" b0=0
while :; do
	b=$(metric ringlog_remote_copied_bytes_total)
	lag=$(sum_metric ringlog_partition_remote_copy_lag_bytes)
	if [ -z "$first" ] && [ "$b" -gt 0 ]; then first=$(now); b0=$b; fi
	if [ -n "$first" ] && [ "$lag" -le $((PARTS * 17 << 20)) ] && [ "$b" = "$(metric ringlog_remote_copied_bytes_total)" ]; then
		last=$(now)
		break
	fi
	sleep 0.1
done
copied=$(metric ringlog_remote_copied_bytes_total)
upload=$(awk -v a="$first" -v b="$last" -v n="$copied" -v n0="$b0" 'BEGIN{printf "%.1f", (n-n0)/1048576/(b-a)}')
sleep 3 # local retention deletes the copied segments

local1=$(fetch local local-1)
local2=$(fetch local local-2)
stop_broker
start_broker
cold=$(fetch tiered remote-cold)
reads=$(metric ringlog_remote_store_read_bytes_total)
warm=$(fetch tiered remote-warm)
reads2=$(metric ringlog_remote_store_read_bytes_total)
hits=$(metric ringlog_remote_cache_hits_total)
misses=$(metric ringlog_remote_cache_misses_total)
stop_broker

echo "| what | MB/s |"
echo "|---|---|"
echo "| upload (copies once the store is up; $(awk -v n="$copied" 'BEGIN{printf "%.0f", n/1048576}') MiB) | $upload |"
echo "| fetch, local (first run) | $local1 |"
echo "| fetch, local (second run) | $local2 |"
echo "| fetch, remote, cold cache (every byte from the store: $((reads >> 20)) MiB) | $cold |"
echo "| fetch, remote, warm cache (store bytes during the run: $(((reads2 - reads) >> 20)) MiB) | $warm |"
echo
echo "cache hits $hits, misses $misses over both remote runs; remote cold / local: $(awk -v a="$cold" -v b="$local2" 'BEGIN{printf "%.2f", a/b}'), warm / local: $(awk -v a="$warm" -v b="$local2" 'BEGIN{printf "%.2f", a/b}')"
if [ -n "${RESULTS:-}" ]; then
	mkdir -p "$RESULTS"
	cp "$work/results.jsonl" "$RESULTS/"
fi
