//! Joins not on the distribution columns (broadcast and repartition) answer exactly as
//! one PostgreSQL does: a small table broadcast, a large one repartitioned onto the
//! other's shards, both re-hashed (dual), inner and LEFT joins, three tables, a
//! parameter, a block seeing its own writes, ORs of ANDs filtering each side at its
//! source (NULL keys, a nullable side left whole); EXPLAIN names the strategy; the rows
//! never pass through the coordinator node (its intermediate results are bounded to
//! 1 kB here); and the moved tables are gone from every worker after success, error,
//! cancel and a client that disconnects mid-query. `citus.enable_repartition_joins =
//! off` falls back to recursive planning. Uncorrelated scalar and EXISTS subqueries run
//! once, their values in the statement (TPC-H Q11's and Q22's shapes): types, NULL on no
//! row, 21000 on two, DateStyle, parameters, the output column's name. Semijoin-reduced
//! moves (a moved table read only for the keys of a filtered table it must match) answer
//! exactly with NULL and duplicated keys, no key, over the cap of keys, and are refused
//! for outer and anti joins. A staying reference filtered by a broadcast table's few
//! keys (TPC-H Q8's lineitem by its parts) answers exactly with keys that need quoting,
//! NULL keys, in a correlated subquery's level, and not on an outer join's preserved side.

mod common;

use common::{cluster, plain_postgres, simple_rows as unsorted, sqlstate_and_message};
use std::time::{Duration, Instant};
use tokio_postgres::{Client, NoTls};

type Rows = Vec<Vec<Option<String>>>;

async fn rows(c: &Client, sql: &str) -> Result<Rows, tokio_postgres::Error> {
    let mut out = unsorted(c, sql).await?;
    out.sort();
    Ok(out)
}

// customer: 300 rows (broadcast); orders 20,000 and lineitem 40,000 co-located by
// order key; part 12,000 (repartitioned).
const DROP: &str = "DROP TABLE IF EXISTS rj_orders, rj_customer, rj_lineitem, rj_part, rj_nation";
const SETUP: &str = "
CREATE TABLE rj_customer (c_custkey int PRIMARY KEY, c_name text, c_nation int);
CREATE TABLE rj_orders (o_orderkey int PRIMARY KEY, o_custkey int, o_total numeric(12,2), o_status char(1));
CREATE TABLE rj_lineitem (l_orderkey int, l_linenumber int, l_partkey int, l_qty int,
                          PRIMARY KEY (l_orderkey, l_linenumber));
CREATE TABLE rj_part (p_partkey int PRIMARY KEY, p_name text, p_size int);
CREATE TABLE rj_nation (n_key int PRIMARY KEY, n_region int);
-- As TPC-H's Q17 needs: without it the correlated average is quadratic on the oracle.
CREATE INDEX rj_lineitem_partkey ON rj_lineitem (l_partkey);
INSERT INTO rj_customer SELECT i, 'cust ' || i, i % 25 FROM generate_series(1, 300) i;
INSERT INTO rj_orders SELECT i, CASE WHEN i % 101 = 0 THEN NULL ELSE i % 400 + 1 END,
       (i * 37 % 10000) / 7.0, CASE WHEN i % 3 = 0 THEN 'F' ELSE 'O' END
FROM generate_series(1, 20000) i;
INSERT INTO rj_lineitem SELECT i / 2 + 1, i % 2, (i * 7919) % 13000 + 1, i % 50
FROM generate_series(0, 39999) i;
INSERT INTO rj_part SELECT i, 'part ' || i, i % 40 FROM generate_series(1, 12000) i;
INSERT INTO rj_nation SELECT i, i % 8 FROM generate_series(0, 39) i;
ANALYZE rj_customer, rj_orders, rj_lineitem, rj_part, rj_nation;
";

async fn setup() -> (Client, Client) {
    let shard = cluster().client().await;
    let plain = plain_postgres().client().await;
    plain.batch_execute(DROP).await.unwrap();
    shard.batch_execute(DROP).await.unwrap();
    plain.batch_execute(SETUP).await.unwrap();
    let (create, analyze) = SETUP.split_at(SETUP.find("INSERT").unwrap());
    shard.batch_execute(create).await.unwrap();
    for call in [
        "SELECT create_distributed_table('rj_customer', 'c_custkey')",
        "SELECT create_distributed_table('rj_orders', 'o_orderkey')",
        "SELECT create_distributed_table('rj_lineitem', 'l_orderkey', colocate_with => 'rj_orders')",
        "SELECT create_distributed_table('rj_part', 'p_partkey')",
        "SELECT create_reference_table('rj_nation')",
    ] {
        shard.batch_execute(call).await.unwrap();
    }
    shard.batch_execute(analyze).await.unwrap();
    (shard, plain)
}

async fn same(shard: &Client, plain: &Client, sql: &str) {
    let a = rows(shard, sql)
        .await
        .unwrap_or_else(|e| panic!("pgshard: {sql}: {e:?}"));
    let b = rows(plain, sql)
        .await
        .unwrap_or_else(|e| panic!("plain: {sql}: {e:?}"));
    assert_eq!(a.len(), b.len(), "{sql}");
    assert_eq!(a, b, "{sql}");
    assert!(!b.is_empty(), "{sql} returned nothing");
}

