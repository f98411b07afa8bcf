//! `alter_distributed_table`: the shard count changed (32 → 8 → 16), the distribution
//! column changed, the table co-located with another (whose join then pushes down),
//! each with rows compared with one plain PostgreSQL holding the same rows; indexes,
//! constraints and grants kept; Citus's errors for bad arguments; a concurrent client's
//! INSERTs during the move kept.

mod common;

use common::{
    assert_no_prepared_xacts, assert_same_rows, cluster, outcome, plain_postgres, scalar,
};
use futures_util::StreamExt;
use std::sync::{Arc, Mutex};
use tokio_postgres::{AsyncMessage, Client};

/// A connection through pgshard whose NOTICEs are collected.
async fn client_with_notices() -> (Client, Arc<Mutex<Vec<String>>>) {
    let cl = cluster();
    let mut cfg = tokio_postgres::Config::new();
    cfg.host(&cl.host)
        .port(cl.port)
        .user(&cl.user)
        .password(&cl.password)
        .dbname(&cl.database);
    let (client, mut conn) = cfg.connect(tokio_postgres::NoTls).await.unwrap();
    let notices = Arc::new(Mutex::new(Vec::new()));
    let seen = notices.clone();
    tokio::spawn(async move {
        let mut messages = futures_util::stream::poll_fn(move |cx| conn.poll_message(cx));
        while let Some(m) = messages.next().await {
            match m {
                Ok(AsyncMessage::Notice(n)) => seen.lock().unwrap().push(n.message().to_string()),
                Ok(_) => {}
                Err(_) => break,
            }
        }
    });
    (client, notices)
}

/// The same statements on both servers.
async fn both(shard: &Client, plain: &Client, sql: &str) {
    shard
        .batch_execute(sql)
        .await
        .unwrap_or_else(|e| panic!("pgshard: {sql}: {e:?}"));
    plain
        .batch_execute(sql)
        .await
        .unwrap_or_else(|e| panic!("plain: {sql}: {e:?}"));
}

async fn shard_count(c: &Client, table: &str) -> String {
    scalar(
        c,
        &format!("SELECT count(*) FROM pg_dist_shard WHERE logicalrelid = '{table}'::regclass"),
    )
    .await
}

