//! INSERT ... SELECT of the shapes that cannot run shard by shard, compared with one
//! plain PostgreSQL holding the same tables (same rows, RETURNING rows as multisets, row
//! counts, SQLSTATE, contents after): through the coordinator with `ON CONFLICT DO
//! NOTHING | DO UPDATE` (`excluded.`, the target's alias, WHERE) and `RETURNING`, a key
//! given twice in the input (21000), into reference tables (every placement the same
//! rows) from distributed, reference and local tables, `WITH` on the INSERT or on its
//! SELECT, a failure on one shard leaving nothing, inside a rolled-back block, and the
//! extended protocol with parameters.

mod common;

use common::compare::{judge, run, show, Outcome, Verdict};
use common::{cluster, plain_postgres};
use tokio_postgres::Client;

const SETUP: &str = "
    DROP TABLE IF EXISTS is_t, is_s, is_r, is_l, is_r2, is_lt;
    CREATE TABLE is_t (k int NOT NULL, id int NOT NULL, v int, t text DEFAULT 'new',
                       PRIMARY KEY (k, id));
    CREATE TABLE is_s (k int NOT NULL, id int NOT NULL, v int, t text, PRIMARY KEY (k, id));
    CREATE TABLE is_r (k int NOT NULL, id int NOT NULL, v int, t text, PRIMARY KEY (k, id));
    CREATE TABLE is_r2 (k int NOT NULL, id int NOT NULL, v int, t text, PRIMARY KEY (k, id));
    CREATE TABLE is_l (k int NOT NULL, id int NOT NULL, v int, t text, PRIMARY KEY (k, id));
    CREATE TABLE is_lt (k int NOT NULL, id int NOT NULL, v int, t text, PRIMARY KEY (k, id));
    INSERT INTO is_t SELECT g % 7, g, g, 'old' FROM generate_series(1, 60, 2) g;
    INSERT INTO is_s SELECT g % 7, g, g * 10, 's' || g FROM generate_series(1, 80) g;
    INSERT INTO is_r SELECT g % 5, g, g * 100, 'r' || g FROM generate_series(1, 20) g;
    INSERT INTO is_r2 SELECT g % 5, g, g, 'r2' FROM generate_series(1, 30, 3) g;
    INSERT INTO is_l SELECT g % 4, g, -g, 'l' || g FROM generate_series(1, 25) g;
";

/// The text with the tables `is_*` named `<prefix>*` (each test its own tables: the
/// tests of this file run at the same time).
fn named(sql: &str, prefix: &str) -> String {
    sql.replace("is_", prefix)
}

/// Both servers with the same tables: `is_t` distributed by `k`, `is_s` by `id` (so
/// nothing is co-located), `is_r` and `is_r2` reference tables, `is_l` and `is_lt` local,
/// each named with `prefix` instead of `is_`.
async fn setup(prefix: &str) -> (Client, Client) {
    let shard = cluster().client().await;
    let plain = plain_postgres().client().await;
    shard.batch_execute(&named(SETUP, prefix)).await.unwrap();
    plain.batch_execute(&named(SETUP, prefix)).await.unwrap();
    for call in [
        "SELECT create_distributed_table('is_t', 'k')",
        "SELECT create_distributed_table('is_s', 'id', colocate_with => 'none')",
        "SELECT create_reference_table('is_r')",
        "SELECT create_reference_table('is_r2')",
    ] {
        shard.batch_execute(&named(call, prefix)).await.unwrap();
    }
    (shard, plain)
}

/// `sql` on both: the same answer (rows as multisets, counts, SQLSTATE), then the same
/// contents of `tables`. PostgreSQL must answer it, or fail with the SQLSTATE of a
/// leading `/* CODE */`.
async fn same(shard: &Client, plain: &Client, sql: &str, tables: &[&str]) {
    let prefix = tables.first().map_or("is_", |t| &t[..3]);
    let sql = &named(sql, prefix);
    let (got, want) = (run(shard, sql).await, run(plain, sql).await);
    let expected = sql
        .strip_prefix("/* ")
        .and_then(|r| r.split_once(" */"))
        .map(|(code, _)| code);
    match (&want, expected) {
        (Outcome::Error { code, .. }, Some(e)) => assert_eq!(code, e, "{sql}"),
        (Outcome::Rows { .. }, None) => {}
        _ => panic!("{sql}: PostgreSQL answered {}", show(&want)),
    }
    assert_eq!(
        judge(&got, &want, false),
        Verdict::Same,
        "{sql}\n  pgshard: {}\n  plain:   {}",
        show(&got),
        show(&want)
    );
    for t in tables {
        let q = format!("SELECT * FROM {}", named(t, prefix));
        let (g, w) = (run(shard, &q).await, run(plain, &q).await);
        assert_eq!(
            judge(&g, &w, false),
            Verdict::Same,
            "after {sql}: {t}\n  pgshard: {}\n  plain:   {}",
            show(&g),
            show(&w)
        );
    }
}

