# ringlog — the two commands a person needs are `make run` and `make test`.

GO       ?= go
FUZZTIME ?= 8s
# package:FuzzTarget pairs run briefly by `make test`; every decoder of
# network or disk bytes has one.
FUZZ_TARGETS := \
	./wal/batch:FuzzValidate \
	./wal/batch:FuzzDecompress \
	./wal:FuzzRecover \
	./netio:FuzzKafkaFrame \
	./netio:FuzzNativeFrame \
	./metadata:FuzzDecodeRecord \
	./metadata:FuzzDecodeImage \
	./quorum:FuzzHello

.PHONY: run build test vet unit fuzz-short bench perf flamegraph reliability overload

## run: the broker on the embedded defaults (data in ./data, Kafka on 127.0.0.1:9092)
run: build
	./bin/ringlog serve --data-dir ./data --kafka-addr 127.0.0.1:9092 --http-addr 127.0.0.1:9094

build:
	$(GO) build -o bin/ringlog ./cmd/ringlog

## test: formatting, vet, the whole suite with -race, then a short fuzz run of every target
test: vet unit fuzz-short

vet:
	@unformatted="$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))"; \
	if [ -n "$$unformatted" ]; then echo "gofmt needed on:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...

unit:
	$(GO) test -race -count=1 -timeout 20m ./...

fuzz-short:
	@for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "fuzz $$pkg $$name for $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$$name$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	done

## bench: the hot-path benchmarks (compare ratios within one run)
bench:
	$(GO) test -run '^$$' -bench . -benchtime 300ms ./wal/... ./ring/...

## perf: the standard benchmark matrix against a fresh broker on a temp data dir:
## charts, results.jsonl and summary.md (targets met/missed) in perf/results/<YYYYMMDD-HHMM>-<host>/
PERF_ARGS ?=
perf: build
	./perf/with-broker.sh ./bin/ringlog ./bin/ringlog perf suite --out perf/results $(PERF_ARGS)

## flamegraph: CPU and allocation flame graphs (SVG) of a fresh broker under an e2e load, into flamegraphs/
flamegraph: build
	./perf/with-broker.sh ./bin/ringlog ./perf/flamegraphs.sh flamegraphs

## reliability: the long reliability scenarios (60 s overload, 10,000 idle + 500 slowloris
## connections, disk faults...) as a table: scenario | figure | pass/FAIL. Needs root for the
## tmpfs and open-file-limit scenarios (they skip without it).
reliability:
	./reliability/run.sh

## overload: only the 60 s overload scenario
overload:
	RINGLOG_OVERLOAD_SECONDS=60 $(GO) test -count=1 -v -timeout 30m -run '^TestOverload$$' ./reliability
