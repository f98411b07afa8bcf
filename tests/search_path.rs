//! Table names resolved through the session's `search_path`, as PostgreSQL resolves
//! them: the same table names in several schemas, distributed and local (and
//! temporary), the path set per session (`SET`, `set_config`) and per transaction
//! (`SET LOCAL`), for SELECT, INSERT/UPDATE/DELETE, prepared statements, DDL, DROP,
//! COPY, TRUNCATE and the Citus functions taking a table. Every statement runs through
//! pgshard and on one plain PostgreSQL holding the same objects: same rows, same
//! SQLSTATE. Each test has schemas and tables of its own (tests run concurrently).

mod common;

use common::{cluster, plain_postgres};
use futures_util::SinkExt;
use std::time::Duration;
use tokio_postgres::{Client, SimpleQueryMessage};

/// What a statement gave: its rows as text (sorted), or its SQLSTATE.
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

/// Both sides: through pgshard and on the plain server.
struct Pair {
    shard: Client,
    plain: Client,
}

impl Pair {
    async fn new() -> Pair {
        Pair {
            shard: cluster().client().await,
            plain: plain_postgres().client().await,
        }
    }

    /// Runs `sql` on both sides (must succeed on both).
    async fn both(&self, sql: &str) {
        self.shard
            .batch_execute(sql)
            .await
            .unwrap_or_else(|e| panic!("pgshard: {sql}: {e}"));
        self.plain
            .batch_execute(sql)
            .await
            .unwrap_or_else(|e| panic!("plain: {sql}: {e}"));
    }

    /// Runs `sql` through pgshard only (Citus functions).
    async fn shard_only(&self, sql: &str) {
        self.shard
            .batch_execute(sql)
            .await
            .unwrap_or_else(|e| panic!("pgshard: {sql}: {e}"));
    }

    /// The same answer on both sides.
    async fn same(&self, sql: &str) {
        let got = outcome(self.shard.simple_query(sql).await);
        let want = outcome(self.plain.simple_query(sql).await);
        assert_eq!(got, want, "{sql}");
    }

    /// Every statement of `script`, each with the same answer on both sides.
    async fn script(&self, script: &[&str]) {
        for sql in script {
            self.same(sql).await;
        }
    }
}

