//! Functions PostgreSQL evaluates once per statement (`now()`, `current_timestamp`,
//! `statement_timestamp()`, `current_user`, `current_setting('x')`), against real
//! servers: through pgshard they must give what one plain PostgreSQL gives — one value
//! per statement, the transaction's `now()` equal to what `SELECT now()` shows the
//! client in its block, the client's TimeZone and role applied — for routed and
//! multi-shard writes and reads, multi-row INSERT and INSERT ... SELECT, in blocks and
//! in autocommit. VOLATILE functions: evaluated once per VALUES occurrence in INSERT
//! (`nextval` of the coordinator node's sequence), refused with 0A000 in UPDATE as
//! Citus refuses them.

mod common;

use common::{cluster, plain_postgres, sorted_simple_rows};
use tokio_postgres::Client;

async fn exec(c: &Client, sql: &str) {
    c.batch_execute(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
}

/// The rows of the last statement of `sql` (simple protocol), sorted.
async fn rows(c: &Client, sql: &str) -> Vec<Vec<Option<String>>> {
    let msgs = c
        .simple_query(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
    sorted_simple_rows(&msgs)
}

/// A distributed table `name (k int, ts timestamptz, who text)` with rows 1..=10
/// through pgshard, and the same local table on the plain PostgreSQL.
async fn setup(pgs: &Client, plain: &Client, name: &str) {
    let sql = format!(
        "DROP TABLE IF EXISTS {name}; CREATE TABLE {name} (k int, ts timestamptz, who text); \
         INSERT INTO {name} SELECT i, NULL, NULL FROM generate_series(1, 10) i"
    );
    exec(plain, &sql).await;
    exec(pgs, &sql).await;
    exec(
        pgs,
        &format!("SELECT create_distributed_table('{name}', 'k')"),
    )
    .await;
}

/// Runs `steps` on both and asserts each step's rows are equal.
async fn same(pgs: &Client, plain: &Client, steps: &[&str]) {
    for s in steps {
        let a = rows(pgs, s).await;
        let b = rows(plain, s).await;
        assert_eq!(a, b, "{s}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn now_in_a_block_is_the_blocks_now_on_every_shard() {
    let pgs = cluster().client().await;
    let plain = plain_postgres().client().await;
    setup(&pgs, &plain, "sf_block").await;
    same(
        &pgs,
        &plain,
        &[
            "BEGIN",
            "UPDATE sf_block SET ts = now()",
            "SELECT count(DISTINCT ts), bool_and(ts = now()) FROM sf_block",
            "UPDATE sf_block SET ts = current_timestamp WHERE k = 3",
            "INSERT INTO sf_block VALUES (100, now()), (101, transaction_timestamp())",
            "INSERT INTO sf_block SELECT k + 1000, now() FROM sf_block WHERE k <= 5",
            "SELECT count(DISTINCT ts), bool_and(ts = now()), count(*) FROM sf_block",
            "SELECT k FROM sf_block WHERE ts = now() AND k > 1000",
            "SELECT count(*) FROM sf_block WHERE ts = current_timestamp",
            "COMMIT",
        ],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_value_per_statement_in_autocommit() {
    let pgs = cluster().client().await;
    let plain = plain_postgres().client().await;
    setup(&pgs, &plain, "sf_auto").await;
    same(
        &pgs,
        &plain,
        &[
            "UPDATE sf_auto SET ts = statement_timestamp()",
            "SELECT count(DISTINCT ts) FROM sf_auto",
            "UPDATE sf_auto SET ts = now()",
            "SELECT count(DISTINCT ts) FROM sf_auto",
            "INSERT INTO sf_auto VALUES (200, now()), (201, now()), (202, now()), (203, now())",
            "SELECT count(DISTINCT ts) FROM sf_auto WHERE k >= 200",
            "INSERT INTO sf_auto SELECT k + 300, clock_timestamp() - clock_timestamp() + now() \
             FROM sf_auto WHERE k <= 10",
            "SELECT count(*) FROM sf_auto WHERE k > 300",
        ],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_clients_time_zone_and_role_apply() {
    let pgs = cluster().client().await;
    let plain = plain_postgres().client().await;
    setup(&pgs, &plain, "sf_tz").await;
    for c in [&pgs, &plain] {
        if rows(c, "SELECT 1 FROM pg_roles WHERE rolname = 'sf_someone'")
            .await
            .is_empty()
        {
            exec(c, "CREATE ROLE sf_someone").await;
        }
        exec(c, "GRANT ALL ON sf_tz TO sf_someone").await;
    }
    same(
        &pgs,
        &plain,
        &[
            "SET TimeZone = 'Pacific/Kiritimati'",
            "SET DateStyle = 'SQL, DMY'",
            "BEGIN",
            // A local date/time of the client's zone, stored by the shards as that.
            "UPDATE sf_tz SET who = current_date::text || ' ' || localtimestamp::text, ts = localtimestamp",
            "SELECT count(*) FROM sf_tz WHERE who = current_date::text || ' ' || localtimestamp::text",
            "SELECT count(*) FROM sf_tz WHERE ts = localtimestamp",
            "SET LOCAL ROLE sf_someone",
            "UPDATE sf_tz SET who = current_user WHERE k <= 4",
            "UPDATE sf_tz SET who = session_user || '/' || current_setting('TimeZone') WHERE k = 9",
            "RESET ROLE",
            "SELECT k, who = current_user, who FROM sf_tz WHERE k <= 4 OR k = 9",
            "COMMIT",
            "RESET TimeZone",
            "RESET DateStyle",
        ],
    )
    .await;
    // The session user differs between the two servers' test users only by name.
    let via = rows(
        &pgs,
        "SELECT who = session_user || '/Pacific/Kiritimati' FROM sf_tz WHERE k = 9",
    )
    .await;
    assert_eq!(via, vec![vec![Some("t".to_string())]]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_shard_reads_see_one_value() {
    let pgs = cluster().client().await;
    let plain = plain_postgres().client().await;
    setup(&pgs, &plain, "sf_read").await;
    same(
        &pgs,
        &plain,
        &[
            "BEGIN",
            "UPDATE sf_read SET ts = now() WHERE k % 2 = 0",
            // Streamed, routed, combined (GROUP BY) and a column named as PostgreSQL names it.
            "SELECT k FROM sf_read WHERE ts = now()",
            "SELECT k, ts = now() FROM sf_read WHERE k = 4",
            "SELECT ts = now(), count(*) FROM sf_read GROUP BY 1",
            "SELECT count(*) FILTER (WHERE ts = current_timestamp) FROM sf_read",
            "COMMIT",
        ],
    )
    .await;
    let msgs = pgs
        .simple_query("SELECT current_user, now() - now() FROM sf_read WHERE k = 1")
        .await
        .unwrap();
    let names: Vec<String> = match &msgs[..] {
        [tokio_postgres::SimpleQueryMessage::RowDescription(d), ..] => {
            d.iter().map(|c| c.name().to_string()).collect()
        }
        other => match other.iter().find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => Some(
                r.columns()
                    .iter()
                    .map(|c| c.name().to_string())
                    .collect::<Vec<_>>(),
            ),
            _ => None,
        }) {
            Some(n) => n,
            None => panic!("no row: {other:?}"),
        },
    };
    assert_eq!(names, ["current_user", "?column?"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volatile_functions_as_citus_treats_them() {
    let pgs = cluster().client().await;
    let plain = plain_postgres().client().await;
    setup(&pgs, &plain, "sf_vol").await;
    let seq = "DROP SEQUENCE IF EXISTS sf_seq; CREATE SEQUENCE sf_seq";
    exec(&pgs, seq).await;
    exec(&plain, seq).await;
    // nextval of the coordinator node's sequence, once per VALUES occurrence.
    same(
        &pgs,
        &plain,
        &[
            "INSERT INTO sf_vol VALUES (nextval('sf_seq') + 500, NULL, 'a'), \
             (nextval('sf_seq') + 500, NULL, 'b'), (nextval('sf_seq') + 500, NULL, 'c')",
            "INSERT INTO sf_vol (k, who) VALUES (1, nextval('sf_seq')::text), (2, nextval('sf_seq')::text)",
            "SELECT k, who FROM sf_vol WHERE k > 500 OR who IS NOT NULL",
            "SELECT currval('sf_seq')",
        ],
    )
    .await;
    // Citus: "functions used in UPDATE queries on distributed tables must not be VOLATILE".
    for sql in [
        "UPDATE sf_vol SET who = random()::text",
        "UPDATE sf_vol SET who = random()::text WHERE k = 1",
        "UPDATE sf_vol SET who = 'x' WHERE random() < 2",
        "DELETE FROM sf_vol WHERE random() > 2",
    ] {
        let e = pgs.simple_query(sql).await.expect_err(sql);
        let db = e.as_db_error().expect("a database error");
        assert_eq!(db.code().code(), "0A000", "{sql}: {db:?}");
        assert!(db.message().contains("VOLATILE"), "{sql}: {db:?}");
    }
    // The session goes on.
    same(&pgs, &plain, &["SELECT count(*) FROM sf_vol"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extended_protocol_evaluates_at_each_execution() {
    let pgs = cluster().client().await;
    let plain = plain_postgres().client().await;
    setup(&pgs, &plain, "sf_ext").await;
    for c in [&pgs, &plain] {
        exec(c, "BEGIN").await;
        c.execute("UPDATE sf_ext SET ts = now() WHERE k > $1", &[&0i32])
            .await
            .unwrap();
        c.execute(
            "UPDATE sf_ext SET who = current_user WHERE k = $1",
            &[&2i32],
        )
        .await
        .unwrap();
        let r = c
            .query_one(
                "SELECT count(DISTINCT ts), bool_and(ts = now()), \
                 bool_or(who = current_user) FROM sf_ext WHERE k > $1",
                &[&0i32],
            )
            .await
            .unwrap();
        assert_eq!(
            (r.get::<_, i64>(0), r.get::<_, bool>(1), r.get::<_, bool>(2)),
            (1, true, true)
        );
        exec(c, "COMMIT").await;
        // A prepared statement gets each execution's own now(), never a frozen one.
        let st = c
            .prepare("INSERT INTO sf_ext VALUES ($1, now())")
            .await
            .unwrap();
        c.execute(&st, &[&300i32]).await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        c.execute(&st, &[&301i32]).await.unwrap();
        let n: i64 = c
            .query_one(
                "SELECT count(DISTINCT ts) FROM sf_ext WHERE k IN (300, 301)",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(n, 2);
    }
}
