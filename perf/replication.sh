#!/usr/bin/env bash
# Usage: perf/replication.sh RINGLOG_BIN RINGLOG_PERF_BIN [PAIRS]
#
# What replication costs, measured side by side on one host: starts a
# three-node ringlog cluster (every node a voter, loopback ports, fresh
# data directories), then runs PAIRS (default 5) pairs of max-rate
# acks=all produce runs, one on a topic with replication factor 1 and one
# with replication factor 3 (min.insync.replicas stays 1, so RF 3 waits
# for all three in-sync replicas), alternating which goes first, and one
# pair of fixed-rate runs (RATE records/s, default 5000) for the
# produce-to-ack latency. Prints one line per run and a table of the
# RF3/RF1 ratios (geometric mean over the pairs); OUT (default
# perf/results/replication-<YYYYMMDD-HHMM>) gets runs.jsonl and
# summary.md.
#
# Knobs (env): PARTITIONS (16), RECORD_SIZE (1024), DURATION (8s),
# WARMUP (2s), RATE (5000), PRODUCERS (1), PROCS (0: all cores),
# SHARDS (0: one per core), OUT.
set -euo pipefail

if [ $# -lt 2 ]; then
	echo "usage: $0 RINGLOG_BIN RINGLOG_PERF_BIN [PAIRS]" >&2
	exit 2
fi
bin=$1
perfbin=$2
pairs=${3:-5}
partitions=${PARTITIONS:-16}
size=${RECORD_SIZE:-1024}
duration=${DURATION:-8s}
warmup=${WARMUP:-2s}
rate=${RATE:-5000}
producers=${PRODUCERS:-1}
procs=${PROCS:-0}
shards=${SHARDS:-0}
out=${OUT:-perf/results/replication-$(date -u +%Y%m%d-%H%M)}

tmp=$(mktemp -d "${PERF_TMPDIR:-${TMPDIR:-/tmp}}/ringlog-repl.XXXXXX")
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Six free loopback ports: three Kafka listeners, three Raft listeners.
free_port() {
	local p
	for _ in $(seq 1 200); do
		p=$((20000 + RANDOM % 40000))
		if ! (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null; then
			echo "$p"
			return
		fi
	done
	echo "perf: no free port found" >&2
	exit 1
}
kafka=() ctrl=()
for i in 1 2 3; do kafka+=("$(free_port)"); ctrl+=("$(free_port)"); done
voters="1@127.0.0.1:${ctrl[0]},2@127.0.0.1:${ctrl[1]},3@127.0.0.1:${ctrl[2]}"
for i in 1 2 3; do
	"$bin" serve --node-id "$i" --data-dir "$tmp/d$i" --kafka-addr "127.0.0.1:${kafka[$((i - 1))]}" \
		--controller-addr "127.0.0.1:${ctrl[$((i - 1))]}" --voters "$voters" --native-addr "" --http-addr "" \
		--shards "$shards" --log-level warn >"$tmp/ready$i" 2>"$tmp/broker$i.log" &
	pids+=($!)
done
for i in 1 2 3; do
	for _ in $(seq 1 300); do
		grep -q '^ringlog ready ' "$tmp/ready$i" 2>/dev/null && break
		if ! kill -0 "${pids[$((i - 1))]}" 2>/dev/null; then
			echo "perf: broker $i exited before it was ready:" >&2
			cat "$tmp/broker$i.log" >&2
			exit 1
		fi
		sleep 0.1
	done
done
brokers="127.0.0.1:${kafka[0]},127.0.0.1:${kafka[1]},127.0.0.1:${kafka[2]}"
sleep 2 # every broker registered and unfenced

mkdir -p "$out"
: >"$out/runs.jsonl"

# run LABEL RF [FLAGS...]: one produce run; prints "records_per_sec p50 p99 p99.9".
run() {
	local label=$1 rf=$2
	shift 2
	local line
	line=$("$perfbin" produce --brokers "$brokers" --acks all --replication-factor "$rf" --partitions "$partitions" \
		--record-size "$size" --producers "$producers" --duration "$duration" --warmup "$warmup" --procs "$procs" \
		--report-every 0 --label "$label" "$@" | tail -n 1)
	echo "$line" >>"$out/runs.jsonl"
	local rps lat
	rps=$(grep -o '"records_per_sec":[0-9.e+]*' <<<"$line" | head -1 | cut -d: -f2)
	lat=$(grep -o '"produce_latency_ms":{[^}]*}' <<<"$line" | head -1)
	field() { grep -o "\"$1\":[0-9.e+-]*" <<<"$lat" | head -1 | cut -d: -f2; }
	echo "${rps:-0} $(field p50) $(field p99) $(field p99.9)"
}

echo "cluster: 3 brokers at $brokers; $pairs pairs of max-rate acks=all runs, ${partitions} partitions, ${size} B records"
declare -a ratios=() rf1s=() rf3s=()
for i in $(seq 1 "$pairs"); do
	if [ $((i % 2)) -eq 1 ]; then order="1 3"; else order="3 1"; fi
	declare -A got=()
	for rf in $order; do
		read -r rps p50 p99 p999 < <(run "max-rf$rf-$i" "$rf")
		got[$rf]=$rps
		printf "pair %d RF %d: %10.0f records/s  ack p50 %s ms  p99 %s ms\n" "$i" "$rf" "$rps" "$p50" "$p99"
	done
	rf1s+=("${got[1]}")
	rf3s+=("${got[3]}")
	ratios+=("$(awk -v a="${got[3]}" -v b="${got[1]}" 'BEGIN { if (b > 0) printf "%.4f", a / b; else print 0 }')")
	unset got
done
read -r l1 l1p50 l1p99 l1p999 < <(run "rate-rf1" 1 --rate "$rate")
read -r l3 l3p50 l3p99 l3p999 < <(run "rate-rf3" 3 --rate "$rate")

geo=$(printf "%s\n" "${ratios[@]}" | awk '$1 > 0 { s += log($1); n++ } END { if (n) printf "%.3f", exp(s / n); else print "n/a" }')
minr=$(printf "%s\n" "${ratios[@]}" | sort -g | head -1)
maxr=$(printf "%s\n" "${ratios[@]}" | sort -g | tail -1)
med1=$(printf "%s\n" "${rf1s[@]}" | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')
med3=$(printf "%s\n" "${rf3s[@]}" | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')
{
	echo "# Replication cost: RF 3 against RF 1, acks=all, one host"
	echo
	echo "Three ringlog brokers on loopback ($(nproc) cores, $(uname -r)), ${partitions} partitions, ${size} B records,"
	echo "${producers} producer(s), ${duration} runs (${warmup} warm-up), pairs alternated; min.insync.replicas 1."
	echo
	echo "| | RF 1 | RF 3 | RF3/RF1 |"
	echo "|---|---|---|---|"
	printf "| max throughput, median of %d (records/s) | %.0f | %.0f | geo-mean %s (pairs %s..%s) |\n" "$pairs" "$med1" "$med3" "$geo" "$minr" "$maxr"
	printf "| ack latency at %s records/s, p50 (ms) | %s | %s | +%s ms |\n" "$rate" "$l1p50" "$l3p50" "$(awk -v a="$l3p50" -v b="$l1p50" 'BEGIN { printf "%.3f", a - b }')"
	printf "| ack latency at %s records/s, p99 (ms) | %s | %s | +%s ms |\n" "$rate" "$l1p99" "$l3p99" "$(awk -v a="$l3p99" -v b="$l1p99" 'BEGIN { printf "%.3f", a - b }')"
	printf "| ack latency at %s records/s, p99.9 (ms) | %s | %s | |\n" "$rate" "$l1p999" "$l3p999"
	echo
	echo "Per-pair RF3/RF1 throughput ratios: ${ratios[*]}"
} | tee "$out/summary.md"
echo "results in $out"
