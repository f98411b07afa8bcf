//! DDL propagation, reference tables and pushed-down joins against real servers.
//!
//! - After each DDL statement sent through pgshard, every shard's definition (columns,
//!   types, defaults, NOT NULL from `pg_attribute`; indexes from `pg_indexes`;
//!   constraints from `pg_constraint`), read from the workers' catalogs directly with
//!   the `_<shardid>` suffixes taken out, equals the coordinator's shell table's.
//! - A DDL statement that fails on one shard (an object created there beforehand)
//!   leaves the shell and every other shard unchanged.
//! - Rows read back after the DDL sequence equal a plain PostgreSQL's that ran the
//!   same statements; unsafe shapes are refused with 0A000.

mod common;

use common::{cluster, plain_postgres};
use tokio_postgres::Client;

/// One table's definition as its catalogs show it, object names without shard suffix.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Definition {
    columns: Vec<String>,
    indexes: Vec<String>,
    constraints: Vec<String>,
}

async fn definition(c: &Client, schema: &str, table: &str, strip: &str) -> Definition {
    let oid_sql = "SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
                   WHERE n.nspname = $1 AND c.relname = $2";
    let oid: u32 = c
        .query_one(oid_sql, &[&schema, &table])
        .await
        .unwrap()
        .get(0);
    let columns = c
        .query(
            "SELECT a.attname || ' ' || format_type(a.atttypid, a.atttypmod) || \
                    coalesce(' DEFAULT ' || pg_get_expr(d.adbin, d.adrelid), '') || \
                    CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE '' END \
             FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum \
             WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
            &[&oid],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get::<_, String>(0))
        .collect();
    let mut indexes: Vec<String> = c
        .query(
            "SELECT indexdef FROM pg_indexes WHERE schemaname = $1 AND tablename = $2",
            &[&schema, &table],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get::<_, String>(0).replace(strip, ""))
        .collect();
    indexes.sort();
    let mut constraints: Vec<String> = c
        .query(
            "SELECT conname || ' ' || pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = $1",
            &[&oid],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get::<_, String>(0).replace(strip, ""))
        .collect();
    constraints.sort();
    Definition {
        columns,
        indexes,
        constraints,
    }
}

