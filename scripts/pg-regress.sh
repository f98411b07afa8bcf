#!/usr/bin/env bash
# PostgreSQL 15's regression suite (parallel_schedule, `pg_regress --use-existing`, at the
# schedule's own parallelism) directly on a fresh cluster's coordinator node, then through
# pgshard on another fresh cluster; prints the tests that pass directly and fail through
# pgshard (see tests/driver_suites/main.rs and ../shared/pg-regress.md):
#
#   bash scripts/pg-regress.sh
#
# Installs (as root) postgresql-server-dev-15 at the installed server's version, adds a
# Debian source entry and fetches the postgresql-15 source package for src/test/regress,
# builds regress.so; all under target/pg-regress. Closes with `pg_regress: N passed, M
# failed` (N: tests passing on both, M: differences not listed in
# tests/driver_suites/known_differences.txt). Diffs and lists:
# target/driver-suites/results/pg_regress/.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_PROFILE_RELEASE_LTO=false
export DEBIAN_FRONTEND=noninteractive
source scripts/setup.sh

work=$PWD/target/pg-regress
mkdir -p "$work"
server_version=$(dpkg-query -W -f='${Version}' postgresql-15)
libpq_version=$(dpkg-query -W -f='${Version}' libpq5)

# Server headers, at the installed server's version so that nothing gets upgraded.
if [ ! -f /usr/include/postgresql/15/server/postgres.h ] || ! command -v gcc >/dev/null; then
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends build-essential \
    "postgresql-server-dev-15=$server_version" "libpq-dev=$libpq_version"
fi
for p in postgresql-15 libpq5; do
  now=$(dpkg-query -W -f='${Version}' "$p")
  want=$([ "$p" = libpq5 ] && echo "$libpq_version" || echo "$server_version")
  [ "$now" = "$want" ] || echo "pg-regress: warning: $p changed from $want to $now" >&2
done

# src/test/regress of the source package of the installed version.
regress=$work/regress
if [ ! -f "$regress/parallel_schedule" ]; then
  if ! grep -rqs '^Types:.*deb-src' /etc/apt/sources.list.d/ && ! grep -qs '^deb-src' /etc/apt/sources.list; then
    sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources \
      >/etc/apt/sources.list.d/debian-src.sources
    apt-get update -qq
  fi
  mkdir -p "$work/source"
  (cd "$work/source" && { apt-get source --download-only "postgresql-15=$server_version" \
      || apt-get source --download-only postgresql-15; })
  orig=$(ls "$work"/source/postgresql-15_*.orig.tar.* | head -1)
  rm -rf "$work/unpacked" && mkdir -p "$work/unpacked"
  tar -xf "$orig" -C "$work/unpacked" --wildcards '*/src/test/regress/*'
  rm -rf "$regress"
  mv "$work"/unpacked/*/src/test/regress "$regress"
fi

# regress.so beside links to the server's autoinc.so and refint.so.
lib=$work/lib
mkdir -p "$lib"
if [ ! -f "$lib/regress.so" ] || [ "$regress/regress.c" -nt "$lib/regress.so" ]; then
  gcc -O2 -fPIC -shared -I/usr/include/postgresql/15/server \
    -o "$lib/regress.so" "$regress/regress.c"
fi
ln -sf /usr/lib/postgresql/15/lib/autoinc.so /usr/lib/postgresql/15/lib/refint.so "$lib/"
# The servers run as `postgres` and read the data files and the library.
chmod -R a+rX "$work"

export PG_REGRESS=/usr/lib/postgresql/15/lib/pgxs/src/test/regress/pg_regress
export PG_REGRESS_INPUT_DIR=$regress PG_REGRESS_DLPATH=$lib
export DRIVER_SUITES_WORK=$PWD/target/driver-suites
started=$SECONDS
rc=0
RUST_BACKTRACE=0 cargo test --release --test driver_suites -- --ignored --exact --nocapture pg_regress \
  2>&1 | tee "$work/pg_regress.log" || rc=$?
echo "pg-regress: took $((SECONDS - started)) s"
exit "$rc"
