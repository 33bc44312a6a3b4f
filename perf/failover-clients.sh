#!/usr/bin/env bash
# Usage: perf/failover-clients.sh RINGLOG_BINARY [CYCLES]
#
# How long a producer stalls when the partition leader of a three-broker
# ringlog cluster fails, for two client libraries (franz-go, and librdkafka
# through confluent_kafka), each with its default settings and with "fast
# failover" settings, and for two faults:
#
#   pause  SIGSTOP the leader's process for PAUSE s (25), then SIGCONT it (a hung
#          broker: its sockets stay open, nothing answers);
#   kill   SIGKILL the leader (its connections are reset); it is restarted
#          with the same flags after the cycle.
#
# One cluster serves the whole run (loopback, fresh data directories under a
# mktemp -d, every node a voter); topic "failover", 1 partition, replication
# factor 3, min.insync.replicas 2. CYCLES (default 5) rounds; each round runs
# every fault x client x settings combination once, in that order. One cycle:
# wait until the partition has a leader and a full ISR (3), start the
# producer (perf/failoverclient or perf/failover_rdkafka.py: one record every
# 5 ms, acks=all, idempotent), wait for its first ack, let it run 3 s, apply
# the fault to the current leader, keep producing (pause: PAUSE s stopped +
# 4 s after SIGCONT; kill: 10 s), then stop producing; the producer drains
# for up to 60 s.
#
# The stall of a cycle: from the fault (SIGSTOP / SIGKILL) to the first
# acknowledgement of a record produced after it ("none" if there was none).
#
# Writes perf/results/failover-clients-<YYYYMMDD-HHMM>/ (or $OUT):
#   results.txt  the table (also printed)
#   cycles.txt   one line per cycle
#   raw/         each producer's lines "<produce ns> <ack ns> <ok|err:...>"
#                and stderr, each cycle's fault times, the broker logs
#
# Needs: go (to build perf/failoverclient), /usr/bin/python3 with the Debian
# package python3-confluent-kafka (apt-get install -y python3-confluent-kafka).
# Knobs (env): KAFKA_PORT (29092: brokers on KAFKA_PORT..+2), CTRL_PORT
# (29192), PYTHON (/usr/bin/python3), OUT, PAUSE (25).
set -euo pipefail

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
	echo "usage: $0 RINGLOG_BINARY [CYCLES]" >&2
	exit 2
