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
         COMMIT;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn simple_protocol_reads_get_their_own_rows_and_errors() {
    use tokio_postgres::SimpleQueryMessage;
    setup().await;
    let mut tasks = Vec::new();
    for client_no in 0..16u64 {
        tasks.push(tokio::spawn(async move {
            let c = cluster().client().await;
            for (i, k) in keys(client_no + 200, 200).into_iter().enumerate() {
                let exists = (1..=2000).contains(&k);
                if i % 10 == 5 {
                    let r = c
                        .simple_query(&format!(
                            "SELECT 1000 / (v - {}) FROM pl_kv WHERE k = {k}",
                            k * 7
                        ))
                        .await;
                    match r {
                        Err(e) => {
                            assert!(exists, "client {client_no}: error for absent key {k}");
                            assert_eq!(e.code().map(|c| c.code()), Some("22012"));
                        }
                        Ok(_) => assert!(!exists, "client {client_no}: key {k} should fail"),
                    }
                    continue;
                }
                let msgs = c
                    .simple_query(&format!("SELECT v FROM pl_kv WHERE k = {k}"))
                    .await
                    .unwrap();
                let values: Vec<String> = msgs
                    .iter()
                    .filter_map(|m| match m {
                        SimpleQueryMessage::Row(r) => Some(r.get(0).unwrap().to_string()),
                        _ => None,
                    })
                    .collect();
                let expected: Vec<String> = if exists {
                    vec![(k * 7).to_string()]
                } else {
                    vec![]
                };
                assert_eq!(values, expected, "client {client_no}, key {k}");
            }
        }));
    }
    for t in tasks {
        t.await.expect("client task");
    }
}

/// A routed read on a pipelined connection stops on CancelRequest (prepared and simple
/// protocol), and cancels racing with other clients' reads never reach those clients.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancel_reaches_only_its_own_read() {
    use std::time::{Duration, Instant};
    use tokio_postgres::NoTls;
    setup().await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Bystanders: lookups that must all succeed while cancels fly.
    let mut bystanders = Vec::new();
    for client_no in 0..6u64 {
        let stop = stop.clone();
        bystanders.push(tokio::spawn(async move {
            let c = cluster().client().await;
            let q = c.prepare("SELECT v FROM pl_kv WHERE k = $1").await.unwrap();
            let mut n = 0;
            for k in keys(client_no + 300, 100_000) {
                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
                let k = 1 + k % 2000;
                let rows = c.query(&q, &[&k]).await.expect("bystander read");
                assert_eq!(rows[0].get::<_, i32>(0), k * 7);
                n += 1;
            }
            n
        }));
    }
    // Long reads, cancelled after a second.
    let c = cluster().client().await;
    let sleepy = c
        .prepare("SELECT pg_sleep($2) FROM pl_kv WHERE k = $1")
        .await
        .unwrap();
    // The simple-protocol shape is seen once first, so that the next one takes the
    // shape cache's fast path.
    c.simple_query("SELECT pg_sleep(0) FROM pl_kv WHERE k = 3")
        .await
        .unwrap();
    for protocol in ["prepared", "simple"] {
        let token = c.cancel_token();
        let started = Instant::now();
        let cancel = async {
            tokio::time::sleep(Duration::from_millis(1000)).await;
            token.cancel_query(NoTls).await.expect("send CancelRequest");
        };
        let code = if protocol == "prepared" {
            let (r, ()) = tokio::join!(c.query(&sleepy, &[&3i32, &30f64]), cancel);
            r.err().and_then(|e| e.code().map(|c| c.code().to_string()))
        } else {
            let (r, ()) = tokio::join!(
                c.simple_query("SELECT pg_sleep(30) FROM pl_kv WHERE k = 3"),
                cancel
            );
            r.err().and_then(|e| e.code().map(|c| c.code().to_string()))
        };
        assert_eq!(code.as_deref(), Some("57014"), "{protocol}");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{protocol}: {:?}",
            started.elapsed()
        );
    }
    // Short reads cancelled at random moments: cancels land on bystanders' batches too.
    let short = c
        .prepare("SELECT pg_sleep(0.002) FROM pl_kv WHERE k = $1")
        .await
        .unwrap();
    for i in 0..150 {
        let token = c.cancel_token();
        let cancel = async {
            tokio::time::sleep(Duration::from_micros(500 + (i % 7) * 300)).await;
            let _ = token.cancel_query(NoTls).await;
        };
        let k = 1 + i as i32 % 50;
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&k];
        let (r, ()) = tokio::join!(c.query(&short, &params), cancel);
        if let Err(e) = r {
            assert_eq!(e.code().map(|c| c.code()), Some("57014"), "{e}");
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut reads = 0;
    for b in bystanders {
        reads += b.await.expect("bystander");
    }
    assert!(reads > 100, "bystanders read only {reads} rows");
}

