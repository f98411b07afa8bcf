//! Routed prepared reads of many clients share a pipelined connection per node and
//! serving thread (`backend::mux`): every client must still get exactly its own
//! answers, its own errors, and the results of its own settings.
//!
//! Many tokio-postgres clients (Bind, Execute, Sync per query) run prepared lookups at
//! once with keys of their own and check every value; some queries fail on purpose
//! (division by zero) and must fail for their client only; clients with different
//! session settings read them back through the same statement at the same time.

mod common;

use common::cluster;
use tokio_postgres::Client;

/// The table, created once for both tests.
async fn setup() {
    static DONE: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    DONE.get_or_init(create_table).await;
}

async fn create_table() {
    let c: Client = cluster().client().await;
    c.batch_execute(
        "DROP TABLE IF EXISTS pl_kv;
         CREATE TABLE pl_kv (k int PRIMARY KEY, v int NOT NULL);
         SET citus.shard_count = 8;
         SELECT create_distributed_table('pl_kv', 'k');",
    )
    .await
    .expect("setup");
    let values: Vec<String> = (1..=2000).map(|k| format!("({k}, {})", k * 7)).collect();
    c.batch_execute(&format!("INSERT INTO pl_kv VALUES {}", values.join(", ")))
        .await
        .expect("rows");
    let n: i64 = c
        .query_one("SELECT count(*) FROM pl_kv", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 2000);
}

/// A deterministic key sequence per client (no rand crate needed).
fn keys(client: u64, n: usize) -> Vec<i32> {
    let mut x = client.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % 2100) as i32 // some keys (> 2000) have no row
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_clients_get_their_own_rows_and_errors() {
    setup().await;
    let mut tasks = Vec::new();
    for client_no in 0..24u64 {
        tasks.push(tokio::spawn(async move {
            let c = cluster().client().await;
            let lookup = c.prepare("SELECT v FROM pl_kv WHERE k = $1").await.unwrap();
            let divide = c
                .prepare("SELECT 1000 / (v - $2) FROM pl_kv WHERE k = $1")
                .await
                .unwrap();
            let (mut rows_seen, mut errors_seen) = (0, 0);
            for (i, k) in keys(client_no, 300).into_iter().enumerate() {
                if i % 10 == 3 {
                    // Fails exactly when the key exists (v - 7k = 0).
                    let r = c.query(&divide, &[&k, &(k * 7)]).await;
                    match r {
                        Err(e) => {
                            assert!(
                                (1..=2000).contains(&k),
                                "client {client_no}: error for absent key {k}: {e}"
                            );
                            assert_eq!(e.code().map(|c| c.code()), Some("22012"));
                            errors_seen += 1;
                        }
                        Ok(rows) => assert!(
                            rows.is_empty() && !(1..=2000).contains(&k),
                            "client {client_no}: key {k} should fail, got {} rows",
                            rows.len()
                        ),
                    }
                    continue;
                }
                let rows = c.query(&lookup, &[&k]).await.unwrap();
                if (1..=2000).contains(&k) {
                    assert_eq!(rows.len(), 1, "client {client_no}, key {k}");
                    let v: i32 = rows[0].get(0);
                    assert_eq!(v, k * 7, "client {client_no} got another key's row for {k}");
                    rows_seen += 1;
                } else {
                    assert!(
                        rows.is_empty(),
                        "client {client_no}: rows for absent key {k}"
                    );
                }
            }
            // The session is still fine for other statements afterwards.
            let n: i64 = c
                .query_one("SELECT count(*) FROM pl_kv WHERE k = $1", &[&5i32])
                .await
                .unwrap()
                .get(0);
            assert_eq!(n, 1);
            (rows_seen, errors_seen)
        }));
    }
    let (mut rows, mut errors) = (0, 0);
    for t in tasks {
        let (r, e) = t.await.expect("client task");
        rows += r;
        errors += e;
    }
    assert!(rows > 5000 && errors > 500, "rows {rows}, errors {errors}");
    // The reads did go through pipelined connections.
    let log = std::fs::read_to_string(cluster().dir.join("logs/pgshard.log")).unwrap();
    assert!(
        log.contains("pipelined connection to node"),
        "no pipelined connection was opened"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_client_reads_with_its_own_settings() {
    setup().await;
    let mut tasks = Vec::new();
    for client_no in 0..12u64 {
        tasks.push(tokio::spawn(async move {
            let c = cluster().client().await;
            let style = if client_no % 3 == 0 {
                c.batch_execute("SET DateStyle = 'SQL, DMY'").await.unwrap();
                "SQL, DMY"
            } else if client_no % 3 == 1 {
                c.batch_execute("SET DateStyle = 'German'").await.unwrap();
                "German, DMY"
            } else {
                "ISO, MDY"
            };
            let q = c
                .prepare("SELECT current_setting('DateStyle') FROM pl_kv WHERE k = $1")
                .await
                .unwrap();
            for k in keys(client_no + 100, 200) {
                let rows = c.query(&q, &[&k]).await.unwrap();
                for r in rows {
                    let seen: String = r.get(0);
                    assert_eq!(
                        seen, style,
                        "client {client_no} read another session's setting"
                    );
                }
            }
            // Back to the default: the answers follow.
            c.batch_execute("RESET DateStyle").await.unwrap();
            let r = c.query_one(&q, &[&7i32]).await.unwrap();
            assert_eq!(r.get::<_, String>(0), "ISO, MDY");
        }));
    }
    for t in tasks {
        t.await.expect("client task");
    }
}
