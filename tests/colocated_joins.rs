//! Joins of co-located tables (and reference tables) pushed down whole to the shards:
//! GROUP BY / HAVING / aggregates / DISTINCT / ORDER BY / LIMIT / windows above the
//! join, and subqueries co-located with the outer query (EXISTS / NOT EXISTS / IN /
//! NOT IN / scalar, correlated on the distribution column), in TPC-H's shapes over
//! small hand-made data. Each query is compared with one plain PostgreSQL holding the
//! same rows, and its EXPLAIN through pgshard must show no `Distributed Subplan`
//! (no table pulled to the coordinator node by recursive planning).

mod common;

use common::{assert_same_rows, cluster, plain_postgres, simple_rows as rows};
use tokio_postgres::Client;

const SETUP: &str = "
DROP TABLE IF EXISTS cj_orders, cj_lineitem, cj_part, cj_partsupp, cj_nation;
CREATE TABLE cj_nation (n_nationkey int PRIMARY KEY, n_name char(25) NOT NULL, n_regionkey int NOT NULL);
CREATE TABLE cj_part (p_partkey bigint PRIMARY KEY, p_name varchar(55), p_brand char(10), p_size int,
  p_retailprice numeric(15,2));
CREATE TABLE cj_partsupp (ps_partkey bigint, ps_suppkey bigint, ps_availqty int, ps_supplycost numeric(15,2),
  PRIMARY KEY (ps_partkey, ps_suppkey));
CREATE TABLE cj_orders (o_orderkey bigint PRIMARY KEY, o_custkey bigint, o_orderstatus char(1),
  o_totalprice numeric(15,2), o_orderdate date, o_orderpriority char(15), o_shippriority int);
CREATE TABLE cj_lineitem (l_orderkey bigint, l_partkey bigint, l_suppkey bigint, l_linenumber int,
  l_quantity numeric(15,2), l_extendedprice numeric(15,2), l_discount numeric(15,2), l_returnflag char(1),
  l_shipdate date, l_commitdate date, l_receiptdate date, l_shipmode char(10), PRIMARY KEY (l_orderkey, l_linenumber));
INSERT INTO cj_nation SELECT i, 'NATION ' || i, i % 5 FROM generate_series(0, 24) AS s(i);
INSERT INTO cj_part SELECT i, 'part ' || (i % 37), 'Brand#' || (i % 5), i % 50, 900 + (i % 100) / 4.0
FROM generate_series(1, 200) AS s(i);
INSERT INTO cj_partsupp SELECT p, p * 4 + j, (p * 7 + j) % 1000, ((p * 13 + j * 7) % 1000) / 10.0
FROM generate_series(1, 200) AS a(p), generate_series(0, 3) AS b(j);
INSERT INTO cj_orders SELECT i, i % 97, (ARRAY['F', 'O', 'P'])[1 + i % 3], (i * 37 % 10000) / 3.0,
  date '1993-01-01' + (i * 11 % 900), (ARRAY['1-URGENT', '2-HIGH', '3-MEDIUM', '4-NOT SPECIFIED', '5-LOW'])[1 + i % 5],
  i % 2
FROM generate_series(1, 600) AS s(i);
INSERT INTO cj_lineitem SELECT o, 1 + (o * 31 + n) % 200, (o + n * 7) % 25, n, 1 + (o * n) % 50,
  ((o * 17 + n * 101) % 10000) / 7.0, ((o + n) % 10) / 100.0, (ARRAY['A', 'N', 'R'])[1 + (o + n) % 3],
  date '1993-01-01' + (o * 11 % 900) + n * 3, date '1993-01-01' + (o * 11 % 900) + 10 + (o * n) % 20,
  date '1993-01-01' + (o * 11 % 900) + 5 + (o + n * 13) % 30,
  (ARRAY['MAIL', 'SHIP', 'AIR', 'TRUCK', 'RAIL'])[1 + (o * 3 + n) % 5]
FROM generate_series(1, 600) AS a(o), generate_series(1, 7) AS b(n) WHERE n <= 1 + o % 7;
ANALYZE;
";

/// Both servers with the same data; orders and lineitem co-located on the order key,
/// part and partsupp on the part key, nation a reference table.
async fn setup() -> (Client, Client) {
    let shard = cluster().client().await;
    let plain = plain_postgres().client().await;
    shard.batch_execute(SETUP).await.unwrap();
    plain.batch_execute(SETUP).await.unwrap();
    for call in [
        "SELECT create_reference_table('cj_nation')",
        "SELECT create_distributed_table('cj_orders', 'o_orderkey')",
        "SELECT create_distributed_table('cj_lineitem', 'l_orderkey', colocate_with => 'cj_orders')",
        "SELECT create_distributed_table('cj_part', 'p_partkey')",
        "SELECT create_distributed_table('cj_partsupp', 'ps_partkey', colocate_with => 'cj_part')",
    ] {
        shard.batch_execute(call).await.unwrap();
    }
    (shard, plain)
}

