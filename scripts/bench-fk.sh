#!/usr/bin/env bash
# The cost of a foreign key on W2-style inserts (issue 22), through pgshard and on one
# plain PostgreSQL, in one run: pgbench single-row INSERTs (prepared protocol) into a
# table without a key and into the same table whose column references a 1,000-row table
# (a reference table through pgshard, so every worker checks the key locally), each for
# SECONDS with CLIENTS clients. Prints tps per target and table, the key's cost on each
# target (tps with the key / tps without) and pgshard's ratio to plain PostgreSQL.
#
#   bash scripts/bench-fk.sh PGSHARD_CONNINFO PLAIN_CONNINFO [SECONDS=20] [CLIENTS=8]
#
# Both conninfos must name a database where the tables fk_parent, fk_child and
# nofk_child may be dropped and made again.
set -euo pipefail
pgs=$1
plain=$2
secs=${3:-20}
clients=${4:-8}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

drop="DROP TABLE IF EXISTS fk_child, nofk_child, fk_parent"
setup="CREATE TABLE fk_parent (id int PRIMARY KEY);
INSERT INTO fk_parent SELECT generate_series(1, 1000);"
children="CREATE TABLE fk_child (id bigint, p int REFERENCES fk_parent (id));
CREATE TABLE nofk_child (id bigint, p int);"
psql "$plain" -qX -v ON_ERROR_STOP=1 -c "$drop" -c "$setup" -c "$children" >/dev/null 2>&1
psql "$pgs" -qX -v ON_ERROR_STOP=1 -c "$drop" -c "$setup" >/dev/null 2>&1
# The referenced table first: a table with rows referenced by a local one cannot be
# emptied into shards.
for sql in "SELECT create_reference_table('fk_parent')" "$children" \
  "SELECT create_distributed_table('fk_child', 'id')" \
  "SELECT create_distributed_table('nofk_child', 'id')"; do
  psql "$pgs" -qX -v ON_ERROR_STOP=1 -c "$sql" >/dev/null
done

for t in fk_child nofk_child; do
  printf '\\set id random(1, 1000000000)\n\\set p random(1, 1000)\nINSERT INTO %s VALUES (:id, :p);\n' \
    "$t" >"$work/$t.sql"
done

tps() { # conninfo table
  pgbench "$1" -n -M prepared -c "$clients" -j 2 -T "$secs" -f "$work/$2.sql" 2>&1 |
    sed -n 's/^tps = \([0-9.]*\) .*/\1/p'
}

div() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.4f", a / b }'; }

declare -A r
for target in plain pgs; do
  for t in nofk_child fk_child; do
    r[$target.$t]=$(tps "${!target}" "$t")
  done
done

printf '%-10s %12s %12s %10s\n' target "tps no key" "tps key" "key cost"
for target in plain pgs; do
  printf '%-10s %12.0f %12.0f %10.3f\n' "$target" "${r[$target.nofk_child]}" \
    "${r[$target.fk_child]}" "$(div "${r[$target.fk_child]}" "${r[$target.nofk_child]}")"
done
printf 'pgshard / plain: no key %.3f, with key %.3f\n' \
  "$(div "${r[pgs.nofk_child]}" "${r[plain.nofk_child]}")" \
  "$(div "${r[pgs.fk_child]}" "${r[plain.fk_child]}")"
