//! The statements real applications send, compared with one plain PostgreSQL holding
//! the same objects (same rows and row counts, same SQLSTATE): `UPDATE ... FROM` /
//! `DELETE ... USING` between co-located distributed tables and with reference tables,
//! `INSERT ... SELECT ... ON CONFLICT` / `RETURNING` between co-located tables,
//! `CREATE TABLE AS` / `SELECT INTO` from distributed tables, SQL-level `PREPARE` /
//! `EXECUTE` / `DEALLOCATE`, `CREATE TABLE ... (LIKE dist)`. Shapes pgshard still
//! refuses answer 0A000.

mod common;

use common::{cluster, compare, plain_postgres};
use tokio_postgres::Client;

type Rows = Vec<Vec<Option<String>>>;

/// What a statement answered: its rows (sorted unless `ordered`) and row counts, or
/// its SQLSTATE.
#[derive(Debug, PartialEq)]
enum Outcome {
    Done { rows: Rows, counts: Vec<u64> },
    Failed(String),
}

async fn outcome(c: &Client, sql: &str, ordered: bool) -> Outcome {
    let answer = compare::run(c, sql).await;
    match if ordered { answer } else { answer.sorted() } {
        compare::Outcome::Rows { rows, counts } => Outcome::Done { rows, counts },
        compare::Outcome::Error { code, .. } => Outcome::Failed(code),
    }
}

/// Runs `sql` on both and asserts the same outcome; returns pgshard's.
async fn same(shard: &Client, plain: &Client, sql: &str) -> Outcome {
    let a = outcome(shard, sql, false).await;
    let b = outcome(plain, sql, false).await;
    assert_eq!(a, b, "{sql}");
    a
}

/// Runs `sql` on both; it must succeed the same way.
async fn same_ok(shard: &Client, plain: &Client, sql: &str) {
    let a = same(shard, plain, sql).await;
    assert!(matches!(a, Outcome::Done { .. }), "{sql}: {a:?}");
}

/// Runs `sql` through pgshard: refused with 0A000.
async fn refused(shard: &Client, sql: &str) {
    let e = shard.simple_query(sql).await.expect_err(sql);
    let d = e.as_db_error().unwrap_or_else(|| panic!("{sql}: {e:?}"));
    assert_eq!(d.code().code(), "0A000", "{sql}: {}", d.message());
}

