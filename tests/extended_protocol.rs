//! The extended query protocol as PostgreSQL runs it, compared with one plain
//! PostgreSQL holding the same objects (issue 17):
//! - a client's named prepared statements on local tables are PostgreSQL's own on the
//!   client's coordinator-node backend (`pg_prepared_statements`, SQL EXECUTE,
//!   DEALLOCATE), and DDL changing a prepared statement's result type makes its next
//!   execution fail with 0A000 "cached plan must not change result type", on local
//!   and on distributed tables alike;
//! - the statements of one simple Query (also around a COMMIT / ROLLBACK / BEGIN among
//!   them) and of one extended-protocol batch up to Sync are PostgreSQL's implicit
//!   transactions: an error rolls back the statements of its own;
//! - `statement_timeout` runs while the client pauses between Parse and Describe.

mod common;

use bytes::BytesMut;
use common::raw::{raw_targets, write_unnamed_statement, Msg, Raw};
use common::{cluster, plain_postgres};
use postgres_protocol::message::frontend;
use std::time::Duration;
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
    let params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = if stmt.params().is_empty() {
        vec![]
    } else {
        vec![&key]
    };
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
        shard
            .batch_execute(s)
            .await
            .unwrap_or_else(|e| panic!("{s}: {e}"));
        plain
            .batch_execute(s)
            .await
            .unwrap_or_else(|e| panic!("{s}: {e}"));
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
        let all = c
            .prepare("SELECT * FROM ep_local WHERE k = $1")
            .await
            .unwrap();
        let one = c
            .prepare("SELECT a FROM ep_local WHERE k = $1")
            .await
            .unwrap();
        // tokio-postgres does not say its statement's name (a counter of the process): the server does.
        let name: String = c
            .query_one("SELECT name FROM pg_prepared_statements WHERE statement = 'SELECT a FROM ep_local WHERE k = $1'", &[])
            .await
            .unwrap()
            .get(0);
        let mut o: Vec<(&str, Outcome)> = vec![
            (
                "listed",
                Ok(prepared_list(&c.simple_query(list).await.unwrap())),
            ),
            ("all", run(&c, &all, 1).await),
            ("one", run(&c, &one, 2).await),
            // SQL EXECUTE finds a statement prepared by Parse (one namespace).
            ("execute", simple(&c, &format!("EXECUTE {name}(2)")).await),
        ];
        c.batch_execute("ALTER TABLE ep_local ADD COLUMN c int")
            .await
            .unwrap();
        o.push(("all after DDL", run(&c, &all, 1).await));
        o.push(("all again", run(&c, &all, 1).await));
        o.push(("one after DDL", run(&c, &one, 1).await));
        c.batch_execute(&format!("DEALLOCATE {name}"))
            .await
            .unwrap();
        o.push((
            "after DEALLOCATE",
            Ok(prepared_list(&c.simple_query(list).await.unwrap())),
        ));
        drop(all);
        // The Close of the dropped statement went before this query.
        o.push((
            "after Close",
            Ok(prepared_list(&c.simple_query(list).await.unwrap())),
        ));
        c.batch_execute("ALTER TABLE ep_local DROP COLUMN c")
            .await
            .unwrap();
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
    setup(
        &["INSERT INTO ep_dist VALUES (1, 10, 100), (2, 20, 200)"],
        None,
    )
    .await;
    let mut seen = vec![];
    for c in targets().await {
        let all = c
            .prepare("SELECT * FROM ep_dist WHERE k = $1")
            .await
            .unwrap();
        let many = c.prepare("SELECT * FROM ep_dist ORDER BY k").await.unwrap();
        let one = c
            .prepare("SELECT a FROM ep_dist WHERE k = $1")
            .await
            .unwrap();
        let mut o: Vec<(&str, Outcome)> = vec![
            ("all", run(&c, &all, 1).await),
            ("many", run(&c, &many, 0).await),
            ("one", run(&c, &one, 2).await),
        ];
        c.batch_execute("ALTER TABLE ep_dist ADD COLUMN c int")
            .await
            .unwrap();
        o.push(("all after DDL", run(&c, &all, 1).await));
        o.push(("all again", run(&c, &all, 2).await));
        o.push(("many after DDL", run(&c, &many, 0).await));
        o.push(("one after DDL", run(&c, &one, 1).await));
        let again = c
            .prepare("SELECT * FROM ep_dist WHERE k = $1")
            .await
            .unwrap();
        o.push(("prepared again", run(&c, &again, 1).await));
        c.batch_execute("ALTER TABLE ep_dist DROP COLUMN c")
            .await
            .unwrap();
        seen.push(o);
    }
    let (shard, plain) = (&seen[0], &seen[1]);
    assert_eq!(shard, plain);
    assert_eq!(plain[3].1, Err("0A000".to_string()));
    assert_eq!(plain[5].1, Err("0A000".to_string()));
    assert!(matches!(&plain[6].1, Ok(r) if r.len() == 1));
}

