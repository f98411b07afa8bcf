//! Citus's statistics views through pgshard, with real clients: `citus_stat_statements`
//! counting distributed statements by shape and partition key (simple and prepared,
//! routed and multi-shard) under `citus.stat_statements_track`, and
//! `citus_stat_statements_reset()`; `citus_dist_stat_activity` / `citus_stat_activity`
//! showing two sessions, one blocked by the other's row lock on a distributed table,
//! with their statements and the node backends running them; `citus_lock_waits`
//! showing that wait; and a role without privileges seeing others' statements as
//! `<insufficient privilege>`, as `pg_stat_activity` shows them on PostgreSQL.

mod common;

use common::{cluster, connect, scalar, simple_rows};
use std::time::{Duration, Instant};
use tokio_postgres::Client;

async fn exec(c: &Client, sql: &str) {
    c.batch_execute(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
}

/// Each statement of `script` (split on "; ") as a query string of its own.
async fn each(c: &Client, script: &str) {
    for sql in script.split("; ") {
        exec(c, sql).await;
    }
}

async fn rows(c: &Client, sql: &str) -> Vec<Vec<Option<String>>> {
    simple_rows(c, sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"))
}

fn row(vals: &[Option<&str>]) -> Vec<Option<String>> {
    vals.iter().map(|v| v.map(str::to_string)).collect()
}

/// Statements counted per shape, executor and partition key; nothing while tracking
/// is `none` (Citus's default); reset clears the counters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statements_counted_by_shape_and_partition_key() {
    let c = cluster().client().await;
    each(
        &c,
        "DROP TABLE IF EXISTS st_events; CREATE TABLE st_events (k int, v text); \
         SELECT create_distributed_table('st_events', 'k'); \
         INSERT INTO st_events VALUES (1, 'a'), (2, 'b'), (3, 'c')",
    )
    .await;
    assert_eq!(scalar(&c, "SHOW citus.stat_statements_track").await, "none");
    // Tracking is off: nothing is counted.
    exec(&c, "SELECT v FROM st_events WHERE k = 3").await;
    exec(&c, "SET citus.stat_statements_track TO 'all'").await;
    exec(&c, "SELECT citus_stat_statements_reset()").await;
    for sql in [
        "SELECT v FROM st_events WHERE k = 1",
        "select v from st_events where k = 1",
        "SELECT v FROM st_events WHERE k = 2",
        "SELECT count(*) FROM st_events",
        "SELECT count(*) FROM st_events",
        "UPDATE st_events SET v = 'x' WHERE k = 2",
    ] {
        exec(&c, sql).await;
    }
    let prepared = c
        .prepare("SELECT v FROM st_events WHERE k = $1")
        .await
        .unwrap();
    for k in [1i32, 1, 3] {
        c.query(&prepared, &[&k]).await.unwrap();
    }
    let counted = "SELECT query, executor, partition_key, calls FROM citus_stat_statements \
                   WHERE query LIKE '%st_events%' ORDER BY query, partition_key, calls";
    let by_shape = rows(&c, counted).await;
    assert_eq!(
        by_shape,
        vec![
            row(&[
                Some("SELECT count(*) FROM st_events"),
                Some("adaptive"),
                None,
                Some("2")
            ]),
            row(&[
                Some("SELECT v FROM st_events WHERE k = $1"),
                Some("adaptive"),
                Some("1"),
                Some("4")
            ]),
            row(&[
                Some("SELECT v FROM st_events WHERE k = $1"),
                Some("adaptive"),
                Some("2"),
                Some("1")
            ]),
            row(&[
                Some("SELECT v FROM st_events WHERE k = $1"),
                Some("adaptive"),
                Some("3"),
                Some("1")
            ]),
            row(&[
                Some("UPDATE st_events SET v = $1 WHERE k = $2"),
                Some("adaptive"),
                Some("2"),
                Some("1")
            ]),
        ],
        "{by_shape:?}"
    );
    // A constant and a parameter are one shape (pg_query's fingerprint).
    assert_eq!(
        scalar(
            &c,
            "SELECT count(DISTINCT queryid) FROM citus_stat_statements \
             WHERE query = 'SELECT v FROM st_events WHERE k = $1'"
        )
        .await,
        "1"
    );
    // userid and dbid are the session's role and database.
    assert_eq!(
        scalar(
            &c,
            "SELECT bool_and(userid = (SELECT oid FROM pg_roles WHERE rolname = current_user) \
             AND dbid = (SELECT oid FROM pg_database WHERE datname = current_database())) \
             FROM citus_stat_statements WHERE query LIKE '%st_events%'"
        )
        .await,
        "t"
    );
    // Another session, with Citus's default: not counted.
    let other = cluster().client().await;
    exec(&other, "SELECT v FROM st_events WHERE k = 3").await;
    exec(&other, "SELECT count(*) FROM st_events").await;
    assert_eq!(rows(&c, counted).await, by_shape);
    exec(&c, "SELECT citus_stat_statements_reset()").await;
    assert_eq!(
        scalar(
            &c,
            "SELECT count(*) FROM citus_stat_statements WHERE query LIKE '%st_events%'"
        )
        .await,
        "0"
    );
    exec(&c, "DROP TABLE st_events").await; // alone
}

/// The first value of `sql` once it is not empty, within 20 s.
async fn eventually(c: &Client, sql: &str) -> String {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let v = scalar(c, sql).await;
        if !v.is_empty() {
            return v;
        }
        assert!(Instant::now() < until, "never answered: {sql}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Two sessions, one waiting for the other's row lock on a distributed table: both in
/// `citus_dist_stat_activity` with their statements, the waiting one's node backend
/// in `citus_stat_activity` on the shard's node, the wait in `citus_lock_waits`; a
/// role without privileges sees the others' statements hidden.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn activity_and_lock_waits_of_blocked_sessions() {
    let admin = cluster().client().await;
    each(
        &admin,
        "DROP TABLE IF EXISTS sa_accounts; DROP ROLE IF EXISTS sa_viewer; \
         CREATE TABLE sa_accounts (id int PRIMARY KEY, balance int); \
         SELECT create_distributed_table('sa_accounts', 'id'); \
         INSERT INTO sa_accounts VALUES (1, 0), (2, 0); \
         CREATE ROLE sa_viewer LOGIN PASSWORD 'sa viewer pw'",
    )
    .await;
    let holder = cluster().client().await;
    let waiter = cluster().client().await;
    let holder_pid = scalar(&holder, "SELECT pg_backend_pid()").await;
    let waiter_pid = scalar(&waiter, "SELECT pg_backend_pid()").await;
    exec(
        &holder,
        "BEGIN; UPDATE sa_accounts SET balance = balance + 1 WHERE id = 1",
    )
    .await;
    let blocked = tokio::spawn(async move {
        waiter
            .simple_query("UPDATE sa_accounts SET balance = balance + 2 WHERE id = 1")
            .await
            .map(|_| ())
    });
    let gpid_of =
        |pid: &str| format!("(SELECT global_pid FROM citus_dist_stat_activity WHERE pid = {pid})");
    let wait = eventually(
        &admin,
        &format!(
            "SELECT concat_ws('|', blocked_statement, current_statement_in_blocking_process, \
               waiting_gpid = {}, blocking_gpid = {}, waiting_nodeid = blocking_nodeid) \
             FROM citus_lock_waits WHERE waiting_gpid % 10000000000 = {waiter_pid}",
            gpid_of(&waiter_pid),
            gpid_of(&holder_pid)
        ),
    )
    .await;
    assert_eq!(
        wait,
        "UPDATE sa_accounts SET balance = balance + 2 WHERE id = 1|\
         BEGIN; UPDATE sa_accounts SET balance = balance + 1 WHERE id = 1|t|t|t"
    );
    let sessions = rows(
        &admin,
        &format!(
            "SELECT pid::text = '{holder_pid}', state, query, is_worker_query, \
               global_pid % 10000000000 = pid, usename = current_user \
             FROM citus_dist_stat_activity WHERE pid IN ({holder_pid}, {waiter_pid}) ORDER BY 1 DESC"
        ),
    )
    .await;
    assert_eq!(
        sessions,
        vec![
            row(&[
                Some("t"),
                Some("idle in transaction"),
                Some("BEGIN; UPDATE sa_accounts SET balance = balance + 1 WHERE id = 1"),
                Some("f"),
                Some("t"),
                Some("t"),
            ]),
            row(&[
                Some("f"),
                Some("active"),
                Some("UPDATE sa_accounts SET balance = balance + 2 WHERE id = 1"),
                Some("f"),
                Some("t"),
                Some("t"),
            ]),
        ]
    );
    // The node backends: the waiting one on the shard's node, waiting for a lock.
    let shard_node = scalar(
        &admin,
        "SELECT n.nodeid FROM pg_dist_placement p JOIN pg_dist_node n ON n.groupid = p.groupid \
         WHERE p.shardid = get_shard_id_for_distribution_column('sa_accounts', 1)",
    )
    .await;
    let on_nodes = rows(
        &admin,
        &format!(
            "SELECT nodeid::text, wait_event_type, query LIKE '%sa_accounts_%' \
             FROM citus_stat_activity WHERE is_worker_query AND global_pid = {} \
             AND wait_event_type = 'Lock'",
            gpid_of(&waiter_pid)
        ),
    )
    .await;
    assert_eq!(
        on_nodes,
        vec![row(&[Some(&shard_node), Some("Lock"), Some("t")])]
    );
    assert_eq!(
        scalar(
            &admin,
            &format!(
                "SELECT count(*) FROM citus_stat_activity WHERE is_worker_query \
                 AND global_pid = {} AND nodeid = {shard_node}",
                gpid_of(&holder_pid)
            )
        )
        .await,
        "1"
    );
    // A role without privileges: others' statements hidden, its own shown.
    let cl = cluster();
    let viewer = connect(&cl.host, cl.port, "sa_viewer", "sa viewer pw", &cl.database).await;
    let seen = rows(
        &viewer,
        &format!(
            "SELECT query, state IS NULL FROM citus_dist_stat_activity \
             WHERE pid IN ({holder_pid}, {waiter_pid}) \
             UNION ALL SELECT query, state IS NULL FROM citus_dist_stat_activity \
             WHERE pid = pg_backend_pid()"
        ),
    )
    .await;
    let own = "SELECT query, state IS NULL FROM citus_dist_stat_activity";
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert_eq!(seen[0], row(&[Some("<insufficient privilege>"), Some("t")]));
    assert_eq!(seen[1], row(&[Some("<insufficient privilege>"), Some("t")]));
    assert!(seen[2][0].as_deref().unwrap().starts_with(own), "{seen:?}");
    assert_eq!(
        scalar(
            &viewer,
            "SELECT count(*) FROM citus_lock_waits \
             WHERE blocked_statement <> '<insufficient privilege>'"
        )
        .await,
        "0"
    );
    assert_eq!(
        scalar(
            &viewer,
            "SELECT count(*) FROM citus_stat_activity \
             WHERE is_worker_query AND query <> '<insufficient privilege>'"
        )
        .await,
        "0"
    );
    // The same rule as PostgreSQL's own pg_stat_activity on the coordinator node.
    assert_eq!(
        scalar(
            &viewer,
            &format!("SELECT query FROM pg_stat_activity WHERE pid = {holder_pid}")
        )
        .await,
        "<insufficient privilege>"
    );
    drop(viewer);
    exec(&holder, "COMMIT").await;
    blocked.await.unwrap().unwrap();
    assert_eq!(
        scalar(&admin, "SELECT balance FROM sa_accounts WHERE id = 1").await,
        "3"
    );
    // A prepared statement reading a view answers with the rows of each execution.
    let prepared = admin
        .prepare("SELECT state FROM citus_dist_stat_activity WHERE pid = $1::text::int")
        .await
        .unwrap();
    exec(&holder, "BEGIN").await;
    let state = |rows: Vec<tokio_postgres::Row>| rows[0].get::<_, String>(0);
    assert_eq!(
        state(admin.query(&prepared, &[&holder_pid]).await.unwrap()),
        "idle in transaction"
    );
    exec(&holder, "COMMIT").await;
    assert_eq!(
        state(admin.query(&prepared, &[&holder_pid]).await.unwrap()),
        "idle"
    );
    each(&admin, "DROP TABLE sa_accounts; DROP ROLE sa_viewer").await;
}
