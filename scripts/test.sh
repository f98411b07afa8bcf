#!/usr/bin/env bash
# Every test: set-up, then all unit and integration tests (they start their own real
# PostgreSQL servers and pgshard clusters under target/test-clusters). Exits non-zero on
# any failure and ends with the cargo test summary lines.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh

log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
# --no-fail-fast: every test binary runs, so the summary shows all failures at once.
cargo test --release --no-fail-fast 2>&1 | tee "$log" || status=$?

# (Further test steps go here.)

echo
echo "== summary =="
grep -E '^ +(Running|Doc-tests) |^test result: |^error' "$log" || true
if [ "$status" -ne 0 ]; then
  echo "FAILED (exit $status)"
else
  echo "all tests passed"
fi
exit "$status"