impl Raw {
    /// Parse / Bind / Execute of each statement (unnamed, no parameters), then one
    /// Sync: the answers in a comparable form (tags, SQLSTATEs, rows, status).
    async fn batch(&mut self, statements: &[&str]) -> Vec<String> {
        let mut out = BytesMut::new();
        for sql in statements {
            write_unnamed_statement(&mut out, sql);
        }
        frontend::sync(&mut out);
        self.send(&out).await;
        self.until_ready().await.iter().map(comparable).collect()
    }
}

/// Parse / Bind / Describe / Execute of `sql` (unnamed, no parameters).
fn comparable((tag, body): &Msg) -> String {
    match tag {
        b'E' => {
            let code = body
                .split(|&b| b == 0)
                .find(|f| f.first() == Some(&b'C'))
                .map(|f| String::from_utf8_lossy(&f[1..]).into_owned());
            format!("E {}", code.unwrap_or_default())
        }
        b'D' => format!("D {:?}", String::from_utf8_lossy(body)),
        b'C' => format!("C {}", String::from_utf8_lossy(body).trim_end_matches('\0')),
        b'Z' => format!("Z {}", body[0] as char),
        other => format!("{}", *other as char),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extended_batch_is_one_implicit_transaction() {
    setup(
        &[
            "DROP TABLE IF EXISTS ep_batch",
            "CREATE TABLE ep_batch (id int)",
        ],
        None,
    )
    .await;
    let mut seen = vec![];
    for mut r in raw_targets().await {
        let o = vec![
            r.batch(&[
                "insert into ep_batch(id) values(1)",
                "insert into ep_batch(id) values(2)",
                "insert into ep_batch(id) values(3)",
                "select 1/0",
            ])
            .await,
            r.batch(&[
                "insert into ep_batch(id) values(4)",
                "select count(*) from ep_batch",
            ])
            .await,
            r.batch(&["select count(*) from ep_batch"]).await,
        ];
        seen.push(o);
    }
    assert_eq!(seen[0], seen[1]);
    assert!(seen[1][0].contains(&"E 22012".to_string()));
    assert!(
        seen[1][2].contains(&"D \"\\0\\u{1}\\0\\0\\0\\u{1}1\"".to_string()),
        "{:?}",
        seen[1]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_string_is_one_implicit_transaction_around_commit() {
    setup(
        &[
            "DROP TABLE IF EXISTS ep_it, ep_it_dist",
            "CREATE TABLE ep_it (f1 int)",
            "CREATE TABLE ep_it_dist (k int, v int)",
        ],
        Some("ep_it_dist"),
    )
    .await;
    let script = [
        "insert into ep_it values(7); commit; insert into ep_it values(8); select 1/0",
        "insert into ep_it values(9); rollback; select 2",
        "select 1; begin; insert into ep_it values(5)",
        "commit",
        "select 1; begin; insert into ep_it values(6)",
        // The block the string left open is the session's: a distributed table joins it.
        "insert into ep_it_dist values (1, 6)",
        "rollback",
        "select 1; begin; insert into ep_it values(10); select 1/0",
        "select 1",
        "rollback",
        "SELECT 1; COMMIT; VACUUM ep_it",
        "SELECT 1; SAVEPOINT sp",
        "select * from ep_it order by f1",
        "select * from ep_it_dist",
    ];
    let mut seen = vec![];
    for c in targets().await {
        let mut o = vec![];
        for sql in script {
            o.push((sql, simple(&c, sql).await));
        }
        seen.push(o);
    }
    assert_eq!(seen[0], seen[1]);
    let rows =
        |v: &[&str]| -> Outcome { Ok(v.iter().map(|x| vec![Some(x.to_string())]).collect()) };
    assert_eq!(seen[1][12].1, rows(&["5", "7"]));
    assert_eq!(seen[1][10].1, Err("25001".to_string()));
}

impl Raw {
    /// Whatever arrives within `wait`, comparable.
    async fn drain_for(&mut self, wait: Duration) -> Vec<String> {
        self.received_within(wait)
            .await
            .iter()
            .map(comparable)
            .collect()
    }

    async fn send_built(&mut self, build: impl FnOnce(&mut BytesMut)) {
        let mut out = BytesMut::new();
        build(&mut out);
        self.send(&out).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statement_timeout_runs_between_parse_and_describe() {
    let mut seen = vec![];
    for mut r in raw_targets().await {
        r.send_built(|b| frontend::query("set statement_timeout = '100ms'", b).unwrap())
            .await;
        r.until_ready().await;
        r.send_built(|b| {
            frontend::parse("ep_timeout", "select $1::varchar", std::iter::empty(), b).unwrap();
            frontend::flush(b);
        })
        .await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        r.send_built(|b| {
            frontend::describe(b'S', "ep_timeout", b).unwrap();
            frontend::sync(b);
        })
        .await;
        let mut o = vec![r
            .until_ready()
            .await
            .iter()
            .map(comparable)
            .collect::<Vec<_>>()];
        // Nothing more: the late Describe was skipped up to the Sync, whose
        // ReadyForQuery that was.
        assert_eq!(
            r.drain_for(Duration::from_millis(300)).await,
            Vec::<String>::new()
        );
        r.send_built(|b| frontend::query("set statement_timeout = default", b).unwrap())
            .await;
        r.until_ready().await;
        // The statement was prepared before the timeout; a batch without pauses runs.
        r.send_built(|b| {
            frontend::query(
                "select count(*) from pg_prepared_statements where name = 'ep_timeout'",
                b,
            )
            .unwrap()
        })
        .await;
        o.push(r.until_ready().await.iter().map(comparable).collect());
        r.send_built(|b| frontend::query("set statement_timeout = '100ms'", b).unwrap())
            .await;
        r.until_ready().await;
        o.push(r.batch(&["select 1", "select 2"]).await);
        seen.push(o);
    }
    assert_eq!(seen[0], seen[1]);
    assert_eq!(seen[1][0], ["1", "E 57014", "Z I"]);
}

/// A pipeline flushed before its Sync, with an error in the middle (pgx's
/// TestPipelineFlushWithError): the results up to the error arrive at the Flush, the
/// statements after it are skipped (pgshard once waited for the Describe of the next
/// one on a node that skips to Sync, and hung), and the Sync ends the batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flushed_pipeline_with_an_error_answers_as_postgresql() {
    let mut seen = vec![];
    for mut r in raw_targets().await {
        r.send_built(|b| {
            write_unnamed_statement(b, "select 1");
            write_unnamed_statement(b, "select 1/(3-n) from generate_series(1,5) n");
            write_unnamed_statement(b, "select 2");
            frontend::flush(b);
        })
        .await;
        let mut o = vec![r.drain_for(Duration::from_millis(1500)).await];
        r.send_built(|b| {
            write_unnamed_statement(b, "select 3");
            frontend::sync(b);
        })
        .await;
        o.push(r.until_ready().await.iter().map(comparable).collect());
        o.push(r.batch(&["select 4"]).await);
        seen.push(o);
    }
    assert_eq!(seen[0], seen[1]);
    assert!(seen[1][0].contains(&"E 22012".to_string()), "{:?}", seen[1]);
}
