//! A client's startup parameters and the session's settings across nodes, compared with
//! one plain PostgreSQL: the startup packet's `DateStyle` / `TimeZone` / `options` are
//! what `RESET x` and `RESET ALL` return to, on the coordinator node and in queries of
//! distributed tables alike; a rolled-back `SET SESSION AUTHORIZATION` keeps the
//! earlier `SET ROLE`; a custom placeholder set before `LOAD` of its module does not
//! fail later statements.

mod common;

use common::{cluster, plain_postgres};
use std::process::Command;
use tokio_postgres::{Client, SimpleQueryMessage};

/// Objects of these tests, made through pgshard and on the plain server alike.
const SETUP: &[&str] = &[
    "DROP TABLE IF EXISTS st_dist, st_local",
    "CREATE TABLE st_dist (k int PRIMARY KEY, ts timestamptz, d date, iv interval)",
    "CREATE TABLE st_local (k int PRIMARY KEY, ts timestamptz)",
    "GRANT SELECT ON st_dist, st_local TO PUBLIC",
    "INSERT INTO st_local VALUES (1, '2026-01-02 03:04:05+00')",
];

const ROWS: &str =
    "INSERT INTO st_dist SELECT g, '2026-01-02 03:04:05+00'::timestamptz + g * interval '1 day', \
                    date '2026-03-04' + g, g * interval '90 minutes' FROM generate_series(1, 6) g";

/// The setup, once per binary.
async fn setup() {
    static DONE: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    DONE.get_or_init(|| async {
        let shard = cluster().client().await;
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
            .batch_execute("SELECT create_distributed_table('st_dist', 'k')")
            .await
            .unwrap();
        shard.batch_execute(ROWS).await.unwrap();
        plain.batch_execute(ROWS).await.unwrap();
    })
    .await;
}

/// psql's output (stdout and stderr together, errors included) of `statements`, each
/// sent as its own query, with `env` added to the server's libpq environment.
fn psql_script(server: Vec<(String, String)>, env: &[(&str, &str)], statements: &[&str]) -> String {
    let mut cmd = Command::new("psql");
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(server)
        .envs(env.iter().copied())
        .args(["-X", "-tA"]);
    for s in statements {
        cmd.args(["-c", s]);
    }
    let out = cmd.output().expect("running psql");
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The startup packet's settings (libpq's PGDATESTYLE, PGTZ, PGOPTIONS) are the
/// session's defaults: RESET x, SET x TO DEFAULT and RESET ALL return to them, and
/// the rows of distributed tables are printed with them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_returns_to_the_startup_values() {
    setup().await;
    let env = [
        ("PGDATESTYLE", "Postgres, MDY"),
        ("PGTZ", "PST8PDT"),
        (
            "PGOPTIONS",
            "-c intervalstyle=sql_standard -c extra_float_digits=1",
        ),
        ("PGAPPNAME", "st app"),
    ];
    let dist = "SELECT k, ts, d, iv FROM st_dist ORDER BY k";
    let one = "SELECT ts, d, iv FROM st_dist WHERE k = 2";
    let local = "SELECT ts FROM st_local";
    let script = [
        "SHOW datestyle",
        "SHOW timezone",
        "SHOW intervalstyle",
        dist,
        one,
        "SET datestyle = ISO, DMY",
        "SET timezone = 'Asia/Tokyo'",
        "SET intervalstyle = postgres_verbose",
        "SET application_name = 'other'",
        dist,
        one,
        local,
        "RESET datestyle",
        "SHOW datestyle",
        dist,
        one,
        local,
        "SET timezone TO DEFAULT",
        "SHOW timezone",
        dist,
        one,
        local,
        "SET datestyle = SQL",
        "SET extra_float_digits = 3",
        "RESET ALL",
        "SHOW datestyle",
        "SHOW timezone",
        "SHOW intervalstyle",
        "SHOW extra_float_digits",
        "SHOW application_name",
        dist,
        one,
        local,
        "BEGIN",
        "SET datestyle = ISO",
        "RESET timezone",
        one,
        "ROLLBACK",
        "SHOW datestyle",
        one,
    ];
    let got = psql_script(cluster().pg_env(), &env, &script);
    let want = psql_script(plain_postgres().pg_env(), &env, &script);
    assert_eq!(got, want);
    assert!(got.contains("Postgres, MDY"), "{got}");
}