/// `COPY ... TO STDOUT`'s lines, sorted.
async fn copy_out(c: &Client, sql: &str) -> Vec<String> {
    use futures_util::TryStreamExt;
    let stream = c
        .copy_out(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    let chunks: Vec<bytes::Bytes> = stream.try_collect().await.unwrap();
    let text: String = chunks
        .iter()
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .collect();
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    lines.sort();
    lines
}

async fn copy_in(c: &Client, sql: &str, data: &str) -> Result<u64, String> {
    let sink = c.copy_in(sql).await.map_err(|e| code(&e))?;
    futures_util::pin_mut!(sink);
    sink.send(bytes::Bytes::from(data.to_string()))
        .await
        .map_err(|e| code(&e))?;
    sink.finish().await.map_err(|e| code(&e))
}

fn code(e: &tokio_postgres::Error) -> String {
    e.as_db_error()
        .map(|d| d.code().code().to_string())
        .unwrap_or_else(|| e.to_string())
}

/// The reproduction of issue 18: a distributed `np2.dup`, a local `public.dup` and a
/// distributed `np1.dup`; which one `dup` is depends on the path only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unqualified_name_is_the_first_on_the_path() {
    let p = Pair::new().await;
    p.both(
        "CREATE SCHEMA np1; CREATE SCHEMA np2;
         CREATE TABLE np1.dup (k int PRIMARY KEY, v text);
         CREATE TABLE np2.dup (k int PRIMARY KEY, v text);
         CREATE TABLE public.dup (k int PRIMARY KEY, v text)",
    )
    .await;
    p.shard_only("SELECT create_distributed_table('np1.dup', 'k')")
        .await;
    p.shard_only("SELECT create_distributed_table('np2.dup', 'k')")
        .await;
    p.both(
        "INSERT INTO np1.dup SELECT g, 'np1' FROM generate_series(1, 5) g;
         INSERT INTO np2.dup SELECT g, 'np2' FROM generate_series(1, 5) g;
         INSERT INTO public.dup SELECT g, 'public' FROM generate_series(1, 3) g",
    )
    .await;
    p.script(&[
        // Default path: the local public.dup.
        "SELECT k, v FROM dup",
        "SELECT v FROM dup WHERE k = 1",
        "SELECT v FROM dup WHERE k = 2",
        "INSERT INTO public.dup VALUES (10, 'ten')",
        "INSERT INTO dup VALUES (11, 'eleven')",
        "UPDATE dup SET v = v || '!' WHERE k = 1",
        "DELETE FROM dup WHERE k = 11",
        "SELECT k, v FROM dup",
        "SELECT count(*) FROM np2.dup",
        // The distributed np2.dup first.
        "SET search_path = np2, public",
        "SELECT k, v FROM dup",
        "SELECT v FROM dup WHERE k = 1",
        "SELECT v FROM dup WHERE k = 2",
        "INSERT INTO dup VALUES (20, 'twenty')",
        "UPDATE dup SET v = v || '?' WHERE k = 2",
        "UPDATE dup SET v = v || '#'",
        "DELETE FROM dup WHERE k = 3",
        "SELECT k, v FROM dup",
        "SELECT count(*), max(v) FROM dup",
        "SELECT k, v FROM public.dup",
        // Another distributed one, through set_config.
        "SELECT pg_catalog.set_config('search_path', 'np1', false)",
        "SELECT k, v FROM dup",
        "SELECT v FROM dup WHERE k = 4",
        "INSERT INTO dup VALUES (30, 'thirty')",
        "SELECT k, v FROM dup",
        // $user (no such schema) skipped, then public.
        "SET search_path = \"$user\", public, np1",
        "SELECT k, v FROM dup",
        // Back to the default.
        "RESET search_path",
        "SELECT k, v FROM dup",
        "SELECT v FROM dup WHERE k = 1",
    ])
    .await;
    // Per transaction: SET LOCAL, and back after the block (committed or not).
    p.script(&[
        "BEGIN",
        "SET LOCAL search_path = np2",
        "SELECT k, v FROM dup",
        "SELECT v FROM dup WHERE k = 1",
        "INSERT INTO dup VALUES (40, 'forty')",
        "COMMIT",
        "SELECT k, v FROM dup",
        "BEGIN",
        "SET search_path = np1",
        "SELECT k, v FROM dup",
        "ROLLBACK",
        "SELECT k, v FROM dup",
        "SELECT v FROM dup WHERE k = 1",
        "BEGIN",
        "SAVEPOINT a",
        "SET LOCAL search_path = np2",
        "SELECT v FROM dup WHERE k = 1",
        "ROLLBACK TO SAVEPOINT a",
        "SELECT v FROM dup WHERE k = 1",
        "COMMIT",
        "SELECT k, v FROM np2.dup",
    ])
    .await;
    // Several statements in one query string: each sees the path the one before set.
    p.same("SET search_path = np2; SELECT v FROM dup WHERE k = 1")
        .await;
    p.same(
        "SELECT v FROM dup WHERE k = 1; SET search_path = public; SELECT v FROM dup WHERE k = 1",
    )
    .await;
    // A temporary table comes first on any path, until it is dropped.
    p.script(&[
        "SET search_path = np2, public",
        "CREATE TEMP TABLE dup (k int, v text)",
        "INSERT INTO dup VALUES (99, 'temp')",
        "SELECT k, v FROM dup",
        "SELECT v FROM dup WHERE k = 99",
        "DROP TABLE dup",
        "SELECT k, v FROM dup",
        "SELECT v FROM dup WHERE k = 1",
        "RESET search_path",
    ])
    .await;
}