/// The EXPLAIN lines of `sql` through pgshard.
async fn explain(shard: &Client, sql: &str) -> String {
    unsorted(shard, &format!("EXPLAIN (COSTS off) {sql}"))
        .await
        .unwrap_or_else(|e| panic!("EXPLAIN {sql}: {e:?}"))
        .into_iter()
        .map(|r| r[0].clone().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

const BROADCAST: &[&str] = &[
    "SELECT o.o_orderkey, c.c_name FROM rj_orders o JOIN rj_customer c ON o.o_custkey = c.c_custkey \
     WHERE c.c_nation = 3 AND o.o_orderkey < 3000",
    "SELECT count(*), sum(o.o_total), min(c.c_name), max(o.o_status) FROM rj_orders o \
     JOIN rj_customer c ON c.c_custkey = o.o_custkey WHERE c.c_nation < 5",
    "SELECT o.o_orderkey, c.c_name FROM rj_orders o LEFT JOIN rj_customer c \
     ON o.o_custkey = c.c_custkey WHERE o.o_orderkey < 700",
    "SELECT count(*), sum(l.l_qty) FROM rj_lineitem l JOIN rj_orders o ON l.l_orderkey = o.o_orderkey \
     JOIN rj_customer c ON c.c_custkey = o.o_custkey WHERE c.c_nation < 5",
];

const REPARTITION: &[&str] = &[
    "SELECT l.l_orderkey, l.l_linenumber, p.p_name FROM rj_lineitem l JOIN rj_part p \
     ON l.l_partkey = p.p_partkey WHERE p.p_size = 3",
    "SELECT count(*), sum(l.l_qty), max(p.p_name) FROM rj_lineitem l, rj_part p \
     WHERE p.p_partkey = l.l_partkey AND l.l_qty > 10",
    // Customer is the preserved side: never broadcast, orders come to it.
    "SELECT c.c_custkey, o.o_orderkey FROM rj_customer c LEFT JOIN rj_orders o \
     ON o.o_custkey = c.c_custkey AND o.o_total > 1400",
    // Dual: neither side on its distribution column.
    "SELECT count(*), sum(p.p_size), sum(l.l_linenumber) FROM rj_part p JOIN rj_lineitem l \
     ON p.p_size = l.l_qty WHERE p.p_partkey < 11000",
];

/// Table references inside subqueries moved (TPC-H Q17, Q2, Q16, Q18, Q20, Q21,
/// Q22's shapes), after which the whole statement, subqueries included, runs as a
/// co-located join.
const IN_SUBQUERIES: &[&str] = &[
    // Q17: lineitem outside and in the correlated subquery, both on l_partkey: one move.
    "SELECT sum(l_qty), count(*) FROM rj_lineitem, rj_part WHERE p_partkey = l_partkey \
     AND p_size < 20 AND l_qty < (SELECT 0.5 * avg(l_qty) FROM rj_lineitem WHERE l_partkey = p_partkey)",
    // Q22's NOT EXISTS: orders re-hashed on o_custkey into customer's layout.
    "SELECT c_nation, count(*) FROM rj_customer WHERE NOT EXISTS \
     (SELECT * FROM rj_orders WHERE o_custkey = c_custkey AND o_orderkey % 50 <> 0) GROUP BY c_nation",
    // Q21's EXISTS / NOT EXISTS co-located by order key, customer broadcast.
    "SELECT c_name, count(*) FROM rj_customer, rj_orders o, rj_lineitem l1 \
     WHERE c_custkey = o.o_custkey AND o.o_orderkey = l1.l_orderkey AND c_nation = 4 \
     AND EXISTS (SELECT * FROM rj_lineitem l2 WHERE l2.l_orderkey = l1.l_orderkey AND l2.l_partkey <> l1.l_partkey) \
     AND NOT EXISTS (SELECT * FROM rj_lineitem l3 WHERE l3.l_orderkey = l1.l_orderkey AND l3.l_qty > 45) \
     GROUP BY c_name",
    // Q18: an IN subquery co-located with orders, customer moved.
    "SELECT c_name, o_orderkey, sum(l_qty) FROM rj_customer, rj_orders, rj_lineitem \
     WHERE o_orderkey IN (SELECT l_orderkey FROM rj_lineitem GROUP BY l_orderkey HAVING sum(l_qty) > 90) \
     AND c_custkey = o_custkey AND o_orderkey = l_orderkey GROUP BY c_name, o_orderkey",
    // Q16: NOT IN over a small filtered table (broadcast).
    "SELECT l_qty, count(DISTINCT l_partkey) FROM rj_lineitem \
     WHERE l_partkey NOT IN (SELECT p_partkey FROM rj_part WHERE p_size = 7) AND l_orderkey < 5000 GROUP BY l_qty",
    // Q20: an IN link on a non-distribution column, a correlated scalar subquery inside.
    "SELECT c_name FROM rj_customer WHERE c_custkey IN (SELECT o_custkey FROM rj_orders \
     WHERE o_total > (SELECT 0.001 * sum(l_qty) FROM rj_lineitem WHERE l_orderkey = o_orderkey))",
    // Q2: a correlated scalar subquery joining a table that moves (part) itself.
    "SELECT o_orderkey, o_total FROM rj_orders, rj_part WHERE o_custkey = p_partkey AND p_size = 5 \
     AND o_total = (SELECT max(o2.o_total) FROM rj_orders o2, rj_part p2 \
     WHERE o2.o_custkey = p2.p_partkey AND p2.p_partkey = rj_part.p_partkey)",
];

// ORs of ANDs: each reference's moved rows filtered by what every branch says of it
// alone (`implied.rs`); NULL keys in one branch; a nullable side left unfiltered.
const OR_OF_ANDS: &[&str] = &[
    "SELECT count(*), sum(l.l_qty) FROM rj_lineitem l, rj_part p \
     WHERE (p.p_partkey = l.l_partkey AND p.p_size = 3 AND l.l_qty < 10) \
     OR (p.p_partkey = l.l_partkey AND p.p_size = 7 AND l.l_qty > 40)",
    "SELECT o.o_orderkey, c.c_custkey, c.c_name FROM rj_orders o, rj_customer c \
     WHERE (o.o_custkey IS NULL AND c.c_nation = 3 AND o.o_orderkey < 3000) \
     OR (o.o_custkey = c.c_custkey AND c.c_nation = 4 AND o.o_total > 1000)",
    // The first branch says nothing of orders alone: orders are not filtered.
    "SELECT o.o_orderkey, c.c_name FROM rj_orders o JOIN rj_customer c ON true \
     WHERE (o.o_custkey = c.c_custkey AND c.c_nation = 3) \
     OR (o.o_custkey IS NULL AND c.c_custkey = 1 AND o.o_orderkey < 500)",
    // Customer on the nullable side: filtering it would null-extend orders that the
    // second branch then keeps.
    "SELECT o.o_orderkey, c.c_name FROM rj_orders o LEFT JOIN rj_customer c \
     ON o.o_custkey = c.c_custkey \
     WHERE (c.c_nation = 3 AND o.o_orderkey < 100) OR (c.c_name IS NULL AND o.o_orderkey < 1000)",
];

/// ON conditions reading one reference filter its rows where they are read when the
/// join keeps that reference's rows only when matched (an inner join's sides, a LEFT
/// JOIN's right, a RIGHT JOIN's left), never on a preserved side, a FULL JOIN's, nor
/// one an outer join inside its side nulls.
const ON_FILTERS: &[&str] = &[
    // TPC-H Q13's shape: orders' own ON condition on the nullable side.
    "SELECT c.c_custkey, count(o.o_orderkey) FROM rj_customer c LEFT JOIN rj_orders o \
     ON c.c_custkey = o.o_custkey AND o.o_status = 'F' GROUP BY c.c_custkey",
    // The preserved side's ON condition nulls its non-matching rows' partners only.
    "SELECT c.c_custkey, o.o_orderkey FROM rj_customer c LEFT JOIN rj_orders o \
     ON c.c_custkey = o.o_custkey AND c.c_nation = 3 AND o.o_orderkey < 3000",
    "SELECT c.c_custkey, o.o_orderkey FROM rj_orders o RIGHT JOIN rj_customer c \
     ON o.o_custkey = c.c_custkey AND o.o_total > 1400 AND c.c_nation < 12",
    "SELECT c.c_custkey, o.o_orderkey FROM rj_customer c FULL JOIN rj_orders o \
     ON c.c_custkey = o.o_custkey AND o.o_total > 1400 AND c.c_nation = 3",
    // part is nulled inside the right side: its condition cannot filter it first.
    "SELECT c.c_custkey, o.o_orderkey, p.p_size FROM rj_customer c JOIN \
     (rj_orders o LEFT JOIN rj_part p ON p.p_partkey = o.o_orderkey) \
     ON c.c_custkey = o.o_custkey AND p.p_size IS NULL AND o.o_orderkey < 13000",
    "SELECT count(*), sum(l.l_qty) FROM rj_lineitem l JOIN rj_part p \
     ON l.l_partkey = p.p_partkey AND p.p_size = 3 AND l.l_qty > 10",
];

async fn on_clause_filters(shard: &Client, plain: &Client) {
    for sql in ON_FILTERS {
        same(shard, plain, sql).await;
    }
    // Applied where orders are read: o_status neither moves nor is tested again.
    let e = explain(shard, ON_FILTERS[0]).await;
    assert!(e.contains("Repartition rj_orders on o_custkey"), "{e}");
    assert!(!e.contains("o_status"), "{e}");
}

/// One test: both parts use the same tables.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repartition_joins() {
    let (shard, plain) = setup().await;
    answers_and_strategies(&shard, &plain).await;
    on_clause_filters(&shard, &plain).await;
    reductions_decide_strategies(&shard, &plain).await;
    subqueries_run_once(&shard, &plain).await;
    semijoin_reduced_moves(&shard, &plain).await;
    staying_references_filtered(&shard, &plain).await;
    moved_tables_are_cleaned_up(&shard, &plain).await;
}

/// TPC-H Q11's shape: part (12,000 rows, over the broadcast limit) is reduced by a
/// filtered reference table's keys, which its estimate counts: broadcast. Q22's: a
/// filter written in SQL's substring syntax is customer's own, so the orders moved for
/// the NOT EXISTS are those of the filtered customers' keys.
async fn reductions_decide_strategies(shard: &Client, plain: &Client) {
    let q11 = "SELECT count(*), sum(l.l_qty) FROM rj_lineitem l, rj_part p, rj_nation n \
               WHERE l.l_partkey = p.p_partkey AND p.p_size = n.n_key AND n.n_region = 1";
    let q22 = "SELECT c_nation, count(*) FROM rj_customer \
               WHERE substring(c_name FROM 6 FOR 1) IN ('1', '2') \
               AND NOT EXISTS (SELECT * FROM rj_orders WHERE o_custkey = c_custkey \
               AND o_orderkey % 50 <> 0) GROUP BY c_nation";
    // Q5's / Q8's: customer joins a nation whose rows that matter join a filtered
    // region (here the same reference table again): reduced by those nations' keys.
    let q5 = "SELECT c.c_nation, count(*), sum(o.o_total) FROM rj_orders o, rj_customer c, \
              rj_nation n1, rj_nation n2 WHERE o.o_custkey = c.c_custkey \
              AND c.c_nation = n1.n_key AND n1.n_region = n2.n_key AND n2.n_region = 3 \
              GROUP BY c.c_nation";
    for sql in [q11, q22, q5] {
        same(shard, plain, sql).await;
    }
    let e = explain(shard, q5).await;
    assert!(e.contains("where c_nation = ANY (keys of n1.n_key)"), "{e}");
    let e = explain(shard, q11).await;
    assert!(e.contains("Broadcast rj_part"), "{e}");
    let e = explain(shard, q22).await;
    assert!(e.contains("= ANY (keys of rj_customer.c_custkey)"), "{e}");
}

// Semijoin-reduced moves: sj_fact 60,000 rows (NULL and duplicated keys), sj_dim 20,000
// (NULL and duplicated keys, d_flag 0..15), sj_wide 110,000 distinct keys (over the
// cap of keys, its filter estimated a third of it).
const SJ_DROP: &str = "DROP TABLE IF EXISTS sj_fact, sj_dim, sj_wide";
const SJ_SETUP: &str = "
CREATE TABLE sj_fact (f_id int PRIMARY KEY, f_key int, f_val int);
CREATE TABLE sj_dim (d_id int PRIMARY KEY, d_key int, d_flag int);
CREATE TABLE sj_wide (w_id int PRIMARY KEY, w_key int);
-- Q17's shape below: without it the oracle's correlated average is quadratic (minutes).
CREATE INDEX sj_fact_key ON sj_fact (f_key);
INSERT INTO sj_fact SELECT i, CASE WHEN i % 13 = 0 THEN NULL ELSE i % 7000 END, i % 100
FROM generate_series(1, 60000) i;
INSERT INTO sj_dim SELECT i, CASE WHEN i % 17 = 0 THEN NULL ELSE i % 5000 END, i % 16
FROM generate_series(1, 20000) i;
INSERT INTO sj_wide SELECT i, i FROM generate_series(1, 110000) i;
ANALYZE sj_fact, sj_dim, sj_wide;
";

const SEMIJOIN: &[&str] = &[
    // Dual repartition, fact reduced by dim's filtered keys (NULLs on both sides,
    // duplicates on both sides).
    "SELECT count(*), sum(f.f_val), count(d.d_id), sum(d.d_flag) FROM sj_fact f, sj_dim d \
     WHERE f.f_key = d.d_key AND d.d_flag < 12",
    // The same with the equality in an inner join's ON, rows listed.
    "SELECT f.f_id, d.d_id FROM sj_fact f JOIN sj_dim d ON f.f_key = d.d_key \
     WHERE d.d_flag < 12 AND f.f_id < 400",
    // TPC-H Q17's shape: the outer and the correlated reference of fact, one move.
    "SELECT count(*), sum(d.d_flag) FROM sj_dim d, sj_fact f WHERE f.f_key = d.d_key AND d.d_flag < 12 \
     AND f.f_val < (SELECT avg(f2.f_val) FROM sj_fact f2 WHERE f2.f_key = d.d_key)",
    // No key at all (no dim row has flag 99): the reduced move reads nothing.
    "SELECT count(*), sum(f.f_val) FROM sj_dim d, sj_fact f WHERE f.f_key = d.d_key AND d.d_flag + 0 > 99 \
     AND d.d_flag < 12 AND f.f_val < (SELECT avg(f2.f_val) FROM sj_fact f2 WHERE f2.f_key = d.d_key)",
    // Over the cap of keys (110,000 distinct): the move reads every row.
    "SELECT count(*), sum(f.f_val) FROM sj_fact f, sj_wide w WHERE f.f_key = w.w_key AND w.w_id + 0 > 0",
    // Outer joins: fact preserved (its unmatched rows kept), fact nullable.
    "SELECT count(*), count(d.d_id), sum(f.f_val) FROM sj_fact f LEFT JOIN sj_dim d \
     ON f.f_key = d.d_key AND d.d_flag < 12",
    "SELECT count(*), count(f.f_id) FROM sj_dim d LEFT JOIN sj_fact f ON f.f_key = d.d_key \
     WHERE d.d_flag < 12",
    // Anti joins: fact's unmatched rows are the answer.
    "SELECT count(*), sum(f.f_val) FROM sj_fact f WHERE NOT EXISTS \
     (SELECT 1 FROM sj_dim d WHERE d.d_key = f.f_key AND d.d_flag < 12)",
    "SELECT count(*), sum(f.f_val) FROM sj_fact f WHERE f.f_key NOT IN \
     (SELECT d.d_key FROM sj_dim d WHERE d.d_flag < 12 AND d.d_key IS NOT NULL)",
    // More keys than a parameter takes (20,000): a keys table on the nodes.
    "SELECT count(*), sum(f.f_val), max(w.w_id) FROM sj_fact f, sj_wide w \
     WHERE f.f_key = w.w_key AND w.w_id < 20000",
];

// Staying references filtered by keys: st_doc 6,000 rows (text keys, NULLs), st_tag
// 400 (names that need quoting in an array and a literal; 40 with flag 1).
const ST_DROP: &str = "DROP TABLE IF EXISTS st_doc, st_tag";
const ST_SETUP: &str = r#"
CREATE TABLE st_doc (d_id int PRIMARY KEY, d_tag text, d_n int);
CREATE TABLE st_tag (t_id int PRIMARY KEY, t_name text, t_flag int);
CREATE INDEX st_doc_tag ON st_doc (d_tag);
INSERT INTO st_tag SELECT i, CASE i % 5 WHEN 0 THEN 'it''s ' || i WHEN 1 THEN 'a"b\c ' || i
       WHEN 2 THEN '{x,y} ' || i WHEN 3 THEN NULL ELSE 'tag ' || i END, CASE WHEN i % 10 < 1 THEN 1 ELSE 0 END
FROM generate_series(1, 400) i;
INSERT INTO st_doc SELECT i, CASE WHEN i % 11 = 0 THEN NULL
       ELSE (SELECT t_name FROM st_tag WHERE t_id = i % 400 + 1) END, i % 7
FROM generate_series(1, 6000) i;
ANALYZE st_doc, st_tag;
"#;

const STAYING: &[&str] = &[
    "SELECT d.d_tag, count(*), sum(d.d_n) FROM st_doc d JOIN st_tag t ON d.d_tag = t.t_name \
     WHERE t.t_flag = 1 GROUP BY d.d_tag",
    // The staying reference in a correlated subquery's level.
    "SELECT d1.d_id, d1.d_tag FROM st_doc d1 WHERE d1.d_n > 4 AND EXISTS \
     (SELECT 1 FROM st_doc d2, st_tag t WHERE d2.d_id = d1.d_id AND d2.d_tag = t.t_name \
     AND t.t_flag = 1)",
    // The preserved side of an outer join keeps its unmatched rows: not filtered.
    "SELECT count(*), count(t.t_id), sum(d.d_n) FROM st_doc d LEFT JOIN st_tag t \
     ON d.d_tag = t.t_name AND t.t_flag = 1",
];

/// A staying reference filtered by the keys of a broadcast one (`staying.rs`).
async fn staying_references_filtered(shard: &Client, plain: &Client) {
    plain.batch_execute(ST_DROP).await.unwrap();
    shard.batch_execute(ST_DROP).await.unwrap();
    plain.batch_execute(ST_SETUP).await.unwrap();
    let (create, fill) = ST_SETUP.split_at(ST_SETUP.find("INSERT").unwrap());
    shard.batch_execute(create).await.unwrap();
    for (t, c) in [("st_doc", "d_id"), ("st_tag", "t_id")] {
        let call = format!("SELECT create_distributed_table('{t}', '{c}')");
        shard.batch_execute(&call).await.unwrap();
    }
    // st_doc's rows read st_tag: filled on plain PostgreSQL, copied over.
    shard
        .batch_execute(fill.split(";").next().unwrap())
        .await
        .unwrap();
    let docs = unsorted(plain, "SELECT d_id, d_tag, d_n FROM st_doc")
        .await
        .unwrap();
    let values: Vec<String> = docs
        .iter()
        .map(|r| {
            let lit = |v: &Option<String>| match v {
                Some(v) => format!("'{}'", v.replace('\'', "''")),
                None => "NULL".into(),
            };
            format!("({}, {}, {})", lit(&r[0]), lit(&r[1]), lit(&r[2]))
        })
        .collect();
    let insert = format!("INSERT INTO st_doc VALUES {}", values.join(", "));
    shard.batch_execute(&insert).await.unwrap();
    shard.batch_execute("ANALYZE st_doc, st_tag").await.unwrap();
    for sql in STAYING {
        same(shard, plain, sql).await;
    }
    for (i, filter) in [(0, "d.d_tag"), (1, "d2.d_tag"), (2, "")] {
        let e = explain(shard, STAYING[i]).await;
        assert_eq!(
            e.contains(&format!("Filter {filter} = ANY (keys of t.t_name)")),
            !filter.is_empty(),
            "{}\n{e}",
            STAYING[i]
        );
        // The shards' statements carry the keys.
        assert_eq!(
            e.contains("d_tag = ANY ('{"),
            !filter.is_empty(),
            "{}\n{e}",
            STAYING[i]
        );
    }
    assert_no_moved_tables().await;
}

async fn semijoin_reduced_moves(shard: &Client, plain: &Client) {
    plain.batch_execute(SJ_DROP).await.unwrap();
    shard.batch_execute(SJ_DROP).await.unwrap();
    plain.batch_execute(SJ_SETUP).await.unwrap();
    let (create, fill) = SJ_SETUP.split_at(SJ_SETUP.find("INSERT").unwrap());
    shard.batch_execute(create).await.unwrap();
    for t in ["sj_fact", "sj_dim", "sj_wide"] {
        let call = format!("SELECT create_distributed_table('{t}', '{}_id')", &t[3..4]);
        shard.batch_execute(&call).await.unwrap();
    }
    shard.batch_execute(fill).await.unwrap();
    for sql in SEMIJOIN {
        same(shard, plain, sql).await;
    }
    // EXPLAIN shows the reduction where it is proven, and only there.
    // (A small filtered fact is broadcast instead: SEMIJOIN[1].)
    for (i, reduced) in [
        (0, true),
        (2, true),
        (3, true),
        (4, true),
        (5, false),
        (6, false),
        (7, false),
        (8, false),
        (9, true),
    ] {
        let e = explain(shard, SEMIJOIN[i]).await;
        assert_eq!(
            e.contains("where f_key = ANY (keys of d.d_key)")
                || e.contains("where f_key = ANY (keys of w.w_key)"),
            reduced,
            "{}\n{e}",
            SEMIJOIN[i]
        );
    }
    // In a block, the keys and the moved rows see the block's own writes.
    for c in [shard, plain] {
        c.batch_execute(
            "BEGIN; UPDATE sj_dim SET d_flag = 3 WHERE d_id < 3000; \
                         INSERT INTO sj_fact VALUES (60001, 4999, 7), (60002, NULL, 8)",
        )
        .await
        .unwrap();
    }
    same(shard, plain, SEMIJOIN[0]).await;
    same(shard, plain, SEMIJOIN[2]).await;
    same(shard, plain, SEMIJOIN[9]).await;
    for c in [shard, plain] {
        c.batch_execute("ROLLBACK").await.unwrap();
    }
    assert_no_moved_tables().await;
}

async fn answers_and_strategies(shard: &Client, plain: &Client) {
    for sql in BROADCAST
        .iter()
        .chain(REPARTITION)
        .chain(IN_SUBQUERIES)
        .chain(OR_OF_ANDS)
    {
        same(&shard, &plain, sql).await;
    }
    // The subqueries' tables move, nothing is pulled into the coordinator node.
    let e = explain(&shard, IN_SUBQUERIES[0]).await;
    assert_eq!(
        e.matches("Repartition rj_lineitem on l_partkey").count(),
        1,
        "{e}"
    );
    let e = explain(&shard, IN_SUBQUERIES[1]).await;
    assert!(e.contains("Repartition rj_orders on o_custkey"), "{e}");
    let e = explain(&shard, IN_SUBQUERIES[2]).await;
    assert!(e.contains("Broadcast rj_customer"), "{e}");
    let e = explain(&shard, IN_SUBQUERIES[4]).await;
    assert!(e.contains("Broadcast rj_part"), "{e}");
    // Every subplan is a move or a staying reference's keys (recursive planning's
    // would pull the tables).
    for sql in IN_SUBQUERIES {
        let e = explain(&shard, sql).await;
        let moves = e.matches("Broadcast rj_").count()
            + e.matches("Repartition rj_").count()
            + e.lines()
                .filter(|l| l.trim_start().starts_with("->  Filter ") && l.contains("(keys of"))
                .count();
        assert_eq!(
            e.matches("Distributed Subplan").count(),
            moves,
            "{sql}\n{e}"
        );
        assert!(moves > 0, "{sql}\n{e}");
    }
    // Part's implied filter (size 3 or 7: 600 of 12,000 rows) makes it small.
    let e = explain(&shard, OR_OF_ANDS[0]).await;
    let moved: f64 = e
        .split("Broadcast rj_part (~")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("part not broadcast: {e}"));
    assert!(moved < 3000.0, "{e}");
    // EXPLAIN names the strategy and the rows each moved table brings.
    let e = explain(&shard, BROADCAST[0]).await;
    assert!(e.contains("Broadcast rj_customer"), "{e}");
    // A selective filter makes part small: broadcast; unfiltered it is not.
    let e = explain(&shard, REPARTITION[0]).await;
    assert!(e.contains("Broadcast rj_part"), "{e}");
    let e = explain(&shard, REPARTITION[1]).await;
    assert!(e.contains("Repartition rj_lineitem on l_partkey"), "{e}");
    println!("{e}");
    let e = explain(&shard, REPARTITION[3]).await;
    assert!(e.contains("Repartition rj_part on p_size"), "{e}");
    assert!(e.contains("Repartition rj_lineitem on l_qty"), "{e}");

    // A parameter (extended protocol) and a block seeing its own writes.
    let sql = "SELECT count(*) FROM rj_orders o JOIN rj_part p ON o.o_custkey = p.p_partkey \
               WHERE p.p_size = $1";
    let a: i64 = shard.query_one(sql, &[&7i32]).await.unwrap().get(0);
    let b: i64 = plain.query_one(sql, &[&7i32]).await.unwrap().get(0);
    assert_eq!(a, b);
    let block = "INSERT INTO rj_customer VALUES (301, 'late', 3); \
                 UPDATE rj_orders SET o_custkey = 301 WHERE o_orderkey < 20;";
    for c in [&shard, &plain] {
        c.batch_execute("BEGIN").await.unwrap();
        c.batch_execute(block).await.unwrap();
    }
    same(&shard, &plain, BROADCAST[0]).await;
    same(&shard, &plain, REPARTITION[2]).await;
    for c in [&shard, &plain] {
        c.batch_execute("ROLLBACK").await.unwrap();
    }

    // No row through the coordinator node: its intermediate results may hold 1 kB.
    shard
        .batch_execute("SET citus.max_intermediate_result_size = '1kB'")
        .await
        .unwrap();
    same(&shard, &plain, REPARTITION[1]).await;
    same(&shard, &plain, REPARTITION[2]).await;
    same(&shard, &plain, BROADCAST[2]).await;
    for i in [0, 5, 6] {
        same(&shard, &plain, IN_SUBQUERIES[i]).await;
    }
    // Off: recursive planning pulls the tables through the coordinator node.
    shard
        .batch_execute("SET citus.enable_repartition_joins = off")
        .await
        .unwrap();
    let off = rows(&shard, "SHOW citus.enable_repartition_joins")
        .await
        .unwrap();
    assert_eq!(off, vec![vec![Some("off".to_string())]]);
    let err = rows(&shard, REPARTITION[1]).await.unwrap_err();
    assert_eq!(sqlstate_and_message(&err).0, "54000");
    shard
        .batch_execute(
            "RESET citus.enable_repartition_joins; RESET citus.max_intermediate_result_size",
        )
        .await
        .unwrap();
    assert_no_moved_tables().await;
}

