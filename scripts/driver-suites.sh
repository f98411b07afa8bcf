#!/usr/bin/env bash
# Real drivers' own test suites against one plain PostgreSQL 15 and through pgshard, in the
# same run (see tests/driver_suites/main.rs):
#
#   bash scripts/driver-suites.sh [pgx] [node-postgres]     (default: both)
#
# Installs what is missing (as root: Go and Node.js from Debian when absent, pgx's Go
# modules and node-postgres's npm dependencies), copies the read-only suites of
# ../shared/driver-suites (or $DRIVER_SUITES_SRC) to target/driver-suites, then runs each
# suite on fresh servers and prints, per suite, the tests that pass on PostgreSQL and fail
# through pgshard with their first error line. Listed ones (tests/driver_suites/
# known_differences.txt) are reported, not fatal; any other runs once more alone through
# pgshard and, if it fails again, exits non-zero.
# Closes with `driver-suites: N passed, M failed` (N: tests passing on both, M: unlisted
# differences). Results: target/driver-suites/results/SUITE/report.txt.
#
# DRIVER_SUITES_TIME_LIMIT: seconds a test (pgx) or test file (node-postgres) may go
# without progress before it is killed and counted as failed (default 30).
# DRIVER_SUITES_TIMEOUT: seconds for one whole suite on both targets (default 1800).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_PROFILE_RELEASE_LTO=false
export DEBIAN_FRONTEND=noninteractive
source scripts/setup.sh

suites=("$@")
((${#suites[@]})) || suites=(pgx node-postgres)
src=${DRIVER_SUITES_SRC:-../shared/driver-suites}
work=$PWD/target/driver-suites
mkdir -p "$work"
export DRIVER_SUITES_WORK=$work

apt_install() {
  [ "$(id -u)" -eq 0 ] || { echo "driver-suites: need root to install $*" >&2; return 1; }
  apt-get update -qq && apt-get install -y -qq --no-install-recommends "$@"
}

# A copy the suite may write into; never into the repository.
fresh_copy() { # FROM TO
  [ -d "$1" ] || { echo "driver-suites: $1 not found (set DRIVER_SUITES_SRC)" >&2; return 1; }
  rm -rf "$2"
  mkdir -p "$(dirname "$2")"
  cp -r "$1" "$2"
  chmod -R u+w "$2"
}

# A go at least as new as pgx's go.mod asks, or nothing.
find_go() { # REQUIRED_VERSION
  local g v
  for g in "$(command -v go || true)" /usr/local/go/bin/go /usr/lib/go/bin/go; do
    [ -n "$g" ] && [ -x "$g" ] || continue
    v=$(GOTOOLCHAIN=local "$g" env GOVERSION 2>/dev/null | sed 's/^go//')
    if [ "$(printf '%s\n%s\n' "$1" "$v" | sort -V | head -1)" = "$1" ]; then
      echo "$g"
      return 0
    fi
  done
  return 1
}

prepare_pgx() {
  fresh_copy "$src/pgx" "$work/pgx"
  local need go
  need=$(awk '$1 == "go" { print $2; exit }' "$work/pgx/go.mod")
  if ! go=$(find_go "$need"); then
    command -v go >/dev/null || apt_install golang-go
    go=$(find_go "$need") || {
      echo "driver-suites: pgx needs go >= $need; none found (Debian's golang-go is older)" >&2
      return 1
    }
  fi
  export DRIVER_SUITES_GO=$go GOTOOLCHAIN=local
  echo "driver-suites: $("$go" version); downloading and building pgx's tests"
  (cd "$work/pgx" && "$go" mod download && "$go" test -count=1 -run '^$' ./... >/dev/null)
}

prepare_node_postgres() {
  command -v node >/dev/null && command -v npm >/dev/null || apt_install nodejs npm
  fresh_copy "$src/node-postgres/packages/pg" "$work/node-postgres/pg"
  # pg's dependencies (the monorepo's own pg-protocol etc. as published), found by
  # node from pg/ through the parent directory's node_modules.
  local manifest=tests/driver_suites/node-postgres-package.json
  if ! cmp -s "$manifest" "$work/node-postgres/package.json" || [ ! -d "$work/node-postgres/node_modules" ]; then
    cp "$manifest" "$work/node-postgres/package.json"
    (cd "$work/node-postgres" && npm install --no-package-lock --legacy-peer-deps --no-audit --no-fund --loglevel=error)
  fi
  echo "driver-suites: node $(node --version)"
}

passed=0
failed=0
status=0
for suite in "${suites[@]}"; do
  case $suite in
    pgx) test=pgx; prepare=prepare_pgx ;;
    node-postgres) test=node_postgres; prepare=prepare_node_postgres ;;
    *) echo "driver-suites: unknown suite $suite (pgx, node-postgres)" >&2; exit 2 ;;
  esac
  echo "== driver-suites: $suite"
  if ! $prepare; then
    echo "driver-suites: $suite could not be prepared"
    failed=$((failed + 1)); status=1
    continue
  fi
  log=$work/$suite.log
  started=$SECONDS
  rc=0
  RUST_BACKTRACE=0 timeout --kill-after=30 "${DRIVER_SUITES_TIMEOUT:-1800}" \
    cargo test --release --test driver_suites -- --ignored --exact --nocapture "$test" \
    2>&1 | tee "$log" || rc=$?
  echo "driver-suites: $suite took $((SECONDS - started)) s"
  line=$(grep -E "^$suite: [0-9]+ passed, [0-9]+ failed$" "$log" | tail -1 || true)
  if [ -z "$line" ]; then
    echo "driver-suites: $suite gave no result (exit $rc)"
    failed=$((failed + 1)); status=1
    continue
  fi
  read -r n m < <(sed -E 's/.*: ([0-9]+) passed, ([0-9]+) failed/\1 \2/' <<<"$line")
  passed=$((passed + n)); failed=$((failed + m))
  [ "$rc" -eq 0 ] || status=1
done
echo "driver-suites: $passed passed, $failed failed"
exit "$status"