/// On one pipelined connection: a cancel that lands on a batch nobody cancelled (as a
/// cancel meant for the batch before it can, when that one ends first) is not that
/// batch's answer: the batch runs again. A batch its session cancels does get 57014.
#[tokio::test]
async fn a_cancel_landing_on_the_wrong_batch_is_retried() {
    use pgshard::backend::mux::Mux;
    use pgshard::backend::{BackendConn, Credentials, NodeAddr};
    use pgshard::frontend::messages::write_query;
    use std::time::Duration;
    let info = cluster();
    let addr = NodeAddr {
        host: info.node_host.clone(),
        port: info.worker_ports[0],
    };
    let creds = Credentials::with_password(&info.user, &info.password, &info.database);
    let conn = BackendConn::connect(&addr, &creds, "pipelined test")
        .await
        .unwrap();
    let pid = conn.process_id;
    let slot = std::sync::Arc::new(tokio::sync::Semaphore::new(1))
        .acquire_owned()
        .await
        .unwrap();
    let mux = Mux::start(conn, slot, 10);
    let worker = cluster().direct(info.worker_ports[0]).await;
    let tags = |frames: &[pgshard::frontend::messages::Frame]| {
        frames.iter().map(|f| f.tag as char).collect::<String>()
    };

    // Nobody asked to cancel this one: the stray cancel makes it run again.
    let (reply, _) = mux
        .submit(None, |w, _| write_query(w, "SELECT pg_sleep(0.6)"))
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    worker
        .execute("SELECT pg_cancel_backend($1)", &[&pid])
        .await
        .unwrap();
    let frames = reply.await.unwrap().unwrap();
    assert_eq!(tags(&frames), "TDCZ", "answer after a stray cancel");

    // This one its session cancels.
    let (reply, batch) = mux
        .submit(None, |w, _| write_query(w, "SELECT pg_sleep(30)"))
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    mux.cancel(batch);
    let frames = tokio::time::timeout(Duration::from_secs(10), reply)
        .await
        .expect("cancelled in time")
        .unwrap()
        .unwrap();
    assert_eq!(tags(&frames), "TEZ");
    assert!(frames[1].body.windows(6).any(|w| w == b"57014\0"));
}

/// DateStyle as the node holding key `k` of pl_kv sees it for this session.
async fn datestyle_at(c: &tokio_postgres::Client, k: i32) -> String {
    c.query_one(
        "SELECT current_setting('DateStyle') FROM pl_kv WHERE k = $1",
        &[&k],
    )
    .await
    .unwrap()
    .get(0)
}

/// A SET sent over the extended protocol (as drivers send it) is the session's own:
/// its later statements see it on every node, other sessions never do.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn settings_set_over_the_extended_protocol_stay_in_the_session() {
    setup().await;
    let c = cluster().client().await;
    c.execute("SET DateStyle = 'German'", &[]).await.unwrap();
    let local: String = c
        .query_one("SELECT current_setting('DateStyle')", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(local, "German, DMY");
    for k in [1i32, 2, 3, 500, 1000, 1500] {
        assert_eq!(datestyle_at(&c, k).await, "German, DMY", "key {k}");
    }
    // A bad value fails its statement only (simple protocol too).
    let e = c.simple_query("SET DateStyle = 'bogus'").await.unwrap_err();
    assert_eq!(e.code().map(|c| c.code()), Some("22023"), "{e}");
    assert_eq!(datestyle_at(&c, 7).await, "German, DMY");
    drop(c);

    // RESET ALL goes back to the startup packet's settings, on the workers too.
    let c = cluster().client_with_options("-c DateStyle=SQL,DMY").await;
    c.batch_execute("SET DateStyle = 'German'").await.unwrap();
    c.batch_execute("RESET ALL").await.unwrap();
    for k in [7i32, 1200] {
        assert_eq!(
            datestyle_at(&c, k).await,
            "SQL, DMY",
            "key {k} after RESET ALL"
        );
    }
    drop(c);

    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    for _ in 0..8 {
        let other = cluster().client().await;
        for _ in 0..3 {
            let seen: String = other
                .query_one("SELECT current_setting('DateStyle')", &[])
                .await
                .unwrap()
                .get(0);
            assert_eq!(seen, "ISO, MDY", "another session's SET leaked");
        }
    }
}
