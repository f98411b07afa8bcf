//! Automatic failover (issue 21), on real servers: a cluster with one synchronous
//! standby per node and two pgshard processes on one catalog, a TPC-B load through
//! both (clients retrying on 08006 / 40001 / 40P01 / 57P01 and reconnecting), and a
//! primary killed with `kill -9` mid-run: the primary of worker 1, then (second test)
//! that of the coordinator node too. Each time its standby must be promoted once (one
//! `pg_promote`, by one of the two processes), both processes must serve the new
//! primary, the run must finish, the TPC-B invariant must hold exactly (sum of
//! abalance = tbalance = bbalance = history delta), no prepared transaction may be
//! left, and every acknowledged commit must be present. The unavailability window
//! (the longest time without any acknowledged commit around the kill) is printed, on a
//! `BENCHMARKS:` line for docs/BENCHMARKS.md.

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
const RUN: Duration = Duration::from_secs(16);
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

/// A cluster with one standby per node, a second pgshard process, the TPC-B tables.
struct Rig {
    dir: std::path::PathBuf,
    info: Arc<ClusterInfo>,
    second: Serve,
}

async fn rig(name: &str) -> Rig {
    let dir = run_dir().join(name);
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
    let second =
        Serve::start_for(&dir, &format!("{name}-second"), |_| {}, "").expect("second pgshard");

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
    Rig { dir, info, second }
}

