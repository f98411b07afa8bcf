//! Every client is its own session, as on one PostgreSQL: its own role on every node
//! (privileges checked by the nodes as for that role), its own `SET ROLE` / `SET
//! SESSION AUTHORIZATION` that never reach another client, its own temporary tables,
//! advisory locks and LISTEN channels, a BackendKeyData that cancels and terminates
//! only its own work, and Parse/Describe that see its own block's uncommitted DDL.
//! Outcomes are compared with one plain PostgreSQL holding the same objects.

mod common;

use common::{cluster, connect, plain_postgres};
use futures_util::{stream, StreamExt};
use std::time::Duration;
use tokio_postgres::{AsyncMessage, Client, NoTls, SimpleQueryMessage};

/// What a statement gave: its rows as text, or its SQLSTATE.
fn outcome(
    r: Result<Vec<SimpleQueryMessage>, tokio_postgres::Error>,
) -> Result<Vec<Vec<Option<String>>>, String> {
    match r {
        Ok(msgs) => Ok(common::sorted_simple_rows(&msgs)),
        Err(e) => Err(e
            .as_db_error()
            .map(|d| d.code().code().to_string())
            .unwrap_or_else(|| format!("not a server error: {e}"))),
    }
}

/// Objects of these tests, made through pgshard and on the plain server alike.
const SETUP: &[&str] = &[
    "DROP TABLE IF EXISTS s_dist, s_local",
    "DROP ROLE IF EXISTS s_app",
    "CREATE ROLE s_app LOGIN PASSWORD 'app pw'",
    "CREATE TABLE s_dist (k int PRIMARY KEY, v int)",
    "CREATE TABLE s_local (a int)",
    "INSERT INTO s_local VALUES (1), (2)",
];

/// The setup, once per binary: the distributed table distributed, rows in it.
async fn setup() {
    static DONE: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    DONE.get_or_init(|| async {
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
        shard
            .batch_execute("SELECT create_distributed_table('s_dist', 'k')")
            .await
            .unwrap();
        let rows = "INSERT INTO s_dist SELECT g, g * 10 FROM generate_series(1, 20) g";
        shard.batch_execute(rows).await.unwrap();
        plain.batch_execute(rows).await.unwrap();
    })
    .await;
}

