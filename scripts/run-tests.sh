#!/usr/bin/env bash
# Builds every test binary (unit and integration) and runs them, two at a time, except
# those that time failovers, timeouts or benchmarks, which run one at a time afterwards
# so that another test's load cannot stretch what they measure. Each binary's whole
# output is printed when it ends, under cargo's own "Running <file>" line, so logs read
# as `cargo test`'s. Exits non-zero when a binary fails or does not build.
#
# Usage: scripts/run-tests.sh [jobs]   (jobs: how many run at once; default 2, or
# PGSHARD_TEST_JOBS). Called by scripts/test.sh after set-up.
set -uo pipefail
cd "$(dirname "$0")/.."

jobs=${1:-${PGSHARD_TEST_JOBS:-2}}
# The longest first, so that two at a time end close together.
long='^(query_shapes|large_statements|transactions|seed_statements|repartition_joins)$'
# Binaries that measure time or throughput, run alone.
alone='^(bench_quick|w1_pgbench|sysbench_insert|failover|node_failures|coordinators|standbys)$'

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# One line per test binary: "<key>\t<name>\t<source path>\t<executable>" (the key tells
# the library's unit tests from the binary's, both named pgshard).
if ! cargo test --release --no-run --message-format=json-render-diagnostics \
  >"$out/build.json"; then
  echo "run-tests: the tests do not build" >&2
  exit 101
fi
jq -r 'select(.reason == "compiler-artifact" and .profile.test == true and .executable != null)
       | [.target.kind[0] + "-" + .target.name, .target.name, .target.src_path, .executable]
       | @tsv' "$out/build.json" \
  | awk -F'\t' -v long="$long" '{ print ($2 ~ long ? 0 : 1) "\t" $0 }' | sort | cut -f2- \
  >"$out/list"

# Prints a finished binary's output and records its failure.
report() {
  local key=$1
  cat "$out/$key.log"
  if [ "$(cat "$out/$key.rc")" != 0 ]; then
    echo "run-tests: $key failed (exit $(cat "$out/$key.rc"))"
    echo "$key" >>"$out/failed"
  fi
}

# Runs one binary in the background, its output and exit code into $out.
start() {
  local key=$1 src=$2 exe=$3
  (
    echo "     Running ${src#"$PWD"/} (${exe#"$PWD"/})"
    "$exe" 2>&1
    echo $? >"$out/$key.rc"
  ) >"$out/$key.log" 2>&1 &
  pids[$!]=$key
}

declare -A pids=()
while IFS=$'\t' read -r key name src exe; do
  [[ $name =~ $alone ]] && continue
  while [ "${#pids[@]}" -ge "$jobs" ]; do
    wait -n -p done_pid
    report "${pids[$done_pid]}"
    unset "pids[$done_pid]"
  done
  start "$key" "$src" "$exe"
done <"$out/list"
while [ "${#pids[@]}" -gt 0 ]; do
  wait -n -p done_pid
  report "${pids[$done_pid]}"
  unset "pids[$done_pid]"
done

while IFS=$'\t' read -r key name src exe; do
  [[ $name =~ $alone ]] || continue
  start "$key" "$src" "$exe"
  wait "$!"
  report "$key"
done <"$out/list"

if [ -s "$out/failed" ]; then
  echo "error: $(wc -l <"$out/failed") test binaries failed: $(tr '\n' ' ' <"$out/failed")"
  exit 101
fi
