//! Automatic failover of a worker primary (issue 21), on real servers: a cluster with
//! one synchronous standby per node and two pgshard processes on one catalog, a TPC-B
//! load through both (clients retrying on 08006 / 40001 / 40P01), and the primary of
//! worker 1 killed with `kill -9` mid-run. Its standby must be promoted once (one
//! `pg_promote`, by one of the two processes), both processes must serve the new
//! primary, the run must finish, the TPC-B invariant must hold exactly (sum of
//! abalance = tbalance = bbalance = history delta), no prepared transaction may be
//! left, and every acknowledged commit must be present. The unavailability window
//! (the longest time without any acknowledged commit around the kill) is printed.

mod common;

use common::serve::Serve;
use common::{alloc_ports, pgshard, run_dir, sqlstate_and_message, teardown_at_exit, Teardown};
use pgshard::cluster::{cluster_info, ClusterInfo};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_postgres::Client;

const BRANCHES: i64 = 4;
const TELLERS: i64 = 20;
const ACCOUNTS: i64 = 2000;
const CLIENTS: usize = 6;
/// The load runs this long; the primary dies at `KILL_AT`.
const RUN: Duration = Duration::from_secs(18);
const KILL_AT: Duration = Duration::from_secs(4);
/// A transaction taking longer than this is a hang (a failure of the test).
const HUNG: Duration = Duration::from_secs(20);
/// SQLSTATEs a client retries the transaction on.
const RETRY: &[&str] = &[
    "08006",
    "08000",
    "08003",
    "40001",
    "40P01",
    "57P01",
    "connection",
];

async fn connect(info: &ClusterInfo, port: u16) -> Option<Client> {
    let mut cfg = tokio_postgres::Config::new();
    cfg.host(&info.host)
        .port(port)
        .user(&info.user)
        .password(&info.password)
        .dbname(&info.database)
        .connect_timeout(Duration::from_secs(5));
    let (client, conn) = cfg.connect(tokio_postgres::NoTls).await.ok()?;
    tokio::spawn(conn);
    Some(client)
}

/// What the clients saw.
#[derive(Default)]
struct Outcome {
    /// History ids of acknowledged commits.
    acknowledged: HashSet<i64>,
    /// When each acknowledged commit returned.
    commits: Vec<Instant>,
    /// Errors retried, by SQLSTATE and message (first few).
    retried: Vec<(String, String)>,
    /// Errors no client should see.
    unexpected: Vec<(String, String)>,
}

/// One TPC-B transaction with history id `hid`; the error's SQLSTATE and message.
async fn tpcb(c: &Client, hid: i64) -> Result<(), (String, String)> {
    let aid = hid.rem_euclid(ACCOUNTS) + 1;
    let tid = (hid / 7).rem_euclid(TELLERS) + 1;
    let bid = (hid / 13).rem_euclid(BRANCHES) + 1;
    let delta = (hid % 10_000) - 5_000;
    let sql = format!(
        "BEGIN; \
         UPDATE accounts SET abalance = abalance + {delta} WHERE aid = {aid}; \
         UPDATE tellers SET tbalance = tbalance + {delta} WHERE tid = {tid}; \
         UPDATE branches SET bbalance = bbalance + {delta} WHERE bid = {bid}; \
         INSERT INTO history (hid, tid, bid, aid, delta) VALUES ({hid}, {tid}, {bid}, {aid}, {delta}); \
         COMMIT"
    );
    match c.batch_execute(&sql).await {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = c.batch_execute("ROLLBACK").await;
            Err(sqlstate_and_message(&e))
        }
    }
}