/// The same rows in the same order on both, at least one row, and pushed down: no
/// table pulled into an intermediate result.
async fn same_and_pushed(shard: &Client, plain: &Client, sql: &str) {
    assert_same_rows(shard, plain, sql).await;
    let plan: Vec<String> = rows(shard, &format!("EXPLAIN (COSTS OFF) {sql}"))
        .await
        .unwrap_or_else(|e| panic!("EXPLAIN {sql}: {e:?}"))
        .into_iter()
        .map(|r| r[0].clone().unwrap_or_default())
        .collect();
    let plan = plan.join("\n");
    assert!(
        plan.contains("Custom Scan (Citus Adaptive)") && !plan.contains("Distributed Subplan"),
        "{sql} is not pushed down:\n{plan}"
    );
}

/// Joins with clauses above them (issue 20, item 1). Every query fixes its order.
const JOIN_QUERIES: &[&str] = &[
    // TPC-H Q3 without customer: grouped by the distribution column, ORDER BY + LIMIT.
    "select l_orderkey, sum(l_extendedprice * (1 - l_discount)) as revenue, o_orderdate, o_shippriority \
     from cj_orders, cj_lineitem where l_orderkey = o_orderkey and o_orderdate < date '1995-03-15' \
     and l_shipdate > date '1993-03-15' group by l_orderkey, o_orderdate, o_shippriority \
     order by revenue desc, o_orderdate, l_orderkey limit 10",
    // TPC-H Q12: grouped by another column (two-phase).
    "select l_shipmode, sum(case when o_orderpriority = '1-URGENT' or o_orderpriority = '2-HIGH' then 1 else 0 end) \
     as high_line_count, sum(case when o_orderpriority <> '1-URGENT' and o_orderpriority <> '2-HIGH' then 1 else 0 end) \
     as low_line_count from cj_orders, cj_lineitem where o_orderkey = l_orderkey and l_shipmode in ('MAIL', 'SHIP') \
     and l_commitdate < l_receiptdate and l_receiptdate >= date '1993-01-01' \
     group by l_shipmode order by l_shipmode",
    // Every decomposable aggregate, avg, and others over raw rows; HAVING.
    "select o.o_orderstatus, count(*), count(l.l_discount), sum(l.l_quantity), min(l.l_shipdate), max(o.o_totalprice), \
     avg(l.l_quantity), bool_and(l.l_quantity > 2) from cj_orders o join cj_lineitem l on o.o_orderkey = l.l_orderkey \
     group by o.o_orderstatus having count(*) > 10 order by 1",
    "select o_orderpriority, stddev_samp(l_quantity)::numeric(20,6), count(distinct l_shipmode), \
     string_agg(distinct l_returnflag, ',' order by l_returnflag) from cj_orders join cj_lineitem on o_orderkey = l_orderkey \
     group by o_orderpriority order by o_orderpriority",
    // Aggregates without GROUP BY beyond count/sum/min/max.
    "select avg(l_extendedprice), count(distinct o_custkey) from cj_orders, cj_lineitem where o_orderkey = l_orderkey",
    // With a reference table, grouped by its column.
    "select n.n_name, count(*), sum(l_quantity) from cj_orders o join cj_lineitem l on o.o_orderkey = l.l_orderkey \
     join cj_nation n on n.n_nationkey = o.o_custkey % 25 group by n.n_name order by 2 desc, 1 limit 7",
    // DISTINCT, ORDER BY + LIMIT/OFFSET of plain rows.
    "select distinct l_shipmode, o_orderstatus from cj_orders join cj_lineitem on o_orderkey = l_orderkey order by 1, 2",
    "select o_orderkey, l_linenumber, l_quantity from cj_orders join cj_lineitem on o_orderkey = l_orderkey \
     order by l_quantity desc, o_orderkey, l_linenumber limit 5 offset 3",
    "select o_orderkey * 2 as k2 from cj_orders join cj_lineitem on o_orderkey = l_orderkey \
     where l_linenumber = 3 order by l_extendedprice, o_orderkey limit 4",
    // Windows: partitioned by the distribution column (whole), and not (raw rows).
    "select o_orderkey, l_linenumber, rank() over (partition by o_orderkey order by l_quantity desc, l_linenumber) \
     from cj_orders join cj_lineitem on o_orderkey = l_orderkey where o_orderkey < 40 order by 1, 2",
    "select o_orderkey, sum(l_quantity), row_number() over (order by sum(l_quantity) desc, o_orderkey) \
     from cj_orders join cj_lineitem on o_orderkey = l_orderkey group by o_orderkey order by 3 limit 10",
    // Outer joins: grouped by the preserved side's distribution column, and by the nullable side's.
    "select o_orderkey, count(l_orderkey) from cj_orders left join cj_lineitem on o_orderkey = l_orderkey \
     and l_quantity > 40 group by o_orderkey order by 2 desc, 1 limit 10",
    "select l_orderkey, count(*) from cj_orders left join cj_lineitem on o_orderkey = l_orderkey \
     and l_quantity > 45 group by l_orderkey order by 2 desc, 1 limit 5",
    // Part and partsupp, co-located on the part key, with GROUP BY and HAVING.
    "select p_brand, p_size, count(ps_suppkey) as supplier_cnt from cj_partsupp, cj_part \
     where p_partkey = ps_partkey and p_size in (1, 4, 9, 14, 19) group by p_brand, p_size \
     having count(ps_suppkey) >= 4 order by supplier_cnt desc, p_brand, p_size",
];

