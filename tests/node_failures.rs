//! Node connections that die or freeze, end to end on the real cluster with real
//! clients:
//! - every pgshard backend on a worker ended with `pg_terminate_backend`: reads over
//!   the simple and the extended protocol (a raw pipeline of several batches) are
//!   answered in full, a write inside a block fails (08006 / 57P01) and leaves the
//!   block aborted until ROLLBACK, nothing committed is lost;
//! - a worker restarted (`pg_ctl stop` + `start`) under light load: the clients go on
//!   without a pgshard restart;
//! - a worker frozen with SIGSTOP: clients of the other worker's shards are served,
//!   a client of the frozen worker gets an error naming it within the configured
//!   `node_timeout_ms` (a `pgshard serve` of the test's own with a low timeout).
//!
//! The tests stop and freeze workers of the binary's shared cluster, so they run one
//! at a time (`SERIAL`).

mod common;

use bytes::BytesMut;
use common::raw::{write_unnamed_statement, Msg, Raw};
use common::serve::Serve;
use common::{cluster, simple_rows, sqlstate_and_message};
use pgshard::cluster::node::Node;
use postgres_protocol::message::frontend;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_postgres::Client;

static SERIAL: Mutex<()> = Mutex::new(());

const ROWS: i32 = 40;

/// Runs `test` alone (the others stop or freeze nodes too) on a runtime of its own.
fn serial<F: std::future::Future<Output = ()>>(test: F) {
    let _alone = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap()
        .block_on(test);
}

/// Creates `table` (id, v = id) with 8 shards over both workers; returns each id's
/// worker port.
async fn create_table(table: &str) -> HashMap<i32, u16> {
    let cl = cluster();
    let c = cl.client().await;
    for sql in [
        format!("DROP TABLE IF EXISTS {table}"),
        format!("CREATE TABLE {table} (id int PRIMARY KEY, v int NOT NULL)"),
        "SET citus.shard_count = 8".into(),
        format!("SELECT create_distributed_table('{table}', 'id')"),
        format!("INSERT INTO {table} SELECT g, g FROM generate_series(1, {ROWS}) g"),
    ] {
        c.batch_execute(&sql).await.unwrap();
    }
    let coordinator = cl.direct(cl.coordinator_port).await;
    let mut at = HashMap::new();
    for id in 1..=ROWS {
        let sql = format!("SELECT get_shard_id_for_distribution_column('{table}', {id})");
        let shard: i64 = simple_rows(&c, &sql).await.unwrap()[0][0]
            .as_ref()
            .unwrap()
            .parse()
            .unwrap();
        let port: i32 = coordinator
            .query_one(
                "SELECT n.nodeport FROM pg_dist_placement p \
                 JOIN pg_dist_node n ON n.groupid = p.groupid WHERE p.shardid = $1",
                &[&shard],
            )
            .await
            .unwrap()
            .get(0);
        at.insert(id, port as u16);
    }
    let ports: std::collections::HashSet<_> = at.values().collect();
    assert_eq!(ports.len(), 2, "rows on both workers: {at:?}");
    at
}

fn ids_on(at: &HashMap<i32, u16>, port: u16) -> Vec<i32> {
    let mut ids: Vec<i32> = at
        .iter()
        .filter(|(_, p)| **p == port)
        .map(|(i, _)| *i)
        .collect();
    ids.sort();
    ids
}