/// Both servers with the same tables and rows: `dist` hash-distributed (co-located
/// with the first), `reference` reference tables on the cluster.
async fn setup(setup_sql: &str, dist: &[(&str, &str)], reference: &[&str]) -> (Client, Client) {
    let shard = cluster().client().await;
    let plain = plain_postgres().client().await;
    shard.batch_execute(setup_sql).await.unwrap();
    plain.batch_execute(setup_sql).await.unwrap();
    for (i, (t, col)) in dist.iter().enumerate() {
        let with = if i == 0 {
            "'default'".to_string()
        } else {
            format!("'{}'", dist[0].0)
        };
        shard
            .batch_execute(&format!(
                "SELECT create_distributed_table('{t}', '{col}', colocate_with => {with})"
            ))
            .await
            .unwrap();
    }
    for t in reference {
        shard
            .batch_execute(&format!("SELECT create_reference_table('{t}')"))
            .await
            .unwrap();
    }
    (shard, plain)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_from_and_delete_using() {
    let (shard, plain) = setup(
        "DROP TABLE IF EXISTS uf_t, uf_u, uf_r, uf_other, uf_local;
         CREATE TABLE uf_t (k int PRIMARY KEY, v int, note text);
         CREATE TABLE uf_u (k int PRIMARY KEY, w int);
         CREATE TABLE uf_r (id int PRIMARY KEY, name text);
         CREATE TABLE uf_other (k int PRIMARY KEY, w int);
         CREATE TABLE uf_local (k int, w int);
         INSERT INTO uf_t SELECT g, g % 7, 'n' || g FROM generate_series(1, 200) g;
         INSERT INTO uf_u SELECT g, g * 10 FROM generate_series(1, 200, 3) g;
         INSERT INTO uf_r VALUES (0, 'zero'), (1, 'one'), (2, 'two');
         INSERT INTO uf_other SELECT g, g FROM generate_series(1, 10) g;
         INSERT INTO uf_local VALUES (1, 1);",
        &[("uf_t", "k"), ("uf_u", "k")],
        &["uf_r"],
    )
    .await;
    // uf_other: distributed but not co-located (another shard count).
    for sql in [
        "SET citus.shard_count = 5",
        "SELECT create_distributed_table('uf_other', 'k', colocate_with => 'none')",
        "RESET citus.shard_count",
    ] {
        shard.batch_execute(sql).await.unwrap();
    }
    let check = "SELECT k, v, note FROM uf_t";
    for sql in [
        "UPDATE uf_t SET v = uf_u.w FROM uf_u WHERE uf_t.k = uf_u.k",
        "UPDATE uf_t t SET v = u.w + t.v FROM uf_u u WHERE u.k = t.k AND u.w > 1000 RETURNING t.k, t.v, u.w",
        "UPDATE uf_t SET v = -1 FROM uf_u WHERE uf_t.k = uf_u.k AND uf_u.k = 4 RETURNING *",
        "UPDATE uf_t SET note = r.name FROM uf_r r WHERE uf_t.v = r.id RETURNING uf_t.k, r.name",
        "UPDATE uf_t SET note = r.name || u.w FROM uf_u u JOIN uf_r r ON r.id = u.w % 3 WHERE uf_t.k = u.k",
        "UPDATE uf_t SET v = 0 FROM uf_r WHERE uf_t.k = 7 AND uf_r.id = 1",
        "DELETE FROM uf_t USING uf_u WHERE uf_t.k = uf_u.k AND uf_u.w BETWEEN 500 AND 900 RETURNING uf_t.*",
        "DELETE FROM uf_t t USING uf_r r WHERE t.v = r.id AND t.k > 150",
        "DELETE FROM uf_t USING uf_u WHERE uf_t.k = uf_u.k AND uf_u.k = 10",
        "UPDATE uf_t SET v = u.w FROM uf_u u WHERE uf_t.k = u.k AND u.w = 'x'",
    ] {
        same(&shard, &plain, sql).await;
        same_ok(&shard, &plain, check).await;
    }
    // Inside a block: the writes are part of it.
    for sql in [
        "BEGIN",
        "UPDATE uf_t SET v = 100 FROM uf_u WHERE uf_t.k = uf_u.k",
        "ROLLBACK",
    ] {
        same(&shard, &plain, sql).await;
    }
    same_ok(&shard, &plain, check).await;
    for sql in [
        // Not joined on the distribution columns, not co-located, a local table, a
        // subquery in FROM, a reference target: planned in parts, the other tables'
        // rows shipped to the target's nodes (more in tests/modify_recursive.rs).
        "UPDATE uf_t SET v = 1 FROM uf_u WHERE uf_t.v = uf_u.k",
        "UPDATE uf_t SET v = 2 FROM uf_other o WHERE uf_t.k = o.k",
        "DELETE FROM uf_t USING uf_local l WHERE uf_t.k = l.k",
        "DELETE FROM uf_t USING (SELECT * FROM uf_u) s WHERE uf_t.k = s.k AND s.w > 1500",
        "UPDATE uf_r SET name = 'x' FROM uf_t WHERE uf_r.id = uf_t.v",
    ] {
        same(&shard, &plain, sql).await;
        same_ok(&shard, &plain, check).await;
        same_ok(&shard, &plain, "SELECT id, name FROM uf_r").await;
    }
    // The distribution column set: refused.
    refused(
        &shard,
        "UPDATE uf_t SET k = u.k FROM uf_u u WHERE uf_t.k = u.k",
    )
    .await;
    same_ok(&shard, &plain, check).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insert_select_on_conflict_and_returning() {
    let (shard, plain) = setup(
        "DROP TABLE IF EXISTS ic_t, ic_s;
         CREATE TABLE ic_t (k int PRIMARY KEY, v int, c int DEFAULT 0);
         CREATE TABLE ic_s (k int PRIMARY KEY, w int);
         INSERT INTO ic_t (k, v) SELECT g, g FROM generate_series(1, 100, 2) g;
         INSERT INTO ic_s SELECT g, g * 10 FROM generate_series(1, 150) g;",
        &[("ic_t", "k"), ("ic_s", "k")],
        &[],
    )
    .await;
    let check = "SELECT k, v, c FROM ic_t";
    for sql in [
        "INSERT INTO ic_t (k, v) SELECT k, w FROM ic_s WHERE k <= 20 ON CONFLICT DO NOTHING",
        "INSERT INTO ic_t (k, v) SELECT k, w FROM ic_s WHERE k <= 40 ON CONFLICT (k) DO NOTHING RETURNING k, v",
        "INSERT INTO ic_t AS t (k, v) SELECT k, w FROM ic_s WHERE k <= 60 \
         ON CONFLICT (k) DO UPDATE SET v = t.v + excluded.v, c = t.c + 1 WHERE t.k % 3 = 0",
        "INSERT INTO ic_t (k, v) SELECT k, w FROM ic_s WHERE k > 140 RETURNING *",
        "INSERT INTO ic_t (k, v) SELECT k, w FROM ic_s WHERE k <= 80 \
         ON CONFLICT (k) DO UPDATE SET c = ic_t.c + 10 RETURNING ic_t.k, ic_t.c",
        "INSERT INTO ic_t (k, v) SELECT k, w FROM ic_s WHERE k < 0 RETURNING k",
        // A constraint violated on a shard: PostgreSQL's SQLSTATE.
        "INSERT INTO ic_t (k, v) SELECT k, NULL FROM ic_s WHERE k > 145 ON CONFLICT (k) DO UPDATE SET v = 1 / 0",
    ] {
        let _ = same(&shard, &plain, sql).await;
        same_ok(&shard, &plain, check).await;
    }
    // ON CONSTRAINT (the shards' constraints carry their shard id) and a DO UPDATE of
    // the distribution column stay refused.
    refused(
        &shard,
        "INSERT INTO ic_t (k, v) SELECT k, w FROM ic_s ON CONFLICT ON CONSTRAINT ic_t_pkey DO NOTHING",
    )
    .await;
    refused(
        &shard,
        "INSERT INTO ic_t (k, v) SELECT k, w FROM ic_s ON CONFLICT (k) DO UPDATE SET k = excluded.k + 1000",
    )
    .await;
    same_ok(&shard, &plain, check).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_table_as_and_select_into() {
    let (shard, plain) = setup(
        "DROP TABLE IF EXISTS ca_t, ca_r, ca_x1, ca_x2, ca_x3, ca_x4, ca_x5, ca_x6;
         CREATE TABLE ca_t (k int PRIMARY KEY, v numeric(8,2), s varchar(10));
         CREATE TABLE ca_r (id int PRIMARY KEY, name text);
         INSERT INTO ca_t SELECT g, g / 3.0, 's' || (g % 4) FROM generate_series(1, 300) g;
         INSERT INTO ca_r VALUES (0, 'zero'), (1, 'one'), (2, 'two'), (3, 'three');",
        &[("ca_t", "k")],
        &["ca_r"],
    )
    .await;
    for sql in [
        "CREATE TABLE ca_x1 AS SELECT * FROM ca_t WHERE k > 250",
        "SELECT k, v, s FROM ca_x1",
        "SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a \
         WHERE a.attrelid = 'ca_x1'::regclass AND a.attnum > 0",
        "CREATE TABLE ca_x2 (grp, n, total) AS SELECT s, count(*), sum(v) FROM ca_t GROUP BY s",
        "SELECT * FROM ca_x2",
        "SELECT k, v INTO ca_x3 FROM ca_t WHERE k = 7",
        "SELECT * FROM ca_x3",
        "SELECT t.k, r.name INTO ca_x4 FROM ca_t t JOIN ca_r r ON r.id = t.k % 4 WHERE t.k < 20",
        "SELECT * FROM ca_x4",
        "CREATE TABLE ca_x5 AS SELECT * FROM ca_t WITH NO DATA",
        "SELECT count(*) FROM ca_x5",
        "CREATE TABLE IF NOT EXISTS ca_x5 AS SELECT * FROM ca_t",
        "SELECT count(*) FROM ca_x5",
        "CREATE TABLE ca_x1 AS SELECT * FROM ca_t",
        "CREATE TABLE ca_x6 AS SELECT k, v / 0 FROM ca_t",
        "SELECT count(*) FROM pg_class WHERE relname = 'ca_x6'",
        "CREATE TABLE ca_x6 AS SELECT k FROM ca_t WHERE k < 0",
        "SELECT count(*) FROM ca_x6",
    ] {
        let _ = same(&shard, &plain, sql).await;
    }
    // Inside a block the new table is part of it.
    for sql in [
        "BEGIN",
        "CREATE TEMP TABLE ca_tmp AS SELECT k FROM ca_t WHERE k <= 10",
        "SELECT sum(k) FROM ca_tmp",
        "ROLLBACK",
    ] {
        let _ = same(&shard, &plain, sql).await;
    }
    refused(
        &shard,
        "CREATE MATERIALIZED VIEW ca_mv AS SELECT * FROM ca_t",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_table_like_a_distributed_table() {
    let (shard, plain) = setup(
        "DROP TABLE IF EXISTS lk_t, lk_copy, lk_cols;
         CREATE TABLE lk_t (k int PRIMARY KEY, v text NOT NULL DEFAULT 'x' CHECK (v <> ''), n numeric(6,2));
         CREATE INDEX lk_t_v ON lk_t (v);
         COMMENT ON COLUMN lk_t.n IS 'amount';",
        &[("lk_t", "k")],
        &[],
    )
    .await;
    for sql in [
        "CREATE TABLE lk_copy (LIKE lk_t INCLUDING ALL)",
        "CREATE TABLE lk_cols (extra int, LIKE lk_t)",
        "SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull, \
                pg_get_expr(d.adbin, d.adrelid), col_description(c.oid, a.attnum) \
         FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 \
         LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum \
         WHERE c.relname IN ('lk_copy', 'lk_cols')",
        "SELECT conrelid::regclass::text, contype, pg_get_constraintdef(oid) FROM pg_constraint \
         WHERE conrelid IN ('lk_copy'::regclass, 'lk_cols'::regclass)",
        "SELECT indexrelid::regclass::text, pg_get_indexdef(indexrelid) FROM pg_index \
         WHERE indrelid IN ('lk_copy'::regclass, 'lk_cols'::regclass)",
        "SELECT count(*) FROM pg_inherits WHERE inhparent IN ('lk_copy'::regclass, 'lk_cols'::regclass)",
        "INSERT INTO lk_copy (k, n) VALUES (1, 2.5)",
        "SELECT * FROM lk_copy",
    ] {
        same_ok(&shard, &plain, sql).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_prepare_execute_deallocate() {
    let (shard, plain) = setup(
        "DROP TABLE IF EXISTS pe_t, pe_local;
         CREATE TABLE pe_t (k int PRIMARY KEY, v text, n numeric(6,1));
         CREATE TABLE pe_local (a int);
         INSERT INTO pe_t SELECT g, 'v' || g, g / 4.0 FROM generate_series(1, 100) g;
         INSERT INTO pe_local VALUES (1), (2);",
        &[("pe_t", "k")],
        &[],
    )
    .await;
    for sql in [
        "PREPARE pe_one(int) AS SELECT k, v, n FROM pe_t WHERE k = $1",
        "EXECUTE pe_one(5)",
        "EXECUTE pe_one(500)",
        "EXECUTE pe_one('7')",
        "EXECUTE pe_one('x')",
        "EXECUTE pe_one(1, 2)",
        "PREPARE pe_one AS SELECT 1",
        "PREPARE pe_agg(numeric, text) AS SELECT count(*), sum(n) FROM pe_t WHERE n > $1 AND v <> $2",
        "EXECUTE pe_agg(10.26, 'v50')",
        "EXECUTE pe_agg(-1, 'v1')",
        "PREPARE pe_upd(int, text) AS UPDATE pe_t SET v = $2 WHERE k = $1 RETURNING k, v",
        "EXECUTE pe_upd(3, 'three')",
        "PREPARE pe_all(int) AS DELETE FROM pe_t WHERE k > $1",
        "EXECUTE pe_all(95)",
        "PREPARE pe_ins AS INSERT INTO pe_t VALUES ($1, $2, $3)",
        "EXECUTE pe_ins(200, 'two hundred', 2.25)",
        "EXECUTE pe_ins(200, 'again', 1)",
        "SELECT k, v, n FROM pe_t",
        "PREPARE pe_loc(int) AS SELECT a FROM pe_local WHERE a = $1",
        "EXECUTE pe_loc(2)",
        "DEALLOCATE pe_one",
        "EXECUTE pe_one(5)",
        "DEALLOCATE pe_one",
        "DEALLOCATE ALL",
        "EXECUTE pe_agg(1, 'x')",
        "EXECUTE pe_loc(1)",
        "PREPARE pe_one(int) AS SELECT v FROM pe_t WHERE k = $1",
        "EXECUTE pe_one(9)",
        "DEALLOCATE pe_one",
    ] {
        let _ = same(&shard, &plain, sql).await;
    }
}