/// Subqueries co-located with the outer query (issue 20, item 2).
const SUBQUERY_QUERIES: &[&str] = &[
    // TPC-H Q4.
    "select o_orderpriority, count(*) as order_count from cj_orders \
     where o_orderdate >= date '1993-07-01' and o_orderdate < date '1993-07-01' + interval '9' month \
     and exists (select * from cj_lineitem where l_orderkey = o_orderkey and l_commitdate < l_receiptdate) \
     group by o_orderpriority order by o_orderpriority",
    // TPC-H Q18 without customer: IN over a subquery grouped by the distribution column.
    "select o_orderkey, o_orderdate, o_totalprice, sum(l_quantity) from cj_orders, cj_lineitem \
     where o_orderkey in (select l_orderkey from cj_lineitem group by l_orderkey having sum(l_quantity) > 150) \
     and o_orderkey = l_orderkey group by o_orderkey, o_orderdate, o_totalprice \
     order by o_totalprice desc, o_orderdate limit 100",
    // TPC-H Q21 with the nation table, grouped by the supplier key.
    "select l1.l_suppkey, count(*) as numwait from cj_lineitem l1, cj_orders, cj_nation \
     where o_orderkey = l1.l_orderkey and o_orderstatus = 'F' and l1.l_receiptdate > l1.l_commitdate \
     and exists (select * from cj_lineitem l2 where l2.l_orderkey = l1.l_orderkey and l2.l_suppkey <> l1.l_suppkey) \
     and not exists (select * from cj_lineitem l3 where l3.l_orderkey = l1.l_orderkey \
       and l3.l_suppkey <> l1.l_suppkey and l3.l_receiptdate > l3.l_commitdate) \
     and l1.l_suppkey = n_nationkey group by l1.l_suppkey order by numwait desc, l1.l_suppkey limit 100",
    // NOT IN over the distribution column; a scalar subquery correlated on it.
    "select count(*) from cj_orders where o_orderkey not in (select l_orderkey from cj_lineitem where l_quantity > 30)",
    "select o_orderkey, o_totalprice from cj_orders \
     where o_totalprice < (select sum(l_extendedprice) from cj_lineitem where l_orderkey = o_orderkey) / 3 \
     order by o_orderkey limit 20",
    // A single table with a subquery, plain rows.
    "select o_orderkey from cj_orders o where exists (select 1 from cj_lineitem l \
     where l.l_orderkey = o.o_orderkey and l.l_quantity > 48) order by 1",
];

/// One test: both lists read the same tables (tests of one binary run at once).
#[tokio::test(flavor = "multi_thread")]
async fn colocated_joins_and_subqueries_are_pushed_down_and_exact() {
    let (shard, plain) = setup().await;
    for sql in JOIN_QUERIES.iter().chain(SUBQUERY_QUERIES) {
        same_and_pushed(&shard, &plain, sql).await;
    }
    // Parameters (extended protocol) in WHERE, LIMIT and OFFSET of a pushed-down join.
    for sql in [
        "select o_orderkey, count(*) from cj_orders join cj_lineitem on o_orderkey = l_orderkey \
         where l_linenumber > $1 group by o_orderkey order by 2 desc, 1 limit $2 offset $3",
        "select l_shipmode::text, count(*) from cj_orders join cj_lineitem on o_orderkey = l_orderkey \
         where l_linenumber > $1 and $2::int8 > 0 and $3::int8 >= 0 group by l_shipmode order by 1",
    ] {
        let args: [&(dyn tokio_postgres::types::ToSql + Sync); 3] = [&2i32, &7i64, &1i64];
        let a = shard.query(sql, &args).await.unwrap_or_else(|e| panic!("pgshard: {sql}: {e:?}"));
        let b = plain.query(sql, &args).await.unwrap_or_else(|e| panic!("plain: {sql}: {e:?}"));
        let pairs = |rows: Vec<tokio_postgres::Row>| -> Vec<(String, i64)> {
            rows.iter()
                .map(|r| match r.try_get::<_, i64>(0) {
                    Ok(k) => (k.to_string(), r.get(1)),
                    Err(_) => (r.get(0), r.get(1)),
                })
                .collect()
        };
        let (a, b) = (pairs(a), pairs(b));
        assert_eq!(a, b, "{sql}");
        assert!(!b.is_empty(), "{sql}");
    }
}
