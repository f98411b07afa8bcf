//! Sequences on distributed and reference tables (issue 22 item 3), against real
//! servers, a plain PostgreSQL 15 as the oracle where the values are deterministic:
//! - `bigserial` / `serial` / `smallserial` / identity (ALWAYS, BY DEFAULT) columns and
//!   `DEFAULT nextval('s')`, through single-row, multi-row, prepared, `INSERT ... SELECT`
//!   (local and distributed sources) and `COPY FROM STDIN` writes: the same ids,
//!   `currval` / `lastval` / `setval` / `nextval`, errors (55000, 428C9) as PostgreSQL;
//! - a serial distribution column routed by its filled value (each row found again by
//!   a routed SELECT), a reference table's placements holding the same ids;
//! - `create_distributed_table` of a table that already has a serial column and rows;
//! - `ALTER TABLE ... SET DEFAULT nextval(...)` on a distributed table; adding a
//!   serial column to one is refused (0A000);
//! - 16 concurrent clients through two pgshard processes: unique ids, and each
//!   session's `currval` its own last id.

mod common;

use bytes::Bytes;
use common::serve::Serve;
use common::{cluster, connect, outcome, plain_postgres, scalar};
use futures_util::{pin_mut, SinkExt};
use tokio_postgres::Client;

async fn copy_in(c: &Client, sql: &str, data: &str) -> String {
    let r = async {
        let sink = c.copy_in(sql).await?;
        pin_mut!(sink);
        sink.send(Bytes::copy_from_slice(data.as_bytes())).await?;
        sink.as_mut().finish().await
    }
    .await;
    match r {
        Ok(n) => format!("ok COPY {n}"),
        Err(e) => format!(
            "error {}",
            e.code().map(|c| c.code().to_string()).unwrap_or_default()
        ),
    }
}

/// Runs `setup` on both (then `distribute` through pgshard only), then each statement
/// of `script` on both, asserting the same answers.
async fn same_script(setup: &str, distribute: &[&str], script: &[&str]) -> (Client, Client) {
    let shard = cluster().client().await;
    let plain = plain_postgres().client().await;
    shard.batch_execute(setup).await.unwrap();
    plain.batch_execute(setup).await.unwrap();
    for d in distribute {
        scalar(&shard, d).await;
    }
    for sql in script {
        let (a, b) = (outcome(&shard, sql).await, outcome(&plain, sql).await);
        assert_eq!(a, b, "{sql}");
    }
    (shard, plain)
}

#[tokio::test]
async fn bigserial_distribution_column_matches_postgres() {
    let (shard, plain) = same_script(
        "DROP TABLE IF EXISTS seq_a; CREATE TABLE seq_a (id bigserial PRIMARY KEY, v text, n int)",
        &["SELECT create_distributed_table('seq_a', 'id')"],
        &[
            "SELECT currval('seq_a_id_seq')",
            "SELECT lastval()",
            "INSERT INTO seq_a (v) VALUES ('a') RETURNING id",
            "SELECT currval('seq_a_id_seq'), lastval()",
            "INSERT INTO seq_a (v) VALUES ('b'), ('c') RETURNING id, v",
            "INSERT INTO seq_a VALUES (DEFAULT, 'd', 4) RETURNING *",
            "INSERT INTO seq_a (v, n) SELECT 'e' || g, g FROM generate_series(1, 3) g",
            "SELECT currval('seq_a_id_seq')",
            "SELECT nextval('seq_a_id_seq')",
            "SELECT setval('seq_a_id_seq', 100)",
            "INSERT INTO seq_a (v) VALUES ('f') RETURNING id",
            "SELECT v FROM seq_a WHERE id = 101",
            "INSERT INTO seq_a (v) SELECT v FROM seq_a WHERE id < 4 ORDER BY id",
            "INSERT INTO seq_a (id, v) VALUES (1000, 'given') RETURNING id",
            "SELECT lastval()",
            "BEGIN",
            "INSERT INTO seq_a (v) VALUES ('in block') RETURNING id",
            "SELECT currval('seq_a_id_seq')",
            "ROLLBACK",
            "INSERT INTO seq_a (v) VALUES ('after rollback') RETURNING id",
            "SELECT id, v, n FROM seq_a ORDER BY id",
        ],
    )
    .await;
    // Prepared (extended protocol), a parameter for the other column.
    let sql = "INSERT INTO seq_a (v) VALUES ($1) RETURNING id";
    let a: i64 = shard.query_one(sql, &[&"p"]).await.unwrap().get(0);
    let b: i64 = plain.query_one(sql, &[&"p"]).await.unwrap().get(0);
    assert_eq!(a, b);
    // COPY without the id column: text, then CSV with a header.
    for (sql, data) in [
        ("COPY seq_a (v, n) FROM STDIN", "g\t7\nh\t8\n"),
        (
            "COPY seq_a (n, v) FROM STDIN (FORMAT csv, HEADER)",
            "n,v\n9,\"i,j\"\n10,k",
        ),
    ] {
        assert_eq!(
            copy_in(&shard, sql, data).await,
            copy_in(&plain, sql, data).await
        );
    }
    for sql in [
        "SELECT currval('seq_a_id_seq')",
        "SELECT id, v, n FROM seq_a ORDER BY id",
    ] {
        assert_eq!(
            outcome(&shard, sql).await,
            outcome(&plain, sql).await,
            "{sql}"
        );
    }
    // Every row where routing by its id finds it.
    for id in shard
        .query("SELECT id FROM seq_a", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get::<_, i64>(0))
    {
        let n: i64 = shard
            .query_one("SELECT count(*) FROM seq_a WHERE id = $1", &[&id])
            .await
            .unwrap()
            .get(0);
        assert_eq!(n, 1, "row {id} not found by its id");
    }
    // The shards have no default: the sequence is the coordinator node's only.
    assert_eq!(
        outcome(&shard, "UPDATE seq_a SET id = DEFAULT WHERE id = 1").await,
        "error 0A000"
    );
}

