//! Transactions across shards, through crashes (issue #3), with real servers and
//! real clients:
//!
//! - savepoints through pgshard behave as on a plain PostgreSQL (same outcomes and
//!   SQLSTATEs, same rows), also for nodes that join the block after a savepoint;
//! - so do SET TRANSACTION, SET LOCAL and SET inside blocks, and DISCARD ALL, as
//!   every worker sees them;
//! - and COMMIT / ROLLBACK AND CHAIN, LOCK TABLE (which also holds off writes on every
//!   worker), and cursors over distributed tables (DECLARE / FETCH / MOVE / CLOSE,
//!   SCROLL; psql's FETCH_COUNT);
//! - a lock-wait cycle across two workers is broken with 40P01 within 5 s and the
//!   surviving session commits;
//! - a client that vanishes mid-block leaves no 'idle in transaction' backend;
//! - 1PC mode commits on every node;
//! - `recover_prepared_transactions()` commits prepared transactions with a decision
//!   record, rolls back those without, and leaves those of a live other pgshard alone;
//! - on a dedicated cluster: TPC-B (pgbench tables distributed as in W1) keeps its
//!   invariant under pgbench, and through kill -9 of pgshard, kill -9 of a worker and
//!   a stop of the coordinator node's PostgreSQL, each twice: afterwards no prepared
//!   transaction is left, the invariant holds and every transaction whose COMMIT
//!   succeeded is present.

mod common;

use common::{alloc_ports, cluster, cluster_up, plain_postgres, psql, run_dir, teardown_at_exit};
use common::{outcome, Teardown, TestCluster};
use std::collections::HashSet;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_postgres::{Client, SimpleQueryMessage};

