# ringlog — the two commands a person needs are `make run` and `make test`.

GO       ?= go
FUZZTIME ?= 4s
# The fuzzer minimizes every new input for up to 60 s by default, which
# stalls targets whose executions take a millisecond (wal:FuzzRecover);
# a bounded number of minimization runs keeps it fuzzing.
FUZZMINIMIZE ?= 200x
# package:FuzzTarget pairs run briefly by `make test` and for FUZZTIME each
# by `make fuzz-long`; every decoder of network or disk bytes has one.
FUZZ_TARGETS := \
	./wal/batch:FuzzValidate \
	./wal/batch:FuzzDecompress \
	./wal/batch:FuzzStream \
	./wal/batch:FuzzControlRecord \
	./wal:FuzzRecover \
	./wal:FuzzReplicaModel \
	./wal:FuzzEpochCheckpoint \
	./wal:FuzzLoadIndexes \
	./wal:FuzzTxnIndex \
	./engine:FuzzDecodeMeta \
	./engine:FuzzProducerSnapshot \
	./engine:FuzzCoordinatorApply \
	./engine:FuzzShareState \
	./engine:FuzzConsumerRecords \
	./engine:FuzzTxnStateApply \
	./engine:FuzzHWCheckpoint \
	./client:FuzzDecodeRecords \
	./client:FuzzResponses \
	./netio:FuzzKafkaFrame \
	./netio:FuzzNativeFrame \
	./internal/fetchsession:FuzzSessionOps \
	./metadata:FuzzDecodeRecord \
	./internal/peer:FuzzDecodeRemoteLog \
	./metadata:FuzzDecodeImage \
	./quorum:FuzzHello \
	./internal/kwire:FuzzParseResponse \
	./internal/powerloss:FuzzJournal \
	./perf:FuzzRawResponses \
	./perf:FuzzRelay \
	./security:FuzzPlainMessage \
	./security:FuzzScramExchange \
	./security:FuzzStoreFile \
	./tiered:FuzzDecodeIndex \
	./tiered:FuzzDecodeManifest

.PHONY: run run-tiered build build-perf test vet unit fuzz-short fuzz-long bench perf flamegraph reliability overload chaos steady crash-long perf-replication sim kgo-compat

## run: the broker on the embedded defaults (data in ./data, Kafka on 127.0.0.1:9092, native on
## PORT+1, HTTP on PORT+2); PORT=19092, DATA=dir and ARGS='--flag value ...' change them
run: PORT ?= 9092
run: DATA ?= ./data
run: ARGS ?=
run: build
	./bin/ringlog serve --data-dir $(DATA) --kafka-addr 127.0.0.1:$(PORT) \
		--native-addr 127.0.0.1:$$(($(PORT)+1)) --http-addr 127.0.0.1:$$(($(PORT)+2)) $(ARGS)

## run-tiered: `make run` with tiered storage on a local S3-compatible store (ringlog dev-s3 on
## S3PORT, default PORT+10, objects under DATA-s3); topics opt in with remote.storage.enable=true
run-tiered: PORT ?= 9092
run-tiered: DATA ?= ./data
run-tiered: S3PORT ?= $$(($(PORT)+10))
run-tiered: ARGS ?=
run-tiered: build
	./bin/ringlog dev-s3 --addr 127.0.0.1:$(S3PORT) --dir $(DATA)-s3 --bucket ringlog & s3=$$!; \
	trap 'kill $$s3 2>/dev/null' EXIT; \
	AWS_ACCESS_KEY_ID=dev AWS_SECRET_ACCESS_KEY=dev ./bin/ringlog serve --data-dir $(DATA) --kafka-addr 127.0.0.1:$(PORT) \
		--native-addr 127.0.0.1:$$(($(PORT)+1)) --http-addr 127.0.0.1:$$(($(PORT)+2)) \
		--remote-storage-endpoint http://127.0.0.1:$(S3PORT) --remote-storage-bucket ringlog $(ARGS)

# VERSION is what `ringlog version` and the ringlog_build_info metric say.
VERSION ?= $(shell git describe --always --dirty 2>/dev/null)
LDFLAGS := $(if $(VERSION),-X main.version=$(VERSION))

## build: the broker binary, bin/ringlog
build:
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/ringlog ./cmd/ringlog

## build-perf: the benchmark harness, bin/ringlog-perf (a binary of its own: the
## broker does not link the load generator and the plotting stack)
build-perf:
	$(GO) build -o bin/ringlog-perf ./cmd/ringlog-perf

## test: formatting, vet, staticcheck, durcheck, the whole suite with -race, then a short fuzz run of every target
test: vet unit fuzz-short