#[tokio::test]
async fn identity_columns_follow_postgres_rules() {
    same_script(
        "DROP TABLE IF EXISTS seq_i, seq_d; \
         CREATE TABLE seq_i (id int GENERATED ALWAYS AS IDENTITY, k int, v text); \
         CREATE TABLE seq_d (id bigint GENERATED BY DEFAULT AS IDENTITY (START WITH 7), k int)",
        &[
            "SELECT create_distributed_table('seq_i', 'k')",
            "SELECT create_distributed_table('seq_d', 'k')",
        ],
        &[
            "INSERT INTO seq_i (k, v) VALUES (1, 'a') RETURNING id",
            "INSERT INTO seq_i (id, k, v) VALUES (10, 2, 'b')",
            "INSERT INTO seq_i VALUES (10, 2, 'b')",
            "INSERT INTO seq_i (id, k, v) OVERRIDING SYSTEM VALUE VALUES (10, 2, 'b') RETURNING id",
            "UPDATE seq_i SET id = 5 WHERE k = 1",
            "UPDATE seq_i SET v = 'z' WHERE k = 1",
            "INSERT INTO seq_i (k, v) VALUES (3, 'c'), (4, 'd') RETURNING id, k",
            "SELECT id, k, v FROM seq_i ORDER BY k",
            "INSERT INTO seq_d (k) VALUES (1) RETURNING id",
            "INSERT INTO seq_d (id, k) VALUES (50, 2) RETURNING id",
            "INSERT INTO seq_d (id, k) OVERRIDING USER VALUE VALUES (60, 3) RETURNING id",
            "SELECT lastval()",
            "SELECT id, k FROM seq_d ORDER BY k",
        ],
    )
    .await;
}

#[tokio::test]
async fn reference_table_with_serial_and_nextval_default() {
    let (shard, _) = same_script(
        "DROP TABLE IF EXISTS seq_r; DROP SEQUENCE IF EXISTS seq_s; \
         CREATE SEQUENCE seq_s START 1000; \
         CREATE TABLE seq_r (id smallserial, code bigint DEFAULT nextval('seq_s'), name text)",
        &["SELECT create_reference_table('seq_r')"],
        &[
            "INSERT INTO seq_r (name) VALUES ('x'), ('y') RETURNING *",
            "SELECT lastval()",
            "INSERT INTO seq_r (id, name) VALUES (100, 'given') RETURNING code",
            "SELECT currval('seq_r_id_seq'), currval('seq_s')",
            "SELECT id, code, name FROM seq_r ORDER BY id",
        ],
    )
    .await;
    // Every placement holds the same rows.
    let shard_id = scalar(
        &shard,
        "SELECT shardid FROM pg_dist_shard WHERE logicalrelid = 'seq_r'::regclass",
    )
    .await;
    let mut seen = Vec::new();
    for port in &cluster().worker_ports {
        let w = cluster().direct(*port).await;
        seen.push(
            outcome(
                &w,
                &format!("SELECT id, code, name FROM seq_r_{shard_id} ORDER BY id"),
            )
            .await,
        );
    }
    assert!(
        seen.len() >= 2 && seen.iter().all(|s| *s == seen[0]),
        "{seen:?}"
    );
    assert!(seen[0].contains("(1,1000,x)"), "{seen:?}");
}