/// Prepared statements are analysed again after the path changed, as PostgreSQL does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepared_statements_follow_the_path() {
    let p = Pair::new().await;
    p.both(
        "CREATE SCHEMA pp1;
         CREATE TABLE pp1.pdup (k int PRIMARY KEY, v text);
         CREATE TABLE public.pdup (k int PRIMARY KEY, v text)",
    )
    .await;
    p.shard_only("SELECT create_distributed_table('pp1.pdup', 'k')")
        .await;
    p.both(
        "INSERT INTO pp1.pdup SELECT g, 'pp1' FROM generate_series(1, 5) g;
         INSERT INTO public.pdup SELECT g, 'public' FROM generate_series(1, 5) g",
    )
    .await;
    let sql = "SELECT v FROM pdup WHERE k = $1";
    let s_shard = p.shard.prepare(sql).await.unwrap();
    let s_plain = p.plain.prepare(sql).await.unwrap();
    for path in ["public", "pp1, public", "public, pp1", "pp1"] {
        p.both(&format!("SET search_path = {path}")).await;
        let a: Vec<String> = p
            .shard
            .query(&s_shard, &[&2i32])
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        let b: Vec<String> = p
            .plain
            .query(&s_plain, &[&2i32])
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert_eq!(a, b, "search_path = {path}");
    }
}

/// DDL, DROP, TRUNCATE and COPY name the table the path finds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ddl_drop_truncate_and_copy_follow_the_path() {
    let p = Pair::new().await;
    p.both(
        "CREATE SCHEMA dp1; CREATE SCHEMA dp2;
         CREATE TABLE dp2.zz (k int PRIMARY KEY, v text);
         CREATE TABLE dp1.dd (k int PRIMARY KEY, v text);
         CREATE TABLE dp2.dd (k int PRIMARY KEY, v text);
         CREATE TABLE public.dd (k int PRIMARY KEY, v text)",
    )
    .await;
    for t in ["dp2.zz", "dp1.dd", "dp2.dd"] {
        p.shard_only(&format!("SELECT create_distributed_table('{t}', 'k')"))
            .await;
    }
    p.both(
        "INSERT INTO dp2.zz SELECT g, 'zz' FROM generate_series(1, 4) g;
         INSERT INTO dp1.dd SELECT g, 'dp1' FROM generate_series(1, 4) g;
         INSERT INTO dp2.dd SELECT g, 'dp2' FROM generate_series(1, 4) g;
         INSERT INTO public.dd SELECT g, 'public' FROM generate_series(1, 4) g",
    )
    .await;
    p.script(&[
        // zz is not on the path: 42P01, and it stays.
        "DROP TABLE zz",
        "SELECT count(*) FROM dp2.zz",
        "TRUNCATE zz",
        "SELECT count(*) FROM dp2.zz",
        // TRUNCATE / ALTER / CREATE INDEX of the path's table.
        "SET search_path = dp1, public",
        "TRUNCATE dd",
        "SELECT count(*) FROM dp1.dd",
        "SELECT count(*) FROM dp2.dd",
        "SELECT count(*) FROM public.dd",
        "SET search_path = dp2",
        "ALTER TABLE dd ADD COLUMN w int DEFAULT 7",
        "SELECT k, v, w FROM dd WHERE k = 1",
        "SELECT * FROM dp1.dd",
        "SELECT count(*) FROM public.dd",
        "CREATE INDEX dd_v ON dd (v)",
        "SELECT schemaname, tablename, indexname FROM pg_indexes WHERE indexname = 'dd_v'",
        // GRANT, policies, LOCK, VACUUM / ANALYZE of the path's table.
        "GRANT SELECT ON dd TO PUBLIC",
        "SELECT c.relname, c.relacl IS NOT NULL FROM pg_class c \
         WHERE c.relname = 'dd' ORDER BY c.relnamespace::regnamespace::text",
        "CREATE POLICY dd_all ON dd USING (true)",
        "SELECT polrelid::regclass::text, polname FROM pg_policy WHERE polname = 'dd_all'",
        "BEGIN",
        "LOCK TABLE dd IN SHARE MODE",
        "SELECT count(*) FROM dd",
        "COMMIT",
        "VACUUM dd",
        "ANALYZE dd",
        "SET search_path = public",
        "ALTER TABLE dd ADD COLUMN x int",
        "SELECT * FROM dd",
        "SELECT k, v, w FROM dp2.dd WHERE k = 2",
    ])
    .await;
    // COPY into and out of the path's table.
    for c in [&p.shard, &p.plain] {
        c.batch_execute("SET search_path = dp1").await.unwrap();
    }
    let rows = "50\tfifty\n51\tfifty-one\n";
    assert_eq!(
        copy_in(&p.shard, "COPY dd (k, v) FROM STDIN", rows).await,
        copy_in(&p.plain, "COPY dd (k, v) FROM STDIN", rows).await
    );
    assert_eq!(
        copy_out(&p.shard, "COPY dd TO STDOUT").await,
        copy_out(&p.plain, "COPY dd TO STDOUT").await
    );
    for c in [&p.shard, &p.plain] {
        c.batch_execute("RESET search_path").await.unwrap();
    }
    assert_eq!(
        copy_out(&p.shard, "COPY dd TO STDOUT").await,
        copy_out(&p.plain, "COPY dd TO STDOUT").await
    );
    p.script(&[
        "SELECT k, v FROM dp1.dd",
        // DROP of the path's table: only it goes.
        "SET search_path = dp1",
        "DROP TABLE dd",
        "SELECT count(*) FROM dp1.dd",
        "SELECT count(*) FROM dp2.dd",
        "SET search_path = dp2, public",
        "SELECT k, v FROM dd WHERE k = 3",
        "RESET search_path",
    ])
    .await;
}

