//! Row-level security through pgshard filters and checks rows exactly as one
//! PostgreSQL with the same policies: policies reading a session setting
//! (`current_setting('app.tenant')`) and `current_user`, on a distributed and a
//! reference table, for two roles whose setting comes from SET, SET LOCAL and
//! `set_config`, over routed and multi-shard SELECT / UPDATE / DELETE / INSERT (WITH
//! CHECK), INSERT ... SELECT (rows as INSERTs on the shards, WITH CHECK, RETURNING),
//! `set_config` as a prepared statement. Every statement's rows or SQLSTATE are compared with the plain PostgreSQL
//! oracle, where the same statements run in the same order.

mod common;

use bytes::Bytes;
use common::{cluster, connect, plain_postgres};
use futures_util::{pin_mut, SinkExt, StreamExt};
use tokio_postgres::Client;

const SETUP: &[&str] = &[
    "DROP TABLE IF EXISTS rs_docs, rs_ref",
    "DROP ROLE IF EXISTS rs_u1",
    "DROP ROLE IF EXISTS rs_u2",
    "CREATE ROLE rs_u1 LOGIN PASSWORD 'rs pw'",
    "CREATE ROLE rs_u2 LOGIN PASSWORD 'rs pw'",
    "CREATE TABLE rs_docs (k int PRIMARY KEY, tenant text, owner text, v int)",
    "CREATE TABLE rs_ref (k int PRIMARY KEY, tenant text, owner text, v int)",
];

const DISTRIBUTE: &[&str] = &[
    "SELECT create_distributed_table('rs_docs', 'k')",
    "SELECT create_reference_table('rs_ref')",
];

const POLICIES: &[&str] = &[
    "INSERT INTO rs_docs SELECT g, 't' || (g % 2), CASE WHEN g % 3 = 0 THEN 'rs_u1' ELSE 'rs_u2' END, g FROM generate_series(1, 24) g",
    "ALTER TABLE rs_docs ENABLE ROW LEVEL SECURITY",
    "ALTER TABLE rs_ref ENABLE ROW LEVEL SECURITY",
    "CREATE POLICY rs_tenant ON rs_docs USING (tenant = current_setting('app.tenant', true)) WITH CHECK (tenant = current_setting('app.tenant', true))",
    "CREATE POLICY rs_owner ON rs_docs FOR SELECT USING (owner = current_user)",
    "CREATE POLICY rs_tenant ON rs_ref USING (tenant = current_setting('app.tenant', true)) WITH CHECK (tenant = current_setting('app.tenant', true))",
    "CREATE POLICY rs_owner ON rs_ref FOR SELECT USING (owner = current_user)",
    "GRANT SELECT, INSERT, UPDATE, DELETE ON rs_docs, rs_ref TO rs_u1, rs_u2",
];

/// Rows (sorted) or SQLSTATE.
async fn outcome(c: &Client, sql: &str) -> Result<Vec<Vec<Option<String>>>, String> {
    match c.simple_query(sql).await {
        Ok(msgs) => Ok(common::sorted_simple_rows(&msgs)),
        Err(e) => Err(e
            .as_db_error()
            .map(|d| d.code().code().to_string())
            .unwrap_or_else(|| format!("not a server error: {e}"))),
    }
}

/// What each role runs once its tenant is set (`{n}` makes inserted keys unique).
const SCRIPT: &[&str] = &[
    "SELECT k, tenant, owner FROM rs_docs WHERE k = 4",
    "SELECT k, tenant, owner FROM rs_docs WHERE k = 3",
    "SELECT k, v FROM rs_docs",
    "SELECT count(*), sum(v) FROM rs_docs",
    "SELECT k, v FROM rs_ref",
    "SELECT k FROM rs_ref WHERE k = 6",
    "UPDATE rs_docs SET v = v + 1 WHERE k = 5 RETURNING k, v",
    "UPDATE rs_docs SET v = v + 1 RETURNING k, v",
    "DELETE FROM rs_docs WHERE k = {n} + 1 RETURNING k",
    "DELETE FROM rs_docs WHERE k > 20 AND k < 23 + {n} RETURNING k",
    "INSERT INTO rs_docs VALUES (100 + {n}, current_setting('app.tenant', true), 'x', 0) RETURNING k",
    "INSERT INTO rs_docs VALUES (200 + {n}, 't0', 'x', 0)",
    "INSERT INTO rs_docs VALUES (300 + {n}, 't1', 'x', 0)",
    "UPDATE rs_docs SET tenant = 't9' WHERE k = 2",
    "UPDATE rs_ref SET v = v + 1 RETURNING k, v",
    "INSERT INTO rs_ref VALUES (400 + {n}, 't0', 'x', 0)",
    "DELETE FROM rs_ref WHERE k = {n} RETURNING k",
];