/// Rows in every shard table of `table` on the workers (directly), and how many shard
/// tables of it exist there: nothing is left of the old shards.
async fn rows_on_workers(table: &str) -> (i64, i64) {
    let cl = cluster();
    let (mut rows, mut tables) = (0, 0);
    for port in &cl.worker_ports {
        let w = cl.direct(*port).await;
        let names: Vec<String> = w
            .query(
                "SELECT relname::text FROM pg_class WHERE relkind = 'r' AND relname ~ ('^' || $1 || '_[0-9]+$')",
                &[&table],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        for n in names {
            tables += 1;
            let c: i64 = w
                .query_one(&format!("SELECT count(*) FROM public.\"{n}\""), &[])
                .await
                .unwrap()
                .get(0);
            rows += c;
        }
    }
    (rows, tables)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shard_count_changes_keep_rows_indexes_and_grants() {
    let (pgs, notices) = client_with_notices().await;
    let plain = plain_postgres().client().await;
    let setup =
        "DROP TABLE IF EXISTS ad_sc; DROP ROLE IF EXISTS ad_reader; CREATE ROLE ad_reader; \
        CREATE TABLE ad_sc (id int PRIMARY KEY, v text DEFAULT 'none', n int CHECK (n >= 0)); \
        CREATE INDEX ad_sc_v ON ad_sc (v); GRANT SELECT ON ad_sc TO ad_reader;";
    both(&pgs, &plain, setup).await;
    pgs.batch_execute("SELECT create_distributed_table('ad_sc', 'id', colocate_with => 'none', shard_count => 32)")
        .await
        .unwrap();
    both(
        &pgs,
        &plain,
        "INSERT INTO ad_sc SELECT i, 'v' || (i % 7), i % 100 FROM generate_series(1, 3000) i; \
         INSERT INTO ad_sc (id, n) VALUES (-5, 1)",
    )
    .await;
    let check = "SELECT id, v, n FROM ad_sc ORDER BY id";
    assert_same_rows(&pgs, &plain, check).await;

    for count in [8, 16] {
        notices.lock().unwrap().clear();
        pgs.batch_execute(&format!(
            // Other tests' tables may share a shard count and so the new co-location.
            "SELECT alter_distributed_table('ad_sc', shard_count => {count}, cascade_to_colocated => false)"
        ))
        .await
        .unwrap();
        assert_eq!(shard_count(&pgs, "ad_sc").await, count.to_string());
        assert_eq!(rows_on_workers("ad_sc").await, (3001, count));
        assert_same_rows(&pgs, &plain, check).await;
        assert_same_rows(
            &pgs,
            &plain,
            "SELECT v, count(*), sum(n) FROM ad_sc GROUP BY v ORDER BY v",
        )
        .await;
        // Routed reads and writes find the rows in their new shards.
        assert_same_rows(&pgs, &plain, "SELECT * FROM ad_sc WHERE id = 1234").await;
        let got = notices.lock().unwrap().clone();
        for step in [
            "creating a new table for public.ad_sc",
            "moving the data of public.ad_sc",
            "dropping the old public.ad_sc",
            "renaming the new table to public.ad_sc",
        ] {
            assert!(got.iter().any(|n| n == step), "{step} missing from {got:?}");
        }
    }
    // Constraints, defaults and indexes still hold on the new shards.
    assert_eq!(
        outcome(&pgs, "INSERT INTO ad_sc VALUES (7, 'x', 1)").await,
        "error 23505"
    );
    assert_eq!(
        outcome(&pgs, "INSERT INTO ad_sc VALUES (70000, 'x', -1)").await,
        "error 23514"
    );
    both(&pgs, &plain, "INSERT INTO ad_sc (id, n) VALUES (70001, 3)").await;
    assert_same_rows(&pgs, &plain, "SELECT * FROM ad_sc WHERE id = 70001").await;
    // Every new shard has the index and the grant.
    let cl = cluster();
    for port in &cl.worker_ports {
        let w = cl.direct(*port).await;
        let missing: i64 = w
            .query_one(
                "SELECT count(*) FROM pg_class c WHERE c.relkind = 'r' AND c.relname ~ '^ad_sc_[0-9]+$' \
                 AND (NOT has_table_privilege('ad_reader', c.oid, 'SELECT') \
                      OR NOT EXISTS (SELECT 1 FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid \
                                     WHERE i.indrelid = c.oid AND ic.relname LIKE 'ad_sc_v_%'))",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(missing, 0, "worker {port}");
    }
    // The shell kept its oid: the grant and index are still there.
    assert_eq!(
        scalar(
            &pgs,
            "SELECT has_table_privilege('ad_reader', 'ad_sc', 'SELECT')"
        )
        .await,
        "t"
    );
    assert_no_prepared_xacts().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn distribution_column_change_routes_by_the_new_column() {
    let pgs = cluster().client().await;
    let plain = plain_postgres().client().await;
    both(
        &pgs,
        &plain,
        "DROP TABLE IF EXISTS ad_col; \
         CREATE TABLE ad_col (a int NOT NULL, b int NOT NULL, c text, UNIQUE (a, b)); \
         INSERT INTO ad_col SELECT i, i % 50, 'c' || i FROM generate_series(1, 2000) i;",
    )
    .await;
    pgs.batch_execute("SELECT create_distributed_table('ad_col', 'a')")
        .await
        .unwrap();
    pgs.batch_execute("SELECT alter_distributed_table('ad_col', distribution_column => 'b')")
        .await
        .unwrap();
    assert_eq!(
        scalar(
            &pgs,
            "SELECT partkey FROM pg_dist_partition WHERE logicalrelid = 'ad_col'::regclass"
        )
        .await,
        "b"
    );
    assert_eq!(rows_on_workers("ad_col").await, (2000, 32));
    assert_same_rows(&pgs, &plain, "SELECT * FROM ad_col ORDER BY a").await;
    assert_same_rows(
        &pgs,
        &plain,
        "SELECT a, c FROM ad_col WHERE b = 17 ORDER BY a",
    )
    .await;
    // Each row lies in the shard its b hashes to: a routed read finds all of them.
    assert_eq!(
        scalar(&pgs, "SELECT count(*) FROM ad_col WHERE b = 3").await,
        "40"
    );
    let shard = scalar(
        &pgs,
        "SELECT get_shard_id_for_distribution_column('ad_col', 3)",
    )
    .await;
    let port = scalar(
        &pgs,
        &format!("SELECT nodeport FROM pg_dist_shard_placement WHERE shardid = {shard}"),
    )
    .await;
    let w = cluster().direct(port.parse().unwrap()).await;
    let n: i64 = w
        .query_one(
            &format!("SELECT count(*) FROM public.ad_col_{shard} WHERE b = 3"),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 40);
    assert_eq!(
        outcome(&pgs, "INSERT INTO ad_col VALUES (5, 5, 'dup')").await,
        "error 23505"
    );
    // A unique constraint without the new column cannot be kept: Citus's refusal.
    both(&pgs, &plain, "ALTER TABLE ad_col ADD COLUMN d int").await;
    assert_eq!(
        outcome(
            &pgs,
            "SELECT alter_distributed_table('ad_col', distribution_column => 'd')"
        )
        .await,
        "error 0A000"
    );
    assert_same_rows(&pgs, &plain, "SELECT * FROM ad_col ORDER BY a").await;
    assert_no_prepared_xacts().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn colocate_with_makes_joins_push_down() {
    let pgs = cluster().client().await;
    let plain = plain_postgres().client().await;
    both(
        &pgs,
        &plain,
        "DROP TABLE IF EXISTS ad_orders, ad_items; \
         CREATE TABLE ad_orders (o_id bigint PRIMARY KEY, cust int); \
         CREATE TABLE ad_items (i_id int, o_ref bigint, qty int); \
         INSERT INTO ad_orders SELECT i, i % 13 FROM generate_series(1, 500) i; \
         INSERT INTO ad_items SELECT i, 1 + i % 500, i % 9 FROM generate_series(1, 1500) i;",
    )
    .await;
    // Each Citus function that writes in a query string of its own (pgshard refuses
    // them inside a string's implicit transaction).
    for sql in [
        "SELECT create_distributed_table('ad_orders', 'o_id', shard_count => 8)",
        "SELECT create_distributed_table('ad_items', 'i_id', colocate_with => 'none', shard_count => 4)",
    ] {
        pgs.batch_execute(sql).await.unwrap();
    }
    pgs.batch_execute(
        "SELECT alter_distributed_table('ad_items', distribution_column => 'o_ref', colocate_with => 'ad_orders')",
    )
    .await
    .unwrap();
    assert_eq!(shard_count(&pgs, "ad_items").await, "8");
    assert_eq!(
        scalar(
            &pgs,
            "SELECT count(DISTINCT colocationid) FROM pg_dist_partition \
             WHERE logicalrelid IN ('ad_orders'::regclass, 'ad_items'::regclass)"
        )
        .await,
        "1"
    );
    let join =
        "SELECT o.cust, sum(i.qty), count(*) FROM ad_orders o JOIN ad_items i ON i.o_ref = o.o_id \
                GROUP BY o.cust ORDER BY o.cust";
    assert_same_rows(&pgs, &plain, join).await;
    let explain: Vec<String> = pgs
        .simple_query(&format!("EXPLAIN {join}"))
        .await
        .unwrap()
        .iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
            _ => None,
        })
        .collect();
    let text = explain.join("\n");
    assert!(text.contains("Task Count: 8"), "{text}");
    assert!(
        !text.contains("Subplan") && !text.to_lowercase().contains("repartition"),
        "{text}"
    );
    assert_no_prepared_xacts().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_arguments_fail_as_in_citus() {
    let pgs = cluster().client().await;
    for sql in [
        "DROP TABLE IF EXISTS ad_e1, ad_e2, ad_e3, ad_local; \
         CREATE TABLE ad_e1 (a int, b text); CREATE TABLE ad_e2 (a int); CREATE TABLE ad_e3 (t text); \
         CREATE TABLE ad_local (a int)",
        "SELECT create_distributed_table('ad_e1', 'a', colocate_with => 'none', shard_count => 4)",
        "SELECT create_distributed_table('ad_e2', 'a', colocate_with => 'ad_e1')",
        "SELECT create_distributed_table('ad_e3', 't', shard_count => 4)",
    ] {
        pgs.batch_execute(sql).await.unwrap();
    }
    let error = |sql: &'static str| {
        let pgs = &pgs;
        async move {
            let e = pgs.simple_query(sql).await.expect_err(sql);
            let db = e.as_db_error().unwrap_or_else(|| panic!("{sql}: {e}"));
            (db.code().code().to_string(), db.message().to_string())
        }
    };
    let citus = |m: &str| ("XX000".to_string(), m.to_string());
    assert_eq!(
        error("SELECT alter_distributed_table('ad_e1')").await,
        citus("you have to specify at least one of the distribution_column, shard_count or colocate_with parameters")
    );
    assert_eq!(
        error("SELECT alter_distributed_table('ad_e1', shard_count => 4)").await,
        citus("this call doesn't change any properties of the table")
    );
    assert_eq!(
        error("SELECT alter_distributed_table('ad_e1', shard_count => 0)").await,
        citus("shard_count cannot be 0")
    );
    assert_eq!(
        error("SELECT alter_distributed_table('ad_local', shard_count => 2)").await,
        citus("cannot alter table because the table is not distributed")
    );
    assert_eq!(
        error("SELECT alter_distributed_table('ad_e3', colocate_with => 'ad_local')").await,
        citus("cannot colocate with ad_local because it is not a distributed table")
    );
    assert_eq!(
        error("SELECT alter_distributed_table('ad_e1', shard_count => 8)").await,
        citus("cascade_to_colocated parameter is necessary")
    );
    assert_eq!(
        error("SELECT alter_distributed_table('ad_e3', colocate_with => 'ad_e1')").await,
        citus("cannot colocate with ad_e1 because data type of its distribution column is different than ad_e3")
    );
    assert_eq!(
        error("SELECT alter_distributed_table('ad_e1', distribution_column => 'nope')").await,
        (
            "42703".to_string(),
            "column \"nope\" of relation \"ad_e1\" does not exist".to_string()
        )
    );
    assert_eq!(
        error("SELECT alter_distributed_table('ad_e1', shard_count => 8, cascade_to_colocated => true)")
            .await
            .0,
        "0A000"
    );
    // cascade_to_colocated => false breaks the co-location, as in Citus.
    pgs.batch_execute(
        "SELECT alter_distributed_table('ad_e1', shard_count => 8, cascade_to_colocated => false)",
    )
    .await
    .unwrap();
    assert_eq!(shard_count(&pgs, "ad_e1").await, "8");
    assert_eq!(shard_count(&pgs, "ad_e2").await, "4");
    assert_no_prepared_xacts().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_inserts_are_not_lost() {
    let pgs = cluster().client().await;
    for sql in [
        "DROP TABLE IF EXISTS ad_busy; CREATE TABLE ad_busy (id int PRIMARY KEY, v int)",
        "SELECT create_distributed_table('ad_busy', 'id', shard_count => 16)",
        "INSERT INTO ad_busy SELECT i, i FROM generate_series(1, 20000) i",
    ] {
        pgs.batch_execute(sql).await.unwrap();
    }
    let writer = tokio::spawn(async {
        let c = cluster().client().await;
        let mut done = Vec::new();
        let mut failed = Vec::new();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(4);
        let mut id = 100_000;
        while std::time::Instant::now() < deadline {
            id += 1;
            match c
                .simple_query(&format!("INSERT INTO ad_busy VALUES ({id}, {id})"))
                .await
            {
                Ok(_) => done.push(id),
                Err(e) => failed.push((id, e.to_string())),
            }
        }
        (done, failed)
    });
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    pgs.batch_execute("SELECT alter_distributed_table('ad_busy', shard_count => 6)")
        .await
        .unwrap();
    let (done, failed) = writer.await.unwrap();
    assert!(
        failed.is_empty(),
        "INSERTs failed during the move: {failed:?}"
    );
    assert!(done.len() > 10, "the writer made no progress");
    let stored = scalar(&pgs, "SELECT count(*) FROM ad_busy WHERE id > 100000").await;
    assert_eq!(stored, done.len().to_string());
    assert_eq!(
        scalar(&pgs, "SELECT count(*) FROM ad_busy").await,
        (20000 + done.len()).to_string()
    );
    assert_eq!(
        rows_on_workers("ad_busy").await,
        (20000 + done.len() as i64, 6)
    );
    assert_no_prepared_xacts().await;
}
