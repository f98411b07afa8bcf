//! Views over distributed tables answer exactly as one PostgreSQL does: simple views,
//! views with column aliases, views over views, views joining distributed and
//! reference tables, joined with a distributed table, read in CTEs, subqueries, INSERT
//! ... SELECT and CREATE TABLE AS; a tenant-filtered view routed to one shard; the
//! caller's privilege on the view (42501); CREATE OR REPLACE and DROP seen at once by
//! the session and by another session after the catalog task's poll, and another
//! session's new view; writes through such views and materialized views refused
//! (0A000). The same tables, rows and views live in the pgshard cluster and in a
//! plain PostgreSQL; every query runs on both.

mod common;

use common::{cluster, plain_postgres, sqlstate_and_message};
use std::time::Duration;
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
DROP VIEW IF EXISTS vw_orders, vw_named, vw_per_tenant, vw_labelled, vw_local, vw_late, vw_t1, vw_swap, vw_cnt CASCADE;
DROP TABLE IF EXISTS vw_o CASCADE;
DROP TABLE IF EXISTS vw_i CASCADE;
DROP TABLE IF EXISTS vw_k CASCADE;
DROP TABLE IF EXISTS vw_l, vw_ctas CASCADE;
CREATE TABLE vw_o (tenant int, id int, kind int, amount numeric(10,2), note text, PRIMARY KEY (tenant, id));
CREATE TABLE vw_i (tenant int, order_id int, qty int);
CREATE TABLE vw_k (kind int PRIMARY KEY, label text);
CREATE TABLE vw_l (tenant int, region text);
INSERT INTO vw_o SELECT i % 10, i, i % 4, CASE WHEN i % 13 = 0 THEN NULL ELSE (i * 37 % 1000) / 8.0 END,
       CASE WHEN i % 7 = 0 THEN NULL ELSE 'n' || (i % 9) END
FROM generate_series(1, 300) AS s(i);
INSERT INTO vw_i SELECT i % 10, i % 320, i % 5 FROM generate_series(1, 500) AS s(i);
INSERT INTO vw_k VALUES (0, 'zero'), (1, 'one'), (2, 'two');
INSERT INTO vw_l VALUES (1, 'north'), (2, 'south'), (3, 'east');
";

/// The views, made through pgshard (and on the plain PostgreSQL) as clients write them.
const VIEWS: &[&str] = &[
    "CREATE VIEW vw_orders AS SELECT tenant, id, amount, note FROM vw_o WHERE amount > 20",
    "CREATE VIEW vw_named (t, order_no, total) AS SELECT tenant, id, amount FROM vw_o",
    "CREATE VIEW vw_per_tenant AS SELECT t, count(*) AS n, sum(total) AS s FROM vw_named GROUP BY t",
    "CREATE VIEW vw_labelled AS SELECT o.tenant, o.id, k.label FROM vw_o o JOIN vw_k k ON k.kind = o.kind",
    "CREATE VIEW vw_local AS SELECT tenant, region FROM vw_l",
    "COMMENT ON VIEW vw_orders IS 'orders over 20'",
    "ALTER VIEW vw_labelled ALTER COLUMN label SET DEFAULT 'none'",
    // Output names that are the distribution column's name but not its values.
    "CREATE VIEW vw_swap (tenant, id) AS SELECT id, tenant FROM vw_o",
    "CREATE VIEW vw_cnt AS SELECT kind AS tenant, count(*) AS n FROM vw_o GROUP BY kind",
];

