//! Modifying CTEs (`WITH x AS (DELETE ... RETURNING ...) SELECT ...`) answer exactly as one
//! PostgreSQL does, and leave the same table contents: DELETE / UPDATE / INSERT in CTEs
//! over distributed, reference and local tables, RETURNING referenced once, twice or not
//! at all, column aliases, two modifying CTEs, a modifying CTE feeding the statement's own
//! INSERT / UPDATE (with RETURNING), statements on one shard group sent whole;
//! PostgreSQL's snapshot (the statement and its other
//! CTEs read the tables as they were before any modification); atomicity (a failure
//! after the modification, `1/0` in the statement, rolls it back, outside a block, in a
//! query string, in a client's block); the extended protocol with parameters, prepared
//! once and run twice; and the refusal (0A000, nothing written) of a local table written
//! beside a distributed one. Every statement runs on the pgshard cluster and on a plain
//! PostgreSQL holding the same rows; after each, the written tables are compared.

mod common;

use common::compare::{judge, run, show, Outcome, Verdict};
use common::{assert_no_prepared_xacts, cluster, plain_postgres};
use tokio_postgres::Client;

const TABLES: &[&str] = &["mc_d", "mc_d2", "mc_e", "mc_r", "mc_l"];

const DATA: &str = "
INSERT INTO mc_d SELECT i % 10, i, i % 20, 't' || (i % 3) FROM generate_series(1, 100) i;
INSERT INTO mc_d2 SELECT i % 10, i, i % 7, 'u' FROM generate_series(1, 50) i;
INSERT INTO mc_e SELECT i % 10, i, i % 5, 'e' FROM generate_series(1, 60) i;
INSERT INTO mc_r VALUES (1, 1, 1, 'a'), (2, 2, 2, 'b'), (3, 3, 3, 'c'), (4, 4, 4, 'd'),
  (5, 5, 5, 'e'), (6, 6, 6, 'f');
INSERT INTO mc_l SELECT i % 10, i, i, 'l' FROM generate_series(1, 20) i;
";

/// mc_d and mc_d2 co-located by k, mc_e by id, mc_r a reference table, mc_l local.
async fn setup() -> (Client, Client) {
    let shard = cluster().client().await;
    let plain = plain_postgres().client().await;
    for (c, distributed) in [(&shard, true), (&plain, false)] {
        for t in TABLES {
            c.batch_execute(&format!(
                "DROP TABLE IF EXISTS {t}; CREATE TABLE {t} (k int NOT NULL, id int NOT NULL, \
                 v int, t text, PRIMARY KEY (k, id))"
            ))
            .await
            .unwrap();
        }
        if distributed {
            for call in [
                "SELECT create_distributed_table('mc_d', 'k')",
                "SELECT create_distributed_table('mc_d2', 'k')",
                "SELECT create_distributed_table('mc_e', 'id')",
                "SELECT create_reference_table('mc_r')",
            ] {
                c.batch_execute(call).await.unwrap();
            }
        }
    }
    reset(&shard, &plain).await;
    (shard, plain)
}

/// The same rows again on both sides.
async fn reset(shard: &Client, plain: &Client) {
    for c in [shard, plain] {
        for t in TABLES {
            c.batch_execute(&format!("TRUNCATE {t}")).await.unwrap();
        }
        c.batch_execute(DATA).await.unwrap();
    }
}

async fn contents(c: &Client, table: &str) -> Outcome {
    run(
        c,
        &format!("SELECT k, id, v, t FROM {table} ORDER BY k, id"),
    )
    .await
}

/// Every table the same on both sides.
async fn same_tables(shard: &Client, plain: &Client, after: &str) {
    for t in TABLES {
        let (a, b) = (contents(shard, t).await, contents(plain, t).await);
        assert_eq!(
            a,
            b,
            "{t} after {after}:\n  pgshard: {}\n  plain:   {}",
            show(&a),
            show(&b)
        );
    }
}

/// `sql` answers the same on both sides (not refused), and leaves the same tables.
async fn same(shard: &Client, plain: &Client, sql: &str) {
    let (a, b) = (run(shard, sql).await, run(plain, sql).await);
    assert_eq!(
        judge(&a, &b, false),
        Verdict::Same,
        "{sql}\n  pgshard: {}\n  plain:   {}",
        show(&a),
        show(&b)
    );
    same_tables(shard, plain, sql).await;
}