/// Uncorrelated subqueries over distributed tables in a statement that otherwise runs
/// on the shards: run once, their values passed to the shards' statements.
const RUN_ONCE: &[&str] = &[
    // Q11: HAVING against a scalar over the same join (part moves).
    "SELECT l_partkey, sum(l_qty) AS value FROM rj_lineitem, rj_part WHERE l_partkey = p_partkey \
     AND p_size < 10 GROUP BY l_partkey HAVING sum(l_qty) > (SELECT sum(l_qty) * 0.0003 \
     FROM rj_lineitem, rj_part WHERE l_partkey = p_partkey AND p_size < 10)",
    // Q22: inside a FROM subquery, next to a correlated NOT EXISTS.
    "SELECT nation, count(*), sum(c_custkey) FROM (SELECT c_nation AS nation, c_custkey \
     FROM rj_customer WHERE c_custkey > (SELECT avg(o_custkey) FROM rj_orders WHERE o_total > 500) \
     AND NOT EXISTS (SELECT * FROM rj_orders WHERE o_custkey = c_custkey AND o_orderkey % 97 = 0)) s \
     GROUP BY nation",
    // An integer column against a numeric average (19.5): stays numeric.
    "SELECT count(*) FROM rj_orders o JOIN rj_part p ON o.o_custkey = p.p_partkey \
     WHERE o.o_custkey < (SELECT avg(p_size) FROM rj_part)",
    // No row: NULL.
    "SELECT count(*), max(o.o_total) FROM rj_orders o JOIN rj_part p ON o.o_custkey = p.p_partkey \
     WHERE o.o_total > (SELECT o_total FROM rj_orders WHERE o_orderkey = -1) OR p.p_size = 3",
    "SELECT (SELECT c_name FROM rj_customer WHERE c_custkey = -5) IS NULL, count(*) \
     FROM rj_orders o JOIN rj_part p ON o.o_custkey = p.p_partkey",
    // In the select list, and EXISTS true and false.
    "SELECT (SELECT max(c_name) FROM rj_customer WHERE c_nation = 2), p.p_size, count(*) \
     FROM rj_orders o JOIN rj_part p ON o.o_custkey = p.p_partkey GROUP BY p.p_size",
    "SELECT count(*) FROM rj_orders o JOIN rj_part p ON o.o_custkey = p.p_partkey \
     WHERE EXISTS (SELECT 1 FROM rj_lineitem WHERE l_qty = 49) AND p.p_size < 20",
    "SELECT count(*) FROM rj_orders o JOIN rj_part p ON o.o_custkey = p.p_partkey \
     WHERE NOT EXISTS (SELECT 1 FROM rj_lineitem WHERE l_qty > 1000) OR p.p_size = 1",
    // A volatile function: evaluated once, as PostgreSQL's InitPlan is.
    "SELECT count(*) FROM rj_orders o JOIN rj_part p ON o.o_custkey = p.p_partkey \
     WHERE o.o_total > (SELECT random() * 0 + max(c_nation) * 20 FROM rj_customer)",
    // One table, the subquery over another.
    "SELECT count(*), sum(o_total) FROM rj_orders WHERE o_total > (SELECT avg(l_qty) * 20 FROM rj_lineitem)",
    // A date, read back under any DateStyle (set below).
    "SELECT count(*) FROM rj_orders o JOIN rj_part p ON o.o_custkey = p.p_partkey \
     WHERE DATE '2020-01-30' > (SELECT DATE '2020-01-01' + max(c_nation) FROM rj_customer) + p.p_size",
];

