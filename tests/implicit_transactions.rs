//! A simple query string of several statements is one implicit transaction, as in
//! PostgreSQL (issues 17 and 18), also when it names distributed and reference tables:
//! an error rolls back every statement before it on every node, COMMIT / ROLLBACK in
//! the string end the implicit transaction and the next statements start another, a
//! BEGIN makes it a block that stays open after the string, SAVEPOINT and VACUUM are
//! refused as PostgreSQL refuses them there, a failed string undoes its SETs, and a
//! string writing two shards on different workers and a reference table commits
//! atomically (2PC). Every string runs through pgshard and on one plain PostgreSQL
//! holding the same tables; outcomes (rows, tags, SQLSTATE) and the rows left must be
//! the same. Statements pgshard cannot run inside a block (`create_distributed_table`)
//! are refused with 0A000 in such a string, leaving nothing of it behind.

mod common;

use common::{assert_no_prepared_xacts, cluster, plain_postgres};
use tokio_postgres::{Client, SimpleQueryMessage};

/// What a query string gave: its rows and command tags, or its SQLSTATE.
async fn outcome(c: &Client, sql: &str) -> String {
    match c.simple_query(sql).await {
        Ok(msgs) => msgs
            .iter()
            .filter_map(|m| match m {
                SimpleQueryMessage::Row(r) => Some(format!(
                    "({})",
                    (0..r.len())
                        .map(|i| r.get(i).unwrap_or("NULL"))
                        .collect::<Vec<_>>()
                        .join(",")
                )),
                SimpleQueryMessage::CommandComplete(n) => Some(format!("ok {n}")),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join(" "),
        Err(e) => format!(
            "error {}",
            e.code()
                .map(|c| c.code().to_string())
                .unwrap_or_else(|| e.to_string())
        ),
    }
}

/// Every table's rows, in order.
const CONTENTS: &[&str] = &[
    "SELECT k, v FROM it_d ORDER BY k",
    "SELECT k, v FROM it_ref ORDER BY k",
    "SELECT k, v FROM it_local ORDER BY k",
];

const SETUP: &[&str] = &[
    "DROP TABLE IF EXISTS it_d, it_ref, it_local, it_new",
    "CREATE TABLE it_d (k int PRIMARY KEY, v int)",
    "CREATE TABLE it_ref (k int PRIMARY KEY, v int)",
    "CREATE TABLE it_local (k int PRIMARY KEY, v int)",
];

/// The clients (pgshard, plain) and two keys of `it_d` whose shards are on different
/// workers.
async fn setup() -> (Client, Client, i32, i32) {
    let cl = cluster();
    let shard = cl.client().await;
    let plain = plain_postgres().client().await;
    for sql in SETUP {
        shard
            .batch_execute(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        plain
            .batch_execute(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    for sql in [
        "SET citus.shard_count = 2",
        "SELECT create_distributed_table('it_d', 'k')",
        "SELECT create_reference_table('it_ref')",
        "RESET citus.shard_count",
    ] {
        shard
            .batch_execute(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    // Two shards, one per worker: two keys in different shards are on different workers.
    let node_of = |k: i32| {
        let shard = &shard;
        async move {
            let sql = format!(
                "SELECT nodeport FROM pg_dist_shard_placement WHERE shardid = \
                 get_shard_id_for_distribution_column('it_d', {k})"
            );
            outcome(shard, &sql).await
        }
    };
    let first = node_of(1).await;
    let mut other = None;
    for k in 2..50 {
        if node_of(k).await != first {
            other = Some(k);
            break;
        }
    }
    let other = other.expect("a key on the other worker");
    (shard, plain, 1, other)
}

/// Runs each case (reset, then its strings) on both servers: same outcomes, same rows.
/// Returns the differences.
async fn compare(shard: &Client, plain: &Client, name: &str, strings: &[&str]) -> Vec<String> {
    for c in [shard, plain] {
        for sql in [
            "TRUNCATE it_d",
            "TRUNCATE it_ref",
            "TRUNCATE it_local",
            "RESET ALL",
        ] {
            c.batch_execute(sql)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
        }
    }
    let mut differences = Vec::new();
    for sql in strings.iter().copied().chain(CONTENTS.iter().copied()) {
        let through = outcome(shard, sql).await;
        let expected = outcome(plain, sql).await;
        if through != expected {
            differences.push(format!(
                "case {name}: {sql}\n  pgshard:    {through}\n  PostgreSQL: {expected}"
            ));
        }
    }
    differences
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_statement_strings_are_one_transaction() {
    let (shard, plain, a, b) = setup().await;
    let cases: Vec<(&str, Vec<String>)> = vec![
        (
            "an error rolls back the rows before it",
            vec![format!(
                "insert into it_d values ({a}, 1); insert into it_d values ({b}, 2); select 1/0"
            )],
        ),
        (
            "without error both rows commit",
            vec![format!(
                "insert into it_d values ({a}, 1); insert into it_d values ({b}, 2); \
                 select count(*) from it_d"
            )],
        ),
        (
            "commit in the middle keeps what came before it",
            vec![format!(
                "insert into it_d values ({a}, 1); commit; insert into it_d values ({b}, 2); \
                 select 1/0"
            )],
        ),
        (
            "rollback in the middle",
            vec![format!(
                "insert into it_d values ({a}, 1); insert into it_local values (1, 1); \
                 rollback; insert into it_d values ({b}, 2); insert into it_local values (2, 2)"
            )],
        ),
        (
            "begin leaves a block open, earlier statements in it (rolled back)",
            vec![
                format!(
                    "insert into it_d values ({a}, 1); begin; insert into it_d values ({b}, 2)"
                ),
                "savepoint s1".into(),
                "select count(*) from it_d".into(),
                "rollback".into(),
            ],
        ),
        (
            "begin leaves a block open (committed)",
            vec![
                format!(
                    "insert into it_ref values (1, 1); begin; insert into it_d values ({b}, 2)"
                ),
                format!("insert into it_d values ({a}, 3)"),
                "commit".into(),
            ],
        ),
        (
            "begin then an error leaves the block aborted",
            vec![
                format!("insert into it_d values ({a}, 1); begin; select 1/0"),
                "select 1".into(),
                "rollback".into(),
            ],
        ),
        (
            "a unique violation on a worker undoes the rest",
            vec![format!(
                "insert into it_d values ({a}, 1); insert into it_local values (1, 1); \
                 insert into it_ref values (1, 1); insert into it_d values ({a}, 2)"
            )],
        ),
        (
            "a failed string's SET is undone",
            vec![
                format!("set work_mem = '7MB'; insert into it_d values ({a}, 1); select 1/0"),
                "show work_mem".into(),
            ],
        ),
        (
            "a SET of a string that commits stays",
            vec![
                format!("set work_mem = '7MB'; insert into it_d values ({a}, 1)"),
                "show work_mem".into(),
                format!("set local work_mem = '9MB'; select count(*) from it_d where k = {a}"),
                "show work_mem".into(),
            ],
        ),
        (
            "reference table and two workers: all or nothing",
            vec![
                format!(
                    "insert into it_ref values (1, 1); insert into it_d values ({a}, 1); \
                     insert into it_d values ({b}, 2); update it_d set v = v + 10; select 1/0"
                ),
                format!(
                    "insert into it_ref values (2, 2); insert into it_d values ({a}, 3); \
                     insert into it_d values ({b}, 4); update it_d set v = v + 10"
                ),
            ],
        ),
        (
            "savepoint is refused in an implicit transaction",
            vec![format!("insert into it_d values ({a}, 1); savepoint s1")],
        ),
        (
            "commit and chain is refused in an implicit transaction",
            vec![format!("insert into it_d values ({a}, 1); commit and chain")],
        ),
        (
            "vacuum is refused in a multi-statement string",
            vec![format!("insert into it_d values ({a}, 1); vacuum it_d")],
        ),
        (
            "vacuum after commit is still refused in a multi-statement string",
            vec![format!("insert into it_d values ({a}, 1); commit; vacuum it_d")],
        ),
        (
            "create index concurrently is refused in a multi-statement string",
            vec![format!(
                "insert into it_d values ({a}, 1); commit; create index concurrently it_d_v on it_d (v)"
            )],
        ),
        (
            "a statement after commit that fails keeps the commit",
            vec![format!(
                "insert into it_d values ({a}, 1); commit; insert into it_d values ({a}, 2)"
            )],
        ),
    ];
    let mut differences = Vec::new();
    for (name, strings) in &cases {
        let strings: Vec<&str> = strings.iter().map(String::as_str).collect();
        differences.extend(compare(&shard, &plain, name, &strings).await);
    }
    assert!(differences.is_empty(), "{}", differences.join("\n"));
    assert_no_prepared_xacts().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_cannot_run_in_a_block_is_refused_in_a_string() {
    let cl = cluster();
    let c = cl.client().await;
    c.batch_execute("DROP TABLE IF EXISTS it_cdt")
        .await
        .unwrap();
    let e = c
        .simple_query("create table it_cdt (k int); select create_distributed_table('it_cdt', 'k')")
        .await
        .expect_err("refused");
    let db = e.as_db_error().expect("a server error");
    assert_eq!(db.code().code(), "0A000", "{db:?}");
    assert!(db.message().contains("several statements"), "{db:?}");
    // The CREATE TABLE before it went with it.
    let n = outcome(&c, "SELECT count(*) FROM pg_class WHERE relname = 'it_cdt'").await;
    assert_eq!(n, "(0) ok 1");
    // Alone, each runs.
    c.batch_execute("create table it_cdt (k int)")
        .await
        .unwrap();
    c.batch_execute("select create_distributed_table('it_cdt', 'k')")
        .await
        .unwrap();
    // Alone in its implicit transaction (a COMMIT after it), it runs as on its own,
    // and the statements after it are planned with the new catalog.
    c.batch_execute("DROP TABLE it_cdt").await.unwrap();
    let r = outcome(
        &c,
        "create table it_cdt (k int); commit; select create_distributed_table('it_cdt', 'k'); \
         commit; insert into it_cdt values (1), (2); select count(*) from it_cdt",
    )
    .await;
    assert_eq!(r, "ok 0 ok 0 () ok 1 ok 0 ok 2 (2) ok 1");
    let shards = outcome(
        &c,
        "SELECT count(*) FROM pg_dist_shard WHERE logicalrelid = 'it_cdt'::regclass",
    )
    .await;
    assert_ne!(shards, "(0) ok 1");
    // Not when something else is in its implicit transaction.
    let e = c
        .simple_query("insert into it_cdt values (3); drop table it_cdt; commit")
        .await
        .expect_err("refused");
    assert_eq!(e.code().map(|c| c.code()), Some("0A000"), "{e:?}");
    let n = outcome(&c, "SELECT count(*) FROM it_cdt").await;
    assert_eq!(n, "(2) ok 1");
    // A read-only Citus function may share a string.
    let r = outcome(
        &c,
        "insert into it_cdt values (1); select get_shard_id_for_distribution_column('it_cdt', 1) > 0",
    )
    .await;
    assert_eq!(r, "ok 1 (t) ok 1");
    c.batch_execute("DROP TABLE it_cdt").await.unwrap();
}