const STATEMENTS: &[&str] = &[
    // DELETE / UPDATE / INSERT with RETURNING, distributed and reference targets.
    "WITH x AS (DELETE FROM mc_d WHERE v > 15 RETURNING *) SELECT count(*), sum(v) FROM x",
    "WITH u AS (UPDATE mc_d SET v = v + 1 WHERE k < 3 RETURNING k, id, v) SELECT * FROM u",
    "WITH i AS (INSERT INTO mc_d SELECT k, id + 2000, v, t FROM mc_d2 RETURNING k, id) \
     SELECT count(*), max(id) FROM i",
    "WITH i AS (INSERT INTO mc_d VALUES (1, 5000, 1, 'x'), (2, 5001, NULL, NULL) RETURNING *) \
     SELECT * FROM i",
    "WITH u AS (DELETE FROM mc_r WHERE k < 3 RETURNING id, t) SELECT * FROM u",
    "WITH u AS (DELETE FROM mc_e WHERE v = 1 RETURNING *) SELECT count(*) FROM u JOIN mc_d USING (k)",
    // Referenced twice, column aliases, one shard.
    "WITH u AS (UPDATE mc_d SET v = v + 1 WHERE k < 3 RETURNING k, id, v) \
     SELECT (SELECT count(*) FROM u), (SELECT sum(v) FROM u)",
    "WITH x(a, b) AS (DELETE FROM mc_d WHERE k = 9 RETURNING k, id) SELECT sum(a), sum(b) FROM x",
    "WITH x AS (DELETE FROM mc_d WHERE k = 4 AND id < 40 RETURNING *) SELECT * FROM x",
    // The statement and its other CTEs see the tables as they were before.
    "WITH u AS (UPDATE mc_d SET v = v + 100 WHERE k = 1 RETURNING k, id, v) \
     SELECT (SELECT sum(v) FROM mc_d), (SELECT count(*) FROM u)",
    "WITH u AS (UPDATE mc_d SET v = 0 WHERE k = 1 RETURNING *) \
     SELECT k, id, v FROM mc_d WHERE k = 1 AND id < 30",
    "WITH a AS (DELETE FROM mc_d WHERE k = 2 RETURNING id), b AS (SELECT count(*) AS n FROM mc_d) \
     SELECT n, (SELECT count(*) FROM a) FROM b",
    "WITH d AS (DELETE FROM mc_e WHERE v = 2 RETURNING *) SELECT count(*) FROM mc_e JOIN mc_d USING (k)",
    "WITH d AS (DELETE FROM mc_r WHERE k = 1 RETURNING *) SELECT count(*) FROM mc_r",
    // Unreferenced: runs exactly once all the same.
    "WITH x AS (DELETE FROM mc_d WHERE k = 3) SELECT count(*) FROM mc_d",
    "WITH x AS (UPDATE mc_d SET v = v + 1 WHERE k = 5 RETURNING *) SELECT 1",
    // Two modifying CTEs.
    "WITH a AS (DELETE FROM mc_d WHERE k = 4 RETURNING *), \
          b AS (UPDATE mc_r SET v = v + 1 WHERE id < 5 RETURNING id) \
     SELECT (SELECT count(*) FROM a), (SELECT count(*) FROM b)",
    // The statement writes too: INSERT of the CTE's rows, UPDATE with RETURNING.
    "WITH moved AS (DELETE FROM mc_d WHERE k = 5 AND id > 50 RETURNING *) \
     INSERT INTO mc_d2 SELECT * FROM moved",
    "WITH u AS (UPDATE mc_d SET v = 0 WHERE k = 1 RETURNING *) \
     UPDATE mc_d2 SET v = 99 WHERE k = 1 RETURNING id, v",
    // One shard group (co-located tables, one distribution value): sent whole.
    "WITH d AS (DELETE FROM mc_d WHERE k = 3 AND v > 5 RETURNING id) \
     UPDATE mc_d2 SET v = -1 WHERE k = 3 AND id IN (SELECT id + 0 FROM d) RETURNING id, v",
    "WITH d AS (DELETE FROM mc_d WHERE k = 3 RETURNING id, v) \
     SELECT d.id, d.v, x.v FROM d JOIN mc_d2 x ON x.id = d.id WHERE x.k = 3",
    // A local table written, distributed ones read.
    "WITH u AS (DELETE FROM mc_l WHERE k = 1 RETURNING *) SELECT count(*) FROM mc_d JOIN u USING (k)",
    // Errors: the same SQLSTATE, and nothing written.
    "WITH d AS (DELETE FROM mc_d WHERE k = 6 RETURNING *) SELECT 1/0 FROM d",
    "WITH moved AS (DELETE FROM mc_d WHERE k = 5 RETURNING *) INSERT INTO mc_d2 SELECT * FROM moved",
];

#[tokio::test]
async fn modifying_ctes_match_postgres() {
    let (shard, plain) = setup().await;
    for sql in STATEMENTS {
        same(&shard, &plain, sql).await;
        reset(&shard, &plain).await;
    }
    // No intermediate table is left behind, nor a prepared transaction.
    let left = run(
        &shard,
        "SELECT count(*) FROM pg_class WHERE relname LIKE 'pgs_intermediate%'",
    )
    .await;
    assert_eq!(left, run(&plain, "SELECT 0::bigint").await);
    assert_no_prepared_xacts().await;

    atomic_units(&shard, &plain).await;
    extended_protocol(&shard, &plain).await;
    refusals(&shard, &plain).await;
}