/// Ends every client backend (all pgshard's) on the worker at `port` but its own (run
/// there as superuser).
async fn terminate_pgshard_backends(port: u16) -> i64 {
    let c = cluster().direct(port).await;
    let n: i64 = c
        .query_one(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    // The FATAL and the close reach pgshard's sockets.
    tokio::time::sleep(Duration::from_millis(300)).await;
    n
}

async fn value(c: &Client, table: &str, id: i32) -> Result<i32, tokio_postgres::Error> {
    let rows = simple_rows(c, &format!("SELECT v FROM {table} WHERE id = {id}")).await?;
    Ok(rows[0][0].as_ref().unwrap().parse().unwrap())
}

/// Parse / Bind / Describe / Execute / Sync of `sql` (unnamed, no parameters).
fn write_batch(out: &mut BytesMut, sql: &str) {
    write_unnamed_statement(out, sql);
    frontend::sync(out);
}

fn tags(msgs: &[Msg]) -> String {
    msgs.iter()
        .filter(|(t, _)| !matches!(t, b'N' | b'S'))
        .map(|(t, _)| *t as char)
        .collect()
}

async fn raw_client() -> Raw {
    let cl = cluster();
    Raw::login(&cl.host, cl.port, &cl.user, &cl.password, &cl.database).await
}

/// A pipeline of several extended-protocol batches sent in one write: each is
/// answered in full, with its row; then Parse / Describe / Sync gets its four answers
/// (once only ReadyForQuery came back: pgx's "unexpected ReadyForQuery").
async fn pipeline_is_answered_in_full(raw: &mut Raw, table: &str, ids: &[i32]) {
    send_pipeline(raw, table, ids, false).await;
    pipeline_answers(raw, table, ids).await;
}

/// The batches of `pipeline_is_answered_in_full`; with `slow`, the first one runs for
/// a second.
async fn send_pipeline(raw: &mut Raw, table: &str, ids: &[i32], slow: bool) {
    let mut out = BytesMut::new();
    for (i, id) in ids.iter().enumerate() {
        let sleep = if slow && i == 0 {
            " AND pg_sleep(1) IS NOT NULL"
        } else {
            ""
        };
        write_batch(
            &mut out,
            &format!("SELECT id FROM {table} WHERE id = {id}{sleep}"),
        );
    }
    write_batch(&mut out, &format!("SELECT count(*) FROM {table}"));
    raw.send(&out).await;
}

async fn pipeline_answers(raw: &mut Raw, table: &str, ids: &[i32]) {
    let mut out = BytesMut::new();
    for id in ids {
        let msgs = raw.until_ready().await;
        assert_eq!(tags(&msgs), "12TDCZ", "batch of id {id}: {msgs:?}");
        let row = &msgs.iter().find(|m| m.0 == b'D').unwrap().1;
        assert!(row.ends_with(id.to_string().as_bytes()), "{row:?}");
    }
    let msgs = raw.until_ready().await;
    assert_eq!(tags(&msgs), "12TDCZ", "count(*): {msgs:?}");
    out.clear();
    frontend::parse(
        "",
        &format!("SELECT v FROM {table} WHERE id = $1"),
        [23u32],
        &mut out,
    )
    .unwrap();
    frontend::describe(b'S', "", &mut out).unwrap();
    frontend::sync(&mut out);
    raw.send(&out).await;
    let msgs = raw.until_ready().await;
    assert_eq!(tags(&msgs), "1tTZ", "Parse/Describe/Sync: {msgs:?}");
}

/// The whole table's sum, read on the workers themselves.
async fn sum_on_workers(table: &str) -> i64 {
    let c = cluster().client().await;
    let rows = simple_rows(&c, &format!("SELECT sum(v) FROM {table}"))
        .await
        .unwrap();
    rows[0][0].as_ref().unwrap().parse().unwrap()
}

#[test]
fn terminated_node_backends_fail_no_read_and_leave_no_reply_out() {
    serial(async {
        let table = "nf_term";
        let at = create_table(table).await;
        let cl = cluster();
        let w1 = cl.worker_ports[0];
        let on_w1 = ids_on(&at, w1);
        let c = cl.client().await;
        let blocked = cl.client().await;
        let mut raw = raw_client().await;
        let lookup = c
            .prepare(&format!("SELECT v FROM {table} WHERE id = $1"))
            .await
            .unwrap();
        // Warm up: pooled and pipelined connections to both workers.
        for id in 1..=ROWS {
            assert_eq!(value(&c, table, id).await.unwrap(), id);
            let v: i32 = c.query_one(&lookup, &[&id]).await.unwrap().get(0);
            assert_eq!(v, id);
        }
        pipeline_is_answered_in_full(&mut raw, table, &on_w1[..3]).await;
        let k = on_w1[0];
        blocked
            .batch_execute(&format!(
                "BEGIN; UPDATE {table} SET v = v + 1000 WHERE id = {k}"
            ))
            .await
            .unwrap();

        assert!(terminate_pgshard_backends(w1).await > 0);
        // Reads in autocommit are answered: simple protocol, prepared, multi-shard.
        for id in 1..=ROWS {
            let v = value(&c, table, id).await;
            assert_eq!(v.map_err(|e| sqlstate_and_message(&e)), Ok(id), "id {id}");
            let v = c.query_one(&lookup, &[&id]).await;
            let v: Result<i32, _> = v.map(|r| r.get(0)).map_err(|e| sqlstate_and_message(&e));
            assert_eq!(v, Ok(id), "prepared, id {id}");
        }
        let count = simple_rows(&c, &format!("SELECT count(*) FROM {table}")).await;
        assert_eq!(
            count.map_err(|e| sqlstate_and_message(&e)),
            Ok(vec![vec![Some(ROWS.to_string())]])
        );

        // Again, then a raw pipeline on a session that ran before.
        terminate_pgshard_backends(w1).await;
        pipeline_is_answered_in_full(&mut raw, table, &on_w1[..4]).await;

        // Reads running when their connection is ended are run again: a prepared
        // one, and the first batch of a raw pipeline.
        let slow = c
            .prepare(&format!(
                "SELECT v FROM {table} WHERE id = $1 AND pg_sleep(1) IS NOT NULL"
            ))
            .await
            .unwrap();
        let (c, running) = {
            let c = Arc::new(c);
            let c2 = c.clone();
            let running = tokio::spawn(async move {
                let r = c2.query_one(&slow, &[&k]).await;
                r.map(|r| r.get::<_, i32>(0))
                    .map_err(|e| sqlstate_and_message(&e))
            });
            (c, running)
        };
        send_pipeline(&mut raw, table, &on_w1[..3], true).await;
        tokio::time::sleep(Duration::from_millis(400)).await;
        terminate_pgshard_backends(w1).await;
        assert_eq!(running.await.unwrap(), Ok(k), "the running prepared read");
        pipeline_answers(&mut raw, table, &on_w1[..3]).await;

        // A write in a block whose node connection died fails, and the block stays
        // aborted until ROLLBACK.
        let e = blocked
            .simple_query(&format!("UPDATE {table} SET v = v + 1000 WHERE id = {k}"))
            .await
            .expect_err("the block's connection is gone");
        let (code, message) = sqlstate_and_message(&e);
        assert!(code == "08006" || code == "57P01", "{code} {message}");
        assert!(
            message.contains(&w1.to_string()),
            "names the node: {message}"
        );
        let e = blocked.simple_query("SELECT 1").await.unwrap_err();
        assert_eq!(sqlstate_and_message(&e).0, "25P02");
        // Parse / Describe / Sync gets its error, not a lone ReadyForQuery.
        let e = blocked
            .prepare(&format!("SELECT v FROM {table} WHERE id = $1"))
            .await;
        assert_eq!(
            e.map(|_| ()).map_err(|e| sqlstate_and_message(&e).0),
            Err("25P02".into())
        );
        blocked.batch_execute("ROLLBACK").await.unwrap();
        let again = blocked
            .prepare(&format!("SELECT v FROM {table} WHERE id = $1"))
            .await
            .unwrap();
        let v: i32 = blocked.query_one(&again, &[&k]).await.unwrap().get(0);
        assert_eq!(v, k);
        assert_eq!(value(&blocked, table, k).await.unwrap(), k);

        // Autocommit writes after the connections died: nothing of them was sent.
        terminate_pgshard_backends(w1).await;
        for id in &on_w1 {
            let r = c
                .simple_query(&format!("UPDATE {table} SET v = v + 1 WHERE id = {id}"))
                .await;
            assert!(
                r.is_ok(),
                "id {id}: {:?}",
                r.map_err(|e| sqlstate_and_message(&e))
            );
        }
        let want: i64 = (1..=ROWS as i64).sum::<i64>() + on_w1.len() as i64;
        assert_eq!(sum_on_workers(table).await, want, "nothing committed lost");
        common::assert_no_prepared_xacts().await;
    });
}

/// The worker at `index` of the shared cluster as a `Node`, to stop and start it.
fn worker_node(index: usize) -> Node {
    let cl = cluster();
    let subdir = format!("worker{}", index + 1);
    Node {
        name: format!("worker {}", index + 1),
        data_dir: cl.dir.join(&subdir),
        listen_host: "127.0.0.1".into(),
        port: cl.worker_ports[index],
        socket_dir: cl.socket_dir.clone(),
        log_file: cl.dir.join("logs").join(format!("{subdir}.log")),
    }
}

#[test]
fn clients_go_on_after_a_worker_restart() {
    serial(async {
        let table = "nf_restart";
        let at = create_table(table).await;
        let cl = cluster();
        let w2 = cl.worker_ports[1];
        let on_w2 = ids_on(&at, w2);
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(AtomicU64::new(0));
        let unknown = Arc::new(AtomicU64::new(0));
        let mut load = Vec::new();
        for n in 0..3i32 {
            let (stop, acked, unknown) = (stop.clone(), acked.clone(), unknown.clone());
            let c = cl.client().await;
            load.push(tokio::spawn(async move {
                let mut i = n;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    let id = i % ROWS + 1;
                    let _ = value(&c, table, id).await;
                    let update = format!("UPDATE {table} SET v = v + 1 WHERE id = {id}");
                    match c.simple_query(&update).await {
                        Ok(_) => acked.fetch_add(1, Ordering::Relaxed),
                        Err(_) => unknown.fetch_add(1, Ordering::Relaxed),
                    };
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                c
            }));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let node = worker_node(1);
        assert!(node.stop().unwrap(), "worker 2 was running");
        node.start().unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
        stop.store(true, Ordering::Relaxed);
        let mut clients = Vec::new();
        for l in load {
            clients.push(l.await.unwrap());
        }
        // Every client is served again at once, pgshard untouched.
        for c in &clients {
            for id in 1..=ROWS {
                let v = value(c, table, id)
                    .await
                    .map_err(|e| sqlstate_and_message(&e));
                assert!(v.is_ok(), "id {id}: {v:?}");
            }
            let update = format!("UPDATE {table} SET v = v + 1 WHERE id = {}", on_w2[0]);
            c.simple_query(&update).await.unwrap();
            acked.fetch_add(1, Ordering::Relaxed);
            let lookup = c
                .prepare(&format!("SELECT v FROM {table} WHERE id = $1"))
                .await
                .unwrap();
            for id in &on_w2 {
                c.query_one(&lookup, &[id]).await.unwrap();
            }
        }
        let mut raw = raw_client().await;
        pipeline_is_answered_in_full(&mut raw, table, &on_w2[..3]).await;
        // Every acknowledged write is there; one that failed may or may not be.
        let base: i64 = (1..=ROWS as i64).sum();
        let (acked, unknown) = (
            acked.load(Ordering::Relaxed),
            unknown.load(Ordering::Relaxed),
        );
        let sum = sum_on_workers(table).await - base;
        assert!(
            sum >= acked as i64 && sum <= (acked + unknown) as i64,
            "{sum} increments, {acked} acknowledged, {unknown} failed"
        );
        common::assert_no_prepared_xacts().await;
    });
}

/// Stops (SIGSTOP) a worker's postmaster and every process of it; they go on
/// (SIGCONT) when this is dropped, test failure included.
struct Frozen(Vec<i32>);

impl Frozen {
    fn freeze(node: &Node) -> Frozen {
        let postmaster = node.running_pid().expect("worker runs") as i32;
        let out = std::process::Command::new("pgrep")
            .args(["-P", &postmaster.to_string()])
            .output()
            .unwrap();
        let mut pids = vec![postmaster];
        pids.extend(
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter_map(|l| l.trim().parse::<i32>().ok()),
        );
        for &pid in &pids {
            unsafe { libc::kill(pid, libc::SIGSTOP) };
        }
        Frozen(pids)
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        for &pid in &self.0 {
            unsafe { libc::kill(pid, libc::SIGCONT) };
        }
    }
}

#[test]
fn a_frozen_worker_fails_its_own_statements_only() {
    serial(async {
        let table = "nf_freeze";
        let at = create_table(table).await;
        let cl = cluster();
        let (w1, w2) = (cl.worker_ports[0], cl.worker_ports[1]);
        let (on_w1, on_w2) = (ids_on(&at, w1), ids_on(&at, w2));
        let timeout = Duration::from_millis(2000);
        let serve = Serve::start_with_toml(
            "freeze",
            |_| {},
            &format!(
                "node_timeout_ms = {}\nnode_connect_timeout_ms = {}",
                timeout.as_millis(),
                timeout.as_millis()
            ),
        )
        .unwrap();
        let connect =
            || common::connect(&cl.host, serve.port, &cl.user, &cl.password, &cl.database);
        let (a, b) = (connect().await, connect().await);
        for id in 1..=ROWS {
            assert_eq!(value(&a, table, id).await.unwrap(), id);
            assert_eq!(value(&b, table, id).await.unwrap(), id);
        }
        let lookup = a
            .prepare(&format!("SELECT v FROM {table} WHERE id = $1"))
            .await
            .unwrap();

        let frozen = Frozen::freeze(&worker_node(0));
        let started = Instant::now();
        let k = on_w1[0];
        let stuck = tokio::spawn(async move {
            let r = value(&b, table, k)
                .await
                .map_err(|e| sqlstate_and_message(&e));
            (r, started.elapsed(), b)
        });
        // Clients of the other worker are served meanwhile, new ones too.
        let fresh = connect().await;
        while started.elapsed() < timeout + Duration::from_secs(1) {
            for id in &on_w2 {
                let t = Instant::now();
                assert_eq!(value(&a, table, *id).await.unwrap(), *id);
                let v: i32 = a.query_one(&lookup, &[id]).await.unwrap().get(0);
                assert_eq!(v, *id);
                assert_eq!(value(&fresh, table, *id).await.unwrap(), *id);
                assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
            }
        }
        let (r, took, b) = tokio::time::timeout(Duration::from_secs(20), stuck)
            .await
            .expect("the frozen worker's client gets an answer")
            .unwrap();
        let (code, message) = r.expect_err("the frozen worker answers nothing");
        assert_eq!(code, "08006", "{message}");
        assert!(
            message.contains(&w1.to_string()),
            "names the node: {message}"
        );
        assert!(took >= timeout && took < timeout * 3, "{took:?}");
        // A statement of another session meanwhile fails within the timeout too.
        let t = Instant::now();
        let e = value(&a, table, on_w1[1]).await.unwrap_err();
        assert_eq!(sqlstate_and_message(&e).0, "08006");
        assert!(t.elapsed() < timeout * 3, "{:?}", t.elapsed());

        drop(frozen);
        // Back: the frozen worker's rows are served again.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match value(&b, table, k).await {
                Ok(v) => {
                    assert_eq!(v, k);
                    break;
                }
                Err(e) => assert!(Instant::now() < deadline, "{:?}", sqlstate_and_message(&e)),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        for id in 1..=ROWS {
            assert_eq!(value(&a, table, id).await.unwrap(), id);
        }
    });
}
