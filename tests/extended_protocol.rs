//! The extended query protocol as PostgreSQL runs it, compared with one plain
//! PostgreSQL holding the same objects (issue 17):
//! - a client's named prepared statements on local tables are PostgreSQL's own on the
//!   client's coordinator-node backend (`pg_prepared_statements`, SQL EXECUTE,
//!   DEALLOCATE), and DDL changing a prepared statement's result type makes its next
//!   execution fail with 0A000 "cached plan must not change result type", on local
//!   and on distributed tables alike.

mod common;

use common::{cluster, plain_postgres};
use tokio_postgres::{Client, SimpleQueryMessage};

/// A statement's rows as text, or its SQLSTATE.
type Outcome = Result<Vec<Vec<Option<String>>>, String>;

fn code(e: tokio_postgres::Error) -> String {
    e.as_db_error()
        .map(|d| d.code().code().to_string())
        .unwrap_or_else(|| format!("not a server error: {e}"))
}

async fn simple(c: &Client, sql: &str) -> Outcome {
    match c.simple_query(sql).await {
        Ok(m) => Ok(common::sorted_simple_rows(&m)),
        Err(e) => Err(code(e)),
    }
}

fn rows_text(rows: &[tokio_postgres::Row]) -> Vec<Vec<Option<String>>> {
    rows.iter()
        .map(|r| {
            (0..r.len())
                .map(|i| r.get::<_, Option<i32>>(i).map(|v| v.to_string()))
                .collect()
        })
        .collect()
}

async fn run(c: &Client, stmt: &tokio_postgres::Statement, key: i32) -> Outcome {
    let params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
        if stmt.params().is_empty() { vec![] } else { vec![&key] };
    match c.query(stmt, &params).await {
        Ok(rows) => Ok(rows_text(&rows)),
        Err(e) => Err(code(e)),
    }
}

/// Both targets: through pgshard first, then the plain server.
async fn targets() -> [Client; 2] {
    [cluster().client().await, plain_postgres().client().await]
}

/// Runs `sql` on both (through pgshard and on the plain server); `distribute` names a
/// table to distribute by `k` through pgshard.
async fn setup(sql: &[&str], distribute: Option<&str>) {
    let [shard, plain] = targets().await;
    for s in sql {
        shard.batch_execute(s).await.unwrap_or_else(|e| panic!("{s}: {e}"));
        plain.batch_execute(s).await.unwrap_or_else(|e| panic!("{s}: {e}"));
    }
    if let Some(t) = distribute {
        shard
            .batch_execute(&format!("SELECT create_distributed_table('{t}', 'k')"))
            .await
            .unwrap();
    }
}

fn prepared_list(msgs: &[SimpleQueryMessage]) -> Vec<Vec<Option<String>>> {
    common::sorted_simple_rows(msgs)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn named_statements_on_local_tables_are_postgresqls_own() {
    setup(
        &[
            "DROP TABLE IF EXISTS ep_local",
            "CREATE TABLE ep_local (k int, a int, b int)",
            "INSERT INTO ep_local VALUES (1, 10, 100), (2, 20, 200)",
        ],
        None,
    )
    .await;
    let mut seen = vec![];
    for c in targets().await {
        let list = "SELECT statement FROM pg_prepared_statements WHERE statement LIKE '%ep_local%' ORDER BY name";
        let all = c.prepare("SELECT * FROM ep_local WHERE k = $1").await.unwrap();
        let one = c.prepare("SELECT a FROM ep_local WHERE k = $1").await.unwrap();
        // tokio-postgres does not say its statement's name (a counter of the process): the server does.
        let name: String = c
            .query_one("SELECT name FROM pg_prepared_statements WHERE statement = 'SELECT a FROM ep_local WHERE k = $1'", &[])
            .await
            .unwrap()
            .get(0);
        let mut o: Vec<(&str, Outcome)> = vec![
            ("listed", Ok(prepared_list(&c.simple_query(list).await.unwrap()))),
            ("all", run(&c, &all, 1).await),
            ("one", run(&c, &one, 2).await),
            // SQL EXECUTE finds a statement prepared by Parse (one namespace).
            ("execute", simple(&c, &format!("EXECUTE {name}(2)")).await),
        ];
        c.batch_execute("ALTER TABLE ep_local ADD COLUMN c int").await.unwrap();
        o.push(("all after DDL", run(&c, &all, 1).await));
        o.push(("all again", run(&c, &all, 1).await));
        o.push(("one after DDL", run(&c, &one, 1).await));
        c.batch_execute(&format!("DEALLOCATE {name}")).await.unwrap();
        o.push(("after DEALLOCATE", Ok(prepared_list(&c.simple_query(list).await.unwrap()))));
        drop(all);
        // The Close of the dropped statement went before this query.
        o.push(("after Close", Ok(prepared_list(&c.simple_query(list).await.unwrap()))));
        c.batch_execute("ALTER TABLE ep_local DROP COLUMN c").await.unwrap();
        seen.push(o);
    }
    let (shard, plain) = (&seen[0], &seen[1]);
    assert_eq!(shard, plain);
    // What PostgreSQL does, so that the comparison cannot pass on both failing alike.
    assert!(matches!(&plain[0].1, Ok(r) if r.len() == 2));
    assert_eq!(plain[4].1, Err("0A000".to_string()));
    assert!(matches!(&plain[7].1, Ok(r) if r.len() == 1));
    assert!(matches!(&plain[8].1, Ok(r) if r.is_empty()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_result_type_of_a_distributed_table_is_postgresqls_0a000() {
    setup(
        &[
            "DROP TABLE IF EXISTS ep_dist",
            "CREATE TABLE ep_dist (k int, a int, b int)",
        ],
        Some("ep_dist"),
    )
    .await;
    setup(&["INSERT INTO ep_dist VALUES (1, 10, 100), (2, 20, 200)"], None).await;
    let mut seen = vec![];
    for c in targets().await {
        let all = c.prepare("SELECT * FROM ep_dist WHERE k = $1").await.unwrap();
        let many = c.prepare("SELECT * FROM ep_dist ORDER BY k").await.unwrap();
        let one = c.prepare("SELECT a FROM ep_dist WHERE k = $1").await.unwrap();
        let mut o: Vec<(&str, Outcome)> = vec![
            ("all", run(&c, &all, 1).await),
            ("many", run(&c, &many, 0).await),
            ("one", run(&c, &one, 2).await),
        ];
        c.batch_execute("ALTER TABLE ep_dist ADD COLUMN c int").await.unwrap();
        o.push(("all after DDL", run(&c, &all, 1).await));
        o.push(("all again", run(&c, &all, 2).await));
        o.push(("many after DDL", run(&c, &many, 0).await));
        o.push(("one after DDL", run(&c, &one, 1).await));
        let again = c.prepare("SELECT * FROM ep_dist WHERE k = $1").await.unwrap();
        o.push(("prepared again", run(&c, &again, 1).await));
        c.batch_execute("ALTER TABLE ep_dist DROP COLUMN c").await.unwrap();
        seen.push(o);
    }
    let (shard, plain) = (&seen[0], &seen[1]);
    assert_eq!(shard, plain);
    assert_eq!(plain[3].1, Err("0A000".to_string()));
    assert_eq!(plain[5].1, Err("0A000".to_string()));
    assert!(matches!(&plain[6].1, Ok(r) if r.len() == 1));
}