vet:
	@unformatted="$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))"; \
	if [ -n "$$unformatted" ]; then echo "gofmt needed on:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	@# staticcheck is pinned as a tool in go.mod
	$(GO) tool staticcheck ./...
	@# durcheck: no dropped error of an fsync, a directory sync or the Close of a written file
	$(GO) run ./internal/durcheck/cmd/durcheck ./...
	@# macOS must keep building (the _other.go files); 'GOOS=darwin go vet ./...'
	@# checks the tests too, at twice the cost on a cold cache
	GOOS=darwin $(GO) build ./...
	@# the broker binary must not link perf or its plotting stack
	@if $(GO) list -deps ./cmd/ringlog | grep -E '^(gonum\.org/|github\.com/ringlog/ringlog/perf)'; then \
		echo "cmd/ringlog links the packages above: they belong to cmd/ringlog-perf"; exit 1; fi

unit:
	$(GO) test -race -count=1 -timeout 20m ./...

# A run the fuzzer itself ends with "context deadline exceeded" (its time
# ran out while a worker was still busy; no input failed, none is written
# to testdata) is run once more; any other failure fails at once.
fuzz-short:
	@for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "fuzz $$pkg $$name for $(FUZZTIME)"; \
		out=$$($(GO) test -run '^$$' -fuzz "^$$name$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZE) $$pkg 2>&1); rc=$$?; \
		if [ $$rc -ne 0 ] && echo "$$out" | grep -q 'context deadline exceeded' && ! echo "$$out" | grep -q 'Failing input written'; then \
			echo "$$out" | grep '^fuzz: elapsed'; \
			echo "fuzz $$pkg $$name: the fuzzer ran out of time mid-execution (context deadline exceeded, no failing input); once more"; \
			$(GO) test -run '^$$' -fuzz "^$$name$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZE) $$pkg || exit 1; \
		else echo "$$out"; [ $$rc -eq 0 ] || exit 1; fi; \
	done

## fuzz-long: every fuzz target for FUZZTIME (default 10m) each, then a table
## target -> execs -> execs/s -> new interesting -> crashers (inputs in testdata/fuzz/)
fuzz-long: FUZZTIME = 10m
fuzz-long:
	@out=$$(mktemp -d); failed=0; \
	for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "fuzz $$pkg $$name for $(FUZZTIME)"; \
		before=$$(ls $$pkg/testdata/fuzz/$$name 2>/dev/null | wc -l); \
		if ! $(GO) test -run '^$$' -fuzz "^$$name$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZE) $$pkg > $$out/$$name.log 2>&1; then \
			if grep -q 'context deadline exceeded' $$out/$$name.log && ! grep -q 'Failing input written' $$out/$$name.log; then \
				echo "fuzz $$pkg $$name: the fuzzer ran out of time mid-execution (context deadline exceeded, no failing input): not a failure"; \
			else failed=1; fi; \
		fi; \
		after=$$(ls $$pkg/testdata/fuzz/$$name 2>/dev/null | wc -l); \
		last=$$(grep 'fuzz: elapsed' $$out/$$name.log | tail -1); \
		execs=$$(echo "$$last" | sed -n 's/.*execs: \([0-9]*\).*/\1/p'); \
		secs=$$(echo "$$last" | sed -n 's/.*elapsed: \([0-9hms]*\),.*/\1/p' | \
			awk '{ s = 0; n = 0; for (i = 1; i <= length($$0); i++) { c = substr($$0, i, 1); \
				if (c ~ /[0-9]/) n = n * 10 + c; else { s += n * (c == "h" ? 3600 : c == "m" ? 60 : 1); n = 0 } } print s }'); \
		newi=$$(echo "$$last" | sed -n 's/.*new interesting: \([0-9]*\).*/\1/p'); \
		printf '%s %s %s %s %s\n' "$$t" "$${execs:-0}" "$$(( $${execs:-0} / ($${secs:-0} > 0 ? $${secs:-0} : 1) ))" "$${newi:-0}" "$$(( after - before ))" >> $$out/table; \
		grep -A12 -- '--- FAIL' $$out/$$name.log || true; \
	done; \
	echo; printf '%-34s %12s %9s %16s %9s\n' target execs execs/s 'new interesting' crashers; \
	while read t e r n c; do printf '%-34s %12s %9s %16s %9s\n' $$t $$e $$r $$n $$c; done < $$out/table; \
	rm -rf $$out; exit $$failed

## bench: the hot-path benchmarks (compare ratios within one run)
bench:
	$(GO) test -run '^$$' -bench . -benchtime 300ms ./wal/... ./ring/...

## perf: the standard benchmark matrix against a fresh broker on a temp data dir:
## charts, results.jsonl and summary.md (targets met/missed) in perf/results/<YYYYMMDD-HHMM>-<host>/
PERF_ARGS ?=
perf: build build-perf
	./perf/with-broker.sh ./bin/ringlog ./bin/ringlog-perf suite --out perf/results $(PERF_ARGS)

## flamegraph: CPU and allocation flame graphs (SVG) of a fresh broker under an e2e load, into flamegraphs/
flamegraph: build build-perf
	./perf/with-broker.sh ./bin/ringlog ./perf/flamegraphs.sh flamegraphs

