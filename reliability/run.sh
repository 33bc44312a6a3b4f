#!/usr/bin/env bash
# make reliability: the long reliability scenarios, one row each in a
# table scenario | figure | pass/FAIL/skipped. Each row is a go test run with its
# environment; a scenario prints "RESULT scenario | figure | status" (see
# package reliability's result), or, if it printed nothing (a crash, a
# build failure), its row says so. Add a scenario by adding a row below.
set -uo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}

# name ; package ; -run pattern ; environment (space-separated VAR=value)
ROWS=(
	"overload 60s;./reliability;^TestOverload$;RINGLOG_OVERLOAD_SECONDS=60"
	"crash loop 1000 cycles;./reliability;^TestCrashLoop$;RINGLOG_CRASH_CYCLES=1000"
	"connection storm 10k;./reliability;^TestConnectionStorm$;RINGLOG_STORM_IDLE=10000 RINGLOG_STORM_SLOW=500"
	"disk full (tmpfs);./netio;^TestDiskFull$;"
	"disk faults (EIO, fsync);./netio;^TestDiskFault;"
	"index on a full disk;./wal;^TestIndexOnFullDisk$;"
	"connection limits;./netio;^(TestMaxConnectionsEnforced|TestIdleConnectionsReaped|TestSlowlorisReaped)$;"
	"unusable data dir;./cmd/ringlog;^TestServeUnusableDataDir$;"
)

out=$(mktemp)
trap 'rm -f "$out"' EXIT
table=()
failed=0
for row in "${ROWS[@]}"; do
	IFS=';' read -r name pkg pattern envs <<<"$row"
	echo "== $name" >&2
	# shellcheck disable=SC2086
	env $envs "$GO" test -count=1 -timeout 30m -v -run "$pattern" "$pkg" >"$out" 2>&1
	rc=$?
	lines=$(grep '^RESULT ' "$out" | sed 's/^RESULT //')
	if [ -n "$lines" ]; then
		while IFS= read -r l; do table+=("$l"); done <<<"$lines"
	else
		status=pass
		[ $rc -ne 0 ] && status=FAIL
		passed=$(grep -cE '^\s*--- PASS' "$out")
		skipped=$(grep -cE '^\s*--- SKIP' "$out")
		[ "$skipped" -gt 0 ] && [ "$passed" -eq 0 ] && [ $rc -eq 0 ] && status=skipped
		table+=("$name | $passed passed, $skipped skipped | $status")
	fi
	if [ $rc -ne 0 ]; then
		failed=1
		tail -40 "$out" >&2
	fi
done

printf '\n%-45s | %s | %s\n' scenario figure result
printf -- '----------------------------------------------|--------|-------\n'
for l in "${table[@]}"; do
	IFS='|' read -r s f r <<<"$l"
	printf '%-45s |%s|%s\n' "$(echo "$s" | xargs)" "$f" "$r"
done
exit $failed
