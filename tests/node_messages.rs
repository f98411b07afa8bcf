//! What the nodes say reaches the client as PostgreSQL would say it (issue 17, "home
//! connection"): NOTICEs of deferred triggers at COMMIT, an ordinary ERROR whose
//! SQLSTATE is of class 08 (the session goes on), the FATAL of the client's own
//! backend terminated (then its connection closes, idle or not), and a pooled worker
//! connection terminated while idle never failing the next statement. Outcomes are
//! compared with one plain PostgreSQL holding the same objects, through tokio-postgres
//! and the real psql.

mod common;

use common::{cluster, plain_postgres};
use futures_util::{stream, StreamExt};
use std::process::Command;
use std::time::Duration;
use tokio_postgres::{AsyncMessage, Client, SimpleQueryMessage};

/// A client connection whose notices are collected (their message texts).
async fn noticed_client(
    host: &str,
    port: u16,
    user: &str,
    password: &str,
    db: &str,
) -> (Client, tokio::sync::mpsc::UnboundedReceiver<String>) {
    let mut cfg = tokio_postgres::Config::new();
    cfg.host(host)
        .port(port)
        .user(user)
        .password(password)
        .dbname(db);
    let (client, mut conn) = cfg.connect(tokio_postgres::NoTls).await.unwrap();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut messages = stream::poll_fn(move |cx| conn.poll_message(cx));
        while let Some(Ok(m)) = messages.next().await {
            if let AsyncMessage::Notice(n) = m {
                let _ = tx.send(n.message().to_string());
            }
        }
    });
    (client, rx)
}

fn drain(rx: &mut tokio::sync::mpsc::UnboundedReceiver<String>) -> Vec<String> {
    let mut got = Vec::new();
    while let Ok(m) = rx.try_recv() {
        got.push(m);
    }
    got
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

/// Runs psql (TLS off: the same transport on both servers) with `args`, returning its
/// exit code, stdout and stderr.
fn psql_outcome(env: &[(String, String)], args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new("psql")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("PGSSLMODE", "disable")
        .args(["-X"])
        .args(args)
        .output()
        .expect("running psql");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// NOTICEs a deferred constraint trigger raises at an explicit COMMIT reach the
/// client before COMMIT's answer, as from PostgreSQL: a block on the coordinator node
/// only (one-phase COMMIT) and one writing a worker too (the notices come at PREPARE
/// TRANSACTION).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notices_at_commit_reach_the_client() {
    let cl = cluster();
    let pg = plain_postgres();
    let setup = "DROP TABLE IF EXISTS nm_local, nm_dist; \
        CREATE TABLE nm_local (a int); \
        CREATE TABLE nm_dist (k int PRIMARY KEY, v int); \
        CREATE OR REPLACE FUNCTION nm_notice() RETURNS trigger LANGUAGE plpgsql AS \
          $$ BEGIN RAISE NOTICE 'deferred trigger on %', NEW.a; RETURN NULL; END $$; \
        CREATE CONSTRAINT TRIGGER nm_t AFTER INSERT ON nm_local DEFERRABLE INITIALLY DEFERRED \
          FOR EACH ROW EXECUTE FUNCTION nm_notice()";
    let (shard, mut shard_notices) =
        noticed_client(&cl.host, cl.port, &cl.user, &cl.password, &cl.database).await;
    let (plain, mut plain_notices) =
        noticed_client(&pg.host, pg.port, &pg.user, &pg.password, &pg.database).await;
    shard.batch_execute(setup).await.unwrap();
    plain.batch_execute(setup).await.unwrap();
    shard
        .batch_execute("SELECT create_distributed_table('nm_dist', 'k')")
        .await
        .unwrap();
    for block in [
        "BEGIN; INSERT INTO nm_local VALUES (1), (2); COMMIT",
        "BEGIN; INSERT INTO nm_local VALUES (3); INSERT INTO nm_dist VALUES (1, 1); COMMIT",
    ] {
        drain(&mut shard_notices);
        drain(&mut plain_notices);
        for c in [&shard, &plain] {
            for sql in block.split("; ") {
                c.simple_query(sql)
                    .await
                    .unwrap_or_else(|e| panic!("{sql}: {e}"));
            }
            // The notices came before COMMIT's answer: on the channel by now.
            c.simple_query("SELECT 1").await.unwrap();
        }
        let want = drain(&mut plain_notices);
        assert!(!want.is_empty());
        assert_eq!(drain(&mut shard_notices), want, "{block}");
    }
}

/// An ordinary ERROR of SQLSTATE class 08 (CREATE SUBSCRIPTION with a conninfo that
/// cannot connect) is the statement's error, unchanged, and the session goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_class_errors_of_a_statement_pass_unchanged() {
    let cl = cluster();
    let pg = plain_postgres();
    let sql = "CREATE SUBSCRIPTION nm_sub CONNECTION 'port=-1' PUBLICATION nm_pub";
    let mut outcomes = Vec::new();
    for c in [cl.client().await, pg.client().await] {
        let e = c.simple_query(sql).await.unwrap_err();
        let db = e.as_db_error().expect("a server error");
        outcomes.push((
            db.severity().to_string(),
            db.code().code().to_string(),
            db.message().to_string(),
        ));
        assert_eq!(single_value(&c, "SELECT 1").await.as_deref(), Some("1"));
        assert!(!c.is_closed());
    }
    assert!(outcomes[0].1.starts_with("08"), "{:?}", outcomes[0]);
    assert_eq!(outcomes[0], outcomes[1]);
    // psql says the same on both.
    let shard = psql_outcome(&cl.pg_env(), &["-c", sql, "-c", "SELECT 1"]);
    let plain = psql_outcome(&pg.pg_env(), &["-c", sql, "-c", "SELECT 1"]);
    assert_eq!(shard, plain);
}