/// Creating a table whose name a distributed table carries elsewhere, or naming a
/// column or function like a distributed table, is no reference to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_objects_named_like_a_distributed_table_are_local() {
    let p = Pair::new().await;
    p.both(
        "CREATE SCHEMA cs1;
         CREATE TABLE public.d (k int PRIMARY KEY);
         CREATE TABLE public.clicks (k int PRIMARY KEY, n int);
         CREATE TABLE public.pg_ts_parser (k int PRIMARY KEY)",
    )
    .await;
    for t in ["public.d", "clicks", "public.pg_ts_parser"] {
        p.shard_only(&format!("SELECT create_distributed_table('{t}', 'k')"))
            .await;
    }
    p.script(&[
        "CREATE TABLE cs1.d (k int)",
        "INSERT INTO cs1.d VALUES (1)",
        "SET search_path = cs1, public",
        "CREATE TABLE d2 (d int)",
        "SELECT * FROM d",
        "RESET search_path",
        "CREATE TABLE ads_daily (clicks bigint, d int)",
        "INSERT INTO ads_daily VALUES (5, 6)",
        "SELECT clicks, d FROM ads_daily",
        "CREATE FUNCTION clicks(int) RETURNS int LANGUAGE sql AS 'SELECT $1 + 1'",
        "SELECT clicks(1)",
        "CREATE VIEW ads_view AS SELECT clicks FROM ads_daily",
        "SELECT * FROM ads_view",
        "COMMENT ON COLUMN ads_daily.clicks IS 'clicks'",
        // pg_catalog comes first unless the path names it later.
        "SELECT count(*) > 0 FROM pg_ts_parser",
        "SET search_path = public, pg_catalog",
        "SELECT count(*) FROM pg_ts_parser",
        "RESET search_path",
    ])
    .await;
}

