//! Objects a distributed table depends on reach the workers, and drops that cascade to
//! distributed tables take their shards and catalog rows with them (issue 18, item 6).
//! Each reproduction runs through pgshard and on one plain PostgreSQL (the oracle):
//! same rows, same SQLSTATE; the workers' and the coordinator node's catalogs are read
//! directly to check what is left behind.

mod common;

use common::{cluster, plain_postgres};
use tokio_postgres::Client;

async fn exec(c: &Client, sql: &str) {
    c.batch_execute(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
}

/// Runs each statement through pgshard and on the oracle (Citus functions only
/// through pgshard).
async fn both(pgshard: &Client, oracle: &Client, sqls: &[&str]) {
    for sql in sqls {
        exec(pgshard, sql).await;
        if !sql.contains("create_distributed_table") && !sql.contains("create_reference_table") {
            exec(oracle, sql).await;
        }
    }
}

async fn rows(c: &Client, sql: &str) -> Vec<Vec<Option<String>>> {
    let msgs = c
        .simple_query(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
    common::sorted_simple_rows(&msgs)
}

async fn same_rows(pgshard: &Client, oracle: &Client, sql: &str) {
    assert_eq!(rows(pgshard, sql).await, rows(oracle, sql).await, "{sql}");
}

async fn count(c: &Client, sql: &str) -> i64 {
    c.query_one(sql, &[])
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"))
        .get(0)
}

/// Shard tables named `<table>_<digits>` in `schema` on every worker.
async fn shards_on_workers(schema: &str, table: &str) -> i64 {
    let cl = cluster();
    let mut n = 0;
    for port in &cl.worker_ports {
        let w = cl.direct(*port).await;
        n += w
            .query_one(
                "SELECT count(*) FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace \
                 WHERE s.nspname = $1 AND c.relkind = 'r' AND c.relname ~ ('^' || $2 || '_[0-9]+$')",
                &[&schema, &table],
            )
            .await
            .unwrap()
            .get::<_, i64>(0);
    }
    n
}

#[tokio::test]
async fn enum_domain_composite_range_and_collation_columns_are_distributed() {
    let cl = cluster();
    let c = cl.client().await;
    let o = plain_postgres().client().await;
    both(
        &c,
        &o,
        &[
            "CREATE SCHEMA dep_types",
            "CREATE TYPE dep_types.mood AS ENUM ('sad', 'ok', 'happy')",
            "CREATE DOMAIN posint AS int DEFAULT 1 CHECK (VALUE > 0)",
            "CREATE TYPE pair AS (a int, b text)",
            "CREATE TYPE floatrange AS RANGE (subtype = float8, subtype_diff = float8mi)",
            "CREATE COLLATION ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false)",
            "CREATE FUNCTION twice(int) RETURNS int LANGUAGE sql IMMUTABLE AS 'SELECT $1 * 2'",
            "CREATE TABLE ty (k int, m dep_types.mood, p posint, c pair, r floatrange, \
               t text COLLATE ci, moods dep_types.mood[], d int DEFAULT twice(21), \
               CHECK (twice(k) >= 0))",
            "CREATE INDEX ty_twice ON ty (twice(k))",
            "SELECT create_distributed_table('ty', 'k')",
            "INSERT INTO ty (k, m, p, c, r, t, moods) VALUES \
               (1, 'sad', 5, ROW(1, 'x'), '[1,2)', 'ABC', '{sad,ok}'), \
               (2, 'happy', 7, ROW(2, 'y'), '[3,4)', 'abc', '{happy}'), \
               (3, 'ok', DEFAULT, NULL, NULL, 'Abc', NULL)",
        ],
    )
    .await;
    same_rows(&c, &o, "SELECT k, m, p, c, r, t, moods, d FROM ty").await;
    same_rows(&c, &o, "SELECT k FROM ty WHERE m > 'sad'").await;
    same_rows(&c, &o, "SELECT count(*) FROM ty WHERE t = 'abc'").await;
    // The domain's CHECK is the workers' too: 23514 on both.
    for sql in [
        "INSERT INTO ty (k, p) VALUES (4, -1)",
        "UPDATE ty SET p = 0 WHERE k = 1",
    ] {
        let a = c.batch_execute(sql).await.unwrap_err();
        let b = o.batch_execute(sql).await.unwrap_err();
        assert_eq!(
            a.as_db_error().unwrap().code(),
            b.as_db_error().unwrap().code(),
            "{sql}: {a:?}"
        );
    }
    // Recorded as Citus records them.
    let coord = cl.direct(cl.coordinator_port).await;
    assert!(
        count(
            &coord,
            "SELECT count(*) FROM pg_dist_object WHERE objid IN ('dep_types.mood'::regtype, 'posint'::regtype, \
             'pair'::regtype, 'floatrange'::regtype, 'ci'::regcollation, 'twice(int)'::regprocedure)"
        )
        .await
            >= 6
    );
    // Later DDL on them reaches the workers.
    both(
        &c,
        &o,
        &[
            "ALTER TYPE dep_types.mood ADD VALUE 'ecstatic'",
            "ALTER TYPE dep_types.mood RENAME VALUE 'ok' TO 'fine'",
        ],
    )
    .await;
    both(
        &c,
        &o,
        &["INSERT INTO ty (k, m) VALUES (5, 'ecstatic'), (6, 'fine')"],
    )
    .await;
    same_rows(&c, &o, "SELECT k, m FROM ty").await;
    both(
        &c,
        &o,
        &["ALTER DOMAIN posint ADD CONSTRAINT small CHECK (VALUE < 1000)"],
    )
    .await;
    let a = c
        .batch_execute("INSERT INTO ty (k, p) VALUES (7, 5000)")
        .await
        .unwrap_err();
    assert_eq!(a.as_db_error().unwrap().code().code(), "23514");
    for port in &cl.worker_ports {
        let w = cl.direct(*port).await;
        assert_eq!(
            count(
                &w,
                "SELECT count(*) FROM pg_enum WHERE enumtypid = 'dep_types.mood'::regtype"
            )
            .await,
            4
        );
    }
}

#[tokio::test]
async fn a_reference_table_gets_its_types_too() {
    let cl = cluster();
    let c = cl.client().await;
    let o = plain_postgres().client().await;
    both(
        &c,
        &o,
        &[
            "CREATE TYPE ref_kind AS ENUM ('x', 'y')",
            "CREATE TABLE ref_ty (k int PRIMARY KEY, kind ref_kind)",
            "SELECT create_reference_table('ref_ty')",
            "INSERT INTO ref_ty VALUES (1, 'x'), (2, 'y')",
        ],
    )
    .await;
    same_rows(&c, &o, "SELECT * FROM ref_ty").await;
}

#[tokio::test]
async fn extension_types_bring_their_extension() {
    let cl = cluster();
    let c = cl.client().await;
    let o = plain_postgres().client().await;
    both(
        &c,
        &o,
        &[
            "CREATE SCHEMA dep_ext",
            "CREATE EXTENSION IF NOT EXISTS citext SCHEMA dep_ext",
            "CREATE TABLE ext_ty (k int, name dep_ext.citext)",
            "SELECT create_distributed_table('ext_ty', 'k')",
            "INSERT INTO ext_ty VALUES (1, 'Alice'), (2, 'BOB'), (3, 'carol')",
        ],
    )
    .await;
    same_rows(&c, &o, "SELECT k FROM ext_ty WHERE name = 'bob'").await;
    same_rows(&c, &o, "SELECT * FROM ext_ty").await;
}

#[tokio::test]
async fn drop_schema_cascade_drops_shards_and_catalog_rows() {
    let cl = cluster();
    let c = cl.client().await;
    let coord = cl.direct(cl.coordinator_port).await;
    for _ in 0..2 {
        exec(&c, "CREATE SCHEMA dsc").await;
        exec(&c, "CREATE TABLE dsc.x (k int, v text)").await;
        exec(&c, "SELECT create_distributed_table('dsc.x', 'k')").await;
        exec(&c, "INSERT INTO dsc.x VALUES (1, 'a'), (2, 'b')").await;
        assert!(shards_on_workers("dsc", "x").await > 0);
        exec(&c, "DROP SCHEMA dsc CASCADE").await;
        assert_eq!(
            count(
                &coord,
                "SELECT count(*) FROM pg_dist_partition WHERE logicalrelid::oid NOT IN (SELECT oid FROM pg_class)"
            )
            .await,
            0
        );
        assert_eq!(shards_on_workers("dsc", "x").await, 0);
        // The second round: the same names distribute again (the stale catalog refused).
    }
}

#[tokio::test]
async fn drop_type_cascade_drops_the_shards_columns() {
    let cl = cluster();
    let c = cl.client().await;
    let o = plain_postgres().client().await;
    both(
        &c,
        &o,
        &[
            "CREATE TYPE dt_kind AS ENUM ('x', 'y')",
            "CREATE TABLE dt (k int, kind dt_kind, v int)",
            "SELECT create_distributed_table('dt', 'k')",
            "INSERT INTO dt VALUES (1, 'x', 10), (2, 'y', 20)",
            "DROP TYPE dt_kind CASCADE",
        ],
    )
    .await;
    same_rows(&c, &o, "SELECT * FROM dt").await;
    both(&c, &o, &["INSERT INTO dt VALUES (3, 30)"]).await;
    same_rows(&c, &o, "SELECT * FROM dt").await;
}

#[tokio::test]
async fn drop_owned_and_direct_drops_keep_the_catalog_true() {
    let cl = cluster();
    let c = cl.client().await;
    let coord = cl.direct(cl.coordinator_port).await;
    exec(&c, "CREATE ROLE dep_owner").await;
    exec(&c, "CREATE TABLE downed (k int)").await;
    exec(&c, "SELECT create_distributed_table('downed', 'k')").await;
    exec(&c, "ALTER TABLE downed OWNER TO dep_owner").await;
    exec(&c, "DROP OWNED BY dep_owner").await;
    assert_eq!(shards_on_workers("public", "downed").await, 0);
    assert_eq!(
        count(&coord, "SELECT count(*) FROM pg_dist_partition p WHERE NOT EXISTS (SELECT 1 FROM pg_class c WHERE c.oid = p.logicalrelid)").await,
        0
    );
    exec(&c, "CREATE TABLE downed (k int)").await;
    exec(&c, "SELECT create_distributed_table('downed', 'k')").await;
    // A drop on the coordinator node directly: catalog rows go, the shards are
    // recorded in pg_dist_cleanup.
    exec(&c, "CREATE TABLE ddirect (k int)").await;
    exec(&c, "SELECT create_distributed_table('ddirect', 'k')").await;
    exec(&coord, "DROP TABLE ddirect").await;
    assert_eq!(
        count(&coord, "SELECT count(*) FROM pg_dist_partition p WHERE NOT EXISTS (SELECT 1 FROM pg_class c WHERE c.oid = p.logicalrelid)").await,
        0
    );
    assert!(
        count(
            &coord,
            "SELECT count(*) FROM pg_dist_cleanup WHERE object_name LIKE 'public.ddirect\\_%'"
        )
        .await
            > 0
    );
    // The shards it left are dropped by pgshard (periodically, or at once here).
    exec(&c, "SELECT citus_cleanup_orphaned_resources()").await;
    assert_eq!(shards_on_workers("public", "ddirect").await, 0);
    assert_eq!(
        count(
            &coord,
            "SELECT count(*) FROM pg_dist_cleanup WHERE object_name LIKE 'public.ddirect\\_%'"
        )
        .await,
        0
    );
    // pgshard sees a drop made on the coordinator node directly at its next catalog
    // poll (the drop's transaction may be prepared, so the trigger cannot NOTIFY).
    let mut tries = 0;
    while let Err(e) = c.batch_execute("CREATE TABLE ddirect (k int)").await {
        tries += 1;
        assert!(tries < 30, "{e:?}");
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    exec(&c, "SELECT create_distributed_table('ddirect', 'k')").await;
}