/// INSERT ... SELECT into the table with row-level security, run by each role in
/// autocommit: rows from `generate_series` (the SELECT on the coordinator node) and
/// from the distributed table itself with its key changed (the SELECT through
/// pgshard), allowed or refused by the policies' WITH CHECK (42501).
const INSERT_SELECT: &[&str] = &[
    "INSERT INTO rs_docs SELECT 600 + {n} * 10 + g, current_setting('app.tenant', true), 'x', g FROM generate_series(1, 3) g",
    "INSERT INTO rs_docs SELECT 700 + {n} * 10 + g, 't9', 'x', g FROM generate_series(1, 3) g",
    "INSERT INTO rs_docs (k, tenant, owner, v) SELECT k + 800 + {n} * 100, tenant, 'x', v FROM rs_docs WHERE k < 10 AND tenant = current_setting('app.tenant', true)",
    "INSERT INTO rs_docs SELECT k + 2000 + {n} * 100, tenant, owner, v FROM rs_docs WHERE k < 10",
    "INSERT INTO rs_docs (k, tenant) SELECT k + 3000 + {n} * 100, 't0' FROM rs_docs WHERE k < 10 AND owner = current_user",
    "INSERT INTO rs_docs SELECT 5000 + {n} * 10 + g, current_setting('app.tenant', true), 'x', g FROM generate_series(1, 3) g RETURNING k, v * 2 AS w, rs_docs.tenant",
    "INSERT INTO rs_docs AS d (k, tenant, owner, v) SELECT k + 6000 + {n} * 100, tenant, 'x', v FROM rs_docs WHERE k < 10 AND tenant = current_setting('app.tenant', true) RETURNING d.k, d.owner",
    "INSERT INTO rs_docs SELECT 6500 + {n} * 10 + g, 't9', 'x', g FROM generate_series(1, 2) g RETURNING k",
];

/// The error of a statement expected to fail: SQLSTATE and message.
async fn failure(c: &Client, sql: &str) -> Option<(String, String)> {
    let e = c.simple_query(sql).await.err()?;
    let d = e.as_db_error()?;
    Some((d.code().code().to_string(), d.message().to_string()))
}

/// COPY ... TO STDOUT: its lines sorted, or SQLSTATE.
async fn copy_out(c: &Client, sql: &str) -> Result<Vec<String>, String> {
    let code = |e: tokio_postgres::Error| {
        e.as_db_error()
            .map(|d| d.code().code().to_string())
            .unwrap_or(e.to_string())
    };
    let stream = c.copy_out(sql).await.map_err(code)?;
    pin_mut!(stream);
    let mut out = Vec::new();
    while let Some(chunk) = stream.next().await {
        out.extend_from_slice(&chunk.map_err(code)?);
    }
    let mut lines: Vec<String> = String::from_utf8_lossy(&out)
        .lines()
        .map(str::to_string)
        .collect();
    lines.sort();
    Ok(lines)
}

/// COPY ... FROM STDIN of `data`: rows copied, or SQLSTATE.
async fn copy_in(c: &Client, sql: &str, data: &str) -> Result<u64, String> {
    let code = |e: tokio_postgres::Error| {
        e.as_db_error()
            .map(|d| d.code().code().to_string())
            .unwrap_or(e.to_string())
    };
    let sink = c.copy_in(sql).await.map_err(code)?;
    pin_mut!(sink);
    sink.send(Bytes::copy_from_slice(data.as_bytes()))
        .await
        .map_err(code)?;
    sink.as_mut().finish().await.map_err(code)
}

