#!/usr/bin/env bash
# Usage: perf/compare.sh BEFORE_BIN AFTER_BIN RINGLOG_PERF_BIN [ROUNDS]
#
# Two ringlog builds measured side by side on one host, for before/after
# ratios that the host's drift cannot fake: ROUNDS (default 3) rounds, each
# running every measurement below once against each build (a fresh broker
# per run, from perf/with-broker.sh), the order of the builds alternating
# from round to round. The measurements:
#   e2e-10k       end-to-end latency at 10,000 records/s, acks=1
#   e2e-10k-all   the same with acks=all
#   e2e-half      end-to-end latency at HALF records/s (default 300000:
#                 half of the committed suite's max), acks=1
#   produce-1     max-rate produce, acks=1
#   produce-all   max-rate produce, acks=all
#   produce-1-zstd, produce-1-lz4
#                 max-rate produce, acks=1, batches compressed (the broker
#                 validates inside each); not in the default set
#   ingest-1      max-rate raw produce (ringlog-perf ingest: prebuilt
#                 batches, no client library), acks=1; not in the default set
#   raw-10k       e2e-10k with the raw clients (ringlog-perf e2e-raw); not
#                 in the default set
#   raw-half      e2e-half with the raw clients; not in the default set
# all with PARTITIONS (16) partitions of RECORD_SIZE (1024) B records, the
# load generator at GOMAXPROCS PROCS (1), DURATION (10s) runs after a
# WARMUP (2s); ONLY limits the measurements to some of these names. Every
# run also reads the broker's CPU time and its Go heap
# allocations (go_memstats_mallocs_total from /metrics) before and after,
# for CPU µs and allocations per record.
#
# Prints a line per run and a table of medians with AFTER/BEFORE ratios;
# OUT (default perf/results/compare-<YYYYMMDD-HHMM>) gets runs.jsonl (the
# load generator's JSON line per run, labelled "before:NAME" or
# "after:NAME", with "broker_mallocs" added) and summary.md.
set -euo pipefail

if [ $# -lt 3 ]; then
	echo "usage: $0 BEFORE_BIN AFTER_BIN RINGLOG_PERF_BIN [ROUNDS]" >&2
	exit 2
fi
before=$(realpath "$1")
after=$(realpath "$2")
perfbin=$(realpath "$3")
rounds=${4:-3}
half=${HALF:-300000}
partitions=${PARTITIONS:-16}
size=${RECORD_SIZE:-1024}
procs=${PROCS:-1}
duration=${DURATION:-10s}
warmup=${WARMUP:-2s}
out=${OUT:-perf/results/compare-$(date -u +%Y%m%d-%H%M)}
here=$(dirname "$(realpath "$0")")
mkdir -p "$out"
: >"$out/runs.jsonl"

# ONLY (default: all of them) picks measurements, e.g. ONLY="produce-1 produce-all".
read -r -a names <<<"${ONLY:-e2e-10k e2e-10k-all e2e-half produce-1 produce-all}"
# args NAME: the load generator's command line for a measurement.
args() {
	case $1 in
	e2e-10k) echo "e2e --rate 10000 --acks 1" ;;
	e2e-10k-all) echo "e2e --rate 10000 --acks all" ;;
	e2e-half) echo "e2e --rate $half --acks 1" ;;
	produce-1) echo "produce --acks 1" ;;
	produce-all) echo "produce --acks all" ;;
	produce-1-zstd) echo "produce --acks 1 --compression zstd" ;;
	produce-1-lz4) echo "produce --acks 1 --compression lz4" ;;
	ingest-1) echo "ingest --acks 1" ;;
	raw-10k) echo "e2e-raw --rate 10000 --acks 1" ;;
	raw-half) echo "e2e-raw --rate $half --acks 1" ;;
	esac
}

# mallocs: the broker's go_memstats_mallocs_total now (needs RINGLOG_HTTP).
mallocs_of() {
	curl -s "http://$1/metrics" | awk '$1 == "go_memstats_mallocs_total" { printf "%.0f", $2 }'
}
export -f mallocs_of

# run SIDE BIN NAME: one run against a fresh broker; appends its JSON line.
run() {
	local side=$1 bin=$2 name=$3 line
	# shellcheck disable=SC2016 # expanded by the inner shell
	line=$("$here/with-broker.sh" "$bin" bash -c '
		m0=$(mallocs_of "$RINGLOG_HTTP")
		line=$("$0" $1 --partitions "$2" --record-size "$3" --procs "$4" --duration "$5" --warmup "$6" \
			--report-every 0 --label "$7" | tail -n 1)
		m1=$(mallocs_of "$RINGLOG_HTTP")
		echo "${line%\}},\"broker_mallocs\":$((m1 - m0))}"' \
		"$perfbin" "$(args "$name")" "$partitions" "$size" "$procs" "$duration" "$warmup" "$side:$name" 2>/dev/null)
	echo "$line" >>"$out/runs.jsonl"
	printf "%-7s %-12s %s\n" "$side" "$name" "$(summarize <<<"$line")"
}

# num FIELD: a top-level number of the JSON line on stdin.
num() { grep -o "\"$1\":[0-9.e+-]*" | head -1 | cut -d: -f2; }
# lat KIND FIELD: a percentile of produce_latency_ms or e2e_latency_ms.
lat() { grep -o "\"$1\":{[^}]*}" | head -1 | grep -o "\"$2\":[0-9.e+-]*" | cut -d: -f2; }

# us_per_record: the broker's CPU µs per record of the JSON line on stdin.
us_per_record() {
	local l
	l=$(cat)
	awk -v b="$(num broker_cpu_cores <<<"$l")" -v r="$(num records_per_sec <<<"$l")" 'BEGIN { printf "%.4f\n", (r > 0 ? b * 1e6 / r : 0) }'
}

# summarize: records/s, p50/p99/p99.9 and CPU µs per record of the JSON
# line on stdin.
summarize() {
	local l kind=e2e_latency_ms
	l=$(cat)
	if ! grep -q '"e2e_latency_ms":{' <<<"$l"; then kind=produce_latency_ms; fi
	awk -v rps="$(num records_per_sec <<<"$l")" -v us="$(us_per_record <<<"$l")" -v p50="$(lat $kind p50 <<<"$l")" \
		-v p99="$(lat $kind p99 <<<"$l")" -v p999="$(lat $kind p99_9 <<<"$l")" -v k="$kind" 'BEGIN {
		printf "%.0f rec/s  %s p50 %.3f p99 %.3f p99.9 %.3f ms  broker %.2f µs/rec", rps, (k ~ /e2e/ ? "e2e" : "ack"), p50, p99, p999, us
	}'
}