async fn subqueries_run_once(shard: &Client, plain: &Client) {
    for sql in RUN_ONCE {
        same(shard, plain, sql).await;
    }
    // Computed once: a subplan, the shards' statements compare with its value.
    for sql in [RUN_ONCE[0], RUN_ONCE[2], RUN_ONCE[6]] {
        let e = explain(shard, sql).await;
        assert!(!e.contains("InitPlan"), "{sql}\n{e}");
        assert!(e.contains("Distributed Subplan"), "{sql}\n{e}");
    }
    let e = explain(shard, RUN_ONCE[0]).await;
    assert!(!e.contains("Broadcast rj_lineitem"), "{e}");
    // The output column keeps the subquery's name.
    for c in [shard, plain] {
        let row = c.query_one(RUN_ONCE[4], &[]).await.unwrap();
        assert_eq!(row.columns()[0].name(), "?column?");
        let rows = c.query(RUN_ONCE[5], &[]).await.unwrap();
        assert_eq!(rows[0].columns()[0].name(), "max");
    }
    // More than one row: PostgreSQL's 21000.
    let two = "SELECT count(*) FROM rj_orders o JOIN rj_part p ON o.o_custkey = p.p_partkey \
               WHERE o.o_total > (SELECT c_nation FROM rj_customer WHERE c_custkey < 3)";
    let e1 = rows(shard, two).await.unwrap_err();
    let e2 = rows(plain, two).await.unwrap_err();
    assert_eq!(sqlstate_and_message(&e1), sqlstate_and_message(&e2));
    assert_eq!(sqlstate_and_message(&e1).0, "21000");
    // A parameter inside the subquery and outside (extended protocol).
    let sql = "SELECT count(*) FROM rj_orders o JOIN rj_part p ON o.o_custkey = p.p_partkey \
               WHERE p.p_size < $2 AND o.o_total > (SELECT avg(o_total) FROM rj_orders WHERE o_custkey = $1)";
    let a: i64 = shard.query_one(sql, &[&7i32, &20i32]).await.unwrap().get(0);
    let b: i64 = plain.query_one(sql, &[&7i32, &20i32]).await.unwrap().get(0);
    assert_eq!(a, b);
    // Dates written as ISO whatever the session's DateStyle.
    for c in [shard, plain] {
        c.batch_execute("SET DateStyle = 'SQL, DMY'").await.unwrap();
    }
    same(shard, plain, RUN_ONCE[RUN_ONCE.len() - 1]).await;
    for c in [shard, plain] {
        c.batch_execute("RESET DateStyle").await.unwrap();
    }
}