async fn client_loop(
    info: Arc<ClusterInfo>,
    port: u16,
    id: i64,
    until: Instant,
    out: Arc<Mutex<Outcome>>,
) {
    let mut seq = 0i64;
    let mut client: Option<Client> = None;
    while Instant::now() < until {
        if client.as_ref().map_or(true, |c| c.is_closed()) {
            client = connect(&info, port).await;
            if client.is_none() {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        }
        seq += 1;
        let hid = id * 1_000_000 + seq;
        let result = match tokio::time::timeout(HUNG, tpcb(client.as_ref().unwrap(), hid)).await {
            Ok(r) => r,
            Err(_) => Err((
                "hung".to_string(),
                format!("transaction {hid} hung for {HUNG:?}"),
            )),
        };
        if matches!(&result, Err((code, _)) if code == "hung") {
            client = None;
        }
        let mut o = out.lock().unwrap();
        match result {
            Ok(()) => {
                o.acknowledged.insert(hid);
                o.commits.push(Instant::now());
            }
            Err((code, msg)) if RETRY.contains(&code.as_str()) => {
                if o.retried.len() < 20 {
                    o.retried.push((code, msg));
                }
            }
            Err(e) => o.unexpected.push(e),
        }
    }
}

/// The data directory's postmaster pid.
fn postmaster_pid(data_dir: &std::path::Path) -> i32 {
    let text = std::fs::read_to_string(data_dir.join("postmaster.pid")).expect("postmaster.pid");
    text.lines().next().unwrap().trim().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_worker_primary_fails_over_under_tpcb() {
    let dir = run_dir().join("cluster");
    teardown_at_exit(Teardown::Cluster(dir.clone()));
    // pgshard, the coordinator node, 2 workers and a standby each.
    let base = alloc_ports(4 + 3);
    let (d, port) = (dir.to_str().unwrap(), base.to_string());
    pgshard(&[
        "cluster",
        "up",
        "--dir",
        d,
        "--workers",
        "2",
        "--port",
        &port,
        "--fast",
        "--standbys",
        "1",
    ]);
    let info = Arc::new(cluster_info(&dir).expect("cluster info"));
    // A second pgshard process on the same catalog.
    let second = Serve::start_for(&dir, "second", |_| {}, "").expect("second pgshard");

    let c = connect(&info, info.port).await.expect("pgshard");
    c.batch_execute(
        "SET citus.shard_count = 4;
         CREATE TABLE branches (bid int PRIMARY KEY, bbalance bigint NOT NULL);
         CREATE TABLE tellers (tid int PRIMARY KEY, bid int, tbalance bigint NOT NULL);
         CREATE TABLE accounts (aid int PRIMARY KEY, bid int, abalance bigint NOT NULL);
         CREATE TABLE history (hid bigint, tid int, bid int, aid int, delta bigint);",
    )
    .await
    .unwrap();
    for (t, col) in [
        ("branches", "bid"),
        ("tellers", "tid"),
        ("accounts", "aid"),
        ("history", "aid"),
    ] {
        c.batch_execute(&format!("SELECT create_distributed_table('{t}', '{col}')"))
            .await
            .unwrap();
    }
    c.batch_execute(&format!(
        "INSERT INTO branches SELECT g, 0 FROM generate_series(1, {BRANCHES}) g;
         INSERT INTO tellers SELECT g, (g - 1) % {BRANCHES} + 1, 0 FROM generate_series(1, {TELLERS}) g;
         INSERT INTO accounts SELECT g, (g - 1) % {BRANCHES} + 1, 0 FROM generate_series(1, {ACCOUNTS}) g;"
    ))
    .await
    .unwrap();

    let worker1 = dir.join("worker1");
    let old_port = info.worker_ports[0];
    let standby_port = info.standby_ports[1][0];
    let pid = postmaster_pid(&worker1);

    let out = Arc::new(Mutex::new(Outcome::default()));
    let start = Instant::now();
    let until = start + RUN;
    let mut tasks = Vec::new();
    for id in 0..CLIENTS {
        // Half of the clients through each pgshard process.
        let port = if id % 2 == 0 { info.port } else { second.port };
        tasks.push(tokio::spawn(client_loop(
            info.clone(),
            port,
            id as i64 + 1,
            until,
            out.clone(),
        )));
    }
    tokio::time::sleep(KILL_AT).await;
    let killed_at = Instant::now();
    assert_eq!(
        unsafe { libc::kill(pid, libc::SIGKILL) },
        0,
        "kill -9 {pid}"
    );
    eprintln!("killed the primary of worker 1 (pid {pid}, port {old_port})");
    for t in tasks {
        t.await.unwrap();
    }
    let out = std::mem::take(&mut *out.lock().unwrap());
    assert!(
        out.unexpected.is_empty(),
        "unexpected errors: {:?}",
        out.unexpected
    );
    let after_kill = out.commits.iter().filter(|t| **t > killed_at).count();
    assert!(
        after_kill > 0,
        "no commit after the kill; retried errors: {:?}",
        out.retried
    );
    // The unavailability window: the longest gap between acknowledged commits that
    // spans the kill (from the last commit before it to the first after it, at least).
    let mut times = out.commits.clone();
    times.sort();
    let window = times
        .windows(2)
        .filter(|w| w[1] > killed_at)
        .map(|w| w[1] - w[0].max(killed_at))
        .max()
        .unwrap_or_default();
    let first_after = times.iter().find(|t| **t > killed_at).unwrap();
    eprintln!(
        "failover: {} commits ({} after the kill), first commit {} ms after the kill, \
         longest gap without a commit {} ms; retried errors (first ones): {:?}",
        times.len(),
        after_kill,
        (*first_after - killed_at).as_millis(),
        window.as_millis(),
        out.retried
    );
    assert!(
        window < Duration::from_secs(15),
        "unavailable for {window:?}"
    );

    // The standby is the group's primary; the old one retired and fenced.
    let nodes = common::scalar(
        &c,
        "SELECT string_agg(format('%s:%s:%s', nodeport, noderole, isactive), ' ' ORDER BY nodeport) \
         FROM pg_dist_node",
    )
    .await;
    assert!(
        nodes.contains(&format!("{old_port}:secondary:f")),
        "{nodes}"
    );
    assert!(
        nodes.contains(&format!("{standby_port}:primary:t")),
        "{nodes}"
    );
    assert!(
        worker1.join("pgshard.fenced").exists(),
        "old primary not marked as fenced"
    );
    assert!(
        worker1.join("standby.signal").exists(),
        "old primary may start as a primary"
    );

    // One promotion, by one of the two processes.
    let logs = [dir.join("logs").join("pgshard.log"), second.log.clone()];
    let promotions: usize = logs
        .iter()
        .map(|l| {
            std::fs::read_to_string(l)
                .unwrap_or_default()
                .matches("(pg_promote)")
                .count()
        })
        .sum();
    assert_eq!(promotions, 1, "pg_promote calls in {logs:?}");

    // Prepared transactions left by the failed primary are resolved on the new one.
    let primaries = [info.coordinator_port, standby_port, info.worker_ports[1]];
    let deadline = Instant::now() + Duration::from_secs(30);
    for p in primaries {
        let direct = connect_direct(&info, p).await;
        loop {
            let n = common::scalar(&direct, "SELECT count(*) FROM pg_prepared_xacts").await;
            if n == "0" {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{n} prepared transactions left on port {p}"
            );
            let _ = c
                .simple_query("SELECT recover_prepared_transactions()")
                .await;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    // Both processes serve the new primary; the TPC-B invariant holds exactly, and
    // every acknowledged commit is there.
    let via_second = connect(&info, second.port).await.expect("second pgshard");
    let sums = "SELECT (SELECT sum(abalance) FROM accounts)::text || ' ' || \
                (SELECT sum(tbalance) FROM tellers)::text || ' ' || \
                (SELECT sum(bbalance) FROM branches)::text || ' ' || \
                (SELECT coalesce(sum(delta), 0) FROM history)::text";
    let mut seen = Vec::new();
    for client in [&c, &via_second] {
        let line = common::scalar(client, sums).await;
        let parts: Vec<&str> = line.split(' ').collect();
        assert_eq!(parts.len(), 4, "{line}");
        assert!(
            parts.iter().all(|p| *p == parts[0]),
            "TPC-B invariant broken: {line}"
        );
        seen.push(line);
    }
    assert_eq!(seen[0], seen[1], "the two pgshard processes disagree");
    let present: HashSet<i64> = c
        .simple_query("SELECT hid FROM history")
        .await
        .unwrap()
        .iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(|v| v.parse().unwrap()),
            _ => None,
        })
        .collect();
    let missing: Vec<&i64> = out.acknowledged.difference(&present).collect();
    assert!(
        missing.is_empty(),
        "acknowledged commits missing: {missing:?}"
    );
    // Writes through either process reach the new primary.
    for client in [&c, &via_second] {
        client
            .batch_execute("UPDATE accounts SET abalance = abalance WHERE aid <= 20")
            .await
            .unwrap();
    }
    let counted = common::scalar(
        &connect_direct(&info, standby_port).await,
        "SELECT pg_is_in_recovery()::text",
    )
    .await;
    assert_eq!(counted, "false", "the standby was not promoted");
    drop(second);
}

/// A connection to a node itself, as pgshard's role (a superuser there).
async fn connect_direct(info: &ClusterInfo, port: u16) -> Client {
    let mut cfg = tokio_postgres::Config::new();
    cfg.host(&info.host)
        .port(port)
        .user(&info.user)
        .password(&info.password)
        .dbname(&info.database);
    let (client, conn) = cfg.connect(tokio_postgres::NoTls).await.expect("node");
    tokio::spawn(conn);
    client
}