async fn as_app(host: &str, port: u16, database: &str) -> Client {
    connect(host, port, "s_app", "app pw", database).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_is_itself_on_every_node() {
    setup().await;
    let cl = cluster();
    let pg = plain_postgres();
    let shard = as_app(&cl.host, cl.port, &cl.database).await;
    let plain = as_app(&pg.host, pg.port, &pg.database).await;
    let script = [
        "SELECT current_user, session_user",
        "SHOW is_superuser",
        "SELECT * FROM s_dist WHERE k = 1",
        "SELECT count(*) FROM s_dist",
        "SELECT * FROM s_local",
        "INSERT INTO s_dist VALUES (500, 1)",
        "UPDATE s_dist SET v = 0",
        "UPDATE s_dist SET v = 0 WHERE k = 2",
        "DELETE FROM s_dist WHERE k = 3",
        "INSERT INTO s_local VALUES (3)",
        "COPY (SELECT 1) TO PROGRAM 'true'",
        "SELECT pg_read_file('postgresql.conf')",
        "ALTER ROLE postgres PASSWORD 'stolen'",
        "SET SESSION AUTHORIZATION postgres",
        "SET ROLE postgres",
        "SELECT set_config('role', 'postgres', false)",
        "CREATE TEMP TABLE s_mine (a int)",
        "INSERT INTO s_mine VALUES (7)",
        "SELECT * FROM s_mine",
    ];
    for sql in script {
        let got = outcome(shard.simple_query(sql).await);
        let want = outcome(plain.simple_query(sql).await);
        assert_eq!(got, want, "{sql}");
    }
    // The role reached the workers as itself: a shard read by the role is refused
    // there (42501), which the coordinator's superuser would not be.
    let err = shard
        .simple_query("SELECT v FROM s_dist WHERE k = 4")
        .await
        .unwrap_err();
    assert_eq!(err.as_db_error().unwrap().code().code(), "42501");
    // Granted on the local table: both answer.
    for c in [cl.client().await, pg.client().await] {
        c.batch_execute("GRANT SELECT ON s_local TO s_app")
            .await
            .unwrap();
    }
    let sql = "SELECT a FROM s_local ORDER BY a";
    assert_eq!(
        outcome(shard.simple_query(sql).await),
        outcome(plain.simple_query(sql).await)
    );
}

/// Grants SELECT on the distributed table to s_app on the shell and every shard,
/// directly on each node (what GRANT through pgshard propagates).
async fn grant_dist_directly() {
    let cl = cluster();
    for port in std::iter::once(cl.coordinator_port).chain(cl.worker_ports.iter().copied()) {
        let c = cl.direct(port).await;
        c.batch_execute("GRANT SELECT ON ALL TABLES IN SCHEMA public TO s_app")
            .await
            .unwrap();
    }
}

/// Clients that switch roles and leave without resetting, mixed with clients that
/// do not, all through the same pooled and pipelined node connections: each always
/// runs as itself, on the coordinator node and on the workers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn role_switches_never_reach_another_client() {
    setup().await;
    grant_dist_directly().await;
    let cl = cluster();
    let mut tasks = Vec::new();
    for t in 0..8 {
        let (host, port, user, password, db) = (
            cl.host.clone(),
            cl.port,
            cl.user.clone(),
            cl.password.clone(),
            cl.database.clone(),
        );
        tasks.push(tokio::spawn(async move {
            for i in 0..12 {
                let c = connect(&host, port, &user, &password, &db).await;
                let k = (t * 12 + i) % 20 + 1;
                let routed = format!("SELECT current_user::text, session_user::text FROM s_dist WHERE k = {k}");
                let switch = match (t + i) % 4 {
                    0 => Some("SET ROLE s_app"),
                    1 => Some("SET SESSION AUTHORIZATION s_app"),
                    2 => Some("BEGIN; SET LOCAL ROLE s_app"),
                    _ => None,
                };
                if let Some(s) = switch {
                    c.batch_execute(s).await.unwrap();
                }
                let (want_current, want_session) = match (t + i) % 4 {
                    0 | 2 => ("s_app", user.as_str()),
                    1 => ("s_app", "s_app"),
                    _ => (user.as_str(), user.as_str()),
                };
                // Simple protocol (pipelined routed read), extended protocol, a
                // multi-shard read and the coordinator node.
                for row in [
                    c.simple_query(&routed).await.unwrap().into_iter().find_map(|m| match m {
                        SimpleQueryMessage::Row(r) => Some((r.get(0).unwrap().to_string(), r.get(1).unwrap().to_string())),
                        _ => None,
                    }).unwrap(),
                    {
                        let r = c
                            .query_one(
                                "SELECT current_user::text, session_user::text FROM s_dist WHERE k = $1",
                                &[&(k as i32)],
                            )
                            .await
                            .unwrap();
                        (r.get(0), r.get(1))
                    },
                    {
                        let r = c
                            .query_one("SELECT current_user::text, session_user::text FROM pg_class LIMIT 1", &[])
                            .await
                            .unwrap();
                        (r.get(0), r.get(1))
                    },
                ] {
                    assert_eq!(
                        (row.0.as_str(), row.1.as_str()),
                        (want_current, want_session),
                        "client {t}/{i} after {switch:?}"
                    );
                }
                let users: Vec<String> = c
                    .query("SELECT DISTINCT current_user::text FROM s_dist", &[])
                    .await
                    .unwrap()
                    .iter()
                    .map(|r| r.get(0))
                    .collect();
                assert_eq!(users, vec![want_current.to_string()], "client {t}/{i}");
                // Leaves without RESET, COMMIT or DISCARD.
                drop(c);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

/// A client connection whose notifications are collected.
async fn listening_client(
    host: &str,
    port: u16,
    user: &str,
    password: &str,
    db: &str,
) -> (
    Client,
    tokio::sync::mpsc::UnboundedReceiver<tokio_postgres::Notification>,
) {
    let mut cfg = tokio_postgres::Config::new();
    cfg.host(host)
        .port(port)
        .user(user)
        .password(password)
        .dbname(db);
    let (client, mut conn) = cfg.connect(NoTls).await.unwrap();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut messages = stream::poll_fn(move |cx| conn.poll_message(cx));
        while let Some(Ok(m)) = messages.next().await {
            if let AsyncMessage::Notification(n) = m {
                let _ = tx.send(n);
            }
        }
    });
    (client, rx)
}

async fn single_value(c: &Client, sql: &str) -> Option<String> {
    c.simple_query(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .into_iter()
        .find_map(|m| match m {
            SimpleQueryMessage::Row(r) => Some(r.get(0).map(str::to_string)),
            _ => None,
        })
        .flatten()
}

/// Temporary tables, advisory locks and LISTEN channels belong to one client, among
/// many short clients using the same pools: as on one PostgreSQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_state_is_each_clients_own() {
    setup().await;
    let cl = cluster();
    let (a, mut a_notes) =
        listening_client(&cl.host, cl.port, &cl.user, &cl.password, &cl.database).await;
    let (b, _b_notes) =
        listening_client(&cl.host, cl.port, &cl.user, &cl.password, &cl.database).await;
    for (c, who) in [(&a, "a"), (&b, "b")] {
        c.batch_execute(&format!(
            "CREATE TEMP TABLE s_same (who text); INSERT INTO s_same VALUES ('{who}')"
        ))
        .await
        .unwrap();
    }
    a.batch_execute("SELECT pg_advisory_lock(4242); LISTEN s_chan")
        .await
        .unwrap();
    for i in 0..20 {
        let short = cl.client().await;
        assert_eq!(
            single_value(&short, "SELECT to_regclass('s_same')::text").await,
            None,
            "short client {i}"
        );
        assert_eq!(
            single_value(&short, "SELECT pg_try_advisory_lock(4242)::text")
                .await
                .as_deref(),
            Some("false")
        );
        short
            .batch_execute("SELECT count(*) FROM s_dist")
            .await
            .unwrap();
        short.batch_execute("NOTIFY s_other, 'x'").await.unwrap();
    }
    assert_eq!(
        single_value(&a, "SELECT string_agg(who, ',') FROM s_same")
            .await
            .as_deref(),
        Some("a")
    );
    assert_eq!(
        single_value(&b, "SELECT string_agg(who, ',') FROM s_same")
            .await
            .as_deref(),
        Some("b")
    );
    assert_eq!(
        single_value(&b, "SELECT pg_try_advisory_lock(4242)::text")
            .await
            .as_deref(),
        Some("false")
    );
    // A notification reaches the listening client, idle meanwhile, with the pid the
    // sender knows as its own.
    let b_pid: i32 = single_value(&b, "SELECT pg_backend_pid()")
        .await
        .unwrap()
        .parse()
        .unwrap();
    b.batch_execute("NOTIFY s_chan, 'hello'").await.unwrap();
    let n = tokio::time::timeout(Duration::from_secs(10), a_notes.recv())
        .await
        .expect("notification within 10 s")
        .unwrap();
    assert_eq!(
        (n.channel(), n.payload(), n.process_id()),
        ("s_chan", "hello", b_pid)
    );
    assert!(
        a_notes.try_recv().is_err(),
        "only the channel it listens on"
    );
}

/// The BackendKeyData a client gets names its own backend: a CancelRequest with it
/// cancels the client's statement, `pg_backend_pid()` is that backend, and
/// terminating it ends the client's connection and nobody else's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_key_data_is_the_clients_own() {
    setup().await;
    let cl = cluster();
    let a = cl.client().await;
    let b = cl.client().await;
    let token = a.cancel_token();
    let sleeper = tokio::spawn(async move {
        let r = a.simple_query("SELECT pg_sleep(30)").await;
        (a, r)
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    token.cancel_query(NoTls).await.unwrap();
    let (a, r) = tokio::time::timeout(Duration::from_secs(10), sleeper)
        .await
        .expect("cancelled within 10 s")
        .unwrap();
    assert_eq!(r.unwrap_err().as_db_error().unwrap().code().code(), "57014");
    // pg_terminate_backend of the client's own pid ends the client's connection only.
    let a_pid = single_value(&a, "SELECT pg_backend_pid()").await.unwrap();
    let b_pid = single_value(&b, "SELECT pg_backend_pid()").await.unwrap();
    assert_ne!(a_pid, b_pid);
    b.batch_execute(&format!("SELECT pg_terminate_backend({a_pid})"))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(a.simple_query("SELECT 1").await.is_err());
    assert!(a.is_closed() || a.simple_query("SELECT 1").await.is_err());
    assert_eq!(single_value(&b, "SELECT 1").await.as_deref(), Some("1"));
}

/// Parse and Describe of a client inside its block see the block's uncommitted DDL
/// (migrations, ORMs), as on one PostgreSQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statements_in_a_block_see_its_ddl() {
    setup().await;
    let cl = cluster();
    let pg = plain_postgres();
    for c in [cl.client().await, pg.client().await] {
        c.batch_execute("BEGIN; CREATE TABLE s_blk (a int)")
            .await
            .unwrap();
        assert_eq!(
            c.execute("INSERT INTO s_blk VALUES ($1)", &[&1i32])
                .await
                .unwrap(),
            1
        );
        let n: i64 = c
            .query_one("SELECT count(*) FROM s_blk WHERE a = $1", &[&1i32])
            .await
            .unwrap()
            .get(0);
        assert_eq!(n, 1);
        c.batch_execute("ROLLBACK").await.unwrap();
    }
}

/// Statements prepared again after DDL see the new columns, on distributed and on
/// local tables; none of pgshard's own statements show in the client's
/// `pg_prepared_statements`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepared_statements_follow_ddl_and_stay_private() {
    setup().await;
    let cl = cluster();
    let c = cl.client().await;
    c.batch_execute(
        "DROP TABLE IF EXISTS s_ddl_dist, s_ddl_local; \
         CREATE TABLE s_ddl_dist (k int PRIMARY KEY, v int); COMMIT; \
         SELECT create_distributed_table('s_ddl_dist', 'k'); COMMIT; \
         INSERT INTO s_ddl_dist VALUES (1, 10); \
         CREATE TABLE s_ddl_local (k int, v int); INSERT INTO s_ddl_local VALUES (1, 10)",
    )
    .await
    .unwrap();
    for table in ["s_ddl_dist", "s_ddl_local"] {
        let sql = format!("SELECT * FROM {table} WHERE k = $1");
        let other = cl.client().await;
        // Another client keeps the old statement prepared on the pooled connections.
        assert_eq!(other.query_one(&sql, &[&1i32]).await.unwrap().len(), 2);
        assert_eq!(
            c.query_one(&sql, &[&1i32]).await.unwrap().len(),
            2,
            "{table}"
        );
        c.batch_execute(&format!("ALTER TABLE {table} ADD COLUMN w int DEFAULT 7"))
            .await
            .unwrap();
        for client in [&c, &other] {
            let row = client
                .query_one(&sql, &[&1i32])
                .await
                .unwrap_or_else(|e| panic!("{table}: {e}"));
            assert_eq!(row.len(), 3, "{table}");
            assert_eq!(row.get::<_, i32>(2), 7);
        }
    }
    let own: i64 = c
        .query_one(
            "SELECT count(*) FROM pg_prepared_statements WHERE name LIKE 'pgs%'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(own, 0);
}

/// Settings changed by `set_config` (or any function) on the client's own backend
/// reach the workers too: routed and multi-shard reads format as on one PostgreSQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_config_reaches_every_node() {
    setup().await;
    let cl = cluster();
    let pg = plain_postgres();
    let shard = cl.client().await;
    let plain = pg.client().await;
    shard
        .batch_execute(
            "DROP TABLE IF EXISTS s_tz; CREATE TABLE s_tz (k int PRIMARY KEY, ts timestamptz); COMMIT; \
             SELECT create_distributed_table('s_tz', 'k')",
        )
        .await
        .unwrap();
    plain
        .batch_execute(
            "DROP TABLE IF EXISTS s_tz; CREATE TABLE s_tz (k int PRIMARY KEY, ts timestamptz)",
        )
        .await
        .unwrap();
    let script = [
        "INSERT INTO s_tz SELECT g, '2026-01-02 03:04:05+00'::timestamptz + g * interval '1 hour' FROM generate_series(1, 6) g",
        "SELECT set_config('TimeZone', 'Asia/Tokyo', false)",
        "SELECT ts::text FROM s_tz WHERE k = 1",
        "SELECT ts::text FROM s_tz",
        "SELECT set_config('DateStyle', 'SQL, DMY', false)",
        "SELECT ts::text FROM s_tz WHERE k = 2",
        "SELECT max(ts)::text FROM s_tz",
        "BEGIN",
        "SELECT set_config('TimeZone', 'America/New_York', true)",
        "SELECT ts::text FROM s_tz WHERE k = 3",
        "COMMIT",
        "SELECT ts::text FROM s_tz WHERE k = 3",
        "SHOW TimeZone",
    ];
    for sql in script {
        let got = outcome(shard.simple_query(sql).await);
        let want = outcome(plain.simple_query(sql).await);
        assert_eq!(got, want, "{sql}");
    }
}

/// An error PostgreSQL raises when the implicit transaction of an extended batch
/// commits at Sync (a deferred constraint) reaches the client, as on one PostgreSQL;
/// a dropped role set and reset earlier is not replayed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_time_errors_and_old_settings() {
    setup().await;
    let cl = cluster();
    let pg = plain_postgres();
    for c in [cl.client().await, pg.client().await] {
        c.batch_execute(
            "CREATE TEMP TABLE s_def (id text PRIMARY KEY, n int UNIQUE DEFERRABLE INITIALLY DEFERRED); \
             INSERT INTO s_def VALUES ('a', 1), ('b', 2), ('c', 3)",
        )
        .await
        .unwrap();
        let err = c
            .query(
                "UPDATE s_def SET n = n + 1 WHERE id = $1 RETURNING n",
                &[&"a"],
            )
            .await
            .unwrap_err();
        assert_eq!(err.as_db_error().map(|d| d.code().code()), Some("23505"));
        let n: i32 = c
            .query_one("SELECT n FROM s_def WHERE id = 'a'", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(n, 1);
        c.batch_execute(
            "DROP ROLE IF EXISTS s_gone; CREATE ROLE s_gone; SET ROLE s_gone; RESET ROLE; DROP ROLE s_gone; \
             SET work_mem = '5MB'",
        )
        .await
        .unwrap();
        c.batch_execute("SELECT 1").await.unwrap();
    }
    // Through pgshard a worker connection gets the session's settings replayed.
    let c = cl.client().await;
    c.batch_execute(
        "DROP ROLE IF EXISTS s_gone2; CREATE ROLE s_gone2; SET ROLE s_gone2; RESET ROLE; DROP ROLE s_gone2; \
         SET work_mem = '5MB'",
    )
    .await
    .unwrap();
    c.simple_query("SELECT count(*) FROM s_dist").await.unwrap();
    c.simple_query("SELECT v FROM s_dist WHERE k = 3")
        .await
        .unwrap();
}

/// Runs `script` through pgshard and on the plain server, statement by statement (each
/// its own query string, as written), and compares rows and SQLSTATEs.
async fn same_outcomes(script: &[&str]) {
    let shard = cluster().client().await;
    let plain = plain_postgres().client().await;
    for sql in script {
        let got = outcome(shard.simple_query(sql).await);
        let want = outcome(plain.simple_query(sql).await);
        assert_eq!(got, want, "{sql}");
    }
}

/// A statement reaches the node as the client wrote it, `;` included: what
/// pg_prepared_statements and pg_cursors show is PostgreSQL's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statements_keep_the_clients_text() {
    setup().await;
    same_outcomes(&[
        "PREPARE s_q1 AS SELECT a FROM s_local WHERE a > $1;",
        "PREPARE s_q2(int) AS SELECT $1 + 1 ;  ",
        "SELECT name, statement FROM pg_prepared_statements ORDER BY name",
        "BEGIN",
        "DECLARE s_c1 CURSOR FOR SELECT a FROM s_local ORDER BY a;",
        "/* c2 */ DECLARE s_c2 SCROLL CURSOR FOR SELECT 1",
        "SELECT name, statement, is_scrollable FROM pg_cursors ORDER BY name",
        "COMMIT",
        "DEALLOCATE ALL",
    ])
    .await;
}

/// PREPARE TRANSACTION of a block that ran only on the coordinator node is
/// PostgreSQL's own there (prepared, then COMMIT / ROLLBACK PREPARED; refused for
/// temporary objects, the block rolled back); a block that ran on a worker is refused
/// (0A000) and ends rolled back, as PostgreSQL ends a block whose PREPARE failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepare_transaction_of_coordinator_blocks() {
    setup().await;
    let ddl = "DROP TABLE IF EXISTS s_2pc; CREATE TABLE s_2pc (a int)";
    cluster().client().await.batch_execute(ddl).await.unwrap();
    plain_postgres()
        .client()
        .await
        .batch_execute(ddl)
        .await
        .unwrap();
    same_outcomes(&[
        "PREPARE TRANSACTION 's_none'",
        "BEGIN",
        "INSERT INTO s_2pc VALUES (1)",
        "SET work_mem = '7MB'",
        "PREPARE TRANSACTION 's_gid1'",
        "SHOW work_mem",
        "SELECT count(*) FROM s_2pc",
        "SELECT gid FROM pg_prepared_xacts WHERE gid LIKE 's\\_gid%'",
        "COMMIT PREPARED 's_gid1'",
        "SELECT count(*) FROM s_2pc",
        "BEGIN",
        "INSERT INTO s_2pc VALUES (2)",
        "PREPARE TRANSACTION 's_gid2'",
        "BEGIN",
        "ROLLBACK PREPARED 's_gid2'",
        "ROLLBACK",
        "ROLLBACK PREPARED 's_gid2'",
        "SELECT count(*) FROM s_2pc",
        "BEGIN",
        "CREATE TEMP TABLE s_tmp (a int)",
        "INSERT INTO s_2pc VALUES (3)",
        "PREPARE TRANSACTION 's_gid3'",
        "SELECT count(*) FROM s_2pc",
        "SELECT count(*) FROM pg_prepared_xacts WHERE gid = 's_gid3'",
        "BEGIN",
        "SELECT 1/0",
        "PREPARE TRANSACTION 's_gid4'",
        "SELECT count(*) FROM pg_prepared_xacts WHERE gid = 's_gid4'",
    ])
    .await;
    // A block that read a distributed table: refused, and over.
    let shard = cluster().client().await;
    shard
        .batch_execute("BEGIN; INSERT INTO s_2pc VALUES (5)")
        .await
        .unwrap();
    shard
        .simple_query("SELECT v FROM s_dist WHERE k = 1")
        .await
        .unwrap();
    let e = shard
        .simple_query("PREPARE TRANSACTION 's_gid5'")
        .await
        .unwrap_err();
    assert_eq!(
        e.as_db_error().map(|d| d.code().code()),
        Some("0A000"),
        "{e}"
    );
    assert!(shard.is_closed() == false);
    let n = outcome(
        shard
            .simple_query("SELECT count(*) FROM s_2pc WHERE a = 5")
            .await,
    );
    assert_eq!(n, Ok(vec![vec![Some("0".to_string())]]));
    let n = outcome(
        shard
            .simple_query("SELECT count(*) FROM pg_prepared_xacts WHERE gid = 's_gid5'")
            .await,
    );
    assert_eq!(n, Ok(vec![vec![Some("0".to_string())]]));
    common::assert_no_prepared_xacts().await;
}

/// Advisory locks of a key held on the worker nodes, as their own `pg_locks` shows
/// them (pgshard's connections included).
async fn worker_advisory_locks(classid: i64, objid: i64) -> i64 {
    let cl = cluster();
    let mut total = 0;
    for &port in &cl.worker_ports {
        let w = cl.direct(port).await;
        let n: i64 = w
            .query_one(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' \
                 AND classid::int8 = $1 AND objid::int8 = $2 AND granted",
                &[&classid, &objid],
            )
            .await
            .unwrap()
            .get(0);
        total += n;
    }
    total
}

/// State a client leaves on a worker connection through a distributed table's query
/// (`set_config(.., false)`, a session advisory lock, a user function's SET) stays its
/// own: short clients of the same role after it, which share the pooled and pipelined
/// worker connections, see none of it, and it goes when the client ends, as between
/// sessions of one PostgreSQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_left_on_worker_connections_stays_the_clients() {
    setup().await;
    let cl = cluster();
    let pg = plain_postgres();
    let function = "CREATE OR REPLACE FUNCTION s_remember(v text) RETURNS text LANGUAGE sql \
                    AS $$ SELECT set_config('x.f', v, false) $$";
    cl.client().await.batch_execute(function).await.unwrap();
    pg.client().await.batch_execute(function).await.unwrap();
    for &port in &cl.worker_ports {
        cl.direct(port).await.batch_execute(function).await.unwrap();
    }
    let a = cl.client().await;
    let a_plain = pg.client().await;
    let leave = [
        "SELECT set_config('x.y', '1', false) FROM s_dist WHERE k = 1",
        "SELECT pg_advisory_lock(4343) FROM s_dist WHERE k = 1",
        "SELECT pg_advisory_lock(4344, k) FROM s_dist",
        "SELECT s_remember(v::text) FROM s_dist WHERE k = 2",
        // Its own state, on the node it left it on.
        "SELECT current_setting('x.y', true) FROM s_dist WHERE k = 1",
        "SELECT current_setting('x.f', true) FROM s_dist WHERE k = 2",
        "SELECT pg_try_advisory_lock(4343) FROM s_dist WHERE k = 1",
    ];
    for sql in leave {
        assert_eq!(
            outcome(a.simple_query(sql).await),
            outcome(a_plain.simple_query(sql).await),
            "{sql}"
        );
    }
    // The extended protocol too (a prepared routed read).
    let set = "SELECT set_config('x.z', $1, false) FROM s_dist WHERE k = $2";
    a.query(set, &[&"2", &3i32]).await.unwrap();
    assert!(worker_advisory_locks(0, 4343).await >= 1);
    let seen = [
        "SELECT current_setting('x.y', true) FROM s_dist WHERE k = 1",
        "SELECT current_setting('x.z', true) FROM s_dist WHERE k = 3",
        "SELECT current_setting('x.f', true) FROM s_dist WHERE k = 2",
        "SELECT DISTINCT current_setting('x.y', true) || current_setting('x.z', true) FROM s_dist",
        "SELECT k FROM s_dist WHERE k IN (1, 2, 3) AND current_setting('x.f', true) IS NOT NULL",
        "SELECT pg_try_advisory_lock(4343) FROM s_dist WHERE k = 1",
        "SELECT pg_try_advisory_lock(4344, k) FROM s_dist WHERE k < 5",
    ];
    for i in 0..20 {
        let short = cl.client().await;
        let short_plain = pg.client().await;
        for sql in seen {
            assert_eq!(
                outcome(short.simple_query(sql).await),
                outcome(short_plain.simple_query(sql).await),
                "short client {i}: {sql}"
            );
        }
        // Prepared, through the pipelined connections.
        let stmt = short
            .prepare("SELECT current_setting('x.y', true) FROM s_dist WHERE k = $1")
            .await
            .unwrap();
        for k in 1..4i32 {
            let v: Option<String> = short.query_one(&stmt, &[&k]).await.unwrap().get(0);
            assert_eq!(v, None, "short client {i}, k = {k}");
        }
    }
    // The client still has its own state, and its locks go with it.
    assert_eq!(
        single_value(
            &a,
            "SELECT current_setting('x.z', true) FROM s_dist WHERE k = 3"
        )
        .await
        .as_deref(),
        Some("2")
    );
    assert_eq!(worker_advisory_locks(0, 4343).await, 1);
    assert_eq!(worker_advisory_locks(4344, 1).await, 1);
    drop(a);
    let mut left = (0, 0);
    for _ in 0..100 {
        left = (
            worker_advisory_locks(0, 4343).await,
            worker_advisory_locks(4344, 1).await,
        );
        if left == (0, 0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        left,
        (0, 0),
        "advisory locks outlived the client that took them"
    );
}