async fn run(c: &Client, sql: &str) -> Result<Vec<Vec<Option<String>>>, String> {
    match c.simple_query(sql).await {
        Ok(msgs) => Ok(msgs
            .iter()
            .filter_map(|m| match m {
                SimpleQueryMessage::Row(r) => {
                    Some((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect())
                }
                _ => None,
            })
            .collect()),
        Err(e) => Err(e
            .as_db_error()
            .map(|d| d.code().code().to_string())
            .unwrap_or_else(|| format!("not a server error: {e}"))),
    }
}

/// Runs `script` on pgshard and on the plain server, statement by statement, and
/// compares rows and SQLSTATEs.
async fn same_outcomes(script: &[&str]) {
    let shard = cluster().client().await;
    let plain = plain_postgres().client().await;
    for sql in script {
        let got = run(&shard, sql).await;
        let want = run(&plain, sql).await;
        assert_eq!(got, want, "{sql}");
    }
}

/// ROLLBACK of a SET SESSION AUTHORIZATION made in a block keeps the role the session
/// had set before the block, on the coordinator node and on the workers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolled_back_session_authorization_keeps_the_role() {
    setup().await;
    let roles = "DROP ROLE IF EXISTS st_a, st_b, st_c; CREATE ROLE st_a; CREATE ROLE st_b; \
                 CREATE ROLE st_c; GRANT st_b TO st_a";
    cluster().client().await.batch_execute(roles).await.unwrap();
    plain_postgres()
        .client()
        .await
        .batch_execute(roles)
        .await
        .unwrap();
    same_outcomes(&[
        "SET SESSION AUTHORIZATION st_a",
        "SET ROLE st_b",
        "SELECT current_user, session_user",
        "BEGIN",
        "SET SESSION AUTHORIZATION st_c",
        "SELECT current_user, session_user",
        "SELECT current_user, ts::date::text FROM st_dist WHERE k = 1",
        "ROLLBACK",
        "SELECT current_user, session_user",
        "SELECT current_user, ts::date::text FROM st_dist WHERE k = 1",
        "SELECT current_user, count(*) FROM st_dist GROUP BY 1",
        "SET work_mem = '5MB'",
        "SELECT current_user, ts::date::text FROM st_dist WHERE k = 2",
        "SELECT current_user FROM st_local",
        "RESET SESSION AUTHORIZATION",
    ])
    .await;
}

/// A custom placeholder set before its module is loaded (PostgreSQL accepts it, LOAD
/// then drops it with a WARNING and refuses it from then on) never fails a later
/// statement on a node connection the session's settings are replayed on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_placeholder_dropped_by_load_is_not_replayed() {
    setup().await;
    same_outcomes(&[
        "SET plpgsql.extra_foo_warnings = true",
        "SHOW plpgsql.extra_foo_warnings",
        "SELECT current_setting('plpgsql.extra_foo_warnings'), count(*) FROM st_dist GROUP BY 1",
        "SELECT current_setting('plpgsql.extra_foo_warnings') FROM st_dist WHERE k = 1",
        "LOAD 'plpgsql'",
        "SET plpgsql.extra_foo_warnings = true",
        "SHOW plpgsql.extra_foo_warnings",
        "SET work_mem = '6MB'",
        "SELECT count(*) FROM st_local",
        "SELECT ts::date::text FROM st_dist WHERE k = 3",
        "SET st_app.tenant = 'seven'",
        "SELECT current_setting('st_app.tenant') FROM st_dist WHERE k = 3",
        "SELECT current_setting('st_app.tenant'), count(*) FROM st_dist GROUP BY 1",
        "RESET st_app.tenant",
        "SELECT current_setting('st_app.tenant') FROM st_dist WHERE k = 3",
    ])
    .await;
}