/// No table in pgshard_intermediate on any worker, and no worker transaction still
/// holding one (a session's moved tables go with its transaction).
async fn assert_no_moved_tables() {
    let cl = cluster();
    for port in cl.worker_ports.iter().copied() {
        let c = cl.direct(port).await;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let tables: i64 = c
                .query_one(
                    "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
                     WHERE n.nspname = 'pgshard_intermediate'",
                    &[],
                )
                .await
                .unwrap()
                .get(0);
            let holding: i64 = c
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity WHERE pid <> pg_backend_pid() \
                     AND state <> 'idle' AND query LIKE '%pgs_move_%'",
                    &[],
                )
                .await
                .unwrap()
                .get(0);
            if tables == 0 && holding == 0 {
                break;
            }
            if Instant::now() >= deadline {
                let what = unsorted(&c, "SELECT state, left(query, 200) FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND state <> 'idle' AND query LIKE '%pgs_move_%'").await.unwrap();
                panic!("worker {port}: {tables} moved tables, {holding} transactions holding some: {what:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// A join with a moved table that runs for a few seconds: each of its ~1,000 output
/// rows sleeps 10 ms. (A node still running its tasks after the statement failed on
/// another finishes them, then the block's rollback removes its moved tables.)
const SLOW: &str =
    "SELECT count(*) FROM rj_lineitem l JOIN rj_part p ON l.l_partkey = p.p_partkey \
                    WHERE p.p_size = 3 AND pg_sleep(0.01) IS NOT NULL";

async fn moved_tables_are_cleaned_up(shard: &Client, plain: &Client) {
    // Success.
    same(&shard, &plain, REPARTITION[1]).await;
    assert_no_moved_tables().await;
    // An error after the moves (on the workers' join).
    let bad = "SELECT count(*) FROM rj_orders o JOIN rj_part p ON o.o_custkey = p.p_partkey \
               WHERE o.o_total / (p.p_size - p.p_size) > 0";
    let e1 = rows(&shard, bad).await.unwrap_err();
    let e2 = rows(&plain, bad).await.unwrap_err();
    assert_eq!(sqlstate_and_message(&e1).0, sqlstate_and_message(&e2).0);
    assert_no_moved_tables().await;
    same(&shard, &plain, REPARTITION[1]).await;

    // Cancel (CancelRequest) mid-query.
    let c = cluster().client().await;
    let token = c.cancel_token();
    let run = tokio::spawn(async move { rows(&c, SLOW).await.map(drop) });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    token.cancel_query(NoTls).await.unwrap();
    let err = run.await.unwrap().unwrap_err();
    assert_eq!(sqlstate_and_message(&err).0, "57014", "{err:?}");
    assert_no_moved_tables().await;

    // pg_cancel_backend of the worker's backend running the join.
    let c = cluster().client().await;
    let run = tokio::spawn(async move { rows(&c, SLOW).await.map(drop) });
    let cl = cluster();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut cancelled = false;
    while !cancelled && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
        for port in cl.worker_ports.iter().copied() {
            let w = cl.direct(port).await;
            let n: i64 = w
                .query_one(
                    "SELECT count(pg_cancel_backend(pid)) FROM pg_stat_activity \
                     WHERE query LIKE '%pg_sleep%' AND query LIKE '%pgs_move_%' \
                     AND state = 'active' AND pid <> pg_backend_pid()",
                    &[],
                )
                .await
                .unwrap()
                .get(0);
            cancelled |= n > 0;
        }
    }
    assert!(cancelled, "no worker backend ran the join");
    let err = run.await.unwrap().unwrap_err();
    assert_eq!(sqlstate_and_message(&err).0, "57014", "{err:?}");
    assert_no_moved_tables().await;

    // A client that disconnects mid-query.
    let (c, conn) = {
        let mut cfg = tokio_postgres::Config::new();
        cfg.host(&cl.host)
            .port(cl.port)
            .user(&cl.user)
            .password(&cl.password)
            .dbname(&cl.database);
        cfg.connect(NoTls).await.unwrap()
    };
    let conn_task = tokio::spawn(conn);
    let run = tokio::spawn(async move { rows(&c, SLOW).await.map(drop) });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    conn_task.abort();
    run.abort();
    assert_no_moved_tables().await;
    // The server is still up.
    same(&shard, &plain, BROADCAST[1]).await;
}