/// The one value of `sql` as an int8, through the simple protocol (Citus
/// functions nested in expressions are computed in simple queries only).
async fn scalar_i64(c: &Client, sql: &str) -> i64 {
    let msgs = c
        .simple_query(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
    msgs.iter()
        .find_map(|m| match m {
            SimpleQueryMessage::Row(r) => r.get(0).map(|v| v.parse::<i64>().unwrap()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("{sql}: no value"))
}

/// Rows of a multi-shard read in text, sorted (no ORDER BY across shards yet).
async fn sorted_rows(c: &Client, sql: &str) -> Vec<String> {
    let mut rows: Vec<String> = c
        .simple_query(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"))
        .iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => Some(
                (0..r.len())
                    .map(|i| r.get(i).unwrap_or("NULL"))
                    .collect::<Vec<_>>()
                    .join(","),
            ),
            _ => None,
        })
        .collect();
    rows.sort();
    rows
}

/// A connection through pgshard whose socket can be cut without a Terminate message.
async fn vanishing_client(cl: &TestCluster) -> (Client, tokio::task::JoinHandle<()>) {
    let (client, conn) = tokio_postgres::Config::new()
        .host(&cl.host)
        .port(cl.port)
        .user(&cl.user)
        .password(&cl.password)
        .dbname(&cl.database)
        .connect(tokio_postgres::NoTls)
        .await
        .unwrap();
    let h = tokio::spawn(async move {
        let _ = conn.await;
    });
    (client, h)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn savepoints_behave_as_in_postgres() {
    let cl = cluster();
    let pg = cl.client().await;
    let plain = plain_postgres().client().await;
    let ddl = "CREATE TABLE sp (id int PRIMARY KEY, v int)";
    pg.batch_execute(ddl).await.unwrap();
    pg.batch_execute("SELECT create_distributed_table('sp', 'id')")
        .await
        .unwrap();
    plain.batch_execute(ddl).await.unwrap();
    let script = [
        "SAVEPOINT outside",
        "BEGIN",
        "INSERT INTO sp VALUES (1, 1)",
        "SAVEPOINT a",
        "INSERT INTO sp VALUES (2, 2)",
        "INSERT INTO sp VALUES (3, 3)",
        "INSERT INTO sp VALUES (6, 6)",
        "ROLLBACK TO SAVEPOINT a",
        "SELECT id FROM sp WHERE id = 2",
        "INSERT INTO sp VALUES (4, 4)",
        "SAVEPOINT b",
        "INSERT INTO sp VALUES (7, 7)",
        "INSERT INTO sp VALUES (1, 9)",
        "SELECT 1",
        "ROLLBACK TO b",
        "SELECT id FROM sp WHERE id = 7",
        "RELEASE SAVEPOINT nope",
        "SELECT 1",
        "ROLLBACK TO a",
        "INSERT INTO sp VALUES (5, 5)",
        "SAVEPOINT c",
        "INSERT INTO sp VALUES (8, 8)",
        "RELEASE c",
        "RELEASE a",
        "COMMIT",
        "BEGIN",
        "INSERT INTO sp VALUES (10, 10)",
        "SAVEPOINT s",
        "INSERT INTO sp VALUES (11, 11)",
        "SAVEPOINT s",
        "INSERT INTO sp VALUES (12, 12)",
        "ROLLBACK TO s",
        "RELEASE s",
        "ROLLBACK TO s",
        "COMMIT",
        "ROLLBACK TO s",
        "BEGIN",
        "INSERT INTO sp VALUES (20, 20)",
        "RELEASE SAVEPOINT nope",
        "COMMIT",
    ];
    for sql in script {
        let got = outcome(&pg, sql).await;
        let want = outcome(&plain, sql).await;
        assert_eq!(got, want, "{sql}");
    }
    let all = "SELECT id, v FROM sp";
    let got = sorted_rows(&pg, all).await;
    assert_eq!(got, sorted_rows(&plain, all).await);
    assert_eq!(got, ["1,1", "10,10", "5,5", "8,8"]);
}

/// SET inside blocks through pgshard behaves as on one PostgreSQL, on every node:
/// SET TRANSACTION and SET LOCAL reach the workers (also one joining the block later)
/// and end with the block; a block or savepoint that rolls back undoes the session's
/// SETs made in it; DISCARD ALL resets the settings. Each step's outcome and the
/// settings that the workers holding keys `a` and `b` see are compared with a plain
/// PostgreSQL's.
/// The statements of one simple query run as one implicit transaction in PostgreSQL:
/// when one fails (or ROLLBACK ends it), the SETs before it are undone, on every node
/// pgshard replays them to; COMMIT in the string keeps them; BEGIN makes them the
/// block's. Compared step by step with a plain PostgreSQL, the value read on a worker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sets_in_failed_implicit_transactions_are_undone_as_in_postgres() {
    let cl = cluster();
    let pg = cl.client().await;
    let plain = plain_postgres().client().await;
    pg.batch_execute(
        "CREATE TABLE imps (id int PRIMARY KEY, v int); COMMIT; SELECT create_distributed_table('imps', 'id'); COMMIT; \
         INSERT INTO imps VALUES (1, 1)",
    )
    .await
    .unwrap();
    plain
        .batch_execute(
            "CREATE TABLE imps (id int PRIMARY KEY, v int); INSERT INTO imps VALUES (1, 1)",
        )
        .await
        .unwrap();
    let read = "SELECT current_setting('work_mem'), current_setting('statement_timeout') \
                FROM imps WHERE id = 1";
    let script = [
        read,
        "SET work_mem = '7MB'; SELECT 1/0",
        read,
        "SET work_mem = '6MB'; SELECT v FROM imps WHERE id = 1",
        read,
        "SET work_mem = '8MB'; COMMIT; SET statement_timeout = '9s'; SELECT 1/0",
        read,
        "SET work_mem = '9MB'; ROLLBACK; SELECT 1",
        read,
        "SET work_mem = '10MB'; BEGIN; SET statement_timeout = '11s'; SELECT 1/0",
        read,
        "ROLLBACK",
        read,
        "SET work_mem = '12MB'; BEGIN; SELECT 1",
        "COMMIT",
        read,
        "RESET ALL; SELECT 1/0",
        read,
    ];
    for sql in script {
        let got = outcome(&pg, sql).await;
        let want = outcome(&plain, sql).await;
        assert_eq!(got, want, "{sql}");
    }
    // pgshard's own citus.* values follow the same rule.
    let before = outcome(&pg, "SHOW citus.shard_count").await;
    let e = outcome(&pg, "SET citus.shard_count = 7; SELECT 1/0").await;
    assert_eq!(e, "error 22012");
    assert_eq!(outcome(&pg, "SHOW citus.shard_count").await, before);
    assert_ne!(before, "(7)");
}

/// SQL `DEALLOCATE` drops statements prepared with the protocol's Parse, as in
/// PostgreSQL (drivers such as pgx send `DEALLOCATE ALL` and then prepare again): the
/// same outcomes and SQLSTATEs as on a plain PostgreSQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deallocate_drops_protocol_statements_as_in_postgres() {
    let cl = cluster();
    let pg = cl.client().await;
    let plain = plain_postgres().client().await;
    pg.batch_execute(
        "CREATE TABLE dealloc (id int PRIMARY KEY, v int); COMMIT; \
         SELECT create_distributed_table('dealloc', 'id'); COMMIT; INSERT INTO dealloc VALUES (1, 10)",
    )
    .await
    .unwrap();
    plain
        .batch_execute(
            "CREATE TABLE dealloc (id int PRIMARY KEY, v int); INSERT INTO dealloc VALUES (1, 10)",
        )
        .await
        .unwrap();
    let code = |e: tokio_postgres::Error| e.code().map(|c| c.code().to_string());
    // The driver's name for a statement (only its Debug output shows it).
    let name_of = |st: &tokio_postgres::Statement| {
        let d = format!("{st:?}");
        let start = d.find("name: \"").expect("a name") + 7;
        d[start..start + d[start..].find('"').unwrap()].to_string()
    };
    for c in [&pg, &plain] {
        let st = c
            .prepare("SELECT v FROM dealloc WHERE id = $1")
            .await
            .unwrap();
        let v: i32 = c.query_one(&st, &[&1i32]).await.unwrap().get(0);
        assert_eq!(v, 10);
        c.batch_execute(&format!("DEALLOCATE {}", name_of(&st)))
            .await
            .unwrap();
        let e = c.query_one(&st, &[&1i32]).await.unwrap_err();
        assert_eq!(code(e).as_deref(), Some("26000"));
        let e = c
            .batch_execute(&format!("DEALLOCATE {}", name_of(&st)))
            .await
            .unwrap_err();
        assert_eq!(code(e).as_deref(), Some("26000"));

        let (s1, s2) = (
            c.prepare("SELECT v FROM dealloc WHERE id = $1")
                .await
                .unwrap(),
            c.prepare("UPDATE dealloc SET v = v + 1 WHERE id = $1")
                .await
                .unwrap(),
        );
        assert_eq!(c.execute(&s2, &[&1i32]).await.unwrap(), 1);
        c.batch_execute("DEALLOCATE ALL").await.unwrap();
        for s in [&s1, &s2] {
            let e = c.query(s, &[&1i32]).await.unwrap_err();
            assert_eq!(code(e).as_deref(), Some("26000"));
        }
        let s3 = c
            .prepare("SELECT v FROM dealloc WHERE id = $1")
            .await
            .unwrap();
        let v: i32 = c.query_one(&s3, &[&1i32]).await.unwrap().get(0);
        assert_eq!(v, 11);
        // DISCARD ALL also drops them; statements prepared afterwards work (pgshard's
        // own statements on its coordinator connection went with it).
        c.batch_execute("DISCARD ALL").await.unwrap();
        let e = c.query(&s3, &[&1i32]).await.unwrap_err();
        assert_eq!(code(e).as_deref(), Some("26000"));
        let s4 = c
            .prepare("SELECT v FROM dealloc WHERE id = $1")
            .await
            .unwrap();
        let v: i32 = c.query_one(&s4, &[&1i32]).await.unwrap().get(0);
        assert_eq!(v, 11);
        // A name of pgshard's own backend statements is not the client's to drop.
        let e = c.batch_execute("DEALLOCATE pgs_1").await.unwrap_err();
        assert_eq!(code(e).as_deref(), Some("26000"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_in_blocks_behave_as_in_postgres() {
    let cl = cluster();
    let mut pg = cl.client().await;
    let plain = plain_postgres().client().await;
    pg.batch_execute(
        "CREATE TABLE st (id int PRIMARY KEY, v int); COMMIT; SELECT create_distributed_table('st', 'id')",
    )
    .await
    .unwrap();
    plain
        .batch_execute("CREATE TABLE st (id int PRIMARY KEY, v int)")
        .await
        .unwrap();
    let (a, b) = common::keys_on_two_workers_from(&pg, "st", 0).await;
    for c in [&pg, &plain] {
        c.batch_execute(&format!("INSERT INTO st VALUES ({a}, 1), ({b}, 1)"))
            .await
            .unwrap();
    }
    let q = |k: i32| {
        format!(
            "SELECT current_setting('work_mem'), current_setting('transaction_isolation'), \
             current_setting('transaction_read_only') FROM st WHERE id = {k}"
        )
    };
    let (qa, qb) = (q(a), q(b));
    let script: Vec<&str> = vec![
        // SET TRANSACTION: on the node already in the block and on one joining later.
        "BEGIN",
        "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY",
        &qa,
        &qb,
        "COMMIT",
        &qa,
        // After a query, PostgreSQL refuses a new isolation level (25001).
        "BEGIN",
        &qa,
        "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE",
        "ROLLBACK",
        "START TRANSACTION READ ONLY",
        "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE",
        &qb,
        "COMMIT",
        // SET LOCAL: every node of the block, savepoints, gone after the block.
        "BEGIN",
        "SET LOCAL work_mem = '7MB'",
        &qa,
        "SET LOCAL work_mem = '9MB'",
        &qb,
        "SAVEPOINT s",
        "SET LOCAL work_mem = '11MB'",
        &qa,
        "ROLLBACK TO s",
        &qa,
        &qb,
        "COMMIT",
        &qa,
        &qb,
        "SET LOCAL work_mem = '3MB'",
        &qa,
        // The session's SETs made in a block are undone with it.
        "SET work_mem = '5MB'",
        "BEGIN",
        "SET work_mem = '6MB'",
        &qa,
        "ROLLBACK",
        &qa,
        &qb,
        "SHOW work_mem",
        "BEGIN",
        "SET work_mem = '6MB'",
        "SAVEPOINT s",
        "SET work_mem = '8MB'",
        &qa,
        "ROLLBACK TO s",
        &qa,
        &qb,
        "COMMIT",
        &qa,
        &qb,
        "BEGIN",
        "SET LOCAL work_mem = '12MB'",
        "SET work_mem = '13MB'",
        &qa,
        "COMMIT",
        &qa,
        "BEGIN",
        "SET work_mem = '14MB'",
        &qb,
        "SELECT 1/0",
        "COMMIT",
        &qa,
        &qb,
        "SHOW work_mem",
        // DISCARD ALL: refused in a block, back to the defaults outside one.
        "BEGIN",
        "DISCARD ALL",
        "ROLLBACK",
        "DISCARD ALL",
        &qa,
        &qb,
        "SHOW work_mem",
    ];
    for sql in script {
        let got = outcome(&pg, sql).await;
        let want = outcome(&plain, sql).await;
        assert_eq!(got, want, "{sql}");
    }

    // Repeatable read set after BEGIN holds on a worker: a row another session
    // commits meanwhile stays invisible to the block.
    let other = cl.client().await;
    pg.batch_execute("BEGIN; SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        .await
        .unwrap();
    let v_of = format!("SELECT v FROM st WHERE id = {b}");
    assert_eq!(scalar_i64(&pg, &v_of).await, 1);
    other
        .batch_execute(&format!("UPDATE st SET v = 2 WHERE id = {b}"))
        .await
        .unwrap();
    assert_eq!(scalar_i64(&pg, &v_of).await, 1);
    pg.batch_execute("COMMIT").await.unwrap();
    assert_eq!(scalar_i64(&pg, &v_of).await, 2);

    // Over the extended protocol (as drivers send it) too.
    let tx = pg.transaction().await.unwrap();
    tx.execute("SET LOCAL work_mem = '21MB'", &[])
        .await
        .unwrap();
    for k in [a, b] {
        let wm: String = tx
            .query_one(
                "SELECT current_setting('work_mem') FROM st WHERE id = $1",
                &[&k],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(wm, "21MB", "key {k}");
    }
    tx.rollback().await.unwrap();
    assert_eq!(outcome(&pg, &qa).await, outcome(&plain, &qa).await);

    // citus.* settings: SET LOCAL ends with the block, a rolled-back SET is undone.
    let show = "SHOW citus.multi_shard_commit_protocol";
    pg.batch_execute("BEGIN; SET LOCAL citus.multi_shard_commit_protocol = '1pc'")
        .await
        .unwrap();
    assert_eq!(outcome(&pg, show).await, "(1pc) ok 0");
    pg.batch_execute("COMMIT").await.unwrap();
    assert_eq!(outcome(&pg, show).await, "(2pc) ok 0");
    pg.batch_execute("BEGIN; SET citus.multi_shard_commit_protocol = '1pc'; ROLLBACK")
        .await
        .unwrap();
    assert_eq!(outcome(&pg, show).await, "(2pc) ok 0");
    pg.batch_execute(
        "BEGIN; SET LOCAL citus.shard_count = 3; SET citus.multi_shard_commit_protocol = '1pc'; \
         COMMIT",
    )
    .await
    .unwrap();
    assert_eq!(outcome(&pg, show).await, "(1pc) ok 0");
    assert_eq!(
        outcome(&pg, "SHOW citus.shard_count").await,
        outcome(&cl.client().await, "SHOW citus.shard_count").await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn distributed_deadlock_is_broken() {
    let cl = cluster();
    let setup = cl.client().await;
    setup
        .batch_execute(
            "CREATE TABLE dl (id int PRIMARY KEY, v int); COMMIT; \
             SELECT create_distributed_table('dl', 'id')",
        )
        .await
        .unwrap();
    let (a, b) = common::keys_on_two_workers_from(&setup, "dl", 0).await;
    setup
        .batch_execute(&format!(
            "INSERT INTO dl VALUES ({a}, 0); INSERT INTO dl VALUES ({b}, 0)"
        ))
        .await
        .unwrap();
    let s1 = cl.client().await;
    let s2 = cl.client().await;
    s1.batch_execute(&format!("BEGIN; UPDATE dl SET v = 1 WHERE id = {a}"))
        .await
        .unwrap();
    s2.batch_execute(&format!("BEGIN; UPDATE dl SET v = 2 WHERE id = {b}"))
        .await
        .unwrap();
    let t = Instant::now();
    let sql1 = format!("UPDATE dl SET v = 1 WHERE id = {b}");
    let sql2 = format!("UPDATE dl SET v = 2 WHERE id = {a}");
    let (r1, r2) = tokio::join!(s1.batch_execute(&sql1), async {
        // s1 waits first: the cycle closes with s2.
        tokio::time::sleep(Duration::from_millis(200)).await;
        s2.batch_execute(&sql2).await
    });
    let elapsed = t.elapsed();
    assert!(elapsed < Duration::from_secs(5), "took {elapsed:?}");
    let (victim, survivor, survivor_v, r_victim) = match (&r1, &r2) {
        (Err(_), Ok(())) => (&s1, &s2, 2, r1),
        (Ok(()), Err(_)) => (&s2, &s1, 1, r2),
        _ => panic!("exactly one session must fail: {r1:?} / {r2:?}"),
    };
    let e = r_victim.unwrap_err();
    let db = e.as_db_error().expect("a server error");
    assert_eq!(db.code().code(), "40P01", "{db:?}");
    assert!(
        db.message().contains("distributed deadlock"),
        "{}",
        db.message()
    );
    assert!(
        db.message().contains("waits for"),
        "names the cycle: {}",
        db.message()
    );
    victim.batch_execute("ROLLBACK").await.unwrap();
    survivor.batch_execute("COMMIT").await.unwrap();
    let rows = sorted_rows(&setup, "SELECT v FROM dl").await;
    assert_eq!(rows, [survivor_v.to_string(), survivor_v.to_string()]);
    // The victim's session goes on.
    assert_eq!(scalar_i64(victim, "SELECT count(*) FROM dl").await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vanished_client_leaves_no_open_transaction() {
    let cl = cluster();
    let setup = cl.client().await;
    setup
        .batch_execute(
            "CREATE TABLE vanish (id int PRIMARY KEY); COMMIT; \
             SELECT create_distributed_table('vanish', 'id')",
        )
        .await
        .unwrap();
    let (a, b) = common::keys_on_two_workers_from(&setup, "vanish", 0).await;
    for cut in [false, true] {
        let (c, conn) = vanishing_client(cl).await;
        c.batch_execute(&format!(
            "BEGIN; INSERT INTO vanish VALUES ({a}); INSERT INTO vanish VALUES ({b})"
        ))
        .await
        .unwrap();
        if cut {
            // The socket goes without a Terminate message.
            conn.abort();
            drop(c);
        } else {
            drop(c);
        }
        let t = Instant::now();
        loop {
            let mut open = 0;
            for &port in &cl.worker_ports {
                let w = cl.direct(port).await;
                open += scalar_i64(
                    &w,
                    "SELECT count(*) FROM pg_stat_activity WHERE state LIKE 'idle in transaction%' \
                     AND application_name LIKE 'pgshard %'",
                )
                .await;
            }
            if open == 0 {
                break;
            }
            assert!(
                t.elapsed() < Duration::from_secs(5),
                "{open} open transactions left"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    assert_eq!(scalar_i64(&setup, "SELECT count(*) FROM vanish").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_phase_commit_mode() {
    let cl = cluster();
    let c = cl.client().await;
    c.batch_execute(
        "CREATE TABLE onepc (id int PRIMARY KEY); COMMIT; \
         SELECT create_distributed_table('onepc', 'id')",
    )
    .await
    .unwrap();
    let (a, b) = common::keys_on_two_workers_from(&c, "onepc", 0).await;
    c.batch_execute("SET citus.multi_shard_commit_protocol = '1pc'")
        .await
        .unwrap();
    assert_eq!(
        outcome(&c, "SHOW citus.multi_shard_commit_protocol").await,
        "(1pc) ok 0"
    );
    c.batch_execute(&format!(
        "BEGIN; INSERT INTO onepc VALUES ({a}); INSERT INTO onepc VALUES ({b}); COMMIT"
    ))
    .await
    .unwrap();
    assert_eq!(scalar_i64(&c, "SELECT count(*) FROM onepc").await, 2);
    // A failure before COMMIT still rolls back every node.
    let r = c
        .batch_execute(&format!(
            "BEGIN; INSERT INTO onepc VALUES ({a} + 1000); INSERT INTO onepc VALUES ({b})"
        ))
        .await;
    assert!(r.is_err());
    c.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(scalar_i64(&c, "SELECT count(*) FROM onepc").await, 2);
}

/// Statements of a block sent with the extended protocol (tokio-postgres prepares
/// and binds them) run inside the block's own BEGIN on every node they reach: its
/// isolation level holds there, an error in a node's first statement aborts the block,
/// and after ROLLBACK the pooled connections are outside any transaction again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extended_protocol_statements_join_the_block() {
    let cl = cluster();
    let c = cl.client().await;
    c.batch_execute(
        "CREATE TABLE extblock (id int PRIMARY KEY, v int); COMMIT; \
         SELECT create_distributed_table('extblock', 'id')",
    )
    .await
    .unwrap();
    let (a, b) = common::keys_on_two_workers_from(&c, "extblock", 0).await;
    let isolation = "SELECT current_setting('transaction_isolation') FROM extblock WHERE id = $1";
    c.batch_execute(&format!("INSERT INTO extblock VALUES ({a}, 0), ({b}, 0)"))
        .await
        .unwrap();
    c.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        .await
        .unwrap();
    for k in [a, b] {
        let row = c.query_one(isolation, &[&k]).await.unwrap();
        assert_eq!(row.get::<_, String>(0), "repeatable read", "key {k}");
    }
    c.execute("UPDATE extblock SET v = v + 1 WHERE id = $1", &[&a])
        .await
        .unwrap();
    c.execute("UPDATE extblock SET v = v + 1 WHERE id = $1", &[&b])
        .await
        .unwrap();
    c.batch_execute("COMMIT").await.unwrap();
    let sum = "SELECT sum(v)::int8 FROM extblock";
    assert_eq!(scalar_i64(&c, sum).await, 2);
    // A node's first statement in the block fails: the block is aborted (25P02 after),
    // and ROLLBACK undoes the other node's write.
    c.batch_execute("BEGIN").await.unwrap();
    c.execute("UPDATE extblock SET v = v + 1 WHERE id = $1", &[&a])
        .await
        .unwrap();
    let e = c
        .execute("INSERT INTO extblock VALUES ($1, 0)", &[&b])
        .await
        .unwrap_err();
    assert_eq!(e.code().unwrap().code(), "23505");
    let e = c.query_one(isolation, &[&a]).await.unwrap_err();
    assert_eq!(e.code().unwrap().code(), "25P02");
    c.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(scalar_i64(&c, sum).await, 2);
    // Fresh blocks on the same pooled connections start at the default level.
    c.batch_execute("BEGIN").await.unwrap();
    for k in [a, b] {
        let row = c.query_one(isolation, &[&k]).await.unwrap();
        assert_eq!(row.get::<_, String>(0), "read committed", "key {k}");
    }
    c.batch_execute("COMMIT").await.unwrap();
}

/// Two-phase-commit decision records (`transaction::decision`): the records of
/// concurrent committers land in the coordinator node's pg_dist_transaction exactly
/// as given, quotes and backslashes included; a batch that fails (a duplicate gid)
/// records nothing and reports the server's error, not an unknown outcome; the writer
/// goes on working after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decision_records_are_written_exactly() {
    use pgshard::backend::{Credentials, NodeAddr};
    use pgshard::transaction::decision;
    let cl = cluster();
    let coord = cl.direct(cl.coordinator_port).await;
    let target = decision::Target {
        coordinator: NodeAddr {
            host: cl.host.clone(),
            port: cl.coordinator_port,
        },
        creds: Arc::new(Credentials::with_password(
            &cl.user,
            &cl.password,
            &cl.database,
        )),
        application_name: "decision test".into(),
    };
    // This process holds no liveness lock: the count it has stays as it is.
    let epoch = pgshard::transaction::liveness_epoch();
    // Not pgshard gids: recovery leaves these records alone.
    let gid = |t: usize, p: usize| format!("test_decision_{t}_{p}_'q\"b\\");
    let committers = (0..20).map(|t| {
        let target = target.clone();
        let rows = vec![(t as i32, gid(t, 0)), (-(t as i32), gid(t, 1))];
        async move { decision::record(&target, rows, epoch).await }
    });
    for r in futures_util::future::join_all(committers).await {
        r.unwrap();
    }
    let stored = coord
        .query(
            "SELECT groupid, gid FROM pg_catalog.pg_dist_transaction \
             WHERE gid LIKE 'test\\_decision\\_%'",
            &[],
        )
        .await
        .unwrap();
    let mut got: Vec<(i32, String)> = stored.iter().map(|r| (r.get(0), r.get(1))).collect();
    let mut want: Vec<(i32, String)> = (0..20)
        .flat_map(|t| [(t as i32, gid(t, 0)), (-(t as i32), gid(t, 1))])
        .collect();
    got.sort();
    want.sort();
    assert_eq!(got, want);
    let e = decision::record(
        &target,
        vec![(1, "test_decision_new".into()), (0, gid(0, 0))],
        epoch,
    )
    .await
    .unwrap_err();
    assert_eq!(e.code, "23505", "{e:?}");
    decision::record(&target, vec![(3, "test_decision_after".into())], epoch)
        .await
        .unwrap();
    let n: i64 = coord
        .query_one(
            "SELECT count(*) FROM pg_catalog.pg_dist_transaction \
             WHERE gid IN ('test_decision_new', 'test_decision_after')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        n, 1,
        "the failed batch recorded nothing, the next one its record"
    );
    coord
        .execute(
            "DELETE FROM pg_catalog.pg_dist_transaction WHERE gid LIKE 'test\\_decision\\_%'",
            &[],
        )
        .await
        .unwrap();
}

async fn prepared_orphans(w: &Client) -> i64 {
    scalar_i64(
        w,
        "SELECT count(*) FROM pg_prepared_xacts WHERE gid LIKE 'pgshard\\_0000%'",
    )
    .await
}

/// Prepares `gid` on a worker with one row inserted into `table`.
async fn prepare_on(w: &Client, table: &str, id: i32, gid: &str) {
    w.batch_execute(&format!(
        "BEGIN; INSERT INTO {table} VALUES ({id}); PREPARE TRANSACTION '{gid}'"
    ))
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recover_prepared_transactions_resolves_orphans() {
    let cl = cluster();
    let c = cl.client().await;
    // Plain tables on a worker stand for shards: recovery only looks at gids.
    let w = cl.direct(cl.worker_ports[0]).await;
    w.batch_execute("CREATE TABLE orphan (id int)")
        .await
        .unwrap();
    let coord = cl.direct(cl.coordinator_port).await;
    // A dead instance (nobody holds its liveness lock): one decided, one not.
    prepare_on(&w, "orphan", 1, "pgshard_0000dead_1_1_0").await;
    prepare_on(&w, "orphan", 2, "pgshard_0000dead_1_2_0").await;
    coord
        .batch_execute(
            "INSERT INTO pg_catalog.pg_dist_transaction (groupid, gid) \
             SELECT groupid, 'pgshard_0000dead_1_1_0' FROM pg_dist_node LIMIT 1",
        )
        .await
        .unwrap();
    // A live other instance: its lock is held by another session.
    let live = cl.direct(cl.coordinator_port).await;
    live.batch_execute(&format!(
        "SELECT pg_advisory_lock({}, {})",
        pgshard::transaction::LIVENESS_LOCK_NS,
        pgshard::transaction::lock_key("0000a11e").unwrap()
    ))
    .await
    .unwrap();
    prepare_on(&w, "orphan", 3, "pgshard_0000a11e_1_1_0").await;
    assert_eq!(prepared_orphans(&w).await, 3);
    let n = scalar_i64(&c, "SELECT recover_prepared_transactions()").await;
    assert_eq!(n, 2);
    assert_eq!(
        prepared_orphans(&w).await,
        1,
        "the live instance's is left alone"
    );
    assert_eq!(
        outcome(&w, "SELECT id FROM orphan ORDER BY id").await,
        "(1) ok 1"
    );
    assert_eq!(
        scalar_i64(
            &coord,
            "SELECT count(*) FROM pg_dist_transaction WHERE gid LIKE 'pgshard\\_0000dead%'"
        )
        .await,
        0,
        "decision records cleaned up"
    );
    // Once that instance is gone, its transaction goes too.
    drop(live);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let n = scalar_i64(&c, "SELECT recover_prepared_transactions()").await;
    assert_eq!(n, 1);
    assert_eq!(prepared_orphans(&w).await, 0);
    assert_eq!(
        outcome(&w, "SELECT id FROM orphan ORDER BY id").await,
        "(1) ok 1"
    );
}

// ---- TPC-B through crashes (dedicated cluster) -----------------------------

fn pgbench(env: &[(String, String)], args: &[&str]) -> String {
    let out = Command::new("pgbench")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(env.iter().map(|(k, v)| (k, v)))
        .args(args)
        .output()
        .expect("running pgbench");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "pgbench {args:?} failed:\n{text}");
    text
}

/// sum(abalance) = sum(tbalance) = sum(bbalance) = sum(delta).
async fn assert_invariant(c: &Client, when: &str) {
    // sum() across shards (NULL for no rows, counted as 0).
    let sums = [
        "SELECT sum(abalance) FROM pgbench_accounts",
        "SELECT sum(tbalance) FROM pgbench_tellers",
        "SELECT sum(bbalance) FROM pgbench_branches",
        "SELECT sum(delta) FROM pgbench_history",
    ];
    let mut got = Vec::new();
    for s in sums {
        let rows = sorted_rows(c, s).await;
        got.push(match rows.first().map(String::as_str) {
            None | Some("NULL") => 0,
            Some(v) => v.parse::<i64>().unwrap(),
        });
    }
    assert!(
        got.iter().all(|v| *v == got[0]),
        "TPC-B invariant {when}: {got:?}"
    );
}

/// Clients running TPC-B transactions until told to stop; each COMMIT that
/// succeeded is remembered by the tag written into its history row.
struct Load {
    stop: Arc<AtomicBool>,
    committed: Arc<Mutex<Vec<String>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    fn start(cl: &TestCluster, clients: usize, round: usize) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let committed = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for id in 0..clients {
            let (stop, committed) = (stop.clone(), committed.clone());
            let (host, port, user, password, db) = (
                cl.host.clone(),
                cl.port,
                cl.user.clone(),
                cl.password.clone(),
                cl.database.clone(),
            );
            tasks.push(tokio::spawn(async move {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let conn = tokio_postgres::Config::new()
                        .host(&host)
                        .port(port)
                        .user(&user)
                        .password(&password)
                        .dbname(&db)
                        .connect_timeout(Duration::from_secs(2))
                        .connect(tokio_postgres::NoTls)
                        .await;
                    let Ok((c, conn)) = conn else {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        continue;
                    };
                    let h = tokio::spawn(async move {
                        let _ = conn.await;
                    });
                    while !stop.load(Ordering::Relaxed) && !c.is_closed() {
                        n += 1;
                        let tag = format!("r{round}c{id}n{n}");
                        let (aid, tid, bid) = (
                            (rand::random::<u32>() % 100_000 + 1) as i32,
                            (rand::random::<u32>() % 10 + 1) as i32,
                            1i32,
                        );
                        let delta = (rand::random::<u32>() % 10_001) as i32 - 5000;
                        let r = async {
                            c.batch_execute("BEGIN").await?;
                            c.execute("UPDATE pgbench_accounts SET abalance = abalance + $1 WHERE aid = $2", &[&delta, &aid]).await?;
                            c.query("SELECT abalance FROM pgbench_accounts WHERE aid = $1", &[&aid]).await?;
                            c.execute("UPDATE pgbench_tellers SET tbalance = tbalance + $1 WHERE tid = $2", &[&delta, &tid]).await?;
                            c.execute("UPDATE pgbench_branches SET bbalance = bbalance + $1 WHERE bid = $2", &[&delta, &bid]).await?;
                            c.execute("INSERT INTO pgbench_history (tid, bid, aid, delta, mtime, filler) VALUES ($1, $2, $3, $4, CURRENT_TIMESTAMP, $5)", &[&tid, &bid, &aid, &delta, &tag]).await?;
                            c.batch_execute("COMMIT").await
                        }
                        .await;
                        match r {
                            Ok(()) => committed.lock().unwrap().push(tag),
                            Err(_) => {
                                let _ = c.batch_execute("ROLLBACK").await;
                            }
                        }
                    }
                    h.abort();
                }
            }));
        }
        Load {
            stop,
            committed,
            tasks,
        }
    }

    async fn finish(self) -> Vec<String> {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.tasks {
            let _ = tokio::time::timeout(Duration::from_secs(90), t).await;
        }
        let v = self.committed.lock().unwrap().clone();
        v
    }
}

fn pid_in(path: &Path) -> i32 {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

fn kill9(pid: i32) {
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let t = Instant::now();
    while pgshard::cluster::node::process_exists(pid as u32) {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "{pid} survives kill -9"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until pgshard answers and `recover_prepared_transactions()` ran after the
/// crash, then checks that nothing is left prepared anywhere.
async fn recover_and_check(cl: &TestCluster, committed: &[String], when: &str) {
    let t = Instant::now();
    let c = loop {
        let r = async {
            let (c, conn) = tokio_postgres::Config::new()
                .host(&cl.host)
                .port(cl.port)
                .user(&cl.user)
                .password(&cl.password)
                .dbname(&cl.database)
                .connect(tokio_postgres::NoTls)
                .await?;
            tokio::spawn(async move {
                let _ = conn.await;
            });
            c.query_one("SELECT recover_prepared_transactions()", &[])
                .await?;
            Ok::<_, tokio_postgres::Error>(c)
        }
        .await;
        match r {
            Ok(c) => break c,
            Err(e) => {
                assert!(
                    t.elapsed() < Duration::from_secs(60),
                    "{when}: no recovery: {e}"
                );
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        }
    };
    let mut ports = vec![cl.coordinator_port];
    ports.extend(&cl.worker_ports);
    for port in ports {
        let d = cl.direct(port).await;
        let left = scalar_i64(&d, "SELECT count(*) FROM pg_prepared_xacts").await;
        assert_eq!(left, 0, "{when}: prepared transactions left on {port}");
    }
    assert_invariant(&c, when).await;
    let rows = c
        .query(
            "SELECT filler FROM pgbench_history WHERE filler IS NOT NULL",
            &[],
        )
        .await
        .unwrap();
    let present: HashSet<String> = rows
        .iter()
        .map(|r| r.get::<_, String>(0).trim().to_string())
        .collect();
    let missing: Vec<&String> = committed.iter().filter(|t| !present.contains(*t)).collect();
    assert!(
        missing.is_empty(),
        "{when}: {} of {} committed transactions missing, e.g. {:?}",
        missing.len(),
        committed.len(),
        &missing[..missing.len().min(5)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tpcb_invariant_through_crashes() {
    let dir = run_dir().join("crash");
    teardown_at_exit(Teardown::Cluster(dir.clone()));
    cluster_up(&dir, alloc_ports(4));
    let info = pgshard::cluster::cluster_info(&dir).unwrap();
    let cl = TestCluster {
        dir: dir.clone(),
        info,
    };
    let env = cl.pg_env();
    pgbench(&env, &["-i", "-s", "1", "-q"]);
    psql(
        &env,
        &[
            "-c",
            "SET citus.shard_count = 32",
            "-c",
            "SELECT create_distributed_table('pgbench_accounts','aid')",
            "-c",
            "SELECT create_distributed_table('pgbench_branches','bid')",
            "-c",
            "SELECT create_distributed_table('pgbench_tellers','tid')",
            "-c",
            "SELECT create_distributed_table('pgbench_history','aid')",
        ],
    );
    // TPC-B with the real pgbench, while recovery runs again and again: it must leave
    // every transaction of a healthy load to its session. Acting on one that its
    // session finished meanwhile shows as a "does not exist" ERROR in a worker's log.
    let stop = Arc::new(AtomicBool::new(false));
    let recoverer = {
        let c = cl.client().await;
        let stop = stop.clone();
        tokio::spawn(async move {
            let (mut runs, mut resolved) = (0, 0);
            while !stop.load(Ordering::Relaxed) {
                resolved += scalar_i64(&c, "SELECT recover_prepared_transactions()::int8").await;
                runs += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            (runs, resolved)
        })
    };
    let out = pgbench(&env, &["-M", "prepared", "-c", "16", "-j", "2", "-T", "10"]);
    assert!(out.contains("number of failed transactions: 0"), "{out}");
    stop.store(true, Ordering::Relaxed);
    let (runs, resolved) = recoverer.await.unwrap();
    assert!(runs >= 20, "recovery ran {runs} times during the load");
    assert_eq!(
        resolved, 0,
        "recovery resolved transactions of live sessions"
    );
    for w in ["worker1", "worker2"] {
        let log = std::fs::read_to_string(dir.join("logs").join(format!("{w}.log"))).unwrap();
        let raced: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("prepared transaction with identifier"))
            .collect();
        assert!(raced.is_empty(), "{w}: {raced:?}");
    }
    let c = cl.client().await;
    assert_invariant(&c, "after pgbench").await;
    drop(c);

    let mut all_committed = Vec::new();
    let up = |cl: &TestCluster| {
        cluster_up(&cl.dir, cl.port);
    };
    let worker1 = dir.join("worker1");
    let coordinator = dir.join("coordinator");
    for round in 0..6 {
        let load = Load::start(&cl, 8, round);
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let what = match round % 3 {
            0 => {
                kill9(pid_in(&dir.join("pgshard.pid")));
                "kill -9 of pgshard"
            }
            1 => {
                // A session inside a block on that worker sees the node named.
                let probe = cl.client().await;
                let port: i64 = scalar_i64(&probe, "SELECT nodeport::int8 FROM pg_dist_shard_placement WHERE shardid = (SELECT get_shard_id_for_distribution_column('pgbench_accounts', 1))").await;
                probe.batch_execute("BEGIN").await.unwrap();
                probe
                    .execute(
                        "UPDATE pgbench_accounts SET abalance = abalance WHERE aid = 1",
                        &[],
                    )
                    .await
                    .unwrap();
                let dir_of = if port as u16 == cl.worker_ports[0] {
                    worker1.clone()
                } else {
                    dir.join("worker2")
                };
                kill9(pid_in(&dir_of.join("postmaster.pid")));
                let e = probe
                    .execute(
                        "UPDATE pgbench_accounts SET abalance = abalance WHERE aid = 1",
                        &[],
                    )
                    .await
                    .unwrap_err();
                let text = e
                    .as_db_error()
                    .map(|d| d.message().to_string())
                    .unwrap_or(e.to_string());
                assert!(text.contains(&port.to_string()), "names the node: {text}");
                probe.batch_execute("ROLLBACK").await.unwrap();
                assert_eq!(scalar_i64(&probe, "SELECT 1::int8").await, 1);
                "kill -9 of a worker"
            }
            _ => {
                let node = pgshard::cluster::node::Node {
                    name: "coordinator".into(),
                    data_dir: coordinator.clone(),
                    listen_host: String::new(),
                    port: 0,
                    socket_dir: std::path::PathBuf::new(),
                    log_file: std::path::PathBuf::new(),
                };
                node.stop().unwrap();
                "stop of the coordinator node"
            }
        };
        tokio::time::sleep(Duration::from_millis(1000)).await;
        up(&cl);
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let committed = load.finish().await;
        assert!(!committed.is_empty(), "round {round}: nothing committed");
        all_committed.extend(committed);
        recover_and_check(&cl, &all_committed, &format!("round {round} ({what})")).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chained_blocks_and_lock_table_behave_as_in_postgres() {
    let cl = cluster();
    let pg = cl.client().await;
    let plain = plain_postgres().client().await;
    pg.batch_execute(
        "CREATE TABLE ch (id int PRIMARY KEY, v int); COMMIT; SELECT create_distributed_table('ch', 'id')",
    )
    .await
    .unwrap();
    plain
        .batch_execute("CREATE TABLE ch (id int PRIMARY KEY, v int)")
        .await
        .unwrap();
    let (a, b) = common::keys_on_two_workers_from(&pg, "ch", 0).await;
    for c in [&pg, &plain] {
        c.batch_execute(&format!("INSERT INTO ch VALUES ({a}, 1), ({b}, 1)"))
            .await
            .unwrap();
    }
    // Read on the worker holding key k: the block's characteristics there.
    let q = |k: i32| {
        format!(
            "SELECT v, current_setting('transaction_isolation'), \
             current_setting('transaction_read_only') FROM ch WHERE id = {k}"
        )
    };
    let (qa, qb) = (q(a), q(b));
    let (ua, ub) = (
        format!("UPDATE ch SET v = v + 1 WHERE id = {a}"),
        format!("UPDATE ch SET v = v + 1 WHERE id = {b}"),
    );
    let script: Vec<&str> = vec![
        // AND CHAIN outside a block: 25P01.
        "COMMIT AND CHAIN",
        "ROLLBACK AND CHAIN",
        // A chained block keeps the BEGIN options, on every node, after a 2PC commit.
        "BEGIN ISOLATION LEVEL REPEATABLE READ",
        &ua,
        &ub,
        "COMMIT AND CHAIN",
        &qa,
        &qb,
        "ROLLBACK",
        &qa,
        &qb,
        // SET TRANSACTION modes are kept too; ROLLBACK AND CHAIN undoes the writes.
        "BEGIN",
        "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE, READ ONLY",
        "ROLLBACK AND CHAIN",
        &qa,
        &ua,
        // A failed block: COMMIT AND CHAIN rolls back and still chains.
        "COMMIT AND CHAIN",
        &qb,
        "COMMIT",
        "BEGIN",
        &ua,
        "ROLLBACK AND CHAIN",
        &ub,
        "COMMIT",
        &qa,
        &qb,
        // LOCK TABLE: only in blocks, every option, with local tables, unknown tables.
        "LOCK TABLE ch",
        "BEGIN",
        "LOCK TABLE ch IN SHARE MODE",
        &qa,
        &ub,
        "COMMIT",
        &qb,
        "BEGIN",
        "LOCK ch, pg_catalog.pg_class IN ACCESS SHARE MODE NOWAIT",
        "COMMIT",
        "BEGIN",
        "LOCK ch, no_such_table",
        "ROLLBACK",
    ];
    for sql in script {
        let got = outcome(&pg, sql).await;
        let want = outcome(&plain, sql).await;
        assert_eq!(got, want, "{sql}");
    }
    common::assert_no_prepared_xacts().await;

    // A lock taken through pgshard holds on every worker's shards: writes to either
    // key wait for the block and go on once it ends. (Simple protocol: a routed write
    // then never touches the coordinator node's shell, whose lock would hold it too.)
    let holder = cl.client().await;
    holder
        .batch_execute("BEGIN; LOCK TABLE ch IN EXCLUSIVE MODE")
        .await
        .unwrap();
    let mut waiters = Vec::new();
    for u in [&ua, &ub] {
        let c = cl.client().await;
        let u = u.clone();
        waiters.push(tokio::spawn(async move { outcome(&c, &u).await }));
    }
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(
        waiters.iter().all(|w| !w.is_finished()),
        "a write went past LOCK TABLE ch IN EXCLUSIVE MODE"
    );
    // NOWAIT fails at once with PostgreSQL's 55P03.
    let other = cl.client().await;
    other.batch_execute("BEGIN").await.unwrap();
    assert_eq!(
        outcome(&other, "LOCK TABLE ch IN SHARE MODE NOWAIT").await,
        "error 55P03"
    );
    other.batch_execute("ROLLBACK").await.unwrap();
    holder.batch_execute("COMMIT").await.unwrap();
    for w in waiters {
        let done = tokio::time::timeout(Duration::from_secs(10), w)
            .await
            .expect("the write waited past the end of the lock's block")
            .unwrap();
        assert_eq!(done, "ok 1");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cursors_over_distributed_tables_behave_as_in_postgres() {
    let cl = cluster();
    let pg = cl.client().await;
    let plain_pg = plain_postgres();
    let plain = plain_pg.client().await;
    pg.batch_execute(
        "CREATE TABLE cur (id int PRIMARY KEY, v text, n numeric(8,2)); COMMIT; \
         SELECT create_distributed_table('cur', 'id')",
    )
    .await
    .unwrap();
    plain
        .batch_execute("CREATE TABLE cur (id int PRIMARY KEY, v text, n numeric(8,2))")
        .await
        .unwrap();
    for c in [&pg, &plain] {
        c.batch_execute(
            "INSERT INTO cur SELECT g, 'v' || g, g / 4.0 FROM generate_series(1, 40) g; \
             INSERT INTO cur VALUES (41, NULL, NULL)",
        )
        .await
        .unwrap();
    }
    let script = [
        // Outside a block: 25P01.
        "DECLARE c CURSOR FOR SELECT * FROM cur",
        // Multi-shard with ORDER BY, read forwards in pieces, then MOVE, FETCH ALL.
        "BEGIN",
        "DECLARE c CURSOR FOR SELECT id, v, n FROM cur WHERE id % 3 = 0 ORDER BY n DESC NULLS FIRST, id",
        "FETCH 4 FROM c",
        "FETCH NEXT FROM c",
        "MOVE FORWARD 2 IN c",
        "FETCH ALL FROM c",
        "FETCH c",
        "CLOSE c",
        // A routed cursor, an aggregate, and SCROLL with every direction.
        "DECLARE r CURSOR FOR SELECT v, n FROM cur WHERE id = 7",
        "DECLARE a CURSOR FOR SELECT count(*), sum(n), max(v) FROM cur",
        "DECLARE s SCROLL CURSOR FOR SELECT id FROM cur WHERE id <= 6 ORDER BY id",
        "FETCH ALL FROM r",
        "FETCH a",
        "FETCH LAST FROM s",
        "FETCH PRIOR FROM s",
        "FETCH ABSOLUTE 2 FROM s",
        "FETCH RELATIVE 2 FROM s",
        "FETCH BACKWARD 2 FROM s",
        "FETCH FIRST FROM s",
        // Cursor names are PostgreSQL's: a duplicate fails the block.
        "DECLARE s CURSOR FOR SELECT id FROM cur",
        "ROLLBACK",
        // The cursor sees the block's own earlier writes on the shards.
        "BEGIN",
        "UPDATE cur SET v = 'changed' WHERE id = 5",
        "DECLARE w CURSOR FOR SELECT id, v FROM cur WHERE id BETWEEN 4 AND 6 ORDER BY id",
        "FETCH ALL w",
        "ROLLBACK",
        "SELECT v FROM cur WHERE id = 5",
        // Cursors end with the block.
        "BEGIN",
        "DECLARE e CURSOR FOR SELECT id FROM cur ORDER BY id",
        "COMMIT",
        "FETCH e",
    ];
    for sql in script {
        let got = outcome(&pg, sql).await;
        let want = outcome(&plain, sql).await;
        assert_eq!(got, want, "{sql}");
    }
    // WITH HOLD would outlive the block's coordinator connection: refused.
    assert_eq!(
        outcome(
            &pg,
            "BEGIN; DECLARE h CURSOR WITH HOLD FOR SELECT * FROM cur; COMMIT"
        )
        .await,
        "error 0A000"
    );
    pg.batch_execute("ROLLBACK").await.unwrap();

    // psql with FETCH_COUNT reads every query through a cursor.
    let query = "SELECT id, v, n FROM cur ORDER BY n NULLS FIRST, id";
    let plain_env = vec![
        ("PGHOST".to_string(), plain_pg.host.clone()),
        ("PGPORT".to_string(), plain_pg.port.to_string()),
        ("PGUSER".to_string(), plain_pg.user.clone()),
        ("PGPASSWORD".to_string(), plain_pg.password.clone()),
        ("PGDATABASE".to_string(), plain_pg.database.clone()),
    ];
    let args = ["-v", "FETCH_COUNT=7", "-c", query];
    let got = psql(&cl.pg_env(), &args);
    assert_eq!(got.lines().count(), 41);
    assert_eq!(got, psql(&plain_env, &args));
}