/// The shard tables (`<table>_<digits>`) on one server.
async fn shard_tables(c: &Client, table: &str) -> Vec<String> {
    c.query(
        "SELECT relname::text FROM pg_class WHERE relkind = 'r' AND relname ~ ('^' || $1 || '_[0-9]+$') \
         AND relnamespace = 'public'::regnamespace ORDER BY 1",
        &[&table],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect()
}

/// The shell's definition and every shard placement's, read on the servers directly.
async fn definitions(table: &str) -> (Definition, Vec<(String, Definition)>) {
    let cl = cluster();
    let coord = cl.direct(cl.coordinator_port).await;
    let shell = definition(&coord, "public", table, "").await;
    let mut shards = Vec::new();
    for port in &cl.worker_ports {
        let w = cl.direct(*port).await;
        for n in shard_tables(&w, table).await {
            let suffix = &n[table.len()..];
            let d = definition(&w, "public", &n, suffix).await;
            shards.push((format!("{n} on {port}"), d));
        }
    }
    (shell, shards)
}

async fn assert_shards_match(table: &str, shard_count: usize, after: &str) {
    let (shell, shards) = definitions(table).await;
    assert_eq!(
        shards.len(),
        shard_count,
        "after {after}: shards {shards:?}"
    );
    for (name, d) in &shards {
        assert_eq!(
            d, &shell,
            "after {after}: shard {name} differs from the shell"
        );
    }
}

async fn exec(c: &Client, sql: &str) {
    c.batch_execute(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
}

async fn sqlstate_of(c: &Client, sql: &str) -> String {
    match c.batch_execute(sql).await {
        Ok(()) => panic!("{sql}: expected an error"),
        Err(e) => e
            .as_db_error()
            .map(|d| d.code().code().to_string())
            .unwrap_or_else(|| panic!("{sql}: {e}")),
    }
}

/// Rows of a query as text, sorted (multi-shard reads come in shard order).
async fn sorted_rows(c: &Client, sql: &str) -> Vec<Vec<Option<String>>> {
    common::sorted_simple_rows(
        &c.simple_query(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e:?}")),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ddl_reaches_every_shard_and_the_shell() {
    let pgs = cluster().client().await;
    let plain = plain_postgres().client().await;
    let setup = "CREATE TABLE ddl_t (k int, v int, w text); \
                 INSERT INTO ddl_t SELECT i, i * 10, 'w' || i FROM generate_series(1, 50) i";
    exec(
        &pgs,
        "DROP TABLE IF EXISTS ddl_t; COMMIT; DROP TABLE IF EXISTS ddl_u",
    )
    .await;
    exec(
        &plain,
        "DROP TABLE IF EXISTS ddl_t; COMMIT; DROP TABLE IF EXISTS ddl_u",
    )
    .await;
    exec(&pgs, setup).await;
    exec(&plain, setup).await;
    exec(&pgs, "SET citus.shard_count = 4").await;
    exec(&pgs, "SELECT create_distributed_table('ddl_t', 'k')").await;
    assert_shards_match("ddl_t", 4, "create_distributed_table").await;

    let steps = [
        "CREATE INDEX ddl_t_v ON ddl_t (v)",
        "CREATE INDEX ON ddl_t (w)",
        "CREATE UNIQUE INDEX ON ddl_t (v, k)",
        r#"CREATE INDEX "Odd ""Name" ON ddl_t USING hash (w)"#,
        "ALTER TABLE ddl_t ADD COLUMN x int DEFAULT 7",
        "ALTER TABLE ddl_t ALTER COLUMN x SET DEFAULT 8, ALTER COLUMN w SET NOT NULL",
        "INSERT INTO ddl_t (k, v, w) VALUES (51, 510, 'w51')",
        "ALTER TABLE ddl_t ADD CONSTRAINT v_pos CHECK (v >= 0)",
        "ALTER TABLE ddl_t ADD CHECK (x > 0), ADD COLUMN y text CHECK (y <> '')",
        "ALTER TABLE ddl_t ADD PRIMARY KEY (k, v)",
        "ALTER TABLE ddl_t ALTER COLUMN v TYPE bigint",
        "ALTER TABLE ddl_t RENAME COLUMN w TO ww",
        "ALTER TABLE ddl_t RENAME CONSTRAINT v_pos TO v_nonneg",
        "ALTER TABLE ddl_t DROP CONSTRAINT v_nonneg",
        "DROP INDEX ddl_t_v",
        "CREATE INDEX CONCURRENTLY ddl_t_c ON ddl_t (x)",
        "DROP INDEX CONCURRENTLY ddl_t_c",
        "ALTER TABLE ddl_t ALTER COLUMN x DROP DEFAULT, ALTER COLUMN ww DROP NOT NULL",
        "ALTER TABLE ddl_t DROP COLUMN y",
        "ALTER TABLE ddl_t RENAME COLUMN k TO kk",
        "INSERT INTO ddl_t (kk, v, ww) VALUES (52, 520, NULL)",
    ];
    for step in steps {
        exec(&pgs, step).await;
        exec(&plain, step).await;
        assert_shards_match("ddl_t", 4, step).await;
    }
    // The renamed distribution column still routes.
    let q = "SELECT * FROM ddl_t WHERE kk = 52";
    assert_eq!(sorted_rows(&pgs, q).await, sorted_rows(&plain, q).await);
    exec(&pgs, "ALTER TABLE ddl_t RENAME TO ddl_u").await;
    exec(&plain, "ALTER TABLE ddl_t RENAME TO ddl_u").await;
    assert_shards_match("ddl_u", 4, "RENAME TO").await;
    for port in &cluster().worker_ports {
        let old = shard_tables(&cluster().direct(*port).await, "ddl_t").await;
        assert!(old.is_empty(), "old shard names remain: {old:?}");
    }
    for q in [
        "SELECT * FROM ddl_u",
        "SELECT kk, ww, x FROM ddl_u WHERE kk = 7",
        "SELECT count(*), sum(v) FROM ddl_u",
    ] {
        assert_eq!(
            sorted_rows(&pgs, q).await,
            sorted_rows(&plain, q).await,
            "{q}"
        );
    }

    for refused in [
        "ALTER TABLE ddl_u DROP COLUMN kk",
        "ALTER TABLE ddl_u ALTER COLUMN kk TYPE bigint",
        "ALTER TABLE ddl_u ADD CONSTRAINT u UNIQUE (v)",
        "CREATE UNIQUE INDEX ON ddl_u (v)",
        "ALTER TABLE ddl_u ADD COLUMN s serial",
        "ALTER TABLE ddl_u CLUSTER ON ddl_u_pkey",
    ] {
        assert_eq!(sqlstate_of(&pgs, refused).await, "0A000", "{refused}");
    }
    assert_shards_match("ddl_u", 4, "refusals").await;
    // PostgreSQL's own errors come back unchanged (the shell checks first).
    assert_eq!(
        sqlstate_of(&pgs, "ALTER TABLE ddl_u ADD COLUMN v int").await,
        "42701"
    );
    // A key to a column with no unique constraint (foreign keys: tests/foreign_keys.rs).
    assert_eq!(
        sqlstate_of(
            &pgs,
            "ALTER TABLE ddl_u ADD FOREIGN KEY (v) REFERENCES ddl_u (kk)"
        )
        .await,
        "42830"
    );
    exec(&pgs, "DROP TABLE ddl_u").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ddl_failing_on_one_shard_changes_nothing() {
    let cl = cluster();
    let pgs = cl.client().await;
    exec(&pgs, "DROP TABLE IF EXISTS ddl_f").await;
    exec(
        &pgs,
        "CREATE TABLE ddl_f (k int, v int); INSERT INTO ddl_f SELECT i, i FROM generate_series(1, 20) i",
    )
    .await;
    exec(&pgs, "SET citus.shard_count = 4").await;
    exec(&pgs, "SELECT create_distributed_table('ddl_f', 'k')").await;
    // Tamper with one shard on the second worker: it gets a column and an index first.
    let w = cl.direct(cl.worker_ports[1]).await;
    let shard: String = w
        .query_one(
            "SELECT relname::text FROM pg_class WHERE relname ~ '^ddl_f_[0-9]+$' ORDER BY 1 LIMIT 1",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let shard_id = &shard["ddl_f_".len()..];
    exec(&w, &format!("ALTER TABLE {shard} ADD COLUMN y int")).await;
    exec(&w, &format!("CREATE INDEX fi_{shard_id} ON {shard} (v)")).await;
    let (shell_before, shards_before) = definitions("ddl_f").await;

    for sql in [
        "ALTER TABLE ddl_f ADD COLUMN z int, ADD COLUMN y int",
        "CREATE INDEX fi ON ddl_f (k)",
    ] {
        let err = pgs.batch_execute(sql).await.expect_err(sql);
        let db = err.as_db_error().expect("a server error");
        assert!(
            db.message().contains(&format!("shard {shard_id}"))
                && db.message().contains(&format!(":{}", cl.worker_ports[1])),
            "{sql}: the error names shard and node: {}",
            db.message()
        );
        let (shell, shards) = definitions("ddl_f").await;
        assert_eq!(shell, shell_before, "{sql}: the shell changed");
        assert_eq!(shards, shards_before, "{sql}: a shard changed");
    }
    // No prepared transaction is left behind anywhere.
    common::assert_no_prepared_xacts().await;
    exec(&pgs, "DROP TABLE ddl_f").await;
}

/// Rows of one shard table on every worker holding it.
async fn placements_rows(table: &str) -> Vec<Vec<Vec<Option<String>>>> {
    let cl = cluster();
    let mut out = Vec::new();
    for port in &cl.worker_ports {
        let w = cl.direct(*port).await;
        for n in shard_tables(&w, table).await {
            out.push(sorted_rows(&w, &format!("SELECT * FROM {n}")).await);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reference_tables_and_pushed_down_joins() {
    let cl = cluster();
    let pgs = cl.client().await;
    let plain = plain_postgres().client().await;
    let setup = "DROP TABLE IF EXISTS ref_r, ja, jb, jc; \
         CREATE TABLE ref_r (id int PRIMARY KEY, name text); \
         INSERT INTO ref_r SELECT i, 'n' || i FROM generate_series(1, 5) i; \
         CREATE TABLE ja (k int, v int, rid int); \
         INSERT INTO ja SELECT i, i * 3, i % 7 FROM generate_series(1, 40) i; \
         CREATE TABLE jb (k int, w int); \
         INSERT INTO jb SELECT i, i * 5 FROM generate_series(1, 40, 2) i; \
         CREATE TABLE jc (k int, w int); \
         INSERT INTO jc SELECT i, i FROM generate_series(1, 10) i";
    exec(&pgs, setup).await;
    exec(&plain, setup).await;
    exec(&pgs, "SELECT create_reference_table('ref_r')").await;
    exec(&pgs, "SET citus.shard_count = 4").await;
    exec(&pgs, "SELECT create_distributed_table('ja', 'k')").await;
    exec(
        &pgs,
        "SELECT create_distributed_table('jb', 'k', colocate_with => 'ja')",
    )
    .await;
    exec(&pgs, "SET citus.shard_count = 3").await;
    exec(&pgs, "SELECT create_distributed_table('jc', 'k')").await;

    // One placement per worker, all equal to the oracle.
    let expect = sorted_rows(&plain, "SELECT * FROM ref_r").await;
    let placements = placements_rows("ref_r").await;
    assert_eq!(placements.len(), cl.worker_ports.len());
    assert!(placements.iter().all(|p| *p == expect), "{placements:?}");
    let kind = sorted_rows(
        &pgs,
        "SELECT citus_table_type, shard_count::text FROM citus_tables WHERE table_name = 'ref_r'::regclass",
    )
    .await;
    assert_eq!(kind, vec![vec![Some("reference".into()), Some("1".into())]]);

    // Writes reach every placement.
    for w in [
        "INSERT INTO ref_r VALUES (6, 'six'), (7, 'seven')",
        "UPDATE ref_r SET name = 'two' WHERE id = 2",
        "DELETE FROM ref_r WHERE id = 3",
    ] {
        exec(&pgs, w).await;
        exec(&plain, w).await;
        let expect = sorted_rows(&plain, "SELECT * FROM ref_r").await;
        let placements = placements_rows("ref_r").await;
        assert!(
            placements.iter().all(|p| *p == expect),
            "after {w}: {placements:?}"
        );
        assert_eq!(sorted_rows(&pgs, "SELECT * FROM ref_r").await, expect);
    }
    // A failing write (duplicate key) changes no placement.
    assert_eq!(
        sqlstate_of(&pgs, "INSERT INTO ref_r VALUES (1, 'dup')").await,
        "23505"
    );
    let placements = placements_rows("ref_r").await;
    assert!(placements.iter().all(|p| *p == placements[0]));

    for q in [
        // Reference joins: router and multi-shard.
        "SELECT ja.k, ja.v, r.name FROM ja JOIN ref_r r ON ja.rid = r.id WHERE ja.k = 5",
        "SELECT ja.k, r.name FROM ja JOIN ref_r r ON ja.rid = r.id",
        "SELECT ja.k, r.name FROM ja LEFT JOIN ref_r r ON ja.rid = r.id WHERE ja.v > 30",
        // Co-located joins: router and multi-shard.
        "SELECT ja.k, ja.v, jb.w FROM ja JOIN jb ON ja.k = jb.k WHERE ja.k = 7",
        "SELECT ja.k, jb.w FROM ja, jb WHERE jb.k = ja.k",
        "SELECT ja.k, jb.w FROM ja LEFT JOIN jb ON ja.k = jb.k",
        "SELECT count(*), sum(jb.w) FROM ja JOIN jb USING (k) JOIN ref_r ON ref_r.id = ja.rid",
    ] {
        assert_eq!(
            sorted_rows(&pgs, q).await,
            sorted_rows(&plain, q).await,
            "{q}"
        );
    }
    // Joins the join step cannot prove: planned in parts (recursive planning, the
    // tables pulled as intermediate results), still exact.
    for q in [
        "SELECT * FROM ja JOIN jb ON ja.v = jb.w",
        "SELECT * FROM ja JOIN jc ON ja.k = jc.k",
        "SELECT * FROM ref_r r LEFT JOIN ja ON ja.rid = r.id",
        "SELECT * FROM ja LEFT JOIN jb ON ja.v = jb.w WHERE ja.k = jb.k",
    ] {
        assert_eq!(
            sorted_rows(&pgs, q).await,
            sorted_rows(&plain, q).await,
            "{q}"
        );
    }
    // DDL reaches every placement of a reference table too.
    exec(&pgs, "ALTER TABLE ref_r ADD COLUMN extra int DEFAULT 1").await;
    assert_shards_match(
        "ref_r",
        cl.worker_ports.len(),
        "ALTER TABLE on a reference table",
    )
    .await;

    exec(&pgs, "SELECT undistribute_table('ref_r')").await;
    exec(&plain, "ALTER TABLE ref_r ADD COLUMN extra int DEFAULT 1").await;
    let q = "SELECT * FROM ref_r";
    assert_eq!(sorted_rows(&pgs, q).await, sorted_rows(&plain, q).await);
    assert!(placements_rows("ref_r").await.is_empty());
    exec(&pgs, "SELECT create_reference_table('ref_r')").await;
    exec(&pgs, "DROP TABLE ref_r, ja, jb, jc").await;
    assert!(placements_rows("ref_r").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reference_writes_in_blocks_with_parameters_and_returning() {
    let cl = cluster();
    let pgs = cl.client().await;
    let plain = plain_postgres().client().await;
    let setup = "DROP TABLE IF EXISTS ref_w, dist_w; \
         CREATE TABLE ref_w (id int PRIMARY KEY, name text, n numeric DEFAULT 0); \
         INSERT INTO ref_w SELECT i, 'n' || i FROM generate_series(1, 5) i; \
         CREATE TABLE dist_w (k int PRIMARY KEY, v int)";
    exec(&pgs, setup).await;
    exec(&plain, setup).await;
    exec(&pgs, "SELECT create_reference_table('ref_w')").await;
    exec(&pgs, "SELECT create_distributed_table('dist_w', 'k')").await;
    let same_everywhere = |what: &'static str| {
        let plain = &plain;
        async move {
            let expect = sorted_rows(plain, "SELECT * FROM ref_w").await;
            let placements = placements_rows("ref_w").await;
            assert_eq!(placements.len(), cluster().worker_ports.len());
            assert!(
                placements.iter().all(|p| *p == expect),
                "after {what}: {placements:?} expected {expect:?}"
            );
        }
    };

    // A block mixing reference and distributed writes: rolled back, nothing stays.
    let block = "BEGIN; \
         INSERT INTO ref_w VALUES (10, 'ten'); \
         UPDATE ref_w SET name = 'one' WHERE id = 1; \
         INSERT INTO dist_w VALUES (1, 1), (2, 2), (3, 3); \
         SELECT 1";
    exec(&pgs, block).await;
    // The block reads its own reference write.
    assert_eq!(
        sorted_rows(&pgs, "SELECT name FROM ref_w WHERE id = 10").await,
        vec![vec![Some("ten".to_string())]]
    );
    exec(&pgs, "ROLLBACK").await;
    same_everywhere("a rolled-back block").await;
    assert!(sorted_rows(&pgs, "SELECT * FROM dist_w").await.is_empty());
    // Committed: on every placement, with the distributed rows.
    exec(&pgs, &block.replace("SELECT 1", "COMMIT")).await;
    exec(&plain, &block.replace("SELECT 1", "COMMIT")).await;
    same_everywhere("a committed block").await;
    assert_eq!(
        sorted_rows(&pgs, "SELECT * FROM dist_w").await,
        sorted_rows(&plain, "SELECT * FROM dist_w").await
    );
    // An error in the block aborts it like PostgreSQL: 25P02, then nothing stays.
    exec(&pgs, "BEGIN; INSERT INTO ref_w VALUES (11, 'eleven')").await;
    assert_eq!(
        sqlstate_of(&pgs, "INSERT INTO ref_w VALUES (1, 'dup')").await,
        "23505"
    );
    assert_eq!(sqlstate_of(&pgs, "SELECT 1").await, "25P02");
    exec(&pgs, "ROLLBACK").await;
    same_everywhere("a failed block").await;

    // Prepared statements with parameters, RETURNING from one placement.
    let ins = "INSERT INTO ref_w (id, name, n) VALUES ($1, $2, $3::text::numeric) RETURNING id, name, n::text";
    for (id, name) in [(20, "twenty"), (21, "twenty-one")] {
        let n = format!("{id}.50");
        let a = pgs.query(ins, &[&id, &name, &n]).await.unwrap();
        let b = plain.query(ins, &[&id, &name, &n]).await.unwrap();
        assert_eq!(a.len(), 1);
        let row = |r: &tokio_postgres::Row| {
            (
                r.get::<_, i32>(0),
                r.get::<_, String>(1),
                r.get::<_, String>(2),
            )
        };
        assert_eq!(row(&a[0]), row(&b[0]));
    }
    let upd = "UPDATE ref_w SET n = n + $1::text::numeric WHERE id >= $2";
    assert_eq!(
        pgs.execute(upd, &[&"1.25", &20i32]).await.unwrap(),
        plain.execute(upd, &[&"1.25", &20i32]).await.unwrap()
    );
    let del = "DELETE FROM ref_w WHERE id = $1 RETURNING name";
    let a = pgs.query(del, &[&21i32]).await.unwrap();
    let b = plain.query(del, &[&21i32]).await.unwrap();
    assert_eq!(a.len(), 1);
    assert_eq!(a[0].get::<_, String>(0), b[0].get::<_, String>(0));
    same_everywhere("prepared writes").await;
    // In a transaction through the driver too.
    let mut pgs2 = cl.client().await;
    let t = pgs2.transaction().await.unwrap();
    t.execute(
        "INSERT INTO ref_w (id, name) VALUES ($1, $2)",
        &[&30i32, &"thirty"],
    )
    .await
    .unwrap();
    t.commit().await.unwrap();
    exec(&plain, "INSERT INTO ref_w (id, name) VALUES (30, 'thirty')").await;
    same_everywhere("a driver transaction").await;

    // A volatile function would give each placement its own value: an UPDATE is
    // refused; an INSERT's rows are computed once on the coordinator node and copied
    // to every placement (set-returning and volatile functions, RETURNING).
    let w = "UPDATE ref_w SET name = random()::text WHERE id = 1";
    assert_eq!(sqlstate_of(&pgs, w).await, "0A000", "{w}");
    let w = "INSERT INTO ref_w (id, name) SELECT g, 'g' || g FROM generate_series(50, 59) g";
    exec(&pgs, w).await;
    exec(&plain, w).await;
    same_everywhere("generate_series in an INSERT").await;
    let w = "INSERT INTO ref_w (id, name) SELECT g, random()::text FROM generate_series(60, 62) g \
             RETURNING id";
    assert_eq!(pgs.query(w, &[]).await.unwrap().len(), 3);
    let placements = placements_rows("ref_w").await;
    assert!(
        placements.windows(2).all(|p| p[0] == p[1]),
        "random() in an INSERT: {placements:?}"
    );
    exec(&pgs, "DELETE FROM ref_w WHERE id BETWEEN 50 AND 62").await;
    exec(&plain, "DELETE FROM ref_w WHERE id BETWEEN 50 AND 62").await;
    // Stable ones are evaluated once on the coordinator node: every placement gets
    // the same value (issue 18).
    for w in [
        "INSERT INTO ref_w VALUES (40, now()::text)",
        "INSERT INTO ref_w VALUES (41, CURRENT_TIMESTAMP::text)",
    ] {
        exec(&pgs, w).await;
    }
    let placements = placements_rows("ref_w").await;
    assert!(
        placements.windows(2).all(|p| p[0] == p[1]),
        "stable functions: {placements:?}"
    );
    exec(&pgs, "DELETE FROM ref_w WHERE id IN (40, 41)").await;
    same_everywhere("stable functions evaluated once").await;
    // Immutable functions are fine.
    let w = "UPDATE ref_w SET name = upper(name) || abs(-1)::text WHERE id = 2";
    exec(&pgs, w).await;
    exec(&plain, w).await;
    same_everywhere("an immutable function").await;
    exec(&pgs, "DROP TABLE ref_w, dist_w").await;

    // So are defaults that are not immutable, where the write would use them.
    exec(
        &pgs,
        "DROP TABLE IF EXISTS ref_d; \
         CREATE TABLE ref_d (id int PRIMARY KEY, seq int DEFAULT 7, at timestamptz DEFAULT now()); COMMIT; \
         SELECT create_reference_table('ref_d')",
    )
    .await;
    // An UPDATE is refused; an INSERT computes its rows once, defaults included.
    assert_eq!(
        sqlstate_of(&pgs, "UPDATE ref_d SET at = DEFAULT").await,
        "0A000"
    );
    for w in [
        "INSERT INTO ref_d (id) VALUES (11)",
        "INSERT INTO ref_d VALUES (12, 2)",
        "INSERT INTO ref_d (id, seq, at) VALUES (13, 2, DEFAULT)",
    ] {
        exec(&pgs, w).await;
    }
    let placements = placements_rows("ref_d").await;
    assert!(
        placements
            .iter()
            .all(|p| p.len() == 3 && *p == placements[0]),
        "volatile defaults: {placements:?}"
    );
    exec(&pgs, "DELETE FROM ref_d WHERE id > 10").await;
    for w in [
        "INSERT INTO ref_d (id, at) VALUES (1, '2024-01-01 00:00:00+00')",
        "INSERT INTO ref_d VALUES (2, 3, '2024-01-01 00:00:00+00')",
        "UPDATE ref_d SET seq = seq + 1",
        "DELETE FROM ref_d WHERE id = 2",
    ] {
        exec(&pgs, w).await;
    }
    let placements = placements_rows("ref_d").await;
    assert_eq!(placements.len(), cl.worker_ports.len());
    assert!(
        placements
            .iter()
            .all(|p| p.len() == 1 && *p == placements[0]),
        "{placements:?}"
    );
    exec(&pgs, "DROP TABLE ref_d").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncate_vacuum_and_analyze_reach_every_shard() {
    let cl = cluster();
    let pgs = cl.client().await;
    exec(
        &pgs,
        "DROP TABLE IF EXISTS tva; CREATE TABLE tva (k int, v text); COMMIT; \
         SELECT create_distributed_table('tva', 'k'); COMMIT; \
         INSERT INTO tva SELECT i, 'v' || i FROM generate_series(1, 500) i",
    )
    .await;
    exec(&pgs, "VACUUM ANALYZE tva").await;
    exec(&pgs, "ANALYZE tva").await;
    let mut shards = 0;
    for port in &cl.worker_ports {
        let w = cl.direct(*port).await;
        for n in shard_tables(&w, "tva").await {
            let row = w
                .query_one(
                    "SELECT last_vacuum IS NOT NULL, last_analyze IS NOT NULL \
                     FROM pg_stat_user_tables WHERE relid = $1::text::regclass",
                    &[&n],
                )
                .await
                .unwrap();
            assert!(
                row.get::<_, bool>(0) && row.get::<_, bool>(1),
                "{n} on {port}"
            );
            shards += 1;
        }
    }
    assert!(shards > 0);
    exec(&pgs, "TRUNCATE tva").await;
    assert!(sorted_rows(&pgs, "SELECT * FROM tva").await.is_empty());
    for port in &cl.worker_ports {
        let w = cl.direct(*port).await;
        for n in shard_tables(&w, "tva").await {
            let rows = sorted_rows(&w, &format!("SELECT * FROM {n}")).await;
            assert!(rows.is_empty(), "{n} on {port}");
        }
    }
    exec(&pgs, "DROP TABLE tva").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ddl_inside_a_transaction_block_commits_or_rolls_back_with_it() {
    let cl = cluster();
    let pgs = cl.client().await;
    exec(
        &pgs,
        "DROP TABLE IF EXISTS ddl_b; CREATE TABLE ddl_b (k int, v int); \
         SET citus.shard_count = 4; COMMIT; SELECT create_distributed_table('ddl_b', 'k'); COMMIT; \
         INSERT INTO ddl_b SELECT i, i FROM generate_series(1, 20) i",
    )
    .await;
    let coord = cl.direct(cl.coordinator_port).await;
    let shell_rows: i64 = coord
        .query_one("SELECT count(*) FROM ONLY ddl_b", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(shell_rows, 0, "rows went into the shell");
    assert_eq!(
        sorted_rows(&pgs, "SELECT count(*) FROM ddl_b").await,
        vec![vec![Some("20".to_string())]]
    );
    let (shell_before, shards_before) = definitions("ddl_b").await;
    let ddl = "CREATE INDEX ddl_b_v ON ddl_b (v); \
         ALTER TABLE ddl_b ADD COLUMN w int DEFAULT 5, ADD CONSTRAINT ddl_b_pos CHECK (v >= 0); \
         ALTER TABLE ddl_b ALTER COLUMN v SET NOT NULL; \
         INSERT INTO ddl_b (k, v) VALUES (100, 100)";
    exec(&pgs, &format!("BEGIN; {ddl}; ROLLBACK")).await;
    let (shell, shards) = definitions("ddl_b").await;
    assert_eq!(shell, shell_before, "the shell changed after ROLLBACK");
    assert_eq!(shards, shards_before, "a shard changed after ROLLBACK");
    assert_eq!(
        sorted_rows(&pgs, "SELECT count(*) FROM ddl_b").await,
        vec![vec![Some("20".to_string())]]
    );

    exec(&pgs, &format!("BEGIN; {ddl}; COMMIT")).await;
    assert_shards_match("ddl_b", 4, "DDL committed in a block").await;
    let (shell, _) = definitions("ddl_b").await;
    assert_ne!(shell, shell_before, "the DDL did not reach the shell");
    // pgshard plans with the new columns after the commit.
    assert_eq!(
        sorted_rows(&pgs, "SELECT w, count(*) FROM ddl_b GROUP BY w").await,
        vec![vec![Some("5".to_string()), Some("21".to_string())]]
    );
    assert_eq!(
        sqlstate_of(&pgs, "INSERT INTO ddl_b (k, v) VALUES (7, -1)").await,
        "23514"
    );

    // A DDL failing on a shard inside the block (the shell is empty, the shards are
    // not) aborts the block like PostgreSQL; the error names shard, node and statement.
    exec(&pgs, "BEGIN").await;
    let e = pgs
        .batch_execute("ALTER TABLE ddl_b ADD CONSTRAINT small CHECK (v < 10)")
        .await
        .unwrap_err();
    let db = e.as_db_error().expect("a server error");
    assert_eq!(db.code().code(), "23514", "{db:?}");
    assert!(
        db.message().starts_with("shard ")
            && db.message().contains(" on node ")
            && db.message().contains("statement \"ALTER TABLE"),
        "{}",
        db.message()
    );
    assert_eq!(sqlstate_of(&pgs, "SELECT 1").await, "25P02");
    exec(&pgs, "ROLLBACK").await;
    assert_shards_match("ddl_b", 4, "a failed DDL in a block").await;
    // What would change pgshard's own planning inside the block is refused.
    for sql in [
        "ALTER TABLE ddl_b RENAME TO ddl_c",
        "ALTER TABLE ddl_b DROP COLUMN w",
        "CREATE INDEX ON ddl_b (w)",
    ] {
        exec(&pgs, "BEGIN").await;
        assert_eq!(sqlstate_of(&pgs, sql).await, "0A000", "{sql}");
        exec(&pgs, "ROLLBACK").await;
    }
    common::assert_no_prepared_xacts().await;
    exec(&pgs, "DROP TABLE ddl_b").await;
}

/// One query string that distributes a table and then writes and reads it: each
/// statement is planned with the catalog as the statements before it left it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statements_after_create_distributed_table_in_one_string_see_it() {
    let cl = cluster();
    let pgs = cl.client().await;
    let rows = pgs
        .simple_query(
            "DROP TABLE IF EXISTS one_str; CREATE TABLE one_str (k int, v text); COMMIT; \
             SELECT create_distributed_table('one_str', 'k'); COMMIT; \
             INSERT INTO one_str SELECT i, 'v' || i FROM generate_series(1, 50) i; \
             SELECT count(*) FROM one_str",
        )
        .await
        .unwrap();
    let count = rows.iter().rev().find_map(|m| match m {
        tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
        _ => None,
    });
    assert_eq!(count.as_deref(), Some("50"));
    let coord = cl.direct(cl.coordinator_port).await;
    let shell: i64 = coord
        .query_one("SELECT count(*) FROM ONLY one_str", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(shell, 0, "rows went into the coordinator node's shell");
    exec(&pgs, "DROP TABLE one_str").await;
}

/// A statement's rows (sorted) or its SQLSTATE.
async fn outcome(c: &Client, sql: &str) -> Result<Vec<Vec<Option<String>>>, String> {
    match c.simple_query(sql).await {
        Ok(m) => Ok(common::sorted_simple_rows(&m)),
        Err(e) => Err(e
            .as_db_error()
            .map(|d| d.code().code().to_string())
            .unwrap_or_else(|| e.to_string())),
    }
}

/// TRUNCATE of distributed and reference tables inside a block is part of the block,
/// as in PostgreSQL: the block sees it, ROLLBACK / ROLLBACK TO undo it, COMMIT keeps it
/// (with 2PC across nodes). VACUUM in a block is refused with 25001; the statements'
/// options reach the shards. Each step is compared with one plain PostgreSQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncate_in_blocks_and_maintenance_options_behave_as_in_postgres() {
    let cl = cluster();
    let pgs = cl.client().await;
    let plain = plain_postgres().client().await;
    let setup = "DROP TABLE IF EXISTS trb, trr; CREATE TABLE trb (k int, v text); \
                 CREATE TABLE trr (k int PRIMARY KEY, n text)";
    exec(&plain, setup).await;
    exec(
        &pgs,
        &format!(
            "{setup}; SET citus.shard_count = 4; COMMIT; SELECT create_distributed_table('trb', 'k'); \
             COMMIT; SELECT create_reference_table('trr')"
        ),
    )
    .await;
    let fill = "INSERT INTO trb SELECT i, 'v' || i FROM generate_series(1, 100) i; \
                INSERT INTO trr VALUES (1, 'a'), (2, 'b')";
    exec(&plain, fill).await;
    exec(&pgs, fill).await;
    let steps = [
        "BEGIN",
        "TRUNCATE trb",
        "SELECT count(*) FROM trb",
        "INSERT INTO trb VALUES (1, 'x')",
        "SELECT count(*), min(v) FROM trb",
        "ROLLBACK",
        "SELECT count(*), min(v) FROM trb",
        "BEGIN",
        "SAVEPOINT a",
        "TRUNCATE trb, trr",
        "SELECT count(*) FROM trr",
        "ROLLBACK TO SAVEPOINT a",
        "SELECT count(*) FROM trb",
        "SELECT count(*) FROM trr",
        "COMMIT",
        "SELECT count(*) FROM trb WHERE k = 5",
        "BEGIN",
        "SELECT v FROM trb WHERE k = 5",
        "TRUNCATE ONLY trb RESTART IDENTITY CASCADE",
        "INSERT INTO trb SELECT i, 'w' || i FROM generate_series(1, 10) i",
        "COMMIT",
        "SELECT count(*), min(v), max(k) FROM trb",
        "BEGIN",
        "VACUUM trb",
        "ROLLBACK",
        "BEGIN",
        "ANALYZE trb (v)",
        "SELECT count(*) FROM trb",
        "COMMIT",
        "BEGIN",
        "TRUNCATE trb",
        "SELECT 1/0",
        "COMMIT",
        "SELECT count(*) FROM trb",
        "TRUNCATE trr",
        "SELECT count(*) FROM trr",
        "VACUUM (FULL, ANALYZE) trb",
        "ANALYZE trb (nosuchcolumn)",
        "SELECT count(*) FROM trb",
    ];
    for sql in steps {
        let want = outcome(&plain, sql).await;
        let got = outcome(&pgs, sql).await;
        assert_eq!(got, want, "{sql}");
    }

    // The reference table is empty on every placement; no prepared transaction is left.
    for port in &cl.worker_ports {
        let w = cl.direct(*port).await;
        for n in shard_tables(&w, "trr").await {
            assert!(sorted_rows(&w, &format!("SELECT * FROM {n}"))
                .await
                .is_empty());
        }
    }
    common::assert_no_prepared_xacts().await;

    // VACUUM FULL rewrote the shards (its option reached them); psql sees
    // PostgreSQL's command tag; TRUNCATE over the extended protocol commits at Sync.
    let w = cl.direct(cl.worker_ports[0]).await;
    let shard = shard_tables(&w, "trb").await.remove(0);
    let filenode = format!("SELECT relfilenode FROM pg_class WHERE oid = '{shard}'::regclass");
    let before = sorted_rows(&w, &filenode).await;
    let env = cl.pg_env();
    assert_eq!(common::psql(&env, &["-c", "VACUUM (FULL) trb"]), "VACUUM");
    assert_ne!(
        sorted_rows(&w, &filenode).await,
        before,
        "VACUUM FULL did not reach {shard}"
    );
    assert_eq!(
        common::psql(&env, &["-c", "TRUNCATE trb"]),
        "TRUNCATE TABLE"
    );
    exec(&pgs, "INSERT INTO trb VALUES (1, 'a'), (2, 'b'), (3, 'c')").await;
    assert_eq!(pgs.execute("TRUNCATE trb", &[]).await.unwrap(), 0);
    assert_eq!(
        sorted_rows(&pgs, "SELECT count(*) FROM trb").await,
        vec![vec![Some("0".to_string())]]
    );
    exec(&pgs, "DROP TABLE trb, trr").await;
}

/// Issue 18: shard DDL renames every reference to the table its expressions carry
/// (whole rows `li.*`, qualified columns `li.a` and `public.li.b`, in index
/// expressions, partial-index WHERE, CHECK constraints and policies), so PostgreSQL's
/// accepted statements run on every shard with the same result. A CHECK naming the
/// table runs unqualified on the shell, whose read guard (an inheritance child)
/// PostgreSQL recurses the constraint to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ddl_expressions_naming_the_table() {
    let pgs = cluster().client().await;
    let plain = plain_postgres().client().await;
    let setup = "DROP TABLE IF EXISTS li; CREATE TABLE li (a int, b int)";
    exec(&pgs, setup).await;
    exec(&plain, setup).await;
    exec(&pgs, "SET citus.shard_count = 4").await;
    exec(&pgs, "SELECT create_distributed_table('li', 'a')").await;
    let steps = [
        "CREATE INDEX li_whole ON li (record_ne(li.*, NULL))",
        "CREATE INDEX li_sum ON li ((li.a + li.b)) WHERE li.b > 0",
        "CREATE INDEX li_schema ON li ((public.li.b * 2)) WHERE li IS NOT NULL",
        "ALTER TABLE li ADD CONSTRAINT li_check CHECK (li.a > -100 AND public.li.b < 1000)",
        "ALTER TABLE li ADD COLUMN c int DEFAULT 3 CONSTRAINT li_c CHECK (li.c > 0)",
        "CREATE POLICY li_pol ON li USING (li.a > 0) WITH CHECK (li.b IS NOT NULL)",
        "INSERT INTO li VALUES (1, 2), (5, 6), (7, NULL)",
    ];
    for step in steps {
        exec(&pgs, step).await;
        exec(&plain, step).await;
        assert_shards_match("li", 4, step).await;
    }
    let q = "SELECT a, b, c FROM li ORDER BY a";
    let a: Vec<(i32, Option<i32>, i32)> = pgs
        .query(q, &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    let b: Vec<(i32, Option<i32>, i32)> = plain
        .query(q, &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(a, b);
    // The CHECK constraint naming the table holds on the shards.
    assert_eq!(
        sqlstate_of(&pgs, "INSERT INTO li VALUES (-500, 1)").await,
        "23514"
    );
    exec(&pgs, "DROP TABLE li").await;
    exec(&plain, "DROP TABLE li").await;
}