/// The Citus functions read their table arguments as `regclass` with the caller's path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn citus_functions_find_tables_through_the_path() {
    let p = Pair::new().await;
    let shard = &p.shard;
    shard
        .batch_execute(
            "CREATE SCHEMA fs2;
             SET search_path = fs2, public;
             CREATE TABLE t3 (k int PRIMARY KEY, v text);
             CREATE TABLE t4 (k int PRIMARY KEY, v text);
             CREATE TABLE r3 (k int PRIMARY KEY)",
        )
        .await
        .unwrap();
    let scalar = |sql: &'static str| async move {
        let rows = shard.simple_query(sql).await.map_err(|e| code(&e))?;
        Ok::<Vec<Vec<Option<String>>>, String>(common::sorted_simple_rows(&rows))
    };
    scalar("SELECT create_distributed_table('t3', 'k')")
        .await
        .unwrap();
    scalar("SELECT create_distributed_table('t4', 'k', colocate_with => 't3')")
        .await
        .unwrap();
    scalar("SELECT create_reference_table('r3')").await.unwrap();
    let placed = "SELECT c.relname::text, n.nspname::text, p.partmethod::text \
                  FROM pg_dist_partition p JOIN pg_class c ON c.oid = p.logicalrelid \
                  JOIN pg_namespace n ON n.oid = c.relnamespace \
                  WHERE n.nspname = 'fs2' ORDER BY 1";
    let got = scalar(placed).await.unwrap();
    let s = |v: &str| Some(v.to_string());
    assert_eq!(
        got,
        vec![
            vec![s("r3"), s("fs2"), s("n")],
            vec![s("t3"), s("fs2"), s("h")],
            vec![s("t4"), s("fs2"), s("h")],
        ]
    );
    // ALTER TABLE and the rest through the path.
    shard
        .batch_execute(
            "ALTER TABLE t3 ADD COLUMN w int; INSERT INTO t3 VALUES (1, 'a', 2); \
             INSERT INTO t4 VALUES (1, 'b'); CREATE TABLE t5 (k int)",
        )
        .await
        .unwrap();
    assert_eq!(
        scalar("SELECT k, v, w FROM t3").await.unwrap(),
        vec![vec![s("1"), s("a"), s("2")]]
    );
    scalar("SELECT citus_table_size('t3') >= 0").await.unwrap();
    scalar("SELECT citus_relation_size('t3') >= 0")
        .await
        .unwrap();
    scalar("SELECT citus_total_relation_size('t3') >= 0")
        .await
        .unwrap();
    scalar("SELECT get_shard_id_for_distribution_column('t3', 1) > 0")
        .await
        .unwrap();
    // A name not on the path: PostgreSQL's regclass error (as `'x'::regclass` on the
    // plain server).
    shard.batch_execute("RESET search_path").await.unwrap();
    let want = outcome(p.plain.simple_query("SELECT 't3'::regclass").await);
    for sql in [
        "SELECT citus_table_size('t3')",
        "SELECT get_shard_id_for_distribution_column('t3', 1)",
        "SELECT undistribute_table('t3')",
        "SELECT create_distributed_table('t3', 'k')",
    ] {
        assert_eq!(outcome(shard.simple_query(sql).await), want, "{sql}");
    }
    shard.batch_execute("SET search_path = fs2").await.unwrap();
    scalar("SELECT undistribute_table('t4')").await.unwrap();
    assert_eq!(
        scalar("SELECT k, v FROM t4").await.unwrap(),
        vec![vec![s("1"), s("b")]]
    );
    assert_eq!(
        scalar("SELECT count(*) FROM pg_dist_partition WHERE logicalrelid = 'fs2.t4'::regclass")
            .await
            .unwrap(),
        vec![vec![s("0")]]
    );
}

/// Another session creating a table that hides a distributed one on this session's
//// path: this session's next statements read that table, as on PostgreSQL (pgshard
/// sees it within its poll interval).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_created_by_another_session_hides_a_distributed_one() {
    let p = Pair::new().await;
    p.both(
        "CREATE SCHEMA hs2;
         CREATE TABLE hs2.shadowed (k int PRIMARY KEY, v text)",
    )
    .await;
    p.shard_only("SELECT create_distributed_table('hs2.shadowed', 'k')")
        .await;
    p.both("INSERT INTO hs2.shadowed VALUES (1, 'distributed'), (2, 'distributed')")
        .await;
    p.script(&[
        "SET search_path = public, hs2",
        "SELECT k, v FROM shadowed",
        "SELECT v FROM shadowed WHERE k = 1",
    ])
    .await;
    let other = Pair::new().await;
    other
        .both(
            "CREATE TABLE public.shadowed (k int PRIMARY KEY, v text);
             INSERT INTO public.shadowed VALUES (1, 'local')",
        )
        .await;
    // pgshard sees the new table within its poll interval.
    let want = outcome(
        p.plain
            .simple_query("SELECT v FROM shadowed WHERE k = 1")
            .await,
    );
    let mut got = None;
    for _ in 0..50 {
        let g = outcome(
            p.shard
                .simple_query("SELECT v FROM shadowed WHERE k = 1")
                .await,
        );
        if g == want {
            got = Some(g);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(got, Some(want));
    p.script(&["SELECT k, v FROM shadowed"]).await;
    other.both("DROP TABLE public.shadowed").await;
    let want = outcome(p.plain.simple_query("SELECT k, v FROM shadowed").await);
    let mut got = None;
    for _ in 0..50 {
        let g = outcome(p.shard.simple_query("SELECT k, v FROM shadowed").await);
        if g == want {
            got = Some(g);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(got, Some(want));
}