/// A failure after the modification rolls it back, in every kind of transaction.
async fn atomic_units(shard: &Client, plain: &Client) {
    reset(shard, plain).await;
    // Outside a block (pgshard's own block), with rows on every node.
    same(
        shard,
        plain,
        "WITH d AS (DELETE FROM mc_d WHERE v < 10 RETURNING *) SELECT 1/0 FROM d",
    )
    .await;
    // In a query string (its implicit transaction): the earlier insert goes too.
    same(
        shard,
        plain,
        "INSERT INTO mc_d VALUES (77, 77, 7, 's'); \
         WITH d AS (UPDATE mc_d SET v = 1 RETURNING *) SELECT count(*) / 0 FROM d",
    )
    .await;
    // A string that succeeds keeps everything.
    same(
        shard,
        plain,
        "INSERT INTO mc_d VALUES (77, 77, 7, 's'); \
         WITH d AS (DELETE FROM mc_d WHERE k = 7 RETURNING *) SELECT count(*) FROM d",
    )
    .await;
    // In a client's block: the block sees the change, ROLLBACK undoes it; a failed
    // statement fails the block.
    for c in [shard, plain] {
        c.batch_execute("BEGIN").await.unwrap();
    }
    same(
        shard,
        plain,
        "WITH d AS (DELETE FROM mc_d WHERE k = 8 RETURNING *) SELECT count(*) FROM d",
    )
    .await;
    same(shard, plain, "SELECT count(*) FROM mc_d WHERE k = 8").await;
    same(
        shard,
        plain,
        "WITH u AS (UPDATE mc_r SET t = 'blk' RETURNING *) SELECT count(*) FROM u",
    )
    .await;
    for c in [shard, plain] {
        c.batch_execute("ROLLBACK").await.unwrap();
    }
    same_tables(shard, plain, "ROLLBACK").await;
    for c in [shard, plain] {
        c.batch_execute("BEGIN").await.unwrap();
    }
    same(
        shard,
        plain,
        "WITH d AS (DELETE FROM mc_d WHERE k = 8 RETURNING *) SELECT 1/0 FROM d",
    )
    .await;
    same(shard, plain, "SELECT 1").await;
    for c in [shard, plain] {
        c.batch_execute("ROLLBACK").await.unwrap();
    }
    same_tables(shard, plain, "ROLLBACK").await;
    assert_no_prepared_xacts().await;
}

/// Parameters in the modifying CTE and in the statement, one statement prepared and
/// run twice.
async fn extended_protocol(shard: &Client, plain: &Client) {
    reset(shard, plain).await;
    let sql = "WITH d AS (UPDATE mc_d SET v = v + $1 WHERE k = $2 RETURNING id, v) \
               SELECT count(*), sum(v)::int8 FROM d WHERE v > $3";
    let (ps, pp) = (
        shard.prepare(sql).await.unwrap(),
        plain.prepare(sql).await.unwrap(),
    );
    for (add, k) in [(1i32, 7i32), (5, 3)] {
        let a = shard.query(&ps, &[&add, &k, &4i32]).await.unwrap();
        let b = plain.query(&pp, &[&add, &k, &4i32]).await.unwrap();
        let pick = |r: &[tokio_postgres::Row]| -> Vec<(i64, Option<i64>)> {
            r.iter().map(|r| (r.get(0), r.get(1))).collect()
        };
        assert_eq!(pick(&a), pick(&b), "{sql} with {add}, {k}");
        same_tables(shard, plain, sql).await;
    }
    // A failure in the extended protocol rolls back too.
    let sql = "WITH d AS (DELETE FROM mc_d WHERE k = $1 RETURNING *) SELECT 1 / (count(*) - count(*)) FROM d";
    let a = shard.query(sql, &[&2i32]).await.unwrap_err();
    let b = plain.query(sql, &[&2i32]).await.unwrap_err();
    assert_eq!(
        common::sqlstate_and_message(&a).0,
        common::sqlstate_and_message(&b).0
    );
    same_tables(shard, plain, sql).await;
}

/// What pgshard refuses it refuses with 0A000 and a message, writing nothing.
async fn refusals(shard: &Client, plain: &Client) {
    reset(shard, plain).await;
    for sql in [
        "WITH moved AS (DELETE FROM mc_d WHERE k = 7 RETURNING *) \
         INSERT INTO mc_l SELECT * FROM moved ON CONFLICT DO NOTHING",
        "WITH a AS (DELETE FROM mc_d WHERE k = 1 RETURNING *), \
              b AS (DELETE FROM mc_d WHERE k = 2 RETURNING *) SELECT 1",
    ] {
        let got = run(shard, sql).await;
        assert!(
            matches!(&got, Outcome::Error { code, .. } if code == "0A000"),
            "{sql}: {}",
            show(&got)
        );
        same_tables(shard, plain, sql).await;
    }
}
