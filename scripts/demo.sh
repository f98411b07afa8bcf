#!/usr/bin/env bash
# Main job: set-up, a local pgshard cluster (coordinator node + 2 workers behind the
# pgshard listener), then a short pgbench run through pgshard on distributed tables
# (workload W1 in miniature) and `pgshard bench --quick` (every workload, small, against
# a plain PostgreSQL of its own). Leaves the cluster running.
# PGSHARD_DIR (default ./pgshard-cluster) and PGSHARD_PORT (default 6432) move it.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh

dir=${PGSHARD_DIR:-./pgshard-cluster}
# The servers run as the `postgres` user, which must be able to reach the directory
# (a checkout under /root is not): then the default moves to /var/tmp.
if [ -z "${PGSHARD_DIR:-}" ] && [ "$(id -u)" -eq 0 ] && ! runuser -u postgres -- test -x "$PWD"; then
  dir=/var/tmp/pgshard-cluster
  echo "demo: $PWD is not reachable by the postgres user; using $dir"
fi
pgshard=./target/release/pgshard

$pgshard cluster up --dir "$dir" --workers 2 --port "${PGSHARD_PORT:-6432}"
# shellcheck disable=SC1091
source "$dir/connection.env"

echo "== pgbench -i -s 1 (local tables on the coordinator node) =="
pgbench -i -s 1
echo "== distributing the pgbench tables =="
psql -X -v ON_ERROR_STOP=1 <<'SQL'
SET citus.shard_count = 32;
SELECT create_distributed_table('pgbench_accounts', 'aid');
SELECT create_distributed_table('pgbench_branches', 'bid');
SELECT create_distributed_table('pgbench_tellers', 'tid');
SELECT create_distributed_table('pgbench_history', 'aid');
SELECT pg_size_pretty(citus_total_relation_size('pgbench_accounts'));
SQL
echo "== pgbench -M prepared -S -T 10 (select-only through pgshard) =="
pgbench -M prepared -S -T 10 -c 4 -j 2 -P 5
echo "== pgshard bench --quick: W1-W4 in miniature against one plain PostgreSQL (1.5-2 minutes) =="
bench_dir="${PGSHARD_BENCH_DIR:-$(dirname "$dir")/pgshard-bench}"
$pgshard bench --quick --out "$bench_dir"
echo "(full report: $bench_dir/bench.md, chart: $bench_dir/bench.svg; a full run: $pgshard bench)"

echo
echo "The cluster keeps running. Connect with:"
echo "  source $dir/connection.env && psql"
echo "Status / stop:  $pgshard cluster status --dir $dir  |  $pgshard cluster down --dir $dir"