impl Rig {
    /// TPC-B through both processes for `RUN`, the server of `data_dir` killed with
    /// `kill -9` at `KILL_AT`; what the clients saw, with the window printed.
    async fn load_killing(&self, data_dir: &std::path::Path, what: &str, id_base: i64) -> Outcome {
        let pid = postmaster_pid(data_dir);
        let out = Arc::new(Mutex::new(Outcome::default()));
        let start = Instant::now();
        let until = start + RUN;
        let mut tasks = Vec::new();
        for id in 0..CLIENTS {
            // Half of the clients through each pgshard process.
            let port = if id % 2 == 0 {
                self.info.port
            } else {
                self.second.port
            };
            tasks.push(tokio::spawn(client_loop(
                self.info.clone(),
                port,
                id_base + id as i64 + 1,
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
        eprintln!("killed the primary of {what} (pid {pid})");
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
            "no commit after the kill of {what}; retried errors: {:?}",
            out.retried
        );
        // The unavailability window: the longest gap between acknowledged commits that
        // spans the kill (from the last commit before it to the first after it, at
        // least).
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
            "failover of {what}: {} commits ({} after the kill), first commit {} ms after \
             the kill, longest gap without a commit {} ms; retried errors (first ones): {:?}",
            times.len(),
            after_kill,
            (*first_after - killed_at).as_millis(),
            window.as_millis(),
            out.retried
        );
        eprintln!(
            "BENCHMARKS: failover of {what} under TPC-B ({CLIENTS} clients, 2 pgshard \
             processes, failover_after_ms 2000): first commit {} ms after kill -9, longest \
             gap without a commit {} ms",
            (*first_after - killed_at).as_millis(),
            window.as_millis()
        );
        assert!(
            window < Duration::from_secs(15),
            "unavailable for {window:?}"
        );
        out
    }

    /// `(pg_promote)` lines in both processes' logs.
    fn promotions(&self) -> usize {
        let logs = [
            self.dir.join("logs").join("pgshard.log"),
            self.second.log.clone(),
        ];
        logs.iter()
            .map(|l| {
                std::fs::read_to_string(l)
                    .unwrap_or_default()
                    .matches("(pg_promote)")
                    .count()
            })
            .sum()
    }

    /// No prepared transaction left on `primaries`; both processes agree, the TPC-B
    /// invariant holds exactly, every acknowledged commit is there, and writes through
    /// either process work.
    async fn assert_consistent(&self, primaries: &[u16], acknowledged: &HashSet<i64>) {
        let info = &self.info;
        let c = connect(info, info.port).await.expect("pgshard");
        let deadline = Instant::now() + Duration::from_secs(30);
        for &p in primaries {
            let direct = connect_direct(info, p).await;
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
        let via_second = connect(info, self.second.port)
            .await
            .expect("second pgshard");
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
        let missing: Vec<&i64> = acknowledged.difference(&present).collect();
        assert!(
            missing.is_empty(),
            "acknowledged commits missing: {missing:?}"
        );
        for client in [&c, &via_second] {
            client
                .batch_execute("UPDATE accounts SET abalance = abalance WHERE aid <= 20")
                .await
                .unwrap();
        }
    }

    /// `noderole:isactive` of each row of `pg_dist_node`, by port.
    async fn nodes(&self) -> String {
        let c = connect(&self.info, self.info.port).await.expect("pgshard");
        common::scalar(
            &c,
            "SELECT string_agg(format('%s:%s:%s:%s', groupid, nodeport, noderole, isactive), \
             ' ' ORDER BY nodeport) FROM pg_dist_node",
        )
        .await
    }
}

/// The old primary in `data_dir` was fenced: it cannot come back as a primary.
fn assert_fenced(data_dir: &std::path::Path) {
    assert!(
        data_dir.join("pgshard.fenced").exists(),
        "old primary {} not marked as fenced",
        data_dir.display()
    );
    assert!(
        data_dir.join("standby.signal").exists(),
        "old primary {} may start as a primary",
        data_dir.display()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_worker_primary_fails_over_under_tpcb() {
    let rig = rig("worker").await;
    let info = rig.info.clone();
    let old_port = info.worker_ports[0];
    let standby_port = info.standby_ports[1][0];
    let out = rig
        .load_killing(&rig.dir.join("worker1"), "worker 1", 0)
        .await;

    // The standby is the group's primary; the old one retired and fenced.
    let nodes = rig.nodes().await;
    assert!(
        nodes.contains(&format!(":{old_port}:secondary:f")),
        "{nodes}"
    );
    assert!(
        nodes.contains(&format!(":{standby_port}:primary:t")),
        "{nodes}"
    );
    assert_fenced(&rig.dir.join("worker1"));
    // One promotion, by one of the two processes.
    assert_eq!(rig.promotions(), 1, "pg_promote calls");
    // Prepared transactions left by the failed primary are resolved on the new one.
    rig.assert_consistent(
        &[info.coordinator_port, standby_port, info.worker_ports[1]],
        &out.acknowledged,
    )
    .await;
    let counted = common::scalar(
        &connect_direct(&info, standby_port).await,
        "SELECT pg_is_in_recovery()::text",
    )
    .await;
    assert_eq!(counted, "false", "the standby was not promoted");
}

/// The worker-then-coordinator sequence of issue 21: worker 1's primary killed under
/// TPC-B, then the coordinator node's. The coordinator node's standby is listed in
/// pgshard.toml (`coordinator_standbys`, by `cluster up`); both processes must follow
/// it, with one `pg_promote` between them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_then_the_coordinator_node_fail_over_under_tpcb() {
    let rig = rig("sequence").await;
    let info = rig.info.clone();
    let worker_standby = info.standby_ports[1][0];
    let coordinator_standby = info.standby_ports[0][0];
    let cfg = pgshard::config::Config::load(&rig.dir.join("pgshard.toml")).unwrap();
    assert_eq!(
        cfg.coordinator_standbys
            .iter()
            .map(|s| s.port)
            .collect::<Vec<_>>(),
        vec![coordinator_standby],
        "cluster up lists the coordinator node's standby"
    );

    let mut acknowledged = rig
        .load_killing(&rig.dir.join("worker1"), "worker 1", 0)
        .await
        .acknowledged;
    assert_eq!(
        rig.promotions(),
        1,
        "pg_promote calls after the worker's failover"
    );
    let before = rig.nodes().await;

    let out = rig
        .load_killing(&rig.dir.join("coordinator"), "the coordinator node", 100)
        .await;
    acknowledged.extend(out.acknowledged);
    assert_eq!(
        rig.promotions(),
        2,
        "pg_promote calls after the coordinator's failover"
    );
    assert_fenced(&rig.dir.join("coordinator"));
    let promoted = common::scalar(
        &connect_direct(&info, coordinator_standby).await,
        "SELECT pg_is_in_recovery()::text",
    )
    .await;
    assert_eq!(
        promoted, "false",
        "the coordinator node's standby was not promoted"
    );
    // pg_dist_node on the new coordinator node: the workers' rows as before; the
    // promoted server is no standby of group 0 any more.
    let after = rig.nodes().await;
    let workers = |s: &str| -> Vec<String> {
        s.split(' ')
            .filter(|r| !r.starts_with("0:"))
            .map(str::to_string)
            .collect()
    };
    assert_eq!(workers(&after), workers(&before), "workers' rows changed");
    assert!(
        !after.contains(&format!("0:{coordinator_standby}:")),
        "{after}"
    );
    rig.assert_consistent(
        &[coordinator_standby, worker_standby, info.worker_ports[1]],
        &acknowledged,
    )
    .await;
    // Both processes use the new coordinator node: a table of the coordinator node
    // made through one is read through the other and is on the promoted server.
    let c = connect(&info, info.port).await.expect("pgshard");
    c.batch_execute("CREATE TABLE after_failover (x int); INSERT INTO after_failover VALUES (7)")
        .await
        .unwrap();
    let via_second = connect(&info, rig.second.port).await.expect("second");
    assert_eq!(
        common::scalar(&via_second, "SELECT sum(x) FROM after_failover").await,
        "7"
    );
    assert_eq!(
        common::scalar(
            &connect_direct(&info, coordinator_standby).await,
            "SELECT sum(x) FROM after_failover"
        )
        .await,
        "7"
    );
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