fi
cd "$(dirname "$0")/.."
bin=$1
cycles=${2:-5}
case $bin in /*) ;; *) bin=$PWD/$bin ;; esac
kport=${KAFKA_PORT:-29092}
cport=${CTRL_PORT:-29192}
python=${PYTHON:-/usr/bin/python3}
topic=failover
before=3 # seconds of producing before the fault
paused=${PAUSE:-25} # seconds the leader stays stopped (pause): longer than the
                    # clients' default request timeouts, or they only look timely
after=4  # seconds of producing after SIGCONT (kill: 10 s after the SIGKILL)
drain=60 # seconds the producer may take to settle what is in flight

if [ ! -x "$bin" ]; then
	echo "building $bin"
	go build -o "$bin" ./cmd/ringlog
fi
if ! "$python" -c 'import confluent_kafka' 2>/dev/null; then
	echo "failover: $python cannot import confluent_kafka (apt-get install -y python3-confluent-kafka)" >&2
	exit 1
fi
for p in $kport $((kport + 1)) $((kport + 2)) $cport $((cport + 1)) $((cport + 2)); do
	if (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null; then
		echo "failover: port $p is in use (set KAFKA_PORT / CTRL_PORT)" >&2
		exit 1
	fi
done

out=${OUT:-perf/results/failover-clients-$(date +%Y%m%d-%H%M)}
mkdir -p "$out/raw"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ringlog-failover.XXXXXX")
declare -A pids=()
producer=

cleanup() {
	local p
	[ -n "$producer" ] && kill -KILL "$producer" 2>/dev/null || true
	for p in "${pids[@]}"; do kill -CONT "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	for i in 1 2 3; do
		[ -f "$tmp/broker$i.log" ] && cp "$tmp/broker$i.log" "$out/raw/" || true
	done
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "building perf/failoverclient"
go build -o "$tmp/failoverclient" ./perf/failoverclient

brokers="127.0.0.1:$kport,127.0.0.1:$((kport + 1)),127.0.0.1:$((kport + 2))"
voters="1@127.0.0.1:$cport,2@127.0.0.1:$((cport + 1)),3@127.0.0.1:$((cport + 2))"

# start_broker I: starts node I (again, after a kill) and waits until it is ready.
start_broker() {
	local i=$1
	: >"$tmp/ready$i"
	"$bin" serve --node-id "$i" --data-dir "$tmp/d$i" --kafka-addr "127.0.0.1:$((kport + i - 1))" \
		--controller-addr "127.0.0.1:$((cport + i - 1))" --voters "$voters" --native-addr '' --http-addr '' \
		--group-initial-rebalance-delay 0s --log-level warn >"$tmp/ready$i" 2>>"$tmp/broker$i.log" &
	pids[$i]=$!
	for _ in $(seq 1 300); do
		grep -q '^ringlog ready ' "$tmp/ready$i" && return 0
		if ! kill -0 "${pids[$i]}" 2>/dev/null; then
			echo "failover: broker $i exited before it was ready:" >&2
			tail -20 "$tmp/broker$i.log" >&2
			exit 1
		fi
		sleep 0.1
	done
	echo "failover: broker $i not ready after 30 s" >&2
	exit 1
}

# partition_state: prints "LEADER ISR-SIZE" of partition 0 ("-1 0" when unknown).
partition_state() {
	"$bin" topic describe "$topic" --brokers "$brokers" --timeout 5s 2>/dev/null |
		awk 'BEGIN { l = -1; n = 0 } /^PARTITION/ { t = 1; next } t && $1 == "0" { l = $2; n = split($5, a, ",") } END { print l, n }' || true
}

# wait_full_isr: waits (up to 60 s) until the partition has a leader and all three replicas in its ISR.
wait_full_isr() {
	local l n
	for _ in $(seq 1 120); do
		read -r l n < <(partition_state)
		if [ "$l" -ge 1 ] && [ "$n" -eq 3 ]; then
			return 0
		fi
		sleep 0.5
	done
	echo "failover: partition 0 has no leader or no full ISR after 60 s (leader $l, ISR size $n)" >&2
	exit 1
}

for i in 1 2 3; do start_broker "$i"; done
created=
for _ in $(seq 1 30); do
	if "$bin" topic create "$topic" --partitions 1 --replication-factor 3 --config min.insync.replicas=2 \
		--if-not-exists --brokers "$brokers" --timeout 5s >/dev/null 2>"$tmp/create.err"; then
		created=1
		break
	fi
	sleep 1
done
if [ -z "$created" ]; then
	echo "failover: could not create topic $topic in 30 s:" >&2
	cat "$tmp/create.err" >&2
	exit 1
fi
wait_full_isr

# The exact settings of each variant, for the table.
declare -A settings=(
	[franz-go/default]="kgo defaults (ProduceRequestTimeout=10s RequestTimeoutOverhead=10s MetadataMinAge=5s) acks=all idempotent"
	[franz-go/fast]="ProduceRequestTimeout=2s RequestTimeoutOverhead=1s MetadataMinAge=250ms acks=all idempotent"
	[librdkafka/default]="$("$python" perf/failover_rdkafka.py --print-settings)"
	[librdkafka/fast]="$("$python" perf/failover_rdkafka.py --print-settings --fast)"
)
fgver=$(awk '$1 == "github.com/twmb/franz-go" { print $2 }' go.mod)
rdver=$("$python" -c 'import confluent_kafka as c; print("confluent_kafka %s, librdkafka %s" % (c.version()[0], c.libversion()[0]))')

# cycle FAULT CLIENT SETTING N: one cycle; appends its line to cycles.txt.
cycle() {
	local fault=$1 client=$2 setting=$3 n=$4
	local name="$client-$setting-$fault-$n" leader l isr lpid t0 t1 flag=()
	read -r leader isr < <(partition_state)
	lpid=${pids[$leader]}
	[ "$setting" = fast ] && flag=(--fast)
	local lines="$out/raw/$name.lines"
	if [ "$client" = franz-go ]; then
		"$tmp/failoverclient" --brokers "$brokers" --topic "$topic" --duration 120s --drain "${drain}s" "${flag[@]}" \
			>"$lines" 2>"$out/raw/$name.err" &
	else
		"$python" perf/failover_rdkafka.py --brokers "$brokers" --topic "$topic" --duration 120 --drain "$drain" "${flag[@]}" \
			>"$lines" 2>"$out/raw/$name.err" &
	fi
	producer=$!
	for _ in $(seq 1 200); do
		grep -q ' ok$' "$lines" && break
		sleep 0.1
	done
	if ! grep -q ' ok$' "$lines"; then
		echo "failover: $name: no acknowledged record within 20 s" >&2
		cat "$out/raw/$name.err" >&2
		exit 1
	fi
	sleep "$before"
	t0=$(date +%s%N)
	if [ "$fault" = pause ]; then
		kill -STOP "$lpid"
		sleep "$paused"
		kill -CONT "$lpid"
		t1=$(date +%s%N)
		sleep "$after"
	else
		kill -KILL "$lpid"
		wait "$lpid" 2>/dev/null || true
		t1=$t0
		sleep 10 # a killed leader's connections are reset: no long timeout to wait out
	fi
	kill -TERM "$producer"
	wait "$producer" || echo "failover: $name: producer exited with status $?" >&2
	producer=
	echo "leader=$leader fault_ns=$t0 resume_ns=$t1" >"$out/raw/$name.fault"
	if [ "$fault" = kill ]; then
		start_broker "$leader"
	fi
	# client setting fault cycle leader stall_ms failed records max_latency_ms
	awk -v t0="$t0" -v c="$client" -v s="$setting" -v f="$fault" -v n="$n" -v l="$leader" '
		{ recs++ }
		$3 != "ok" { failed++; next }
		$1 + 0 >= t0 && (first == "" || $2 + 0 < first) { first = $2 + 0 }
		{ lat = ($2 - $1) / 1e6; if (lat > maxlat) maxlat = lat }
		END {
			stall = first == "" ? "none" : sprintf("%.0f", (first - t0) / 1e6)
			printf "%s %s %s %d %d %s %d %d %.0f\n", c, s, f, n, l, stall, failed, recs, maxlat
		}' "$lines" | tee -a "$out/cycles.txt"
	wait_full_isr
	sleep 1
}

echo "cluster: 3 brokers at $brokers; $cycles cycle(s) of pause and kill x franz-go and librdkafka x default and fast"
echo "# client setting fault cycle leader stall_ms failed records max_latency_ms" >"$out/cycles.txt"
for n in $(seq 1 "$cycles"); do
	for fault in pause kill; do
		for client in franz-go librdkafka; do
			for setting in default fast; do
				cycle "$fault" "$client" "$setting" "$n"
			done
		done
	done
done

# The table: per client, settings and fault, the stalls' n, median, p99
# (nearest rank: the max below 100 cycles) and max, and the failed records.
{
	echo "# Producer stall on partition-leader failure, 3-broker ringlog cluster"
	echo
	echo "$(date -Iseconds), $(nproc) cores, $(uname -r), $("$bin" version | head -1)"
	echo "franz-go $fgver; $rdver"
	echo "topic $topic: 1 partition, RF 3, min.insync.replicas 2; one record every 5 ms, acks=all, idempotent"
	echo "pause: SIGSTOP the leader for ${paused} s, then SIGCONT; kill: SIGKILL the leader (restarted after the cycle)"
	echo "stall: fault -> first ack of a record produced after the fault, ms (none: no such ack); one cluster for all cycles"
	echo
	for client in franz-go librdkafka; do
		for setting in default fast; do
			for fault in pause kill; do
				awk -v c="$client" -v s="$setting" -v f="$fault" -v set="${settings[$client/$setting]}" '
					$1 == c && $2 == s && $3 == f { n++; failed += $7; if ($6 == "none") none++; else v[++k] = $6 + 0 }
					END {
						for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
						med = k ? (k % 2 ? v[(k + 1) / 2] : (v[k / 2] + v[k / 2 + 1]) / 2) : "-"
						r = int(0.99 * k + 0.999999); if (r < 1) r = 1
						p99 = k ? v[r] : "-"; mx = k ? v[k] : "-"
						if (none) { p99 = "none"; mx = "none" }
						printf "%s\t%s (%s)\t%s\t%d\t%s\t%s\t%s\t%d\n", c, s, set, f, n, med, p99, mx, failed
					}' "$out/cycles.txt"
			done
		done
	done | (
		printf "client\tsettings\tfault\tn\tmedian ms\tp99 ms\tmax ms\tfailed records\n"
		cat
	) | column -t -s $'\t'
	echo
	echo "cycles with no ack after the fault count in n and make p99/max \"none\"; failed records: summed over the cycles"
} | tee "$out/results.txt"
echo "results in $out"