/// The rows of the reference table `table` on every worker's placement, sorted.
async fn placements(table: &str) -> Vec<Vec<String>> {
    let cl = cluster();
    let mut out = Vec::new();
    for port in &cl.worker_ports {
        let w = cl.direct(*port).await;
        let names: Vec<String> = w
            .query(
                "SELECT relname::text FROM pg_class WHERE relkind = 'r' \
                 AND relname ~ ('^' || $1 || '_[0-9]+$') AND relnamespace = 'public'::regnamespace",
                &[&table],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        for n in names {
            let rows = w
                .query(
                    &format!("SELECT format('%s|%s|%s|%s', k, id, v, t) FROM {n} ORDER BY k, id"),
                    &[],
                )
                .await
                .unwrap();
            out.push(rows.iter().map(|r| r.get(0)).collect());
        }
    }
    out
}

async fn placements_agree(table: &str) {
    let p = placements(table).await;
    assert_eq!(p.len(), cluster().worker_ports.len(), "{table}: placements");
    assert!(
        p.iter().all(|x| *x == p[0]),
        "{table}: placements differ: {p:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_conflict_and_returning_through_the_coordinator() {
    let (shard, plain) = setup("ia_").await;
    let t = &["ia_t"];
    for sql in [
        // From a table distributed by another column: through the coordinator.
        "INSERT INTO is_t AS w (k, id, v, t) SELECT k, id, v, t FROM is_s WHERE id <= 20 \
         ON CONFLICT DO NOTHING",
        "INSERT INTO is_t AS w (k, id, v) SELECT k, id, v + 1 FROM is_s WHERE id <= 40 \
         ON CONFLICT (k, id) DO NOTHING RETURNING w.k, w.id, w.v, w.t",
        "INSERT INTO is_t AS w (k, id, v, t) SELECT k, id, v, t FROM is_s WHERE id <= 50 \
         ON CONFLICT (k, id) DO UPDATE SET v = excluded.v + w.v, t = excluded.t \
         WHERE w.id % 3 = 0 RETURNING w.*",
        "INSERT INTO is_t (k, id, v) SELECT k, id, v FROM is_s WHERE id > 70 \
         ON CONFLICT (k, id) DO UPDATE SET v = is_t.v * 2 RETURNING is_t.k, is_t.v, is_t.t",
        // RETURNING alone (rows no COPY could return), and over no rows.
        "INSERT INTO is_t (k, id, v) SELECT k, id + 1000, v FROM is_s WHERE id < 5 \
         RETURNING k, id, v * 2 AS w, t",
        "INSERT INTO is_t (k, id, v) SELECT k, id, v FROM is_s WHERE id < 0 RETURNING k",
        "INSERT INTO is_t (k, id, v) SELECT k, id, v FROM is_s WHERE id < 0 \
         ON CONFLICT (k, id) DO UPDATE SET v = 0 RETURNING k",
        // A join, an aggregate: rows through pgshard's planner.
        "INSERT INTO is_t AS w (k, id, v) SELECT s.k, s.id, r.v FROM is_s s JOIN is_r r \
         ON r.id = s.id ON CONFLICT (k, id) DO UPDATE SET v = excluded.v RETURNING w.k, w.id",
        "INSERT INTO is_t (k, id, v) SELECT k, 500, sum(v) FROM is_s GROUP BY k \
         ON CONFLICT (k, id) DO UPDATE SET v = excluded.v",
        // From a local table and from generate_series: the whole statement on the shell.
        "INSERT INTO is_t AS w SELECT k, id, v, t FROM is_l ON CONFLICT (k, id) \
         DO UPDATE SET t = w.t || excluded.t RETURNING *",
        // A key given twice in the input: 21000, nothing written.
        "/* 21000 */ INSERT INTO is_t (k, id, v) SELECT k % 2, 7, v FROM is_s \
         ON CONFLICT (k, id) DO UPDATE SET v = excluded.v",
        "/* 21000 */ INSERT INTO is_t (k, id, v) SELECT 1, 9, v FROM is_l \
         ON CONFLICT (k, id) DO UPDATE SET v = excluded.v",
        // ... but DO NOTHING keeps the first one.
        "INSERT INTO is_t (k, id, v) SELECT 3, 9000, 1 FROM is_s ON CONFLICT DO NOTHING",
        // A failure on one shard after others were written: nothing stays.
        "/* 22012 */ INSERT INTO is_t AS w (k, id, v) SELECT k, id, v FROM is_s \
         ON CONFLICT (k, id) DO UPDATE SET v = 100 / (w.k - 4)",
        // NOT NULL checked on the shell: the user's table named.
        "/* 23502 */ INSERT INTO is_t (k, id, v) SELECT NULL::int, id, v FROM is_s ON CONFLICT DO NOTHING",
    ] {
        same(&shard, &plain, sql, t).await;
    }
    // Inside a block rolled back: the block's reads see the rows, then nothing stays.
    for sql in [
        "BEGIN",
        "INSERT INTO is_t AS w (k, id, v) SELECT k, id, v FROM is_s \
         ON CONFLICT (k, id) DO UPDATE SET v = -w.v RETURNING w.k, w.v",
        "SELECT count(*), sum(v) FROM is_t",
        "ROLLBACK",
    ] {
        same(&shard, &plain, sql, t).await;
    }
    // ON CONSTRAINT (the shards' constraints carry their shard id) and a DO UPDATE of
    // the distribution column stay refused.
    for sql in [
        "INSERT INTO is_t SELECT * FROM is_s ON CONFLICT ON CONSTRAINT is_t_pkey DO NOTHING",
        "INSERT INTO is_t SELECT * FROM is_s ON CONFLICT (k, id) DO UPDATE SET k = 1",
    ] {
        let sql = &named(sql, "ia_");
        let e = shard.simple_query(sql).await.expect_err(sql);
        assert_eq!(e.code().unwrap().code(), "0A000", "{sql}: {e:?}");
    }
    same(&shard, &plain, "SELECT 1", t).await;
    // Rows held before they are sent are bounded by citus.max_intermediate_result_size.
    shard
        .batch_execute("SET citus.max_intermediate_result_size TO 1")
        .await
        .unwrap();
    let sql = "INSERT INTO ia_t AS w SELECT l.k, l.id * 1000 + g, g, repeat('x', 100) \
               FROM generate_series(1, 100) g, ia_l l ON CONFLICT (k, id) DO UPDATE SET v = 0";
    let e = shard.simple_query(sql).await.expect_err(sql);
    assert_eq!(e.code().unwrap().code(), "54000", "{e:?}");
    shard
        .batch_execute("RESET citus.max_intermediate_result_size")
        .await
        .unwrap();
    same(&shard, &plain, "SELECT 1", t).await;
    // The shell on the coordinator node stays empty.
    let coord = cluster().direct(cluster().coordinator_port).await;
    let shell: i64 = coord
        .query_one("SELECT count(*) FROM ONLY ia_t", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(shell, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn into_reference_tables() {
    let (shard, plain) = setup("ib_").await;
    for sql in [
        // From a distributed, a reference and a local table.
        "INSERT INTO is_r2 AS w SELECT k % 5, id, v, t FROM is_s WHERE id <= 12 \
         ON CONFLICT (k, id) DO UPDATE SET v = excluded.v + w.v RETURNING w.k, w.id, w.v",
        "INSERT INTO is_r2 SELECT k, id, v, t FROM is_r ON CONFLICT DO NOTHING RETURNING *",
        "INSERT INTO is_r2 (k, id, v) SELECT k, id + 100, v FROM is_l",
        "INSERT INTO is_r2 (k, id) SELECT k, id + 200 FROM is_l WHERE id < 4 RETURNING t",
        "INSERT INTO is_r2 AS w SELECT k, id, v, t FROM is_l ON CONFLICT (k, id) \
         DO UPDATE SET t = excluded.t WHERE w.v IS NOT NULL",
        // A key twice: 21000; a duplicate without ON CONFLICT: 23505.
        "/* 21000 */ INSERT INTO is_r2 (k, id, v) SELECT 1, 1, v FROM is_s ON CONFLICT (k, id) \
         DO UPDATE SET v = excluded.v",
        "/* 23505 */ INSERT INTO is_r2 SELECT * FROM is_r",
    ] {
        same(&shard, &plain, sql, &["ib_r2"]).await;
        placements_agree("ib_r2").await;
    }
    // From reference tables into a distributed one.
    for sql in [
        "INSERT INTO is_t AS w SELECT k, id, v, t FROM is_r ON CONFLICT (k, id) \
         DO UPDATE SET v = excluded.v RETURNING w.k, w.id",
        "INSERT INTO is_t SELECT r.k, r.id + 300, r2.v, r.t FROM is_r r JOIN is_r2 r2 USING (k, id)",
    ] {
        same(&shard, &plain, sql, &["ib_t"]).await;
    }
    // A function each placement would compute differently is refused.
    let sql = "INSERT INTO is_r2 SELECT k, id, v, t FROM is_r ON CONFLICT (k, id) \
               DO UPDATE SET v = (random() * 0)::int";
    let e = shard.simple_query(&named(sql, "ib_")).await.expect_err(sql);
    assert_eq!(e.code().unwrap().code(), "0A000", "{e:?}");
    placements_agree("ib_r2").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_on_the_insert_or_its_select() {
    let (shard, plain) = setup("ic_").await;
    for (sql, table) in [
        (
            "WITH x AS (SELECT k, id, v FROM is_s WHERE id < 30) \
             INSERT INTO is_t AS w (k, id, v) SELECT k, id, v FROM x \
             ON CONFLICT (k, id) DO UPDATE SET v = excluded.v RETURNING w.k, w.v",
            "is_t",
        ),
        (
            "INSERT INTO is_t (k, id, v) WITH x AS (SELECT k, max(v) AS m FROM is_s GROUP BY k) \
             SELECT k, 800, m FROM x ON CONFLICT DO NOTHING",
            "is_t",
        ),
        (
            "WITH x AS (SELECT * FROM is_l), y AS (SELECT k, id FROM is_s WHERE id < 10) \
             INSERT INTO is_t SELECT DISTINCT ON (x.k, x.id) x.k, x.id + 900, x.v, x.t FROM x JOIN y USING (k)",
            "is_t",
        ),
        (
            "WITH x AS (SELECT k, id, v, t FROM is_s WHERE id BETWEEN 30 AND 40) \
             INSERT INTO is_r2 SELECT k % 5, id, v, t FROM x ON CONFLICT DO NOTHING RETURNING k, id",
            "is_r2",
        ),
        (
            "WITH x AS (SELECT k, id, v, t FROM is_s WHERE id > 60) \
             INSERT INTO is_lt SELECT * FROM x ON CONFLICT DO NOTHING RETURNING id",
            "is_lt",
        ),
        (
            "INSERT INTO is_lt WITH x AS (SELECT * FROM is_r) SELECT k, id + 500, v, t FROM x",
            "is_lt",
        ),
    ] {
        same(&shard, &plain, sql, &[&named(table, "ic_")]).await;
    }
    placements_agree("ic_r2").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extended_protocol_with_parameters() {
    let (shard, plain) = setup("id_").await;
    let sql = &named(
        "INSERT INTO is_t AS w (k, id, v) SELECT k, id, v FROM is_s WHERE v > $1 \
               ON CONFLICT (k, id) DO UPDATE SET v = excluded.v + 1 RETURNING w.k, w.id, w.v",
        "id_",
    );
    for limit in [700i32, 500, 2000] {
        let mut got: Vec<(i32, i32, Option<i32>)> = shard
            .query(sql, &[&limit])
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect();
        let mut want: Vec<(i32, i32, Option<i32>)> = plain
            .query(sql, &[&limit])
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect();
        got.sort();
        want.sort();
        assert_eq!(got, want, "v > {limit}");
    }
    // A key twice, through Bind: 21000 on both.
    let dup = &named(
        "INSERT INTO is_t (k, id, v) SELECT $1::int, 1, v FROM is_s \
         ON CONFLICT (k, id) DO UPDATE SET v = excluded.v",
        "id_",
    );
    let a = shard.execute(dup, &[&2i32]).await.expect_err("pgshard");
    let b = plain.execute(dup, &[&2i32]).await.expect_err("plain");
    assert_eq!(a.code(), b.code());
    assert_eq!(b.code().unwrap().code(), "21000");
    same(&shard, &plain, "SELECT 1", &["id_t"]).await;
}
