#!/usr/bin/env bash
# Usage: perf/with-broker.sh ./bin/ringlog perf/flamegraphs.sh [OUT_DIR]
#   ('make flamegraph'; needs bin/ringlog-perf: 'make build-perf')
#
# Run inside perf/with-broker.sh (which sets RINGLOG_BROKERS and
# RINGLOG_HTTP): puts an end-to-end load on the broker (producers at full
# speed, a consumer reading along: both the produce and the fetch paths),
# and while it runs takes a CPU profile and an allocation (delta) profile
# from the broker's pprof endpoint, then the cumulative allocation profile,
# then a CPU profile under an acks=all produce load, and renders them as
# flame graph SVGs into OUT_DIR (default flamegraphs/) with
# 'ringlog-perf flamegraph' (raw profiles and top-function lists next to
# them). RINGLOG_PERF_BIN names the ringlog-perf binary (default
# ./bin/ringlog-perf). RATE (default max) fixes the e2e load's records/s,
# for profiles of the per-record path at a low rate (RATE=10000: a produce
# and a fetch per record), with the load generator at GOMAXPROCS PROCS
# (default 0: all CPUs).
set -euo pipefail

out=${1:-flamegraphs}
bin=${RINGLOG_PERF_BIN:-./bin/ringlog-perf}
secs=${PROFILE_SECONDS:-20}
rate=${RATE:-max}
procs=${PROCS:-0}
: "${RINGLOG_BROKERS:?run me inside perf/with-broker.sh}"
: "${RINGLOG_HTTP:?run me inside perf/with-broker.sh}"
mkdir -p "$out"

load_secs=$((secs + 8))
echo "flamegraph: ${load_secs}s of e2e load (1 KiB records, 16 partitions, acks=1, rate $rate); profiling the broker for ${secs}s" >&2
"$bin" e2e --brokers "$RINGLOG_BROKERS" --record-size 1024 --partitions 16 --acks 1 --rate "$rate" --procs "$procs" \
	--duration "${load_secs}s" --warmup 2s --report-every 5s >"$out/load.txt" &
load=$!
sleep 3

base="http://$RINGLOG_HTTP/debug/pprof"
"$bin" flamegraph --pprof "$base/profile?seconds=$secs" --save-profile "$out/cpu.pb.gz" \
	--title "ringlog broker CPU, ${secs}s under e2e load (1 KiB, 16 partitions, acks=1, rate $rate)" \
	--out "$out/cpu.svg" --top 25 >"$out/cpu-top.txt" &
cpu=$!
"$bin" flamegraph --pprof "$base/allocs?seconds=$secs" --save-profile "$out/allocs-under-load.pb.gz" --sample alloc_space \
	--title "ringlog broker bytes allocated during ${secs}s of e2e load only (delta profile)" \
	--out "$out/allocs-under-load.svg" --top 25 >"$out/allocs-under-load-top.txt" &
allocs=$!
wait $cpu
wait $allocs
wait $load
# The delta profile above is nearly empty when the broker's hot path does
# not allocate (Go samples one allocation per 512 KiB); the cumulative
# profile since the broker started (start-up, topic creation and the whole
# load) shows where the bytes that are allocated come from.
"$bin" flamegraph --pprof "$base/allocs" --save-profile "$out/allocs.pb.gz" --sample alloc_space \
	--title "ringlog broker bytes allocated since start (start-up + ${load_secs}s of e2e load)" \
	--out "$out/allocs.svg" --top 25 >"$out/allocs-top.txt"
"$bin" flamegraph --pprof "$out/allocs.pb.gz" --sample alloc_objects \
	--title "ringlog broker objects allocated since start (start-up + ${load_secs}s of e2e load)" \
	--out "$out/allocs-objects.svg" --top 25 >"$out/allocs-objects-top.txt"
tail -2 "$out/load.txt" | head -1 >&2

# The durable path: acks=all (fdatasync through the hybrid backend).
all_secs=$((secs / 2 + 1))
echo "flamegraph: $((all_secs + 6))s of produce load with acks=all; profiling the broker for ${all_secs}s" >&2
"$bin" produce --brokers "$RINGLOG_BROKERS" --record-size 1024 --partitions 16 --acks all \
	--duration "$((all_secs + 6))s" --warmup 2s --report-every 5s >"$out/load-acks-all.txt" &
load=$!
sleep 3
"$bin" flamegraph --pprof "$base/profile?seconds=$all_secs" --save-profile "$out/cpu-acks-all.pb.gz" \
	--title "ringlog broker CPU, ${all_secs}s under produce load with acks=all (1 KiB, 16 partitions, max rate)" \
	--out "$out/cpu-acks-all.svg" --top 25 >"$out/cpu-acks-all-top.txt"
wait $load
tail -2 "$out/load-acks-all.txt" | head -1 >&2
echo "flamegraph: wrote $out/cpu.svg $out/allocs.svg $out/allocs-objects.svg $out/allocs-under-load.svg $out/cpu-acks-all.svg (top functions in $out/*-top.txt)" >&2