/// `pg_terminate_backend(pg_backend_pid())`: the client gets its backend's FATAL
/// 57P01, with PostgreSQL's text and nothing after it, and its connection closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminating_its_own_backend_ends_the_client() {
    let cl = cluster();
    let pg = plain_postgres();
    let sql = "SELECT pg_terminate_backend(pg_backend_pid())";
    let mut outcomes = Vec::new();
    for c in [cl.client().await, pg.client().await] {
        let e = c.simple_query(sql).await.unwrap_err();
        let db = e.as_db_error().expect("a server error");
        outcomes.push((
            db.severity().to_string(),
            db.code().code().to_string(),
            db.message().to_string(),
        ));
        tokio::time::timeout(Duration::from_secs(5), async {
            while !c.is_closed() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .expect("the connection closes");
    }
    assert_eq!(outcomes[0].0, "FATAL");
    assert_eq!(outcomes[0].1, "57P01");
    assert_eq!(outcomes[0], outcomes[1]);
    let shard = psql_outcome(&cl.pg_env(), &["-c", sql, "-c", "SELECT 1"]);
    let plain = psql_outcome(&pg.pg_env(), &["-c", sql, "-c", "SELECT 1"]);
    assert_eq!(shard, plain);
}

/// An idle client whose backend another session terminates gets the FATAL at once
/// and its socket closes, as from PostgreSQL; an empty query then gets no answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminating_an_idle_client_closes_it() {
    let cl = cluster();
    let pg = plain_postgres();
    for (victim, other) in [
        (cl.client().await, cl.client().await),
        (pg.client().await, pg.client().await),
    ] {
        let pid = single_value(&victim, "SELECT pg_backend_pid()")
            .await
            .unwrap();
        other
            .batch_execute(&format!("SELECT pg_terminate_backend({pid})"))
            .await
            .unwrap();
        tokio::time::timeout(Duration::from_secs(5), async {
            while !victim.is_closed() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .expect("the idle client's connection closes");
        assert!(victim.simple_query(";").await.is_err());
        assert_eq!(single_value(&other, "SELECT 1").await.as_deref(), Some("1"));
    }
}

/// Pooled worker connections terminated while idle (an administrator's
/// `pg_terminate_backend` of every idle backend of a role) never fail the next
/// statements.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pooled_connections_terminated_while_idle_are_not_used() {
    let cl = cluster();
    let admin = cl.client().await;
    admin
        .batch_execute(
            "DROP TABLE IF EXISTS nm_pool; CREATE TABLE nm_pool (k int PRIMARY KEY, v int); COMMIT; \
             SELECT create_distributed_table('nm_pool', 'k'); COMMIT; \
             INSERT INTO nm_pool SELECT g, g FROM generate_series(1, 50) g; \
             DROP ROLE IF EXISTS nm_pool_user; CREATE ROLE nm_pool_user LOGIN PASSWORD 'pool pw'; \
             GRANT ALL ON nm_pool TO nm_pool_user",
        )
        .await
        .unwrap();
    let statements = [
        "SELECT v FROM nm_pool WHERE k = 7",
        "UPDATE nm_pool SET v = v + 1 WHERE k = 7",
        "SELECT count(*) FROM nm_pool",
        "BEGIN; UPDATE nm_pool SET v = v + 1 WHERE k = 8; UPDATE nm_pool SET v = v + 1 WHERE k = 9; COMMIT",
    ];
    // Its own role: only its pooled connections are terminated, not those of the
    // tests running beside it.
    let c = common::connect(&cl.host, cl.port, "nm_pool_user", "pool pw", &cl.database).await;
    let mut terminated = 0;
    for round in 0..3 {
        for sql in statements {
            c.batch_execute(sql)
                .await
                .unwrap_or_else(|e| panic!("round {round}: {sql}: {e}"));
        }
        for &port in &cl.worker_ports {
            let w = cl.direct(port).await;
            let n = single_value(
                &w,
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity \
                 WHERE usename = 'nm_pool_user' AND state = 'idle'",
            )
            .await;
            terminated += n.unwrap().parse::<u32>().unwrap();
        }
        // pg_terminate_backend only signals: give the backends the moment they take to
        // exit. A statement sent in that instant, before the FATAL reached pgshard,
        // fails with the node's error (as through PgBouncer); pgshard does not retry.
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    for sql in statements {
        c.batch_execute(sql)
            .await
            .unwrap_or_else(|e| panic!("after: {sql}: {e}"));
    }
    assert!(
        terminated >= 4,
        "the test terminated {terminated} connections"
    );
    let fresh = cl.client().await;
    assert_eq!(
        single_value(&fresh, "SELECT count(*) FROM nm_pool")
            .await
            .as_deref(),
        Some("50")
    );
}

/// A LISTENing client querying while notifications flood in keeps its own backend,
/// and gets every notification (pgx's TestListenNotifyWhileBusyIsSafe).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listening_client_keeps_its_backend_under_a_flood() {
    const SENT: usize = 3000;
    let cl = cluster();
    let mut cfg = tokio_postgres::Config::new();
    cfg.host(&cl.host)
        .port(cl.port)
        .user(&cl.user)
        .password(&cl.password)
        .dbname(&cl.database);
    let (listener, mut conn) = cfg.connect(tokio_postgres::NoTls).await.unwrap();
    let (tx, mut notes) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut messages = stream::poll_fn(move |cx| conn.poll_message(cx));
        while let Some(Ok(m)) = messages.next().await {
            if let AsyncMessage::Notification(n) = m {
                let _ = tx.send(n.payload().to_string());
            }
        }
    });
    listener.batch_execute("LISTEN nm_flood").await.unwrap();
    let notifier = cl.client().await;
    let flood = tokio::spawn(async move {
        for i in 0..SENT {
            notifier
                .batch_execute(&format!("NOTIFY nm_flood, '{i}'"))
                .await
                .unwrap();
        }
    });
    let mut queries = 0;
    while !flood.is_finished() || queries < 50 {
        let rows = listener
            .query("SELECT generate_series(1, $1)", &[&100i32])
            .await
            .unwrap_or_else(|e| panic!("query {queries} while notifications flood in: {e}"));
        assert_eq!(rows.len(), 100);
        queries += 1;
    }
    flood.await.unwrap();
    listener.batch_execute("SELECT 1").await.unwrap();
    let mut got = Vec::new();
    while got.len() < SENT {
        match tokio::time::timeout(Duration::from_secs(5), notes.recv()).await {
            Ok(Some(p)) => got.push(p),
            _ => break,
        }
    }
    let want: Vec<String> = (0..SENT).map(|i| i.to_string()).collect();
    assert_eq!(got.len(), SENT, "notifications delivered");
    assert_eq!(got, want);
}

