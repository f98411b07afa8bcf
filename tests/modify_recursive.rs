//! UPDATE / DELETE whose other tables the target's nodes do not hold answer exactly as
//! one PostgreSQL does (issue 19): a local table in FROM, IN / EXISTS subqueries, a
//! distributed table joined off its distribution column, a CTE, a scalar subquery in
//! SET, a reference table and a local table as the target, RETURNING, the extended
//! protocol with a parameter, inside a rolled-back block, by a role that is no
//! superuser. An error in the middle (in a subplan, or on one shard after others were
//! written) leaves nothing written; the intermediate results are gone on every node
//! afterwards, after success and failure, with no prepared transaction left. The same
//! tables and rows live in the pgshard cluster and in a plain PostgreSQL; every
//! statement runs on both.

mod common;

use common::compare::{judge, run, show, Outcome, Verdict};
use common::{assert_no_prepared_xacts, cluster, plain_postgres};
use tokio_postgres::Client;

const SETUP: &str = "
DROP TABLE IF EXISTS mr_t, mr_o, mr_r, mr_l, mr_lt;
CREATE TABLE mr_t (k int, id int, v int CHECK (v < 1000), t text, PRIMARY KEY (k, id));
CREATE TABLE mr_o (k int, id int, v int, t text, PRIMARY KEY (k, id));
CREATE TABLE mr_r (k int, id int, v int, t text, PRIMARY KEY (k, id));
CREATE TABLE mr_l (k int, id int, v int, t text COLLATE \"C\", PRIMARY KEY (k, id));
CREATE TABLE mr_lt (k int, id int, v int, t text, PRIMARY KEY (k, id));
INSERT INTO mr_t SELECT i % 11, i, (i * 7) % 20, CASE WHEN i % 5 = 0 THEN NULL ELSE 't' || (i % 3) END
FROM generate_series(1, 80) AS s(i);
INSERT INTO mr_o SELECT (i * 3) % 11, i, (i * 5) % 20, 'o' || (i % 4) FROM generate_series(1, 80) AS s(i);
INSERT INTO mr_r SELECT i % 11, i, i % 20, 'r' FROM generate_series(1, 40) AS s(i);
INSERT INTO mr_l SELECT i % 11, i, (i * 3) % 20, CASE WHEN i % 2 = 0 THEN 'B' ELSE 'a' END
FROM generate_series(1, 80, 2) AS s(i);
INSERT INTO mr_lt SELECT i % 11, i, i % 20, 'lt' FROM generate_series(1, 60) AS s(i);
";

/// Both servers with the same data: `mr_t` distributed by `k` (the target), `mr_o` by
/// `id` (not co-located), `mr_r` a reference table, `mr_l` and `mr_lt` local tables.
async fn setup() -> (Client, Client) {
    let shard = cluster().client().await;
    let plain = plain_postgres().client().await;
    shard.batch_execute(SETUP).await.unwrap();
    plain.batch_execute(SETUP).await.unwrap();
    for call in [
        "SELECT create_distributed_table('mr_t', 'k')",
        "SELECT create_distributed_table('mr_o', 'id')",
        "SELECT create_reference_table('mr_r')",
    ] {
        shard.batch_execute(call).await.unwrap();
    }
    (shard, plain)
}

const TABLES: &[&str] = &["mr_t", "mr_o", "mr_r", "mr_l", "mr_lt"];

/// Runs `sql` on both and compares the answers (rows as multisets, counts, SQLSTATE),
/// then every table's contents.
async fn same(shard: &Client, plain: &Client, sql: &str) -> Outcome {
    let (got, want) = (run(shard, sql).await, run(plain, sql).await);
    assert_eq!(
        judge(&got, &want, false),
        Verdict::Same,
        "{sql}\n  pgshard: {}\n  plain:   {}",
        show(&got),
        show(&want)
    );
    same_contents(shard, plain, sql).await;
    want
}

async fn same_contents(shard: &Client, plain: &Client, after: &str) {
    for table in TABLES {
        let q = format!("SELECT * FROM {table}");
        let (got, want) = (run(shard, &q).await, run(plain, &q).await);
        assert_eq!(
            judge(&got, &want, false),
            Verdict::Same,
            "after {after}: {table} differs\n  pgshard: {}\n  plain:   {}",
            show(&got),
            show(&want)
        );
    }
}

/// No intermediate result left on any node (pgshard's temporary tables on the
/// coordinator node, the shipped tables on the workers), no prepared transaction.
async fn nothing_left(after: &str) {
    let cl = cluster();
    for port in std::iter::once(cl.coordinator_port).chain(cl.worker_ports.iter().copied()) {
        let c = cl.direct(port).await;
        let n: i64 = c
            .query_one(
                "SELECT count(*) FROM pg_class WHERE relname LIKE 'pgs\\_intermediate%'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(
            n, 0,
            "after {after}: {n} intermediate results left on port {port}"
        );
    }
    assert_no_prepared_xacts().await;
}

/// Each statement changes rows (the oracle's count is checked not to be zero), so a
/// statement that silently does nothing would differ.
const WRITES: &[&str] = &[
    // A local table in FROM.
    "UPDATE mr_t w SET v = l.v, t = l.t FROM mr_l l WHERE l.k = w.k AND l.id = w.id",
    // IN over a table not co-located, RETURNING.
    "UPDATE mr_t w SET t = 'in' WHERE w.k IN (SELECT o.k FROM mr_o o WHERE o.v > 12) \
     RETURNING w.k, w.id, w.t",
    // Joined off the distribution column.
    "UPDATE mr_t w SET v = o.v FROM mr_o o WHERE o.id = w.id AND o.t = 'o1'",
    // A CTE over a distributed table, a scalar subquery in SET.
    "WITH s AS (SELECT k, max(v) AS m FROM mr_o GROUP BY k) \
     UPDATE mr_t w SET v = s.m FROM s WHERE s.k = w.k AND w.id % 4 = 0",
    "UPDATE mr_t w SET v = (SELECT max(v) FROM mr_l) WHERE w.id % 6 = 1",
    // Routed to one shard, reference and local tables, RETURNING.
    "UPDATE mr_t w SET v = w.v + 1 FROM mr_r r, mr_l l \
     WHERE r.id = w.id AND l.id = w.id AND w.k = 3 RETURNING w.*",
    // DELETE: USING a table not co-located; correlated EXISTS on a local table.
    "DELETE FROM mr_t w USING mr_o o WHERE o.id = w.id AND o.v < 4 RETURNING w.k, w.id, w.v",
    "DELETE FROM mr_t w WHERE EXISTS (SELECT 1 FROM mr_l l WHERE l.k = w.k AND l.v = w.v) \
     RETURNING *",
    // A reference table as the target.
    "UPDATE mr_r r SET v = o.v FROM mr_o o WHERE o.id = r.id AND o.k <> r.k RETURNING r.k, r.id, r.v",
    "DELETE FROM mr_r r WHERE r.k IN (SELECT k FROM mr_t WHERE v > 15)",
    // A local table as the target.
    "UPDATE mr_lt x SET v = t.v FROM mr_t t WHERE t.k = x.k AND t.id = x.id RETURNING x.*",
    "DELETE FROM mr_lt x WHERE x.id IN (SELECT id FROM mr_o WHERE v < 6)",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modifications_over_intermediate_results_match_postgres() {
    let (shard, plain) = setup().await;
    for sql in WRITES {
        let want = same(&shard, &plain, sql).await;
        assert!(
            matches!(&want, Outcome::Rows { counts, .. } if counts.iter().any(|n| *n > 0)),
            "{sql} changed nothing: {}",
            show(&want)
        );
        nothing_left(sql).await;
    }

    // Inside a block that is rolled back: the block sees its writes, then nothing stays.
    for c in [&shard, &plain] {
        c.batch_execute("BEGIN").await.unwrap();
    }
    same(
        &shard,
        &plain,
        "UPDATE mr_t w SET v = l.v + 100 FROM mr_l l WHERE l.id = w.id RETURNING w.k, w.v",
    )
    .await;
    same(
        &shard,
        &plain,
        "DELETE FROM mr_r r USING mr_l l WHERE l.id = r.id",
    )
    .await;
    for c in [&shard, &plain] {
        c.batch_execute("ROLLBACK").await.unwrap();
    }
    same_contents(&shard, &plain, "ROLLBACK").await;
    nothing_left("ROLLBACK").await;

    // The extended protocol: the routing value a parameter.
    let sql = "UPDATE mr_t w SET v = l.v FROM mr_l l WHERE l.id = w.id AND w.k = $1 \
               RETURNING w.k, w.id, w.v";
    for k in [1i32, 5] {
        let mut got: Vec<(i32, i32, Option<i32>)> = shard
            .query(sql, &[&k])
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect();
        let mut want: Vec<(i32, i32, Option<i32>)> = plain
            .query(sql, &[&k])
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect();
        got.sort();
        want.sort();
        assert_eq!(got, want, "{sql} with k = {k}");
        same_contents(&shard, &plain, sql).await;
    }
    nothing_left("the extended protocol").await;

    // A role that is no superuser ships its results too (they are its own tables).
    for sql in [
        "CREATE ROLE mr_app LOGIN PASSWORD 'mr app'",
        "GRANT SELECT, UPDATE, DELETE ON mr_t TO mr_app",
        "GRANT SELECT ON mr_o TO mr_app",
        "GRANT SELECT ON mr_l TO mr_app",
        "GRANT SELECT ON mr_r TO mr_app",
        "GRANT SELECT ON mr_lt TO mr_app",
    ] {
        shard.batch_execute(sql).await.unwrap();
    }
    let cl = cluster();
    let app = common::connect(&cl.host, cl.port, "mr_app", "mr app", &cl.database).await;
    same(
        &app,
        &plain,
        "UPDATE mr_t w SET v = o.v FROM mr_o o, mr_l l WHERE o.id = w.id AND l.id = w.id \
         RETURNING w.k, w.id, w.v",
    )
    .await;
    nothing_left("a write by a role that is no superuser").await;

    an_error_in_the_middle_leaves_nothing_written().await;
}

/// Errors: in a subplan, on one shard after others were written, on every placement of
/// a reference table. Nothing is written, nothing is left, the session goes on. (Part
/// of the test above: intermediate results of a test running at the same time would
/// be seen on the coordinator node.)
async fn an_error_in_the_middle_leaves_nothing_written() {
    let (shard, plain) = setup_failures().await;
    for sql in [
        // A subplan fails (division by zero in the pulled rows).
        "UPDATE mf_t w SET v = 1 WHERE w.k IN (SELECT 1 / (v - v) FROM mf_l)",
        // One shard fails its CHECK after the others wrote.
        "UPDATE mf_t w SET v = CASE WHEN w.k = 7 THEN 5000 ELSE w.v + 1 END \
         FROM mf_l l WHERE l.id = w.id",
        // Every placement of a reference table fails.
        "UPDATE mf_r r SET v = 1 / (r.v - l.v) FROM mf_l l WHERE l.id = r.id",
    ] {
        let (got, want) = (run(&shard, sql).await, run(&plain, sql).await);
        assert!(want.is_error(), "{sql}: {}", show(&want));
        assert_eq!(
            judge(&got, &want, false),
            Verdict::Same,
            "{sql}: {}",
            show(&got)
        );
        for table in ["mf_t", "mf_r", "mf_l"] {
            let q = format!("SELECT * FROM {table}");
            let (g, w) = (run(&shard, &q).await, run(&plain, &q).await);
            assert_eq!(judge(&g, &w, false), Verdict::Same, "after {sql}: {table}");
        }
        nothing_left(sql).await;
    }
}

const FAILURE_SETUP: &str = "
DROP TABLE IF EXISTS mf_t, mf_r, mf_l;
CREATE TABLE mf_t (k int, id int, v int CHECK (v < 1000), PRIMARY KEY (k, id));
CREATE TABLE mf_r (k int, id int, v int, PRIMARY KEY (k, id));
CREATE TABLE mf_l (k int, id int, v int, PRIMARY KEY (k, id));
INSERT INTO mf_t SELECT i % 11, i, i % 20 FROM generate_series(1, 60) AS s(i);
INSERT INTO mf_r SELECT i % 11, i, i % 20 FROM generate_series(1, 30) AS s(i);
INSERT INTO mf_l SELECT i % 11, i, i % 20 FROM generate_series(1, 60) AS s(i);
";

async fn setup_failures() -> (Client, Client) {
    let shard = cluster().client().await;
    let plain = plain_postgres().client().await;
    shard.batch_execute(FAILURE_SETUP).await.unwrap();
    plain.batch_execute(FAILURE_SETUP).await.unwrap();
    for call in [
        "SELECT create_distributed_table('mf_t', 'k')",
        "SELECT create_reference_table('mf_r')",
    ] {
        shard.batch_execute(call).await.unwrap();
    }
    (shard, plain)
}