#[tokio::test]
async fn distributing_a_table_with_serial_rows_and_altering_defaults() {
    same_script(
        "DROP TABLE IF EXISTS seq_pre; DROP SEQUENCE IF EXISTS seq_t; \
         CREATE SEQUENCE seq_t START 500; \
         CREATE TABLE seq_pre (id serial, k int, v text); \
         INSERT INTO seq_pre (k, v) SELECT g, 'old' || g FROM generate_series(1, 5) g",
        &["SELECT create_distributed_table('seq_pre', 'k')"],
        &[
            "INSERT INTO seq_pre (k, v) VALUES (6, 'new') RETURNING id",
            "ALTER TABLE seq_pre ADD COLUMN c bigint",
            "ALTER TABLE seq_pre ALTER COLUMN c SET DEFAULT nextval('seq_t')",
            "INSERT INTO seq_pre (k) VALUES (7), (8) RETURNING id, c",
            "ALTER TABLE seq_pre ALTER COLUMN c DROP DEFAULT",
            "INSERT INTO seq_pre (k) VALUES (9) RETURNING id, c",
            "SELECT id, k, v, c FROM seq_pre ORDER BY id",
        ],
    )
    .await;
    // PostgreSQL would number the rows living on the shards: refused.
    let shard = cluster().client().await;
    assert_eq!(
        outcome(&shard, "ALTER TABLE seq_pre ADD COLUMN s bigserial").await,
        "error 0A000"
    );
}

#[tokio::test]
async fn bigserial_from_16_clients_through_two_processes_is_unique() {
    let first = cluster().client().await;
    first
        .batch_execute(
            "DROP TABLE IF EXISTS seq_c; CREATE TABLE seq_c (id bigserial, client int, v int)",
        )
        .await
        .unwrap();
    scalar(&first, "SELECT create_distributed_table('seq_c', 'id')").await;
    let second = Serve::start("seq-second", |_| {}).expect("second pgshard process");
    let c = cluster();
    let mut tasks = Vec::new();
    for client in 0..16i32 {
        let port = if client % 2 == 0 { c.port } else { second.port };
        let (host, user, password, db) = (
            c.host.clone(),
            c.user.clone(),
            c.password.clone(),
            c.database.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let s = connect(&host, port, &user, &password, &db).await;
            for i in 0..20i32 {
                let id: i64 = match i % 3 {
                    0 => s
                        .query_one(
                            "INSERT INTO seq_c (client, v) VALUES ($1, $2) RETURNING id",
                            &[&client, &i],
                        )
                        .await
                        .unwrap()
                        .get(0),
                    1 => {
                        let rows = s
                            .query(
                                "INSERT INTO seq_c (client, v) VALUES ($1, $2), ($1, $2) RETURNING id",
                                &[&client, &i],
                            )
                            .await
                            .unwrap();
                        rows.iter().map(|r| r.get::<_, i64>(0)).max().unwrap()
                    }
                    _ => {
                        let data = format!("{client}\t{i}\n{client}\t{i}\n");
                        assert_eq!(
                            copy_in(&s, "COPY seq_c (client, v) FROM STDIN", &data).await,
                            "ok COPY 2"
                        );
                        scalar(&s, "SELECT lastval()").await.parse().unwrap()
                    }
                };
                // The session's own last value, whatever the others did meanwhile.
                let current: i64 = scalar(&s, "SELECT currval('seq_c_id_seq')")
                    .await
                    .parse()
                    .unwrap();
                assert_eq!(current, id, "client {client}");
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    // 16 clients x (7 single + 7 double + 6 COPY of 2 = 33) rows.
    assert_eq!(
        scalar(
            &first,
            "SELECT count(*)::text || ' ' || count(DISTINCT id)::text FROM seq_c"
        )
        .await,
        "528 528"
    );
    let probe = cluster().client().await;
    for id in probe
        .query("SELECT id FROM seq_c ORDER BY id LIMIT 40", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get::<_, i64>(0))
    {
        let n: i64 = probe
            .query_one("SELECT count(*) FROM seq_c WHERE id = $1", &[&id])
            .await
            .unwrap()
            .get(0);
        assert_eq!(n, 1, "row {id}");
    }
    drop(second);
}
