//! Recursive planning answers exactly as one PostgreSQL does: CTEs (referenced once,
//! many times, MATERIALIZED), subqueries in FROM (with LIMIT), IN / NOT IN (with
//! NULLs), EXISTS / NOT EXISTS correlated or not, scalar subqueries in the SELECT list
//! and HAVING, UNION / INTERSECT / EXCEPT [ALL] across distributed, reference and local
//! tables, WITH RECURSIVE over distributed rows, a block seeing its own writes, the
//! extended protocol with a parameter inside a CTE, and the
//! `citus.max_intermediate_result_size` error. The same tables and rows live in the
//! pgshard cluster and in a plain PostgreSQL; every query runs on both.

mod common;

use common::{cluster, plain_postgres, sqlstate_and_message};
use tokio_postgres::{Client, SimpleQueryMessage};

type Rows = Vec<Vec<Option<String>>>;

async fn rows(c: &Client, sql: &str) -> Result<Rows, tokio_postgres::Error> {
    let mut out = Vec::new();
    for m in c.simple_query(sql).await? {
        if let SimpleQueryMessage::Row(r) = m {
            out.push((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect());
        }
    }
    Ok(out)
}

const SETUP: &str = "
DROP TABLE IF EXISTS rp_orders, rp_items, rp_kinds, rp_local;
CREATE TABLE rp_orders (id int PRIMARY KEY, tenant int, kind int, amount numeric(10,2), note text);
CREATE TABLE rp_items (item_id bigint PRIMARY KEY, order_id int, qty int);
CREATE TABLE rp_kinds (kind int PRIMARY KEY, label text);
CREATE TABLE rp_local (tenant int, region text);
INSERT INTO rp_orders
SELECT i, i % 10, i % 4, CASE WHEN i % 13 = 0 THEN NULL ELSE (i * 37 % 1000) / 8.0 END,
       CASE WHEN i % 7 = 0 THEN NULL ELSE 'n' || (i % 9) END
FROM generate_series(1, 400) AS s(i);
INSERT INTO rp_items SELECT i, CASE WHEN i % 17 = 0 THEN NULL ELSE i % 450 END, i % 5
FROM generate_series(1, 600) AS s(i);
INSERT INTO rp_kinds VALUES (0, 'zero'), (1, 'one'), (2, 'two'), (5, 'five');
INSERT INTO rp_local VALUES (1, 'north'), (2, 'south'), (3, 'east'), (11, 'nowhere');
";

/// Both servers with the same data; orders by tenant, items by item_id (not
/// co-located), kinds a reference table, rp_local a coordinator-node table.
async fn setup() -> (Client, Client) {
    let shard = cluster().client().await;
    let plain = plain_postgres().client().await;
    shard.batch_execute(SETUP).await.unwrap();
    plain.batch_execute(SETUP).await.unwrap();
    for call in [
        "SELECT create_distributed_table('rp_orders', 'id')",
        "SELECT create_distributed_table('rp_items', 'item_id')",
        "SELECT create_reference_table('rp_kinds')",
    ] {
        shard.batch_execute(call).await.unwrap();
    }
    (shard, plain)
}

async fn same(shard: &Client, plain: &Client, sql: &str) {
    let a = rows(shard, sql)
        .await
        .unwrap_or_else(|e| panic!("pgshard: {sql}: {e:?}"));
    let b = rows(plain, sql)
        .await
        .unwrap_or_else(|e| panic!("plain: {sql}: {e:?}"));
    assert_eq!(a, b, "{sql}");
    assert!(!b.is_empty(), "{sql} returned nothing");
}

/// Every query ends with an ORDER BY that fixes its rows' order.
const QUERIES: &[&str] = &[
    // CTEs: once, many times, MATERIALIZED, column aliases, one CTE over another.
    "WITH x AS (SELECT * FROM rp_orders WHERE tenant = 1) SELECT count(*) FROM x",
    "WITH x AS (SELECT tenant, sum(amount) AS s FROM rp_orders GROUP BY tenant) \
     SELECT a.tenant, a.s, b.s FROM x a JOIN x b ON a.tenant = b.tenant + 1 ORDER BY 1",
    "WITH x AS MATERIALIZED (SELECT id, amount FROM rp_orders WHERE id < 50) \
     SELECT count(*), sum(amount) FROM x",
    "WITH x(t, n) AS (SELECT tenant, count(*) FROM rp_orders GROUP BY tenant), \
          y AS (SELECT t, n * 2 AS n2 FROM x WHERE t > 3) SELECT * FROM y ORDER BY t",
    "WITH x AS (SELECT * FROM rp_orders WHERE kind = 2) \
     SELECT l.region, count(*) FROM x JOIN rp_local l ON l.tenant = x.tenant GROUP BY 1 ORDER BY 1",
    // FROM subqueries.
    "SELECT count(*) FROM (SELECT * FROM rp_orders ORDER BY id LIMIT 1) s",
    "SELECT s.tenant, s.c FROM (SELECT tenant, count(*) AS c FROM rp_orders GROUP BY tenant) s \
     WHERE s.c > 39 ORDER BY 1",
    "SELECT o.id, i.qty FROM rp_orders o JOIN (SELECT * FROM rp_items ORDER BY item_id LIMIT 20) i \
     ON i.order_id = o.id ORDER BY 1, 2",
    // IN / NOT IN, with NULLs on either side.
    "SELECT id FROM rp_orders WHERE id IN (SELECT order_id FROM rp_items WHERE qty = 3) ORDER BY id",
    "SELECT count(*) FROM rp_orders WHERE id NOT IN (SELECT order_id FROM rp_items)",
    "SELECT count(*) FROM rp_orders WHERE id NOT IN (SELECT order_id FROM rp_items WHERE order_id IS NOT NULL)",
    "SELECT count(*) FROM rp_orders WHERE amount IN (SELECT amount FROM rp_orders WHERE tenant = 2)",
    "SELECT tenant, region FROM rp_local WHERE tenant IN (SELECT tenant FROM rp_orders) ORDER BY 1",
    // EXISTS / NOT EXISTS, uncorrelated and correlated.
    "SELECT count(*) FROM rp_local WHERE EXISTS (SELECT 1 FROM rp_orders WHERE tenant = 3)",
    "SELECT id FROM rp_orders o WHERE EXISTS (SELECT 1 FROM rp_items i WHERE i.order_id = o.id AND i.qty = 4) ORDER BY id",
    "SELECT count(*) FROM rp_orders WHERE EXISTS (SELECT 1 FROM rp_orders o2 WHERE o2.id = rp_orders.id + 1 AND o2.kind = 0)",
    "SELECT count(*) FROM rp_orders o WHERE NOT EXISTS (SELECT 1 FROM rp_items i WHERE i.order_id = o.id)",
    "SELECT l.region FROM rp_local l WHERE NOT EXISTS (SELECT 1 FROM rp_orders o WHERE o.tenant = l.tenant) ORDER BY 1",
    // Scalar subqueries in the SELECT list and HAVING.
    "SELECT id, (SELECT max(qty) FROM rp_items) AS m FROM rp_orders WHERE id < 5 ORDER BY id",
    "SELECT tenant, (SELECT count(*) FROM rp_items i WHERE i.order_id = min(o.id)) FROM rp_orders o GROUP BY tenant ORDER BY 1",
    "SELECT tenant, count(*) FROM rp_orders GROUP BY tenant \
     HAVING count(*) >= (SELECT count(*) / 10 FROM rp_orders) ORDER BY 1",
    // Set operations across distributed, reference and local tables.
    "SELECT tenant FROM rp_orders UNION SELECT tenant FROM rp_local ORDER BY 1",
    "SELECT kind FROM rp_orders UNION ALL SELECT kind FROM rp_kinds ORDER BY 1 LIMIT 30",
    "SELECT kind FROM rp_orders INTERSECT SELECT kind FROM rp_kinds ORDER BY 1",
    "SELECT tenant FROM rp_local EXCEPT SELECT tenant FROM rp_orders ORDER BY 1",
    "SELECT qty FROM rp_items INTERSECT ALL SELECT kind FROM rp_orders ORDER BY 1",
    "SELECT kind FROM rp_orders EXCEPT ALL SELECT qty FROM rp_items WHERE qty < 2 ORDER BY 1",
    "(SELECT id FROM rp_orders WHERE id < 5 UNION SELECT item_id::int FROM rp_items WHERE item_id < 3) \
     UNION ALL SELECT kind FROM rp_kinds ORDER BY 1",
    // Joins pgshard refuses otherwise: distributed with local and not co-located.
    "SELECT o.id, l.region FROM rp_orders o JOIN rp_local l ON l.tenant = o.tenant WHERE o.id < 30 ORDER BY 1",
    "SELECT o.tenant, sum(i.qty) FROM rp_orders o JOIN rp_items i ON i.order_id = o.id GROUP BY 1 ORDER BY 1",
    // Pulled tables filtered by their own WHERE conjuncts first, never an outer join's
    // nullable side.
    "SELECT o.id, o.kind, i.qty FROM rp_orders o JOIN rp_items i ON i.order_id = o.id      WHERE o.kind = 1 AND i.qty > 2 AND o.id < 100 ORDER BY 1, 3",
    "SELECT l.tenant, o.id FROM rp_local l LEFT JOIN rp_orders o ON o.tenant = l.tenant AND o.id < 25      WHERE o.id IS NULL OR o.id < 15 ORDER BY 1, 2",
    "SELECT l.tenant, o.id FROM rp_local l LEFT JOIN rp_orders o ON o.tenant = l.tenant      WHERE o.id IS NULL ORDER BY 1, 2",
    // WITH RECURSIVE over distributed rows, on the coordinator node.
    "WITH RECURSIVE chain(id, depth) AS (SELECT id, 0 FROM rp_orders WHERE id = 1 \
       UNION ALL SELECT o.id, c.depth + 1 FROM chain c JOIN rp_orders o ON o.id = c.id * 2 WHERE c.depth < 10) \
     SELECT * FROM chain ORDER BY id",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recursive_planning_matches_plain_postgres() {
    let (shard, plain) = setup().await;
    for q in QUERIES {
        same(&shard, &plain, q).await;
    }

    // Errors of the parts are PostgreSQL's own: a scalar subquery of several rows.
    let q = "SELECT id, (SELECT qty FROM rp_items WHERE qty = 1) FROM rp_orders WHERE id < 3";
    let a = shard.simple_query(q).await.unwrap_err();
    let b = plain.simple_query(q).await.unwrap_err();
    assert_eq!(sqlstate_and_message(&a), sqlstate_and_message(&b), "{q}");

    // In a query string of several statements, and as the SELECT of an INSERT into a
    // local table (planned by pgshard's planner).
    same(
        &shard,
        &plain,
        "SELECT 1; WITH x AS (SELECT tenant FROM rp_orders WHERE id < 4) SELECT * FROM x ORDER BY 1",
    )
    .await;
    for c in [&shard, &plain] {
        c.batch_execute(
            "INSERT INTO rp_local SELECT tenant + 100, 'copied' FROM rp_orders              WHERE id IN (SELECT order_id FROM rp_items WHERE qty = 1 AND item_id < 100)",
        )
        .await
        .unwrap();
    }
    same(&shard, &plain, "SELECT * FROM rp_local ORDER BY 1, 2").await;
    for c in [&shard, &plain] {
        c.batch_execute("DELETE FROM rp_local WHERE tenant >= 100")
            .await
            .unwrap();
    }

    // Inside a block: the subplans see the block's writes, on every node.
    for c in [&shard, &plain] {
        c.batch_execute(
            "BEGIN; INSERT INTO rp_orders VALUES (1001, 77, 1, 5.5, 'x'), (1002, 77, 2, 6.5, 'y');
             INSERT INTO rp_local VALUES (77, 'block');",
        )
        .await
        .unwrap();
    }
    same(
        &shard,
        &plain,
        "WITH x AS (SELECT * FROM rp_orders WHERE tenant = 77) \
         SELECT x.id, l.region FROM x JOIN rp_local l USING (tenant) ORDER BY 1",
    )
    .await;
    same(
        &shard,
        &plain,
        "SELECT id FROM rp_orders WHERE tenant IN (SELECT tenant FROM rp_local WHERE region = 'block') ORDER BY 1",
    )
    .await;
    for c in [&shard, &plain] {
        c.batch_execute("ROLLBACK").await.unwrap();
    }
    same(
        &shard,
        &plain,
        "SELECT count(*) FROM (SELECT * FROM rp_orders WHERE tenant = 77 OR id = 1) s",
    )
    .await;

    // The extended protocol, with a parameter inside the CTE and one outside.
    let sql = "WITH x AS (SELECT * FROM rp_orders WHERE tenant = $1) \
               SELECT count(*), sum(amount)::text FROM x WHERE kind <> $2";
    let a = shard.query(sql, &[&3i32, &1i32]).await.unwrap();
    let b = plain.query(sql, &[&3i32, &1i32]).await.unwrap();
    let pick = |r: &[tokio_postgres::Row]| -> Vec<(i64, Option<String>)> {
        r.iter().map(|r| (r.get(0), r.get(1))).collect()
    };
    assert_eq!(pick(&a), pick(&b));
    let sql = "SELECT id FROM rp_orders WHERE id IN (SELECT order_id FROM rp_items WHERE qty = $1) ORDER BY id";
    let a = shard.query(sql, &[&2i32]).await.unwrap();
    let b = plain.query(sql, &[&2i32]).await.unwrap();
    let ids = |r: &[tokio_postgres::Row]| -> Vec<i32> { r.iter().map(|r| r.get(0)).collect() };
    assert_eq!(ids(&a), ids(&b));
    assert!(!ids(&a).is_empty());

    // No intermediate table is left behind.
    let left = rows(
        &shard,
        "SELECT count(*) FROM pg_class WHERE relname LIKE 'pgs_intermediate%' AND relpersistence = 't'",
    )
    .await
    .unwrap();
    assert_eq!(left, vec![vec![Some("0".to_string())]]);

    // A modifying CTE on a distributed table runs (tests/modifying_ctes.rs), not on the
    // shell.
    same(
        &shard,
        &plain,
        "WITH d AS (DELETE FROM rp_orders WHERE id = -1 RETURNING *) SELECT count(*) FROM d",
    )
    .await;

    intermediate_results_are_bounded(&shard, &plain).await;
}

async fn intermediate_results_are_bounded(shard: &Client, plain: &Client) {
    shard
        .batch_execute("SET citus.max_intermediate_result_size = '1kB'")
        .await
        .unwrap();
    let e = shard
        .simple_query("WITH x AS (SELECT * FROM rp_orders) SELECT count(*) FROM x")
        .await
        .unwrap_err();
    let (code, message) = sqlstate_and_message(&e);
    assert_eq!(code, "54000", "{message}");
    assert!(
        message.contains("the intermediate result size exceeds citus.max_intermediate_result_size (currently 1 kB)"),
        "{message}"
    );
    // The session goes on, and a small result passes.
    same(
        shard,
        plain,
        "WITH x AS (SELECT * FROM rp_orders WHERE id = 3) SELECT count(*) FROM x",
    )
    .await;
    shard
        .batch_execute("RESET citus.max_intermediate_result_size")
        .await
        .unwrap();
}