async fn both(shard: &Client, plain: &Client, sql: &str, what: &str) {
    assert_eq!(
        outcome(shard, sql).await,
        outcome(plain, sql).await,
        "{what}: {sql}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policies_filter_and_check_as_on_postgres() {
    let cl = cluster();
    let pg = plain_postgres();
    let admin = cl.client().await;
    let admin_plain = pg.client().await;
    for sql in SETUP {
        admin
            .batch_execute(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        admin_plain
            .batch_execute(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    for sql in DISTRIBUTE {
        admin
            .batch_execute(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    // A reference table takes rows as VALUES (not from a SELECT of local rows).
    let values: Vec<String> = (1..=12)
        .map(|g| {
            format!(
                "({g}, 't{}', '{}', {g})",
                g % 2,
                if g % 3 == 0 { "rs_u1" } else { "rs_u2" }
            )
        })
        .collect();
    let ref_rows = format!("INSERT INTO rs_ref VALUES {}", values.join(", "));
    admin.batch_execute(&ref_rows).await.unwrap();
    admin_plain.batch_execute(&ref_rows).await.unwrap();
    for sql in POLICIES {
        admin
            .batch_execute(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        admin_plain
            .batch_execute(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    // (role, how its tenant is set, in a block)
    let ways: &[(&str, &str, bool)] = &[
        ("rs_u1", "SET app.tenant = 't0'", false),
        (
            "rs_u2",
            "SELECT set_config('app.tenant', 't1', false)",
            false,
        ),
        ("rs_u1", "SET LOCAL app.tenant = 't1'", true),
        ("rs_u2", "SELECT set_config('app.tenant', 't0', true)", true),
    ];
    for (n, (role, set, block)) in ways.iter().enumerate() {
        let shard = connect(&cl.host, cl.port, role, "rs pw", &cl.database).await;
        let plain = connect(&pg.host, pg.port, role, "rs pw", &pg.database).await;
        let what = format!("{role} after {set}");
        if *block {
            both(&shard, &plain, "BEGIN", &what).await;
        }
        both(&shard, &plain, set, &what).await;
        for sql in SCRIPT {
            let sql = sql.replace("{n}", &n.to_string());
            both(&shard, &plain, &sql, &what).await;
        }
        for sql in [
            "COPY rs_docs TO STDOUT",
            "COPY (SELECT k FROM rs_docs WHERE k < 10) TO STDOUT",
        ] {
            assert_eq!(
                copy_out(&shard, sql).await,
                copy_out(&plain, sql).await,
                "{what}: {sql}"
            );
        }
        if *block {
            both(&shard, &plain, "COMMIT", &what).await;
        }
        for sql in INSERT_SELECT {
            let sql = sql.replace("{n}", &n.to_string());
            both(&shard, &plain, &sql, &format!("{what}, in autocommit")).await;
        }
        // The same through the extended protocol, a parameter in the SELECT.
        let sql = "INSERT INTO rs_docs SELECT 7000 + $1::int * 10 + g, current_setting('app.tenant', true), 'x', g \
                   FROM generate_series(1, 3) g RETURNING k, tenant";
        let rows = |r: Result<Vec<tokio_postgres::Row>, tokio_postgres::Error>| -> Result<Vec<(i32, Option<String>)>, String> {
            let mut v: Vec<(i32, Option<String>)> = r
                .map_err(|e| e.as_db_error().map(|d| d.code().code().to_string()).unwrap_or(e.to_string()))?
                .iter()
                .map(|r| (r.get(0), r.get(1)))
                .collect();
            v.sort();
            Ok(v)
        };
        assert_eq!(
            rows(shard.query(sql, &[&(n as i32)]).await),
            rows(plain.query(sql, &[&(n as i32)]).await),
            "{what}: {sql}"
        );
        // A WITH CHECK violation reads as PostgreSQL's (42501, naming the table).
        let sql = format!(
            "INSERT INTO rs_docs SELECT 4000 + {n} + g, 't9', 'x', g FROM generate_series(1, 2) g"
        );
        let refused = failure(&shard, &sql).await;
        assert!(refused.is_some(), "{what}: {sql}");
        assert_eq!(refused, failure(&plain, &sql).await, "{what}: {sql}");
        // COPY FROM into a table with row-level security: PostgreSQL refuses it (0A000).
        // (COPY of reference tables is not supported by pgshard yet, RLS or not.)
        let rows = format!("{}\tt0\tx\t0\n", 500 + n);
        // On connections of their own: tokio-postgres closes one whose COPY FROM failed.
        let shard_copy = connect(&cl.host, cl.port, role, "rs pw", &cl.database).await;
        let plain_copy = connect(&pg.host, pg.port, role, "rs pw", &pg.database).await;
        let sql = "COPY rs_docs FROM STDIN";
        assert_eq!(
            copy_in(&shard_copy, sql, &rows).await,
            copy_in(&plain_copy, sql, &rows).await,
            "{what}: {sql}"
        );
        // What every role's policies leave visible, and the whole table as stored.
        both(
            &shard,
            &plain,
            "SELECT k, tenant, v FROM rs_docs",
            &format!("{what}, after"),
        )
        .await;
    }
    // set_config as a prepared statement (extended protocol) is followed like a SET.
    let shard = connect(&cl.host, cl.port, "rs_u1", "rs pw", &cl.database).await;
    let plain = connect(&pg.host, pg.port, "rs_u1", "rs pw", &pg.database).await;
    for tenant in ["t1", "t0"] {
        let set = "SELECT set_config('app.tenant', $1, false)";
        let value = |r: Result<tokio_postgres::Row, tokio_postgres::Error>| {
            r.map(|r| r.get::<_, String>(0)).map_err(|e| e.to_string())
        };
        assert_eq!(
            value(shard.query_one(set, &[&tenant]).await),
            value(plain.query_one(set, &[&tenant]).await)
        );
        let what = format!("rs_u1 after a prepared set_config to {tenant}");
        both(&shard, &plain, "SELECT k, tenant, v FROM rs_docs", &what).await;
        both(
            &shard,
            &plain,
            "SELECT k, tenant FROM rs_docs WHERE k = 5",
            &what,
        )
        .await;
        let sql = format!("INSERT INTO rs_docs SELECT 8000 + 10 * {} + g, '{tenant}', 'x', g FROM generate_series(1, 3) g RETURNING k", &tenant[1..]);
        both(&shard, &plain, &sql, &what).await;
    }
    both(&admin, &admin_plain, "SELECT * FROM rs_docs", "stored rows").await;
    both(&admin, &admin_plain, "SELECT * FROM rs_ref", "stored rows").await;
}