## reliability: the long reliability scenarios (60 s overload, 10,000 idle + 500 slowloris
## connections, disk faults...) as a table: scenario | figure | pass/FAIL. Needs root for the
## tmpfs and open-file-limit scenarios (they skip without it).
reliability:
	./reliability/run.sh

## overload: only the 60 s overload scenario
overload:
	RINGLOG_OVERLOAD_SECONDS=60 $(GO) test -count=1 -v -timeout 30m -run '^TestOverload$$' ./reliability

## crash-long: TestCrashLoop for CYCLES (default 1000) SIGKILL cycles of one broker under a mixed
## load (acks=all and acks=1 producers, compaction, retention, topic churn, group commits), half of
## them power cuts (unsynced bytes dropped, torn or zeroed: internal/powerloss); figures at the end
crash-long: CYCLES ?= 1000
crash-long:
	RINGLOG_CRASH_CYCLES=$(CYCLES) $(GO) test -count=1 -timeout 0 -v -run '^TestCrashLoop$$' ./reliability

## perf-replication: acks=all throughput and ack latency with RF 3 against RF 1 on a
## three-node cluster on this host (PAIRS alternated runs, default 5); perf/results/replication-*/
perf-replication: PAIRS ?= 5
perf-replication: build build-perf
	perf/replication.sh bin/ringlog bin/ringlog-perf $(PAIRS)

## steady: TestReplicationSteady: three brokers with the default cluster timings, at half of the
## acks=all rate they reach, for DURATION (default 30m); fails on any leader change, fencing or
## step-down (a false failover); summary in steady-report.txt
steady: DURATION ?= 30m
steady:
	$(GO) build -o bin/ringlog-chaos ./cmd/ringlog
	RINGLOG_TEST_BINARY=$(abspath bin/ringlog-chaos) RINGLOG_STEADY_DURATION=$(DURATION) RINGLOG_STEADY_REPORT=$(abspath steady-report.txt) \
		$(GO) test -count=1 -timeout 0 -run '^TestReplicationSteady$$' -v ./cmd/ringlog

## kgo-compat: franz-go's own group tests (TestGroupSimple, TestGroupETL, TestTxnEtl, with their KIP-848
## cases, and Test848RegexBrokerResolves; the version go.mod pins) against ringlog serve: one broker, then a
## three-broker cluster with replication factor 3; fails on a failure or a skipped 848 case. About 1.5 min.
kgo-compat:
	$(GO) build -o bin/ringlog-chaos ./cmd/ringlog
	RINGLOG_TEST_BINARY=$(abspath bin/ringlog-chaos) RINGLOG_KGO_COMPAT=1 $(GO) test -count=1 -timeout 30m -run '^TestKgoCompat$$' -v ./cmd/ringlog

## sim: cluster's TestSimulation, three brokers in one process (internal/simcluster) through STEPS
## (default 10000) random steps of each of SEEDS (default 1,2,3): acks=all produces, link faults
## (both ways, one way, a broker isolated, clients cut off, slow links), crashes and restarts; the
## invariants checked after every step, every acknowledged record read back at the end. A failure
## prints its seed; SEEDS=that seed draws the same steps again. About 1.1 s a step on 2 cores.
sim: SEEDS ?= 1,2,3
sim: STEPS ?= 10000
sim:
	RINGLOG_SIM_SEEDS=$(SEEDS) RINGLOG_SIM_STEPS=$(STEPS) $(GO) test -count=1 -timeout 0 -run '^TestSimulation$$' -v ./cluster

## chaos: TestReplicationChaos for CYCLES (default 100) random faults of eleven kinds (leader and node
## kills, whole-cluster kills, leader pauses past the session timeout, a leader cut off from the
## other brokers, cut one way (it cannot send; or it cannot receive), a zombie leader only its own
## clients reach, producers cut off from a healthy leader, a partition's replicas shrunk and grown
## back under load, a broker drained (cluster drain) onto the others, each with a kill mid-move half
## of the time; the partition faults drawn twice as often; three voters and one broker-only node)
## on a non-race binary, bin/ringlog-chaos;
## FAULTS=kind,... limits the kinds, DURATION=90m stops the faults early (the checks still run);
## per-kind count and cluster-side/producer-side failover median/p99/max, acks=1 records lost after
## a heal and stale leadership claims in chaos-report.txt
chaos: CYCLES ?= 100
chaos: FAULTS ?=
chaos: DURATION ?=
chaos:
	$(GO) build -o bin/ringlog-chaos ./cmd/ringlog
	RINGLOG_TEST_BINARY=$(abspath bin/ringlog-chaos) RINGLOG_CHAOS_CYCLES=$(CYCLES) RINGLOG_CHAOS_FAULTS=$(FAULTS) RINGLOG_CHAOS_DURATION=$(DURATION) \
		RINGLOG_CHAOS_REPORT=$(abspath chaos-report.txt) $(GO) test -count=1 -timeout 0 -run '^TestReplicationChaos$$' -v ./cmd/ringlog