async fn setup() -> (Client, Client) {
    let shard = cluster().client().await;
    let plain = plain_postgres().client().await;
    shard.batch_execute(SETUP).await.unwrap();
    plain.batch_execute(SETUP).await.unwrap();
    for call in [
        "SELECT create_distributed_table('vw_o', 'tenant')",
        "SELECT create_distributed_table('vw_i', 'tenant', colocate_with => 'vw_o')",
        "SELECT create_reference_table('vw_k')",
    ] {
        shard.batch_execute(call).await.unwrap();
    }
    for v in VIEWS {
        shard
            .batch_execute(v)
            .await
            .unwrap_or_else(|e| panic!("pgshard: {v}: {e:?}"));
        plain.batch_execute(v).await.unwrap();
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

async fn same_error(shard: &Client, plain: &Client, sql: &str) {
    let a = rows(shard, sql).await.map_err(|e| sqlstate_and_message(&e));
    let b = rows(plain, sql).await.map_err(|e| sqlstate_and_message(&e));
    match (&a, &b) {
        (Err(x), Err(y)) => assert_eq!(x.0, y.0, "{sql}: {x:?} vs {y:?}"),
        _ => panic!("{sql}: pgshard {a:?}, plain {b:?}"),
    }
}

/// Every query ends with an ORDER BY that fixes its rows' order.
const QUERIES: &[&str] = &[
    "SELECT * FROM vw_orders ORDER BY tenant, id",
    "SELECT * FROM vw_orders WHERE tenant = 3 ORDER BY id",
    "SELECT count(*), sum(amount) FROM vw_orders",
    "SELECT tenant, count(*) FROM vw_orders GROUP BY tenant ORDER BY 1",
    "SELECT v.id, v.note FROM vw_orders v WHERE v.tenant = 4 AND v.id > 100 ORDER BY 1",
    "SELECT x.a, x.b FROM vw_orders AS x(a, b) WHERE x.a = 2 ORDER BY 2",
    // Column aliases, and a view over that view.
    "SELECT t, order_no, total FROM vw_named WHERE t = 5 ORDER BY order_no",
    "SELECT * FROM vw_named ORDER BY order_no LIMIT 7",
    "SELECT * FROM vw_per_tenant ORDER BY t",
    "SELECT n FROM vw_per_tenant WHERE t = 2",
    // Joins: distributed and reference inside, a distributed table and a local view outside.
    "SELECT label, count(*) FROM vw_labelled GROUP BY label ORDER BY 1",
    "SELECT v.id, i.qty FROM vw_orders v JOIN vw_i i ON i.tenant = v.tenant AND i.order_id = v.id \
     WHERE v.tenant = 1 ORDER BY 1, 2",
    "SELECT v.tenant, sum(i.qty) FROM vw_orders v JOIN vw_i i ON i.tenant = v.tenant \
     AND i.order_id = v.id GROUP BY 1 ORDER BY 1",
    "SELECT l.region, count(*) FROM vw_orders v JOIN vw_local l ON l.tenant = v.tenant GROUP BY 1 ORDER BY 1",
    // CTEs, subqueries, set operations.
    "WITH x AS (SELECT * FROM vw_orders WHERE tenant = 7) SELECT count(*) FROM x",
    "SELECT count(*) FROM vw_o WHERE id IN (SELECT order_no FROM vw_named WHERE total > 100)",
    "SELECT tenant, (SELECT n FROM vw_per_tenant p WHERE p.t = 1) FROM vw_l ORDER BY 1",
    "SELECT tenant FROM vw_orders UNION SELECT tenant FROM vw_l ORDER BY 1",
    // A filter on a view column named like the distribution column but holding
    // other values.
    "SELECT * FROM vw_swap WHERE tenant = 3 ORDER BY 1, 2",
    "SELECT * FROM vw_cnt WHERE tenant = 2",
    // Not a view: was routed to tenant 2's shard (15 instead of 75).
    "SELECT * FROM (SELECT kind AS tenant, count(*) AS n FROM vw_o GROUP BY kind) s WHERE tenant = 2",
    // A CTE named like a view hides it.
    "WITH vw_orders AS (SELECT 1 AS tenant) SELECT * FROM vw_orders",
];

async fn views_answer_as_postgres(shard: &Client, plain: &Client) {
    for q in QUERIES {
        same(shard, plain, q).await;
    }
    // The extended protocol, with a parameter.
    let sql = "SELECT id, amount::text FROM vw_orders WHERE tenant = $1 ORDER BY id";
    let get = |rs: Vec<tokio_postgres::Row>| -> Vec<(i32, Option<String>)> {
        rs.iter().map(|r| (r.get(0), r.get(1))).collect()
    };
    let a = get(shard.query(sql, &[&6i32]).await.unwrap());
    let b = get(plain.query(sql, &[&6i32]).await.unwrap());
    assert_eq!(a, b);
    assert!(!a.is_empty());
}

/// Reads as parts of other statements: INSERT ... SELECT into distributed and local
/// tables, CREATE TABLE AS, COPY (query) TO.
async fn views_inside_other_statements(shard: &Client, plain: &Client) {
    for c in [shard, plain] {
        c.batch_execute("DROP TABLE IF EXISTS vw_ctas; CREATE TABLE vw_ctas AS SELECT * FROM vw_named WHERE t < 4")
            .await
            .unwrap();
        c.batch_execute("INSERT INTO vw_l SELECT t, 'v' || count(*) FROM vw_named GROUP BY t")
            .await
            .unwrap();
    }
    same(shard, plain, "SELECT * FROM vw_ctas ORDER BY order_no").await;
    same(shard, plain, "SELECT * FROM vw_l ORDER BY 1, 2").await;
    for c in [shard, plain] {
        c.batch_execute(
            "INSERT INTO vw_i SELECT tenant, id + 1000, 9 FROM vw_orders WHERE tenant = 2",
        )
        .await
        .unwrap();
    }
    same(shard, plain, "SELECT * FROM vw_i WHERE qty = 9 ORDER BY 2").await;
}

/// A view filtered on a tenant runs on one shard.
async fn tenant_filtered_view_routes(shard: &Client, _plain: &Client) {
    let plan = rows(
        shard,
        "EXPLAIN (COSTS OFF) SELECT * FROM vw_orders WHERE tenant = 3",
    )
    .await
    .unwrap();
    let text: Vec<String> = plan.into_iter().filter_map(|r| r[0].clone()).collect();
    let text = text.join("\n");
    assert!(text.contains("Task Count: 1"), "{text}");
}

/// The caller needs SELECT on the view (42501 as PostgreSQL); granted, it reads.
async fn select_privilege_on_the_view(shard: &Client, plain: &Client) {
    for c in [shard, plain] {
        c.batch_execute(
            "DROP ROLE IF EXISTS vw_reader; CREATE ROLE vw_reader; \
             GRANT SELECT ON vw_o TO vw_reader",
        )
        .await
        .unwrap();
    }
    for c in [shard, plain] {
        c.batch_execute("SET ROLE vw_reader").await.unwrap();
    }
    same_error(shard, plain, "SELECT * FROM vw_orders WHERE tenant = 1").await;
    same_error(shard, plain, "SELECT count(*) FROM vw_named").await;
    for c in [shard, plain] {
        c.batch_execute("RESET ROLE; GRANT SELECT ON vw_orders TO vw_reader; SET ROLE vw_reader")
            .await
            .unwrap();
    }
    same(
        shard,
        plain,
        "SELECT * FROM vw_orders WHERE tenant = 1 ORDER BY id",
    )
    .await;
    for c in [shard, plain] {
        c.batch_execute("RESET ROLE; REVOKE ALL ON vw_orders FROM vw_reader; REVOKE ALL ON vw_o FROM vw_reader; DROP ROLE vw_reader")
            .await
            .unwrap();
    }
}

/// CREATE OR REPLACE and DROP: the session sees them at once, another session after
/// the catalog task's poll; another session's new view is found.
async fn replaced_dropped_and_new_views(shard: &Client, plain: &Client) {
    let other = cluster().client().await;
    let q = "SELECT count(*) FROM vw_orders";
    same(shard, plain, q).await;
    same(&other, plain, q).await;
    for c in [shard, plain] {
        c.batch_execute(
            "CREATE OR REPLACE VIEW vw_orders AS SELECT tenant, id, amount, note FROM vw_o WHERE amount > 90",
        )
        .await
        .unwrap();
    }
    same(shard, plain, q).await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    same(&other, plain, q).await;
    // A new view, made by another session: found (after the poll).
    same_error(&other, plain, "SELECT count(*) FROM vw_late").await;
    for c in [shard, plain] {
        c.batch_execute(
            "CREATE VIEW vw_late AS SELECT tenant, sum(amount) AS s FROM vw_o GROUP BY tenant",
        )
        .await
        .unwrap();
    }
    same(shard, plain, "SELECT * FROM vw_late ORDER BY 1").await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    same(&other, plain, "SELECT * FROM vw_late ORDER BY 1").await;
    // Dropped: gone for both sessions.
    for c in [shard, plain] {
        c.batch_execute("DROP VIEW vw_late").await.unwrap();
    }
    same_error(shard, plain, "SELECT * FROM vw_late").await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    same_error(&other, plain, "SELECT * FROM vw_late").await;
    // A temporary view, in a block.
    shard
        .batch_execute("BEGIN; CREATE TEMP VIEW vw_t1 AS SELECT id FROM vw_o WHERE tenant = 9")
        .await
        .unwrap();
    plain
        .batch_execute("BEGIN; CREATE TEMP VIEW vw_t1 AS SELECT id FROM vw_o WHERE tenant = 9")
        .await
        .unwrap();
    same(shard, plain, "SELECT count(*), max(id) FROM vw_t1").await;
    shard.batch_execute("ROLLBACK").await.unwrap();
    plain.batch_execute("ROLLBACK").await.unwrap();
}

/// Writes through views over distributed tables and materialized views of them: 0A000.
async fn writes_and_materialized_views_refused(shard: &Client, _plain: &Client) {
    for sql in [
        "INSERT INTO vw_orders (tenant, id, amount) VALUES (1, 9999, 50)",
        "UPDATE vw_orders SET note = 'x' WHERE tenant = 1",
        "DELETE FROM vw_named WHERE t = 1",
        "CREATE MATERIALIZED VIEW vw_m AS SELECT * FROM vw_orders",
    ] {
        let e = rows(shard, sql).await.expect_err(sql);
        let (code, message) = sqlstate_and_message(&e);
        assert_eq!(code, "0A000", "{sql}: {message}");
    }
    // The session goes on.
    rows(shard, "SELECT count(*) FROM vw_orders").await.unwrap();
}

/// The parts share their tables: one after the other.
#[tokio::test(flavor = "multi_thread")]
async fn views() {
    let (shard, plain) = setup().await;
    views_answer_as_postgres(&shard, &plain).await;
    views_inside_other_statements(&shard, &plain).await;
    tenant_filtered_view_routes(&shard, &plain).await;
    select_privilege_on_the_view(&shard, &plain).await;
    replaced_dropped_and_new_views(&shard, &plain).await;
    writes_and_materialized_views_refused(&shard, &plain).await;
}
