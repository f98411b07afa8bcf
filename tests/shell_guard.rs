//! Shells fail closed (issue 18, item 5): a distributed or reference table's empty shell
//! on the coordinator node never answers a read nor takes a write that pgshard did not
//! plan (PL/pgSQL `EXECUTE`, views, rules, another client on the coordinator node), while
//! pgshard's own uses of the shell (combine step, INSERT ... SELECT through the
//! coordinator, DDL, DROP TABLE, undistribute_table) and ANALYZE / VACUUM keep working.
//! Where PostgreSQL would answer, the plain PostgreSQL oracle gives the right answer and
//! pgshard's must be either the same or an error, never 0 rows.

mod common;

use common::{cluster, plain_postgres};
use tokio_postgres::Client;

async fn exec(c: &Client, sql: &str) {
    c.batch_execute(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
}

/// Each statement as its own query string (Citus functions run alone).
async fn exec_all(c: &Client, sqls: &[&str]) {
    for sql in sqls {
        exec(c, sql).await;
    }
}

/// The error of `sql`, as (SQLSTATE, message).
async fn error_of(c: &Client, sql: &str) -> (String, String) {
    match c.batch_execute(sql).await {
        Ok(()) => panic!("{sql}: expected an error"),
        Err(e) => {
            let d = e
                .as_db_error()
                .unwrap_or_else(|| panic!("{sql}: {e}"))
                .clone();
            (d.code().code().to_string(), d.message().to_string())
        }
    }
}

async fn count(c: &Client, sql: &str) -> i64 {
    c.query_one(sql, &[])
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"))
        .get(0)
}

/// A read of the shell that pgshard did not plan: the oracle's answer, or an error
/// naming the table (never the empty shell's answer).
async fn assert_read_refused(c: &Client, sql: &str, table: &str) {
    let (_, message) = error_of(c, sql).await;
    assert!(
        message.contains(table) && message.contains("distributed"),
        "{sql}: {message}"
    );
}

/// A count through pgshard of a view it may or may not know yet (the catalog task lists
/// views over distributed tables on its next poll): the right count, or the shell's
/// refusal naming the table; never the empty shell's answer.
async fn assert_count_right_or_refused(c: &Client, sql: &str, table: &str, right: i64) {
    match c.query_one(sql, &[]).await {
        Ok(row) => assert_eq!(row.get::<_, i64>(0), right, "{sql}"),
        Err(_) => assert_read_refused(c, sql, table).await,
    }
}

/// A write of the shell that pgshard did not plan: 0A000 naming the table (the guard's
/// trigger, or PostgreSQL's refusal to write the guard, named after the table).
async fn assert_write_refused(c: &Client, sql: &str, table: &str) {
    let (code, message) = error_of(c, sql).await;
    assert_eq!(code, "0A000", "{sql}: {message}");
    assert!(message.contains(table), "{sql}: {message}");
}

const SETUP: &[&str] = &[
    "CREATE TABLE gd (k int PRIMARY KEY, v text)",
    "SELECT create_distributed_table('gd', 'k')",
    "INSERT INTO gd VALUES (1, 'a'), (2, 'b'), (3, 'c')",
    "CREATE TABLE gr (k int PRIMARY KEY, v text)",
    "SELECT create_reference_table('gr')",
    "INSERT INTO gr VALUES (1, 'a'), (2, 'b'), (3, 'c')",
    "CREATE FUNCTION gd_count() RETURNS bigint LANGUAGE plpgsql AS \
       $$DECLARE n bigint; BEGIN EXECUTE 'select count(*) from gd' INTO n; RETURN n; END$$; \
     CREATE FUNCTION gr_count() RETURNS bigint LANGUAGE plpgsql AS \
       $$DECLARE n bigint; BEGIN EXECUTE 'select count(*) from gr' INTO n; RETURN n; END$$; \
     CREATE FUNCTION gd_insert(int) RETURNS void LANGUAGE plpgsql AS \
       $$BEGIN EXECUTE 'insert into gd values ($1, ''x'')' USING $1; END$$;",
];

#[tokio::test]
async fn server_side_code_never_reads_or_writes_the_shell() {
    let cl = cluster();
    let c = cl.client().await;
    let direct = cl.direct(cl.coordinator_port).await;
    for sql in SETUP {
        // Function bodies naming a distributed table: on the coordinator node directly
        // (pgshard's planner refuses texts that merely mention one, another item of
        // issue 18).
        let on = if sql.starts_with("CREATE FUNCTION") {
            &direct
        } else {
            &c
        };
        exec(on, sql).await;
    }
    // The oracle: one PostgreSQL counts 3 rows.
    let oracle = plain_postgres().client().await;
    let local: Vec<&str> = SETUP
        .iter()
        .copied()
        .filter(|s| !s.contains("create_"))
        .collect();
    exec_all(&oracle, &local).await;
    assert_eq!(count(&oracle, "SELECT gd_count()").await, 3);

    // Through pgshard: an error, never 0.
    assert_read_refused(&c, "SELECT gd_count()", "gd").await;
    assert_read_refused(&c, "SELECT gr_count()", "gr").await;
    assert_write_refused(&c, "SELECT gd_insert(10)", "gd").await;
    assert_eq!(count(&c, "SELECT count(*) FROM gd").await, 3);

    // Another client connected to the coordinator node directly, even a superuser.
    assert_read_refused(&direct, "SELECT count(*) FROM gd", "gd").await;
    assert_read_refused(&direct, "SELECT * FROM gd LIMIT 0", "gd").await;
    assert_read_refused(&direct, "SELECT count(*) FROM gr", "gr").await;
    for sql in [
        "INSERT INTO gd VALUES (11, 'x')",
        "UPDATE gd SET v = 'y'",
        "DELETE FROM gd",
        "TRUNCATE gd",
        "INSERT INTO gr VALUES (11, 'x')",
        "COPY gd FROM PROGRAM 'echo 12'",
    ] {
        let table = if sql.contains("gr") { "gr" } else { "gd" };
        assert_write_refused(&direct, sql, table).await;
    }
    // Views, rules and triggers on other tables read through the same scan.
    exec(&direct, "CREATE VIEW gd_view AS SELECT * FROM gd").await;
    assert_read_refused(&direct, "SELECT count(*) FROM gd_view", "gd").await;
    assert_count_right_or_refused(&c, "SELECT count(*) FROM gd_view", "gd", 3).await;
    exec(
        &direct,
        "CREATE TABLE gd_log (k int); \
         CREATE RULE gd_log_copy AS ON INSERT TO gd_log DO ALSO INSERT INTO gd VALUES (NEW.k, 'rule')",
    )
    .await;
    assert_write_refused(&c, "INSERT INTO gd_log VALUES (20)", "gd").await;
    assert_eq!(count(&c, "SELECT count(*) FROM gd").await, 3);

    // Still fine on the coordinator node: planning, ANALYZE, VACUUM, the catalog.
    exec(&direct, "EXPLAIN SELECT * FROM gd").await;
    exec_all(&direct, &["ANALYZE gd", "ANALYZE", "VACUUM gd", "VACUUM"]).await;
    exec(
        &direct,
        "CREATE TEMP TABLE gd_shape AS SELECT * FROM gd WITH NO DATA",
    )
    .await;
}

#[tokio::test]
async fn pgshard_own_uses_of_the_shell_still_work() {
    let cl = cluster();
    let c = cl.client().await;
    exec_all(
        &c,
        &[
            "CREATE TABLE gu (k int PRIMARY KEY, v text, n int DEFAULT 7 CHECK (n > 0))",
            "SELECT create_distributed_table('gu', 'k')",
            "CREATE TABLE gu_src (k int, v text); \
             INSERT INTO gu_src SELECT i, 'v' || i FROM generate_series(1, 20) i",
        ],
    )
    .await;
    // INSERT ... SELECT through the coordinator: the shell's INSERT ... RETURNING.
    exec(&c, "INSERT INTO gu (k, v) SELECT k, v FROM gu_src").await;
    exec(
        &c,
        "INSERT INTO gu (k, v) SELECT i, 'g' FROM generate_series(21, 30) i",
    )
    .await;
    assert_eq!(count(&c, "SELECT count(*) FROM gu WHERE n = 7").await, 30);
    // Its CHECK still PostgreSQL's, naming the user's table.
    let (code, _) = error_of(
        &c,
        "INSERT INTO gu (k, v, n) SELECT 40, 'x', -1 FROM gu_src LIMIT 1",
    )
    .await;
    assert_eq!(code, "23514");
    // The combine step (CREATE TEMP TABLE ... AS ... WITH NO DATA over the shell).
    let rows = c
        .query(
            "SELECT v, count(*) FROM gu GROUP BY v ORDER BY v LIMIT 2",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 2);
    // DDL on the shell recurses to its guard as the caller.
    exec_all(
        &c,
        &[
            "ALTER TABLE gu ADD COLUMN w bigint",
            "ALTER TABLE gu RENAME COLUMN w TO w2",
            "ALTER TABLE gu ALTER COLUMN w2 TYPE numeric",
            "ALTER TABLE gu ALTER COLUMN w2 SET DEFAULT 1",
            "ALTER TABLE gu ADD CONSTRAINT gu_k CHECK (k > 0)",
            "ALTER TABLE gu DROP COLUMN w2",
            "CREATE INDEX ON gu (v)",
        ],
    )
    .await;
    assert_eq!(count(&c, "SELECT count(*) FROM gu").await, 30);
    // undistribute_table: the rows come back into the table, readable directly.
    exec(&c, "SELECT undistribute_table('gu')").await;
    let direct = cl.direct(cl.coordinator_port).await;
    assert_eq!(count(&direct, "SELECT count(*) FROM gu").await, 30);
    exec(&direct, "INSERT INTO gu (k, v) VALUES (100, 'local')").await;
    // Distributed again, then dropped: the guard goes with the shell.
    exec(&c, "SELECT create_distributed_table('gu', 'k')").await;
    assert_eq!(count(&c, "SELECT count(*) FROM gu").await, 31);
    assert_read_refused(&direct, "SELECT count(*) FROM gu", "gu").await;
    exec(&c, "DROP TABLE gu").await;
    assert_eq!(
        count(
            &direct,
            "SELECT count(*) FROM pg_class WHERE relnamespace = 'pgshard_guard'::regnamespace \
             AND NOT EXISTS (SELECT 1 FROM pg_inherits WHERE inhrelid = pg_class.oid)"
        )
        .await,
        0
    );
}

#[tokio::test]
async fn tables_distributed_before_the_guard_get_it_at_catalog_load() {
    let cl = cluster();
    let c = cl.client().await;
    exec_all(
        &c,
        &[
            "CREATE TABLE gold (k int, v text)",
            "SELECT create_distributed_table('gold', 'k')",
            "INSERT INTO gold VALUES (1, 'a')",
        ],
    )
    .await;
    let direct = cl.direct(cl.coordinator_port).await;
    // As a cluster from before this change: no guard.
    exec(&direct, "SELECT pg_catalog.pgshard_unguard_shell('gold')").await;
    assert_eq!(count(&direct, "SELECT count(*) FROM gold").await, 0);
    // What every pgshard runs when it loads the catalog.
    pgshard::catalog::schema::ensure_schema(&direct)
        .await
        .unwrap();
    assert_read_refused(&direct, "SELECT count(*) FROM gold", "gold").await;
    assert_write_refused(&direct, "DELETE FROM gold", "gold").await;
    assert_eq!(count(&c, "SELECT count(*) FROM gold").await, 1);
}

#[tokio::test]
async fn a_new_owner_can_still_alter_the_table() {
    let cl = cluster();
    let c = cl.client().await;
    exec_all(
        &c,
        &[
            "CREATE ROLE guard_owner LOGIN",
            "GRANT CREATE ON SCHEMA public TO guard_owner",
            "CREATE TABLE gown (k int, v text)",
            "SELECT create_distributed_table('gown', 'k')",
            "ALTER TABLE gown OWNER TO guard_owner",
        ],
    )
    .await;
    let direct = cl.direct(cl.coordinator_port).await;
    assert_eq!(
        count(
            &direct,
            "SELECT count(*) FROM pg_class g JOIN pg_inherits i ON i.inhrelid = g.oid \
             WHERE i.inhparent = 'gown'::regclass AND pg_get_userbyid(g.relowner) = 'guard_owner'"
        )
        .await,
        1
    );
    // The new owner's ALTER TABLE recurses to the guard, which it owns.
    exec(
        &direct,
        "SET ROLE guard_owner; ALTER TABLE gown ADD COLUMN w int; RESET ROLE",
    )
    .await;
}