/// A NOTIFY in a block reaches a listener once the block commits, the client itself
/// included (its own backend sends it at COMMIT), as from PostgreSQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifications_of_a_block_arrive_at_commit() {
    let cl = cluster();
    let pg = plain_postgres();
    for (host, port, user, password, db) in [
        (&cl.host, cl.port, &cl.user, &cl.password, &cl.database),
        (&pg.host, pg.port, &pg.user, &pg.password, &pg.database),
    ] {
        let mut cfg = tokio_postgres::Config::new();
        cfg.host(host)
            .port(port)
            .user(user)
            .password(password)
            .dbname(db);
        let (c, mut conn) = cfg.connect(tokio_postgres::NoTls).await.unwrap();
        let (tx, mut notes) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut messages = stream::poll_fn(move |cx| conn.poll_message(cx));
            while let Some(Ok(m)) = messages.next().await {
                if let AsyncMessage::Notification(n) = m {
                    let _ = tx.send(n.payload().to_string());
                }
            }
        });
        for sql in [
            "LISTEN nm_block",
            "BEGIN",
            "NOTIFY nm_block, 'in block'",
            "COMMIT",
        ] {
            c.batch_execute(sql).await.unwrap();
        }
        let got = tokio::time::timeout(Duration::from_secs(5), notes.recv()).await;
        assert_eq!(
            got.ok().flatten().as_deref(),
            Some("in block"),
            "port {port}"
        );
    }
}