echo "compare: before=$before after=$after; $rounds rounds; results in $out"
for r in $(seq 1 "$rounds"); do
	for name in "${names[@]}"; do
		if [ $((r % 2)) -eq 1 ]; then
			run before "$before" "$name"
			run after "$after" "$name"
		else
			run after "$after" "$name"
			run before "$before" "$name"
		fi
	done
done

# values SIDE NAME FIELD [KIND]: the measurement's values, one a line, in
# round order.
values() {
	local side=$1 name=$2 field=$3 kind=${4:-}
	grep "\"label\":\"$side:$name\"" "$out/runs.jsonl" | while read -r l; do
		if [ -n "$kind" ]; then
			lat "$kind" "$field" <<<"$l"
		elif [ "$field" = us_per_record ]; then
			us_per_record <<<"$l"
		elif [ "$field" = mallocs_per_record ]; then
			# allocations over the whole run (warm-up included) per record acknowledged
			awk -v m="$(num broker_mallocs <<<"$l")" -v s="$(num acked <<<"$l")" 'BEGIN { printf "%.4f\n", (s > 0 ? m / s : 0) }'
		else
			num "$field" <<<"$l"
		fi
	done
}
# row LABEL NAME FIELD [KIND]: medians of both builds, their ratio, and the
# geometric mean and range of the per-round ratios (each round ran both).
row() {
	local label=$1 name=$2 field=$3 kind=${4:-}
	paste <(values before "$name" "$field" "$kind") <(values after "$name" "$field" "$kind") |
		awk -v l="$label" '{
			b[NR] = $1; a[NR] = $2
			if ($1 > 0 && $2 > 0) { r = $2 / $1; s += log(r); n++; if (!lo || r < lo) lo = r; if (r > hi) hi = r }
		} END {
			mb = median(b, NR); ma = median(a, NR)
			printf "| %s | %.3f | %.3f | %s | %s |\n", l, mb, ma, (mb > 0 ? sprintf("%.2f", ma / mb) : "-"), (n ? sprintf("%.2f (%.2f-%.2f)", exp(s / n), lo, hi) : "-")
		}
		function median(v, k,    i, j, t) {
			for (i = 2; i <= k; i++) { t = v[i]; for (j = i - 1; j >= 1 && v[j] > t; j--) v[j + 1] = v[j]; v[j + 1] = t }
			return k ? v[int((k + 1) / 2)] : 0
		}'
}
{
	echo "# Before/after: $(basename "$before") against $(basename "$after")"
	echo
	echo "$(nproc) cores, $(uname -r); $rounds rounds, builds alternated; ${partitions} partitions, ${size} B records,"
	echo "load generator GOMAXPROCS ${procs}, ${duration} runs (${warmup} warm-up). Medians over the rounds,"
	echo "and the ratios of the runs of each round (the two builds minutes apart) with their range: the host's drift"
	echo "moves both runs of a round, so the per-round ratios are the steadier figure."
	echo
	echo "| measurement | before | after | after/before (medians) | per-round after/before: geo-mean (range) |"
	echo "|---|---|---|---|---|"
	for name in e2e-10k e2e-10k-all e2e-half raw-10k raw-half; do
		[[ " ${names[*]} " == *" $name "* ]] || continue
		row "$name: records/s" "$name" records_per_sec
		row "$name: e2e p50 ms" "$name" p50 e2e_latency_ms
		row "$name: e2e p99 ms" "$name" p99 e2e_latency_ms
		row "$name: e2e p99.9 ms" "$name" p99_9 e2e_latency_ms
		row "$name: e2e max ms" "$name" max e2e_latency_ms
		row "$name: broker CPU µs/record" "$name" us_per_record
		row "$name: broker allocations/record" "$name" mallocs_per_record
	done
	for name in produce-1 produce-all ingest-1; do
		[[ " ${names[*]} " == *" $name "* ]] || continue
		row "$name: records/s" "$name" records_per_sec
		row "$name: ack p99 ms" "$name" p99 produce_latency_ms
		row "$name: broker CPU µs/record" "$name" us_per_record
		row "$name: broker allocations/record" "$name" mallocs_per_record
	done
} | tee "$out/summary.md"
